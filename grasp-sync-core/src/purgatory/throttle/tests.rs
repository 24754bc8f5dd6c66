use super::*;

#[test]
fn next_step_serves_waits_for_a_completion_or_wakes_when_the_window_frees() {
    let config = ThrottleConfig {
        max_concurrent: 2,
        max_per_minute: 2,
        window: Duration::from_secs(60),
    };
    let mut throttle = DomainThrottle::new("d", config);
    assert_eq!(throttle.next_step(Instant::ZERO), QueueStep::Idle);
    throttle.enqueue_identifier("a", HashSet::new());
    throttle.enqueue_identifier("b", HashSet::new());
    throttle.enqueue_identifier("c", HashSet::new());
    assert_eq!(
        throttle.next_step(Instant::ZERO),
        QueueStep::Serve("a".into())
    );
    assert!(throttle.try_start_request(Instant::ZERO));
    assert_eq!(
        throttle.next_step(Instant::ZERO),
        QueueStep::Serve("b".into())
    );
    assert!(throttle.try_start_request(Instant::from_secs(1)));
    // Both slots in flight: a completion will serve the queue.
    assert_eq!(throttle.next_step(Instant::from_secs(1)), QueueStep::Idle);
    throttle.complete_request(Instant::from_secs(2));
    throttle.complete_request(Instant::from_secs(2));
    throttle.mark_identifier_not_in_progress("a");
    // Nothing in flight, the window is full: wake when the first start leaves it.
    assert_eq!(
        throttle.next_step(Instant::from_secs(2)),
        QueueStep::WakeAt(Instant::from_secs(60))
    );
    assert_eq!(
        throttle.next_step(Instant::from_secs(60)),
        QueueStep::Serve("c".into())
    );
}

fn throttle() -> DomainThrottle {
    DomainThrottle::new("example.com", ThrottleConfig::default())
}

fn urls(list: &[&str]) -> HashSet<String> {
    list.iter().map(|u| (*u).to_owned()).collect()
}

fn served(t: &mut DomainThrottle) -> Option<String> {
    t.next_ready_identifier()
}

#[test]
fn default_config_matches_the_spec() {
    let config = ThrottleConfig::default();
    assert_eq!(config.max_concurrent, 5);
    assert_eq!(config.max_per_minute, 30);
    assert_eq!(config.window, Duration::from_secs(60));
}

#[test]
fn queue_round_robin() {
    let mut t = throttle();
    for id in ["id1", "id2", "id3"] {
        t.enqueue_identifier(id, HashSet::new());
    }
    for id in ["id1", "id2", "id3", "id1"] {
        assert_eq!(served(&mut t).as_deref(), Some(id));
        t.mark_identifier_not_in_progress(id);
    }
}

#[test]
fn skips_in_progress() {
    let mut t = throttle();
    t.enqueue_identifier("id1", HashSet::new());
    t.enqueue_identifier("id2", HashSet::new());
    assert_eq!(served(&mut t).as_deref(), Some("id1"));
    assert_eq!(served(&mut t).as_deref(), Some("id2"));
    assert_eq!(served(&mut t), None);
    t.mark_identifier_not_in_progress("id1");
    assert_eq!(served(&mut t).as_deref(), Some("id1"));
}

#[test]
fn empty_queue_serves_nothing() {
    let mut t = throttle();
    assert_eq!(served(&mut t), None);
}

#[test]
fn remove_before_cursor_adjusts_index() {
    let mut t = throttle();
    for id in ["id1", "id2", "id3"] {
        t.enqueue_identifier(id, HashSet::new());
    }
    assert_eq!(served(&mut t).as_deref(), Some("id1"));
    t.mark_identifier_not_in_progress("id1");
    assert!(t.remove_identifier("id1"));
    assert_eq!(served(&mut t).as_deref(), Some("id2"));
}

