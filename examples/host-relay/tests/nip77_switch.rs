//! The NIP-77 switch: off, a relay that serves NIP-77 sees REQs and never a
//! NEG-OPEN; on, it sees NEG-OPEN.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as relay_support;
mod support;

use std::time::Duration;

use grasp_sync_host_example::HostRelay;
use relay_support::TestRelayConfig;
use support::{wait_until, World, WAIT};

/// Runs the host with `negentropy` until it holds the announcement; returns the
/// REQs and NEG-OPENs the remote relay saw.
async fn requests_seen(name: &str, negentropy: bool) -> (usize, usize) {
    let world = World::start(name, TestRelayConfig::default()).await;
    let events = world.events();
    world.remote.add_events(&events.all()).await;
    let mut config = world.host_config();
    config.negentropy = Some(negentropy);
    let host = HostRelay::start(config).await.expect("the host starts");
    let purgatory = host.purgatory().clone();
    wait_until("A held", WAIT, || purgatory.holds(&events.announcement.id)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = (world.remote.reqs_seen(), world.remote.neg_opens_seen());
    host.stop().await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nip77_switch() {
    let (reqs, neg_opens) = requests_seen("host-nip77-off", false).await;
    assert!(reqs > 0, "REQs were sent");
    assert_eq!(neg_opens, 0, "NIP-77 is off");

    let (_, neg_opens) = requests_seen("host-nip77-on", true).await;
    assert!(neg_opens > 0, "NIP-77 is on: the relay serves it");
}
