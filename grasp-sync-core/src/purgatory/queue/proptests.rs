use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    Enqueue { id: u8, delay_ms: u64 },
    TakeReady,
    Complete { id: u8, done: bool },
    Remove { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 0u64..200_000).prop_map(|(id, delay_ms)| Op::Enqueue { id, delay_ms }),
        Just(Op::TakeReady),
        (0u8..4, any::<bool>()).prop_map(|(id, done)| Op::Complete { id, done }),
        (0u8..4).prop_map(|id| Op::Remove { id }),
    ]
}

/// Mostly forward steps, sometimes a jump backwards.
fn time_step() -> impl Strategy<Value = i64> {
    prop_oneof![8 => 0i64..150_000, 1 => -100_000i64..0]
}

fn step(now: Instant, delta_ms: i64) -> Instant {
    let magnitude = Duration::from_millis(delta_ms.unsigned_abs());
    if delta_ms >= 0 {
        now + magnitude
    } else {
        now.checked_sub(magnitude).unwrap_or(Instant::ZERO)
    }
}

proptest! {
    #[test]
    fn backoff_is_monotone_and_capped(a in 0u32..200, b in 0u32..200) {
        let config = SyncQueueConfig::default();
        let entry = |n| SyncQueueEntry { next_attempt: Instant::ZERO, attempt_count: n, in_progress: false };
        let (low, high) = (a.min(b), a.max(b));
        prop_assert!(entry(low).backoff(&config) <= entry(high).backoff(&config));
        prop_assert!(entry(high).backoff(&config) <= config.backoff.max);
        prop_assert!(entry(low).backoff(&config) >= config.backoff.base.min(config.backoff.max));
    }

    #[test]
    fn ready_identifiers_are_never_in_progress_twice(
        ops in proptest::collection::vec((op(), time_step()), 1..200)
    ) {
        let mut queue = SyncQueue::default();
        let mut now = Instant::ZERO;
        // Identifiers whose sync the driver started and did not end yet.
        let mut running: BTreeSet<String> = BTreeSet::new();
        for (op, delta) in ops {
            now = step(now, delta);
            match op {
                Op::Enqueue { id, delay_ms } => {
                    queue.enqueue(&id.to_string(), now, Duration::from_millis(delay_ms));
                }
                Op::TakeReady => {
                    let ready = queue.take_ready(now);
                    let distinct: BTreeSet<&String> = ready.iter().collect();
                    prop_assert_eq!(distinct.len(), ready.len());
                    for id in ready {
                        prop_assert!(running.insert(id.clone()), "{} returned while running", id);
                    }
                }
                Op::Complete { id, done } => {
                    let id = id.to_string();
                    if running.remove(&id) {
                        queue.complete(&id, now, done);
                    }
                }
                Op::Remove { id } => {
                    // Driver contract: running syncs end through complete().
                    let id = id.to_string();
                    if !running.contains(&id) {
                        queue.remove(&id);
                    }
                }
            }
            for id in &running {
                prop_assert!(queue.get(id).is_some_and(|e| e.in_progress));
            }
        }
    }
}
