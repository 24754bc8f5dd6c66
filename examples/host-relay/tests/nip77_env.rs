//! `NGIT_SYNC_DISABLE_NEGENTROPY=true` turns NIP-77 off when the host's configuration
//! leaves it to the environment (its own test binary: it sets the variable).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as relay_support;
mod support;

use std::time::Duration;

use grasp_sync_host_example::HostRelay;
use relay_support::TestRelayConfig;
use support::{wait_until, World, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nip77_switch_from_the_environment() {
    std::env::set_var("NGIT_SYNC_DISABLE_NEGENTROPY", "true");
    let world = World::start("host-nip77-env", TestRelayConfig::default()).await;
    let events = world.events();
    world.remote.add_events(&events.all()).await;
    let config = world.host_config();
    assert_eq!(config.negentropy, None, "the environment decides");
    let host = HostRelay::start(config).await.expect("the host starts");
    let purgatory = host.purgatory().clone();
    wait_until("A held", WAIT, || purgatory.holds(&events.announcement.id)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(world.remote.reqs_seen() > 0, "REQs were sent");
    assert_eq!(world.remote.neg_opens_seen(), 0, "NIP-77 is off");
    host.stop().await;
}
