//! What the repositories under the git root serve, with real git: the branches, tags and
//! `HEAD` of the newest state by the repository's maintainer set (a co-maintainer with
//! no announcement of their own included, a stranger never), written whether the
//! objects were fetched or were already there (pushed by another path, no fetch at
//! all); an older state arriving later changes no ref; a pull request's tip is fetched
//! from its own clone URL on another host and served at `refs/nostr/<id>`; a branch
//! moved by hand is put back with no new event. Released events go to an in-memory
//! "relay" the purgatory also reads states and pull requests from, as the sidecar's own
//! relay is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;

use grasp_purgatory::{MemoryAnnouncements, NpubLayout, Origin, Purgatory, Serving};
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use nostr::prelude::*;
use support::{
    git, pairs, served, serving_builder, state, until, GitHttpServer, SourceRepo, TempDir, SETTLE,
    T0,
};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Another host on loopback: a contributor's git server.
const OTHER_HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A purgatory over `relay`, with its git root in `dir`, reconciling every `interval`.
fn purgatory(relay: &Arc<MemoryAnnouncements>, root: &std::path::Path, interval: u64) -> Purgatory {
    serving_builder(relay, root, interval).build().unwrap()
}

/// One repository announced by `owner` on `relay`, its upstream (two commits on
/// `main`) served over smart HTTP from a temporary directory.
struct OneRepository {
    dir: TempDir,
    upstream: SourceRepo,
    one: String,
    two: String,
    server: GitHttpServer,
    owner: Keys,
    relay: Arc<MemoryAnnouncements>,
}

async fn one_repository(name: &str) -> OneRepository {
    let dir = TempDir::new(name);
    let upstream = SourceRepo::create(dir.join("upstream/r.git"));
    let one = upstream.commit("one");
    let two = upstream.commit("two");
    let server = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    let owner = Keys::generate();
    let relay = Arc::new(MemoryAnnouncements::new());
    relay
        .add(
            Announcement::new("r")
                .clone_urls([server.url("r.git")])
                .sign(&owner),
        )
        .unwrap();
    OneRepository {
        dir,
        upstream,
        one,
        two,
        server,
        owner,
        relay,
    }
}

