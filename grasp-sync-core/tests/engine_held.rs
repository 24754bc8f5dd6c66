//! A host that keeps events in a purgatory of its own answers
//! `IngestOutcome::Held`: the sync counts them as stored (their batch
//! confirms, a NIP-77 re-sync does not download them again) until the host
//! drops them. A held announcement holds its repository: only its
//! announcement and states are synced until the host promotes it. A
//! refusal's type, not its text, decides whether it is retried. NIP-77 can
//! be switched off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::time::Duration;

use grasp_sync_core::engine::Command;
use grasp_sync_core::model::SyncMethod;
use grasp_sync_core::store::{IngestOutcome, Refusal};
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

const STEPS: u64 = 400_000;

/// A day and more: the daily NIP-77 re-sync has run.
const PAST_THE_DAILY_RESYNC: Duration = Duration::from_secs(25 * 3600);

fn sent_events(world: &World, relay: &str) -> usize {
    world.relays[&relay_url(relay)].stats().events_sent
}

fn neg_opens(world: &World, relay: &str) -> usize {
    world.relays[&relay_url(relay)].stats().neg_opens
}

/// The filters of every command to `relay` that asks it for something
/// (REQ, NEG-OPEN, the local items of a reconciliation), in order.
fn filters_asked(world: &World, to: &RelayUrl) -> Vec<Filter> {
    world
        .command_log
        .iter()
        .flat_map(|(_, command)| match command {
            Command::Subscribe { relay, filters, .. } if relay == to => filters.clone(),
            Command::NegOpen { relay, filter, .. }
            | Command::QueryLocalItems { relay, filter, .. }
                if relay == to =>
            {
                vec![filter.clone()]
            }
            _ => Vec::new(),
        })
        .collect()
}

/// Does `filter` ask for events tagging the repository `coordinate`
/// (`30617:<owner>:<d>`)?
fn names_repo(filter: &Filter, coordinate: &str) -> bool {
    filter
        .generic_tags
        .values()
        .any(|values| values.iter().any(|value| value == coordinate))
}

/// One repository on relay `a` with two issues; the own relay holds its
/// announcement.
fn two_issues() -> (World, Event, Event) {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at);
    let repo = repo_ref(&maintainer, "alpha");
    let held = events::root(&user, 1621, &repo, "held issue", at + 1);
    let stored = events::root(&user, 1621, &repo, "stored issue", at + 2);
    let world = World::new(
        config(),
        vec![sim_relay(
            "a",
            vec![announcement.clone(), held.clone(), stored.clone()],
        )],
        vec![announcement],
    );
    (world, held, stored)
}

#[test]
fn a_held_event_confirms_its_batch_and_is_not_downloaded_again_until_the_host_drops_it() {
    let (mut world, held, stored) = two_issues();
    world.own.answers.insert(held.id, IngestOutcome::Held);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(world.stored().contains(&stored.id), "{}", world.dump());
    assert!(!world.stored().contains(&held.id), "the host holds it");
    let stats = world.engine.stats();
    assert_eq!(stats.events_held, 1);
    assert_eq!(stats.batches_failed, 0, "{}", world.dump());
    assert_eq!(stats.store_retries, 0, "a held event is not retried");
    assert!(world.engine.historic_sync_complete(), "{}", world.dump());
    assert_eq!(world.stores_of(&held.id), 1);
    assert_eq!(world.engine.held_bytes().held_events, 1);

    // The daily NIP-77 re-sync lists the held event as ours: the relay
    // sends nothing again.
    let sent_before = sent_events(&world, "a");
    let negs_before = neg_opens(&world, "a");
    world.run_for(PAST_THE_DAILY_RESYNC, STEPS);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(
        neg_opens(&world, "a") > negs_before,
        "the re-sync reconciled"
    );
    assert_eq!(
        sent_events(&world, "a"),
        sent_before,
        "no event downloaded again: {}",
        world.dump()
    );
    assert_eq!(world.stores_of(&held.id), 1);

    // The host drops it (it expired without its data) and would take it
    // now: the next re-sync fetches it again.
    world.own.answers.remove(&held.id);
    let now = world.clock();
    world.engine.handle_held_dropped(now, [held.id]);
    assert_eq!(world.engine.held_bytes().held_events, 0);
    world.run_for(PAST_THE_DAILY_RESYNC, STEPS);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert_eq!(world.stores_of(&held.id), 2, "{}", world.dump());
    assert!(world.stored().contains(&held.id), "{}", world.dump());
    assert_eq!(sent_events(&world, "a"), sent_before + 1);
}

/// A repository found on bootstrap relay `a` (the own relay has nothing
/// yet): its announcement, a state and an issue.
fn bootstrap_repository() -> (World, Event, Event, Event, String) {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at);
    let repo = repo_ref(&maintainer, "alpha");
    let state = events::state(
        &maintainer,
        "alpha",
        &["0123456789abcdef0123456789abcdef01234567"],
        at + 1,
    );
    let issue = events::root(&user, 1621, &repo, "issue", at + 2);
    let world = World::new(
        config().with_bootstrap_relays(vec![a]),
        vec![sim_relay(
            "a",
            vec![announcement.clone(), state.clone(), issue.clone()],
        )],
        Vec::new(),
    );
    (world, announcement, state, issue, repo.to_string())
}

