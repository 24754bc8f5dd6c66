//! Disk (issue 45, item 8), with real git: a bare repository purgatory creates has no
//! sample hooks, and the objects fetched for an event that expires unreleased are
//! deleted once its `refs/purgatory/*` are swept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{
    ChannelSink, DiskLimits, GitFetcher, GitFetcherConfig, MemoryAnnouncements, NpubLayout, Origin,
    Purgatory, PurgatoryOutput,
};
use grasp_sync_core::clock::ManualClock;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{state, Announcement};
use nostr::prelude::*;
use prometheus::Registry;
use support::{counter, git, git_with_input, has_object, GitHttpServer, SourceRepo, TempDir};
use tokio::sync::mpsc::UnboundedReceiver;

const IPV6_LOOPBACK: std::net::IpAddr = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);

/// The loopback test server is a local address over plain HTTP.
fn test_policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true)
}

fn fetcher() -> GitFetcher {
    GitFetcher::new(GitFetcherConfig {
        fetch_timeout: Duration::from_secs(20),
        policy: test_policy(),
        ..GitFetcherConfig::default()
    })
}

/// The bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| match entry.file_type() {
                    Ok(kind) if kind.is_dir() => bytes_under(&entry.path()),
                    _ => entry.metadata().map_or(0, |meta| meta.len()),
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `len` bytes git cannot compress (xorshift from `seed`), so the blob costs its size on
/// disk.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ seed;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// A commit no ref points at, with a 2 MiB blob of noise from `seed`.
fn big_commit(source: &SourceRepo, seed: u64) -> String {
    let blob = git_with_input(
        source.path(),
        &["hash-object", "-w", "--stdin"],
        &noise(2 * 1024 * 1024, seed),
    );
    let tree = git_with_input(
        source.path(),
        &["mktree"],
        format!("100644 blob {}\tbig\n", blob.trim()).as_bytes(),
    );
    let identity = ["-c", "user.name=test", "-c", "user.email=test@example.com"];
    let commit = [
        identity.as_slice(),
        &["commit-tree", tree.trim(), "-m", "big"],
    ]
    .concat();
    git(source.path(), &commit).trim().to_owned()
}

/// The next released event, within 30 s.
async fn next_released(output: &mut UnboundedReceiver<PurgatoryOutput>) -> EventId {
    match tokio::time::timeout(Duration::from_secs(30), output.recv()).await {
        Ok(Some(PurgatoryOutput::Released(held))) => held.event.id,
        other => panic!("expected a release, got {other:?}"),
    }
}

/// The disk quotas: 1 MiB of objects per owner, 3 MiB in total. A heavy owner's first
/// 2 MiB are fetched, then their next fetch is refused (author quota, counted, the event
/// still held) while an honest owner's state is fetched and released. A second heavy
/// owner takes the total past 3 MiB: then a new owner's repository is not created
/// (total quota, counted, the event still held). Fails on a purgatory without quotas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_and_repositories_over_the_disk_quotas_are_refused_and_counted() {
    const MIB: u64 = 1024 * 1024;
    let dir = TempDir::new("purgatory-quota");
    let source = SourceRepo::create(dir.join("http/r.git"));
    let first = source.commit("first");
    let second = source.commit("second");
    let (big_a, big_b) = (big_commit(&source, 1), big_commit(&source, 2));
    let http = GitHttpServer::start(dir.join("http"), IPV6_LOOPBACK).await;
    let url = http.url("r.git");

    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, mut output) = ChannelSink::new();
    let registry = Registry::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements.clone())
        .repos_root(dir.join("repos"))
        .git_backend(Arc::new(fetcher()))
        .clone_policy(test_policy())
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .disk_limits(DiskLimits {
            total_bytes: Some(3 * MIB),
            per_author_bytes: Some(MIB),
        })
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let refusals = |quota: &str| {
        counter(
            &registry,
            "purgatory_disk_quota_refusals_total",
            "quota",
            quota,
        )
    };
    let owner = |identifier: &str| {
        let keys = Keys::generate();
        announcements
            .add(
                Announcement::new(identifier)
                    .clone_urls(&[&url])
                    .sign(&keys),
            )
            .unwrap();
        keys
    };
    let hold = |keys: &Keys, identifier: &str, oids: &[&str], at: u64| {
        let event = state(keys, identifier, oids, at);
        purgatory.add_state(event.clone(), Origin::Synced).unwrap();
        event.id
    };

    // A heavy owner: 2 MiB fetched (under the quota when asked), then refused.
    let heavy = owner("h");
    let fetched = hold(&heavy, "h", &[&big_a], 1);
    assert_eq!(next_released(&mut output).await, fetched);
    let refused = hold(&heavy, "h", &[&second], 2);
    // (Asked again at once rather than after the backoff of the sync that just ended.)
    events::eventually("the author quota refuses", Duration::from_secs(30), || {
        purgatory.trigger_immediate_sync("h");
        refusals("author") >= 1.0
    })
    .await;
    assert!(purgatory.contains(&refused), "refused for now, still held");

    // An honest owner is unaffected.
    let honest = owner("o");
    let released = hold(&honest, "o", &[&first], 1);
    assert_eq!(next_released(&mut output).await, released);

    // A second heavy owner takes the total past 3 MiB: a new repository is refused.
    let other = owner("h2");
    let fetched = hold(&other, "h2", &[&big_b], 1);
    assert_eq!(next_released(&mut output).await, fetched);
    let newcomer = owner("n");
    let waiting = hold(&newcomer, "n", &[&first], 1);
    events::eventually("the total quota refuses", Duration::from_secs(30), || {
        refusals("total") >= 1.0
    })
    .await;
    assert!(purgatory.contains(&waiting), "refused for now, still held");
    assert!(purgatory.contains(&refused));
    let objects: f64 = registry
        .gather()
        .iter()
        .filter(|family| family.name() == "purgatory_git_objects_bytes")
        .flat_map(|family| family.get_metric())
        .map(|metric| metric.get_gauge().get_value())
        .sum();
    assert!(objects >= 4.0 * MIB as f64, "{objects} bytes measured");
    purgatory.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("purgatory stops")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_new_bare_repository_has_no_sample_hooks() {
    let dir = TempDir::new("purgatory-no-hooks");
    let repo = dir.join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    fetcher().init_bare(&repo).await.unwrap();
    assert!(repo.join("HEAD").is_file(), "a bare repository");
    let hooks: Vec<String> = std::fs::read_dir(repo.join("hooks"))
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(hooks.is_empty(), "hooks installed: {hooks:?}");
}

