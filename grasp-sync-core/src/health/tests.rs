//! Tests of relay health.

use std::time::Duration;

use super::relay::FailureRun;
use super::*;
use crate::clock::Instant;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

fn at(secs: u64) -> Instant {
    Instant::from_secs(secs)
}

fn config() -> HealthConfig {
    HealthConfig::default()
}

/// A relay's health driven the way its session drives it: the session's
/// link (idle, connecting, connected since) beside the health, which is
/// asked whether to connect only while idle and told when a dropped
/// connection opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Relay {
    health: RelayHealth,
    link: Link,
}

/// The session's link, as far as the health depends on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Link {
    #[default]
    Idle,
    Connecting,
    Connected {
        since: Instant,
    },
}

impl Relay {
    /// An attempt starts (ignored while connected).
    fn on_connect_attempt(&mut self, _now: Instant) {
        if !self.is_connected() {
            self.link = Link::Connecting;
        }
    }

    /// The connection opened (a repeated signal keeps the first).
    fn on_connected(&mut self, now: Instant) {
        if !self.is_connected() {
            self.link = Link::Connected { since: now };
            self.health.on_connected();
        }
    }

    fn on_connect_failed(&mut self, now: Instant) {
        self.link = Link::Idle;
        self.health.on_connect_failed(now);
    }

    /// A drop: of a connection, told with when it opened; of an attempt,
    /// its failure; while idle, nothing.
    fn on_disconnected(&mut self, now: Instant, config: &HealthConfig) {
        match self.link {
            Link::Idle => {}
            Link::Connecting => self.on_connect_failed(now),
            Link::Connected { since } => {
                self.link = Link::Idle;
                self.health.on_disconnected(since, now, config);
            }
        }
    }

    fn on_rate_limited(&mut self, now: Instant, config: &HealthConfig) {
        self.health.on_rate_limited(now, config);
    }

    fn connected_since(&self) -> Option<Instant> {
        match self.link {
            Link::Connected { since } => Some(since),
            Link::Idle | Link::Connecting => None,
        }
    }

    fn is_connected(&self) -> bool {
        self.connected_since().is_some()
    }

    fn is_connecting(&self) -> bool {
        self.link == Link::Connecting
    }

    fn state(&self, now: Instant, config: &HealthConfig) -> HealthState {
        self.health.state(now, self.connected_since(), config)
    }

    /// When the next attempt is allowed, while idle.
    fn next_attempt_at(&self, config: &HealthConfig) -> Option<Instant> {
        (self.link == Link::Idle).then(|| self.health.next_attempt_at(config))
    }

    fn should_attempt_connection(&self, now: Instant, config: &HealthConfig) -> bool {
        self.link == Link::Idle && self.health.should_attempt_connection(now, config)
    }

    fn poll_timeout(&self, now: Instant, config: &HealthConfig) -> Option<Instant> {
        self.health
            .poll_timeout(now, self.connected_since(), config)
    }

    fn is_rate_limited(&self, now: Instant) -> bool {
        self.health.is_rate_limited(now)
    }

    fn consecutive_failures(&self) -> u32 {
        self.health.consecutive_failures()
    }

    fn first_failure_at(&self) -> Option<Instant> {
        self.health.first_failure_at()
    }

    fn last_failure_at(&self) -> Option<Instant> {
        self.health.last_failure_at()
    }
}

/// Fails at `now`, then returns the delay until the next allowed attempt.
fn fail_and_delay(health: &mut Relay, now: Instant) -> u64 {
    health.on_connect_attempt(now);
    health.on_connect_failed(now);
    let next = health.next_attempt_at(&config()).unwrap();
    next.saturating_duration_since(now).as_secs()
}

/// Retries each time it is allowed and fails; returns the failure times.
fn fail_repeatedly_until(health: &mut Relay, start: Instant, end: Instant) -> Vec<u64> {
    let mut times = Vec::new();
    let mut now = start;
    while now < end {
        assert!(health.should_attempt_connection(now, &config()));
        health.on_connect_attempt(now);
        health.on_connect_failed(now);
        times.push(now.since_origin().as_secs());
        now = health.next_attempt_at(&config()).unwrap();
    }
    times
}

