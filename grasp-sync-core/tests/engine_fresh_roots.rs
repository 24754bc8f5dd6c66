//! Replies to a root event the store took as new are not reconciled with a
//! store query (a scan per session, finding only what this sync brought):
//! on a NIP-77 relay they are reconciled against what the relay sent this
//! sync, so a status that came with its repository is not sent again; on a
//! REQ-only relay one REQ brings them. Replies to a root event we held
//! already are reconciled with NIP-77 against the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use grasp_sync_core::engine::Command;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig};
use sim::{config, own_url, relay_url, sim_relay, sim_relay_with, World, UNIX_ORIGIN};

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

/// Whether a NEG-OPEN named `root`.
fn reconciled_without_store(world: &World, root: &EventId) -> bool {
    world.command_log.iter().any(
        |(_, command)| matches!(command, Command::NegOpen { filter, .. } if names(filter, root)),
    )
}

fn world(own_holds_the_issue: bool) -> (World, Event, Event) {
    world_with(own_holds_the_issue, SimRelayConfig::default())
}

fn world_with(own_holds_the_issue: bool, relay: SimRelayConfig) -> (World, Event, Event) {
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
        vec![sim_relay_with(
            "a",
            vec![announcement.clone(), issue.clone(), reply.clone()],
            relay,
        )],
        own,
    );
    (world, issue, reply)
}

#[test]
fn replies_to_a_root_event_stored_new_are_reconciled_against_what_the_relay_sent() {
    let (mut world, issue, reply) = world(false);
    assert!(
        world.run_until(200_000, |w| w.stored().contains(&reply.id)),
        "{}",
        world.dump()
    );
    let (store_queried, _) = how_synced(&world, &issue.id);
    assert!(!store_queried, "no store query: {}", world.dump());
    assert!(
        reconciled_without_store(&world, &issue.id),
        "{}",
        world.dump()
    );
    assert!(world.engine.stats().fresh_roots_reconciled >= 1);
    assert_eq!(world.engine.stats().fresh_roots_by_req, 0);
}

#[test]
fn replies_to_a_root_event_stored_new_are_fetched_by_req_where_nip77_is_refused() {
    let relay = SimRelayConfig {
        nip77: Nip77Refusal::Notice,
        ..SimRelayConfig::default()
    };
    let (mut world, issue, reply) = world_with(false, relay);
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
    assert_eq!(world.engine.stats().fresh_roots_reconciled, 0);
}

/// A repository with issues, each with a status (`a` and `e`) and comments
/// (`e` and `E`), on one relay; the own relay holds the announcement only.
fn repository_world(issues: u64) -> (World, Vec<Event>) {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at);
    let repo = repo_ref(&maintainer, "alpha");
    let mut remote = vec![announcement.clone()];
    for n in 0..issues {
        let t = at + 10 * (n + 1);
        let issue = events::root(&user, 1621, &repo, &format!("issue {n}"), t);
        remote.push(events::status(&maintainer, &issue.id, &repo, t + 1));
        remote.push(events::reply(&user, &issue.id, "first", t + 2));
        remote.push(events::reply(&user, &issue.id, "second", t + 3));
        remote.push(issue);
    }
    let world = World::new(
        config(),
        vec![sim_relay("a", remote.clone())],
        vec![announcement],
    );
    (world, remote)
}

#[test]
fn over_nip77_a_fresh_sync_receives_each_event_once() {
    let (mut world, remote) = repository_world(8);
    let expected: std::collections::BTreeSet<EventId> = remote.iter().map(|e| e.id).collect();
    assert!(world.run_until_idle(400_000), "{}", world.dump());
    assert!(expected.is_subset(&world.stored()), "{}", world.dump());
    let stats = world.engine.stats();
    // The statuses came with the repository's reconciliation; the fresh
    // roots' reconciliation knows them and fetches only the comments.
    assert_eq!(stats.events_received_again, 0, "{}", world.dump());
    assert_eq!(stats.fresh_roots_reconciled, 8, "{}", world.dump());
    assert_eq!(stats.batches_failed, 0);
    let sent = world.relays[&relay_url("a")].stats().events_sent;
    // Everything but the announcement (the own relay held it), once.
    assert_eq!(sent, expected.len() - 1, "{}", world.dump());
}

#[test]
fn a_fresh_roots_reconciliation_confirms_only_once_what_it_counted_as_held_is_stored() {
    let (mut world, remote) = repository_world(3);
    // Statuses reach the store 30 s after the engine hands them over:
    // the fresh roots' reconciliation counts them as held while they are
    // still on their way.
    world
        .own
        .slow_kinds
        .insert(1630, std::time::Duration::from_secs(30));
    let relay = relay_url("a");
    let mut violations = Vec::new();
    let idle = world.run_until(400_000, |w| {
        let state = w.engine.relay_state(&relay);
        if let Some(state) = state {
            let confirmed = state.items(w.engine.repo_index().ids()).root_events;
            let stored = w.stored();
            for event in &remote {
                let names_confirmed = event.tags.iter().any(|tag| {
                    let values = tag.as_slice();
                    values.first().is_some_and(|name| name == "e")
                        && values
                            .get(1)
                            .and_then(|hex| EventId::from_hex(hex).ok())
                            .is_some_and(|root| confirmed.contains(&root))
                });
                if names_confirmed && !stored.contains(&event.id) {
                    violations.push((w.now, event.id));
                }
            }
        }
        w.is_quiet() && w.engine.is_idle()
    });
    assert!(idle, "{}", world.dump());
    assert!(
        violations.is_empty(),
        "roots confirmed before their statuses were stored: {violations:?}"
    );
    assert!(world.engine.stats().fresh_roots_reconciled >= 3);
    assert_eq!(world.engine.stats().events_received_again, 0);
    let expected: std::collections::BTreeSet<EventId> = remote.iter().map(|e| e.id).collect();
    assert!(expected.is_subset(&world.stored()));
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
