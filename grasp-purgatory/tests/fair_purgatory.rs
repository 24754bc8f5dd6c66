//! Purgatory cannot be filled by strangers (issue 45, item 4): when it is full, the
//! author who holds the most loses their oldest event, so a newcomer is never refused
//! outright, and strangers' pull requests never take a maintainer's state's room.
//!
//! The exploit: a few free keys publish junk pull requests (for repositories nobody
//! announced, so their objects never come) until purgatory is full, and publish them
//! again whenever they are refused. An honest owner's state and an honest contributor's
//! pull request must still be held, and released once their objects are fetched with
//! real git from a smart HTTP server on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::sync::Arc;
use std::time::Duration;

use events::memory_git::{MemoryGit, OneRepo};
use grasp_purgatory::{
    AddError, ChannelSink, GitFetcher, GitFetcherConfig, HeldLimits, MemoryAnnouncements,
    NpubLayout, Origin, Purgatory, PurgatoryOutput,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, sign, state, tag, Announcement};
use nostr::prelude::*;
use prometheus::Registry;
use support::{counter, has_object, init_bare_repo, GitHttpServer, SourceRepo, TempDir};

const IPV6_LOOPBACK: std::net::IpAddr = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);

/// The loopback test server is a local address over plain HTTP.
fn test_policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true)
}

/// A junk pull request of about `size` bytes by `stranger`, for the stranger's own
/// repository nobody announced: its commit never comes.
fn junk_pr(stranger: &Keys, n: u32, size: usize) -> Event {
    let a = format!("30617:{}:junk", stranger.public_key().to_hex());
    let tip = format!("{:040x}", u64::from(n) + 1);
    let tags = vec![tag(&["a", &a]), tag(&["c", &tip])];
    sign(stranger, 1618, &"j".repeat(size), tags, u64::from(n) + 1)
}

/// Every stranger publishes junk pull requests in turn until a whole round of them is
/// refused: purgatory is as full as the strangers can make it. Returns how many were
/// held at some point.
fn flood(purgatory: &Purgatory, strangers: &[Keys], next: &mut u32, size: usize) -> usize {
    let mut held = 0;
    loop {
        let mut refused = 0;
        for stranger in strangers {
            *next += 1;
            match purgatory.add_pr(junk_pr(stranger, *next, size), Origin::Synced) {
                Ok(_) => held += 1,
                Err(AddError::Full { .. }) => refused += 1,
                Err(other) => panic!("junk refused for another reason: {other}"),
            }
        }
        if refused == strangers.len() {
            return held;
        }
    }
}

/// The exploit scaled down 32 times: 5 keys publish 2 KiB junk pull requests until the
/// 2 MiB of purgatory are full (each key also reaches its own 512 KiB share), and again
/// after the honest events arrived. The owner's state and a contributor's pull request
/// are held anyway, stay held through the second flood, and are released once their
/// objects are fetched. Fails on a purgatory that refuses newcomers when full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_state_and_pr_are_held_and_released_while_strangers_fill_purgatory() {
    let limits = HeldLimits {
        total_bytes: 2 * 1024 * 1024,
        per_author_bytes: 512 * 1024,
        per_repository_bytes: 512 * 1024,
        ..HeldLimits::default()
    };
    strangers_fill_purgatory(limits, 2 * 1024).await;
}

/// The exploit at the default limits: 64 KiB junk pull requests fill the 64 MiB. Slow in
/// a debug build (signing and holding thousands of 64 KiB events); run it with
/// `cargo nextest run -p grasp-purgatory --test fair_purgatory --run-ignored all --release`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "64 MiB of junk events: run in release"]
async fn an_honest_state_and_pr_are_held_and_released_while_strangers_fill_the_default_purgatory() {
    strangers_fill_purgatory(HeldLimits::default(), 64 * 1024).await;
}

