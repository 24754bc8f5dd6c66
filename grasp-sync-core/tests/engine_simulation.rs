//! The sync engine against simulated relays on a virtual clock: one test
//! per scenario of the spec and per failure the engine must survive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_core::engine::{Command, RelayLimits};
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig, SubLimitRefusal};
use sim::{config, own_url, relay_url, sim_relay, sim_relay_with, World, UNIX_ORIGIN};

const STEPS: u64 = 20_000;

/// A repository announced on the own relay and two remotes, with every kind
/// of event that tags it, plus noise.
struct Fixture {
    maintainer: Keys,
    announcement: Event,
    a_events: Vec<Event>,
    b_events: Vec<Event>,
}

fn at(offset: u64) -> u64 {
    UNIX_ORIGIN - 100_000 + offset
}

fn fixture() -> Fixture {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let (a, b) = (relay_url("a"), relay_url("b"));
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a, &b], at(0));
    let repo = repo_ref(&maintainer, "alpha");
    let issue = events::root(&user, 1621, &repo, "issue", at(10));
    let patch = events::root(&user, 1617, &repo, "patch", at(20));
    let pr = events::root(&user, 1618, &repo, "pr", at(30));
    let other = Keys::generate();
    let unrelated_repo = events::announcement(&other, "beta", &[&a], at(5));
    let mut a_events = vec![
        announcement.clone(),
        issue.clone(),
        patch.clone(),
        pr.clone(),
        events::pr_update(&user, &pr.id, &repo, events::TIP, at(31)),
        events::reply(&user, &issue.id, "reply", at(40)),
        events::quote(&user, &repo.to_string(), at(41)),
        events::quote(&user, &issue.id.to_hex(), at(42)),
        events::upper_a(&user, &repo, at(43)),
        events::state(&maintainer, "alpha", &[events::TIP], at(44)),
        unrelated_repo.clone(),
        events::root(&user, 1621, &repo_ref(&other, "beta"), "not ours", at(45)),
    ];
    a_events.extend((0..20).map(|n| events::noise(&user, &format!("noise {n}"), at(50 + n))));
    let b_events = vec![
        announcement.clone(),
        events::reply(&user, &patch.id, "reply on b", at(60)),
        events::root(&user, 1621, &repo, "issue on b", at(61)),
        events::noise(&user, "noise on b", at(62)),
    ];
    Fixture {
        maintainer,
        announcement,
        a_events,
        b_events,
    }
}

fn world_with(fixture: &Fixture, a: SimRelayConfig, b: SimRelayConfig) -> World {
    World::new(
        config(),
        vec![
            sim_relay_with("a", fixture.a_events.clone(), a),
            sim_relay_with("b", fixture.b_events.clone(), b),
        ],
        vec![fixture.announcement.clone()],
    )
}

/// The fixture's world with relay a's events and behaviour replaced.
fn world_with_a(fixture: &Fixture, a_events: Vec<Event>, a: SimRelayConfig) -> World {
    World::new(
        config(),
        vec![
            sim_relay_with("a", a_events, a),
            sim_relay("b", fixture.b_events.clone()),
        ],
        vec![fixture.announcement.clone()],
    )
}

fn synced(fixture: &Fixture, a: SimRelayConfig, b: SimRelayConfig) -> World {
    let mut world = world_with(fixture, a, b);
    assert!(
        world.run_until_idle(STEPS),
        "sync did not converge: {}",
        world.dump()
    );
    world
}

fn assert_converged(world: &World, fixture: &Fixture) {
    let expected = world.expected(std::slice::from_ref(&fixture.announcement), &[]);
    let stored = world.stored();
    let missing: Vec<_> = expected.difference(&stored).collect();
    let extra: Vec<_> = stored.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
}

fn sent_events(world: &World, relay: &str) -> usize {
    world.relays[&relay_url(relay)].stats().events_sent
}

fn neg_opens(world: &World, relay: &str) -> usize {
    world.relays[&relay_url(relay)].stats().neg_opens
}

