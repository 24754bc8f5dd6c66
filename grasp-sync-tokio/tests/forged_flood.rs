//! A relay floods us with forged events: 200 announcements, each preceded by 1 000
//! forged copies (content changed; the id kept, so the hash fails, or recomputed, so the
//! signature fails), 200 000 forged events in all, through the fault proxy. The relay is
//! cut off past `Caps::max_bad_events` (1 000) refused events on a connection, counted
//! once per connection and logged once per connection (per-event drops at `debug`), and
//! connected again only after its backoff; once the flood stops, the announcements sync.
//!
//! The process's CPU time and the log lines at `info` and above are printed for the
//! record (not asserted: speed is measured, never asserted in a test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{
    counter_value, flooding_remote, loopback_engine_config, manager_into, wait_until_held,
    FaultPlan, TestRelay, TestRelayConfig,
};

/// Announcements on the flooding relay.
const EVENTS: usize = 200;
/// Forged copies injected before each of them.
const COPIES: usize = 1_000;
/// Bound on the whole run.
const DEADLINE: Duration = Duration::from_secs(300);

/// Log events counted by level, and the cut-off warnings among them.
#[derive(Default)]
struct LogCounts {
    info_or_above: AtomicU64,
    warnings: AtomicU64,
    cut_off_warnings: AtomicU64,
    forged_warnings: AtomicU64,
}

/// A `tracing` subscriber that only counts (every event at `debug` and above is
/// considered; spans are not kept).
struct Counting(Arc<LogCounts>);

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Counting {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::INFO
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let counts = &self.0;
        counts.info_or_above.fetch_add(1, Ordering::Relaxed);
        if *event.metadata().level() <= tracing::Level::WARN {
            counts.warnings.fetch_add(1, Ordering::Relaxed);
            let mut message = Message(String::new());
            event.record(&mut message);
            if message.0.contains("too many forged") {
                counts.cut_off_warnings.fetch_add(1, Ordering::Relaxed);
            }
            if message.0.contains("bad id or signature") {
                counts.forged_warnings.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// CPU seconds this process has used (user + system, from `/proc/self/stat`; ticks of
/// 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').expect("a command name").1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_flooding_forged_events_is_cut_off_once_per_connection_and_backed_off() {
    let logs = Arc::new(LogCounts::default());
    tracing::subscriber::set_global_default(Counting(logs.clone())).expect("one subscriber");

    let own = TestRelay::start(TestRelayConfig::default()).await;
    let flood = FaultPlan {
        forged: 1.0,
        forged_copies: COPIES,
        ..FaultPlan::none(7)
    };
    // REQ only: the forged copies arrive on the Layer 1 REQ and match its filter, the
    // costliest case (a copy whose id was recomputed passes the screen up to the
    // signature check). Announcements of ours: stored once they get through.
    let (remote, announcements) = flooding_remote(&own, flood, EVENTS).await;

    let mut config = loopback_engine_config();
    config.identity.bootstrap_relays = vec![remote.url()];
    let registry = prometheus::Registry::new();
    let manager = manager_into(&own.url(), config, registry.clone());
    let shutdown = manager.shutdown_handle();
    let mut status = manager.status();
    let cpu_before = cpu_seconds();
    let started = tokio::time::Instant::now();
    let run = tokio::spawn(manager.run());

    let dropped =
        |reason: &str| counter_value(&registry, "grasp_sync_events_dropped_total", reason);
    let cuts = || counter_value(&registry, "grasp_sync_refused_total", "bad_events_cut_off");
    // Two episodes (a cut, a reconnect after the backoff, a second cut) — or, without a
    // cut-off, until the whole flood was handled and the sync completed.
    loop {
        let done = status.borrow_and_update().historic_sync_complete;
        if cuts() >= 2.0 || done || started.elapsed() > DEADLINE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cpu = cpu_seconds() - cpu_before;
    let wall = started.elapsed();
    let refused = dropped("forged") + dropped("off_filter") + dropped("unknown_subscription");
    let cut_count = cuts();
    println!(
        "flood of {} forged events offered ({} sent by the relay): {cut_count} cut-offs, {refused} refused events counted, \
         {cpu:.2} CPU s, {:.2} s wall; log events at info and above: {} ({} warnings: {} cut-off, {} per forged event)",
        EVENTS * COPIES,
        remote.fault_counts().forged,
        wall.as_secs_f64(),
        logs.info_or_above.load(Ordering::Relaxed),
        logs.warnings.load(Ordering::Relaxed),
        logs.cut_off_warnings.load(Ordering::Relaxed),
        logs.forged_warnings.load(Ordering::Relaxed),
    );
    assert!(
        cut_count >= 2.0,
        "the relay was cut off, reconnected and cut off again"
    );
    assert!(
        refused <= cut_count * 1_001.0,
        "at most threshold + 1 refused events counted per connection: {refused} for {cut_count} cuts"
    );
    assert_eq!(
        logs.cut_off_warnings.load(Ordering::Relaxed) as f64,
        cut_count,
        "one warning per cut-off"
    );
    assert_eq!(
        logs.forged_warnings.load(Ordering::Relaxed),
        0,
        "no warning per forged event"
    );

    // The flood stops: the relay's announcements sync on its next connection.
    remote.stop_faults();
    wait_until_held(&own, &announcements, DEADLINE).await;
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
    assert_eq!(
        summary.engine.relays_cut_for_bad_events as f64,
        cuts(),
        "the metric and the engine agree"
    );
}