#[test]
fn default_config_holds_the_spec_constants() {
    let c = config();
    assert_eq!(c.backoff.base, Duration::from_secs(5));
    assert_eq!(c.backoff.max, Duration::from_secs(3600));
    assert_eq!(c.dead_after, Duration::from_secs(DAY));
    assert_eq!(c.dead_retry_interval, Duration::from_secs(DAY));
    assert_eq!(c.rate_limit_cooldown, Duration::from_secs(65));
    assert_eq!(c.stability_period, Duration::from_secs(300));
    assert_eq!(c.connect_timeout(), Duration::from_secs(5));
}

#[test]
fn connect_timeout_follows_the_base_backoff() {
    let c = HealthConfig {
        backoff: ExponentialBackoff::new(Duration::from_secs(9), Duration::from_secs(90)),
        ..config()
    };
    assert_eq!(c.connect_timeout(), Duration::from_secs(9));
}

#[test]
fn metric_values_and_names_match_the_gauge() {
    let values: Vec<i64> = HealthState::ALL.iter().map(|s| s.metric_value()).collect();
    assert_eq!(values, vec![1, 2, 3, 4, 5]);
    let names: Vec<&str> = HealthState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "healthy",
            "disconnected",
            "degraded",
            "dead",
            "rate_limited"
        ]
    );
    assert_eq!(HealthState::RateLimited.to_string(), "rate_limited");
}

#[test]
fn a_new_relay_is_disconnected_and_may_connect_at_once() {
    let health = Relay::default();
    assert_eq!(health.state(at(0), &config()), HealthState::Disconnected);
    assert_eq!(health.next_attempt_at(&config()), Some(Instant::ZERO));
    assert!(health.should_attempt_connection(at(0), &config()));
    assert_eq!(health.poll_timeout(at(0), &config()), None);
    assert_eq!(health.consecutive_failures(), 0);
}

#[test]
fn an_attempt_in_flight_blocks_further_attempts() {
    let mut health = Relay::default();
    health.on_connect_attempt(at(10));
    assert!(health.is_connecting());
    assert_eq!(health.next_attempt_at(&config()), None);
    assert!(!health.should_attempt_connection(at(10 + DAY), &config()));
    assert_eq!(health.state(at(11), &config()), HealthState::Disconnected);
}

#[test]
fn a_first_connection_is_healthy_at_once() {
    let mut health = Relay::default();
    health.on_connect_attempt(at(10));
    health.on_connected(at(11));
    assert!(health.is_connected());
    assert_eq!(health.state(at(11), &config()), HealthState::Healthy);
    assert_eq!(health.next_attempt_at(&config()), None);
    assert!(!health.should_attempt_connection(at(11), &config()));
    assert_eq!(health.poll_timeout(at(11), &config()), None);
}

#[test]
fn a_failure_degrades_and_starts_a_run() {
    let mut health = Relay::default();
    health.on_connect_attempt(at(100));
    health.on_connect_failed(at(101));
    assert!(!health.is_connecting());
    assert_eq!(health.state(at(101), &config()), HealthState::Degraded);
    assert_eq!(health.consecutive_failures(), 1);
    assert_eq!(health.first_failure_at(), Some(at(101)));
    assert_eq!(health.last_failure_at(), Some(at(101)));
    assert!(!health.should_attempt_connection(at(105), &config()));
    assert!(health.should_attempt_connection(at(106), &config()));
}

#[test]
fn the_run_keeps_its_first_failure() {
    let mut health = Relay::default();
    health.on_connect_failed(at(100));
    health.on_connect_failed(at(200));
    health.on_connect_failed(at(300));
    assert_eq!(health.consecutive_failures(), 3);
    assert_eq!(health.first_failure_at(), Some(at(100)));
    assert_eq!(health.last_failure_at(), Some(at(300)));
}

#[test]
fn backoff_doubles_from_five_seconds_to_one_hour() {
    let mut health = Relay::default();
    let mut now = at(1000);
    let mut delays = Vec::new();
    for _ in 0..13 {
        let delay = fail_and_delay(&mut health, now);
        delays.push(delay);
        now += Duration::from_secs(delay);
    }
    assert_eq!(
        delays,
        vec![5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]
    );
}

#[test]
fn a_retry_is_allowed_exactly_when_the_backoff_ends() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    health.on_connect_failed(at(50));
    assert_eq!(health.next_attempt_at(&config()), Some(at(60)));
    assert!(!health.should_attempt_connection(at(59), &config()));
    assert!(health.should_attempt_connection(at(60), &config()));
}

