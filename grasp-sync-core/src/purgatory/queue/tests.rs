use super::*;

#[test]
fn retain_idle_keeps_running_syncs() {
    let mut queue = SyncQueue::default();
    queue.enqueue("running", Instant::ZERO, Duration::ZERO);
    queue.enqueue("released", Instant::ZERO, Duration::ZERO);
    queue.enqueue("waiting", Instant::ZERO, Duration::from_secs(9));
    assert_eq!(queue.take_ready(Instant::ZERO), vec!["running", "released"]);
    queue.complete("released", Instant::ZERO, false);
    let forgotten = queue.retain_idle(|identifier| identifier == "waiting");
    assert_eq!(forgotten, 1);
    assert!(queue.get("running").is_some());
    assert!(queue.get("released").is_none());
    assert!(queue.get("waiting").is_some());
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn default_config_matches_the_spec() {
    let config = SyncQueueConfig::default();
    assert_eq!(config.default_delay, secs(180));
    assert_eq!(config.immediate_delay, Duration::from_millis(500));
    assert_eq!(config.backoff.base, secs(20));
    assert_eq!(config.backoff.max, secs(120));
}

#[test]
fn backoff_grows_20_40_80_then_caps_at_120() {
    let config = SyncQueueConfig::default();
    let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::ZERO);
    let mut now = Instant::ZERO;
    let mut delays = Vec::new();
    for _ in 0..6 {
        entry.mark_in_progress();
        entry.on_sync_complete(now, &config);
        delays.push(entry.next_attempt.saturating_duration_since(now).as_secs());
        now = entry.next_attempt;
    }
    assert_eq!(delays, vec![20, 40, 80, 120, 120, 120]);
    assert_eq!(entry.attempt_count, 6);
}

#[test]
fn new_entry_waits_for_its_delay() {
    let entry = SyncQueueEntry::new(Instant::from_secs(10), secs(180));
    assert!(!entry.is_ready(Instant::from_secs(189)));
    assert!(entry.is_ready(Instant::from_secs(190)));
}

#[test]
fn in_progress_entry_is_never_ready() {
    let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::ZERO);
    entry.mark_in_progress();
    assert!(!entry.is_ready(Instant::from_secs(1_000)));
}

#[test]
fn on_new_event_resets_attempts_and_only_moves_earlier() {
    let config = SyncQueueConfig::default();
    let mut entry = SyncQueueEntry::new(Instant::ZERO, secs(180));
    entry.attempt_count = 3;

    entry.on_new_event(Instant::from_secs(1), Duration::from_millis(500));
    assert_eq!(entry.attempt_count, 0);
    assert_eq!(entry.next_attempt, Instant::from_millis(1_500));

    // A later deadline (user-submitted delay) does not postpone the sync.
    entry.on_new_event(Instant::from_secs(1), config.default_delay);
    assert_eq!(entry.next_attempt, Instant::from_millis(1_500));
}

#[test]
fn event_during_sync_restarts_backoff_at_first_step() {
    let config = SyncQueueConfig::default();
    let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::ZERO);
    entry.attempt_count = 3;
    entry.mark_in_progress();
    entry.on_new_event(Instant::from_secs(5), config.immediate_delay);
    entry.on_sync_complete(Instant::from_secs(10), &config);
    assert!(!entry.in_progress);
    assert_eq!(entry.attempt_count, 1);
    assert_eq!(entry.next_attempt, Instant::from_secs(30));
}

#[test]
fn sync_ending_before_a_pending_deadline_counts_no_failure() {
    let config = SyncQueueConfig::default();
    let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::from_secs(60));
    entry.mark_in_progress();
    entry.on_sync_complete(Instant::from_secs(10), &config);
    assert!(!entry.in_progress);
    assert_eq!(entry.attempt_count, 0);
    assert_eq!(entry.next_attempt, Instant::from_secs(60));
}

#[test]
fn time_going_backwards_does_not_panic() {
    let config = SyncQueueConfig::default();
    let mut entry = SyncQueueEntry::new(Instant::from_secs(100), secs(1));
    assert!(!entry.is_ready(Instant::from_secs(50)));
    entry.on_new_event(Instant::ZERO, Duration::ZERO);
    assert_eq!(entry.next_attempt, Instant::ZERO);
    entry.on_sync_complete(Instant::ZERO, &config);
    assert_eq!(entry.next_attempt, Instant::from_secs(20));

    let mut queue = SyncQueue::default();
    queue.enqueue("a", Instant::from_secs(100), Duration::ZERO);
    assert!(queue.take_ready(Instant::from_secs(10)).is_empty());
    queue.enqueue("a", Instant::ZERO, Duration::ZERO);
    assert_eq!(queue.take_ready(Instant::ZERO), vec!["a".to_owned()]);
}

