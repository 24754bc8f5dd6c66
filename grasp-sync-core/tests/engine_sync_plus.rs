//! GRASP-03 "Sync+" in the deterministic simulation: a repository's
//! conversation is also synced from its participants' own write relays
//! (NIP-65 10002 `r` tags not marked `read`, 10317 `g` tags), read from the
//! repository's relay.
//!
//! - A comment that exists only on its author's outbox relay arrives, and so
//!   does a status on a maintainer's GRASP server; what is not the
//!   repository's conversation (notes, another repository's announcement,
//!   state and comments) never does, and no outbox relay is asked for
//!   announcements (Layer 1).
//! - A participant whose 10002 changes moves the sync to the new relay; the
//!   old one is released.
//! - With the switch off, nothing is read from outbox relays.
//! - A flood (2 000 participants, one with 1 500 relays in its list) stays
//!   within the caps at every step, and every participant is still reached
//!   over successive passes.
//! - Outbox relays hold relay slots within the owner's share, and
//!   repositories with many outbox relays announced first do not keep an
//!   honest repository's outbox out of the shared cap (issue 45).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_core::engine::{Command, EngineConfig};
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::{config, own_url, relay_url, sim_relay, World, UNIX_ORIGIN};

const STEPS: u64 = 200_000;

fn at(offset: u64) -> u64 {
    UNIX_ORIGIN - 100_000 + offset
}

/// The repository `alpha` on relay `a`, with a participant's outbox relay
/// `c` (10002) and a maintainer's GRASP server `d` (10317), and what each
/// holds.
struct Case {
    world: World,
    owner: Keys,
    user: Keys,
    issue: Event,
    /// The repository's conversation, only on `c` and `d`.
    conversation: Vec<Event>,
    /// On `c` and `d` too, but not the repository's conversation.
    foreign: Vec<Event>,
}

fn case(config: EngineConfig) -> Case {
    let owner = Keys::generate();
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let stranger = Keys::generate();
    let (a, c, d, inbox) = (
        relay_url("a"),
        relay_url("c"),
        relay_url("d"),
        relay_url("inbox"),
    );
    let announcement = events::Announcement::new("alpha")
        .relays([&own_url(), &a])
        .maintainers([maintainer.public_key()])
        .at(at(0))
        .sign(&owner);
    let repo = repo_ref(&owner, "alpha");
    let issue = events::root(&user, 1621, &repo, "issue", at(10));
    let on_a = vec![
        announcement.clone(),
        issue.clone(),
        events::relay_list(&user, &[&c], &[&inbox], at(11)),
        events::grasp_list(&maintainer, &[&d], at(12)),
    ];
    let other = Keys::generate();
    let other_repo = repo_ref(&other, "beta");
    let other_root = events::root(&other, 1621, &other_repo, "not ours", at(20));
    let conversation_c = vec![
        events::reply(&user, &issue.id, "only on my outbox", at(30)),
        events::reply(
            &stranger,
            &issue.id,
            "a stranger's reply to our issue",
            at(31),
        ),
        events::upper_a(&user, &repo, at(32)),
    ];
    let conversation_d = vec![events::status(&maintainer, &issue.id, &repo, at(33))];
    let foreign_c = vec![
        events::noise(&user, "a note", at(40)),
        events::announcement(&other, "beta", &[&c], at(41)),
        events::state(&other, "beta", &[events::TIP], at(42)),
        other_root.clone(),
        events::reply(&user, &other_root.id, "on another repository", at(43)),
    ];
    let foreign_d = vec![events::noise(&maintainer, "a note on d", at(44))];
    let inbox_events = vec![events::reply(&user, &issue.id, "on a read relay", at(45))];
    let relays = vec![
        sim_relay("a", on_a),
        sim_relay(
            "c",
            conversation_c.iter().chain(&foreign_c).cloned().collect(),
        ),
        sim_relay(
            "d",
            conversation_d.iter().chain(&foreign_d).cloned().collect(),
        ),
        sim_relay("inbox", inbox_events),
    ];
    let world = World::new(config, relays, vec![announcement]);
    Case {
        world,
        owner,
        user,
        issue,
        conversation: conversation_c.into_iter().chain(conversation_d).collect(),
        foreign: foreign_c.into_iter().chain(foreign_d).collect(),
    }
}