#[test]
fn continuous_failures_for_a_day_make_a_relay_dead() {
    let mut health = Relay::default();
    let times = fail_repeatedly_until(&mut health, at(0), at(DAY));
    assert_eq!(times.first(), Some(&0));
    assert_eq!(health.first_failure_at(), Some(at(0)));
    assert_eq!(health.state(at(DAY - 1), &config()), HealthState::Degraded);
    assert_eq!(health.state(at(DAY), &config()), HealthState::Dead);
}

#[test]
fn a_dead_relay_is_retried_once_a_day_after_its_last_failure() {
    let mut health = Relay::default();
    fail_repeatedly_until(&mut health, at(0), at(DAY));
    // Its next hourly retry would fall after the 24 h mark: it waits a day.
    let last = health.last_failure_at().unwrap();
    assert!(last + Duration::from_secs(HOUR) >= at(DAY));
    assert_eq!(
        health.next_attempt_at(&config()),
        Some(last + Duration::from_secs(DAY))
    );
    assert!(!health.should_attempt_connection(at(DAY + HOUR), &config()));

    let retry = last + Duration::from_secs(DAY);
    assert_eq!(health.state(retry, &config()), HealthState::Dead);
    assert!(health.should_attempt_connection(retry, &config()));
    health.on_connect_attempt(retry);
    assert_eq!(health.state(retry, &config()), HealthState::Dead);
    health.on_connect_failed(retry);
    assert_eq!(
        health.next_attempt_at(&config()),
        Some(retry + Duration::from_secs(DAY))
    );
}

#[test]
fn a_relay_that_fails_once_and_is_left_alone_is_dead_a_day_later() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    assert_eq!(health.poll_timeout(at(5), &config()), Some(at(DAY)));
    assert_eq!(health.state(at(DAY), &config()), HealthState::Dead);
    // An overdue retry is still allowed; its failure waits a day.
    assert!(health.should_attempt_connection(at(DAY + 10), &config()));
    health.on_connect_failed(at(DAY + 10));
    assert_eq!(health.next_attempt_at(&config()), Some(at(2 * DAY + 10)));
}

#[test]
fn a_dead_relay_that_connects_recovers_after_the_stability_period() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    health.on_connect_attempt(at(2 * DAY));
    health.on_connected(at(2 * DAY));
    assert_eq!(health.consecutive_failures(), 0);
    assert_eq!(health.state(at(2 * DAY), &config()), HealthState::Degraded);
    assert_eq!(
        health.state(at(2 * DAY + 5 * MINUTE), &config()),
        HealthState::Healthy
    );
}

#[test]
fn a_connection_after_failures_is_degraded_until_stable() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    health.on_connect_failed(at(5));
    health.on_connect_attempt(at(15));
    health.on_connected(at(16));
    assert_eq!(health.consecutive_failures(), 0);
    assert_eq!(health.first_failure_at(), None);
    assert_eq!(health.state(at(16), &config()), HealthState::Degraded);
    assert_eq!(health.state(at(16 + 299), &config()), HealthState::Degraded);
    assert_eq!(health.state(at(16 + 300), &config()), HealthState::Healthy);
    assert_eq!(health.poll_timeout(at(16), &config()), Some(at(316)));
    assert_eq!(health.poll_timeout(at(316), &config()), None);
}

#[test]
fn a_stable_disconnect_allows_an_immediate_retry() {
    let mut health = Relay::default();
    health.on_connected(at(0));
    health.on_disconnected(at(300), &config());
    assert!(!health.is_connected());
    assert_eq!(health.consecutive_failures(), 0);
    assert_eq!(health.state(at(300), &config()), HealthState::Disconnected);
    assert!(health.should_attempt_connection(at(300), &config()));
}

#[test]
fn a_stable_disconnect_after_recovery_ends_the_failure_run() {
    let mut health = Relay::default();
    for t in [0, 5, 15, 35] {
        health.on_connect_failed(at(t));
    }
    health.on_connected(at(75));
    health.on_disconnected(at(75 + 600), &config());
    assert_eq!(health.consecutive_failures(), 0);
    assert_eq!(health.state(at(675), &config()), HealthState::Disconnected);
    assert!(health.should_attempt_connection(at(675), &config()));
}

