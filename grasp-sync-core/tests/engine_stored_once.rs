//! An event stored once is not handed to the store again when it comes back
//! from another relay (until the daily re-sync, which compares with the store
//! itself).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use grasp_sync_core::engine::Command;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig};
use sim::{config, own_url, relay_url, sim_relay_with, World, UNIX_ORIGIN};

fn stores_of(world: &World, id: &EventId) -> usize {
    world
        .command_log
        .iter()
        .filter(|(_, command)| matches!(command, Command::Store { event, .. } if event.id == *id))
        .count()
}

#[test]
fn an_event_coming_back_after_it_was_stored_is_not_stored_again() {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let (a, b) = (relay_url("a"), relay_url("b"));
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a, &b], at);
    let issue = events::root(
        &user,
        1621,
        &repo_ref(&maintainer, "alpha"),
        "issue",
        at + 1,
    );
    // REQ only: nothing compares with the store before downloading.
    let req_only = || SimRelayConfig {
        nip77: Nip77Refusal::Notice,
        ..SimRelayConfig::default()
    };
    let held = vec![announcement.clone(), issue.clone()];
    let mut world = World::new(
        config(),
        vec![
            sim_relay_with("a", held.clone(), req_only()),
            sim_relay_with("b", held, req_only()),
        ],
        vec![announcement.clone()],
    );
    assert!(
        world.run_until(200_000, |w| w.stored().contains(&issue.id)),
        "{}",
        world.dump()
    );
    // Until both relays' historic sync is confirmed (each brought the issue).
    assert!(
        world.run_until(200_000, |w| {
            let reports = w.engine.relay_reports();
            [&a, &b].iter().all(|relay| {
                reports
                    .iter()
                    .any(|report| report.relay == **relay && report.historic_confirmed)
            })
        }),
        "{}",
        world.dump()
    );
    assert_eq!(stores_of(&world, &issue.id), 1, "two relays, one store");

    assert!(
        world.engine.stats().already_stored >= 1,
        "the second copy was recognised as stored: {:?}",
        world.engine.stats()
    );
}