/// Strangers fill a purgatory bounded by `limits` with junk pull requests of `junk`
/// bytes; an honest state and pull request are held, then released.
async fn strangers_fill_purgatory(limits: HeldLimits, junk: usize) {
    let dir = TempDir::new("purgatory-fair-total");
    let source = SourceRepo::create(dir.join("http/r.git"));
    let first = source.commit("first");
    let proposed = source.commit_unreferenced("proposed change");
    let http = GitHttpServer::start(dir.join("http"), IPV6_LOOPBACK).await;

    let root = dir.join("repos");
    let fetcher = GitFetcher::new(GitFetcherConfig {
        fetch_timeout: Duration::from_secs(20),
        policy: test_policy(),
        ..GitFetcherConfig::default()
    });
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, mut output) = ChannelSink::new();
    let registry = Registry::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements.clone())
        .repos_root(&root)
        .git_backend(Arc::new(fetcher))
        .clone_policy(test_policy())
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .limits(limits)
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);

    let strangers: Vec<Keys> = (0..5).map(|_| Keys::generate()).collect();
    let mut next = 0;
    let junk_held = flood(&purgatory, &strangers, &mut next, junk);
    // And the last bytes with empty ones.
    flood(&purgatory, &strangers, &mut next, 0);
    let full = purgatory.status_now();
    assert!(
        junk_held * (junk + 1024) >= limits.total_bytes,
        "{junk_held} junk pull requests held"
    );
    assert!(
        full.bytes_held + junk + 1024 > limits.total_bytes,
        "purgatory is full: {} of {} bytes",
        full.bytes_held,
        limits.total_bytes
    );

    // The owner announces "r" and publishes its state; a contributor proposes a commit.
    let owner = Keys::generate();
    let url = http.url("r.git");
    announcements
        .add(Announcement::new("r").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    let local = NpubLayout::new(&root)
        .path_of(&owner.public_key(), "r")
        .unwrap();
    std::fs::create_dir_all(&local).unwrap();
    init_bare_repo(&local);
    let owner_state = state(&owner, "r", &[&first, &first, &first], 1_700_000_000);
    let contribution = pull_request(&Keys::generate(), &owner.public_key(), "r", &proposed);
    for honest in [&owner_state, &contribution] {
        assert!(
            full.bytes_held + honest.as_json().len() > limits.total_bytes,
            "no room is left for the honest events: {} of {} bytes held",
            full.bytes_held,
            limits.total_bytes
        );
    }
    purgatory
        .add_state(owner_state.clone(), Origin::Submitted)
        .expect("the owner's state is held although strangers filled purgatory");
    purgatory
        .add_pr(contribution.clone(), Origin::Submitted)
        .expect("the contributor's pull request is held although strangers filled purgatory");
    let evicted = purgatory.status_now().events_evicted;
    assert!(evicted >= 2, "junk was evicted to make room: {evicted}");
    assert!(
        counter(
            &registry,
            "purgatory_events_evicted_total",
            "reason",
            "total_bytes_full"
        ) >= 2.0
    );

    // The strangers publish again (proactive sync retries what was refused): they evict
    // each other, never the honest events.
    flood(&purgatory, &strangers, &mut next, junk);
    assert!(purgatory.contains(&owner_state.id));
    assert!(purgatory.contains(&contribution.id));
    assert!(purgatory.status_now().bytes_held <= limits.total_bytes);

    // Their objects are fetched: both are released.
    purgatory.trigger_repository_sync(
        &grasp_sync_core::nip34::RepoRef::new(owner.public_key(), "r").unwrap(),
    );
    let mut released = Vec::new();
    while released.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(30), output.recv()).await {
            Ok(Some(PurgatoryOutput::Released(held))) => released.push(held.event.id),
            Ok(other) => panic!("unexpected output {other:?}"),
            Err(_) => panic!("{} of 2 honest events released within 30 s", released.len()),
        }
    }
    released.sort();
    let mut expected = vec![owner_state.id, contribution.id];
    expected.sort();
    assert_eq!(released, expected);
    assert!(has_object(&local, &first));
    assert!(has_object(&local, &proposed));
    purgatory.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("purgatory stops")
        .unwrap()
        .unwrap();
}

/// The per-repository variant: 1 000 junk pull requests by 20 keys fill the owner's
/// own repository (its limit is 1 000 events). The owner's next state is held anyway (a
/// pull request of the heaviest junk author makes room), stays held while strangers
/// keep publishing, and a stranger's new pull request evicts junk, never the state.
/// Fails on a purgatory that refuses an event of a full repository.
#[tokio::test(start_paused = true)]
async fn the_owners_state_is_held_in_a_repository_full_of_junk_pull_requests() {
    let (sink, _output) = ChannelSink::new();
    let registry = Registry::new();
    let limits = HeldLimits::default();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(grasp_sync_tokio::TokioClock::new()))
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(Arc::new(MemoryGit::default()))
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .limits(limits)
        .build()
        .unwrap();
    let owner = Keys::generate();
    let strangers: Vec<Keys> = (0..20).map(|_| Keys::generate()).collect();
    let junk = |stranger: &Keys, n: usize| {
        let tip = format!("{:040x}", n + 1);
        pull_request(stranger, &owner.public_key(), "r", &tip)
    };
    for n in 0..limits.per_repository {
        purgatory
            .add_pr(junk(&strangers[n % strangers.len()], n), Origin::Synced)
            .unwrap();
    }
    // The repository is full: one more by a junk author who holds the most is refused.
    let refused = purgatory.add_pr(junk(&strangers[0], 5_000), Origin::Synced);
    assert!(matches!(refused, Err(AddError::Full { .. })), "{refused:?}");

    let owner_state = state(&owner, "r", &[&oid(1)], 1_700_000_000);
    purgatory
        .add_state(owner_state.clone(), Origin::Submitted)
        .expect("the owner's state is held in their own repository full of junk");
    assert_eq!(
        counter(
            &registry,
            "purgatory_events_evicted_total",
            "reason",
            "repository_full"
        ),
        1.0
    );
    // Strangers keep publishing, with fresh keys too: they evict junk, not the state.
    for n in 0..200 {
        let stranger = if n % 2 == 0 {
            Keys::generate()
        } else {
            strangers[n % strangers.len()].clone()
        };
        let _ = purgatory.add_pr(junk(&stranger, 10_000 + n), Origin::Synced);
    }
    assert!(purgatory.contains(&owner_state.id));
    let repo = grasp_sync_core::nip34::RepoRef::new(owner.public_key(), "r").unwrap();
    assert_eq!(purgatory.held_events(&repo).len(), limits.per_repository);
    // A newer state of the owner replaces theirs, in the full repository too.
    let newer = state(&owner, "r", &[&oid(2)], 1_700_000_001);
    purgatory
        .add_state(newer.clone(), Origin::Submitted)
        .unwrap();
    assert!(purgatory.contains(&newer.id));
    assert!(!purgatory.contains(&owner_state.id));
}
