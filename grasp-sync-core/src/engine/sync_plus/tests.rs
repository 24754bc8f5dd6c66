use std::collections::{BTreeSet, HashSet};

use grasp_sync_test_support::nip34::{grasp_list, relay_list};
use nostr::prelude::{Keys, PublicKey, RelayUrl};

use super::*;

fn url(name: &str) -> RelayUrl {
    RelayUrl::parse(&format!("wss://{name}.example")).unwrap()
}

fn repo(keys: &Keys, id: &str) -> RepoRef {
    RepoRef::new(keys.public_key(), id).unwrap()
}

fn config() -> SyncPlusConfig {
    SyncPlusConfig::default()
}

/// A repository announcing `announced`, with `owner` as its first
/// participant.
fn relays_with_repo(owner: &Keys, announced: &[&str]) -> (RepoRelays, RepoRef) {
    let mut relays = RepoRelays::new(&config());
    let repo = repo(owner, "demo");
    relays.set_announced(&repo, announced.iter().map(|name| url(name)).collect());
    relays.add_participant(&repo, owner.public_key(), Role::Maintainer, &config());
    (relays, repo)
}

fn all(_: &RelayUrl) -> bool {
    true
}

#[test]
fn a_participants_write_relays_join_the_announced_ones() {
    let owner = Keys::generate();
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    let list = relay_list(&owner, &[&url("out"), &url("repo")], &[&url("inbox")], 10);
    relays.apply_list(&list, all, &config());
    assert_eq!(relays.relays_of(&repo), vec![url("repo"), url("out")]);
    assert!(relays.is_outbox(&url("out")));
    assert!(
        !relays.is_outbox(&url("inbox")),
        "a read relay is not an outbox"
    );
    assert!(
        !relays.is_outbox(&url("repo")),
        "an announced relay is not counted twice"
    );
    assert_eq!(relays.take_changes().repos, vec![repo]);
}

#[test]
fn a_participant_whose_list_is_known_brings_their_relays_to_another_repository_at_once() {
    let user = Keys::generate();
    let mut relays = RepoRelays::new(&config());
    let (first, second) = (
        repo(&Keys::generate(), "first"),
        repo(&Keys::generate(), "second"),
    );
    relays.set_announced(&first, vec![url("a")]);
    relays.set_announced(&second, vec![url("b")]);
    relays.add_participant(&first, user.public_key(), Role::Author, &config());
    let list = relay_list(&user, &[&url("out")], &[], 10);
    relays.apply_list(&list, all, &config());
    assert_eq!(relays.relays_of(&first), vec![url("a"), url("out")]);
    let _ = relays.take_changes();
    // They join the second repository; the list read there again is the
    // same version.
    relays.add_participant(&second, user.public_key(), Role::Author, &config());
    relays.apply_list(&list, all, &config());
    assert_eq!(relays.relays_of(&second), vec![url("b"), url("out")]);
    assert_eq!(relays.take_changes().repos, vec![second]);
}

#[test]
fn the_newest_list_of_each_kind_stands_and_both_kinds_count() {
    let owner = Keys::generate();
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    relays.apply_list(&relay_list(&owner, &[&url("new")], &[], 20), all, &config());
    relays.apply_list(&relay_list(&owner, &[&url("old")], &[], 10), all, &config());
    relays.apply_list(&grasp_list(&owner, &[&url("grasp")], 5), all, &config());
    assert_eq!(
        relays.relays_of(&repo),
        vec![url("repo"), url("new"), url("grasp")]
    );
    relays.apply_list(
        &relay_list(&owner, &[&url("newer")], &[], 30),
        all,
        &config(),
    );
    assert_eq!(
        relays.relays_of(&repo),
        vec![url("repo"), url("newer"), url("grasp")]
    );
}

#[test]
fn a_strangers_list_is_not_kept() {
    let owner = Keys::generate();
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    let stranger = Keys::generate();
    relays.apply_list(
        &relay_list(&stranger, &[&url("x")], &[], 10),
        all,
        &config(),
    );
    assert_eq!(relays.relays_of(&repo), vec![url("repo")]);
    assert_eq!(relays.counts().relay_lists, 0);
}