#[test]
fn a_held_repository_syncs_its_announcement_and_states_and_the_rest_once_promoted() {
    let (mut world, announcement, state, issue, coordinate) = bootstrap_repository();
    world
        .own
        .answers
        .insert(announcement.id, IngestOutcome::Held);
    let a = relay_url("a");
    let repo: grasp_sync_core::RepoRef = coordinate.parse().expect("a repository");

    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(world.engine.is_repository_held(&repo), "{}", world.dump());
    assert_eq!(
        world.engine.held_repositories().collect::<Vec<_>>(),
        vec![&repo]
    );
    assert!(world.stored().contains(&state.id), "{}", world.dump());
    assert!(!world.stored().contains(&issue.id), "{}", world.dump());
    assert!(
        !filters_asked(&world, &a)
            .iter()
            .any(|filter| names_repo(filter, &coordinate)),
        "no Layer 2 filter for a held repository: {}",
        world.dump()
    );
    assert!(
        world.engine.historic_sync_complete(),
        "a held repository's Layer 2 is not pending: {}",
        world.dump()
    );

    // The git data arrived: the host promotes it.
    world.own.answers.remove(&announcement.id);
    let now = world.clock();
    world.engine.handle_repository_promoted(now, repo.clone());
    assert!(!world.engine.is_repository_held(&repo));
    assert!(
        !world.engine.historic_sync_complete(),
        "its Layer 2 history is to do: {}",
        world.dump()
    );
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(
        filters_asked(&world, &a)
            .iter()
            .any(|filter| names_repo(filter, &coordinate)),
        "{}",
        world.dump()
    );
    assert!(world.stored().contains(&issue.id), "{}", world.dump());
    assert!(world.engine.historic_sync_complete());

    // Promoting it again changes nothing.
    let asked = filters_asked(&world, &a).len();
    let now = world.clock();
    world.engine.handle_repository_promoted(now, repo);
    assert!(world.run_until_idle(STEPS));
    assert_eq!(filters_asked(&world, &a).len(), asked);
}

#[test]
fn a_repository_the_host_holds_is_left_out_of_layer_2_until_promoted() {
    let (mut world, _announcement, state, issue, coordinate) = bootstrap_repository();
    let repo: grasp_sync_core::RepoRef = coordinate.parse().expect("a repository");
    let now = world.clock();
    // The host says so before the announcement is even seen.
    world.engine.handle_repository_held(now, repo.clone());
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(world.stored().contains(&state.id), "{}", world.dump());
    assert!(!world.stored().contains(&issue.id), "{}", world.dump());
    let now = world.clock();
    world.engine.handle_repository_promoted(now, repo);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(world.stored().contains(&issue.id), "{}", world.dump());
}

/// How often the engine offered `issue` to a store answering `answer` for
/// it, over ten minutes.
fn offers_under(answer: IngestOutcome) -> (usize, World, Event) {
    let (mut world, issue, _) = two_issues();
    world.own.answers.insert(issue.id, answer);
    world.run_for(Duration::from_secs(600), STEPS);
    (world.stores_of(&issue.id), world, issue)
}

#[test]
fn the_refusal_s_type_not_its_text_decides_whether_it_is_retried() {
    let (for_good, world, _) = offers_under(IngestOutcome::refused_for_good("not today"));
    assert_eq!(for_good, 1, "refused for good: {}", world.dump());
    assert_eq!(world.engine.stats().store_refused, 1);

    let (for_now, world, _) = offers_under(IngestOutcome::refused_for_now("busy"));
    assert!(for_now >= 2, "refused for now is retried: {for_now}");
    assert_eq!(world.engine.stats().store_refused, 0);

    let blocked_for_now = IngestOutcome::Rejected {
        reason: "blocked: try again later".into(),
        refusal: Refusal::ForNow,
    };
    let (retried, mut world, issue) = offers_under(blocked_for_now);
    assert!(retried >= 2, "the type decides, not `blocked:`: {retried}");
    assert_eq!(world.engine.stats().store_refused, 0);
    // Once the store takes it, it is stored.
    world.own.answers.remove(&issue.id);
    assert!(
        world.run_until(STEPS, |w| w.stored().contains(&issue.id)),
        "{}",
        world.dump()
    );

    // Read from a relay's text, `blocked:` is for good.
    let (from_text, _, _) = offers_under(IngestOutcome::rejected("blocked: no"));
    assert_eq!(from_text, 1);
}

#[test]
fn with_nip77_off_a_relay_that_does_it_is_synced_by_req_only() {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at);
    let repo = repo_ref(&maintainer, "alpha");
    let issue = events::root(&user, 1621, &repo, "issue", at + 1);
    let reply = events::reply(&user, &issue.id, "reply", at + 2);
    let remote = vec![announcement.clone(), issue.clone(), reply.clone()];

    let mut world = World::new(
        config().with_negentropy(false),
        vec![sim_relay("a", remote.clone())],
        vec![announcement.clone()],
    );
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    world.run_for(PAST_THE_DAILY_RESYNC, STEPS);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(world.stored().contains(&reply.id), "{}", world.dump());
    let negentropy = world.command_log.iter().any(|(_, command)| {
        matches!(
            command,
            Command::NegOpen { .. } | Command::QueryLocalItems { .. }
        )
    });
    assert!(!negentropy, "no NEG-OPEN: {}", world.dump());
    assert_eq!(neg_opens(&world, "a"), 0);
    let report = world
        .engine
        .relay_reports()
        .into_iter()
        .find(|report| report.relay == a)
        .expect("relay a is reported");
    assert_eq!(report.method, SyncMethod::ReqEose);

    // The same world with NIP-77 on reconciles: the switch is what differs.
    let mut world = World::new(config(), vec![sim_relay("a", remote)], vec![announcement]);
    assert!(world.run_until_idle(STEPS), "{}", world.dump());
    assert!(neg_opens(&world, "a") > 0);
}
