//! Next to a plain relay that stores everything, only what is ours reaches
//! it: announcements listing our service, those of maintainers an
//! announcement of ours lists (even when they arrive first), and the states
//! of those repositories. Foreign announcements and states serve discovery
//! only and are counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use nostr::prelude::*;

use sim::events;
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

struct Case {
    world: World,
    ours: Vec<Event>,
    foreign: Vec<Event>,
}

fn case(service: bool) -> Case {
    let remote = relay_url("remote");
    let (owner, maintainer, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let at = UNIX_ORIGIN - 10_000;
    let owners = events::Announcement::new("alpha")
        .relays([&own_url(), &remote])
        .maintainers([maintainer.public_key()])
        .at(at)
        .sign(&owner);
    // Newer than the owner's: the relay sends it first.
    let maintainers = events::announcement(&maintainer, "alpha", &[&remote], at + 50);
    let ours = vec![
        owners,
        maintainers,
        events::state(&owner, "alpha", &[events::TIP], at + 10),
        events::state(&maintainer, "alpha", &[events::TIP], at + 60),
    ];
    let foreign = vec![
        events::announcement(&stranger, "beta", &[&remote], at + 20),
        events::state(&stranger, "beta", &[events::TIP], at + 30),
        // Same identifier as ours, but by nobody the owner lists.
        events::announcement(&stranger, "alpha", &[&remote], at + 40),
        events::state(&stranger, "alpha", &[events::TIP], at + 70),
    ];
    let mut cfg = config();
    cfg.identity.bootstrap_relays = vec![remote.clone()];
    if !service {
        cfg.identity.service_relays.clear();
    }
    let held: Vec<Event> = ours.iter().chain(&foreign).cloned().collect();
    let mut world = World::new(cfg, vec![sim_relay("remote", held)], Vec::new());
    world.own.accepts_everything = true;
    Case {
        world,
        ours,
        foreign,
    }
}

#[test]
fn only_what_is_ours_reaches_a_plain_own_relay() {
    let Case {
        mut world,
        ours,
        foreign,
    } = case(true);
    let wanted: Vec<EventId> = ours.iter().map(|event| event.id).collect();
    assert!(
        world.run_until(200_000, |w| {
            let stored = w.stored();
            wanted.iter().all(|id| stored.contains(id)) && w.engine.historic_sync_complete()
        }),
        "{}",
        world.dump()
    );
    let stored = world.stored();
    for event in &foreign {
        assert!(!stored.contains(&event.id), "foreign {} stored", event.kind);
    }
    let stats = world.engine.stats();
    assert!(stats.not_ours >= foreign.len() as u64, "{stats:?}");
    assert!(
        stats.candidates_stored >= 1,
        "the maintainer's events waited: {stats:?}"
    );
    // The daily re-sync (NIP-77) does not download the foreign ones again.
    let remote = relay_url("remote");
    let sent_before = world.relays[&remote].stats().events_sent;
    world.run_for(std::time::Duration::from_secs(26 * 3600), 200_000);
    assert!(world.run_until_idle(200_000), "{}", world.dump());
    assert_eq!(
        world.relays[&remote].stats().events_sent,
        sent_before,
        "nothing downloaded again"
    );
}

#[test]
fn without_service_relays_the_own_relay_decides_as_before() {
    let Case {
        mut world,
        ours,
        foreign,
    } = case(false);
    let wanted: Vec<EventId> = ours.iter().chain(&foreign).map(|event| event.id).collect();
    assert!(
        world.run_until(200_000, |w| {
            let stored = w.stored();
            wanted.iter().all(|id| stored.contains(id))
        }),
        "{}",
        world.dump()
    );
    assert_eq!(world.engine.stats().not_ours, 0);
}