#[test]
fn a_list_of_ten_thousand_relays_costs_what_the_cap_allows() {
    let owner = Keys::generate();
    let (mut relays, _) = relays_with_repo(&owner, &["repo"]);
    let many: Vec<RelayUrl> = (0..10_000).map(|n| url(&format!("r{n}"))).collect();
    let refs: Vec<&RelayUrl> = many.iter().collect();
    let refused = url("r0");
    let applied = relays.apply_list(
        &relay_list(&owner, &refs, &[], 10),
        |relay| *relay != refused,
        &config(),
    );
    let cap = config().max_relays_per_list;
    assert_eq!(applied, 10_000 - cap as u64);
    let kept: usize = relays
        .lists
        .values()
        .map(|lists| lists.relays().count())
        .sum();
    assert_eq!(kept, cap);
    assert_eq!(relays.counts().outbox_relays, config().relays_per_pass);
}

#[test]
fn participants_over_the_cap_are_counted_not_kept() {
    let owner = Keys::generate();
    let config = SyncPlusConfig {
        max_participants_per_repo: 100,
        ..config()
    };
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    let mut over = 0;
    for _ in 0..10_000 {
        let key = Keys::generate().public_key();
        let joined = relays.add_participant(&repo, key, Role::Author, &config);
        if matches!(joined, Joined::OverCap | Joined::Displacing) {
            over += 1;
        }
    }
    assert_eq!(relays.counts().participants, 100);
    assert_eq!(over, 10_000 - 99, "each over the cap, or displacing one");
    assert!(
        relays.repos[0]
            .participants
            .standing
            .contains_key(&owner.public_key()),
        "the owner is never displaced"
    );
    assert_eq!(
        relays.lookups(&url("repo")).len(),
        config.participants_per_pass
    );
}

#[test]
fn every_participant_is_chosen_over_successive_passes() {
    let owner = Keys::generate();
    let config = SyncPlusConfig {
        participants_per_pass: 10,
        ..config()
    };
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    let keys: Vec<PublicKey> = (0..95).map(|_| Keys::generate().public_key()).collect();
    for key in &keys {
        relays.add_participant(&repo, *key, Role::Author, &config);
    }
    let mut looked_up: HashSet<PublicKey> = relays.lookups(&url("repo")).into_iter().collect();
    let _ = relays.take_changes();
    // 2 of each 10 are the top-ranked, 8 a window over the other 94.
    for _ in 0..12 {
        relays.next_pass(&config);
        let lookups = relays.lookups(&url("repo"));
        assert!(lookups.len() <= 10, "{} per pass", lookups.len());
        assert!(relays.take_changes().participants_moved);
        looked_up.extend(lookups);
    }
    assert_eq!(looked_up.len(), 96, "the owner and all 95 others");
}

#[test]
fn every_relay_of_a_window_is_reached_before_it_moves_on() {
    let owner = Keys::generate();
    let config = SyncPlusConfig {
        relays_per_pass: 10,
        ..config()
    };
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    let many: Vec<RelayUrl> = (0..25).map(|n| url(&format!("r{n}"))).collect();
    let refs: Vec<&RelayUrl> = many.iter().collect();
    relays.apply_list(&relay_list(&owner, &refs, &[], 10), all, &config);
    let mut reached: BTreeSet<RelayUrl> = BTreeSet::new();
    for _ in 0..3 {
        let outbox: Vec<RelayUrl> = relays.relays_of(&repo).into_iter().skip(1).collect();
        assert!(outbox.len() <= 10);
        reached.extend(outbox);
        relays.next_pass(&config);
    }
    assert_eq!(reached.len(), 25);
}

