//! A purgatory process killed with SIGKILL loses none of the events it held: they are
//! in its journal, replayed by the next purgatory, which also deletes the stale
//! `refs/purgatory/*` a crash left, and releases the events from a real `git daemon`
//! on 127.0.0.1.
//!
//! The killed process is this test binary run again (`current_exe`), with only the
//! `child_process_holding_events_until_killed` test selected and its settings in the
//! environment; run normally, that test does nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{
    ChannelSink, GitFetcher, GitFetcherConfig, MemoryAnnouncements, NpubLayout, Origin, Purgatory,
    PurgatoryOutput,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{pull_request, state, Announcement};
use nostr::prelude::*;
use support::{git, GitDaemon, SourceRepo, TempDir};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Set in the child: the journal path; the owner's secret key and the tips come next.
const CHILD_JOURNAL: &str = "GRASP_PURGATORY_CRASH_JOURNAL";
const CHILD_OWNER: &str = "GRASP_PURGATORY_CRASH_OWNER";
const CHILD_TIPS: &str = "GRASP_PURGATORY_CRASH_TIPS";

/// The child: holds a replaced and a newer state and a pull request per further tip,
/// prints `HELD <id>` once each add returned, then `READY`, and waits to be killed.
#[test]
fn child_process_holding_events_until_killed() {
    let Ok(journal) = std::env::var(CHILD_JOURNAL) else {
        return;
    };
    let owner = Keys::parse(&std::env::var(CHILD_OWNER).unwrap()).unwrap();
    let tips: Vec<String> = std::env::var(CHILD_TIPS)
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let (sink, _output) = ChannelSink::new();
        let purgatory = Purgatory::builder()
            .announcements(Arc::new(MemoryAnnouncements::new()))
            .repos_root(PathBuf::from(&journal).with_file_name("child-repos"))
            .sink(Arc::new(sink))
            .persist_to(&journal)
            .build()
            .unwrap();
        let _run = events::spawn_run(&purgatory);
        let older = state(&owner, "r", &[&tips[1]], 1_700_000_000);
        purgatory.add_state(older, Origin::Submitted).unwrap();
        let newer = state(&owner, "r", &[&tips[0], &tips[1]], 1_700_000_001);
        purgatory
            .add_state(newer.clone(), Origin::Submitted)
            .unwrap();
        println!("HELD {}", newer.id);
        for tip in &tips[2..] {
            let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", tip);
            purgatory.add_pr(pr.clone(), Origin::Submitted).unwrap();
            println!("HELD {}", pr.id);
        }
        println!("READY");
        std::future::pending::<()>().await;
    });
}

/// Whether `output` has something waiting (without waiting for it).
fn released_any(output: &mut tokio::sync::mpsc::UnboundedReceiver<PurgatoryOutput>) -> bool {
    output.try_recv().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purgatory_killed_with_sigkill_loses_no_event_it_held() {
    let dir = TempDir::new("purgatory-crash");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let tips: Vec<String> = (0..5)
        .map(|n| source.commit(&format!("commit {n}")))
        .collect();
    let daemon = GitDaemon::start(&dir.join("served"));
    let owner = Keys::generate();
    let journal = dir.join("purgatory.journal");

    // The child holds four events (a newer state replaced an older one), then is killed.
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process_holding_events_until_killed",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_JOURNAL, &journal)
        .env(CHILD_OWNER, owner.secret_key().to_secret_hex())
        .env(CHILD_TIPS, tips.join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut held = BTreeSet::new();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // libtest may print "test <name> ... " on the same line first.
            if let Some((_, id)) = line.split_once("HELD ") {
                held.insert(EventId::from_hex(id.trim()).unwrap());
            }
            if line.trim_end().ends_with("READY") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "the child held its events");
    assert_eq!(held.len(), 4);
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status:?}");

    // A crash also left a temporary ref behind, of an object no event needs.
    let layout = NpubLayout::new(dir.join("repos"));
    let local = layout.path_of(&owner.public_key(), "r").unwrap();
    let leftover = SourceRepo::create(local.clone()).commit_unreferenced("left by a crash");
    git(
        &local,
        &[
            "update-ref",
            &format!("refs/purgatory/{leftover}"),
            &leftover,
        ],
    );
    let purgatory_refs = || {
        git(
            &local,
            &["for-each-ref", "--format=%(refname)", "refs/purgatory/"],
        )
    };
    assert!(!purgatory_refs().is_empty());

    // The next purgatory replays the journal: every event is held again.
    let policy = CloneUrlPolicy::new()
        .allow_git_protocol(true)
        .allow_local_addresses(true);
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy.clone(),
        fetch_timeout: Duration::from_secs(20),
        ..GitFetcherConfig::default()
    });
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements.clone())
        .repos_root(dir.join("repos"))
        .git_backend(Arc::new(fetcher))
        .clone_policy(policy)
        .sink(Arc::new(sink))
        .persist_to(&journal)
        .build()
        .unwrap();
    assert!(
        purgatory.restore_rejected().is_empty(),
        "{:?}",
        purgatory.restore_rejected()
    );
    assert_eq!(purgatory.held(), 4);
    for id in &held {
        assert!(purgatory.contains(id), "{id} survived the kill");
    }
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(
        text.lines().filter(|line| line.starts_with("+ ")).count(),
        4,
        "compacted on start: the live events only\n{text}"
    );

    // Its loop deletes the ref the crash left (no held event needs that object)...
    let run = events::spawn_run(&purgatory);
    events::eventually("the stale ref is deleted", Duration::from_secs(10), || {
        purgatory_refs().is_empty()
    })
    .await;
    assert!(!released_any(&mut output), "before any event was released");

    // ...and releases the events once the repository is announced with a server that
    // has their commits.
    announcements
        .add(
            Announcement::new("r")
                .clone_urls(&[&daemon.url("r.git")])
                .sign(&owner),
        )
        .unwrap();
    purgatory.trigger_immediate_sync("r");
    let mut released = BTreeSet::new();
    while released.len() < 4 {
        match tokio::time::timeout(Duration::from_secs(30), output.recv()).await {
            Ok(Some(PurgatoryOutput::Released(event))) => {
                released.insert(event.event.id);
            }
            other => panic!("{} of 4 released, then {other:?}", released.len()),
        }
    }
    assert_eq!(released, held);
    // After the release, the fetched objects' refs are deleted too.
    events::eventually(
        "the fetched refs are deleted",
        Duration::from_secs(10),
        || purgatory_refs().is_empty(),
    )
    .await;
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