#[test]
fn a_quick_drop_of_a_first_connection_counts_as_a_failure() {
    let mut health = Relay::default();
    health.on_connected(at(0));
    health.on_disconnected(at(60), &config());
    assert_eq!(health.consecutive_failures(), 1);
    assert_eq!(health.first_failure_at(), Some(at(60)));
    assert_eq!(health.state(at(60), &config()), HealthState::Degraded);
    assert_eq!(health.next_attempt_at(&config()), Some(at(65)));
}

#[test]
fn flapping_disconnects_grow_the_backoff() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    let mut now = health.next_attempt_at(&config()).unwrap();
    let mut delays = Vec::new();
    for _ in 0..4 {
        health.on_connect_attempt(now);
        health.on_connected(now);
        let dropped = now + Duration::from_secs(30);
        health.on_disconnected(dropped, &config());
        let next = health.next_attempt_at(&config()).unwrap();
        delays.push(next.saturating_duration_since(dropped).as_secs());
        now = next;
    }
    assert_eq!(delays, vec![10, 20, 40, 80]);
    assert_eq!(health.consecutive_failures(), 5);
    assert_eq!(health.first_failure_at(), Some(at(0)));
}

#[test]
fn a_failure_reported_while_connected_continues_the_interrupted_run() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    health.on_connect_failed(at(5));
    health.on_connected(at(15));
    health.on_connect_failed(at(20));
    assert!(!health.is_connected());
    assert_eq!(health.consecutive_failures(), 3);
    assert_eq!(health.first_failure_at(), Some(at(0)));
}

#[test]
fn a_drop_while_connecting_is_a_failed_attempt() {
    let mut health = Relay::default();
    health.on_connect_attempt(at(0));
    health.on_disconnected(at(3), &config());
    assert!(!health.is_connecting());
    assert_eq!(health.consecutive_failures(), 1);
}

#[test]
fn a_drop_while_idle_is_ignored() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    let before = health.clone();
    health.on_disconnected(at(3), &config());
    assert_eq!(health, before);
}

#[test]
fn a_repeated_connected_signal_keeps_the_connection_time() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    health.on_connected(at(10));
    health.on_connected(at(200));
    assert_eq!(health.state(at(310), &config()), HealthState::Healthy);
    health.on_connect_attempt(at(311));
    assert!(health.is_connected());
}

#[test]
fn a_rate_limit_holds_65_seconds_then_the_previous_state_returns() {
    let mut health = Relay::default();
    health.on_connected(at(0));
    health.on_rate_limited(at(1000), &config());
    assert!(health.is_connected());
    assert_eq!(health.state(at(1000), &config()), HealthState::RateLimited);
    assert_eq!(health.state(at(1064), &config()), HealthState::RateLimited);
    assert_eq!(health.state(at(1065), &config()), HealthState::Healthy);
    assert_eq!(health.poll_timeout(at(1000), &config()), Some(at(1065)));
}

#[test]
fn a_rate_limit_over_a_failing_relay_returns_to_degraded() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    health.on_rate_limited(at(1), &config());
    assert_eq!(health.state(at(1), &config()), HealthState::RateLimited);
    assert_eq!(health.state(at(66), &config()), HealthState::Degraded);
}

#[test]
fn no_attempt_is_allowed_while_rate_limited() {
    let mut health = Relay::default();
    health.on_rate_limited(at(100), &config());
    assert!(health.is_rate_limited(at(100)));
    assert_eq!(health.next_attempt_at(&config()), Some(at(165)));
    assert!(!health.should_attempt_connection(at(164), &config()));
    assert!(health.should_attempt_connection(at(165), &config()));
    assert!(!health.is_rate_limited(at(165)));
}

#[test]
fn a_second_rate_limit_signal_extends_the_cooldown() {
    let mut health = Relay::default();
    health.on_rate_limited(at(0), &config());
    health.on_rate_limited(at(60), &config());
    assert_eq!(health.state(at(100), &config()), HealthState::RateLimited);
    assert_eq!(health.state(at(125), &config()), HealthState::Disconnected);
}

#[test]
fn poll_timeout_points_at_the_earliest_change() {
    let mut health = Relay::default();
    health.on_connect_failed(at(0));
    assert_eq!(health.poll_timeout(at(0), &config()), Some(at(5)));
    health.on_rate_limited(at(1), &config());
    assert_eq!(health.poll_timeout(at(1), &config()), Some(at(66)));
    // Past the retry and the cooldown, what remains is becoming dead.
    assert_eq!(health.poll_timeout(at(66), &config()), Some(at(DAY)));
    assert_eq!(health.poll_timeout(at(DAY), &config()), None);
}

