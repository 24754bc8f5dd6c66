//! Purgatory is per repository, not per bare identifier, against real git servers on
//! 127.0.0.1: two authors announcing the same identifier keep separate targets and
//! clone URLs; a stranger's URLs are never contacted for another's repository, while
//! the maintainers the owner lists lend theirs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{
    ChannelSink, GitFetcher, GitFetcherConfig, MemoryAnnouncements, NpubLayout, Origin, Purgatory,
    PurgatoryOutput,
};
use grasp_sync_core::nip34::RepoRef;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, sign, tag, Announcement};
use nostr::prelude::*;
use support::{closed_port_url, has_object, init_bare_repo, GitHttpServer, SourceRepo, TempDir};
use tokio::sync::mpsc::UnboundedReceiver;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true)
}

/// An announcement of "r" by `keys` with these clone URLs and maintainers.
fn announce(keys: &Keys, urls: &[&str], maintainers: &[&Keys]) -> Event {
    Announcement::new("r")
        .clone_urls(urls)
        .maintainers(maintainers.iter().map(|keys| keys.public_key()))
        .sign(keys)
}

/// Creates the local bare repository of `author`'s "r".
fn local_repo(root: &Path, author: &Keys) -> PathBuf {
    let path = NpubLayout::new(root)
        .path_of(&author.public_key(), "r")
        .unwrap();
    init_bare_repo(&path);
    path
}

async fn released(output: &mut UnboundedReceiver<PurgatoryOutput>) -> EventId {
    match tokio::time::timeout(Duration::from_secs(30), output.recv()).await {
        Ok(Some(PurgatoryOutput::Released(held))) => held.event.id,
        other => panic!("expected a release within 30 s, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_authors_of_one_identifier_keep_separate_targets_and_urls() {
    let dir = TempDir::new("purgatory-scoping");
    // The owner's co-maintainer serves the owner's commit; the stranger's server (which
    // counts every request) serves the stranger's commit and, as a lure, the owner's.
    let maintainer_source = SourceRepo::create(dir.join("maintainer/r.git"));
    maintainer_source.commit("base");
    let owners_tip = maintainer_source.commit_unreferenced("the owner's proposal");
    let stranger_source = SourceRepo::create(dir.join("stranger/r.git"));
    stranger_source.commit("base");
    let lure = stranger_source.commit_unreferenced("the owner's proposal");
    assert_eq!(
        lure, owners_tip,
        "deterministic commits: the lure is the same object"
    );
    let strangers_tip = stranger_source.commit_unreferenced("the stranger's proposal");
    let maintainer_server = GitHttpServer::start(dir.join("maintainer"), LOOPBACK).await;
    let stranger_server = GitHttpServer::start(dir.join("stranger"), LOOPBACK).await;

    let (owner, maintainer, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let announcements = Arc::new(MemoryAnnouncements::new());
    // The owner's own server is down; the listed maintainer's is up.
    let owners_url = closed_port_url("http", "r.git");
    announcements
        .add(announce(&owner, &[&owners_url], &[&maintainer]))
        .unwrap();
    announcements
        .add(announce(
            &maintainer,
            &[&maintainer_server.url("r.git")],
            &[],
        ))
        .unwrap();
    // The stranger announces the same identifier, and even names the owner.
    announcements
        .add(announce(
            &stranger,
            &[&stranger_server.url("r.git")],
            &[&owner],
        ))
        .unwrap();
    let root = dir.join("repos");
    let owners_repo = local_repo(&root, &owner);
    let strangers_repo = local_repo(&root, &stranger);

    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy(),
        fetch_timeout: Duration::from_secs(20),
        ..GitFetcherConfig::default()
    });
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(&root)
        .git_backend(Arc::new(fetcher))
        .clone_policy(policy())
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);

    // A pull request for the owner's repository.
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &owners_tip);
    purgatory.add_pr(pr.clone(), Origin::Synced).unwrap();
    let owners = RepoRef::new(owner.public_key(), "r").unwrap();
    assert_eq!(purgatory.held_events(&owners).len(), 1);
    assert_eq!(released(&mut output).await, pr.id);
    assert!(has_object(&owners_repo, &owners_tip));
    assert!(
        !has_object(&strangers_repo, &owners_tip),
        "the stranger's repository is not the target"
    );
    assert_eq!(maintainer_server.stats().fetches(), 1);
    assert_eq!(
        stranger_server.stats().requests,
        0,
        "the stranger's server was never contacted for the owner's repository"
    );

    // The stranger's own pull request goes to the stranger's repository, from the
    // stranger's server only.
    let theirs = pull_request(
        &Keys::generate(),
        &stranger.public_key(),
        "r",
        &strangers_tip,
    );
    purgatory.add_pr(theirs.clone(), Origin::Synced).unwrap();
    let strangers = RepoRef::new(stranger.public_key(), "r").unwrap();
    assert_eq!(purgatory.held_events(&strangers).len(), 1);
    assert!(purgatory.held_events(&owners).is_empty());
    assert_eq!(released(&mut output).await, theirs.id);
    assert!(has_object(&strangers_repo, &strangers_tip));
    assert!(!has_object(&owners_repo, &strangers_tip));
    assert_eq!(stranger_server.stats().fetches(), 1);
    assert_eq!(
        maintainer_server.stats().fetches(),
        1,
        "the owner's maintainer is not asked for the stranger's repository"
    );

    // A state is its author's: the stranger's state of "r" never targets the owner's.
    let state = sign(
        &stranger,
        30618,
        "",
        vec![tag(&["d", "r"]), tag(&["refs/heads/main", &oid(7)])],
        1_700_000_100,
    );
    purgatory.add_state(state, Origin::Submitted).unwrap();
    assert_eq!(purgatory.held_events(&strangers).len(), 1);
    assert!(purgatory.held_events(&owners).is_empty());

    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
