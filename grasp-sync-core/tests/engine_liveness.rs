//! A relay is alive while it sends anything — a frame, or a pong to the
//! driver's ping (`handle_relay_alive`) — not only once its live
//! subscriptions got their EOSE. nostr-rs-relay never EOSEs a `limit: 0`
//! REQ: a driver that pings must never reconnect it for that.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::time::Duration;

use grasp_sync_core::nip34::RepoRef;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig};
use sim::{config, own_url, relay_url, sim_relay_with, World, UNIX_ORIGIN};

/// nostr-rs-relay 0.8.12 as far as liveness goes: REQ only, no EOSE for a
/// `limit: 0` REQ.
fn nostr_rs_relay() -> SimRelayConfig {
    SimRelayConfig {
        nip77: Nip77Refusal::Notice,
        no_eose_for_limit_zero: true,
        ..SimRelayConfig::default()
    }
}

/// A synced world with one such relay holding one repository and an issue.
fn synced_world() -> (World, RelayUrl, RepoRef, Keys) {
    let maintainer = Keys::generate();
    let relay = relay_url("rs");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &relay], at);
    let repo = repo_ref(&maintainer, "alpha");
    let issue = events::root(&maintainer, 1621, &repo, "issue", at + 1);
    let held = vec![announcement.clone(), issue.clone()];
    let mut world = World::new(
        config(),
        vec![sim_relay_with("rs", held, nostr_rs_relay())],
        vec![announcement],
    );
    assert!(
        world.run_until(200_000, |w| w.stored().contains(&issue.id)
            && w.engine.historic_sync_complete()),
        "{}",
        world.dump()
    );
    (world, relay, repo, maintainer)
}

/// Runs `duration` of virtual time, every connected relay answering a
/// ping every `interval` when `pinging`.
fn run_pinging(world: &mut World, duration: Duration, interval: Duration, pinging: bool) {
    world.ping_every = pinging.then_some(interval);
    world.run_for(duration, 2_000_000);
}

#[test]
fn a_relay_that_never_eoses_limit_zero_but_answers_pings_is_never_reconnected() {
    let (mut world, relay, repo, user) = synced_world();
    let timeout = world.engine.config().timeouts.batch_timeout;
    let interval = world.engine.config().liveness_probe_interval();
    assert!(
        interval * 2 < timeout,
        "two pings within every batch timeout"
    );
    run_pinging(&mut world, timeout * 5, interval, true);
    let connects = world.relays[&relay].stats().connects;
    assert_eq!(
        connects,
        1,
        "answered pings through five batch timeouts: no reconnect\n{}",
        world.dump()
    );
    // Live coverage still works on the never-EOSEd subscription.
    let late = events::root(&user, 1621, &repo, "late issue", world.unix().as_secs());
    world.publish(&relay, late.clone());
    run_pinging(&mut world, interval, interval, true);
    assert!(world.stored().contains(&late.id), "{}", world.dump());
    assert_eq!(world.relays[&relay].stats().connects, 1);
}

#[test]
fn a_relay_that_sends_nothing_at_all_is_still_reconnected() {
    // The same relay without pings (a half-open socket, or a driver that
    // cannot ping): silence past the batch timeout with a live subscription
    // never answered still reconnects it.
    let (mut world, relay, _, _) = synced_world();
    let timeout = world.engine.config().timeouts.batch_timeout;
    let interval = world.engine.config().liveness_probe_interval();
    run_pinging(&mut world, timeout * 3, interval, false);
    assert!(
        world.relays[&relay].stats().connects > 1,
        "{}",
        world.dump()
    );
}
