//! Replies to a root event the store took as new are fetched by REQ, not
//! reconciled first (our side of them is empty); replies to a root event we
//! held already are reconciled with NIP-77.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use grasp_sync_core::engine::Command;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

/// Does `filter` ask for events tagging `root`?
fn names(filter: &Filter, root: &EventId) -> bool {
    let hex = root.to_hex();
    filter
        .generic_tags
        .values()
        .any(|values| values.iter().any(|value| *value == hex))
}

/// Whether a local-items query (the start of a reconciliation) and a REQ
/// named `root`.
fn how_synced(world: &World, root: &EventId) -> (bool, bool) {
    let reconciled = world.command_log.iter().any(|(_, command)| {
        matches!(command, Command::QueryLocalItems { filter, .. } if names(filter, root))
    });
    let requested = world.command_log.iter().any(|(_, command)| {
        matches!(command, Command::Subscribe { filters, .. }
            if filters.iter().any(|filter| filter.limit != Some(0) && names(filter, root)))
    });
    (reconciled, requested)
}

fn world(own_holds_the_issue: bool) -> (World, Event, Event) {
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
    let reply = events::reply(&user, &issue.id, "reply", at + 2);
    let mut own = vec![announcement.clone()];
    if own_holds_the_issue {
        own.push(issue.clone());
    }
    let world = World::new(
        config(),
        vec![sim_relay(
            "a",
            vec![announcement.clone(), issue.clone(), reply.clone()],
        )],
        own,
    );
    (world, issue, reply)
}

#[test]
fn replies_to_a_root_event_stored_new_are_fetched_by_req() {
    let (mut world, issue, reply) = world(false);
    assert!(
        world.run_until(200_000, |w| w.stored().contains(&reply.id)),
        "{}",
        world.dump()
    );
    assert_eq!(
        how_synced(&world, &issue.id),
        (false, true),
        "{}",
        world.dump()
    );
    assert!(world.engine.stats().fresh_roots_by_req >= 1);
}

#[test]
fn replies_to_a_root_event_held_already_are_reconciled() {
    let (mut world, issue, reply) = world(true);
    assert!(
        world.run_until(200_000, |w| w.stored().contains(&reply.id)),
        "{}",
        world.dump()
    );
    let (reconciled, _) = how_synced(&world, &issue.id);
    assert!(reconciled, "{}", world.dump());
    assert_eq!(world.engine.stats().fresh_roots_by_req, 0);
}