#[test]
fn remove_at_cursor_serves_its_successor() {
    let mut t = throttle();
    for id in ["id1", "id2", "id3"] {
        t.enqueue_identifier(id, HashSet::new());
    }
    assert_eq!(served(&mut t).as_deref(), Some("id1"));
    assert!(t.remove_identifier("id2"));
    assert_eq!(served(&mut t).as_deref(), Some("id3"));
}

#[test]
fn remove_last_at_cursor_wraps_to_first() {
    let mut t = throttle();
    for id in ["id1", "id2", "id3"] {
        t.enqueue_identifier(id, HashSet::new());
    }
    assert_eq!(served(&mut t).as_deref(), Some("id1"));
    assert_eq!(served(&mut t).as_deref(), Some("id2"));
    t.mark_identifier_not_in_progress("id1");
    assert!(t.remove_identifier("id3"));
    assert!(!t.remove_identifier("id3"));
    assert_eq!(served(&mut t).as_deref(), Some("id1"));
}

#[test]
fn has_queued_work() {
    let mut t = throttle();
    assert!(!t.has_queued_work());
    t.enqueue_identifier("id1", HashSet::new());
    assert!(t.has_queued_work());
    t.remove_identifier("id1");
    assert!(!t.has_queued_work());
    assert_eq!(served(&mut t), None);
}

#[test]
fn tried_urls_merge() {
    let mut t = throttle();
    t.enqueue_identifier("id1", urls(&["url1"]));
    t.enqueue_identifier("id1", urls(&["url2"]));
    t.mark_url_tried("id1", "url3");
    t.mark_url_tried("unknown", "url4");
    assert_eq!(t.get_tried_urls("id1"), urls(&["url1", "url2", "url3"]));
    assert!(t.get_tried_urls("unknown").is_empty());
    assert_eq!(t.queued_identifiers().collect::<Vec<_>>(), vec!["id1"]);
}

#[test]
fn concurrency_limit() {
    let mut t = throttle();
    let now = Instant::ZERO;
    for _ in 0..5 {
        assert!(t.try_start_request(now));
    }
    assert!(!t.has_capacity(now));
    assert!(!t.try_start_request(now));
    assert_eq!(t.in_flight(), 5);
    t.complete_request(now);
    assert!(t.has_capacity(now));
    assert!(t.try_start_request(now));
}

#[test]
fn per_minute_limit_and_poll_timeout() {
    let mut t = throttle();
    t.enqueue_identifier("id1", HashSet::new());
    for second in 0..30u64 {
        let now = Instant::from_secs(second);
        assert!(t.try_start_request(now));
        t.complete_request(now);
    }
    let now = Instant::from_secs(30);
    assert_eq!(t.in_flight(), 0);
    assert_eq!(t.requests_in_window(now), 30);
    assert!(!t.try_start_request(now));
    // Nothing in flight, so no completion will trigger: the deadline does.
    assert_eq!(t.poll_timeout(now), Some(Instant::from_secs(60)));
    assert!(!t.has_capacity(Instant::from_millis(59_999)));
    assert!(t.has_capacity(Instant::from_secs(60)));
    assert_eq!(t.poll_timeout(Instant::from_secs(60)), None);
    assert!(t.try_start_request(Instant::from_secs(60)));
    assert_eq!(
        t.poll_timeout(Instant::from_secs(60)),
        Some(Instant::from_secs(61))
    );
}

#[test]
fn poll_timeout_needs_queued_work_and_a_full_window() {
    let mut t = throttle();
    assert!(t.try_start_request(Instant::ZERO));
    t.enqueue_identifier("id1", HashSet::new());
    assert_eq!(t.poll_timeout(Instant::ZERO), None);
    t.remove_identifier("id1");
    let config = ThrottleConfig {
        max_per_minute: 0,
        ..ThrottleConfig::default()
    };
    let mut never = DomainThrottle::new("never.example", config);
    never.enqueue_identifier("id1", HashSet::new());
    assert!(!never.try_start_request(Instant::ZERO));
    assert_eq!(never.poll_timeout(Instant::ZERO), None);
}

