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

/// Announcements of ours by `keys.len()` keys, `per_key` each, every one
/// listing 20 relays no one runs (they never connect).
fn junk_announcements(keys: &[Keys], per_key: usize, at: u64) -> Vec<Event> {
    let own = own_url();
    let mut announcements = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        for n in 0..per_key {
            let junk: Vec<RelayUrl> = (0..20)
                .map(|r| relay_url(&format!("junk-{k}-{n}-{r}")))
                .collect();
            let listed: Vec<&RelayUrl> = std::iter::once(&own).chain(junk.iter()).collect();
            // Each in its own second: the own relay's history is read in
            // pages by `until`.
            let at = at + announcements.len() as u64;
            announcements.push(events::announcement(key, &format!("junk-{n}"), &listed, at));
        }
    }
    announcements
}

/// An honest repository on one working relay, `honest.sim`: its
/// announcement of ours and an issue the relay holds.
struct Honest {
    relay: RelayUrl,
    announcement: Event,
    issue: Event,
}

/// The honest repository and its relay.
fn honest_repository(at: u64) -> (Honest, sim::relay::SimRelay) {
    let (owner, user) = (Keys::generate(), Keys::generate());
    let relay = relay_url("honest");
    let announcement = events::announcement(&owner, "honest", &[&own_url(), &relay], at);
    let issue = events::root(&user, 1621, &repo_ref(&owner, "honest"), "issue", at + 1);
    let sim = sim_relay("honest", vec![announcement.clone(), issue.clone()]);
    let honest = Honest {
        relay,
        announcement,
        issue,
    };
    (honest, sim)
}

/// Runs `world` until the engine indexed `repos` repositories (the own
/// relay's history read in pages); panics after 10 minutes.
fn index_repositories(world: &mut World, repos: usize) {
    let deadline = world.now + Duration::from_secs(600);
    world.run_until(STEPS, |world| {
        world.now > deadline || world.engine.repo_index().repos().len() >= repos
    });
    assert_eq!(
        world.engine.repo_index().repos().len(),
        repos,
        "{}",
        world.dump()
    );
}

fn is_connected(world: &World, relay: &RelayUrl) -> bool {
    world.engine.is_connected(relay)
}

/// Runs `world` until `relay` is connected and `event` stored, for at most
/// `within` of virtual time; returns how long it took.
fn time_to_sync(
    world: &mut World,
    relay: &RelayUrl,
    event: &EventId,
    within: Duration,
) -> Option<Duration> {
    let start = world.now;
    let deadline = start + within;
    let synced = world.run_until(STEPS, |world| {
        world.now > deadline || (is_connected(world, relay) && world.stored().contains(event))
    });
    (synced && world.now <= deadline).then(|| world.now.saturating_duration_since(start))
}

/// How many relays the engine forgot, and whether `relay` among them.
fn forgotten(world: &World, relay: &RelayUrl) -> (usize, bool) {
    let forgets: Vec<&RelayUrl> = world
        .command_log
        .iter()
        .filter_map(|(_, command)| match command {
            Command::Forget { relay } => Some(relay),
            _ => None,
        })
        .collect();
    (forgets.len(), forgets.contains(&relay))
}

#[test]
fn one_key_s_1000_junk_relays_do_not_keep_an_honest_relay_out() {
    let flooder = Keys::generate();
    let at = UNIX_ORIGIN - 10_000;
    // 50 announcements of ours, 20 unreachable relays each: the 1 000-relay
    // cap, if one key could fill it.
    let junk = junk_announcements(std::slice::from_ref(&flooder), 50, at);
    let (honest, sim) = honest_repository(at + 2_000);
    let mut world = World::new(config(), vec![sim], junk);
    index_repositories(&mut world, 50);
    let caps = world.engine.config().caps.clone();
    assert_eq!(
        world.engine.relay_reports().len(),
        caps.max_relays_per_author,
        "one key's announcements take its share of the slots, no more: {}",
        world.dump()
    );
    assert_eq!(
        world.engine.stats().relays_over_cap,
        1000 - caps.max_relays_per_author as u64
    );
    // The honest announcement comes after the flood.
    let now = world.clock();
    world
        .engine
        .handle_own_events(now, [honest.announcement.clone()]);
    let took = time_to_sync(
        &mut world,
        &honest.relay,
        &honest.issue.id,
        Duration::from_secs(120),
    );
    assert!(took.is_some(), "{}", world.dump());
}

