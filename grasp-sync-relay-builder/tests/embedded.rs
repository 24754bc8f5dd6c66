//! A nostr-relay-builder relay embedding the sync through the bridge: an
//! announcement published to it starts the sync, and the events synced from
//! a remote relay reach the relay's own live subscribers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use grasp_sync_relay_builder::{r44, Bridge};
use grasp_sync_tokio::SyncManager;
use nostr::prelude::*;
use support::{
    announcement, connect_client, loopback_engine_config, sign, tag, try_connect_client, TestRelay,
    TestRelayConfig,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_events_reach_the_embedding_relays_subscribers() {
    // The embedding relay: a relay-builder relay with the bridge.
    let database = Arc::new(r44::MemoryDatabase::with_opts(r44::MemoryDatabaseOptions {
        events: true,
        max_events: None,
    }));
    let bridge = Bridge::new(database);
    let relay = r44::LocalRelay::new(
        r44::RelayBuilder::default()
            .addr(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
            .database(bridge.database()),
    );
    // Binds and spawns its accept loop.
    relay.run().await.expect("the relay listens");
    let url = RelayUrl::parse(relay.url().await.as_str()).unwrap();
    // `run` binds in its task: wait until the relay answers (bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while try_connect_client(&url).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A remote relay holding the repository's issues and replies.
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 1_000;
    let alpha = announcement(&maintainer, "alpha", &[&url, &remote.url()], base);
    let repo = RepoRef::new(maintainer.public_key(), "alpha")
        .unwrap()
        .to_string();
    let issue = sign(&user, 1621, "issue", vec![tag(&["a", &repo])], base + 1);
    let reply = sign(
        &user,
        1111,
        "reply",
        vec![tag(&["E", &issue.id.to_hex()])],
        base + 2,
    );
    remote
        .add_events(&[alpha.clone(), issue.clone(), reply.clone()])
        .await;

    let manager = SyncManager::builder()
        .service_relay(url.clone())
        .engine_config(loopback_engine_config())
        .store(Arc::new(bridge.store(relay.clone())))
        .build()
        .unwrap();
    bridge.forward_accepted_to(manager.own_events_sender());
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    // A client of the embedding relay, listening live.
    let mut subscriber = connect_client(&url).await;
    subscriber
        .subscribe(
            "live",
            vec![Filter::new().kinds([Kind::Custom(1621), Kind::Custom(1111)])],
        )
        .await;
    // The repository's announcement is published to the embedding relay:
    // the bridge reports it to the sync once stored.
    let mut publisher = connect_client(&url).await;
    let (accepted, message) = publisher.publish(&alpha).await;
    assert!(accepted, "{message}");

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "seen {seen:?}");
        let event = tokio::time::timeout(Duration::from_secs(30), subscriber.next_event("live"))
            .await
            .expect("a synced event reaches the subscriber");
        seen.push(event.id);
    }
    assert!(seen.contains(&issue.id) && seen.contains(&reply.id));

    shutdown.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(5), run).await;
    relay.shutdown();
}
