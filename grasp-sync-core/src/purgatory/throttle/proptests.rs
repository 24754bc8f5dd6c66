use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    TryStart,
    Complete,
    Enqueue { id: u8, tried: Vec<u8> },
    Remove { id: u8 },
    NextReady,
    NotInProgress { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::TryStart),
        2 => Just(Op::Complete),
        2 => (0u8..6, proptest::collection::vec(0u8..4, 0..3))
            .prop_map(|(id, tried)| Op::Enqueue { id, tried }),
        1 => (0u8..6).prop_map(|id| Op::Remove { id }),
        3 => Just(Op::NextReady),
        2 => (0u8..6).prop_map(|id| Op::NotInProgress { id }),
    ]
}

/// Mostly small forward steps, sometimes a jump backwards.
fn time_step() -> impl Strategy<Value = i64> {
    prop_oneof![10 => 0i64..5_000, 1 => 0i64..120_000, 1 => -90_000i64..0]
}

fn step(now: Instant, delta_ms: i64) -> Instant {
    let magnitude = Duration::from_millis(delta_ms.unsigned_abs());
    if delta_ms >= 0 {
        now + magnitude
    } else {
        now.checked_sub(magnitude).unwrap_or(Instant::ZERO)
    }
}

fn config() -> impl Strategy<Value = ThrottleConfig> {
    (0u32..4, 0u32..8).prop_map(|(max_concurrent, max_per_minute)| ThrottleConfig {
        max_concurrent,
        max_per_minute,
        window: Duration::from_secs(60),
    })
}

/// What the test knows about one queued identifier.
#[derive(Clone, Copy, Debug)]
struct Model {
    in_progress: bool,
    /// Step since which it has been queued and not in progress.
    idle_since: usize,
}

proptest! {
    #[test]
    fn throttle_never_exceeds_limits_and_serves_round_robin(
        config in config(),
        ops in proptest::collection::vec((op(), time_step()), 1..300),
    ) {
        let mut t = DomainThrottle::new("example.com", config);
        let mut now = Instant::ZERO;
        // Latest instant handed to a mutating call: the throttle's clock.
        let mut throttle_clock = Instant::ZERO;
        let mut starts: Vec<Instant> = Vec::new();
        let mut queued: BTreeMap<String, Model> = BTreeMap::new();
        let mut last_served: BTreeMap<String, usize> = BTreeMap::new();

        for (step_index, (op, delta)) in ops.into_iter().enumerate() {
            now = step(now, delta);
            match op {
                Op::TryStart => {
                    throttle_clock = throttle_clock.max(now);
                    if t.try_start_request(now) {
                        starts.push(throttle_clock);
                        let in_window = starts
                            .iter()
                            .filter(|&&s| throttle_clock.saturating_duration_since(s) < config.window)
                            .count();
                        prop_assert!(in_window <= config.max_per_minute as usize);
                    }
                }
                Op::Complete => {
                    throttle_clock = throttle_clock.max(now);
                    t.complete_request(now);
                }
                Op::Enqueue { id, tried } => {
                    let id = id.to_string();
                    let tried: HashSet<String> = tried.iter().map(|u| format!("u{u}")).collect();
                    t.enqueue_identifier(&id, tried.clone());
                    prop_assert!(tried.is_subset(&t.get_tried_urls(&id)));
                    queued.entry(id).or_insert(Model { in_progress: false, idle_since: step_index });
                }
                Op::Remove { id } => {
                    let id = id.to_string();
                    prop_assert_eq!(t.remove_identifier(&id), queued.remove(&id).is_some());
                    last_served.remove(&id);
                }
                Op::NotInProgress { id } => {
                    let id = id.to_string();
                    t.mark_identifier_not_in_progress(&id);
                    if let Some(model) = queued.get_mut(&id) {
                        if model.in_progress {
                            *model = Model { in_progress: false, idle_since: step_index };
                        }
                    }
                }
                Op::NextReady => {
                    let expect_some = queued.values().any(|m| !m.in_progress);
                    match t.next_ready_identifier() {
                        None => prop_assert!(!expect_some),
                        Some(y) => {
                            let model = queued.get(&y).copied();
                            prop_assert!(model.is_some_and(|m| !m.in_progress), "served {} wrongly", y);
                            if let Some(&previous) = last_served.get(&y) {
                                for (x, m) in &queued {
                                    let waited_whole_interval = !m.in_progress && m.idle_since < previous;
                                    prop_assert!(
                                        x == &y || !waited_whole_interval,
                                        "{} served twice (steps {} and {}) while {} waited",
                                        y, previous, step_index, x
                                    );
                                }
                            }
                            queued.insert(y.clone(), Model { in_progress: true, idle_since: step_index });
                            last_served.insert(y, step_index);
                        }
                    }
                }
            }
            prop_assert!(t.in_flight() <= config.max_concurrent);
            prop_assert_eq!(t.has_queued_work(), !queued.is_empty());
        }
    }
}