fn local(root: &std::path::Path, owner: &Keys, identifier: &str) -> PathBuf {
    NpubLayout::new(root)
        .path_of(&owner.public_key(), identifier)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_state_of_the_maintainer_set_is_served_and_a_pr_tip_comes_from_its_fork() {
    let dir = TempDir::new("serving-maintainers");
    let upstream = SourceRepo::create(dir.join("upstream/r.git"));
    let first = upstream.commit("first");
    let server = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    // The co-maintainer pushed a branch upstream; the stranger's commit is there too.
    let feature = upstream.commit_unreferenced("feature");
    upstream.set_ref("refs/heads/feature", &feature);
    let strangers = upstream.commit_unreferenced("stranger");
    // The contributor's fork, on another host: its commit is nowhere else.
    let fork = SourceRepo::create(dir.join("forks/r.git"));
    git(
        fork.path(),
        &[
            "fetch",
            upstream.path().to_str().unwrap(),
            "refs/heads/main:refs/heads/main",
        ],
    );
    let pr_tip = fork.commit("pull request");
    let fork_server = GitHttpServer::start(dir.join("forks"), OTHER_HOST).await;

    let (owner, co, stranger, contributor) = (
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
    );
    let relay = Arc::new(MemoryAnnouncements::new());
    relay
        .add(
            Announcement::new("r")
                .clone_urls([server.url("r.git")])
                .maintainers([co.public_key()])
                .sign(&owner),
        )
        .unwrap();
    let root = dir.join("root");
    let purgatory = purgatory(&relay, &root, 3600);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    let owners = state(
        &owner,
        "r",
        &[("refs/heads/main", &first), ("refs/tags/v1", &first)],
        1,
    );
    let cos = state(
        &co,
        "r",
        &[
            ("refs/heads/main", &first),
            ("refs/heads/feature", &feature),
        ],
        2,
    );
    let strangers_state = state(&stranger, "r", &[("refs/heads/main", &strangers)], 3);
    let repo = format!("30617:{}:r", owner.public_key().to_hex());
    let pr = sign(
        &contributor,
        1618,
        "",
        vec![
            tag(&["a", &repo]),
            tag(&["c", &pr_tip]),
            tag(&["clone", &fork_server.url("r.git")]),
        ],
        T0 + 4,
    );
    for event in [&owners, &cos, &pr] {
        purgatory.add(event.clone(), Origin::Synced).unwrap();
    }
    // Not ours to hold for this repository: its author announced nothing and no one
    // lists them. A plain relay stores it all the same.
    purgatory
        .add(strangers_state.clone(), Origin::Synced)
        .unwrap();
    relay.add_event(strangers_state.clone());

    let done = until(&mut status, SETTLE, |s| {
        s.events_released == 3 && s.all_accounted && s.repositories_serving_newest == 1
    })
    .await;
    let path = local(&root, &owner, "r");
    let (refs, head) = served(&path);
    assert_eq!(
        refs,
        pairs(&[
            ("refs/heads/feature", &feature),
            ("refs/heads/main", &first),
            (&format!("refs/nostr/{}", pr.id), &pr_tip),
        ]),
        "the co-maintainer's newer state, not the owner's tag nor the stranger's commit"
    );
    assert_eq!(head, "refs/heads/main");
    assert!(
        matches!(&done.served[0].serving, Serving::Newest { state } if *state == cos.id),
        "{:?}",
        done.served
    );
    assert_eq!(
        done.events_held, 1,
        "the stranger's state waits as not fetchable"
    );
    assert_eq!(done.events_not_fetchable, 1);
    assert!(
        fork_server.stats().fetches() >= 1,
        "the tip came from the fork"
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_after_its_objects_is_applied_without_a_fetch_and_an_older_one_changes_nothing() {
    let OneRepository {
        dir,
        upstream,
        one,
        two,
        server,
        owner,
        relay,
    } = one_repository("serving-pushed").await;
    let root = dir.join("root");
    let purgatory = purgatory(&relay, &root, 3600);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    until(&mut status, SETTLE, |s| {
        s.all_accounted && s.repositories_served == 1
    })
    .await;
    // The objects arrive by another path (a push to our git server).
    let path = local(&root, &owner, "r");
    git(
        &path,
        &[
            "fetch",
            upstream.path().to_str().unwrap(),
            "refs/heads/main:refs/heads/pushed",
        ],
    );

    let newer = state(&owner, "r", &[("refs/heads/main", &two)], 2);
    purgatory.add(newer.clone(), Origin::Synced).unwrap();
    until(&mut status, SETTLE, |s| {
        s.events_released == 1 && s.all_accounted
    })
    .await;
    assert_eq!(
        served(&path).0,
        pairs(&[("refs/heads/main", &two)]),
        "the pushed branch is not the state's"
    );
    assert_eq!(server.stats().fetches(), 0, "nothing was fetched");

    let older = state(
        &owner,
        "r",
        &[("refs/heads/main", &one), ("refs/heads/old", &one)],
        1,
    );
    relay.add_event(older.clone());
    purgatory.add(older, Origin::Synced).unwrap();
    purgatory.reconcile_now(&grasp_sync_core::RepoRef::new(owner.public_key(), "r").unwrap());
    let settled = until(&mut status, SETTLE, |s| {
        s.all_accounted && s.reconciliations >= 3
    })
    .await;
    assert_eq!(
        served(&path).0,
        pairs(&[("refs/heads/main", &two)]),
        "an older state changes no ref"
    );
    assert!(matches!(&settled.served[0].serving, Serving::Newest { state } if *state == newer.id));
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_moved_by_hand_is_put_back_within_one_interval_with_no_new_event() {
    let OneRepository {
        dir,
        one,
        two,
        owner,
        relay,
        // Kept: the upstream server runs until the test ends.
        server: _server,
        upstream: _upstream,
    } = one_repository("serving-interval").await;
    relay.add_event(state(&owner, "r", &[("refs/heads/main", &two)], 1));
    let root = dir.join("root");
    let purgatory = purgatory(&relay, &root, 2);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    // A state already on the relay, objects never fetched: the first reconciliation
    // (at start) fetches them and serves it.
    until(&mut status, SETTLE, |s| {
        s.repositories_serving_newest == 1 && s.all_accounted
    })
    .await;
    let path = local(&root, &owner, "r");
    assert_eq!(served(&path).0, pairs(&[("refs/heads/main", &two)]));
    let before = purgatory.status_now();

    git(&path, &["update-ref", "refs/heads/main", &one]);
    git(&path, &["update-ref", "refs/heads/stray", &one]);
    let fixed = until(&mut status, SETTLE, |s| {
        s.refs_updated >= before.refs_updated + 2
    })
    .await;
    assert_eq!(served(&path).0, pairs(&[("refs/heads/main", &two)]));
    assert!(fixed.reconciliations > before.reconciliations);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

/// A repository serves at most `max_pull_request_tips` pull request tips, the newest:
/// five pull requests (created at 1 to 5) whose commits are all in the local repository,
/// a cap of 3, and only the three newest get a `refs/nostr/<id>`, however many a
/// stranger publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_newest_pull_request_tips_up_to_the_cap_are_served() {
    let dir = TempDir::new("serving-pr-cap");
    let root = dir.join("root");
    let owner = Keys::generate();
    let relay = Arc::new(MemoryAnnouncements::new());
    relay
        .add(
            Announcement::new("r")
                .clone_urls(["https://git.example.com/r.git"])
                .sign(&owner),
        )
        .unwrap();
    // The commits arrived by a push: nothing needs fetching.
    let path = local(&root, &owner, "r");
    let local_repo = SourceRepo::create(&path);
    let stranger = Keys::generate();
    let coordinate = format!("30617:{}:r", owner.public_key().to_hex());
    let mut pull_requests = Vec::new();
    for at in 1..=5u64 {
        let tip = local_repo.commit_unreferenced(&format!("pull request {at}"));
        let tags = vec![tag(&["a", &coordinate]), tag(&["c", &tip])];
        let pr = sign(&stranger, 1618, "", tags, T0 + at);
        relay.add_event(pr.clone());
        pull_requests.push((pr.id, tip));
    }
    let purgatory = serving_builder(&relay, &root, 3600)
        .max_pull_request_tips(3)
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    until(&mut status, SETTLE, |s| {
        s.all_accounted && s.reconciliations >= 1
    })
    .await;
    let newest: Vec<(String, String)> = pull_requests[2..]
        .iter()
        .map(|(id, tip)| (format!("refs/nostr/{id}"), tip.clone()))
        .collect();
    let mut served_tips: Vec<(String, String)> = served(&path)
        .0
        .into_iter()
        .filter(|(name, _)| name.starts_with("refs/nostr/"))
        .collect();
    served_tips.sort();
    let mut expected = newest;
    expected.sort();
    assert_eq!(served_tips, expected, "the three newest tips, nothing else");
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