#[test]
fn time_going_backwards_does_not_panic_nor_reopen_the_window() {
    let mut t = throttle();
    t.enqueue_identifier("id1", HashSet::new());
    for _ in 0..30 {
        assert!(t.try_start_request(Instant::from_secs(100)));
        t.complete_request(Instant::from_secs(100));
    }
    // Earlier instants count as the latest one seen.
    assert!(!t.try_start_request(Instant::ZERO));
    assert!(!t.has_capacity(Instant::from_secs(10)));
    assert_eq!(t.requests_in_window(Instant::ZERO), 30);
    assert_eq!(t.poll_timeout(Instant::ZERO), Some(Instant::from_secs(160)));
    t.complete_request(Instant::ZERO);
    assert_eq!(t.in_flight(), 0);
    assert!(t.try_start_request(Instant::from_secs(160)));
}

#[test]
fn throttles_are_created_on_demand() {
    let mut throttles = DomainThrottles::default();
    let now = Instant::ZERO;
    assert!(!throttles.is_throttled("a.example", now));
    assert!(throttles.get("a.example").is_none());
    for _ in 0..5 {
        assert!(throttles.entry("a.example").try_start_request(now));
    }
    assert!(throttles.is_throttled("a.example", now));
    assert!(!throttles.is_throttled("b.example", now));
    assert_eq!(throttles.len(), 1);
    assert_eq!(
        throttles.get("a.example").map(DomainThrottle::domain),
        Some("a.example")
    );
    if let Some(t) = throttles.get_mut("a.example") {
        t.complete_request(now);
    }
    assert!(!throttles.is_throttled("a.example", now));
}

#[test]
fn idle_throttles_are_dropped() {
    let mut throttles = DomainThrottles::new(ThrottleConfig::default());
    throttles
        .entry("busy.example")
        .enqueue_identifier("id1", HashSet::new());
    assert!(throttles
        .entry("recent.example")
        .try_start_request(Instant::ZERO));
    throttles
        .entry("recent.example")
        .complete_request(Instant::ZERO);
    throttles.entry("idle.example");
    assert_eq!(throttles.len(), 3);
    assert_eq!(
        throttles.remove_idle(Instant::from_secs(1)),
        vec!["idle.example"]
    );
    let left: Vec<&str> = throttles.iter().map(DomainThrottle::domain).collect();
    assert_eq!(left, vec!["busy.example", "recent.example"]);
    assert_eq!(
        throttles.remove_idle(Instant::from_secs(61)),
        vec!["recent.example"]
    );
    assert_eq!(throttles.len(), 1);
    assert!(!throttles.is_empty());
}

#[test]
fn earliest_poll_timeout_over_domains() {
    let config = ThrottleConfig {
        max_per_minute: 1,
        ..ThrottleConfig::default()
    };
    let mut throttles = DomainThrottles::new(config);
    for (domain, start) in [("a.example", 10), ("b.example", 5)] {
        let t = throttles.entry(domain);
        t.enqueue_identifier("id", HashSet::new());
        assert!(t.try_start_request(Instant::from_secs(start)));
        t.complete_request(Instant::from_secs(start));
    }
    assert_eq!(
        throttles.poll_timeout(Instant::from_secs(20)),
        Some(Instant::from_secs(65))
    );
}

#[test]
fn next_step_of_a_domain_without_a_throttle_is_idle() {
    let mut throttles = DomainThrottles::default();
    assert_eq!(
        throttles.next_step("a.example", Instant::ZERO),
        QueueStep::Idle
    );
    throttles
        .entry("a.example")
        .enqueue_identifier("id", HashSet::new());
    assert_eq!(
        throttles.next_step("a.example", Instant::ZERO),
        QueueStep::Serve("id".into())
    );
    assert_eq!(
        throttles.next_step("a.example", Instant::ZERO),
        QueueStep::Idle
    );
}

