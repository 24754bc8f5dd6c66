//! Purgatory next to any relay: a missing local repository is created (a real `git init
//! --bare`, `refs/purgatory` hidden from serving) before its objects are fetched from a
//! real smart-HTTP server; with the git root managed externally, an event of a missing
//! repository waits with that reason in the status; and "all accounted" means what it
//! says: a repository backing off after a failed fetch is not accounted for, one whose
//! only clone URLs are ours is (as not fetchable). Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::sync::Arc;
use std::time::Duration;

use events::memory_git::MemoryGit;
use grasp_purgatory::core::purgatory::NotFetchable;
use grasp_purgatory::{
    create_bare_repository, ChannelSink, GitFetcher, GitFetcherConfig, HeldState,
    MemoryAnnouncements, NpubLayout, Origin, Purgatory, PurgatoryOutput,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::ids;
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, state, Announcement};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;
use support::{git, has_object, until, GitHttpServer, SourceRepo, TempDir};
use tokio::sync::mpsc::UnboundedReceiver;

const IPV4_LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
const HOST: &str = "git.example.com";
const OURS: &str = "ours.example.com";

fn test_policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_git_protocol(true)
        .allow_local_addresses(true)
}

fn fetcher() -> GitFetcher {
    GitFetcher::new(GitFetcherConfig {
        fetch_timeout: Duration::from_secs(20),
        policy: test_policy(),
        ..GitFetcherConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_repository_is_created_with_purgatory_refs_hidden_then_fetched_into() {
    let dir = TempDir::new("purgatory-create");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let tip = source.commit("main");
    let server = GitHttpServer::start(dir.join("served"), IPV4_LOOPBACK).await;
    let root = dir.join("root");
    let owner = Keys::generate();
    let announcements = Arc::new(MemoryAnnouncements::new());
    announcements
        .add(
            Announcement::new("r")
                .clone_urls(&[&server.url("r.git")])
                .sign(&owner),
        )
        .unwrap();
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements)
        .repos_root(&root)
        .git_backend(Arc::new(fetcher()))
        .clone_policy(test_policy())
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let held = state(&owner, "r", &[&tip], 1_700_000_000);
    purgatory.add_state(held.clone(), Origin::Synced).unwrap();

    let released = tokio::time::timeout(Duration::from_secs(30), output.recv())
        .await
        .expect("released in time");
    assert!(
        matches!(&released, Some(PurgatoryOutput::Released(event)) if event.event.id == held.id),
        "{released:?}"
    );
    let local = NpubLayout::new(&root)
        .path_of(&owner.public_key(), "r")
        .unwrap();
    assert!(
        has_object(&local, &tip),
        "fetched into the created repository"
    );
    assert_eq!(git(&local, &["rev-parse", "--is-bare-repository"]), "true");
    // "All accounted" includes the refs that kept the objects: none is left.
    let mut status = purgatory.status();
    let settled = until(&mut status, Duration::from_secs(10), |s| s.all_accounted).await;
    assert_eq!(settled.repositories_sweeping, 0);
    assert_eq!(git(&local, &["for-each-ref", "refs/purgatory/"]), "");
    for key in ["uploadpack.hideRefs", "receive.hideRefs"] {
        assert_eq!(git(&local, &["config", "--get-all", key]), "refs/purgatory");
    }
    // A ref under refs/purgatory exists in the repository but is not served.
    git(&local, &["update-ref", "refs/purgatory/kept", &tip]);
    git(&local, &["update-ref", "refs/heads/main", &tip]);
    let served = git(dir.path(), &["ls-remote", local.to_str().unwrap()]);
    assert!(served.contains("refs/heads/main"), "{served}");
    assert!(!served.contains("refs/purgatory"), "{served}");
    let leftovers: Vec<_> = std::fs::read_dir(local.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("r.git")]);
    let status = purgatory.status_now();
    assert_eq!(status.repositories_created, 1);
    assert!(status.all_accounted);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_creators_racing_for_one_repository_both_succeed_and_one_creates_it() {
    let dir = TempDir::new("purgatory-create-race");
    let path = dir.join("npub1x/r.git");
    let git_backend = fetcher();
    let (first, second) = tokio::join!(
        create_bare_repository(&git_backend, &path),
        create_bare_repository(&git_backend, &path)
    );
    let created = [first.unwrap(), second.unwrap()];
    assert_eq!(created.iter().filter(|created| **created).count(), 1);
    assert!(!create_bare_repository(&git_backend, &path).await.unwrap());
    assert_eq!(git(&path, &["rev-parse", "--is-bare-repository"]), "true");
    let entries = std::fs::read_dir(dir.join("npub1x")).unwrap().count();
    assert_eq!(entries, 1, "no scratch directory left");
}

/// A purgatory on virtual time over the in-memory git backend, repositories under an
/// empty root.
fn memory_purgatory(
    git: &Arc<MemoryGit>,
    announcements: &Arc<MemoryAnnouncements>,
    root: &std::path::Path,
    external: bool,
) -> (Purgatory, UnboundedReceiver<PurgatoryOutput>) {
    let (sink, outputs) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements.clone())
        .repos_root(root)
        .repositories_managed_externally(external)
        .our_domain(OURS)
        .git_backend(git.clone())
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    (purgatory, outputs)
}

#[tokio::test(start_paused = true)]
async fn with_the_git_root_managed_externally_a_missing_repository_waits_with_its_reason() {
    let dir = TempDir::new("purgatory-external");
    let git = Arc::new(MemoryGit::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let owner = Keys::generate();
    let url = format!("https://{HOST}/r.git");
    announcements
        .add(Announcement::new("r").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.serve(&url, [oid(1)]);
    let (purgatory, _outputs) = memory_purgatory(&git, &announcements, dir.path(), true);
    let path = NpubLayout::new(dir.path())
        .path_of(&owner.public_key(), "r")
        .unwrap();
    assert!(!path.exists(), "{path:?}");
    let mut status = purgatory.status();
    let run = events::spawn_run(&purgatory);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &oid(1));
    purgatory.add_pr(pr, Origin::Synced).unwrap();
    assert!(!status.borrow().all_accounted, "never stale after an add");

    let waiting = until(&mut status, Duration::from_secs(5), |s| s.all_accounted).await;
    assert_eq!(waiting.events_held, 1);
    assert_eq!(waiting.events_not_fetchable, 1);
    assert_eq!(
        waiting.not_fetchable_by_reason.get("repository_missing"),
        Some(&1)
    );
    let listed = &waiting.not_fetchable[0];
    assert_eq!(listed.repo, ids::coordinate(&owner.public_key(), "r"));
    assert_eq!(
        listed.state,
        HeldState::NotFetchable(NotFetchable::RepositoryMissing)
    );
    assert!(git.log().is_empty(), "nothing fetched into nowhere");
    assert_eq!(waiting.repositories_created, 0);
    assert!(!path.exists(), "not created");

    // The GRASP server creates it; a push notification syncs it.
    std::fs::create_dir_all(&path).unwrap();
    purgatory.trigger_immediate_sync("r");
    let done = until(&mut status, Duration::from_secs(5), |s| {
        s.events_released == 1
    })
    .await;
    assert!(done.all_accounted && done.events_held == 0, "{done:?}");
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn backing_off_is_not_accounted_and_only_our_own_urls_are_not_fetchable() {
    let dir = TempDir::new("purgatory-accounted");
    let git = Arc::new(MemoryGit::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let owner = Keys::generate();
    let down = format!("https://{HOST}/down.git");
    let ours = format!("https://{OURS}/npub/ours.git");
    announcements
        .add(
            Announcement::new("down")
                .clone_urls(&[&ours, &down])
                .sign(&owner),
        )
        .unwrap();
    announcements
        .add(Announcement::new("ours").clone_urls(&[&ours]).sign(&owner))
        .unwrap();
    git.fail(&down);
    git.serve(&ours, [oid(1), oid(2)]);
    let (purgatory, _outputs) = memory_purgatory(&git, &announcements, dir.path(), false);
    let mut status = purgatory.status();
    let run = events::spawn_run(&purgatory);
    let add = |identifier: &str, tip: &str| {
        let pr = pull_request(&Keys::generate(), &owner.public_key(), identifier, tip);
        purgatory.add_pr(pr, Origin::Synced).unwrap();
    };
    add("down", &oid(1));
    add("ours", &oid(2));

    // Both tried: "ours" is not fetchable, "down" failed and backs off.
    let tried = until(&mut status, Duration::from_secs(5), |s| {
        s.events_not_fetchable == 1 && s.still_waiting.iter().any(is_backing_off_with_error)
    })
    .await;
    assert!(!tried.all_accounted, "a backoff is not done: {tried:?}");
    assert!(tried.nothing_ready, "though nothing is ready: {tried:?}");
    assert_eq!(tried.repositories_waiting, 1);
    assert!(tried.still_waiting[0].repo.ends_with(":down"));
    assert!(tried.not_fetchable[0].repo.ends_with(":ours"));
    assert_eq!(
        tried.not_fetchable[0].state,
        HeldState::NotFetchable(NotFetchable::OnlyOwnService)
    );
    assert_eq!(
        tried.not_fetchable_by_reason.get("only_own_service"),
        Some(&1)
    );
    assert!(tried.clone_urls_skipped_own_service >= 2);
    assert!(
        git.log().iter().all(|fetch| fetch.domain != OURS),
        "never fetched from our own service: {:?}",
        git.log()
    );
    // Still not accounted after backoffs: the server keeps failing.
    tokio::time::sleep(Duration::from_secs(100)).await;
    let later = purgatory.status_now();
    assert!(!later.all_accounted, "{later:?}");
    assert!(git.log().len() >= 2, "retried: {:?}", git.log());

    // The server comes back: "down" is released, "ours" stays reported.
    git.serve(&down, [oid(1)]);
    purgatory.trigger_immediate_sync("down");
    let settled = until(&mut status, Duration::from_secs(5), |s| s.all_accounted).await;
    assert_eq!(settled.events_released, 1);
    assert_eq!(settled.events_held, 1);
    assert_eq!(settled.events_not_fetchable, 1);
    assert_eq!(
        settled.repositories_created, 2,
        "every announced repository is served, as a GRASP server creates it on acceptance"
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

fn is_backing_off_with_error(repository: &grasp_purgatory::HeldRepository) -> bool {
    matches!(
        &repository.state,
        HeldState::BackingOff {
            last_error: Some(_)
        }
    )
}

/// A locator that finds no repository and lays none out.
struct Nowhere;

impl grasp_purgatory::RepoLocator for Nowhere {
    fn locate(&self, _repo: &grasp_sync_core::nip34::RepoRef) -> Option<std::path::PathBuf> {
        None
    }
}

#[tokio::test(start_paused = true)]
async fn a_repository_with_no_place_to_be_created_is_reported_not_fetchable() {
    let git = Arc::new(MemoryGit::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let owner = Keys::generate();
    let url = format!("https://{HOST}/r.git");
    announcements
        .add(Announcement::new("r").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.serve(&url, [oid(1)]);
    let (sink, _outputs) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements)
        .repo_locator(Arc::new(Nowhere))
        .git_backend(git.clone())
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let mut status = purgatory.status();
    let run = events::spawn_run(&purgatory);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &oid(1));
    purgatory.add_pr(pr, Origin::Synced).unwrap();
    let reported = until(&mut status, Duration::from_secs(5), |s| s.all_accounted).await;
    assert_eq!(
        reported
            .not_fetchable_by_reason
            .get("no_place_for_repository"),
        Some(&1),
        "{reported:?}"
    );
    assert!(git.log().is_empty());
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
