//! A REQ the relay stops answering without EOSE or CLOSED (nostr-rs-relay
//! 0.8.12 aborts a slow client's query, or one a WAL checkpoint holds up)
//! is closed and asked again from where it was, not failed with its batch
//! and downloaded again from the start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::collections::BTreeSet;

use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig};
use sim::{config, own_url, relay_url, sim_relay_with, World, UNIX_ORIGIN};

const ISSUES: u64 = 40;
/// Events the dropped REQ brings before the relay goes quiet on it.
const BEFORE_THE_DROP: usize = 15;

/// A REQ-only relay holding a repository with [`ISSUES`] issues (one per
/// second) whose first large REQ it drops after [`BEFORE_THE_DROP`]
/// events; the driver pings it, as the tokio driver does.
fn dropping_world(
    cfg: grasp_sync_core::engine::EngineConfig,
    drop: bool,
) -> (World, RelayUrl, Vec<Event>) {
    let maintainer = Keys::generate();
    let relay = relay_url("rs");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &relay], at);
    let repo = repo_ref(&maintainer, "alpha");
    let mut held = vec![announcement.clone()];
    for n in 0..ISSUES {
        held.push(events::root(
            &maintainer,
            1621,
            &repo,
            &format!("issue {n}"),
            at + 1 + n,
        ));
    }
    let nostr_rs_relay = SimRelayConfig {
        nip77: Nip77Refusal::Notice,
        drop_req_mid_stream: drop.then_some(BEFORE_THE_DROP),
        ..SimRelayConfig::default()
    };
    let probe = cfg.liveness_probe_interval();
    let mut world = World::new(
        cfg,
        vec![sim_relay_with("rs", held.clone(), nostr_rs_relay)],
        vec![announcement],
    );
    world.ping_every = Some(probe);
    (world, relay, held)
}

/// Runs until everything is stored and historic sync is complete.
fn sync(world: &mut World, held: &[Event]) {
    let all: BTreeSet<EventId> = held.iter().map(|event| event.id).collect();
    assert!(
        world.run_until(400_000, |w| all.is_subset(&w.stored())
            && w.engine.historic_sync_complete()),
        "{}",
        world.dump()
    );
}

#[test]
fn a_req_the_relay_drops_silently_is_resumed_where_it_was() {
    let (mut world, relay, held) = dropping_world(config(), true);
    sync(&mut world, &held);
    assert_eq!(
        world.relays[&relay].stats().reqs_dropped,
        1,
        "the knob fired"
    );
    let stats = world.engine.stats().clone();
    assert_eq!(stats.reqs_resumed, 1, "{}", world.dump());
    assert_eq!(stats.batches_failed, 0, "{}", world.dump());
    // The same sync from a relay that drops nothing: the resumed page
    // starts at the oldest second received (`until` is inclusive), so its
    // one event comes again and nothing else does.
    let (mut steady, steady_relay, steady_held) = dropping_world(config(), false);
    sync(&mut steady, &steady_held);
    let again = steady.engine.stats().events_received_again;
    assert_eq!(stats.events_received_again, again + 1, "{}", world.dump());
    assert_eq!(
        world.relays[&relay].stats().events_sent,
        steady.relays[&steady_relay].stats().events_sent + 1
    );
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
fn with_no_resume_allowed_a_dropped_req_fails_its_batch_as_before() {
    // With no resume allowed, the first stall fails the batch (the rule
    // before resuming existed), which is planned again: everything still
    // arrives, downloaded twice.
    let mut cfg = config();
    cfg.timeouts.req_resume_attempts = 0;
    let (mut world, relay, held) = dropping_world(cfg, true);
    sync(&mut world, &held);
    assert_eq!(world.relays[&relay].stats().reqs_dropped, 1);
    let stats = world.engine.stats();
    assert_eq!(stats.reqs_resumed, 0);
    assert!(stats.batches_failed >= 1, "{}", world.dump());
}
