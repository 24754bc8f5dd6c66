//! The caps on what strangers make us track: relays per announcement and in
//! total (relays left out wait for room, then sync), repositories no
//! announcement of ours names, and negentropy sessions a relay keeps going.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
use grasp_sync_core::model::SyncMethod;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_core::{Instant, Now};
use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

const STEPS: u64 = 200_000;

/// The relays synced from that were connected (not the own relay).
fn connects(world: &World) -> BTreeSet<RelayUrl> {
    world
        .command_log
        .iter()
        .filter_map(|(_, command)| match command {
            Command::Connect { relay, .. } if relay != &own_url() => Some(relay.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_announcement_listing_1000_relays_connects_at_most_the_cap() {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let listed: Vec<RelayUrl> = (0..1000).map(|n| relay_url(&format!("r{n}"))).collect();
    let mut refs: Vec<&RelayUrl> = vec![];
    let own = own_url();
    refs.push(&own);
    refs.extend(listed.iter());
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "wide", &refs, at);
    let issue = events::root(&user, 1621, &repo_ref(&maintainer, "wide"), "issue", at + 1);
    // The first listed relay exists and holds the issue.
    let relays = vec![sim_relay("r0", vec![announcement.clone(), issue.clone()])];
    let cap = 20;
    let mut config = config();
    config.caps.max_relays_per_announcement = cap;
    let mut world = World::new(config, relays, vec![announcement]);
    world.run_for(Duration::from_secs(600), STEPS);
    let connected = connects(&world);
    assert_eq!(connected.len(), cap, "{}", world.dump());
    assert!(connected.iter().all(|relay| listed[..cap].contains(relay)));
    assert_eq!(world.engine.relay_reports().len(), cap);
    assert_eq!(world.engine.stats().relays_over_cap, 1000 - cap as u64);
    assert!(world.stored().contains(&issue.id), "{}", world.dump());
}

#[test]
fn relays_over_the_total_cap_wait_for_room_then_sync() {
    let (alpha, beta) = (Keys::generate(), Keys::generate());
    let user = Keys::generate();
    let at = UNIX_ORIGIN - 10_000;
    let urls = |prefix: &str| -> Vec<RelayUrl> {
        (1..=3)
            .map(|n| relay_url(&format!("{prefix}{n}")))
            .collect()
    };
    let (a, b) = (urls("a"), urls("b"));
    let own = own_url();
    let list = |urls: &[RelayUrl]| -> Vec<RelayUrl> {
        std::iter::once(own.clone())
            .chain(urls.iter().cloned())
            .collect()
    };
    let (list_a, list_b) = (list(&a), list(&b));
    let ann_a = events::announcement(&alpha, "alpha", &list_a.iter().collect::<Vec<_>>(), at);
    let ann_b = events::announcement(&beta, "beta", &list_b.iter().collect::<Vec<_>>(), at);
    let issue_a = events::root(&user, 1621, &repo_ref(&alpha, "alpha"), "a", at + 1);
    let issue_b = events::root(&user, 1621, &repo_ref(&beta, "beta"), "b", at + 1);
    // Each repository's reply only on its third relay.
    let reply_a = events::reply(&user, &issue_a.id, "reply a", at + 2);
    let reply_b = events::reply(&user, &issue_b.id, "reply b", at + 2);
    let mut relays = Vec::new();
    for (urls, issue, reply) in [(&a, &issue_a, &reply_a), (&b, &issue_b, &reply_b)] {
        for (n, url) in urls.iter().enumerate() {
            let mut held = vec![ann_a.clone(), ann_b.clone(), issue.clone()];
            if n == 2 {
                held.push(reply.clone());
            }
            let name = url.as_str().trim_start_matches("ws://");
            let name = name.trim_end_matches('/').trim_end_matches(".sim");
            relays.push(sim_relay(name, held));
        }
    }
    let mut config = config();
    config.caps.max_relays = 4;
    let mut world = World::new(config, relays, vec![ann_a, ann_b, issue_a, issue_b]);
    world.run_for(Duration::from_secs(30), STEPS);
    let tracked: BTreeSet<RelayUrl> = world
        .engine
        .relay_reports()
        .into_iter()
        .map(|report| report.relay)
        .collect();
    assert_eq!(tracked.len(), 4, "{}", world.dump());
    assert_eq!(world.engine.stats().relays_over_cap, 2);
    // One repository got all three relays, the other only its first.
    let (full, partial, full_keys, waiting_reply) = if a.iter().all(|r| tracked.contains(r)) {
        (&a, &b, &alpha, &reply_b)
    } else {
        (&b, &a, &beta, &reply_a)
    };
    assert!(full.iter().all(|relay| tracked.contains(relay)));
    assert!(tracked.contains(&partial[0]) && !tracked.contains(&partial[2]));
    assert!(!world.stored().contains(&waiting_reply.id));

    // The full repository's owner lists only our relay now: its relays
    // are dropped at the next check, and the waiting ones sync.
    let identifier = if full_keys.public_key() == alpha.public_key() {
        "alpha"
    } else {
        "beta"
    };
    let newer = events::announcement(full_keys, identifier, &[&own], at + 100);
    let now = world.clock();
    world.engine.handle_own_events(now, [newer]);
    world.run_for(Duration::from_secs(200), STEPS);
    let tracked: BTreeSet<RelayUrl> = world
        .engine
        .relay_reports()
        .into_iter()
        .map(|report| report.relay)
        .collect();
    assert!(
        partial.iter().all(|relay| tracked.contains(relay)),
        "{}",
        world.dump()
    );
    assert!(full.iter().all(|relay| !tracked.contains(relay)));
    assert!(
        world.stored().contains(&waiting_reply.id),
        "{}",
        world.dump()
    );
    let forgets = world
        .command_log
        .iter()
        .filter(|(_, command)| matches!(command, Command::Forget { .. }))
        .count();
    assert_eq!(forgets, 3, "each dropped relay is forgotten once");
}

#[test]
fn root_events_of_too_many_unannounced_repositories_are_counted_not_indexed() {
    let user = Keys::generate();
    let at = UNIX_ORIGIN - 10_000;
    let strangers: Vec<Keys> = (0..3).map(|_| Keys::generate()).collect();
    let roots: Vec<Event> = strangers
        .iter()
        .enumerate()
        .map(|(n, keys)| events::root(&user, 1621, &repo_ref(keys, "x"), "issue", at + n as u64))
        .collect();
    let mut config = config();
    config.caps.max_unannounced_repos = 2;
    let mut world = World::new(config, vec![], roots);
    world.run_for(Duration::from_secs(30), STEPS);
    assert_eq!(world.engine.stats().root_events_over_cap, 1);
    assert_eq!(world.engine.repo_index().repos().len(), 2);
}

/// Drives an engine against a relay that answers every negentropy message
/// with the same message of fingerprints: the session never ends by itself.
#[test]
fn a_relay_with_endless_negentropy_rounds_is_cut_off_counted_and_synced_by_req() {
    let relay = RelayUrl::parse("ws://endless.sim").unwrap();
    let mut config = EngineConfig::default();
    config.identity.bootstrap_relays = vec![relay.clone()];
    config.identity.relay_policy = RelayUrlPolicy::new().allow_local_addresses(true);
    config.caps.max_negentropy_rounds = 50;
    let start = Now::new(Instant::ZERO, Timestamp::from_secs(UNIX_ORIGIN));
    let mut engine = SyncEngine::new(config, start).expect("a valid configuration");
    engine.handle_timeout(start);
    let mut remote = NegentropyStorageVector::new();
    for n in 0..2_000u32 {
        let id = Id::from_byte_array(event_id(n).to_bytes());
        remote.insert(u64::from(n), id).unwrap();
    }
    remote.seal().unwrap();
    let mut remote = Negentropy::owned(remote, 0).unwrap();
    let mut endless: Option<String> = None;
    let (mut rounds, mut closes, mut req_after_cut) = (0, 0, false);
    for _ in 0..10_000 {
        let Some(command) = engine.poll_command() else {
            break;
        };
        match command {
            Command::Connect { .. } => engine.handle_connected(start, &relay),
            Command::QueryLocalItems { id, .. } => {
                // Items the relay lacks: our first message is fingerprints.
                let ours = (0..2_000u32)
                    .map(|n| (event_id(10_000 + n), Timestamp::from_secs(u64::from(n))))
                    .collect();
                engine.handle_local_items(start, &relay, &id, ours)
            }
            Command::NegOpen {
                id,
                initial_message,
                ..
            } => {
                let reply = remote
                    .reconcile(&hex::decode(&initial_message).unwrap())
                    .unwrap();
                let reply = endless.get_or_insert_with(|| hex::encode(&reply)).clone();
                engine.handle_relay_message(start, &relay, neg_msg(&id, reply));
            }
            Command::NegMsg { id, .. } => {
                rounds += 1;
                let reply = endless.clone().unwrap();
                engine.handle_relay_message(start, &relay, neg_msg(&id, reply));
            }
            Command::NegClose { .. } => closes += 1,
            Command::Subscribe { filters, .. } => {
                req_after_cut |= closes > 0 && filters.iter().any(|f| f.limit != Some(0));
            }
            _ => {}
        }
    }
    assert_eq!(
        engine.stats().negentropy_sessions_cut,
        1,
        "rounds {rounds} closes {closes} stats {:?}",
        engine.stats()
    );
    assert_eq!(rounds, 50, "the relay's 51st message is not answered");
    assert_eq!(closes, 1, "the session is closed");
    assert!(req_after_cut, "the filter is synced by REQ instead");
    let report = engine.relay_reports().into_iter().next().unwrap();
    assert_eq!(report.method, SyncMethod::ReqEose);
    assert!(report.last_error.unwrap().contains("50 rounds"));
}

fn event_id(n: u32) -> EventId {
    let mut id = [0u8; 32];
    id[..4].copy_from_slice(&n.to_be_bytes());
    EventId::from_byte_array(id)
}

fn neg_msg(id: &SubscriptionId, message: String) -> RelayMessage<'static> {
    RelayMessage::NegMsg {
        subscription_id: Cow::Owned(id.clone()),
        message: Cow::Owned(message),
    }
}
