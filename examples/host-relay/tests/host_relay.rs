//! The host through its front (a user's state is held with `OK true "purgatory: …"`
//! and served once its data arrives) and its registry (the connected-relays gauge
//! follows a relay stopping).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as relay_support;
mod support;

use std::time::Duration;

use grasp_sync_host_example::relay::PURGATORY_MESSAGE;
use grasp_sync_host_example::HostRelay;
use grasp_sync_test_support::nip34::noise;
use relay_support::{connect_client, TestRelayConfig};
use support::{gauge, served, wait_served, wait_until, World, WAIT};

/// The sync's connected-relays gauge.
const CONNECTED: &str = "grasp_sync_relays_connected_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_gauge_drops_within_a_second() {
    let mut world = World::start("host-gauge", TestRelayConfig::default()).await;
    let mut config = world.host_config();
    config.bootstrap_relays = vec![world.remote.url()];
    let host = HostRelay::start(config).await.expect("the host starts");
    let registry = host.registry().clone();
    wait_until("the remote relay connected", WAIT, || {
        gauge(&registry, CONNECTED) == 1.0
    })
    .await;

    world.remote.stop().await;
    let stopped = tokio::time::Instant::now();
    while gauge(&registry, CONNECTED) != 0.0 {
        assert!(
            stopped.elapsed() < Duration::from_secs(1),
            "the gauge still reads {} a second after the relay stopped",
            gauge(&registry, CONNECTED)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("connected gauge read 0 after {:?}", stopped.elapsed());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_holds_a_users_state_until_its_data_arrives() {
    let world = World::start("host-front", TestRelayConfig::default()).await;
    let events = world.events();
    let mut config = world.host_config();
    config.bootstrap_relays.clear();
    let host = HostRelay::start(config).await.expect("the host starts");
    let mut client = connect_client(host.url()).await;

    // The announcement and the state wait: the commit is not on the git server.
    for event in [&events.announcement, &events.state] {
        let (accepted, message) = client.publish(event).await;
        assert!(accepted, "held events are accepted: {message}");
        assert_eq!(message, PURGATORY_MESSAGE);
    }
    // Any other event goes to the relay as usual.
    let note = noise(&world.contributor, "hello", 1_700_000_000);
    let (accepted, message) = client.publish(&note).await;
    assert!(accepted, "{message}");
    assert!(!message.starts_with("purgatory"), "{message}");
    // Malformed frames are answered with a NOTICE; the connection stays up.
    for frame in ["[\"EVENT\",{\"kind\":30618}]", "not json"] {
        client.send(frame).await;
        let answer = client
            .recv_text(Duration::from_secs(5))
            .await
            .expect("an answer");
        assert!(answer.starts_with("[\"NOTICE\""), "{answer}");
    }
    let after = noise(&world.contributor, "still here", 1_700_000_001);
    assert!(client.publish(&after).await.0);
    let held = [events.announcement.id, events.state.id];
    assert_eq!(served(host.url(), &[note.id]).await, vec![note.id]);
    assert!(
        served(host.url(), &held).await.is_empty(),
        "held events are not served"
    );

    // The data arrives: the scheduler fetches from the held announcement's clone URL.
    world.publish_commit();
    wait_served("A and S released", host.url(), &held).await;
    assert!(!host.purgatory().holds(&events.state.id));
    client.close().await;
    host.stop().await;
}
