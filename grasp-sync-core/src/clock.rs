//! Time as data: the monotonic [`Instant`] the core's state machines take as
//! `now`, and the [`Clock`] trait a driver reads once per input.
//!
//! The core never reads a clock by itself. Whoever drives a state machine (the
//! tokio adapter, a test, a simulation) reads its [`Clock`] once per input and
//! passes the value in. This is the only module of the crate that touches the
//! operating system's clocks, and only inside [`SystemClock`].

use std::fmt;
use std::ops::{Add, AddAssign};
use std::sync::Mutex;
use std::time::Duration;

use nostr::prelude::Timestamp;

/// A point on the driver's monotonic timeline.
///
/// It is a [`Duration`] since an arbitrary origin chosen by the driver (the
/// start of the process for [`SystemClock`], zero for [`ManualClock`]). All
/// arithmetic saturates: time that seems to go backwards yields zero durations,
/// never a panic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(Duration);

impl Instant {
    /// The origin of the timeline.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `since_origin` after the origin.
    pub const fn from_duration(since_origin: Duration) -> Self {
        Instant(since_origin)
    }

    /// The instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(Duration::from_millis(millis))
    }

    /// The instant `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Self {
        Instant(Duration::from_secs(secs))
    }

    /// How far this instant lies from the origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// `self + duration`, saturating at the end of the timeline.
    pub fn saturating_add(self, duration: Duration) -> Self {
        Instant(self.0.saturating_add(duration))
    }

    /// `self - duration`, or `None` if that would fall before the origin.
    pub fn checked_sub(self, duration: Duration) -> Option<Self> {
        self.0.checked_sub(duration).map(Instant)
    }

    /// The time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturating addition; see [`Instant::saturating_add`].
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{:.3}s", self.0.as_secs_f64())
    }
}

/// Both clocks read at one moment: what every engine input takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The monotonic clock, for deadlines and backoff.
    pub instant: Instant,
    /// The wall clock, for the `since`/`until` of filters.
    pub unix: Timestamp,
}

impl Now {
    /// Both values at once.
    pub fn new(instant: Instant, unix: Timestamp) -> Self {
        Now { instant, unix }
    }
}

/// The source of time for whoever drives the core.
///
/// Read it once per input and hand the values to the state machines: the
/// monotonic [`Instant`] for deadlines and backoff, the wall-clock
/// [`Timestamp`] for the `since`/`until` fields of Nostr filters.
pub trait Clock: Send + Sync {
    /// The current point on the monotonic timeline.
    fn now(&self) -> Instant;

    /// The current wall-clock time as a unix timestamp (seconds).
    fn unix_time(&self) -> Timestamp;

    /// Both clocks, read once.
    fn read(&self) -> Now {
        Now {
            instant: self.now(),
            unix: self.unix_time(),
        }
    }
}

/// The operating system's clocks: monotonic since construction, and the
/// system's wall clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    /// A clock whose origin is the moment of this call.
    pub fn new() -> Self {
        SystemClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant(std::time::Instant::now().saturating_duration_since(self.origin))
    }

    fn unix_time(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to, for tests and simulations.
///
/// [`ManualClock::advance`] moves both the monotonic and the wall clock;
/// [`ManualClock::set`] jumps the monotonic clock (forwards or backwards) and
/// moves the wall clock by the same amount.
#[derive(Debug)]
pub struct ManualClock {
    state: Mutex<ManualState>,
}

#[derive(Debug, Clone, Copy)]
struct ManualState {
    now: Instant,
    unix_at_origin: u64,
}

impl ManualClock {
    /// A clock at [`Instant::ZERO`] whose wall clock reads `unix_time` there.
    pub fn new(unix_time: Timestamp) -> Self {
        ManualClock {
            state: Mutex::new(ManualState {
                now: Instant::ZERO,
                unix_at_origin: unix_time.as_secs(),
            }),
        }
    }

    /// Moves both clocks forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut state = self.lock();
        state.now = state.now.saturating_add(by);
    }

    /// Sets the monotonic clock to `to` (which may be earlier than now); the
    /// wall clock follows.
    pub fn set(&self, to: Instant) {
        self.lock().now = to;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ManualState> {
        // A poisoned lock only means a test panicked while holding it; the
        // state (two integers) is still consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.lock().now
    }

    fn unix_time(&self) -> Timestamp {
        let state = *self.lock();
        Timestamp::from_secs(
            state
                .unix_at_origin
                .saturating_add(state.now.since_origin().as_secs()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_arithmetic_saturates() {
        let t = Instant::from_secs(10);
        assert_eq!(t + Duration::from_secs(5), Instant::from_secs(15));
        assert_eq!(
            Instant::from_secs(3).saturating_duration_since(t),
            Duration::ZERO
        );
        assert_eq!(t.checked_sub(Duration::from_secs(11)), None);
        assert_eq!(
            Instant::from_duration(Duration::MAX) + Duration::from_secs(1),
            Instant::from_duration(Duration::MAX)
        );
    }

    #[test]
    fn manual_clock_moves_both_clocks_together() {
        let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
        assert_eq!(clock.now(), Instant::ZERO);
        clock.advance(Duration::from_secs(90));
        assert_eq!(clock.now(), Instant::from_secs(90));
        assert_eq!(clock.unix_time(), Timestamp::from_secs(1_700_000_090));
        clock.set(Instant::from_secs(30));
        assert_eq!(clock.unix_time(), Timestamp::from_secs(1_700_000_030));
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        assert!(clock.unix_time().as_secs() > 1_600_000_000);
    }
}
