//! A host on prometheus 0.13 (the reference GRASP server's version), whose registry
//! cannot take our 0.14 collectors, serves its own families and appends the sync's and
//! purgatory's text handles: one exposition in which every family appears once, the
//! host's own `ngit_sync_relays_connected_total` kept because ours is left out. (A family
//! with labels appears only once it has a series: a plain gauge, always exported, makes
//! the clash show without a relay.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{ChannelSink, MemoryAnnouncements, Purgatory};
use grasp_sync_tokio::{RelayStore, SyncManager};
use nostr::prelude::RelayUrl;
use prometheus_013::Encoder as _;

/// The host's `/metrics` body: its own families (0.13), then the handles' text.
fn body(host: &prometheus_013::Registry, handles: &[String]) -> String {
    let mut out = Vec::new();
    prometheus_013::TextEncoder::new()
        .encode(&host.gather(), &mut out)
        .unwrap();
    let mut body = String::from_utf8(out).unwrap();
    for text in handles {
        body.push_str(text);
    }
    body
}

/// How many times each family is declared (`# TYPE <name> <type>`) in `body`.
fn declared(body: &str) -> BTreeMap<&str, usize> {
    let mut families = BTreeMap::new();
    for line in body.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.split(' ').next())
        {
            *families.entry(name).or_default() += 1;
        }
    }
    families
}

/// The sync manager as the host builds it, under its prefix.
fn sync_manager(
    settings: impl FnOnce(grasp_sync_tokio::SyncManagerBuilder) -> grasp_sync_tokio::SyncManagerBuilder,
) -> SyncManager {
    let own = RelayUrl::parse("ws://127.0.0.1:1").unwrap();
    settings(
        SyncManager::builder()
            .own_relay(own.clone())
            .store(Arc::new(RelayStore::new(own, Duration::from_secs(10))))
            .metrics_prefix("ngit_sync"),
    )
    .build()
    .expect("a manager")
}

#[test]
fn a_prometheus_013_host_appends_our_text_and_keeps_its_own_family() {
    let host = prometheus_013::Registry::new();
    let hosts_own =
        prometheus_013::IntGauge::new("ngit_sync_relays_connected_total", "the host's own")
            .unwrap();
    host.register(Box::new(hosts_own.clone())).unwrap();
    hosts_own.set(7);
    let root = std::env::temp_dir().join(format!("grasp-sync-013-{}", std::process::id()));
    let purgatory = Purgatory::builder()
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repos_root(&root)
        .sink(Arc::new(ChannelSink::new().0))
        .build()
        .expect("purgatory builds");

    // Ours left out: each family once, the host's with its value.
    let manager = sync_manager(|builder| builder.leave_out_metric("relays_connected_total"));
    let body_kept = body(
        &host,
        &[
            manager.metrics_handle().text(),
            purgatory.metrics_handle().text(),
        ],
    );
    let families = declared(&body_kept);
    let twice: Vec<_> = families.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "declared more than once: {twice:?}");
    assert_eq!(families.get("ngit_sync_relays_connected_total"), Some(&1));
    let values: Vec<&str> = body_kept
        .lines()
        .filter(|line| line.starts_with("ngit_sync_relays_connected_total "))
        .collect();
    assert_eq!(
        values,
        ["ngit_sync_relays_connected_total 7"],
        "the host's value"
    );
    assert!(families.contains_key("ngit_sync_relays_tracked_total"));
    assert!(families.contains_key("purgatory_events_held"));

    // Not left out, the name would be declared twice: the scrape would fail.
    let clashing = sync_manager(|builder| builder);
    let body_clash = body(&host, &[clashing.metrics_handle().text()]);
    assert_eq!(
        declared(&body_clash).get("ngit_sync_relays_connected_total"),
        Some(&2)
    );
}
