//! `refs/purgatory/*` that no held event needs any more are deleted: those of a state
//! replaced by a newer one, and those of an event that expired. Real `git daemon` on
//! 127.0.0.1; every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{
    ChannelSink, GitFetcher, GitFetcherConfig, Inserted, MemoryAnnouncements, NpubLayout, Origin,
    Purgatory, PurgatoryOutput,
};
use grasp_sync_core::nip34::RepoRef;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{state, Announcement};
use nostr::prelude::*;
use prometheus::Registry;
use support::{git, init_bare_repo, GitDaemon, SourceRepo, TempDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refs_of_replaced_and_expired_events_are_deleted() {
    let dir = TempDir::new("purgatory-stale-refs");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let first = source.commit("first");
    let second = source.commit("second");
    let daemon = GitDaemon::start(&dir.join("served"));
    let owner = Keys::generate();
    let announcements = Arc::new(MemoryAnnouncements::new());
    announcements
        .add(
            Announcement::new("r")
                .clone_urls(&[&daemon.url("r.git")])
                .sign(&owner),
        )
        .unwrap();
    let root = dir.join("repos");
    let local = NpubLayout::new(&root)
        .path_of(&owner.public_key(), "r")
        .unwrap();
    init_bare_repo(&local);
    let policy = CloneUrlPolicy::new()
        .allow_git_protocol(true)
        .allow_local_addresses(true);
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy.clone(),
        fetch_timeout: Duration::from_secs(20),
        ..GitFetcherConfig::default()
    });
    let registry = Registry::new();
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(&root)
        .git_backend(Arc::new(fetcher))
        .clone_policy(policy)
        .registry(registry.clone())
        .expiry(Duration::from_secs(8))
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let refs = || {
        git(
            &local,
            &["for-each-ref", "--format=%(refname)", "refs/purgatory/"],
        )
    };

    // A state whose second tip no server has: the first is fetched and kept under its
    // temporary ref while the state waits.
    let older = state(&owner, "r", &[&first, &oid(9)], 1_700_000_000);
    purgatory.add_state(older, Origin::Synced).unwrap();
    let kept_first = format!("refs/purgatory/{first}");
    events::eventually("the first tip is fetched", Duration::from_secs(15), || {
        refs() == kept_first
    })
    .await;
    // (An event arriving while an attempt runs waits for the backoff: let it end.)
    let repo = RepoRef::new(owner.public_key(), "r").unwrap();
    events::eventually("the first attempt ends", Duration::from_secs(15), || {
        purgatory
            .queue_entry(&repo)
            .is_some_and(|entry| !entry.in_progress && entry.attempt_count == 1)
    })
    .await;

    // A newer state replaces it: the first tip's ref is needed by nothing any more.
    let newer = state(&owner, "r", &[&second, &oid(8)], 1_700_000_001);
    let inserted = purgatory.add_state(newer.clone(), Origin::Synced).unwrap();
    assert!(matches!(inserted, Inserted::Replaced { .. }));
    let kept_second = format!("refs/purgatory/{second}");
    events::eventually(
        "the replaced state's ref is deleted, the new one's fetched",
        Duration::from_secs(15),
        || refs() == kept_second,
    )
    .await;

    // The newer state expires (its other tip never arrives): its ref goes too.
    match tokio::time::timeout(Duration::from_secs(20), output.recv()).await {
        Ok(Some(PurgatoryOutput::Expired(held))) => assert_eq!(held.event.id, newer.id),
        other => panic!("expected the expiry, got {other:?}"),
    }
    events::eventually(
        "the expired state's ref is deleted",
        Duration::from_secs(10),
        || refs().is_empty(),
    )
    .await;
    assert_eq!(purgatory.held(), 0);
    let removed: f64 = registry
        .gather()
        .iter()
        .filter(|family| family.name() == "purgatory_stale_refs_removed_total")
        .flat_map(|family| family.get_metric())
        .map(|metric| metric.get_counter().get_value())
        .sum();
    assert_eq!(removed, 2.0);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
