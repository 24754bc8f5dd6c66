//! The health state machine of one relay.

use std::time::Duration;

use super::{HealthConfig, HealthState};
use crate::clock::Instant;

/// An uninterrupted run of failures (a connection that was not stable does
/// not interrupt it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FailureRun {
    pub(super) count: u32,
    pub(super) first_at: Instant,
    pub(super) last_at: Instant,
}

impl FailureRun {
    fn start(now: Instant) -> Self {
        FailureRun {
            count: 1,
            first_at: now,
            last_at: now,
        }
    }

    /// `previous` with one more failure at `now`, or a new run.
    fn record(previous: Option<FailureRun>, now: Instant) -> Self {
        match previous {
            Some(run) => FailureRun {
                count: run.count.saturating_add(1),
                first_at: run.first_at,
                last_at: now,
            },
            None => FailureRun::start(now),
        }
    }

    /// When the run has lasted `dead_after`.
    fn dead_at(&self, config: &HealthConfig) -> Instant {
        self.first_at.saturating_add(config.dead_after)
    }

    fn is_dead_at(&self, at: Instant, config: &HealthConfig) -> bool {
        at >= self.dead_at(config)
    }

    /// The wait after the last failure: the backoff, or the dead retry
    /// interval if the relay will be dead when the backoff has elapsed. Never
    /// shorter than the backoff, so it grows with the failure count.
    fn retry_delay(&self, config: &HealthConfig) -> Duration {
        let backoff = config.backoff.delay(self.count);
        let backoff_ends = self.last_at.saturating_add(backoff);
        if self.is_dead_at(backoff_ends, config) {
            backoff.max(config.dead_retry_interval)
        } else {
            backoff
        }
    }

    fn retry_at(&self, config: &HealthConfig) -> Instant {
        self.last_at.saturating_add(self.retry_delay(config))
    }
}

/// Where the relay's connection stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Link {
    /// No connection and no attempt in flight.
    #[default]
    Idle,
    /// An attempt started at `since` is in flight.
    Connecting { since: Instant },
    /// Connected since `since`; `recovering` holds the failure run this
    /// connection interrupted, until the connection proves stable.
    Connected {
        since: Instant,
        recovering: Option<FailureRun>,
    },
}

/// The health state machine of one relay.
///
/// Feed it what happened (`on_*`, each with the `now` at which it happened)
/// and ask it what to do (`RelayHealth::should_attempt_connection`,
/// `RelayHealth::poll_timeout`). A new value is a never-connected,
/// never-failed relay that may be connected at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayHealth {
    link: Link,
    /// The current failure run; always `None` while connected.
    pub(super) failures: Option<FailureRun>,
    /// End of the latest rate-limit cooldown (may lie in the past).
    rate_limited_until: Option<Instant>,
}

impl RelayHealth {
    /// A connection attempt started: no further attempt is allowed until it
    /// succeeds or fails. Ignored while connected.
    pub(crate) fn on_connect_attempt(&mut self, now: Instant) {
        if !self.is_connected() {
            self.link = Link::Connecting { since: now };
        }
    }

    /// The relay connected. The failure count resets; if failures preceded
    /// it, the relay stays [`HealthState::Degraded`] until the connection has
    /// lasted the stability period. A repeated signal keeps the original
    /// connection time.
    pub(crate) fn on_connected(&mut self, now: Instant) {
        if self.is_connected() {
            return;
        }
        self.link = Link::Connected {
            since: now,
            recovering: self.failures.take(),
        };
    }

    /// A connection attempt failed (or the connection failed in any other
    /// way): one more failure in the current run, which starts now if there
    /// was none.
    pub(crate) fn on_connect_failed(&mut self, now: Instant) {
        let previous = self.failures.take().or(self.recovering_run());
        self.failures = Some(FailureRun::record(previous, now));
        self.link = Link::Idle;
    }

    /// The connection dropped. After a stable connection (at least
    /// `stability_period` long) this is not a failure and a reconnect is
    /// allowed at once; an earlier drop (flapping) counts as a failure that
    /// continues the interrupted run, so the backoff grows. A drop while an
    /// attempt is in flight is that attempt failing; a drop while idle is
    /// ignored.
    pub(crate) fn on_disconnected(&mut self, now: Instant, config: &HealthConfig) {
        match self.link {
            Link::Idle => {}
            Link::Connecting { .. } => self.on_connect_failed(now),
            Link::Connected { since, recovering } => {
                self.link = Link::Idle;
                self.failures = if is_stable(since, now, config) {
                    None
                } else {
                    Some(FailureRun::record(recovering, now))
                };
            }
        }
    }

