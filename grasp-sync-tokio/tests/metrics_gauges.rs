//! The connection gauges follow the connection, not a tick: a relay that
//! stops reads as disconnected (`grasp_sync_relay_connected{relay} 0`, one
//! fewer in `grasp_sync_relays_connected_total`) within a second, three
//! times over (the tick is 2 s, so a gauge refreshed only on the tick would
//! pass one round by luck about half of the time, three in a row rarely).
//! And [`MetricsHandle::text`] encodes our families only, under the prefix
//! the host chose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_tokio::{RelayStore, SyncManager};
use nostr::prelude::*;
use support::{announcement, loopback_engine_config, manager_into, TestRelay, TestRelayConfig};

/// How long a gauge may lag the connection.
const WITHIN: Duration = Duration::from_secs(1);
/// How often the gauge is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// The gauge `name`'s value (the series whose `relay` label is `relay`, if
/// given), or `None` when there is no such series.
fn gauge(registry: &prometheus::Registry, name: &str, relay: Option<&RelayUrl>) -> Option<i64> {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric().to_vec())
        .find(|metric| {
            relay.is_none_or(|relay| {
                metric
                    .get_label()
                    .iter()
                    .any(|label| label.name() == "relay" && label.value() == relay.as_str())
            })
        })
        .map(|metric| metric.get_gauge().get_value() as i64)
}

/// Polls every [`POLL`] until `holds` is true; `false` when `within` passed.
async fn becomes(within: Duration, mut holds: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if holds() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_relay_reads_as_disconnected_within_a_second() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let mut remote = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &remote.url()], base);
    own.add_event(&alpha).await;
    remote.add_event(&alpha).await;

    let registry = prometheus::Registry::new();
    let manager = manager_into(&own.url(), loopback_engine_config(), registry.clone());
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let url = remote.url();
    let connected = || gauge(&registry, "grasp_sync_relay_connected", Some(&url));
    let total = || gauge(&registry, "grasp_sync_relays_connected_total", None);

    for round in 1..=3 {
        assert!(
            becomes(Duration::from_secs(30), || connected() == Some(1)).await,
            "round {round}: the remote relay connects"
        );
        let before = total().expect("the connected count is registered");
        assert!(before >= 1, "round {round}: the remote counts as connected");
        remote.stop().await;
        let dropped = becomes(WITHIN, || {
            connected() == Some(0) && total() == Some(before - 1)
        })
        .await;
        assert!(
            dropped,
            "round {round}: within {WITHIN:?} of the stop the gauges read connected {:?}, \
             connected total {:?} (was {before})",
            connected(),
            total()
        );
        remote.restart().await;
    }

    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_export_holds_only_our_families_under_the_chosen_prefix() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let host = prometheus::Registry::new();
    let hosts_own = prometheus::IntGauge::new("host_relay_connected", "the host's").unwrap();
    host.register(Box::new(hosts_own.clone())).unwrap();
    hosts_own.set(4);
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(loopback_engine_config())
        .registry(host.clone())
        .metrics_prefix("ngit_sync")
        .build()
        .expect("a manager");
    let handle = manager.metrics_handle();
    let text = handle.text();
    assert!(
        text.contains("# TYPE ngit_sync_relays_connected_total gauge"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE ngit_sync_events_synced_total counter"),
        "{text}"
    );
    assert!(!text.contains("host_relay_connected"), "{text}");
    assert!(!text.contains("grasp_sync_"), "{text}");
    // The host's registry holds ours beside its own.
    let names: Vec<String> = host
        .gather()
        .iter()
        .map(|family| family.name().to_owned())
        .collect();
    assert!(names.iter().any(|name| name == "host_relay_connected"));
    assert!(names
        .iter()
        .any(|name| name == "ngit_sync_relays_connected_total"));
    // The handle reads live values while the manager runs: the bytes sent
    // to the own relay (its self-subscription) appear.
    assert!(!text.contains("ngit_sync_bytes_sent_total{"), "{text}");
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let sent = format!("ngit_sync_bytes_sent_total{{relay=\"{}\"}} ", own.url());
    let tracked = || {
        handle.text().lines().any(|line| {
            line.strip_prefix(&sent)
                .and_then(|value| value.parse::<u64>().ok())
                .is_some_and(|bytes| bytes > 0)
        })
    };
    assert!(
        becomes(Duration::from_secs(5), tracked).await,
        "{}",
        handle.text()
    );
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
}

#[test]
fn a_prefix_prometheus_refuses_is_a_build_error() {
    let built = SyncManager::builder()
        .own_relay(RelayUrl::parse("ws://127.0.0.1:1").unwrap())
        .store(Arc::new(RelayStore::new(
            RelayUrl::parse("ws://127.0.0.1:1").unwrap(),
            Duration::from_secs(10),
        )))
        .metrics_prefix("not a name")
        .build();
    assert!(matches!(
        built,
        Err(grasp_sync_tokio::BuildError::Metrics(_))
    ));
}