#[test]
fn the_global_cap_holds_over_every_repository_and_frees_with_a_release() {
    let config = SyncPlusConfig {
        max_relays: 3,
        ..config()
    };
    let mut relays = RepoRelays::new(&config);
    let first = Keys::generate();
    let second = Keys::generate();
    let (a, b) = (repo(&first, "a"), repo(&second, "b"));
    relays.set_announced(&a, vec![url("repo")]);
    relays.set_announced(&b, vec![url("repo")]);
    relays.add_participant(&a, first.public_key(), Role::Maintainer, &config);
    relays.add_participant(&b, second.public_key(), Role::Maintainer, &config);
    relays.apply_list(
        &relay_list(&first, &[&url("a1"), &url("a2")], &[], 10),
        all,
        &config,
    );
    assert_eq!(relays.take_changes().over_cap, 0);
    relays.apply_list(
        &relay_list(&second, &[&url("a1"), &url("b1"), &url("b2")], &[], 10),
        all,
        &config,
    );
    assert_eq!(
        relays.take_changes().over_cap,
        1,
        "a1 is shared; b1 fits; b2 does not"
    );
    assert_eq!(relays.counts().outbox_relays, 3);
    relays.apply_list(&relay_list(&first, &[], &[], 20), all, &config);
    assert_eq!(relays.counts().outbox_relays, 2, "a2 released");
    relays.next_pass(&config);
    assert!(relays.is_outbox(&url("b2")), "room freed: b2 is reached");
}

#[test]
fn lookups_are_read_where_the_repository_is_announced_and_on_index_relays() {
    let owner = Keys::generate();
    let config = SyncPlusConfig {
        index_relays: vec![url("index")],
        ..config()
    };
    let mut relays = RepoRelays::new(&config);
    let repo = repo(&owner, "demo");
    relays.set_announced(&repo, vec![url("repo")]);
    relays.add_participant(&repo, owner.public_key(), Role::Maintainer, &config);
    assert_eq!(relays.lookups(&url("repo")), vec![owner.public_key()]);
    assert_eq!(relays.lookups(&url("index")), vec![owner.public_key()]);
    assert!(relays.lookups(&url("elsewhere")).is_empty());
    let changes = relays.take_changes();
    let looked: Vec<&RelayUrl> = changes.lookups.keys().collect();
    assert_eq!(looked, vec![&url("repo"), &url("index")]);
    let confirmed: HashSet<PublicKey> = [owner.public_key()].into();
    assert!(relays.lookups_confirmed(&url("index"), &confirmed));
    assert!(!relays.lookups_confirmed(&url("repo"), &HashSet::new()));
}

#[test]
fn switched_off_nothing_is_added() {
    let owner = Keys::generate();
    let config = SyncPlusConfig {
        enabled: false,
        index_relays: vec![url("index")],
        ..config()
    };
    let mut relays = RepoRelays::new(&config);
    let repo = repo(&owner, "demo");
    relays.set_announced(&repo, vec![url("repo")]);
    assert_eq!(
        relays.add_participant(&repo, owner.public_key(), Role::Maintainer, &config),
        Joined::Known
    );
    relays.apply_list(&relay_list(&owner, &[&url("out")], &[], 10), all, &config);
    assert_eq!(relays.relays_of(&repo), vec![url("repo")]);
    assert!(relays.lookups(&url("repo")).is_empty());
    assert!(relays.index_relays().is_empty());
    assert!(relays.is_announced(&url("repo")));
}

/// `count` repositories, each its owner's, listing `relays` outbox relays
/// of its own (named `{prefix}{n}-{r}`) in the owner's relay list.
fn repos_with_outboxes(
    relays: &mut RepoRelays,
    prefix: &str,
    count: usize,
    outboxes: usize,
    config: &SyncPlusConfig,
) -> Vec<RepoRef> {
    (0..count)
        .map(|n| {
            let owner = Keys::generate();
            let repo = repo(&owner, &format!("{prefix}{n}"));
            relays.set_announced(&repo, vec![url(&format!("{prefix}{n}-announced"))]);
            relays.add_participant(&repo, owner.public_key(), Role::Maintainer, config);
            let own: Vec<RelayUrl> = (0..outboxes)
                .map(|r| url(&format!("{prefix}{n}-{r}")))
                .collect();
            let refs: Vec<&RelayUrl> = own.iter().collect();
            relays.apply_list(&relay_list(&owner, &refs, &[], 10), all, config);
            repo
        })
        .collect()
}

/// The repositories of `repos` none of whose outbox relays is chosen now.
fn unreached<'a>(relays: &RepoRelays, repos: &'a [RepoRef]) -> Vec<&'a RepoRef> {
    repos
        .iter()
        .filter(|repo| relays.relays_of(repo).len() <= relays.announced(repo).len())
        .collect()
}

