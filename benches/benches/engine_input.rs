//! The engine's cost per input against the number of relays (issue
//! "Historic sync at the machine's limit": the per-input cost must not grow
//! with the relays, subscriptions and batches).
//!
//! The engine tracks 1, 100 or 1 000 connected relays, each with its Layer 1
//! subscriptions open and answered. One input is a relay message the engine
//! has nothing to do for (an `EOSE` of a subscription it does not know, from
//! relay 0), followed by `poll_timeout` — what a driver does after every
//! input. What is measured is the engine's own overhead per input: keeping
//! its relays going and finding its next deadline.
//!
//! `cargo bench -p grasp-sync-benches --bench engine_input`; CI only builds
//! this.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
use grasp_sync_core::{Instant, Now};
use nostr::prelude::{RelayMessage, RelayUrl, SubscriptionId, Timestamp};

/// Records the REQs the engine sends: (relay, subscription id).
#[derive(Default)]
struct Recorder {
    reqs: Vec<(RelayUrl, SubscriptionId)>,
}

impl Recorder {
    /// Executes every command the engine has waiting (keeping its REQs).
    fn drain(&mut self, engine: &mut SyncEngine, now: Now) {
        engine.execute_commands(now, |command| {
            if let Command::Subscribe { relay, id, .. } = command {
                self.reqs.push((relay, id));
            }
            Ok(())
        });
    }
}

fn relay(n: usize) -> RelayUrl {
    RelayUrl::parse(&format!("wss://relay{n}.example.com")).expect("relay url")
}

/// An engine with `relays` connected bootstrap relays, every subscription
/// it opened answered with `EOSE`.
fn engine_with(relays: usize) -> (SyncEngine, Recorder, Now) {
    let now = Now::new(
        Instant::ZERO + Duration::from_secs(1),
        Timestamp::from_secs(1_750_000_000),
    );
    let mut config = EngineConfig::default();
    config.identity.bootstrap_relays = (0..relays).map(relay).collect();
    let mut engine = SyncEngine::new(config, now).expect("a valid configuration");
    let mut sink = Recorder::default();
    engine.handle_timeout(now);
    sink.drain(&mut engine, now);
    for n in 0..relays {
        engine.handle_connected(now, &relay(n));
    }
    sink.drain(&mut engine, now);
    // Answer every REQ with EOSE, until nothing new is asked.
    for _ in 0..4 {
        let answers = std::mem::take(&mut sink.reqs);
        if answers.is_empty() {
            break;
        }
        for (url, id) in answers {
            engine.handle_relay_message(now, &url, RelayMessage::eose(id));
        }
        sink.drain(&mut engine, now);
    }
    (engine, sink, now)
}

fn per_input(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_input");
    for relays in [1usize, 100, 1_000] {
        let (mut engine, mut sink, now) = engine_with(relays);
        let open = (0..relays)
            .filter(|n| {
                engine
                    .relay_activity(&relay(*n))
                    .is_some_and(|activity| activity.open_subscriptions > 0)
            })
            .count();
        assert_eq!(
            open, relays,
            "every relay connected with subscriptions open"
        );
        let first = relay(0);
        let unknown = SubscriptionId::new("unknown");
        group.bench_with_input(BenchmarkId::new("relays", relays), &relays, |b, _| {
            b.iter(|| {
                engine.handle_relay_message(now, &first, RelayMessage::eose(unknown.clone()));
                sink.drain(&mut engine, now);
                black_box(engine.poll_timeout())
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3));
    targets = per_input
}
criterion_main!(benches);