#[test]
fn huge_instants_saturate() {
    let config = SyncQueueConfig::default();
    let end = Instant::from_duration(Duration::MAX);
    let mut entry = SyncQueueEntry::new(end, secs(180));
    assert_eq!(entry.next_attempt, end);
    entry.attempt_count = u32::MAX;
    entry.on_sync_complete(end, &config);
    assert_eq!(entry.attempt_count, u32::MAX);
    assert_eq!(entry.next_attempt, end);
}

#[test]
fn burst_of_ten_events_yields_one_fetch() {
    let mut queue = SyncQueue::default();
    let delay = queue.config().immediate_delay;
    let mut fetches = Vec::new();
    for i in 0..10u64 {
        let now = Instant::from_millis(i * 10);
        queue.enqueue("repo", now, delay);
        fetches.extend(queue.take_ready(now));
    }
    assert!(fetches.is_empty());
    assert_eq!(queue.poll_timeout(), Some(Instant::from_millis(500)));
    for ms in (100..=2_000).step_by(50) {
        fetches.extend(queue.take_ready(Instant::from_millis(ms)));
    }
    assert_eq!(fetches, vec!["repo".to_owned()]);
}

#[test]
fn take_ready_is_in_queue_order_and_marks_in_progress() {
    let mut queue = SyncQueue::default();
    queue.enqueue("c", Instant::ZERO, secs(1));
    queue.enqueue("a", Instant::ZERO, secs(1));
    queue.enqueue("b", Instant::ZERO, secs(5));
    let now = Instant::from_secs(10);
    assert_eq!(
        queue.take_ready(now),
        vec!["c".to_owned(), "a".to_owned(), "b".to_owned()]
    );
    assert!(queue.take_ready(now).is_empty());
    assert!(queue.get("a").is_some_and(|e| e.in_progress));
    assert_eq!(queue.poll_timeout(), None);
}

#[test]
fn complete_removes_when_done_and_backs_off_otherwise() {
    let mut queue = SyncQueue::default();
    queue.enqueue("a", Instant::ZERO, Duration::ZERO);
    queue.enqueue("b", Instant::ZERO, Duration::ZERO);
    assert_eq!(queue.take_ready(Instant::ZERO).len(), 2);

    queue.complete("a", Instant::from_secs(3), true);
    queue.complete("b", Instant::from_secs(3), false);
    queue.complete("unknown", Instant::from_secs(3), false);

    assert_eq!(queue.len(), 1);
    assert!(queue.get("a").is_none());
    assert_eq!(queue.poll_timeout(), Some(Instant::from_secs(23)));
    assert!(queue.take_ready(Instant::from_secs(22)).is_empty());
    assert_eq!(
        queue.take_ready(Instant::from_secs(23)),
        vec!["b".to_owned()]
    );
}

#[test]
fn new_event_resets_backoff_of_queued_identifier() {
    let mut queue = SyncQueue::default();
    queue.enqueue("a", Instant::ZERO, Duration::ZERO);
    for round in 0..3u64 {
        let now = queue.poll_timeout().unwrap_or(Instant::ZERO);
        assert_eq!(queue.take_ready(now).len(), 1, "round {round}");
        queue.complete("a", now, false);
    }
    assert_eq!(queue.get("a").map(|e| e.attempt_count), Some(3));
    // The third failure at 60 s backed off to 140 s; the event moves it up.
    assert_eq!(queue.poll_timeout(), Some(Instant::from_secs(140)));
    queue.enqueue("a", Instant::from_secs(100), Duration::from_millis(500));
    assert_eq!(queue.get("a").map(|e| e.attempt_count), Some(0));
    assert_eq!(queue.poll_timeout(), Some(Instant::from_millis(100_500)));
}

#[test]
fn remove_and_is_empty() {
    let mut queue = SyncQueue::new(SyncQueueConfig::default());
    assert!(queue.is_empty());
    queue.enqueue("a", Instant::ZERO, secs(1));
    assert!(queue.remove("a").is_some());
    assert!(queue.remove("a").is_none());
    assert!(queue.is_empty());
    assert_eq!(queue.poll_timeout(), None);
}