/// A state names a 2 MiB commit the server has and a commit it lacks: the first is
/// fetched (kept by `refs/purgatory/<oid>`), the state waits for the second until it
/// expires on the manual clock. Then its ref is swept and the 2 MiB are deleted from
/// disk. Fails on a purgatory that fetches with `--no-auto-gc` and never prunes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_fetched_for_an_event_that_expires_unreleased_are_pruned() {
    const EXPIRY: Duration = Duration::from_secs(600);
    let dir = TempDir::new("purgatory-prune");
    let source = SourceRepo::create(dir.join("http/r.git"));
    source.commit("first");
    let big = big_commit(&source, 1);
    let never = "f".repeat(40);
    let http = GitHttpServer::start(dir.join("http"), IPV6_LOOPBACK).await;

    let root = dir.join("repos");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, _output) = ChannelSink::new();
    let registry = Registry::new();
    let fetcher = fetcher();
    let purgatory = Purgatory::builder()
        .clock(clock.clone())
        .announcements(announcements.clone())
        .repos_root(&root)
        .git_backend(Arc::new(fetcher.clone()))
        .clone_policy(test_policy())
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .expiry(EXPIRY)
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let owner = Keys::generate();
    announcements
        .add(
            Announcement::new("r")
                .clone_urls(&[&http.url("r.git")])
                .sign(&owner),
        )
        .unwrap();
    let local = NpubLayout::new(&root)
        .path_of(&owner.public_key(), "r")
        .unwrap();
    std::fs::create_dir_all(&local).unwrap();
    fetcher.init_bare(&local).await.unwrap();
    let empty = bytes_under(&local.join("objects"));

    let waiting = state(&owner, "r", &[&big, &never], 1_700_000_000);
    purgatory
        .add_state(waiting.clone(), Origin::Synced)
        .unwrap();
    clock.advance(Duration::from_secs(1));
    purgatory.trigger_immediate_sync("r");
    let fetched = tokio::time::Instant::now() + Duration::from_secs(30);
    while !has_object(&local, &big) {
        assert!(
            tokio::time::Instant::now() < fetched,
            "the commit the server has is fetched"
        );
        clock.advance(Duration::from_secs(1));
        purgatory.trigger_immediate_sync("r");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        purgatory.contains(&waiting.id),
        "still waiting for the other"
    );
    let held_bytes = bytes_under(&local.join("objects"));
    assert!(
        held_bytes >= empty + 2 * 1024 * 1024,
        "{held_bytes} bytes of objects"
    );

    // It expires: its ref is swept and what it fetched is deleted.
    clock.advance(EXPIRY);
    purgatory.trigger_immediate_sync("r");
    events::eventually("the event expires", Duration::from_secs(10), || {
        !purgatory.contains(&waiting.id)
    })
    .await;
    events::eventually(
        "the objects it fetched are pruned",
        Duration::from_secs(30),
        || !has_object(&local, &big),
    )
    .await;
    let pruned = || -> f64 {
        registry
            .gather()
            .iter()
            .filter(|family| family.name() == "purgatory_repositories_pruned_total")
            .flat_map(|family| family.get_metric())
            .map(|metric| metric.get_counter().get_value())
            .sum()
    };
    events::eventually("the prune is counted", Duration::from_secs(10), || {
        pruned() >= 1.0
    })
    .await;
    let after = bytes_under(&local.join("objects"));
    assert!(
        after + 2 * 1024 * 1024 <= held_bytes,
        "disk usage dropped: {held_bytes} -> {after} bytes"
    );
    purgatory.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("purgatory stops")
        .unwrap()
        .unwrap();
}
