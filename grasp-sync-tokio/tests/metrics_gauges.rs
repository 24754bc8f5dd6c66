//! The connection gauges follow the connection, not a tick: a relay that
//! stops reads as disconnected (`grasp_sync_relay_connected{relay} 0`, one
//! fewer in `grasp_sync_relays_connected_total`) within a second, three
//! times over (the tick is 2 s, so a gauge refreshed only on the tick would
//! pass one round by luck about half of the time, three in a row rarely).
//! And [`MetricsHandle::text`] encodes our families only, under the prefix
//! the host chose. A host keeps its own family of one of our names by
//! leaving ours out, and the reference GRASP server's families read as its
//! documentation says against a real relay.
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
    gauge_of(registry, name, relay.map(RelayUrl::as_str))
}

/// [`gauge`], the relay given as text.
fn gauge_of(registry: &prometheus::Registry, name: &str, relay: Option<&str>) -> Option<i64> {
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
                    .any(|label| label.name() == "relay" && label.value() == relay)
            })
        })
        .map(|metric| metric.get_gauge().get_value() as i64)
}

/// The value of the sample line `series` (`name{labels}`) in Prometheus
/// text, if there is one.
fn text_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
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

/// A host with its own `ngit_sync_relay_connected` (the reference server's
/// 0–4 state, here 3 for a relay of its own) in the registry it gives us,
/// our families under the same prefix: ours is left out, and the host's
/// family is exported with the host's values only, by the registry and not
/// at all by our text, while our other families run live beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_keeps_its_own_family_of_our_name_when_ours_is_left_out() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &remote.url()], base);
    own.add_event(&alpha).await;
    remote.add_event(&alpha).await;

    let host = prometheus::Registry::new();
    let hosts_family = prometheus::IntGaugeVec::new(
        prometheus::Opts::new("ngit_sync_relay_connected", "the host's own 0-4 state"),
        &["relay"],
    )
    .unwrap();
    host.register(Box::new(hosts_family.clone())).unwrap();
    hosts_family
        .with_label_values(&["wss://hosts-own.example"])
        .set(3);
    let builder = || {
        SyncManager::builder()
            .own_relay(own.url())
            .store(Arc::new(RelayStore::new(
                own.url(),
                Duration::from_secs(10),
            )))
            .engine_config(loopback_engine_config())
            .registry(host.clone())
            .metrics_prefix("ngit_sync")
    };
    // Without leaving ours out, the two families cannot share the registry.
    assert!(matches!(
        builder().build(),
        Err(grasp_sync_tokio::BuildError::Metrics(_))
    ));
    let manager = builder()
        .leave_out_metric("relay_connected")
        .build()
        .expect("ours left out, the host's family stays");
    let handle = manager.metrics_handle();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    // Our families run: the remote relay connects.
    let url = remote.url();
    assert!(
        becomes(Duration::from_secs(30), || {
            gauge(&host, "ngit_sync_relays_connected_total", None) == Some(1)
                && gauge(&host, "ngit_sync_relay_status", Some(&url)) == Some(1)
        })
        .await,
        "{}",
        handle.text()
    );
    let families = host.gather();
    let connected: Vec<_> = families
        .iter()
        .filter(|family| family.name() == "ngit_sync_relay_connected")
        .collect();
    assert_eq!(connected.len(), 1, "one family of the name");
    assert_eq!(connected[0].help(), "the host's own 0-4 state");
    let series: Vec<(String, f64)> = connected[0]
        .get_metric()
        .iter()
        .map(|metric| {
            (
                metric.get_label()[0].value().to_owned(),
                metric.get_gauge().get_value(),
            )
        })
        .collect();
    assert_eq!(
        series,
        [("wss://hosts-own.example".to_owned(), 3.0)],
        "the host's values only: ours wrote nothing into it"
    );
    let text = handle.text();
    assert!(!text.contains("ngit_sync_relay_connected"), "{text}");
    assert!(
        text.contains("# TYPE ngit_sync_relays_connected_total gauge"),
        "{text}"
    );
    assert_eq!(
        text_value(&text, &format!("ngit_sync_relay_status{{relay=\"{url}\"}}")),
        Some(1.0),
        "{text}"
    );

    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
}