/// Every filter sent to `relay`, REQ and NEG-OPEN.
fn filters_sent(world: &World, relay: &RelayUrl) -> Vec<Filter> {
    world
        .command_log
        .iter()
        .filter_map(|(_, command)| match command {
            Command::Subscribe {
                relay: to, filters, ..
            } if to == relay => Some(filters.clone()),
            Command::NegOpen {
                relay: to, filter, ..
            } if to == relay => Some(vec![filter.clone()]),
            _ => None,
        })
        .flatten()
        .collect()
}

/// `true` for a filter asking for stored events (not `limit: 0`).
fn historic(filter: &Filter) -> bool {
    filter.limit != Some(0)
}

fn asks_for_kind(filter: &Filter, kind: u16) -> bool {
    filter
        .kinds
        .as_ref()
        .is_some_and(|kinds| kinds.contains(&Kind::Custom(kind)))
}

fn all_stored(world: &World, events: &[Event]) -> bool {
    let stored = world.stored();
    events.iter().all(|event| stored.contains(&event.id))
}

/// Runs until `events` are stored and historic sync is complete.
fn sync_until_complete(world: &mut World, events: &[Event]) {
    assert!(
        world.run_until(STEPS, |w| all_stored(w, events)
            && w.engine.historic_sync_complete()),
        "{}",
        world.dump()
    );
}

#[test]
fn a_comment_only_on_its_authors_outbox_relay_arrives() {
    let Case {
        mut world,
        conversation,
        foreign,
        ..
    } = case(config());
    sync_until_complete(&mut world, &conversation);
    let stored = world.stored();
    for event in &foreign {
        assert!(
            !stored.contains(&event.id),
            "not the conversation: kind {} {:?}",
            event.kind,
            event.content
        );
    }
    for outbox in [relay_url("c"), relay_url("d")] {
        let filters = filters_sent(&world, &outbox);
        assert!(!filters.is_empty(), "{outbox} was synced");
        assert!(
            filters
                .iter()
                .all(|filter| !asks_for_kind(filter, 30617) && !asks_for_kind(filter, 10002)),
            "{outbox} is asked only for the conversation: {filters:?}"
        );
    }
    assert_eq!(
        world.relays[&relay_url("inbox")].stats().connects,
        0,
        "a relay marked read is no outbox"
    );
    let reports = world.engine.relay_reports();
    let reasons = |name: &str| {
        reports
            .iter()
            .find(|report| report.relay == relay_url(name))
            .map(|report| report.reasons)
            .unwrap()
    };
    assert!(reasons("a").announcement && !reasons("a").outbox);
    assert!(reasons("c").outbox && reasons("c").only_sync_plus());
    assert!(reasons("d").outbox && !reasons("d").discovers());
    let counts = world.engine.sync_plus_counts();
    assert_eq!(counts.outbox_relays, 2);
    assert!(
        counts.participants >= 3,
        "owner, maintainer, user: {counts:?}"
    );
    assert_eq!(counts.relay_lists, 2);
    assert_eq!(
        world.engine.stats().sync_plus_events,
        conversation.len() as u64,
        "every conversation event came only through Sync+"
    );
}

#[test]
fn live_on_the_outbox_relay_after_historic_sync() {
    let Case {
        mut world,
        user,
        issue,
        conversation,
        ..
    } = case(config());
    sync_until_complete(&mut world, &conversation);
    let later = events::reply(&user, &issue.id, "later, live", world.unix().as_secs());
    world.publish(&relay_url("c"), later.clone());
    assert!(
        world.run_until(STEPS, |w| w.stored().contains(&later.id)),
        "{}",
        world.dump()
    );
}