#[test]
fn poll_timeout_is_the_dead_mark_when_it_comes_before_the_retry() {
    let mut health = Relay::default();
    fail_repeatedly_until(&mut health, at(0), at(DAY));
    let last = health.last_failure_at().unwrap();
    assert_eq!(health.poll_timeout(last, &config()), Some(at(DAY)));
    assert_eq!(
        health.poll_timeout(at(DAY), &config()),
        Some(last + Duration::from_secs(DAY))
    );
}

#[test]
fn poll_timeout_never_returns_the_past_and_repeats_harmlessly() {
    let mut health = Relay::default();
    health.on_connect_failed(at(100));
    let first = health.poll_timeout(at(100), &config());
    let again = health.poll_timeout(at(100), &config());
    assert_eq!(first, again);
    assert_eq!(health.poll_timeout(at(105), &config()), Some(at(100 + DAY)));
    // Waking early changes nothing.
    assert!(!health.should_attempt_connection(at(104), &config()));
    assert_eq!(health.poll_timeout(at(104), &config()), Some(at(105)));
}

#[test]
fn time_going_backwards_never_panics() {
    let c = config();
    let mut health = Relay::default();
    health.on_connect_attempt(at(1000));
    health.on_connected(at(1000));
    health.on_disconnected(at(10), &c);
    assert_eq!(health.consecutive_failures(), 1);
    health.on_connect_failed(at(0));
    health.on_rate_limited(at(5000), &c);
    health.on_rate_limited(at(1), &c);
    assert!(!health.is_rate_limited(at(66)));
    health.on_connected(at(3));
    assert_eq!(health.state(at(0), &c), HealthState::RateLimited);
    assert_eq!(health.state(at(70), &c), HealthState::Degraded);
    health.on_disconnected(at(2), &c);
    assert_eq!(health.consecutive_failures(), 3);
    assert_eq!(health.first_failure_at(), Some(at(10)));
    assert_eq!(health.state(at(70), &c), HealthState::Degraded);
    let _ = health.poll_timeout(at(0), &c);
    let _ = health.should_attempt_connection(at(0), &c);
}

#[test]
fn the_end_of_time_saturates() {
    let end = Instant::from_duration(Duration::MAX);
    let c = config();
    let mut health = Relay::default();
    health.on_connect_failed(end);
    health.on_rate_limited(end, &c);
    assert_eq!(health.next_attempt_at(&c), Some(end));
    assert_eq!(health.state(end, &c), HealthState::Dead);
    assert_eq!(health.poll_timeout(end, &c), None);
    health.on_connected(end);
    assert_eq!(health.state(end, &c), HealthState::Degraded);
}

#[test]
fn the_failure_count_saturates() {
    let mut health = Relay::default();
    health.health.failures = Some(FailureRun {
        count: u32::MAX,
        first_at: at(0),
        last_at: at(0),
    });
    health.on_connect_failed(at(1));
    assert_eq!(health.consecutive_failures(), u32::MAX);
    assert_eq!(
        health.next_attempt_at(&config()),
        Some(at(1 + HOUR)),
        "still capped at one hour while not dead"
    );
}

#[test]
fn counts_cover_every_state() {
    let config = config();
    let mut relays = vec![Relay::default(); 6];
    relays[0].on_connected(at(0)); // healthy
                                   // relays[1]: disconnected, never tried
    relays[2].on_connect_failed(at(2 * DAY)); // degraded
    relays[3].on_connect_failed(at(0)); // dead
    relays[4].on_connected(at(0));
    relays[4].on_rate_limited(at(2 * DAY), &config); // rate limited
    relays[5].on_connect_failed(at(0));
    relays[5].on_connected(at(2 * DAY)); // degraded, connected

    let mut counts = HealthCounts::default();
    for health in &relays {
        counts.add(health.state(at(2 * DAY), &config), health.is_connected());
    }
    assert_eq!(
        counts,
        HealthCounts {
            tracked: 6,
            connected: 3,
            healthy: 1,
            disconnected: 1,
            degraded: 2,
            dead: 1,
            rate_limited: 1,
        }
    );
    let sum: usize = HealthState::ALL.iter().map(|s| counts.in_state(*s)).sum();
    assert_eq!(sum, counts.tracked);
}

