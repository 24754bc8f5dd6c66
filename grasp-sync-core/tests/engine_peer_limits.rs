//! What real relays send, we take (issue 44): a relay whose NIP-77 answers
//! are larger than our message limit (strfry answers with frames of up to
//! 500 000 bytes, hex: about 1 MB on the wire) is synced completely by REQ
//! and never left out as unreachable; limits lowered by one blip climb
//! back; malformed frames are bad input like forged events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_core::engine::DEFAULT_FRAME_BUDGET;
use grasp_sync_core::model::SyncMethod;
use grasp_sync_core::screen::Refused;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::SimRelayConfig;
use sim::{config, own_url, relay_url, sim_relay_with, World, UNIX_ORIGIN};

const STEPS: u64 = 400_000;

fn at(offset: u64) -> u64 {
    UNIX_ORIGIN - 200_000 + offset
}

/// A repository announced on the own relay; relay a holds it with `roots`
/// issues and a reply on each.
fn world(roots: usize, a: SimRelayConfig) -> (World, Vec<Event>) {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let announcement =
        events::announcement(&maintainer, "alpha", &[&own_url(), &relay_url("a")], at(0));
    let reference = repo_ref(&maintainer, "alpha");
    let mut remote = vec![announcement.clone()];
    for n in 0..roots as u64 {
        let root = events::root(&user, 1621, &reference, &format!("issue {n}"), at(10 + n));
        remote.push(events::reply(
            &user,
            &root.id,
            &format!("reply {n}"),
            at(100_000 + n),
        ));
        remote.push(root);
    }
    let own = vec![announcement];
    let world = World::new(config(), vec![sim_relay_with("a", remote, a)], own.clone());
    (world, own)
}

fn assert_exact(world: &World, own_events: &[Event]) {
    assert!(!world.expected(own_events, &[]).is_empty());
    world.assert_exact(own_events);
}

#[test]
fn a_relay_whose_nip77_answer_is_over_our_message_limit_is_synced_completely_by_req() {
    // Relay a answers NIP-77 with frames of up to 60 000 bytes (120 kB of
    // hex); we read messages of at most 30 000 bytes.
    let (mut world, own) = world(1_500, SimRelayConfig::default());
    world.client_max_message = Some(30_000);
    let a = relay_url("a");
    assert!(
        world.run_until(STEPS, |w| w.engine.historic_sync_complete()),
        "historic sync never completed: {}",
        world.dump()
    );
    assert_exact(&world, &own);
    assert!(
        world
            .messages_too_large
            .iter()
            .all(|verb| verb == "NEG-MSG")
            && !world.messages_too_large.is_empty(),
        "the NIP-77 answer, and only it, was over the limit: {:?}",
        world.messages_too_large
    );
    assert_eq!(
        world.messages_too_large.len(),
        1,
        "learned at once, not asked again"
    );
    let report = world
        .engine
        .relay_reports()
        .into_iter()
        .find(|report| report.relay == a)
        .expect("relay a reported");
    assert!(!report.unreachable, "the relay answered: not unreachable");
    assert_eq!(report.method, SyncMethod::ReqEose, "its status says REQ");
    let error = report.last_error.unwrap_or_default();
    assert!(
        error.contains("NIP-77") && error.contains("synced by REQ"),
        "its status says why: {error}"
    );
    assert_eq!(world.engine.stats().negentropy_over_limit, 1);
    let health = world.engine.relay_health(&a).expect("tracked");
    assert_eq!(
        health.consecutive_failures(),
        0,
        "no failure counted: nothing backs it off"
    );
    assert_eq!(world.relays[&a].stats().connects, 2, "one reconnect");
}

#[test]
fn with_the_limit_above_the_nip77_answers_the_relay_stays_on_nip77() {
    // The twin with the limit large enough: the same relay, NIP-77 throughout.
    let (mut world, own) = world(1_500, SimRelayConfig::default());
    world.client_max_message = Some(4 * 1024 * 1024);
    assert!(world.run_until(STEPS, |w| w.engine.historic_sync_complete()));
    assert_exact(&world, &own);
    assert!(world.messages_too_large.is_empty());
    assert!(world.relays[&relay_url("a")].stats().neg_opens > 0);
    assert_eq!(world.engine.stats().negentropy_over_limit, 0);
    let report = world
        .engine
        .relay_reports()
        .into_iter()
        .find(|report| report.relay == relay_url("a"))
        .unwrap();
    assert_eq!(report.method, SyncMethod::Negentropy);
}

