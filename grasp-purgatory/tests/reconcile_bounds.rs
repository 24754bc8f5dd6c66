//! Reconciliation is bounded whatever strangers announce (issue 45, item 1): thousands
//! of free keys announcing one identifier (each its own repository, each created and
//! reconciled under the git root) never run more than the pool's reconciliations at
//! once — at start, after a release of that identifier, and again after a restart — and
//! a release makes only the repositories it concerns due.
//!
//! Measured for real: the purgatory runs git through [`CountingGit`], a wrapper that
//! logs when each invocation starts and ends; the peak is the most invocations alive at
//! one moment. Before the pool, every due repository was its own task: the same run
//! peaked at hundreds of git processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{MemoryAnnouncements, NpubLayout, Origin, Purgatory};
use grasp_sync_test_support::nip34::Announcement;
use nostr::prelude::*;
use support::{
    closed_port_url, pairs, peak_rss_bytes, served, serving_builder_with_git, state, until,
    CountingGit, GitHttpServer, SourceRepo, TempDir,
};

/// The most git processes alive at once: the pool's 4 reconciliations (each runs its
/// git processes one after another), plus the purgatory sync of the one held state and
/// a sweep of its `refs/purgatory/*` (one process each at a time), with room for one
/// more.
const MAX_CONCURRENT_GIT: usize = 8;
/// The most memory the test process (the whole purgatory) may use.
const MAX_RSS_BYTES: u64 = 512 * 1024 * 1024;

/// What one run measured.
#[derive(Debug)]
struct Figures {
    /// Peak git processes alive at once: first start, release included.
    peak_first: usize,
    /// The same after a restart over the same git root.
    peak_restart: usize,
    /// Git invocations in the first run and after the restart.
    invocations: (usize, usize),
    /// Reconciliations the release started.
    after_release: u64,
    /// Peak memory of the process.
    rss: u64,
}

/// `strangers` keys each announce identifier `x` (their clone URL refuses
/// connections); an honest owner announces `x` too, with a git server that has its
/// commits. The purgatory serves them all, then the honest owner's state arrives and is
/// released; then the purgatory is restarted over the same git root.
async fn strangers_announce_one_identifier(strangers: usize) -> Figures {
    let dir = TempDir::new("reconcile-bounds");
    let counting = CountingGit::install(&dir.join("bin"));
    let upstream = SourceRepo::create(dir.join("upstream/x.git"));
    let commit = upstream.commit("honest");
    let server = GitHttpServer::start(dir.join("upstream"), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let relay = Arc::new(MemoryAnnouncements::new());
    let honest = Keys::generate();
    relay
        .add(
            Announcement::new("x")
                .clone_urls([server.url("x.git")])
                .sign(&honest),
        )
        .unwrap();
    let refused = closed_port_url("http", "x.git");
    for _ in 0..strangers {
        relay
            .add(
                Announcement::new("x")
                    .clone_urls([refused.clone()])
                    .sign(&Keys::generate()),
            )
            .unwrap();
    }
    let repositories = strangers + 1;
    let root = dir.join("root");
    let settle = Duration::from_secs(30 + (repositories as u64) / 10);
    let build = || -> Purgatory {
        serving_builder_with_git(&relay, &root, 3600, counting.program())
            .build()
            .unwrap()
    };

    let purgatory = build();
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    let reconciled = until(&mut status, settle, |s| {
        s.repositories_served == repositories && s.reconciliations >= repositories as u64
    })
    .await;
    let before = reconciled.reconciliations;
    let honest_state = state(&honest, "x", &[("refs/heads/main", &commit)], 1);
    purgatory.add(honest_state.clone(), Origin::Synced).unwrap();
    let local = NpubLayout::new(&root)
        .path_of(&honest.public_key(), "x")
        .unwrap();
    let expected = pairs(&[("refs/heads/main", &commit)]);
    let released = until(&mut status, settle, |s| {
        s.events_released == 1 && s.all_accounted && s.reconciliations > before
    })
    .await;
    events::eventually("the honest state served", settle, || {
        served(&local).0 == expected
    })
    .await;
    // Whatever else the release started has ended by now or soon; let it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_release = purgatory.status().borrow().reconciliations - before;
    assert_eq!(released.repositories_served, repositories);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
    let peak_first = counting.peak();
    let first_invocations = counting.invocations();

    counting.reset();
    let restarted = build();
    let run = events::spawn_run(&restarted);
    let mut status = restarted.status();
    until(&mut status, settle, |s| {
        s.repositories_served == repositories && s.reconciliations >= repositories as u64
    })
    .await;
    restarted.shutdown();
    run.await.unwrap().unwrap();
    assert_eq!(served(&local).0, expected, "still served after the restart");
    Figures {
        peak_first,
        peak_restart: counting.peak(),
        invocations: (first_invocations, counting.invocations()),
        after_release,
        rss: peak_rss_bytes(),
    }
}

fn assert_bounded(figures: &Figures) {
    eprintln!("{figures:?}");
    assert!(
        figures.invocations.0 > 0 && figures.invocations.1 > 0,
        "git ran through the counting wrapper: {figures:?}"
    );
    assert!(
        figures.peak_first <= MAX_CONCURRENT_GIT,
        "git processes at once, first run: {figures:?}"
    );
    assert!(
        figures.peak_restart <= MAX_CONCURRENT_GIT,
        "git processes at once after the restart: {figures:?}"
    );
    assert!(
        figures.after_release <= 3,
        "the release concerns the honest repository only, not every repository of its identifier: {figures:?}"
    );
    assert!(figures.rss <= MAX_RSS_BYTES, "{figures:?}");
}

/// 200 strangers: quick enough for every run of the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_announcing_one_identifier_never_run_more_than_the_pool() {
    let figures = strangers_announce_one_identifier(200).await;
    assert_bounded(&figures);
}

/// The 2 000 strangers (a minute or two on two loaded cores):
/// `cargo nextest run -p grasp-purgatory --test reconcile_bounds --run-ignored only`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "2 000 repositories: slow; run by hand"]
async fn two_thousand_strangers_announcing_one_identifier_never_run_more_than_the_pool() {
    let figures = strangers_announce_one_identifier(2000).await;
    assert_bounded(&figures);
}
