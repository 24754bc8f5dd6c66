//! How many connections [`RelayStore`](super::RelayStore) publishes on: as
//! many as make the relay take events faster, no more.
//!
//! A relay handles one connection's `EVENT`s one after the other, so the
//! connections are what lets it work on several at once (nostr-lmdb, for
//! one, commits the saves in progress together: the throughput benchmark
//! measured nostr-relay-builder over LMDB at 2 446 events/s on one
//! connection and 5 410 on eight; nostr-rs-relay took ~1 200 on any
//! number). The store starts on [`START_CONNECTIONS`] and, once a second
//! while every connection has events waiting, adds one if the last one added
//! made the relay answer faster, and takes the last one back when it did
//! not. A `rate-limited:` answer or a connection the relay will not open
//! ends the growth for [`SETTLE`] and takes an added connection back: the
//! relay's per-connection limits are its limits, not an invitation to open
//! more.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

use tokio::time::Instant;

/// Connections the store starts on.
pub(super) const START_CONNECTIONS: usize = 2;
/// How often the answer rate is measured (and the count changed).
const PERIOD: Duration = Duration::from_secs(1);
/// How long growth stops after a rate limit, a refused connection, or a
/// connection that did not help.
const SETTLE: Duration = Duration::from_secs(60);
/// How much faster the relay must answer for the added connection to stay.
const GAIN: f64 = 1.05;
/// Events waiting per connection, at the least, for the store to count as
/// busy (the relay, not the sync, is then what bounds the pace).
const BUSY_PER_CONNECTION: usize = 4;

/// The shared pace of one store: its connection count and what it is
/// decided from.
#[derive(Debug)]
pub(super) struct Pace {
    /// Connections in use (events are routed over the first `active`).
    active: AtomicUsize,
    /// Connections the store has (the most `active` can be).
    max: usize,
    /// Events handed to the store and not answered yet.
    waiting: AtomicUsize,
    /// Answers that took an event (stored or duplicate), ever.
    taken: AtomicU64,
    /// `rate-limited:` answers and refused connections, ever.
    pushed_back: AtomicU64,
    control: Mutex<Control>,
}

/// An event handed to the store and not answered yet; dropped when its
/// answer came or its caller gave up.
#[derive(Debug)]
pub(super) struct Waiting<'a>(&'a Pace);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the last decisions left behind.
#[derive(Debug)]
struct Control {
    period_start: Option<Instant>,
    taken_at_start: u64,
    pushed_back_at_start: u64,
    /// The fewest events waiting seen during the period.
    least_waiting: usize,
    /// The answer rate before the last connection was added, if one was
    /// added at the end of the last period.
    rate_before_growth: Option<f64>,
    /// No growth before this.
    settled_until: Option<Instant>,
}

/// A period's measurements, for [`decide`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Period {
    /// Connections in use during the period.
    pub(super) active: usize,
    /// Events the relay took per second.
    pub(super) rate: f64,
    /// Every connection had events waiting all period long.
    pub(super) busy: bool,
    /// The relay answered `rate-limited:` or refused a connection.
    pub(super) pushed_back: bool,
    /// The rate before the connection added at the end of the last period.
    pub(super) rate_before_growth: Option<f64>,
    /// Growth is settled (stopped for a while).
    pub(super) settled: bool,
}

/// What to do with the connection count after a period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Add a connection.
    Grow,
    /// Take the last connection back and stop growing for a while.
    ShrinkAndSettle,
    /// Stop growing for a while, keep the count.
    Settle,
    /// Nothing to change.
    Keep,
}

/// The connection count's next step after `period`, between `floor` and
/// `max` connections.
pub(super) fn decide(period: Period, floor: usize, max: usize) -> Step {
    let shrink = if period.active > floor {
        Step::ShrinkAndSettle
    } else {
        Step::Settle
    };
    if period.pushed_back {
        return shrink;
    }
    if let Some(before) = period.rate_before_growth {
        if period.rate < before * GAIN {
            return shrink;
        }
    }
    if period.busy && !period.settled && period.active < max {
        return Step::Grow;
    }
    Step::Keep
}

