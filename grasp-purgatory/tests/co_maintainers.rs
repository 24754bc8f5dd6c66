//! A co-maintainer cannot be stolen (issue 45, item 2): a stranger whose key compares
//! lower than the victim's announces the same identifier, lists the victim's
//! co-maintainer `M` as their own maintainer, and withholds the objects. `M` announced
//! nothing of their own, so `M`'s state counts for every repository listing them, each
//! deciding for itself: the victim's repository fetches it from its own clone URL and
//! serves it; the stranger's stays without it.
//!
//! Before, `M`'s held state went to one "home", the listing repository with the lowest
//! key, and waited there for the stranger's objects until it expired: the victim never
//! served it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{MemoryAnnouncements, NpubLayout, Origin, Serving};
use grasp_sync_test_support::nip34::Announcement;
use nostr::prelude::*;
use support::{
    init_bare_repo, pairs, served, serving_builder, state, until, GitHttpServer, SourceRepo,
    TempDir, SETTLE,
};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The stranger's git server, on another loopback host.
const STRANGERS_HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A key that compares lower than `than`, as the stranger grinds one.
fn lower_key(than: &PublicKey) -> Keys {
    loop {
        let keys = Keys::generate();
        if keys.public_key() < *than {
            return keys;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_listing_a_co_maintainer_does_not_take_their_state_from_the_victim() {
    let dir = TempDir::new("co-maintainers");
    let upstream = SourceRepo::create(dir.join("upstream/r.git"));
    let first = upstream.commit("first");
    let maintainers_commit = upstream.commit("the co-maintainer's");
    let server = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    // The stranger's server has the repository, empty: it withholds every object.
    init_bare_repo(&dir.join("strangers/r.git"));
    let strangers_server = GitHttpServer::start(dir.join("strangers"), STRANGERS_HOST).await;

    let (victim, co) = (Keys::generate(), Keys::generate());
    let stranger = lower_key(&victim.public_key());
    let relay = Arc::new(MemoryAnnouncements::new());
    relay
        .add(
            Announcement::new("r")
                .clone_urls([server.url("r.git")])
                .maintainers([co.public_key()])
                .sign(&victim),
        )
        .unwrap();
    relay
        .add(
            Announcement::new("r")
                .clone_urls([strangers_server.url("r.git")])
                .maintainers([co.public_key()])
                .sign(&stranger),
        )
        .unwrap();
    let root = dir.join("root");
    let purgatory = serving_builder(&relay, &root, 3600).build().unwrap();
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    until(&mut status, SETTLE, |s| {
        s.repositories_served == 2 && s.reconciliations >= 2
    })
    .await;

    let cos = state(
        &co,
        "r",
        &[
            ("refs/heads/main", &maintainers_commit),
            ("refs/tags/v1", &first),
        ],
        1,
    );
    purgatory.add(cos.clone(), Origin::Synced).unwrap();
    let layout = NpubLayout::new(&root);
    let victims = layout.path_of(&victim.public_key(), "r").unwrap();
    let strangers = layout.path_of(&stranger.public_key(), "r").unwrap();
    let expected = pairs(&[
        ("refs/heads/main", &maintainers_commit),
        ("refs/tags/v1", &first),
    ]);
    events::eventually(
        "the victim's repository serves the co-maintainer's state",
        SETTLE,
        || strangers.is_dir() && victims.is_dir() && served(&victims).0 == expected,
    )
    .await;
    let settled = until(&mut status, SETTLE, |s| {
        s.events_released >= 1 && s.repositories_behind == 1
    })
    .await;
    let (victims_refs, head) = served(&victims);
    assert_eq!(victims_refs, expected);
    assert_eq!(head, "refs/heads/main");
    assert!(
        served(&strangers).0.is_empty(),
        "the stranger's repository serves nothing it lacks the objects of"
    );
    let stranger_repo = grasp_sync_core::RepoRef::new(stranger.public_key(), "r").unwrap();
    let strangers_serving = settled
        .served
        .iter()
        .find(|served| served.repo == stranger_repo)
        .map(|served| served.serving.clone());
    assert!(
        matches!(strangers_serving, Some(Serving::Behind { state: Some(state), .. }) if state == cos.id),
        "the stranger's repository is behind, waiting for objects it withholds: {strangers_serving:?}"
    );
    assert!(
        server.stats().fetches() >= 1,
        "the objects came from the victim's own clone URL"
    );
    // The stranger's repository keeps asking its own server, alone: the victim's
    // repository is not asked to wait for it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(served(&victims).0, expected);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