#[test]
fn a_participant_whose_relay_list_changes_moves_the_sync_to_the_new_relay() {
    let Case {
        mut world,
        user,
        issue,
        conversation,
        ..
    } = case(config());
    world
        .relays
        .insert(relay_url("e"), sim_relay("e", Vec::new()));
    sync_until_complete(&mut world, &conversation);
    let now = world.unix().as_secs();
    let moved = events::relay_list(&user, &[&relay_url("e")], &[], now);
    world.publish(&relay_url("a"), moved.clone());
    let on_e = events::reply(&user, &issue.id, "on my new outbox", now + 1);
    world.publish(&relay_url("e"), on_e.clone());
    assert!(
        world.run_until(STEPS, |w| w.stored().contains(&moved.id)
            && w.stored().contains(&on_e.id)),
        "{}",
        world.dump()
    );
    // `c` is released once nothing needs it (the next disconnect check).
    world.run_for(Duration::from_secs(120), STEPS);
    let reports = world.engine.relay_reports();
    assert!(
        reports.iter().all(|report| report.relay != relay_url("c")),
        "c released: {:?}",
        reports
            .iter()
            .map(|report| &report.relay)
            .collect::<Vec<_>>()
    );
    let after = events::reply(
        &user,
        &issue.id,
        "on the old outbox",
        world.unix().as_secs(),
    );
    world.publish(&relay_url("c"), after.clone());
    world.run_for(Duration::from_secs(120), STEPS);
    assert!(!world.stored().contains(&after.id));
    assert!(
        world.engine.sync_plus_counts().outbox_relays == 2,
        "d and e"
    );
}

#[test]
fn an_outbox_relay_an_announcement_then_lists_discovers_announcements_from_then_on() {
    let Case {
        mut world,
        owner,
        conversation,
        ..
    } = case(config());
    sync_until_complete(&mut world, &conversation);
    let c = relay_url("c");
    assert!(!filters_sent(&world, &c)
        .iter()
        .any(|filter| asks_for_kind(filter, 30617)));
    let newer = events::Announcement::new("alpha")
        .relays([&own_url(), &relay_url("a"), &c])
        .at(world.unix().as_secs())
        .sign(&owner);
    world.publish(&relay_url("a"), newer.clone());
    assert!(world.run_until(STEPS, |w| w.stored().contains(&newer.id)));
    // Within a minute, not at the next daily re-sync or reconnect.
    world.run_for(Duration::from_secs(60), STEPS);
    assert!(
        filters_sent(&world, &c)
            .iter()
            .any(|filter| asks_for_kind(filter, 30617) && historic(filter)),
        "{}",
        world.dump()
    );
    let reports = world.engine.relay_reports();
    let report = reports.iter().find(|report| report.relay == c).unwrap();
    assert!(report.reasons.announcement && report.reasons.discovers());
}

#[test]
fn after_a_restart_lists_the_own_relay_holds_are_known_without_fetching_them_again() {
    let owner = Keys::generate();
    let user = Keys::generate();
    let (a, c) = (relay_url("a"), relay_url("c"));
    let announcement = events::announcement(&owner, "alpha", &[&own_url(), &a], at(0));
    let repo = repo_ref(&owner, "alpha");
    let issue = events::root(&user, 1621, &repo, "issue", at(10));
    let list = events::relay_list(&user, &[&c], &[], at(11));
    let reply = events::reply(&user, &issue.id, "only on my outbox", at(30));
    // What an earlier run stored: the own relay holds it all, `a` too.
    let held = vec![announcement.clone(), issue.clone(), list.clone()];
    let relays = vec![
        sim_relay("a", held.clone()),
        sim_relay("c", vec![reply.clone()]),
    ];
    let mut world = World::new(config(), relays, held);
    sync_until_complete(&mut world, std::slice::from_ref(&reply));
    assert_eq!(
        world.stores_of(&list.id),
        0,
        "the list came from the own relay; reconciling with `a` fetched nothing"
    );
    assert_eq!(world.engine.sync_plus_counts().relay_lists, 1);
}

