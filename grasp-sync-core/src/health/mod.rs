//! Relay health: the one place that decides when a relay may be (re)connected.
//!
//! Each relay has a [`RelayHealth`] state machine, kept in the engine's
//! session of the relay. It holds the relay's failure history (the current
//! failure run, the run a connection interrupted, the rate-limit cooldown)
//! and the stability rule; whether the relay is connected is the session's
//! (its link), told to the queries that depend on it. It is pure: every
//! input and query takes `now`, nothing here reads a clock, and the
//! [`HealthState`] is derived from the recorded facts and `now` on every
//! query instead of being advanced by timers. [`Retry`] counts failures of work that is not a connection (a
//! relay's batches, the store's refusals, the own relay's reconnects).
//!
//! # States (spec "Health Tracking")
//!
//! | state | meaning |
//! | --- | --- |
//! | [`HealthState::Healthy`] | connected, and either never failed or stable for the stability period (5 min) since the connection that ended a failure run |
//! | [`HealthState::Disconnected`] | not connected, no failure in the current run |
//! | [`HealthState::Degraded`] | failing to connect (not yet dead), or connected after failures but not yet stable |
//! | [`HealthState::Dead`] | failing continuously for `dead_after` (24 h) since the first failure of the run |
//! | [`HealthState::RateLimited`] | a rate-limit signal within the cooldown (65 s); afterwards the state is whatever it would otherwise be |
//!
//! # Retry schedule
//!
//! After `n` consecutive failures the next attempt is allowed
//! `config.backoff.delay(n)` after the last failure (5 s, 10 s, 20 s, … capped
//! at 1 h). If the relay would be dead by the time that delay elapses, the
//! delay becomes `dead_retry_interval` (24 h) instead, so a dead relay is
//! tried once per day after its last failure. No attempt is allowed while an
//! attempt is in flight, while connected, or while rate-limited.
//!
//! A connection drop is not a failure when the connection had lasted for the
//! stability period; a drop before that (flapping) continues the failure run
//! that the connection had interrupted, so the backoff keeps growing.
//!
//! # How the engine drives it
//!
//! Each relay's session asks `should_attempt_connection` while its link is
//! idle before it connects, then reports `on_connect_failed`, `on_connected`
//! or `on_disconnected` (with when the connection opened), and wakes at
//! `poll_timeout` (the unit test
//! `the_engine_s_sequence_backs_off_after_a_failed_connect` walks it).
//!
//! `RelayHealth::poll_timeout` only says when the answer to a query
//! changes; there is nothing to "fire", so waking early or twice is harmless.
//! The connection timeout itself is the session's link's (its connecting
//! deadline): an attempt that never completes is reported as
//! `RelayHealth::on_connect_failed`.

use std::fmt;
use std::time::Duration;

pub use backoff::ExponentialBackoff;
pub use retry::Retry;

pub mod backoff;
mod counts;
mod relay;
mod retry;

pub use counts::HealthCounts;
pub use relay::RelayHealth;

/// Delay after the first failure (spec: `sync_base_backoff_secs` = 5 s).
pub(crate) const DEFAULT_BASE_BACKOFF: Duration = Duration::from_secs(5);
/// Largest backoff between attempts (spec: `sync_max_backoff_secs` = 1 h).
pub(crate) const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60 * 60);
/// Continuous failures for this long make a relay dead (24 h).
pub(crate) const DEFAULT_DEAD_AFTER: Duration = Duration::from_secs(24 * 60 * 60);
/// A dead relay is retried this long after its last failure (24 h).
pub(crate) const DEFAULT_DEAD_RETRY_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a rate-limit signal holds (60 s typical limit + 5 s buffer).
pub(crate) const DEFAULT_RATE_LIMIT_COOLDOWN: Duration = Duration::from_secs(65);
/// How long a connection must last before it counts as stable (5 min).
pub(crate) const DEFAULT_STABILITY_PERIOD: Duration = Duration::from_secs(5 * 60);

/// The health of one relay, as reported by the `grasp_sync_relay_status` gauge.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Connected and proven stable (or never failed).
    Healthy,
    /// Not connected, with no failure in the current run.
    Disconnected,
    /// Failing to connect, or connected after failures but not yet stable.
    Degraded,
    /// Failing continuously for at least `dead_after`; retried once per
    /// `dead_retry_interval`.
    Dead,
    /// The relay signalled rate limiting; no attempts until the cooldown ends.
    RateLimited,
}

impl HealthState {
    /// Every state, in gauge-value order.
    pub const ALL: [HealthState; 5] = [
        HealthState::Healthy,
        HealthState::Disconnected,
        HealthState::Degraded,
        HealthState::Dead,
        HealthState::RateLimited,
    ];

    /// The value of the `grasp_sync_relay_status` gauge: 1 healthy,
    /// 2 disconnected, 3 degraded, 4 dead, 5 rate_limited.
    pub fn metric_value(self) -> i64 {
        match self {
            HealthState::Healthy => 1,
            HealthState::Disconnected => 2,
            HealthState::Degraded => 3,
            HealthState::Dead => 4,
            HealthState::RateLimited => 5,
        }
    }

    /// A lowercase name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Disconnected => "disconnected",
            HealthState::Degraded => "degraded",
            HealthState::Dead => "dead",
            HealthState::RateLimited => "rate_limited",
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The timing constants of relay health.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthConfig {
    /// Delay between attempts after consecutive failures (5 s base, 1 h cap).
    pub backoff: ExponentialBackoff,
    /// Continuous failures for this long make a relay dead (24 h).
    pub dead_after: Duration,
    /// A dead relay is retried this long after its last failure (24 h).
    pub dead_retry_interval: Duration,
    /// How long a rate-limit signal blocks attempts (65 s).
    pub rate_limit_cooldown: Duration,
    /// How long a connection must last to count as stable (5 min).
    pub stability_period: Duration,
    /// Delay before a relay's failed historic work (a CLOSED batch, a
    /// timeout, a refused live subscription) is tried again (30 s, doubling
    /// to 1 h).
    pub work_backoff: ExponentialBackoff,
    /// Delay before events the store refused for now are offered again
    /// (1 s, doubling to 60 s).
    pub store_backoff: ExponentialBackoff,
    /// Delay before the self-subscriber reconnects to the own relay (2 s,
    /// doubling to 32 s). Its connect attempt is given up like any relay's,
    /// after the base of [`HealthConfig::backoff`] (5 s by default).
    pub own_relay_backoff: ExponentialBackoff,
}

impl HealthConfig {
    /// How long a connection attempt may take before the driver reports it
    /// failed: the base backoff, so that retry timing works (spec).
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.backoff.base
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            backoff: ExponentialBackoff::new(DEFAULT_BASE_BACKOFF, DEFAULT_MAX_BACKOFF),
            dead_after: DEFAULT_DEAD_AFTER,
            dead_retry_interval: DEFAULT_DEAD_RETRY_INTERVAL,
            rate_limit_cooldown: DEFAULT_RATE_LIMIT_COOLDOWN,
            stability_period: DEFAULT_STABILITY_PERIOD,
            work_backoff: ExponentialBackoff::new(
                Duration::from_secs(30),
                Duration::from_secs(3600),
            ),
            store_backoff: ExponentialBackoff::new(Duration::from_secs(1), Duration::from_secs(60)),
            own_relay_backoff: ExponentialBackoff::new(
                Duration::from_secs(2),
                Duration::from_secs(32),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