#[test]
fn junk_relays_of_many_keys_yield_their_slots_to_an_honest_relay() {
    // Caps scaled down (100 slots, 10 per author) to keep the run short;
    // the rules are those of the defaults. 10 keys, one announcement of 20
    // unreachable relays each: every slot taken, each key within its share.
    let mut config = config();
    config.caps.max_relays = 100;
    config.caps.max_relays_per_author = 10;
    let keys: Vec<Keys> = (0..10).map(|_| Keys::generate()).collect();
    let at = UNIX_ORIGIN - 10_000;
    let junk = junk_announcements(&keys, 1, at);
    let (honest, sim) = honest_repository(at + 2_000);
    let mut world = World::new(config, vec![sim], junk);
    index_repositories(&mut world, 10);
    let caps = world.engine.config().caps.clone();
    assert_eq!(
        world.engine.relay_reports().len(),
        caps.max_relays,
        "{}",
        world.dump()
    );
    let now = world.clock();
    world
        .engine
        .handle_own_events(now, [honest.announcement.clone()]);
    world.run_for(Duration::from_secs(60), STEPS);
    assert!(
        !is_connected(&world, &honest.relay),
        "every slot is on trial still"
    );
    // A junk relay yields its slot once its trial period is over (checked
    // every disconnect check).
    let bound =
        caps.relay_trial_period + 2 * world.engine.config().timeouts.disconnect_check_interval;
    let took = time_to_sync(&mut world, &honest.relay, &honest.issue.id, bound);
    assert!(took.is_some(), "{}", world.dump());
    let stats = world.engine.stats();
    assert!(stats.relays_evicted >= 1, "{stats:?}");
    let (forgets, honest_forgotten) = forgotten(&world, &honest.relay);
    assert_eq!(
        forgets as u64, stats.relays_evicted,
        "each relay that yielded is forgotten"
    );
    assert!(!honest_forgotten);
    assert_eq!(world.engine.relay_reports().len(), caps.max_relays);
}

#[test]
fn an_honest_relay_keeps_its_slot_however_many_junk_relays_wait() {
    // Caps scaled down (100 slots, 10 per author) to keep the run short;
    // the rules are those of the defaults.
    let mut config = config();
    config.caps.max_relays = 100;
    config.caps.max_relays_per_author = 10;
    let at = UNIX_ORIGIN - 10_000;
    let (honest, sim) = honest_repository(at);
    let mut world = World::new(config, vec![sim], vec![honest.announcement.clone()]);
    let took = time_to_sync(
        &mut world,
        &honest.relay,
        &honest.issue.id,
        Duration::from_secs(60),
    );
    assert!(took.is_some(), "{}", world.dump());
    // Then 300 junk relays of 15 keys: 150 within the keys' shares, more
    // than the 99 slots left, so junk relays wait and take turns with
    // those whose trial period is over.
    let keys: Vec<Keys> = (0..15).map(|_| Keys::generate()).collect();
    let now = world.clock();
    world
        .engine
        .handle_own_events(now, junk_announcements(&keys, 1, at + 100));
    let steps = world.steps;
    world.run_for(Duration::from_secs(40 * 60), STEPS);
    assert!(world.steps - steps < STEPS, "the run reached its end");
    assert_eq!(world.engine.relay_reports().len(), 100);
    let stats = world.engine.stats().clone();
    assert!(
        stats.relays_evicted >= 51,
        "junk relays took turns: {stats:?}"
    );
    let (_, honest_forgotten) = forgotten(&world, &honest.relay);
    assert!(!honest_forgotten, "the honest relay never yields its slot");
    assert!(is_connected(&world, &honest.relay), "{}", world.dump());
    // And it still syncs: a reply published now arrives live.
    let user = Keys::generate();
    let reply = events::reply(
        &user,
        &honest.issue.id,
        "still synced",
        world.unix().as_secs(),
    );
    world.publish(&honest.relay, reply.clone());
    let took = time_to_sync(
        &mut world,
        &honest.relay,
        &reply.id,
        Duration::from_secs(60),
    );
    assert!(took.is_some(), "{}", world.dump());
}

/// Announcements of ours by `keys.len()` keys, `per_key` each, every one
/// listing one relay that runs and answers every request with an EOSE and
/// nothing else (it holds no event): the relay of key `k`'s `n`th
/// announcement is `ws://junk-{k}-{n}.{domain(k)}.sim`. Returns the
/// announcements and the relays.
fn eose_junk(
    keys: &[Keys],
    per_key: usize,
    domain: impl Fn(usize) -> String,
    at: u64,
) -> (Vec<Event>, Vec<sim::relay::SimRelay>) {
    let own = own_url();
    let (mut announcements, mut relays) = (Vec::new(), Vec::new());
    for (k, key) in keys.iter().enumerate() {
        for n in 0..per_key {
            let name = format!("junk-{k}-{n}.{}", domain(k));
            let relay = relay_url(&name);
            let at = at + announcements.len() as u64;
            announcements.push(events::announcement(
                key,
                &format!("junk-{n}"),
                &[&own, &relay],
                at,
            ));
            relays.push(sim_relay(&name, Vec::new()));
        }
    }
    (announcements, relays)
}

