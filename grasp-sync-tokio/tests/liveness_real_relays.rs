//! A relay that never EOSEs a `limit: 0` REQ (nostr-rs-relay 0.8.12, emulated
//! by the proxy in front of a real nostr-relay-builder relay) but answers
//! WebSocket pings is never reconnected: its pongs keep it alive, and live
//! events keep arriving on the subscription that never got its EOSE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use grasp_sync_tokio::{RelayStore, SyncManager};
use nostr::prelude::*;
use support::{
    announcement, counter_value, loopback_engine_config, sign, tag, Nip77Mode, TestRelay,
    TestRelayConfig,
};

const WAIT: Duration = Duration::from_secs(30);

/// Polls `own` until it holds `expected` (bounded).
async fn wait_for(own: &TestRelay, expected: &BTreeSet<EventId>) -> BTreeSet<EventId> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let held = own.event_ids().await;
        if expected.is_subset(&held) || tokio::time::Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_without_eose_for_limit_zero_is_not_reconnected_and_stays_live() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    // nostr-rs-relay: no NIP-77, no EOSE for a `limit: 0` REQ.
    let remote = TestRelay::start(TestRelayConfig {
        nip77: Nip77Mode::RefuseNotice,
        no_eose_for_limit_zero: true,
        ..TestRelayConfig::default()
    })
    .await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &remote.url()], base);
    let repo = RepoRef::new(maintainer.public_key(), "alpha")
        .unwrap()
        .to_string();
    let issue = sign(
        &maintainer,
        1621,
        "issue",
        vec![tag(&["a", &repo])],
        base + 1,
    );
    own.add_event(&alpha).await;
    remote.add_events(&[alpha.clone(), issue.clone()]).await;

    let batch_timeout = Duration::from_secs(2);
    let mut config = loopback_engine_config();
    config.batch_timeout = batch_timeout;
    config.service_relays = vec![own.url()];
    let registry = prometheus::Registry::new();
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(config)
        .registry(registry.clone())
        .build()
        .unwrap();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    let expected: BTreeSet<EventId> = [alpha.id, issue.id].into();
    let held = wait_for(&own, &expected).await;
    assert!(expected.is_subset(&held), "historic sync: {held:?}");
    let attempts = || {
        counter_value(
            &registry,
            "ngit_sync_connection_attempts_total",
            remote.url().as_str(),
        )
    };
    let started = attempts();
    assert!(started >= 1.0, "connected once");

    // Four batch timeouts of steady state: the live subscriptions never got
    // an EOSE, the relay sends nothing but pongs.
    tokio::time::sleep(batch_timeout * 4).await;
    assert!(
        remote.eoses_swallowed() >= 2,
        "the live REQs' EOSEs were swallowed: {}",
        remote.eoses_swallowed()
    );
    assert_eq!(attempts(), started, "no reconnect in four batch timeouts");
    assert_eq!(remote.connections_seen(), 1, "one connection all along");

    // Live events still arrive on the never-EOSEd subscription.
    let live = sign(
        &maintainer,
        1111,
        "live comment",
        vec![tag(&["E", &issue.id.to_hex()])],
        Timestamp::now().as_secs(),
    );
    remote.publish(&live).await;
    let mut expected = expected;
    expected.insert(live.id);
    let held = wait_for(&own, &expected).await;
    assert!(held.contains(&live.id), "the live event arrived");
    assert_eq!(attempts(), started, "still no reconnect");

    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(2), run)
        .await
        .expect("stops")
        .expect("no panic");
}
