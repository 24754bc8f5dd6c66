//! No fixed wait at start: the own relay's history is one batch, planned
//! when it has been read completely; the batch window is for live events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::time::Duration;

use grasp_sync_core::engine::Command;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

fn first_connect_to(world: &World, relay: &RelayUrl) -> Option<grasp_sync_core::Instant> {
    world
        .command_log
        .iter()
        .find_map(|(at, command)| match command {
            Command::Connect { relay: r, .. } if r == relay => Some(*at),
            _ => None,
        })
}

#[test]
fn the_startup_history_is_planned_when_read_not_after_the_batch_window() {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at);
    let issue = events::root(
        &user,
        1621,
        &repo_ref(&maintainer, "alpha"),
        "issue",
        at + 1,
    );
    let window = Duration::from_secs(5);
    let mut config = config();
    config.timeouts.batch_window = window;
    let mut world = World::new(
        config,
        vec![sim_relay("a", vec![announcement.clone(), issue.clone()])],
        vec![announcement.clone()],
    );
    assert!(
        world.run_until(100_000, |w| w.stored().contains(&issue.id)),
        "{}",
        world.dump()
    );
    let connected = first_connect_to(&world, &a).expect("the listed relay is connected");
    assert!(
        connected.saturating_duration_since(grasp_sync_core::Instant::ZERO) < window,
        "connected at {connected:?}, not after the {window:?} window"
    );

    // A live event after the history still waits for the window (once the
    // window that events stored meanwhile opened has closed).
    world.run_for(window + Duration::from_secs(1), 100_000);
    let later = events::announcement(&user, "beta", &[&own_url(), &relay_url("b")], at + 5);
    let now = world.clock();
    world.engine.handle_own_events(now, [later]);
    world.run_for(window + Duration::from_secs(1), 100_000);
    let connected = first_connect_to(&world, &relay_url("b")).expect("planned after the window");
    assert!(
        connected.saturating_duration_since(now.instant) >= window,
        "fed at {:?}, connected at {connected:?}: live events wait the window",
        now.instant
    );
}

/// The bootstrap relay's Layer 1 history names a relay: once that history
/// has ended and what it brought is stored, the named relay is asked for at
/// once — not after the self-subscriber's batch window.
#[test]
fn relays_named_by_a_completed_history_read_are_asked_at_once() {
    let maintainer = Keys::generate();
    let a = relay_url("a");
    let b = relay_url("b");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &b], at);
    let window = Duration::from_secs(5);
    let mut config = config();
    config.timeouts.batch_window = window;
    config.identity.bootstrap_relays = vec![a.clone()];
    let mut world = World::new(
        config,
        vec![
            sim_relay("a", vec![announcement.clone()]),
            sim_relay("b", Vec::new()),
        ],
        Vec::new(),
    );
    assert!(
        world.run_until(100_000, |w| first_connect_to(w, &b).is_some()),
        "{}",
        world.dump()
    );
    let stored_at = world
        .command_log
        .iter()
        .find_map(|(at, command)| match command {
            Command::Store { event, .. } if event.id == announcement.id => Some(*at),
            _ => None,
        })
        .expect("the announcement was stored");
    let connected = first_connect_to(&world, &b).expect("the named relay is connected");
    let waited = connected.saturating_duration_since(stored_at);
    assert!(
        waited < Duration::from_millis(500),
        "stored at {stored_at:?}, the relay it names connected {waited:?} later"
    );
}
