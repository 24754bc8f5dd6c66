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

/// The health state machine of one relay: its failure history, its
/// rate-limit cooldown and the stability rule. Whether the relay is connected is not kept here but in
/// the relay's session (its link); the inputs and queries that depend on it
/// are told by the caller.
///
/// Feed it what happened (`on_*`, each with the `now` at which it happened)
/// and ask it what to do (`RelayHealth::should_attempt_connection` while
/// the relay is idle, `RelayHealth::poll_timeout`). A new value is a
/// never-failed relay that may be connected at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayHealth {
    /// The current failure run; always `None` while connected.
    pub(super) failures: Option<FailureRun>,
    /// The failure run the current connection interrupted, until the
    /// connection proves stable or ends; `None` while not connected.
    recovering: Option<FailureRun>,
    /// End of the latest rate-limit cooldown (may lie in the past).
    rate_limited_until: Option<Instant>,
}

impl RelayHealth {
    /// The relay connected (told once per connection). The failure count
    /// resets; if failures preceded it, the relay stays
    /// [`HealthState::Degraded`] until the connection has lasted the
    /// stability period.
    pub(crate) fn on_connected(&mut self) {
        self.recovering = self.failures.take();
    }

    /// A connection attempt failed (or the connection failed in any other
    /// way): one more failure in the current run — or in the run the
    /// connection had interrupted — which starts now if there was none.
    pub(crate) fn on_connect_failed(&mut self, now: Instant) {
        let previous = self.failures.take().or(self.recovering.take());
        self.failures = Some(FailureRun::record(previous, now));
    }

    /// The connection made at `connected_since` dropped at `now`. After a
    /// stable connection (at least `stability_period` long) this is not a
    /// failure and a reconnect is allowed at once; an earlier drop
    /// (flapping) counts as a failure that continues the interrupted run, so
    /// the backoff grows.
    pub(crate) fn on_disconnected(
        &mut self,
        connected_since: Instant,
        now: Instant,
        config: &HealthConfig,
    ) {
        let recovering = self.recovering.take();
        self.failures = if is_stable(connected_since, now, config) {
            None
        } else {
            Some(FailureRun::record(recovering, now))
        };
    }

    /// The relay signalled rate limiting: [`HealthState::RateLimited`] and no
    /// attempts until `now + rate_limit_cooldown`. A later signal moves the
    /// end of the cooldown to its own `now + rate_limit_cooldown`.
    pub(crate) fn on_rate_limited(&mut self, now: Instant, config: &HealthConfig) {
        self.rate_limited_until = Some(now.saturating_add(config.rate_limit_cooldown));
    }

    /// The health of the relay at `now`, connected since `connected_since`
    /// (`None` while not connected).
    pub(crate) fn state(
        &self,
        now: Instant,
        connected_since: Option<Instant>,
        config: &HealthConfig,
    ) -> HealthState {
        if self.is_rate_limited(now) {
            HealthState::RateLimited
        } else {
            self.state_ignoring_rate_limit(now, connected_since, config)
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

    /// Whether a rate-limit cooldown is active at `now`.
    pub(crate) fn is_rate_limited(&self, now: Instant) -> bool {
        self.rate_limited_until.is_some_and(|until| now < until)
    }

    /// The earliest instant at which a (re)connect of an idle relay may be
    /// tried: the end of the backoff after the last failure and of any
    /// rate-limit cooldown ([`Instant::ZERO`] if neither applies).
    pub(crate) fn next_attempt_at(&self, config: &HealthConfig) -> Instant {
        let backoff_ends = self
            .failures
            .map_or(Instant::ZERO, |run| run.retry_at(config));
        let cooldown_ends = self.rate_limited_until.unwrap_or(Instant::ZERO);
        backoff_ends.max(cooldown_ends)
    }

    /// Whether a connection attempt of an idle relay (not connected, no
    /// attempt in flight: the caller asks only then) is allowed at `now`:
    /// not rate-limited, backoff elapsed.
    pub(crate) fn should_attempt_connection(&self, now: Instant, config: &HealthConfig) -> bool {
        !self.is_rate_limited(now) && self.next_attempt_at(config) <= now
    }

    /// The next instant after `now` at which the state or the permission to
    /// connect changes, for a relay connected since `connected_since`
    /// (`None` while not connected): a retry becomes allowed, a rate limit
    /// ends, a recovering connection becomes stable, a failing relay becomes
    /// dead. `None` if nothing changes with time alone.
    pub(crate) fn poll_timeout(
        &self,
        now: Instant,
        connected_since: Option<Instant>,
        config: &HealthConfig,
    ) -> Option<Instant> {
        let retry = match connected_since {
            Some(_) => None,
            None => Some(self.next_attempt_at(config)),
        };
        [
            self.rate_limited_until,
            retry,
            connected_since.and_then(|since| self.becomes_stable_at(since, config)),
            self.becomes_dead_at(config),
        ]
        .into_iter()
        .flatten()
        .filter(|deadline| *deadline > now)
        .min()
    }

    fn state_ignoring_rate_limit(
        &self,
        now: Instant,
        connected_since: Option<Instant>,
        config: &HealthConfig,
    ) -> HealthState {
        match connected_since {
            Some(since) => {
                connected_state(self.recovering.is_some() && !is_stable(since, now, config))
            }
            None => self.unconnected_state(now, config),
        }
    }

    fn unconnected_state(&self, now: Instant, config: &HealthConfig) -> HealthState {
        match self.failures {
            None => HealthState::Disconnected,
            Some(run) if run.is_dead_at(now, config) => HealthState::Dead,
            Some(_) => HealthState::Degraded,
        }
    }

    /// When a connection made at `connected_since` that interrupted a
    /// failure run becomes stable.
    fn becomes_stable_at(
        &self,
        connected_since: Instant,
        config: &HealthConfig,
    ) -> Option<Instant> {
        self.recovering
            .map(|_| connected_since.saturating_add(config.stability_period))
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