    /// The relay signalled rate limiting: [`HealthState::RateLimited`] and no
    /// attempts until `now + rate_limit_cooldown`. A later signal moves the
    /// end of the cooldown to its own `now + rate_limit_cooldown`.
    pub(crate) fn on_rate_limited(&mut self, now: Instant, config: &HealthConfig) {
        self.rate_limited_until = Some(now.saturating_add(config.rate_limit_cooldown));
    }

    /// The health of the relay at `now`.
    pub(crate) fn state(&self, now: Instant, config: &HealthConfig) -> HealthState {
        if self.is_rate_limited(now) {
            HealthState::RateLimited
        } else {
            self.state_ignoring_rate_limit(now, config)
        }
    }

    /// Consecutive failures in the current run; zero while connected.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures.map_or(0, |run| run.count)
    }

    /// When the current failure run started, if the relay is failing.
    pub fn first_failure_at(&self) -> Option<Instant> {
        self.failures.map(|run| run.first_at)
    }

    /// When the latest failure of the current run happened.
    pub fn last_failure_at(&self) -> Option<Instant> {
        self.failures.map(|run| run.last_at)
    }

    /// Whether the relay is connected.
    pub(crate) fn is_connected(&self) -> bool {
        matches!(self.link, Link::Connected { .. })
    }

    /// Whether a connection attempt is in flight.
    pub fn is_connecting(&self) -> bool {
        matches!(self.link, Link::Connecting { .. })
    }

    /// Whether a rate-limit cooldown is active at `now`.
    pub(crate) fn is_rate_limited(&self, now: Instant) -> bool {
        self.rate_limited_until.is_some_and(|until| now < until)
    }

    /// The earliest instant at which a (re)connect may be tried: the end of
    /// the backoff after the last failure and of any rate-limit cooldown
    /// ([`Instant::ZERO`] if neither applies). `None` while connected or
    /// connecting.
    pub(crate) fn next_attempt_at(&self, config: &HealthConfig) -> Option<Instant> {
        if self.link != Link::Idle {
            return None;
        }
        let backoff_ends = self
            .failures
            .map_or(Instant::ZERO, |run| run.retry_at(config));
        let cooldown_ends = self.rate_limited_until.unwrap_or(Instant::ZERO);
        Some(backoff_ends.max(cooldown_ends))
    }

    /// Whether a connection attempt is allowed at `now`: not connected, not
    /// connecting, not rate-limited, backoff elapsed.
    pub(crate) fn should_attempt_connection(&self, now: Instant, config: &HealthConfig) -> bool {
        !self.is_rate_limited(now)
            && self
                .next_attempt_at(config)
                .is_some_and(|allowed_at| allowed_at <= now)
    }

    /// The next instant after `now` at which the state or the permission to
    /// connect changes: a retry becomes allowed, a rate limit ends, a
    /// recovering connection becomes stable, a failing relay becomes dead.
    /// `None` if nothing changes with time alone.
    pub(crate) fn poll_timeout(&self, now: Instant, config: &HealthConfig) -> Option<Instant> {
        [
            self.rate_limited_until,
            self.next_attempt_at(config),
            self.becomes_stable_at(config),
            self.becomes_dead_at(config),
        ]
        .into_iter()
        .flatten()
        .filter(|deadline| *deadline > now)
        .min()
    }

    fn state_ignoring_rate_limit(&self, now: Instant, config: &HealthConfig) -> HealthState {
        match self.link {
            Link::Connected { since, recovering } => {
                connected_state(recovering.is_some() && !is_stable(since, now, config))
            }
            Link::Idle | Link::Connecting { .. } => self.unconnected_state(now, config),
        }
    }

    fn unconnected_state(&self, now: Instant, config: &HealthConfig) -> HealthState {
        match self.failures {
            None => HealthState::Disconnected,
            Some(run) if run.is_dead_at(now, config) => HealthState::Dead,
            Some(_) => HealthState::Degraded,
        }
    }

    fn recovering_run(&self) -> Option<FailureRun> {
        match self.link {
            Link::Connected { recovering, .. } => recovering,
            Link::Idle | Link::Connecting { .. } => None,
        }
    }

    fn becomes_stable_at(&self, config: &HealthConfig) -> Option<Instant> {
        match self.link {
            Link::Connected {
                since,
                recovering: Some(_),
            } => Some(since.saturating_add(config.stability_period)),
            _ => None,
        }
    }

    fn becomes_dead_at(&self, config: &HealthConfig) -> Option<Instant> {
        self.failures.map(|run| run.dead_at(config))
    }
}

/// Whether a connection made at `since` has lasted the stability period.
fn is_stable(since: Instant, now: Instant, config: &HealthConfig) -> bool {
    now.saturating_duration_since(since) >= config.stability_period
}

fn connected_state(still_recovering: bool) -> HealthState {
    if still_recovering {
        HealthState::Degraded
    } else {
        HealthState::Healthy
    }
}