#[test]
fn with_the_switch_off_nothing_is_fetched_from_outbox_relays() {
    let Case {
        mut world,
        conversation,
        issue,
        ..
    } = case(config().with_sync_plus(false));
    assert!(
        world.run_until(STEPS, |w| w.stored().contains(&issue.id)
            && w.engine.historic_sync_complete()),
        "{}",
        world.dump()
    );
    world.run_for(Duration::from_secs(15 * 60), STEPS);
    for name in ["c", "d", "inbox"] {
        assert_eq!(world.relays[&relay_url(name)].stats().connects, 0, "{name}");
    }
    let stored = world.stored();
    assert!(conversation.iter().all(|event| !stored.contains(&event.id)));
    assert!(
        filters_sent(&world, &relay_url("a"))
            .iter()
            .all(|filter| !asks_for_kind(filter, 10002)),
        "no relay list is read"
    );
    assert_eq!(world.engine.sync_plus_counts().participants, 0);
    assert_eq!(world.engine.stats().sync_plus_passes, 0);
}

/// The participants whose relay lists `commands` ask for, over every relay.
fn authors_looked_up(commands: &[(grasp_sync_core::Instant, Command)]) -> BTreeSet<PublicKey> {
    commands
        .iter()
        .flat_map(|(_, command)| match command {
            Command::Subscribe { filters, .. } => filters.clone(),
            Command::NegOpen { filter, .. } => vec![filter.clone()],
            _ => Vec::new(),
        })
        .filter(|filter| asks_for_kind(filter, 10002))
        .flat_map(|filter| filter.authors.clone().unwrap_or_default())
        .collect()
}

