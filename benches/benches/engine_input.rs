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
//! A second group measures the same fixed cost against the store's
//! answers: 64 of them one call each, or in one batch call.
//!
//! `cargo bench -p grasp-sync-benches --bench engine_input`; CI only builds
//! this.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
use grasp_sync_core::store::IngestOutcome;
use grasp_sync_core::{Instant, Now};
use nostr::prelude::{EventId, RelayMessage, RelayUrl, SubscriptionId, Timestamp};

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

/// Answers the store gives in one go, as the tokio adapter's store task
/// hands them over (up to 64 at a time).
const ANSWERS: usize = 64;

/// The engine's fixed cost per input, paid once per answer or once per
/// batch of [`ANSWERS`] answers: store answers for events the engine is not
/// waiting for (each is looked up and passed over), one `handle_store_outcome`
/// call each or one `handle_store_outcomes` call for all, then what a
/// driver does after an input (commands, `poll_timeout`).
fn store_answers(c: &mut Criterion) {
    let mut group = c.benchmark_group("store_answers_64");
    let ids: Vec<EventId> = (0..ANSWERS as u64)
        .map(|n| {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&n.to_be_bytes());
            EventId::from_byte_array(bytes)
        })
        .collect();
    for relays in [1usize, 1_000] {
        let (mut engine, mut sink, now) = engine_with(relays);
        group.bench_with_input(BenchmarkId::new("one_by_one", relays), &relays, |b, _| {
            b.iter(|| {
                for id in &ids {
                    engine.handle_store_outcome(now, id, Ok(IngestOutcome::Stored));
                    sink.drain(&mut engine, now);
                    black_box(engine.poll_timeout());
                }
            })
        });
        group.bench_with_input(BenchmarkId::new("batched", relays), &relays, |b, _| {
            b.iter(|| {
                let answers = ids.iter().map(|id| (id, Ok(IngestOutcome::Stored)));
                engine.handle_store_outcomes(now, answers);
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
    targets = per_input, store_answers
}
criterion_main!(benches);