/// Issue 45, item 5: 9 repositories placed first list 24 junk outbox
/// relays each (216, over the 200 of the global cap); 20 honest ones
/// follow with 3 each. First come, the junk held the cap every pass and no
/// honest repository was ever reached. Shared, every honest repository's
/// relays, all of them, are asked within K = 1 pass.
#[test]
fn junk_repositories_placed_first_do_not_hold_the_outbox_cap() {
    let config = config();
    let mut relays = RepoRelays::new(&config);
    let junk = repos_with_outboxes(&mut relays, "junk", 9, 24, &config);
    let honest = repos_with_outboxes(&mut relays, "honest", 20, 3, &config);
    relays.next_pass(&config);
    for repo in &honest {
        let outbox = relays.relays_of(repo).len() - relays.announced(repo).len();
        assert_eq!(outbox, 3, "{repo}: every one of its relays is asked");
    }
    assert!(unreached(&relays, &junk).is_empty(), "each has its share");
    assert!(relays.counts().outbox_relays <= config.max_relays);
}

/// Issue 45, item 5, at scale: 300 junk repositories with 24 outbox
/// relays each, placed first, then 5 honest ones: more repositories than
/// the cap has relays. Each pass reaches `max_relays` repositories (a share
/// of one each) from where the last pass ran out, so every repository is
/// reached within K = ⌈305 / 200⌉ = 2 passes.
#[test]
fn every_repository_s_outbox_relays_are_asked_within_k_passes() {
    let config = config();
    let mut relays = RepoRelays::new(&config);
    let mut repos = repos_with_outboxes(&mut relays, "junk", 300, 24, &config);
    repos.extend(repos_with_outboxes(&mut relays, "honest", 5, 2, &config));
    let k = repos.len().div_ceil(config.max_relays);
    assert_eq!(k, 2);
    let mut reached: HashSet<RepoRef> = HashSet::new();
    for _ in 0..k {
        relays.next_pass(&config);
        assert!(relays.counts().outbox_relays <= config.max_relays);
        let now_unreached: HashSet<&RepoRef> = unreached(&relays, &repos).into_iter().collect();
        reached.extend(
            (repos.iter())
                .filter(|repo| !now_unreached.contains(repo))
                .cloned(),
        );
    }
    let missed: Vec<&RepoRef> = repos
        .iter()
        .filter(|repo| !reached.contains(repo))
        .collect();
    assert!(missed.is_empty(), "{} never reached", missed.len());
}

/// Issue 45, item 5, participants: 1 000 sockpuppets (the per-repository
/// cap) each author one event before a real contributor's first; 1 000
/// more follow. First come, the contributor was never remembered and their
/// outbox never synced. Ranked by what they brought, the contributor (three
/// events) stays, is chosen among the top-ranked, and their outbox relay is
/// asked within one pass.
#[test]
fn sockpuppets_arriving_first_do_not_push_out_a_real_contributor() {
    let config = config();
    let owner = Keys::generate();
    let (mut relays, repo) = relays_with_repo(&owner, &["repo"]);
    let sockpuppet = |relays: &mut RepoRelays| {
        let key = Keys::generate().public_key();
        relays.add_participant(&repo, key, Role::Author, &config)
    };
    for _ in 0..config.max_participants_per_repo {
        sockpuppet(&mut relays);
    }
    let contributor = Keys::generate();
    for _ in 0..3 {
        relays.add_participant(&repo, contributor.public_key(), Role::Author, &config);
    }
    relays.apply_list(
        &relay_list(&contributor, &[&url("contributor-out")], &[], 10),
        all,
        &config,
    );
    for _ in 0..config.max_participants_per_repo {
        sockpuppet(&mut relays);
    }
    assert_eq!(
        relays.counts().participants,
        config.max_participants_per_repo
    );
    assert!(relays.is_participant(&contributor.public_key()));
    relays.next_pass(&config);
    let chosen = relays.lookups(&url("repo"));
    assert!(chosen.contains(&contributor.public_key()));
    assert!(chosen.contains(&owner.public_key()));
    assert!(
        relays.relays_of(&repo).contains(&url("contributor-out")),
        "{:?}",
        relays.relays_of(&repo)
    );
}