mod proptests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Copy, Debug)]
    enum Event {
        Attempt,
        Connected,
        Failed,
        Disconnected,
        RateLimited,
        Query,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Attempt),
            Just(Event::Connected),
            Just(Event::Failed),
            Just(Event::Disconnected),
            Just(Event::RateLimited),
            Just(Event::Query),
        ]
    }

    fn any_config() -> impl Strategy<Value = HealthConfig> {
        (
            0u64..100,
            0u64..10_000,
            0u64..200_000,
            0u64..200_000,
            0u64..1_000,
            0u64..1_000,
        )
            .prop_map(
                |(base, extra, dead, retry, cooldown, stable)| HealthConfig {
                    backoff: ExponentialBackoff::new(
                        Duration::from_secs(base),
                        Duration::from_secs(base.saturating_add(extra)),
                    ),
                    dead_after: Duration::from_secs(dead),
                    dead_retry_interval: Duration::from_secs(retry),
                    rate_limit_cooldown: Duration::from_secs(cooldown),
                    stability_period: Duration::from_secs(stable),
                    ..HealthConfig::default()
                },
            )
    }

    fn apply(health: &mut Relay, event: Event, now: Instant, config: &HealthConfig) {
        match event {
            Event::Attempt => health.on_connect_attempt(now),
            Event::Connected => health.on_connected(now),
            Event::Failed => health.on_connect_failed(now),
            Event::Disconnected => health.on_disconnected(now, config),
            Event::RateLimited => health.on_rate_limited(now, config),
            Event::Query => {}
        }
    }

    fn check_invariants(health: &Relay, now: Instant, config: &HealthConfig) {
        let allowed = health.should_attempt_connection(now, config);
        assert!(!(allowed && health.is_connected()));
        assert!(!(allowed && health.is_connecting()));
        assert!(!(allowed && health.is_rate_limited(now)));
        if health.is_connected() {
            assert_eq!(health.consecutive_failures(), 0);
            assert_eq!(health.next_attempt_at(config), None);
        }
        if let Some(deadline) = health.poll_timeout(now, config) {
            assert!(deadline > now);
        }
        let state = health.state(now, config);
        assert_eq!(
            state == HealthState::RateLimited,
            health.is_rate_limited(now)
        );
        if state == HealthState::Dead {
            assert!(health.consecutive_failures() > 0);
        }
    }

    proptest! {
        #[test]
        fn backoff_is_monotone_and_capped(
            config in any_config(),
            gaps in prop::collection::vec(0u64..20_000, 1..64),
        ) {
            let mut health = Relay::default();
            let mut now = Instant::ZERO;
            let mut previous = Duration::ZERO;
            let bound = config.backoff.max.max(config.dead_retry_interval);
            for gap in gaps {
                now += Duration::from_secs(gap);
                health.on_connect_failed(now);
                let next = health.next_attempt_at(&config);
                prop_assert!(next.is_some());
                let delay = next.unwrap_or(now).saturating_duration_since(now);
                prop_assert!(delay >= previous, "{delay:?} < {previous:?}");
                prop_assert!(delay <= bound);
                previous = delay;
            }
        }

        #[test]
        fn random_events_never_panic_nor_allow_a_forbidden_attempt(
            config in any_config(),
            events in prop::collection::vec((event(), 0u64..(3 * DAY)), 0..60),
        ) {
            let mut health = Relay::default();
            for (event, secs) in events {
                let now = at(secs);
                apply(&mut health, event, now, &config);
                check_invariants(&health, now, &config);
                check_invariants(&health, at(secs / 2), &config);
                check_invariants(&health, now + Duration::from_secs(DAY), &config);
            }
        }
    }
}

#[test]
fn the_engine_s_sequence_backs_off_after_a_failed_connect() {
    let config = HealthConfig::default();
    let mut health = Relay::default();
    let now = Instant::ZERO;
    assert!(health.should_attempt_connection(now, &config));
    health.on_connect_attempt(now);
    assert!(
        !health.should_attempt_connection(now, &config),
        "an attempt is in flight"
    );
    health.on_connect_failed(now);
    assert_eq!(health.state(now, &config), HealthState::Degraded);
    let retry = health.poll_timeout(now, &config).expect("a retry is due");
    assert!(retry > now);
    assert!(!health.should_attempt_connection(now, &config));
    assert!(health.should_attempt_connection(retry, &config));
}
