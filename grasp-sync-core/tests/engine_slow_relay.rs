//! A REQ-only relay that answers slowly but steadily — one message at a
//! time, each subscription's answers queued behind the others', for longer
//! than the batch timeout in total — is working, not failing: no batch
//! fails, and no event comes twice because a batch was planned again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::time::Duration;

use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig};
use sim::{config, own_url, relay_url, sim_relay_with, World, UNIX_ORIGIN};

/// `repos` repositories, each with a state and `issues` issues, on one
/// REQ-only relay; the own relay holds the announcements.
fn slow_world(repos: usize, issues: usize) -> (World, RelayUrl, Vec<Event>) {
    world_with(config(), repos, issues)
}

/// [`slow_world`] with `cfg`.
fn world_with(
    cfg: grasp_sync_core::engine::EngineConfig,
    repos: usize,
    issues: usize,
) -> (World, RelayUrl, Vec<Event>) {
    let relay = relay_url("slow");
    let at = UNIX_ORIGIN - 100_000;
    let mut held = Vec::new();
    let mut announcements = Vec::new();
    for n in 0..repos {
        let keys = Keys::generate();
        let name = format!("repo-{n}");
        let announcement = events::announcement(&keys, &name, &[&own_url(), &relay], at);
        announcements.push(announcement.clone());
        held.push(announcement);
        held.push(events::state(&keys, &name, &[events::TIP], at + 1));
        let repo = repo_ref(&keys, &name);
        for i in 0..issues {
            held.push(events::root(
                &keys,
                1621,
                &repo,
                &format!("issue {i}"),
                at + 2 + i as u64,
            ));
        }
    }
    let req_only = SimRelayConfig {
        nip77: Nip77Refusal::Notice,
        ..SimRelayConfig::default()
    };
    let world = World::new(
        cfg,
        vec![sim_relay_with("slow", held.clone(), req_only)],
        announcements,
    );
    (world, relay, held)
}

#[test]
fn a_relay_answering_req_after_req_slowly_fails_no_batch_and_sends_each_event_once() {
    let (mut world, relay, held) = slow_world(60, 2);
    // 240 events and the EOSEs, one every 400 ms: about 100 s in all, well
    // past the 60 s batch timeout; the items' REQs wait behind Layer 1's.
    world
        .paced
        .insert(relay.clone(), Duration::from_millis(400));
    let all: Vec<EventId> = held.iter().map(|event| event.id).collect();
    assert!(
        world.run_until(200_000, |w| {
            let stored = w.stored();
            all.iter().all(|id| stored.contains(id)) && w.engine.historic_sync_complete()
        }),
        "{}",
        world.dump()
    );
    let took = world.now.since_origin();
    let timeout = world.engine.config().timeouts.batch_timeout;
    assert!(
        took > timeout,
        "the relay took longer than the batch timeout: {took:?}"
    );
    assert_eq!(
        world.engine.stats().batches_failed,
        0,
        "a slow relay is not a failed batch: {:?}",
        world.engine.stats()
    );
    // The same sync from a relay answering at once: the paced one sent no
    // event more (paging re-sends each page's boundary second either way).
    let (mut quick, quick_relay, quick_held) = slow_world(60, 2);
    let quick_all: Vec<EventId> = quick_held.iter().map(|event| event.id).collect();
    assert!(
        quick.run_until(200_000, |w| {
            let stored = w.stored();
            quick_all.iter().all(|id| stored.contains(id)) && w.engine.historic_sync_complete()
        }),
        "{}",
        quick.dump()
    );
    assert!(quick.now < world.now, "pacing slowed the sync down");
    let sent = world.relays[&relay].stats().events_sent;
    let quick_sent = quick.relays[&quick_relay].stats().events_sent;
    assert_eq!(sent, quick_sent, "no event sent again because of the pace");
    for event in &held {
        assert_eq!(
            world.stores_of(&event.id),
            1,
            "event {} handed to the store once",
            event.id
        );
    }
}

#[test]
fn the_stall_limit_still_fails_a_batch_that_gets_nothing_of_its_own() {
    // The hard bound: with the stall limit at the batch timeout, a batch
    // waiting behind the relay's other answers gets nothing of its own for
    // longer than that and fails, busy relay or not (then it is planned
    // again and everything still arrives). This is also the rule before
    // the relay's other answers counted: the test above would fail with it.
    let mut cfg = config();
    cfg.timeouts.batch_stall_limit = cfg.timeouts.batch_timeout;
    let (mut world, relay, held) = world_with(cfg, 60, 2);
    world
        .paced
        .insert(relay.clone(), Duration::from_millis(400));
    let all: Vec<EventId> = held.iter().map(|event| event.id).collect();
    assert!(
        world.run_until(200_000, |w| {
            let stored = w.stored();
            all.iter().all(|id| stored.contains(id)) && w.engine.historic_sync_complete()
        }),
        "{}",
        world.dump()
    );
    assert!(
        world.engine.stats().batches_failed > 0,
        "{:?}",
        world.engine.stats()
    );
}