/// A throttle of `per_minute` a minute with `waiting` identifiers queued.
fn queue_of(per_minute: u32, waiting: usize) -> DomainThrottle {
    let config = ThrottleConfig {
        max_per_minute: per_minute,
        max_concurrent: u32::MAX,
        ..ThrottleConfig::default()
    };
    let mut throttle = DomainThrottle::new("d", config);
    for n in 0..waiting {
        throttle.enqueue_identifier(&format!("r{n}"), HashSet::new());
    }
    throttle
}

#[test]
fn the_drain_estimate_is_one_window_per_round_of_the_per_minute_limit() {
    let secs = Duration::from_secs;
    let now = Instant::from_secs(1000);
    assert_eq!(queue_of(30, 0).drain_estimate(now), Duration::ZERO);
    assert_eq!(queue_of(30, 1).drain_estimate(now), Duration::ZERO);
    assert_eq!(queue_of(30, 30).drain_estimate(now), Duration::ZERO);
    // 60 · ⌊(n − 1) / r⌋ with an empty window.
    assert_eq!(queue_of(30, 31).drain_estimate(now), secs(60));
    assert_eq!(queue_of(30, 40).drain_estimate(now), secs(60));
    assert_eq!(queue_of(30, 61).drain_estimate(now), secs(120));
    assert_eq!(queue_of(120, 40).drain_estimate(now), Duration::ZERO);
    assert_eq!(
        queue_of(u32::MAX, 10_000).drain_estimate(now),
        Duration::ZERO
    );
    assert_eq!(queue_of(1, 3).drain_estimate(now), secs(120));

    // Requests already in the window take their share of the first round: 28 started
    // 10 s ago, 3 waiting: two start now, the third when the first of the 28 leaves.
    let mut throttle = queue_of(30, 0);
    for _ in 0..28 {
        assert!(throttle.try_start_request(Instant::from_secs(990)));
        throttle.complete_request(Instant::from_secs(990));
    }
    for n in 0..3 {
        throttle.enqueue_identifier(&format!("r{n}"), HashSet::new());
    }
    assert_eq!(throttle.drain_estimate(now), secs(50));
    // Being served is not waiting.
    assert_eq!(throttle.next_ready_identifier().as_deref(), Some("r0"));
    assert_eq!(throttle.waiting_len(), 2);
    assert_eq!(throttle.queued_len(), 3);
    assert_eq!(throttle.drain_estimate(now), Duration::ZERO);
    // Once the window has passed, nothing in it counts.
    throttle.enqueue_identifier("r3", HashSet::new());
    assert_eq!(
        throttle.drain_estimate(Instant::from_secs(1051)),
        Duration::ZERO
    );
    // Time running backwards is the latest instant a change saw (the last start).
    assert_eq!(
        throttle.drain_estimate(Instant::ZERO),
        throttle.drain_estimate(Instant::from_secs(990))
    );
}

#[test]
fn an_overridden_key_is_created_with_the_override_s_limits() {
    let limits: HostLimits = "git.example.org=120/10,git.mine.example=unlimited"
        .parse()
        .unwrap();
    let mut throttles = DomainThrottles::new(ThrottleConfig::default()).with_host_limits(limits);
    let config = *throttles.entry("git.example.org").config();
    assert_eq!((config.max_per_minute, config.max_concurrent), (120, 10));
    let config = *throttles.entry("example.org").config();
    assert_eq!((config.max_per_minute, config.max_concurrent), (30, 5));
    let now = Instant::ZERO;
    let mine = throttles.entry("git.mine.example");
    for _ in 0..10_000 {
        assert!(mine.try_start_request(now));
    }
    assert!(!throttles.is_throttled("git.mine.example", now));
    assert_eq!(throttles.host_limits().len(), 2);
}
