//! Proactive sync wired to purgatory: a pull request and a repository state that sync
//! brings from a remote relay wait in purgatory (the 500 ms immediate delay), their
//! commits are fetched from the repository's clone URL on a real `git daemon`, and they
//! reach the relay's database only then; an issue goes straight to the database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as support;

use std::sync::Arc;
use std::time::Duration;

use git_support::{git, has_object, init_bare_repo, GitDaemon, SourceRepo, TempDir};
use grasp_purgatory::{
    DatabaseAnnouncements, GitFetcher, GitFetcherConfig, NpubLayout, Purgatory, PurgatoryGate,
    StoreSink,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::root;
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use grasp_sync_tokio::{DatabaseStore, SyncManager};
use nostr::prelude::*;
use nostr_database::NostrDatabase as _;
use support::{TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_synced_from_a_remote_relay_wait_in_purgatory_until_their_commits_are_fetched() {
    // A git server with the repository; the PR tip is an object no ref points at.
    let dir = TempDir::new("sync-purgatory-wiring");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let main = source.commit("main");
    let pr_tip = source.commit_unreferenced("proposal");
    let daemon = GitDaemon::start(&dir.join("served"));

    // The remote relay holds the repository's state, a PR and an issue.
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let at = Timestamp::now().as_secs() - 60;
    let remote_url = remote.url().to_string();
    let clone_url = daemon.url("r.git");
    let announcement = Announcement::new("r")
        .relays([&remote_url])
        .clone_urls([&clone_url])
        .at(at)
        .sign(&maintainer);
    let coordinate = ids::coordinate(&maintainer.public_key(), "r");
    let state = sign(
        &maintainer,
        30618,
        "",
        vec![tag(&["d", "r"]), tag(&["refs/heads/main", &main])],
        at,
    );
    let contributor = Keys::generate();
    let pr = sign(
        &contributor,
        1618,
        "",
        vec![tag(&["a", &coordinate]), tag(&["c", &pr_tip])],
        at,
    );
    let issue = root(&contributor, 1621, &coordinate, "", at);
    remote
        .add_events(&[
            announcement.clone(),
            state.clone(),
            pr.clone(),
            issue.clone(),
        ])
        .await;

    // The relay: a database, the bare repository, purgatory in front of the database.
    let database = Arc::new(nostr_memory::MemoryDatabase::unbounded());
    let store = Arc::new(DatabaseStore::new(database.clone()));
    let repos = dir.join("repos");
    let local = NpubLayout::new(&repos)
        .path_of(&maintainer.public_key(), "r")
        .unwrap();
    std::fs::create_dir_all(&local).unwrap();
    init_bare_repo(&local);
    let policy = CloneUrlPolicy::new()
        .allow_git_protocol(true)
        .allow_local_addresses(true);
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy.clone(),
        fetch_timeout: Duration::from_secs(20),
        ..GitFetcherConfig::default()
    });
    let registry = prometheus::Registry::new();
    let purgatory = Purgatory::builder()
        .announcements(Arc::new(DatabaseAnnouncements::new(database.clone())))
        .repos_root(&repos)
        .clone_policy(policy)
        .git_backend(Arc::new(fetcher.clone()))
        .sink(Arc::new(StoreSink::new(store.clone())))
        .registry(registry.clone())
        .build()
        .unwrap();
    let purgatory_run = tokio::spawn({
        let purgatory = purgatory.clone();
        async move { purgatory.run().await }
    });
    let gate = Arc::new(PurgatoryGate::new(store.clone(), purgatory.clone()));
    let manager = SyncManager::builder()
        .store(gate)
        .engine_config(support::loopback_engine_config())
        .build()
        .unwrap();
    let own_events = manager.own_events_sender();
    let shutdown = manager.shutdown_handle();
    let sync_run = tokio::spawn(manager.run());
    // The embedding relay accepted the announcement (it lists the remote relay).
    database.save_event(&announcement).await.unwrap();
    own_events.send(announcement.clone()).await.unwrap();

    let deadline = tokio::time::Instant::now() + WAIT;
    let wanted = [state.id, pr.id, issue.id];
    let mut seen_held = false;
    loop {
        let mut stored = 0;
        for id in &wanted {
            if database.event_by_id(id).await.unwrap().is_some() {
                stored += 1;
            }
        }
        seen_held |= purgatory.contains(&pr.id) || purgatory.contains(&state.id);
        if stored == wanted.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{stored} of 3 stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen_held, "the PR or the state waited in purgatory");
    assert!(has_object(&local, &main));
    assert!(has_object(&local, &pr_tip));
    let nostr_ref = git(&local, &["rev-parse", &format!("refs/nostr/{}", pr.id)]);
    assert_eq!(nostr_ref.trim(), pr_tip);
    assert!(fetcher.fetch_processes_spawned() >= 1);
    // Purgatory counts a release after the events reached the database:
    // wait for the count too.
    let released_count = || {
        registry
            .gather()
            .iter()
            .find(|family| family.name() == "purgatory_events_released_total")
            .map(|family| family.get_metric()[0].get_counter().get_value())
            .unwrap_or_default()
    };
    while released_count() < 2.0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = released_count();
    assert_eq!(
        released, 2.0,
        "the state and the PR were released by purgatory"
    );

    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(2), sync_run)
        .await
        .unwrap()
        .unwrap();
    purgatory.shutdown();
    tokio::time::timeout(Duration::from_secs(2), purgatory_run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
