//! A relay floods us with frames that are not relay messages (junk text, JSON of the
//! wrong shape) through the fault proxy, one before each of its frames. Malformed
//! frames are bad input like forged events: past `Caps::max_bad_events` on one
//! connection the relay is cut off, counted once per connection, and connected again
//! only after its backoff; once the flood stops, its announcements sync.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::time::Duration;

use support::{
    counter_value, flooding_remote, loopback_engine_config, manager_into, wait_until_held,
    FaultPlan, TestRelay, TestRelayConfig,
};

/// Announcements on the flooding relay (each preceded by a garbage frame).
const EVENTS: usize = 600;
/// Refused frames tolerated per connection in this test.
const MAX_BAD: u64 = 100;
/// Bound on the whole run.
const DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_flooding_malformed_frames_is_cut_off_like_a_forged_flood() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let flood = FaultPlan {
        garbage: 1.0,
        ..FaultPlan::none(11)
    };
    let (remote, announcements) = flooding_remote(&own, flood, EVENTS).await;

    let mut config = loopback_engine_config();
    config.identity.bootstrap_relays = vec![remote.url()];
    config.caps.max_bad_events = MAX_BAD;
    let registry = prometheus::Registry::new();
    let manager = manager_into(&own.url(), config, registry.clone());
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    let malformed = || counter_value(&registry, "grasp_sync_events_dropped_total", "malformed");
    let cuts = || counter_value(&registry, "grasp_sync_refused_total", "bad_events_cut_off");
    let started = tokio::time::Instant::now();
    while cuts() < 2.0 {
        assert!(
            started.elapsed() < DEADLINE,
            "never cut off twice: {} malformed frames counted, {} cuts",
            malformed(),
            cuts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (counted, cut_count) = (malformed(), cuts());
    println!(
        "{} garbage frames injected: {counted} counted as malformed, {cut_count} cut-offs",
        remote.fault_counts().garbage
    );
    assert!(
        counted > MAX_BAD as f64,
        "the malformed frames were counted: {counted}"
    );
    assert!(
        counted <= cut_count * (MAX_BAD as f64 + 1.0) + MAX_BAD as f64,
        "at most threshold + 1 counted per connection: {counted} for {cut_count} cuts"
    );

    // The flood stops: the relay's announcements sync on its next connection.
    remote.stop_faults();
    wait_until_held(&own, &announcements, DEADLINE).await;
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
    assert!(summary.engine.dropped_malformed as f64 >= counted);
    assert_eq!(summary.engine.relays_cut_for_bad_events as f64, cuts());
}