/// The reference GRASP server's families, named by
/// `reference_server_metrics`, mean what its documentation says
/// (ngit-grasp's `docs/explanation/monitoring.md`): a connected relay reads
/// `ngit_sync_relay_connected` >= 2 (what its own tests read as connected),
/// 3 once its historic sync is confirmed, and 0 (disconnected) or 1
/// (connecting) once it stops; `ngit_sync_relay_status` is 1 (healthy) while
/// it is up and 2 (disconnected) or 3 (degraded) after;
/// `ngit_sync_connection_attempts_total` counts `success` and `failure` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_families_read_as_it_documents_them() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let mut remote = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &remote.url()], base);
    own.add_event(&alpha).await;
    remote.add_event(&alpha).await;

    let host = prometheus::Registry::new();
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(loopback_engine_config())
        .registry(host.clone())
        .reference_server_metrics()
        .build()
        .expect("a manager");
    let handle = manager.metrics_handle();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let url = remote.url();
    let state = || gauge(&host, "ngit_sync_relay_connected", Some(&url));
    let health = || gauge(&host, "ngit_sync_relay_status", Some(&url));

    assert!(
        becomes(Duration::from_secs(30), || state().is_some_and(|s| s >= 2)).await,
        "connected reads >= 2: {}",
        handle.text()
    );
    tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|status| status.historic_sync_complete),
    )
    .await
    .expect("historic sync completes")
    .expect("the manager runs");
    assert!(
        becomes(Duration::from_secs(5), || state() == Some(3)).await,
        "historic sync confirmed reads 3 (connected): {:?}\n{}",
        state(),
        handle.text()
    );
    assert_eq!(health(), Some(1), "healthy");
    assert!(gauge(&host, "ngit_sync_relays_connected_total", None) >= Some(1));
    assert_eq!(
        gauge(&host, "ngit_sync_relays_tracked_total", None),
        Some(1)
    );
    assert_eq!(gauge(&host, "ngit_sync_relays_dead_total", None), Some(0));
    assert_eq!(
        gauge(&host, "ngit_sync_relay_failures", Some(&url)),
        Some(0)
    );

    remote.stop().await;
    assert!(
        becomes(WITHIN, || matches!(state(), Some(0 | 1))).await,
        "a stopped relay reads 0 (disconnected) or 1 (connecting): {:?}",
        state()
    );
    assert!(
        becomes(Duration::from_secs(5), || matches!(health(), Some(2 | 3))).await,
        "a stopped relay's health reads 2 (disconnected) or 3 (degraded): {:?}",
        health()
    );

    let text = handle.text();
    let success =
        format!("ngit_sync_connection_attempts_total{{relay=\"{url}\",result=\"success\"}}");
    assert!(
        text_value(&text, &success).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    let attempts: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("ngit_sync_connection_attempts_total{"))
        .collect();
    assert!(
        attempts
            .iter()
            .all(|line| line.contains("result=\"success\"") || line.contains("result=\"failure\"")),
        "success and failure only: {attempts:?}"
    );
    // The families the reference server has no equivalent of keep our
    // prefix; those it has moved to its names.
    assert!(
        text.contains("# TYPE grasp_sync_bytes_sent_total counter"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE ngit_sync_events_synced_total counter"),
        "{text}"
    );
    assert!(!text.contains("grasp_sync_relay_status"), "{text}");

    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
}

#[test]
fn an_unknown_family_or_a_bad_family_name_is_a_build_error() {
    let builder = || {
        SyncManager::builder()
            .own_relay(RelayUrl::parse("ws://127.0.0.1:1").unwrap())
            .store(Arc::new(RelayStore::new(
                RelayUrl::parse("ws://127.0.0.1:1").unwrap(),
                Duration::from_secs(10),
            )))
    };
    use grasp_sync_tokio::{BuildError, MetricFamiliesError};
    let unknown = builder().leave_out_metric("relay_conected").build();
    assert!(
        matches!(
            &unknown,
            Err(BuildError::MetricFamilies(MetricFamiliesError::UnknownFamily { family, .. }))
                if family == "relay_conected"
        ),
        "{unknown:?}"
    );
    let bad = builder()
        .metric_name("relay_connected", "relay connected")
        .build();
    assert!(
        matches!(
            bad,
            Err(BuildError::MetricFamilies(
                MetricFamiliesError::InvalidName { .. }
            ))
        ),
        "a bad name"
    );
    let clash = builder()
        .metric_name("relay_status", "grasp_sync_relay_connected")
        .build();
    assert!(matches!(
        clash,
        Err(BuildError::MetricFamilies(
            MetricFamiliesError::DuplicateName { .. }
        ))
    ));
    // The reference set's 0-4 state under the name our 0/1 gauge would
    // take with the reference prefix: a clash, unless ours is left out.
    assert!(builder()
        .metrics_prefix("ngit_sync")
        .reference_server_metrics()
        .build()
        .is_err());
    assert!(builder()
        .metrics_prefix("ngit_sync")
        .reference_server_metrics()
        .leave_out_metric("relay_connected")
        .leave_out_metric("connection_attempts_total")
        .build()
        .is_ok());
}