/// Publishes a new issue on relay a every `every` for `for_`, so the engine
/// keeps working with the relay (and pumping its jobs) the whole time.
fn keep_busy(world: &mut World, every: Duration, for_: Duration, own: &[Event]) {
    let user = Keys::generate();
    let announcement = &own[0];
    let maintainer_key = announcement.pubkey;
    let reference = grasp_sync_core::RepoRef::new(maintainer_key, "alpha").unwrap();
    let rounds = for_.as_secs() / every.as_secs();
    for n in 0..rounds {
        world.run_for(every, STEPS);
        let unix = world.unix().as_secs();
        let issue = events::root(&user, 1621, &reference, &format!("late {n}"), unix);
        world.publish(&relay_url("a"), issue);
    }
    // The last one's poll or live delivery.
    world.run_for(Duration::from_secs(600), STEPS);
}

#[test]
fn a_frame_budget_and_a_subscription_limit_lowered_by_a_blip_recover() {
    // A blip: for a while the relay (behind a proxy having a bad minute)
    // drops frames over 20 000 bytes and refuses a fourth subscription.
    let blip = SimRelayConfig {
        max_message_length: Some(20_000),
        max_subscriptions: Some(3),
        ..SimRelayConfig::default()
    };
    let (mut world, own) = world(2_000, blip);
    let a = relay_url("a");
    assert!(world.run_until(STEPS, |w| w.engine.historic_sync_complete()));
    assert_exact(&world, &own);
    let lowered = world.engine.relay_activity(&a).expect("connected");
    assert!(world.engine.stats().frame_budget_lowered >= 1);
    assert!(lowered.frame_budget < DEFAULT_FRAME_BUDGET, "{lowered:?}");
    assert!(
        lowered.subscription_limit < 4,
        "the refusal taught a lower limit: {lowered:?}"
    );
    // The blip is over: the relay takes what it always took.
    *world.relays.get_mut(&a).unwrap().config_mut() = SimRelayConfig::default();
    keep_busy(
        &mut world,
        Duration::from_secs(60),
        Duration::from_secs(3 * 3_600),
        &own,
    );
    let recovered = world.engine.relay_activity(&a).expect("connected");
    assert!(world.engine.stats().learned_limits_raised >= 2);
    assert_eq!(
        recovered.frame_budget, DEFAULT_FRAME_BUDGET,
        "the frame budget climbed back: {recovered:?}"
    );
    assert_eq!(
        recovered.subscription_limit,
        config().limits.max_subscriptions,
        "the subscription limit climbed back: {recovered:?}"
    );
}

#[test]
fn a_relay_really_at_its_limits_keeps_them_while_probed() {
    // The twin: the relay's limits are real, the probes are refused, the
    // learned limits stay at the relay's and the sync stays exact.
    let real = SimRelayConfig {
        max_message_length: Some(20_000),
        max_subscriptions: Some(3),
        ..SimRelayConfig::default()
    };
    let (mut world, own) = world(2_000, real);
    let a = relay_url("a");
    assert!(world.run_until(STEPS, |w| w.engine.historic_sync_complete()));
    keep_busy(
        &mut world,
        Duration::from_secs(60),
        Duration::from_secs(3 * 3_600),
        &own,
    );
    // Probed upward at most once a quiet period, and lowered again by the
    // relay's answer: its limits cost a drop or a refusal per period at
    // most, never more than one step above what the relay takes.
    let activity = world.engine.relay_activity(&a).expect("connected");
    let periods = (3 * 3_600 / 300) as usize;
    let relay = world.relays[&a].stats().clone();
    assert!(
        relay.frames_too_large <= periods + 2,
        "{} drops in {periods} periods",
        relay.frames_too_large
    );
    assert!(activity.subscription_limit <= 4, "{activity:?}");
    assert!(activity.frame_budget < DEFAULT_FRAME_BUDGET, "{activity:?}");
    let stored: BTreeSet<EventId> = world.stored();
    let expected = world.expected(&own, &[]);
    let missing = expected.difference(&stored).count();
    assert_eq!(missing, 0, "nothing lost while probing");
}

#[test]
fn a_relay_flooding_malformed_frames_is_cut_off_like_a_forged_flood() {
    let (mut world, _own) = world(10, SimRelayConfig::default());
    let a = relay_url("a");
    assert!(world.run_until(STEPS, |w| w.engine.historic_sync_complete()));
    let threshold = config().caps.max_bad_events;
    let now = world.clock();
    for n in 0..=threshold {
        world.engine.handle_refused_event(
            now,
            &a,
            Refused::Malformed {
                bytes: 10 + n as usize,
            },
        );
    }
    let stats = world.engine.stats();
    assert_eq!(stats.dropped_malformed, threshold + 1);
    assert_eq!(stats.relays_cut_for_bad_events, 1, "cut off once");
    assert!(!world.engine.is_connected(&a), "disconnected");
    let health = world.engine.relay_health(&a).expect("tracked");
    assert_eq!(health.consecutive_failures(), 1, "and backed off");
}