/// How many relays the engine tracks whose host ends in `suffix`.
fn tracked_under(world: &World, suffix: &str) -> usize {
    world
        .engine
        .relay_reports()
        .into_iter()
        .filter(|report| {
            report
                .relay
                .as_str()
                .trim_end_matches('/')
                .ends_with(suffix)
        })
        .count()
}

/// Issue 45, item 3: one server behind `*.evil.sim` answers EOSE to
/// everything; 20 keys × 50 announcements list 1 000 of its names, the
/// whole default [`Caps::max_relays`]. Every junk relay answers, so each
/// would "serve" and, before slots were shared per network and earned by
/// unique deliveries, hold its slot for good: the honest repository's relay
/// waited forever. Now the domain holds its share
/// ([`Caps::max_relays_per_network`], 100) and the honest relay, listed
/// after the flood, is admitted and its issue synced within N = 2 minutes
/// of virtual time (it takes one connection and one sync).
#[test]
fn eose_answering_junk_relays_of_one_domain_do_not_keep_an_honest_relay_out() {
    let keys: Vec<Keys> = (0..20).map(|_| Keys::generate()).collect();
    let at = UNIX_ORIGIN - 10_000;
    let (junk, mut relays) = eose_junk(&keys, 50, |_| "evil".to_owned(), at);
    assert_eq!(relays.len(), 1_000);
    let (honest, sim) = honest_repository(at + 2_000);
    relays.push(sim);
    let mut world = World::new(config(), relays, junk);
    index_repositories(&mut world, 1_000);
    world.run_for(Duration::from_secs(60), STEPS);
    let caps = world.engine.config().caps.clone();
    let now = world.clock();
    world
        .engine
        .handle_own_events(now, [honest.announcement.clone()]);
    let took = time_to_sync(
        &mut world,
        &honest.relay,
        &honest.issue.id,
        Duration::from_secs(120),
    );
    assert!(took.is_some(), "{:?}", world.engine.stats());
    assert_eq!(
        tracked_under(&world, ".evil.sim"),
        caps.max_relays_per_network,
        "one domain's relays take its share of the slots, no more"
    );
    // And it keeps its slot: it delivered what no other relay did.
    world.run_for(caps.relay_trial_period * 3, STEPS);
    assert!(is_connected(&world, &honest.relay), "{}", world.dump());
    assert!(!forgotten(&world, &honest.relay).1);
}

/// Issue 45, item 3, the slots earned: junk relays spread over as many
/// domains and keys as fill every slot within every share, each answering
/// EOSE to everything. Answering keeps no slot: a relay that delivered
/// nothing no other relay did yields, once its trial period is over, to
/// the honest relay waiting, which is admitted and synced within the trial
/// period plus two disconnect checks (10 min + 2 min at the defaults).
/// Caps scaled down (100 slots, 10 per author and per domain) to keep the
/// run short; the rules are those of the defaults.
#[test]
fn eose_answering_junk_relays_yield_their_slots_to_an_honest_relay() {
    let mut config = config();
    config.caps.max_relays = 100;
    config.caps.max_relays_per_author = 10;
    config.caps.max_relays_per_network = 10;
    let keys: Vec<Keys> = (0..10).map(|_| Keys::generate()).collect();
    let at = UNIX_ORIGIN - 10_000;
    let (junk, mut relays) = eose_junk(&keys, 10, |k| format!("evil{k}"), at);
    let (honest, sim) = honest_repository(at + 2_000);
    relays.push(sim);
    let mut world = World::new(config, relays, junk);
    index_repositories(&mut world, 100);
    world.run_for(Duration::from_secs(60), STEPS);
    let caps = world.engine.config().caps.clone();
    assert_eq!(
        world.engine.relay_reports().len(),
        caps.max_relays,
        "{}",
        world.dump()
    );
    let confirmed = world
        .engine
        .relay_reports()
        .into_iter()
        .filter(|report| report.historic_confirmed)
        .count();
    assert_eq!(confirmed, caps.max_relays, "every junk relay answers");
    let now = world.clock();
    world
        .engine
        .handle_own_events(now, [honest.announcement.clone()]);
    let bound =
        caps.relay_trial_period + 2 * world.engine.config().timeouts.disconnect_check_interval;
    let took = time_to_sync(&mut world, &honest.relay, &honest.issue.id, bound);
    assert!(took.is_some(), "{}", world.dump());
    assert!(world.engine.stats().relays_evicted >= 1);
    assert_eq!(world.engine.relay_reports().len(), caps.max_relays);
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