fn subscribes_since(world: &World, from: grasp_sync_core::Instant) -> Vec<Filter> {
    world
        .command_log
        .iter()
        .filter(|(when, _)| *when >= from)
        .filter_map(|(_, command)| match command {
            Command::Subscribe { filters, .. } => Some(filters.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

// ---------------------------------------------------------------- scenarios

#[test]
fn fresh_start_syncs_every_matching_event_and_no_noise() {
    let fixture = fixture();
    let world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    assert_converged(&world, &fixture);
    let stored = world.stored();
    assert_eq!(stored.len(), 12, "10 events from a, 2 from b");
    for noise in fixture
        .a_events
        .iter()
        .filter(|event| event.content.starts_with("noise"))
    {
        assert!(!stored.contains(&noise.id), "noise stored");
    }
    let state = world.engine.relay_state(&relay_url("a")).unwrap();
    assert!(world.engine.is_connected(&relay_url("a")));
    assert!(state.announcements_synced);
    assert!(neg_opens(&world, "a") > 0, "fresh start uses NIP-77");
    assert_eq!(
        world.engine.stats().dropped_forged + world.engine.stats().dropped_off_filter,
        0
    );
}

#[test]
fn events_and_store_answers_handed_over_in_batches_sync_the_same() {
    let fixture = fixture();
    let run = |batched: bool| {
        let mut world = world_with(
            &fixture,
            SimRelayConfig::default(),
            SimRelayConfig::default(),
        );
        world.batched = batched;
        assert!(
            world.run_until_idle(STEPS),
            "sync did not converge: {}",
            world.dump()
        );
        world
    };
    let (one_by_one, batched) = (run(false), run(true));
    assert_converged(&batched, &fixture);
    assert_eq!(batched.stored(), one_by_one.stored());
    assert!(batched.largest_batch > 1, "no events were batched");
    // Nothing in a batch is passed over: no relay is asked for more.
    for relay in ["a", "b"] {
        assert_eq!(
            sent_events(&batched, relay),
            sent_events(&one_by_one, relay),
            "events {relay} sent"
        );
    }
    // The announcement was in the own relay from the start.
    let synced = batched.stored();
    for id in synced.iter().filter(|id| **id != fixture.announcement.id) {
        assert_eq!(
            batched.stores_of(id),
            1,
            "each event handed to the store once"
        );
    }
    let stats = batched.engine.stats();
    assert_eq!(stats.dropped_forged + stats.dropped_off_filter, 0);
}

#[test]
fn quick_reconnect_catches_up_events_published_during_a_five_minute_outage() {
    let fixture = fixture();
    let mut world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let a = relay_url("a");
    let down_at = world.unix().as_secs();
    world.take_down(&a);
    world.run_for(Duration::from_secs(60), STEPS);
    let user = Keys::generate();
    let issue_id = fixture.a_events[1].id;
    let during = events::reply(
        &user,
        &issue_id,
        "written while we were away",
        world.unix().as_secs(),
    );
    world.publish(&a, during.clone());
    world.run_for(Duration::from_secs(240), STEPS);
    let sent_before = sent_events(&world, "a");
    let negs_before = neg_opens(&world, "a");
    let reconnect_from = world.now;
    world.bring_up(&a);
    assert!(world.run_until(STEPS, |w| w.stored().contains(&during.id)
        && w.engine.is_idle()));
    assert_converged(&world, &fixture);
    // The reply's author joins the repository's participants (Sync+): their
    // relay list is new work, looked up once; nothing confirmed is
    // reconciled again.
    let new_lookups = world
        .command_log
        .iter()
        .filter(|(when, _)| *when >= reconnect_from)
        .filter(|(_, command)| {
            matches!(command, Command::NegOpen { relay, filter, .. }
            if *relay == a && filter.authors.is_some())
        })
        .count();
    assert_eq!(
        neg_opens(&world, "a") - new_lookups,
        negs_before,
        "a quick reconnect does not re-run negentropy"
    );
    assert!(
        sent_events(&world, "a") - sent_before < fixture.a_events.len(),
        "caught up without a full re-sync"
    );
    let since = subscribes_since(&world, reconnect_from)
        .iter()
        .filter_map(|filter| filter.since)
        .min()
        .expect("catch-up uses since");
    assert_eq!(
        since.as_secs(),
        down_at - 15 * 60,
        "since is the last moment connected minus 15 minutes, an absolute timestamp"
    );
}

#[test]
fn long_reconnect_is_a_fresh_start() {
    let fixture = fixture();
    let mut world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let a = relay_url("a");
    world.take_down(&a);
    world.run_for(Duration::from_secs(20 * 60), STEPS);
    let negs_before = neg_opens(&world, "a");
    world.bring_up(&a);
    assert!(world.run_until_idle(STEPS));
    assert!(
        neg_opens(&world, "a") > negs_before,
        "a long outage re-syncs fully"
    );
    assert_converged(&world, &fixture);
}

#[test]
fn consolidation_rebuilds_live_subscriptions_when_too_many_filters() {
    let fixture = fixture();
    let mut world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let repo = repo_ref(&fixture.maintainer, "alpha");
    let user = Keys::generate();
    let a = relay_url("a");
    // 30 self-subscriber batches, each adding one root event: 3 live
    // filters each would reach 90 > 70 without consolidation.
    let mut roots = Vec::new();
    for n in 0..30u64 {
        let root = events::root(
            &user,
            1621,
            &repo,
            &format!("late issue {n}"),
            world.unix().as_secs(),
        );
        world.publish(&a, root.clone());
        roots.push(root);
        world.run_for(Duration::from_secs(6), STEPS);
    }
    assert!(world.run_until_idle(STEPS));
    assert!(world.engine.stats().consolidations >= 1, "{}", world.dump());
    assert!(
        world.relays[&a].open_subscriptions() < 20,
        "live subscriptions were merged"
    );
    let reply = events::reply(
        &user,
        &roots[29].id,
        "reply to the last",
        world.unix().as_secs(),
    );
    world.publish(&a, reply.clone());
    assert!(
        world.run_until(STEPS, |w| w.stored().contains(&reply.id)),
        "live still covers every root"
    );
    assert_converged(&world, &fixture);
}

#[test]
fn daily_sync_is_a_full_negentropy_pass_that_downloads_nothing_again() {
    let fixture = fixture();
    let mut world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let sent_before = sent_events(&world, "a") + sent_events(&world, "b");
    let rejected_before = world.own.rejected.len();
    let negs_before = neg_opens(&world, "a");
    world.run_for(Duration::from_secs(25 * 3600), STEPS);
    assert!(world.run_until_idle(STEPS));
    assert!(neg_opens(&world, "a") > negs_before, "daily sync ran");
    // Only what the own relay refused to keep (the announcement of a
    // repository that does not list us) is offered again.
    let rejected = world.own.rejected.len() - rejected_before;
    assert_eq!(
        sent_events(&world, "a") + sent_events(&world, "b") - sent_before,
        rejected,
        "a NIP-77 re-sync of an already-synced set transfers no stored event again"
    );
    assert_converged(&world, &fixture);
}

#[test]
fn self_subscriber_batch_window_starts_at_the_first_event_and_is_not_reset() {
    let fixture = fixture();
    let mut world = World::new(
        config(),
        vec![sim_relay("a", fixture.a_events.clone())],
        Vec::new(),
    );
    let t0 = world.clock();
    world
        .engine
        .handle_own_events(t0, [fixture.announcement.clone()]);
    assert_eq!(
        world.engine.poll_timeout(),
        Some(t0.instant + Duration::from_secs(5))
    );
    world.now = t0.instant + Duration::from_secs(4);
    let t4 = world.clock();
    let issue = fixture.a_events[1].clone();
    world.engine.handle_own_events(t4, [issue.clone()]);
    assert_eq!(
        world.engine.poll_timeout(),
        Some(t0.instant + Duration::from_secs(5)),
        "not reset"
    );
    world.engine.handle_timeout(t4);
    assert!(
        world.engine.repo_index().repos().is_empty(),
        "nothing before the window closes"
    );
    world.now = t0.instant + Duration::from_secs(5);
    let t5 = world.clock();
    world.engine.handle_timeout(t5);
    let repo = repo_ref(&fixture.maintainer, "alpha");
    let needs = world.engine.repo_index().repo(&repo).unwrap();
    assert!(
        needs.root_events.contains(&issue.id),
        "both events in one batch"
    );
    assert!(world.engine.repo_index().target(&relay_url("a")).is_some());
}

#[test]
fn a_new_announcement_on_a_remote_relay_discovers_a_new_relay() {
    let fixture = fixture();
    let other = Keys::generate();
    let c = relay_url("c");
    let gamma = events::announcement(&other, "gamma", &[&own_url(), &c], at(70));
    let gamma_issue = events::root(
        &other,
        1621,
        &repo_ref(&other, "gamma"),
        "gamma issue",
        at(71),
    );
    let mut a_events = fixture.a_events.clone();
    a_events.push(gamma.clone());
    let mut world = World::new(
        config(),
        vec![
            sim_relay("a", a_events),
            sim_relay("b", fixture.b_events.clone()),
            sim_relay("c", vec![gamma.clone(), gamma_issue.clone()]),
        ],
        vec![fixture.announcement.clone()],
    );
    assert!(world.run_until_idle(STEPS));
    assert!(
        world.engine.is_connected(&c),
        "relay c discovered and connected"
    );
    assert!(world.stored().contains(&gamma_issue.id));
    let expected = world.expected(std::slice::from_ref(&fixture.announcement), &[]);
    assert_eq!(world.stored(), expected);
}

#[test]
fn check_disconnects_drops_a_relay_no_repository_lists_any_more() {
    let fixture = fixture();
    let mut world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let (a, b) = (relay_url("a"), relay_url("b"));
    let newer = events::announcement(&fixture.maintainer, "alpha", &[&own_url(), &a], at(1000));
    world.publish(&a, newer);
    world.run_for(Duration::from_secs(120), STEPS);
    assert!(world.engine.relay_state(&b).is_none(), "b dropped");
    assert!(!world.relays[&b].is_connected());
    assert!(world.engine.is_connected(&a));
    assert_eq!(world.engine.stats().relays_dropped, 1);
}

#[test]
fn a_bootstrap_relay_is_kept_with_nothing_to_sync() {
    let fixture = fixture();
    let boot = relay_url("boot");
    let mut cfg = config();
    cfg.identity.bootstrap_relays = vec![boot.clone()];
    let mut world = World::new(
        cfg,
        vec![sim_relay("boot", vec![fixture.announcement.clone()])],
        Vec::new(),
    );
    world.run_for(Duration::from_secs(300), STEPS);
    assert!(world.engine.is_connected(&boot));
    assert!(world.engine.relay_state(&boot).unwrap().is_bootstrap);
    assert!(
        world.stored().contains(&fixture.announcement.id),
        "bootstrap Layer 1 discovers repositories"
    );
}

// ----------------------------------------------------------------- failures

fn refusing(mode: Nip77Refusal) -> SimRelayConfig {
    SimRelayConfig {
        nip77: mode,
        ..SimRelayConfig::default()
    }
}

fn assert_falls_back(mode: Nip77Refusal) {
    let fixture = fixture();
    let world = synced(&fixture, refusing(mode), SimRelayConfig::default());
    assert_converged(&world, &fixture);
    assert_eq!(
        world.engine.stats().negentropy_refusals,
        1,
        "{mode:?}: one refusal remembered"
    );
    assert!(world.relays[&relay_url("a")].stats().reqs_received > 0);
}

#[test]
fn negentropy_refused_by_neg_err_falls_back_to_req() {
    assert_falls_back(Nip77Refusal::NegErr);
}

#[test]
fn negentropy_refused_by_notice_falls_back_to_req() {
    assert_falls_back(Nip77Refusal::Notice);
}

#[test]
fn negentropy_refused_by_closed_falls_back_to_req() {
    assert_falls_back(Nip77Refusal::Closed);
}

#[test]
fn negentropy_refused_by_silence_falls_back_to_req_after_the_timeout() {
    assert_falls_back(Nip77Refusal::Silence);
}

fn many_issues(maintainer: &Keys, count: u64, seconds: u64) -> Vec<Event> {
    let user = Keys::generate();
    let repo = repo_ref(maintainer, "alpha");
    (0..count)
        .map(|n| {
            events::root(
                &user,
                1621,
                &repo,
                &format!("bulk {n}"),
                at(500 + n % seconds),
            )
        })
        .collect()
}

#[test]
fn equal_created_at_pagination_loses_nothing() {
    let fixture = fixture();
    let mut a_events = fixture.a_events.clone();
    a_events.extend(many_issues(&fixture.maintainer, 1200, 4));
    let a = SimRelayConfig {
        nip77: Nip77Refusal::NegErr,
        default_limit: 500,
        ..SimRelayConfig::default()
    };
    let mut world = world_with_a(&fixture, a_events, a);
    assert!(world.run_until_idle(STEPS));
    assert_converged(&world, &fixture);
    assert_eq!(world.engine.stats().crowded_seconds, 0);
}

#[test]
fn a_silent_limit_clamp_does_not_end_pagination() {
    let fixture = fixture();
    let mut a_events = fixture.a_events.clone();
    a_events.extend(many_issues(&fixture.maintainer, 700, 700));
    let a = SimRelayConfig {
        nip77: Nip77Refusal::Notice,
        max_limit: Some(100),
        ..SimRelayConfig::default()
    };
    let mut world = world_with_a(&fixture, a_events, a);
    assert!(world.run_until_idle(STEPS));
    assert_converged(&world, &fixture);
}

#[test]
fn negentropy_fetches_of_missing_ids_survive_a_silent_clamp() {
    let fixture = fixture();
    let user = Keys::generate();
    let repo = repo_ref(&fixture.maintainer, "alpha");
    let mut a_events = fixture.a_events.clone();
    for n in 0..40 {
        let issue = events::root(&user, 1621, &repo, &format!("extra {n}"), at(200 + n));
        a_events.push(events::reply(&user, &issue.id, "extra reply", at(300 + n)));
        a_events.push(issue);
    }
    let a = SimRelayConfig {
        max_limit: Some(20),
        ..SimRelayConfig::default()
    };
    let mut world = world_with_a(&fixture, a_events, a);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert_converged(&world, &fixture);
    assert!(world.engine.stats().negentropy_rounds > 0);
}

#[test]
fn closed_subscriptions_fail_the_batch_and_items_are_planned_again() {
    let fixture = fixture();
    let a = SimRelayConfig {
        nip77: Nip77Refusal::NegErr,
        close_every_req: Some("error: database busy".into()),
        ..SimRelayConfig::default()
    };
    let mut world = world_with(&fixture, a, SimRelayConfig::default());
    world.run_for(Duration::from_secs(20), STEPS);
    assert!(world.engine.stats().batches_failed > 0);
    world
        .relays
        .get_mut(&relay_url("a"))
        .unwrap()
        .config_mut()
        .close_every_req = None;
    assert!(world.run_until_idle(STEPS));
    assert_converged(&world, &fixture);
}

#[test]
fn a_rate_limited_relay_is_fully_synced_after_its_cooldown() {
    let fixture = fixture();
    let a = SimRelayConfig {
        nip77: Nip77Refusal::NegErr,
        rate_limit: Some((2, Duration::from_secs(60))),
        ..SimRelayConfig::default()
    };
    let world = synced(&fixture, a, SimRelayConfig::default());
    assert!(world.engine.stats().rate_limits > 0);
    assert!(world.relays[&relay_url("a")].stats().rate_limited > 0);
    assert_converged(&world, &fixture);
}

#[test]
fn a_stalled_batch_times_out_and_is_planned_again() {
    let fixture = fixture();
    let mut world = world_with(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let a = relay_url("a");
    world.stalled_historic.insert(a.clone());
    let user = Keys::generate();
    let issue_id = fixture.a_events[1].id;
    // Live traffic keeps arriving, so the relay is not silent: only its
    // historic answers stall.
    for n in 0..6u64 {
        world.run_for(Duration::from_secs(15), STEPS);
        let live = events::reply(
            &user,
            &issue_id,
            &format!("live {n}"),
            world.unix().as_secs(),
        );
        world.publish(&a, live);
    }
    assert!(
        world.engine.stats().batches_failed > 0,
        "no progress for the timeout fails the batch"
    );
    world.stalled_historic.remove(&a);
    assert!(world.run_until_idle(STEPS));
    assert_converged(&world, &fixture);
}

#[test]
fn a_silent_relay_is_reconnected_and_synced() {
    let fixture = fixture();
    let mut world = world_with(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let a = relay_url("a");
    world.run_until(STEPS, |w| w.engine.is_connected(&a));
    world.blackholed.insert(a.clone());
    world.run_for(Duration::from_secs(90), STEPS);
    world.blackholed.remove(&a);
    assert!(world.run_until_idle(STEPS));
    let connects = world
        .command_log
        .iter()
        .filter(|(_, command)| matches!(command, Command::Connect { relay, .. } if relay == &a))
        .count();
    assert!(
        connects >= 2,
        "a relay silent for the batch timeout is reconnected"
    );
    assert_converged(&world, &fixture);
}

#[test]
fn a_known_subscription_limit_is_never_exceeded() {
    let fixture = fixture();
    let mut a_events = fixture.a_events.clone();
    a_events.extend(many_issues(&fixture.maintainer, 300, 300));
    let a = SimRelayConfig {
        max_subscriptions: Some(3),
        ..SimRelayConfig::default()
    };
    let mut world = world_with_a(&fixture, a_events, a);
    let limits = RelayLimits {
        max_subscriptions: Some(3),
        ..RelayLimits::default()
    };
    let now = world.clock();
    world
        .engine
        .handle_relay_limits(now, &relay_url("a"), limits);
    assert!(world.run_until_idle(STEPS));
    assert_converged(&world, &fixture);
    assert!(world.max_open(&relay_url("a")) <= 3);
    assert_eq!(world.relays[&relay_url("a")].stats().refused_for_limit, 0);
}

fn learns_subscription_limit(refusal: SubLimitRefusal) {
    let fixture = fixture();
    let mut a_events = fixture.a_events.clone();
    a_events.extend(many_issues(&fixture.maintainer, 300, 300));
    let a = SimRelayConfig {
        max_subscriptions: Some(2),
        sub_limit_refusal: refusal.clone(),
        ..SimRelayConfig::default()
    };
    let mut world = world_with_a(&fixture, a_events, a);
    let a_url = relay_url("a");
    assert!(world.run_until(STEPS, |w| w.engine.stats().subscription_refusals >= 1));
    // Refusals of subscriptions already in flight still arrive; after
    // that the learned limit holds.
    world.run_for(Duration::from_secs(1), STEPS);
    let refused_once_learned = world.relays[&a_url].stats().refused_for_limit;
    assert!(world.run_until_idle(STEPS), "{refusal:?}: {}", world.dump());
    assert_converged(&world, &fixture);
    assert_eq!(
        world.relays[&a_url].stats().refused_for_limit,
        refused_once_learned,
        "the limit is learned, not hammered"
    );
    assert_eq!(
        world
            .engine
            .relay_activity(&a_url)
            .unwrap()
            .subscription_limit,
        2
    );
}

#[test]
fn a_subscription_limit_refused_by_closed_is_learned() {
    learns_subscription_limit(SubLimitRefusal::Closed);
}

#[test]
fn a_subscription_limit_refused_by_notice_is_learned() {
    learns_subscription_limit(SubLimitRefusal::Notice);
}

#[test]
fn forged_and_off_filter_events_never_reach_the_store() {
    let fixture = fixture();
    let user = Keys::generate();
    let repo = repo_ref(&fixture.maintainer, "alpha");
    let genuine = events::root(&user, 1621, &repo, "genuine", at(90));
    let forged = events::forged(&genuine, &fixture.announcement);
    let off_filter = events::noise(&user, "pushed without being asked", at(91));
    let a = SimRelayConfig {
        forged: vec![forged.clone()],
        off_filter: vec![off_filter.clone()],
        ..SimRelayConfig::default()
    };
    let world = synced(&fixture, a, SimRelayConfig::default());
    let stored = world.stored();
    assert!(!stored.contains(&forged.id));
    assert!(!stored.contains(&off_filter.id));
    assert!(world.engine.stats().dropped_forged > 0);
    assert!(world.engine.stats().dropped_off_filter > 0);
    assert_converged(&world, &fixture);
}

#[test]
fn live_events_after_historic_sync_reach_the_store() {
    let fixture = fixture();
    let mut world = synced(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let user = Keys::generate();
    let reply = events::reply(
        &user,
        &fixture.b_events[2].id,
        "live reply",
        world.unix().as_secs(),
    );
    world.publish(&relay_url("b"), reply.clone());
    assert!(world.run_until(STEPS, |w| w.stored().contains(&reply.id)));
    let _: BTreeSet<EventId> = world.stored();
}

#[test]
fn a_negentropy_resync_of_an_already_synced_set_transfers_no_event_again() {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at(0));
    let repo = repo_ref(&maintainer, "alpha");
    let mut a_events = vec![announcement.clone()];
    for n in 0..200 {
        let issue = events::root(&user, 1621, &repo, &format!("issue {n}"), at(n));
        a_events.push(events::reply(&user, &issue.id, "reply", at(n + 1)));
        a_events.push(issue);
    }
    let mut world = World::new(
        config(),
        vec![sim_relay("a", a_events)],
        vec![announcement.clone()],
    );
    assert!(world.run_until_idle(STEPS));
    assert_eq!(world.stored().len(), 401);
    let sent_before = sent_events(&world, "a");
    let negs_before = neg_opens(&world, "a");
    world.run_for(Duration::from_secs(25 * 3600), STEPS);
    assert!(world.run_until_idle(STEPS));
    assert!(
        neg_opens(&world, "a") > negs_before,
        "the daily fresh start reconciled again"
    );
    assert_eq!(
        sent_events(&world, "a"),
        sent_before,
        "no event downloaded twice"
    );
    assert!(world.own.rejected.is_empty());
}

#[test]
fn the_connect_timeout_is_the_base_backoff_and_failed_connects_back_off() {
    let fixture = fixture();
    let mut world = world_with(
        &fixture,
        SimRelayConfig::default(),
        SimRelayConfig::default(),
    );
    let b = relay_url("b");
    world.relays.get_mut(&b).unwrap().set_down(true);
    world.run_for(Duration::from_secs(60), STEPS);
    let connects: Vec<_> = world
        .command_log
        .iter()
        .filter_map(|(when, command)| match command {
            Command::Connect { relay, timeout } if relay == &b => Some((*when, *timeout)),
            _ => None,
        })
        .collect();
    assert!(connects
        .iter()
        .all(|(_, timeout)| *timeout == Duration::from_secs(5)));
    let gaps: Vec<u64> = connects
        .windows(2)
        .map(|pair| pair[1].0.saturating_duration_since(pair[0].0).as_secs())
        .collect();
    assert!(gaps.len() >= 2, "{gaps:?}");
    assert!(
        gaps.windows(2).all(|pair| pair[1] >= pair[0]),
        "backoff grows: {gaps:?}"
    );
}

#[test]
fn the_own_relay_resubscribes_with_since_fifteen_minutes_before_it_was_last_connected() {
    let mut world = World::new(config(), Vec::new(), Vec::new());
    world.run_for(Duration::from_secs(3600), STEPS);
    let dropped_at = world.unix().as_secs();
    let commands_before = world.command_log.len();
    world.drop_own();
    world.run_for(Duration::from_secs(120), STEPS);
    // The engine itself reconnects and subscribes again, live and history.
    let own = own_url();
    let resubscribed: Vec<&Filter> = world.command_log[commands_before..]
        .iter()
        .filter_map(|(_, command)| match command {
            Command::Subscribe { relay, filters, .. } if relay == &own => Some(filters),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(resubscribed.len(), 2, "live and history: {resubscribed:?}");
    for filter in resubscribed {
        assert_eq!(filter.since, Some(Timestamp::from_secs(dropped_at - 900)));
        let kinds: BTreeSet<u16> = filter
            .kinds
            .clone()
            .unwrap()
            .iter()
            .map(|kind| kind.as_u16())
            .collect();
        // Relay lists too, with Sync+ on (the default): participants'
        // lists are known again after a restart.
        assert_eq!(
            kinds,
            BTreeSet::from([30617, 1617, 1618, 1621, 10002, 10317])
        );
    }
    assert!(world.engine.own_history_complete());
}

mod convergence {
    use super::*;
    use proptest::prelude::*;

    /// A fault that lasts a while on one relay.
    #[derive(Clone, Debug)]
    enum Fault {
        Down,
        Stall,
        CloseEveryReq,
        RateLimit,
        DropAfter(usize),
        /// The own relay drops now and every history read drops after its
        /// first page.
        OwnDropMidHistory,
        /// Store writes fail.
        StoreFail,
        /// Store writes are never answered.
        StoreStall,
        /// The own relay refuses writes `rate-limited:`.
        OwnRateLimited,
        /// Store answers overtake each other and relay messages.
        Reorder,
        /// The relay sends every EVENT twice.
        Duplicate,
    }

    #[derive(Clone, Debug)]
    struct Knobs {
        nip77: Nip77Refusal,
        max_limit: Option<usize>,
        max_subscriptions: Option<usize>,
        tell_limit: bool,
        refusal: SubLimitRefusal,
        hostile: bool,
        max_message_length: Option<usize>,
        tell_message_length: bool,
    }

    fn knobs() -> impl Strategy<Value = Knobs> {
        (
            prop_oneof![
                Just(Nip77Refusal::Served),
                Just(Nip77Refusal::NegErr),
                Just(Nip77Refusal::Notice),
                Just(Nip77Refusal::Closed),
                Just(Nip77Refusal::Silence)
            ],
            proptest::option::of(20usize..200),
            proptest::option::of(2usize..6),
            any::<bool>(),
            prop_oneof![Just(SubLimitRefusal::Closed), Just(SubLimitRefusal::Notice)],
            any::<bool>(),
            proptest::option::of(9_000usize..40_000),
            any::<bool>(),
        )
            .prop_map(
                |(
                    nip77,
                    max_limit,
                    max_subscriptions,
                    tell_limit,
                    refusal,
                    hostile,
                    max_message_length,
                    tell_message_length,
                )| Knobs {
                    nip77,
                    max_limit,
                    max_subscriptions,
                    tell_limit,
                    refusal,
                    hostile,
                    max_message_length,
                    tell_message_length,
                },
            )
    }

    /// (start in ms, relay, fault, duration in s): half of the faults hit
    /// the first seconds, while the initial sync is running.
    fn fault() -> impl Strategy<Value = (u64, usize, Fault, u64)> {
        (
            prop_oneof![0u64..5_000, 0u64..600_000],
            0usize..2,
            prop_oneof![
                Just(Fault::Down),
                Just(Fault::Stall),
                Just(Fault::CloseEveryReq),
                Just(Fault::RateLimit),
                (1usize..40).prop_map(Fault::DropAfter),
                Just(Fault::OwnDropMidHistory),
                Just(Fault::StoreFail),
                Just(Fault::StoreStall),
                Just(Fault::OwnRateLimited),
                Just(Fault::Reorder),
                Just(Fault::Duplicate),
            ],
            1u64..900,
        )
    }

    fn apply(world: &mut World, relay: &RelayUrl, fault: &Fault) {
        match fault {
            Fault::Down => world.take_down(relay),
            Fault::Stall => {
                world.blackholed.insert(relay.clone());
            }
            Fault::CloseEveryReq => {
                world
                    .relays
                    .get_mut(relay)
                    .unwrap()
                    .config_mut()
                    .close_every_req = Some("error: busy".into())
            }
            Fault::RateLimit => {
                world.relays.get_mut(relay).unwrap().config_mut().rate_limit =
                    Some((3, Duration::from_secs(60)))
            }
            Fault::DropAfter(n) => {
                world
                    .relays
                    .get_mut(relay)
                    .unwrap()
                    .config_mut()
                    .disconnect_after = Some(*n)
            }
            Fault::OwnDropMidHistory => {
                world.own.drop_during_history = true;
                world.drop_own();
            }
            Fault::StoreFail => world.own.store_failing = true,
            Fault::StoreStall => world.own.store_stalled = true,
            Fault::OwnRateLimited => world.own.write_rate_limited = true,
            Fault::Reorder => world.own.reorder_outcomes = true,
            Fault::Duplicate => {
                world.duplicating.insert(relay.clone());
            }
        }
    }

    /// Ends every fault on `relay` and on the own relay and store.
    fn clear(world: &mut World, relay: &RelayUrl) {
        world.bring_up(relay);
        world.blackholed.remove(relay);
        world.duplicating.remove(relay);
        let config = world.relays.get_mut(relay).unwrap().config_mut();
        config.close_every_req = None;
        config.rate_limit = None;
        config.disconnect_after = None;
        world.own.drop_during_history = false;
        world.own.store_failing = false;
        world.own.store_stalled = false;
        world.own.write_rate_limited = false;
        world.own.reorder_outcomes = false;
    }

    proptest! {
        // `SIM_CASES=500 cargo test --test engine_simulation convergence`
        // searches longer.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("SIM_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(24),
            ..ProptestConfig::default()
        })]

        /// When faults stop, the own store holds exactly the events matching
        /// our filters on the reachable relays, nothing forged or off-filter,
        /// and no relay saw more subscriptions than the limit it announced.
        #[test]
        fn sync_converges_after_random_faults(
            knobs in proptest::collection::vec(knobs(), 2),
            faults in proptest::collection::vec(fault(), 0..6),
            extra_issues in 0u64..60,
            batched in any::<bool>(),
        ) {
            let fixture = fixture();
            let user = Keys::generate();
            let repo = repo_ref(&fixture.maintainer, "alpha");
            let mut a_events = fixture.a_events.clone();
            for n in 0..extra_issues {
                let issue = events::root(&user, 1621, &repo, &format!("extra {n}"), at(200 + n / 3));
                a_events.push(events::reply(&user, &issue.id, "extra reply", at(300 + n / 3)));
                a_events.push(issue);
            }
            // Sync+: the user's outbox relay `c`, listed in their 10002 on
            // `a`, holds a reply found nowhere else and what is not ours.
            // The user takes part (a reply on `a`), so their list is read.
            let c = relay_url("c");
            a_events.push(events::reply(&user, &fixture.a_events[1].id, "I take part", at(94)));
            a_events.push(events::relay_list(&user, &[&c], &[], at(95)));
            let outbox_events = vec![
                events::reply(&user, &fixture.a_events[1].id, "only on my outbox", at(96)),
                events::noise(&user, "a note on my outbox", at(97)),
                events::announcement(&Keys::generate(), "gamma", &[&c], at(98)),
            ];
            let event_sets = [a_events, fixture.b_events.clone()];
            let names = ["a", "b"];
            let genuine = events::root(&user, 1621, &repo, "genuine", at(90));
            let forged = events::forged(&genuine, &fixture.announcement);
            let off_filter = events::noise(&user, "unasked", at(91));
            let relays = knobs
                .iter()
                .zip(names)
                .zip(event_sets)
                .map(|((knob, name), events)| {
                    let config = SimRelayConfig {
                        nip77: knob.nip77,
                        max_limit: knob.max_limit,
                        max_subscriptions: knob.max_subscriptions,
                        sub_limit_refusal: knob.refusal.clone(),
                        forged: if knob.hostile { vec![forged.clone()] } else { Vec::new() },
                        off_filter: if knob.hostile { vec![off_filter.clone()] } else { Vec::new() },
                        max_message_length: knob.max_message_length,
                        ..SimRelayConfig::default()
                    };
                    sim_relay_with(name, events, config)
                })
                .chain([sim_relay("c", outbox_events.clone())])
                .collect();
            let mut world = World::new(config(), relays, vec![fixture.announcement.clone()]);
            world.batched = batched;
            for (knob, name) in knobs.iter().zip(names).filter(|(knob, _)| knob.tell_limit || knob.tell_message_length) {
                let limits = RelayLimits {
                    max_subscriptions: knob.max_subscriptions.filter(|_| knob.tell_limit),
                    max_message_length: knob.max_message_length.filter(|_| knob.tell_message_length),
                    ..RelayLimits::default()
                };
                let now = world.clock();
                world.engine.handle_relay_limits(now, &relay_url(name), limits);
            }
            let mut schedule = faults.clone();
            schedule.sort_by_key(|(start, ..)| *start);
            let mut active: Vec<(u64, RelayUrl)> = Vec::new();
            for (start, relay, fault, duration) in &schedule {
                let start_at = grasp_sync_core::Instant::from_millis(*start);
                if world.now < start_at {
                    world.run_for(start_at.saturating_duration_since(world.now), STEPS);
                }
                let url = relay_url(names[*relay]);
                apply(&mut world, &url, fault);
                // Something new is published while the fault lasts: live,
                // a later catch-up or a re-sync must bring it.
                let during = events::reply(&user, &fixture.a_events[1].id, &format!("during fault at {start}"), world.unix().as_secs());
                world.publish(&relay_url("a"), during);
                active.push((start + duration * 1000, url));
            }
            active.sort_by_key(|(end, _)| *end);
            for (end, url) in active {
                let end_at = grasp_sync_core::Instant::from_millis(end);
                if world.now < end_at {
                    world.run_for(end_at.saturating_duration_since(world.now), STEPS);
                }
                clear(&mut world, &url);
            }
            prop_assert!(world.run_until_idle(STEPS), "no convergence: {}", world.dump());
            let expected = world.expected(std::slice::from_ref(&fixture.announcement), &[]);
            let stored = world.stored();
            let missing: Vec<String> = world
                .relays
                .values()
                .flat_map(|relay| relay.events())
                .filter(|event| expected.contains(&event.id) && !stored.contains(&event.id))
                .map(|event| format!("{} {:?} at {}", event.id, event.content, event.created_at.as_secs()))
                .collect();
            prop_assert_eq!(&stored, &expected, "missing {:?}\n{}", missing, world.dump());
            prop_assert!(world.stored().contains(&outbox_events[0].id), "the outbox-only reply");
            prop_assert!(!world.stored().contains(&outbox_events[1].id));
            prop_assert!(!world.stored().contains(&outbox_events[2].id));
            prop_assert!(!world.stored().contains(&forged.id));
            prop_assert!(!world.stored().contains(&off_filter.id));
            for (knob, name) in knobs.iter().zip(names) {
                if let Some(limit) = knob.max_subscriptions.filter(|_| knob.tell_limit) {
                    prop_assert!(world.max_open(&relay_url(name)) <= limit, "{name}: {} > {limit}", world.max_open(&relay_url(name)));
                    prop_assert_eq!(world.relays[&relay_url(name)].stats().refused_for_limit, 0, "{}: a told limit is never hit", name);
                }
                if knob.tell_message_length && knob.max_message_length.is_some() {
                    prop_assert_eq!(world.relays[&relay_url(name)].stats().frames_too_large, 0, "{}: a told message length is never exceeded", name);
                }
            }
        }
    }
}