impl Pace {
    /// A pace over `max` connections, starting on [`START_CONNECTIONS`].
    pub(super) fn new(max: usize) -> Pace {
        let max = max.max(1);
        Pace {
            active: AtomicUsize::new(START_CONNECTIONS.min(max)),
            max,
            waiting: AtomicUsize::new(0),
            taken: AtomicU64::new(0),
            pushed_back: AtomicU64::new(0),
            control: Mutex::new(Control {
                period_start: None,
                taken_at_start: 0,
                pushed_back_at_start: 0,
                least_waiting: usize::MAX,
                rate_before_growth: None,
                settled_until: None,
            }),
        }
    }

    /// The fewest connections it goes back to: those it started on.
    fn floor(&self) -> usize {
        START_CONNECTIONS.min(self.max)
    }

    /// Connections in use now.
    pub(super) fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// The connection an event goes to: picked by its id among those in
    /// use, so an event asked twice while in flight is sent once (unless the
    /// count changed in between: the relay then answers `duplicate:`).
    pub(super) fn lane(&self, id_byte: u8) -> usize {
        usize::from(id_byte) % self.active().max(1)
    }

    /// An event was handed to the store: it waits until the guard is
    /// dropped. The period may end here.
    pub(super) fn on_ingest(&self, now: Instant) -> Waiting<'_> {
        let waiting = self.waiting.fetch_add(1, Ordering::Relaxed) + 1;
        self.sample(now, waiting);
        Waiting(self)
    }

    /// Notes `waiting` and ends the period if it is over.
    fn sample(&self, now: Instant, waiting: usize) {
        let mut control = match self.control.try_lock() {
            Ok(control) => control,
            // A panic elsewhere leaves the control whole (every field is
            // written at once).
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // Another caller is deciding: this sample is not needed.
            Err(TryLockError::WouldBlock) => return,
        };
        control.least_waiting = control.least_waiting.min(waiting);
        let Some(start) = control.period_start else {
            control.period_start = Some(now);
            control.taken_at_start = self.taken.load(Ordering::Relaxed);
            control.pushed_back_at_start = self.pushed_back.load(Ordering::Relaxed);
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= PERIOD {
            self.end_period(&mut control, now, elapsed);
        }
    }

    /// The relay took an event (stored, or a duplicate).
    pub(super) fn on_taken(&self) {
        self.taken.fetch_add(1, Ordering::Relaxed);
    }

    /// The relay answered `rate-limited:` or would not open a connection.
    pub(super) fn on_pushed_back(&self) {
        self.pushed_back.fetch_add(1, Ordering::Relaxed);
    }

    /// Measures the period that just ended and applies [`decide`]'s step.
    fn end_period(&self, control: &mut Control, now: Instant, elapsed: Duration) {
        let active = self.active();
        let taken = self.taken.load(Ordering::Relaxed);
        let pushed_back = self.pushed_back.load(Ordering::Relaxed);
        let period = Period {
            active,
            rate: (taken - control.taken_at_start) as f64 / elapsed.as_secs_f64(),
            busy: control.least_waiting >= BUSY_PER_CONNECTION * active,
            pushed_back: pushed_back > control.pushed_back_at_start,
            rate_before_growth: control.rate_before_growth.take(),
            settled: control.settled_until.is_some_and(|until| now < until),
        };
        match decide(period, self.floor(), self.max) {
            Step::Grow => {
                self.active.store(active + 1, Ordering::Relaxed);
                control.rate_before_growth = Some(period.rate);
                tracing::debug!(
                    connections = active + 1,
                    rate = period.rate,
                    "store: one more connection"
                );
            }
            Step::ShrinkAndSettle => {
                self.active.store((active - 1).max(1), Ordering::Relaxed);
                control.settled_until = Some(now + SETTLE);
                tracing::debug!(
                    connections = (active - 1).max(1),
                    rate = period.rate,
                    "store: one connection fewer"
                );
            }
            Step::Settle => control.settled_until = Some(now + SETTLE),
            Step::Keep => {}
        }
        control.period_start = Some(now);
        control.taken_at_start = taken;
        control.pushed_back_at_start = pushed_back;
        control.least_waiting = usize::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period(active: usize, rate: f64) -> Period {
        Period {
            active,
            rate,
            busy: true,
            pushed_back: false,
            rate_before_growth: None,
            settled: false,
        }
    }

    #[test]
    fn a_busy_store_grows_until_the_most_connections() {
        assert_eq!(decide(period(2, 1000.0), 2, 8), Step::Grow);
        assert_eq!(decide(period(8, 1000.0), 2, 8), Step::Keep);
    }

    #[test]
    fn a_store_that_keeps_up_keeps_its_connections() {
        let idle = Period {
            busy: false,
            ..period(2, 100.0)
        };
        assert_eq!(decide(idle, 2, 8), Step::Keep);
    }

    #[test]
    fn a_connection_that_did_not_help_is_taken_back() {
        let helped = Period {
            rate_before_growth: Some(1000.0),
            ..period(3, 1200.0)
        };
        assert_eq!(decide(helped, 2, 8), Step::Grow);
        let did_not = Period {
            rate_before_growth: Some(1000.0),
            ..period(3, 1020.0)
        };
        assert_eq!(decide(did_not, 2, 8), Step::ShrinkAndSettle);
    }

    #[test]
    fn a_rate_limit_takes_a_connection_back_and_stops_growth() {
        let limited = Period {
            pushed_back: true,
            ..period(3, 1000.0)
        };
        assert_eq!(decide(limited, 2, 8), Step::ShrinkAndSettle);
        let at_the_start = Period {
            pushed_back: true,
            ..period(2, 1000.0)
        };
        assert_eq!(decide(at_the_start, 2, 8), Step::Settle);
        let settled = Period {
            settled: true,
            ..period(2, 1000.0)
        };
        assert_eq!(decide(settled, 2, 8), Step::Keep);
    }

    /// A second at `at` with 500 events taken and as many handed over.
    fn busy_second<'a>(pace: &'a Pace, waiting: &mut Vec<Waiting<'a>>, at: Instant) {
        for _ in 0..500 {
            waiting.pop();
            pace.on_taken();
            waiting.push(pace.on_ingest(at));
        }
    }

    #[test]
    fn a_busy_period_adds_a_connection_and_a_useless_one_is_taken_back() {
        let pace = Pace::new(8);
        assert_eq!(pace.active(), START_CONNECTIONS);
        // The first period: 100 events come to wait.
        let start = Instant::now();
        let mut waiting: Vec<Waiting<'_>> = (0..100).map(|_| pace.on_ingest(start)).collect();
        drop(pace.on_ingest(start + PERIOD));
        assert_eq!(pace.active(), START_CONNECTIONS, "not busy all period long");
        // A second with never fewer than 100 waiting, 500 taken.
        busy_second(&pace, &mut waiting, start + PERIOD);
        drop(pace.on_ingest(start + 2 * PERIOD));
        assert_eq!(pace.active(), START_CONNECTIONS + 1, "busy: one more");
        // The next second no faster: the connection goes back.
        busy_second(&pace, &mut waiting, start + 2 * PERIOD);
        drop(pace.on_ingest(start + 3 * PERIOD));
        assert_eq!(pace.active(), START_CONNECTIONS, "it did not help");
        // Settled: busy seconds do not grow it for a while.
        for n in 3..10 {
            busy_second(&pace, &mut waiting, start + n * PERIOD);
            drop(pace.on_ingest(start + (n + 1) * PERIOD));
        }
        assert_eq!(pace.active(), START_CONNECTIONS);
        drop(waiting);
        assert_eq!(
            pace.waiting.load(Ordering::Relaxed),
            0,
            "every guard gave back"
        );
    }

    #[test]
    fn a_rate_limited_answer_ends_the_growth() {
        let pace = Pace::new(8);
        let start = Instant::now();
        let _waiting: Vec<Waiting<'_>> = (0..100).map(|_| pace.on_ingest(start)).collect();
        drop(pace.on_ingest(start + PERIOD));
        for _ in 0..500 {
            pace.on_taken();
        }
        drop(pace.on_ingest(start + 2 * PERIOD));
        assert_eq!(pace.active(), START_CONNECTIONS + 1, "busy: one more");
        for _ in 0..1_000 {
            pace.on_taken();
        }
        pace.on_pushed_back();
        drop(pace.on_ingest(start + 3 * PERIOD));
        assert_eq!(pace.active(), START_CONNECTIONS, "the relay pushed back");
        for _ in 0..2_000 {
            pace.on_taken();
        }
        drop(pace.on_ingest(start + 4 * PERIOD));
        assert_eq!(pace.active(), START_CONNECTIONS, "settled, however fast");
    }
}
