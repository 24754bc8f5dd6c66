//! A relay that never EOSEs a `limit: 0` REQ (the real nostr-rs-relay 0.8.12,
//! a process on 127.0.0.1; `.ci/install-nostr-rs-relay`) but answers WebSocket
//! pings is never reconnected: its pongs keep it alive, and live events keep
//! arriving on the subscription that never got its EOSE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::root;
use nostr::prelude::*;
use support::{
    announcement, connect_client, counter_value, loopback_engine_config, manager_into, sign, tag,
    NostrRsRelay, RecvError, TestRelay, TestRelayConfig,
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
    let remote = NostrRsRelay::start().await;
    let mut probe = connect_client(&remote.url()).await;
    probe
        .send(r#"["REQ","probe",{"kinds":[1621],"limit":0}]"#)
        .await;
    assert_eq!(
        probe.try_recv(Duration::from_secs(2)).await.err(),
        Some(RecvError::Timeout),
        "the relay answers a `limit: 0` REQ with nothing (no EOSE)"
    );
    probe.close().await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &remote.url()], base);
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issue = root(&maintainer, 1621, &repo, "issue", base + 1);
    own.add_event(&alpha).await;
    let mut loader = connect_client(&remote.url()).await;
    assert_eq!(
        loader.publish_all(&[alpha.clone(), issue.clone()], 2).await,
        2
    );
    loader.close().await;

    let batch_timeout = Duration::from_secs(2);
    let mut config = loopback_engine_config();
    config.timeouts.batch_timeout = batch_timeout;
    config.identity.service_relays = vec![own.url()];
    let registry = prometheus::Registry::new();
    let manager = manager_into(&own.url(), config, registry.clone());
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    let expected: BTreeSet<EventId> = [alpha.id, issue.id].into();
    let held = wait_for(&own, &expected).await;
    assert!(expected.is_subset(&held), "historic sync: {held:?}");
    let attempts = || {
        counter_value(
            &registry,
            "grasp_sync_connection_attempts_total",
            remote.url().as_str(),
        )
    };
    let started = attempts();
    assert!(started >= 1.0, "connected once");

    // Four batch timeouts of steady state: the live subscriptions never get
    // an EOSE, the relay sends nothing but pongs.
    tokio::time::sleep(batch_timeout * 4).await;
    assert_eq!(attempts(), started, "no reconnect in four batch timeouts");

    // Live events still arrive on the never-EOSEd subscription.
    let live = sign(
        &maintainer,
        1111,
        "live comment",
        vec![tag(&["E", &issue.id.to_hex()])],
        Timestamp::now().as_secs(),
    );
    let mut publisher = connect_client(&remote.url()).await;
    assert_eq!(
        publisher.publish_all(std::slice::from_ref(&live), 1).await,
        1
    );
    publisher.close().await;
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
