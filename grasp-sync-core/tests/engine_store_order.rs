//! Events reach the store in dependency order. A GRASP host refuses a
//! state, pull request or update whose repository it has no announcement
//! of, and a reply to an event it does not have (for good: `invalid: no
//! announcement exists`). Relays send newest first, so the state comes
//! before its announcement in the batch; the engine hands the announcement
//! over first and the state once the store answered for it: each is stored
//! on its first offer, nothing is refused or retried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use grasp_sync_core::engine::{Command, EngineConfig};
use nostr::prelude::*;

use sim::events::{self, repo_ref, Announcement};
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

const STEPS: u64 = 400_000;

const TIP: &str = "0123456789abcdef0123456789abcdef01234567";

/// A repository on bootstrap relay `a`, newest first: a reply to its pull
/// request, the pull request's update, the pull request, a maintainer's
/// state (the maintainer has no announcement of their own), the owner's
/// state, and last the owner's announcement. The own relay is a host that
/// refuses what it lacks the dependency of.
fn repository(config: EngineConfig) -> (World, Vec<Event>) {
    let owner = Keys::generate();
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = Announcement::new("alpha")
        .relays([own_url(), a.clone()])
        .maintainers([maintainer.public_key()])
        .at(at)
        .sign(&owner);
    let repo = repo_ref(&owner, "alpha");
    let state = events::state(&owner, "alpha", &[TIP], at + 1);
    let maintainers_state = events::state(&maintainer, "alpha", &[TIP], at + 2);
    let pr = events::sign(
        &user,
        1618,
        "",
        vec![
            events::tag(&["a", &repo.to_string()]),
            events::tag(&["c", TIP]),
        ],
        at + 3,
    );
    let update = events::pr_update(&user, &pr.id, &repo, TIP, at + 4);
    let reply = events::reply(&maintainer, &pr.id, "looks good", at + 5);
    let all = vec![announcement, state, maintainers_state, pr, update, reply];
    let mut world = World::new(
        config.with_bootstrap_relays(vec![a]),
        vec![sim_relay("a", all.clone())],
        Vec::new(),
    );
    world.own.needs_dependencies = true;
    (world, all)
}

/// The position of `id`'s first `Command::Store` in the command log.
fn first_offer(world: &World, id: &EventId) -> usize {
    world
        .command_log
        .iter()
        .position(|(_, command)| matches!(command, Command::Store { event, .. } if event.id == *id))
        .unwrap_or_else(|| panic!("{id} never offered: {}", world.dump()))
}

fn each_is_stored_on_its_first_offer_after_what_it_needs(config: EngineConfig) {
    let (mut world, all) = repository(config);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    for event in &all {
        assert!(
            world.stored().contains(&event.id),
            "kind {} not stored: {}",
            event.kind,
            world.dump()
        );
        assert_eq!(
            world.stores_of(&event.id),
            1,
            "offered once: kind {}",
            event.kind
        );
    }
    assert!(world.own.rejected.is_empty(), "{:?}", world.own.rejected);
    let stats = world.engine.stats();
    assert_eq!(stats.store_refused, 0);
    assert_eq!(stats.store_retries, 0);
    assert!(stats.store_waits > 0, "something waited: {}", world.dump());
    let [announcement, state, maintainers_state, pr, update, reply] = &all[..] else {
        unreachable!("six events");
    };
    let announced = first_offer(&world, &announcement.id);
    for dependent in [state, maintainers_state, pr, update] {
        assert!(announced < first_offer(&world, &dependent.id));
    }
    assert!(first_offer(&world, &pr.id) < first_offer(&world, &update.id));
    assert!(first_offer(&world, &pr.id) < first_offer(&world, &reply.id));
    assert_eq!(world.engine.store_dependents_waiting(), 0);
    assert!(world.engine.historic_sync_complete(), "{}", world.dump());
}

#[test]
fn a_state_sent_before_its_announcement_is_stored_after_it_on_its_first_offer_with_nip77() {
    each_is_stored_on_its_first_offer_after_what_it_needs(config());
}

#[test]
fn a_state_sent_before_its_announcement_is_stored_after_it_on_its_first_offer_by_req() {
    each_is_stored_on_its_first_offer_after_what_it_needs(config().with_negentropy(false));
}

/// No service relay: every Layer 1 event is stored, none waits as a
/// candidate for the announcement that makes it ours.
fn storing_every_layer_1_event(config: EngineConfig) -> EngineConfig {
    let mut config = config;
    config.identity.service_relays.clear();
    config
}

#[test]
fn a_state_sent_before_its_announcement_is_stored_after_it_without_service_relays() {
    each_is_stored_on_its_first_offer_after_what_it_needs(storing_every_layer_1_event(config()));
}

#[test]
fn a_state_sent_before_its_announcement_is_stored_after_it_without_service_relays_by_req() {
    each_is_stored_on_its_first_offer_after_what_it_needs(storing_every_layer_1_event(
        config().with_negentropy(false),
    ));
}

/// A state whose repository has no announcement anywhere (no service
/// relay: every Layer 1 event is stored): it waits only until the batch
/// that brought it ends, then the store decides (it refuses it, for good).
/// Nothing hangs: the sync completes.
#[test]
fn a_state_whose_announcement_never_comes_goes_to_the_store_when_its_batch_ends() {
    let owner = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&owner, "alpha", &[&own_url(), &a], at);
    let state = events::state(&owner, "alpha", &[TIP], at + 1);
    let stray = events::state(&owner, "nobody", &[TIP], at + 2);
    let mut world = World::new(
        storing_every_layer_1_event(config().with_bootstrap_relays(vec![a])),
        vec![sim_relay(
            "a",
            vec![announcement.clone(), state.clone(), stray.clone()],
        )],
        vec![announcement],
    );
    world.own.needs_dependencies = true;
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(world.stored().contains(&state.id), "{}", world.dump());
    assert_eq!(world.stores_of(&state.id), 1);
    assert_eq!(
        world.stores_of(&stray.id),
        1,
        "offered once, after its batch"
    );
    assert_eq!(world.own.rejected, vec![stray.clone()]);
    let stats = world.engine.stats();
    assert_eq!((stats.store_refused, stats.store_retries), (1, 0));
    assert!(stats.store_waits >= 1, "{}", world.dump());
    assert_eq!(world.engine.store_dependents_waiting(), 0);
    assert!(world.engine.historic_sync_complete(), "{}", world.dump());
}

/// The store refuses the announcement for now, again and again (a host
/// rate-limiting its author): the state that needs it waits for it at most
/// the store timeout, then goes to the store, which decides. Nothing stays
/// parked.
#[test]
fn a_state_waits_for_an_announcement_the_store_keeps_refusing_at_most_the_store_timeout() {
    let (mut world, all) = repository(storing_every_layer_1_event(config()));
    let [announcement, state, ..] = &all[..] else {
        unreachable!("six events");
    };
    world.own.answers.insert(
        announcement.id,
        grasp_sync_core::store::IngestOutcome::refused_for_now("rate-limited: slow down"),
    );
    world.run_for(std::time::Duration::from_secs(30), STEPS);
    assert_eq!(world.stores_of(&state.id), 0, "it waits: {}", world.dump());
    assert!(world.engine.store_dependents_waiting() > 0);
    world.run_for(std::time::Duration::from_secs(40), STEPS);
    assert_eq!(world.stores_of(&state.id), 1, "{}", world.dump());
    assert_eq!(world.engine.store_dependents_waiting(), 0);
    assert!(
        world.engine.stats().store_retries > 0,
        "the announcement is retried"
    );
}