#[test]
fn a_flood_stays_within_the_caps_and_every_participant_is_reached_over_passes() {
    let participants_wanted: usize = std::env::var("FLOOD_PARTICIPANTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    #[allow(non_snake_case)]
    let PARTICIPANTS = participants_wanted;
    const WITH_OWN_RELAY: usize = 60;
    let owner = Keys::generate();
    let a = relay_url("a");
    let announcement = events::announcement(&owner, "alpha", &[&own_url(), &a], at(0));
    let repo = repo_ref(&owner, "alpha");
    let issue = events::root(&owner, 1621, &repo, "issue", at(1));
    let popular = [relay_url("popular1"), relay_url("popular2")];
    let mut on_a = vec![announcement.clone(), issue.clone()];
    let mut relays = vec![
        sim_relay("popular1", Vec::new()),
        sim_relay("popular2", Vec::new()),
    ];
    let mut expected = Vec::new();
    let mut participants = BTreeSet::new();
    for n in 0..PARTICIPANTS {
        let keys = Keys::generate();
        participants.insert(keys.public_key());
        on_a.push(events::reply(
            &keys,
            &issue.id,
            &format!("reply {n}"),
            at(10),
        ));
        let mut write: Vec<RelayUrl> = popular.to_vec();
        if n < WITH_OWN_RELAY {
            let own = relay_url(&format!("own{n}"));
            let only_there = events::reply(&keys, &issue.id, &format!("outbox {n}"), at(20));
            expected.push(only_there.clone());
            relays.push(sim_relay(&format!("own{n}"), vec![only_there]));
            write.push(own);
        }
        if n == PARTICIPANTS - 1 {
            // 1 500 relays in one list (as many as fit the 64 KiB event
            // limit; a larger list is refused whole as oversized): bounded
            // by the per-list cap; none of them answers.
            write.extend((0..1_500).map(|m| relay_url(&format!("n{m}"))));
        }
        let write: Vec<&RelayUrl> = write.iter().collect();
        on_a.push(events::relay_list(&keys, &write, &[], at(11)));
    }
    relays.push(sim_relay("a", on_a));
    let mut cfg = config();
    cfg.sync_plus.participants_per_pass = 32;
    cfg.sync_plus.relays_per_pass = 24;
    cfg.sync_plus.max_relays = 20;
    cfg.sync_plus.pass_interval = Duration::from_secs(60);
    // Every participant remembered (the default keeps the first 1 000 of a
    // repository; what is over it is counted, see the unit tests).
    cfg.sync_plus.max_participants_per_repo = 5_000;
    let max_relays = cfg.sync_plus.max_relays;
    let mut world = World::new(cfg, relays, vec![announcement]);
    let mut most_outbox = 0;
    let mut most_tracked = 0;
    let mut looked_up = BTreeSet::new();
    let mut read_up_to = 0;
    let mut steps = 0u64;
    let done = world.run_until(50 * STEPS, |w| {
        let outbox = w.engine.sync_plus_counts().outbox_relays;
        most_outbox = most_outbox.max(outbox);
        most_tracked = most_tracked.max(w.engine.relay_states().count());
        assert!(outbox <= max_relays, "{outbox} outbox relays");
        steps += 1;
        if steps % 1_000 != 0 {
            return false;
        }
        looked_up.extend(authors_looked_up(&w.command_log[read_up_to..]));
        read_up_to = w.command_log.len();

        looked_up.is_superset(&participants) && all_stored(w, &expected)
    });
    looked_up.extend(authors_looked_up(&world.command_log[read_up_to..]));
    assert!(
        done,
        "{} of {} participants looked up, {} of {} outbox-only replies stored",
        participants.intersection(&looked_up).count(),
        participants.len(),
        expected
            .iter()
            .filter(|event| world.stored().contains(&event.id))
            .count(),
        expected.len()
    );
    let stats = world.engine.stats();
    println!(
        "passes {}, most outbox relays {most_outbox}, most relays tracked {most_tracked}, \
         kept out by the global cap {}, list relays left out {}",
        stats.sync_plus_passes,
        stats.sync_plus_relays_over_cap,
        stats.sync_plus_list_relays_left_out
    );
    assert!(
        most_tracked <= 1 + 2 * max_relays,
        "{most_tracked} relays tracked"
    );
    assert!(stats.sync_plus_list_relays_left_out >= 1_500 - 32);
    assert!(stats.sync_plus_passes > 1);
}

/// Issue 45, item 3: Sync+ outbox relays hold slots like announced ones.
/// They counted toward `Caps::max_relays` without holding one, so a
/// repository's participants could bring in relays beyond its owner's share
/// and none of them ever yielded. Now an outbox relay not tracked yet takes
/// a slot charged to the repository's owner (and its network): with a
/// share of 5, the announced relay and 4 of the participant's 10 outbox
/// relays are tracked, the rest wait, and what the admitted ones hold is
/// synced.
#[test]
fn sync_plus_outbox_relays_hold_slots_within_the_owner_s_share() {
    let owner = Keys::generate();
    let user = Keys::generate();
    let a = relay_url("a");
    let announcement = events::announcement(&owner, "alpha", &[&own_url(), &a], at(0));
    let repo = repo_ref(&owner, "alpha");
    let issue = events::root(&user, 1621, &repo, "issue", at(1));
    let outboxes: Vec<RelayUrl> = (0..10).map(|n| relay_url(&format!("out{n}"))).collect();
    let list: Vec<&RelayUrl> = outboxes.iter().collect();
    let on_a = vec![
        announcement.clone(),
        issue.clone(),
        events::relay_list(&user, &list, &[], at(2)),
    ];
    let first_reply = events::reply(&user, &issue.id, "only on out0", at(3));
    let mut relays = vec![sim_relay("a", on_a)];
    for n in 0..10 {
        let held = if n == 0 {
            vec![first_reply.clone()]
        } else {
            Vec::new()
        };
        relays.push(sim_relay(&format!("out{n}"), held));
    }
    let mut cfg = config();
    cfg.caps.max_relays_per_author = 5;
    let share = cfg.caps.max_relays_per_author;
    let mut world = World::new(cfg, relays, vec![announcement]);
    sync_until_complete(&mut world, &[issue, first_reply]);
    world.run_for(Duration::from_secs(120), STEPS);
    let tracked: Vec<RelayUrl> = (world.engine.relay_reports().into_iter())
        .map(|report| report.relay)
        .filter(|relay| *relay != own_url())
        .collect();
    assert_eq!(tracked.len(), share, "{tracked:?}");
    assert!(tracked.contains(&a));
    assert!(world.engine.stats().relays_over_cap >= (outboxes.len() + 1 - share) as u64);
}

/// Issue 45, item 5, in the engine: 9 repositories, announced first, each
/// with an owner whose relay list names 24 junk outbox relays (216, over
/// the 200 of the global Sync+ cap); then an honest repository whose
/// owner's outbox holds a comment found nowhere else. First come, the junk
/// repositories held the cap every pass and the comment never arrived.
/// Shared, it arrives within K = 1 pass (plus a sync).
#[test]
fn junk_repositories_placed_first_do_not_keep_an_honest_outbox_out() {
    let a = relay_url("a");
    let mut on_a = Vec::new();
    let mut relays = Vec::new();
    let mut junk_announcements = Vec::new();
    for n in 0..9 {
        let owner = Keys::generate();
        let announcement =
            events::announcement(&owner, &format!("junk{n}"), &[&own_url(), &a], at(n));
        let outboxes: Vec<RelayUrl> = (0..24)
            .map(|r| relay_url(&format!("junk{n}-{r}")))
            .collect();
        on_a.push(events::relay_list(
            &owner,
            &outboxes.iter().collect::<Vec<_>>(),
            &[],
            at(100 + n),
        ));
        for r in 0..24 {
            relays.push(sim_relay(&format!("junk{n}-{r}"), Vec::new()));
        }
        on_a.push(announcement.clone());
        junk_announcements.push(announcement);
    }
    let owner = Keys::generate();
    let honest_out = relay_url("honest-out");
    let announcement = events::announcement(&owner, "honest", &[&own_url(), &a], at(200));
    let repo = repo_ref(&owner, "honest");
    let issue = events::root(&owner, 1621, &repo, "issue", at(201));
    let only_there = events::reply(&owner, &issue.id, "only on my outbox", at(202));
    on_a.extend([
        announcement.clone(),
        issue.clone(),
        events::relay_list(&owner, &[&honest_out], &[], at(203)),
    ]);
    relays.push(sim_relay("honest-out", vec![only_there.clone()]));
    relays.push(sim_relay("a", on_a));
    let cfg = config();
    let pass = cfg.sync_plus.pass_interval;
    let mut world = World::new(cfg, relays, junk_announcements);
    world.run_for(Duration::from_secs(120), STEPS);
    assert!(
        world.engine.sync_plus_counts().outbox_relays >= 200,
        "the junk repositories fill the cap: {:?}",
        world.engine.sync_plus_counts()
    );
    // The honest repository is announced after them.
    let now = world.clock();
    world.engine.handle_own_events(now, [announcement]);
    let deadline = world.now + pass + Duration::from_secs(120);
    let synced = world.run_until(50 * STEPS, |w| {
        w.now > deadline || w.stored().contains(&only_there.id)
    });
    assert!(
        synced && world.stored().contains(&only_there.id),
        "within one pass: {:?}",
        world.engine.sync_plus_counts()
    );
    assert!(world.engine.sync_plus_counts().outbox_relays <= 200);
}
