//! A held announcement: its states are synced while the host holds it, its PRs,
//! issues and replies only once its git data arrives and the host promotes it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as relay_support;
mod support;

use std::time::Duration;

use git_support::git;
use grasp_sync_host_example::HostRelay;
use relay_support::TestRelayConfig;
use support::{served, wait_served, wait_until, World, WAIT};

/// Whether `frame` (a REQ or NEG-OPEN) asks for events tagging `coordinate`.
fn asks_for_tagged(frame: &str, coordinate: &str) -> bool {
    frame.contains("\"#a\"") && frame.contains(coordinate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_announcement_states_first_rest_after_promotion() {
    let world = World::start("host-held-announcement", TestRelayConfig::default()).await;
    let events = world.events();
    world.remote.add_events(&events.all()).await;
    let mut config = world.host_config();
    config.negentropy = Some(true);
    let host = HostRelay::start(config).await.expect("the host starts");
    let purgatory = host.purgatory().clone();

    // The announcement and its state reach the host's purgatory (the store answered
    // Held): the commit is not on the git server.
    wait_until("A and S held", WAIT, || {
        purgatory.holds(&events.announcement.id) && purgatory.holds(&events.state.id)
    })
    .await;
    // Give the sync time to ask for more if it were going to.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let coordinate = world.coordinate();
    let tagged: Vec<String> = ["REQ", "NEG-OPEN"]
        .iter()
        .flat_map(|verb| world.tap.requests(verb))
        .filter(|frame| asks_for_tagged(frame, &coordinate))
        .collect();
    assert!(
        tagged.is_empty(),
        "the held repository's PRs and issues were asked for: {tagged:?}"
    );
    let rest = [events.pr.id, events.issue.id, events.reply.id];
    assert!(served(host.url(), &rest).await.is_empty());
    assert!(!purgatory.holds(&events.pr.id));
    let held = [events.announcement.id, events.state.id];
    assert!(
        served(host.url(), &held).await.is_empty(),
        "held events are not served"
    );

    // The commit arrives: the scheduler fetches it, the state and announcement are
    // released and served, the repository promoted, and the rest synced.
    world.publish_commit();
    wait_served("A and S released", host.url(), &held).await;
    wait_served("the PR, issue and reply synced", host.url(), &rest).await;
    assert!(world
        .tap
        .requests("NEG-OPEN")
        .iter()
        .chain(world.tap.requests("REQ").iter())
        .any(|frame| asks_for_tagged(frame, &coordinate)));

    // The host serves the state's refs from its own repository.
    let listing = git(
        &world.dir.join("host-git"),
        &["ls-remote", &world.host_repository().display().to_string()],
    );
    assert!(
        listing.contains(&format!("{}\trefs/heads/b0", world.commit)),
        "the served repository has the state's ref: {listing}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_held_event_fetched_twice_on_resync() {
    let world = World::start("host-resync", TestRelayConfig::default()).await;
    let events = world.events();
    world.remote.add_events(&events.all()).await;
    let mut config = world.host_config();
    config.negentropy = Some(true);
    let mut host = HostRelay::start(config).await.expect("the host starts");
    let purgatory = host.purgatory().clone();
    wait_until("S held", WAIT, || purgatory.holds(&events.state.id)).await;
    // Let the first run settle: whatever it fetches of S, it has fetched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let state_id = events.state.id.to_hex();
    let sent = world.tap.events_sent_with_id(&state_id);
    assert!(sent >= 1, "the first run fetched S");

    // A fresh engine over the same store reconciles Layer 1 again.
    let neg_opens = world.tap.requests("NEG-OPEN").len();
    host.restart_sync().await.expect("the sync restarts");
    wait_until("a second reconciliation", WAIT, || {
        world.tap.requests("NEG-OPEN").len() > neg_opens
    })
    .await;
    let mut status = host.sync_status();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !status.borrow().historic_sync_complete {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the re-sync never completed"
        );
        let _ = tokio::time::timeout(Duration::from_millis(200), status.changed()).await;
    }
    assert!(purgatory.holds(&events.state.id));
    assert_eq!(
        status.borrow().repositories,
        1,
        "the restarted sync knows the held repository"
    );
    assert_eq!(
        world.tap.events_sent_with_id(&state_id),
        sent,
        "the held state was sent again on the re-sync"
    );
    let coordinate = world.coordinate();
    let tagged = ["REQ", "NEG-OPEN"]
        .iter()
        .flat_map(|verb| world.tap.requests(verb))
        .filter(|frame| asks_for_tagged(frame, &coordinate))
        .count();
    assert_eq!(
        tagged, 0,
        "the restarted sync keeps to the held repository's states"
    );
    host.stop().await;
}
