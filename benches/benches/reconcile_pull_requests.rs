//! One reconciliation of one served repository with 100 000 pull request tips (issue
//! 45, item 7: work that grew with the square of what strangers publish).
//!
//! The repository is in its steady state: every pull request's tip is a commit of the
//! local bare repository and is already served at `refs/nostr/<event id>`, so a
//! reconciliation reads the 100 000 pull requests from the store, checks which tips are
//! present (real git: `cat-file`, `for-each-ref`, `rev-list`), compares them with the
//! refs and writes nothing. What is measured is the time from asking for a
//! reconciliation ([`Purgatory::reconcile_now`]) to its end (the status's count of
//! reconciliations), through the real purgatory loop.
//!
//! `cargo bench -p grasp-sync-benches --bench reconcile_pull_requests`.
//! `GRASP_BENCH_PR_TIPS=10000` measures another count (default 100 000). The purgatory
//! serves at most `NGIT_PURGATORY_MAX_PULL_REQUEST_TIPS` tips per repository (10 000
//! by default); the bench raises it to the count measured, so every tip is checked.
//! Under `cargo test` it runs once with 100 tips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use grasp_purgatory::{
    ChannelSink, GitFetcher, GitFetcherConfig, MemoryAnnouncements, Purgatory, PurgatoryConfig,
};
use grasp_sync_core::nip34::RepoRef;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use nostr::prelude::{Keys, ToBech32};

/// Pull request tips in the repository unless `GRASP_BENCH_PR_TIPS` says otherwise.
const DEFAULT_TIPS: usize = 100_000;

/// Pull request tips under `cargo test` (no `--bench` argument): the bench's code runs
/// once, quickly, on a debug build.
const TEST_MODE_TIPS: usize = 100;

/// The count of pull request tips to measure.
fn tips() -> usize {
    if !std::env::args().any(|arg| arg == "--bench") {
        return TEST_MODE_TIPS;
    }
    std::env::var("GRASP_BENCH_PR_TIPS")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(DEFAULT_TIPS)
}

/// Runs git in `dir` with `args`, feeding it `input`; its standard output.
fn git(dir: &Path, args: &[&str], input: Option<&str>) -> String {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running git");
    let mut stdin = child.stdin.take().expect("git's stdin");
    let input = input.unwrap_or("").to_owned();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(input.as_bytes()).expect("writing to git");
    });
    let output = child.wait_with_output().expect("git's output");
    writer.join().expect("the writer thread");
    assert!(output.status.success(), "git {args:?} failed");
    String::from_utf8(output.stdout).expect("git's output is text")
}

/// `count` distinct commits (one parentless commit each) written with `git
/// fast-import` into the bare repository at `repo`; their ids.
fn commits(repo: &Path, count: usize) -> Vec<String> {
    let mut stream = String::new();
    for n in 1..=count {
        let message = format!("pull request {n}\n");
        stream.push_str(&format!(
            "reset refs/heads/seed\ncommit refs/heads/seed\nmark :{n}\n\
             committer Bench <bench@example.com> 1700000000 +0000\n\
             data {}\n{message}\n",
            message.len()
        ));
    }
    let marks = repo.join("bench-marks");
    let marks_arg = format!("--export-marks={}", marks.display());
    git(repo, &["fast-import", "--quiet", &marks_arg], Some(&stream));
    git(repo, &["update-ref", "-d", "refs/heads/seed"], None);
    let marks = std::fs::read_to_string(&marks).expect("the marks file");
    let mut ids = vec![String::new(); count];
    for line in marks.lines() {
        let (mark, oid) = line.split_once(' ').expect("`:<mark> <oid>`");
        let mark: usize = mark.trim_start_matches(':').parse().expect("a mark");
        ids[mark - 1] = oid.to_owned();
    }
    ids
}

/// A purgatory serving one repository with `count` pull requests, each tip a commit of
/// the local repository already at its `refs/nostr/<event id>`; the repository.
fn repository_with_tips(root: &Path, count: usize) -> (Purgatory, RepoRef) {
    let owner = Keys::generate();
    let npub = owner.public_key().to_bech32().expect("an npub");
    let local = root.join(npub).join("r.git");
    std::fs::create_dir_all(&local).expect("the repository's directory");
    git(&local, &["init", "--quiet", "--bare"], None);
    let tips = commits(&local, count);
    let announcements = Arc::new(MemoryAnnouncements::new());
    announcements
        .add(
            Announcement::new("r")
                .clone_urls(&["https://git.example.com/r.git"])
                .sign(&owner),
        )
        .expect("the announcement");
    let contributor = Keys::generate();
    let mut refs = String::new();
    for tip in &tips {
        let pr = pull_request(&contributor, &owner.public_key(), "r", tip);
        refs.push_str(&format!("create refs/nostr/{} {tip}\n", pr.id));
        announcements.add_event(pr);
    }
    git(&local, &["update-ref", "--stdin"], Some(&refs));
    git(&local, &["pack-refs", "--all"], None);
    let tips_served = count.to_string();
    let config = PurgatoryConfig::default()
        .apply_env(|name| {
            (name == "NGIT_PURGATORY_MAX_PULL_REQUEST_TIPS").then(|| tips_served.clone())
        })
        .expect("a valid configuration");
    let purgatory = Purgatory::builder()
        .config(config)
        .announcements(announcements)
        .repos_root(root)
        .git_backend(Arc::new(GitFetcher::new(GitFetcherConfig::default())))
        // Nothing is held (every tip is present): no event is ever released.
        .sink(Arc::new(ChannelSink::new().0))
        .build()
        .expect("a purgatory");
    let repo = RepoRef::new(owner.public_key(), "r").expect("a repository");
    (purgatory, repo)
}

/// Asks for one reconciliation of `repo` and waits for it to end; how long it took.
async fn one_reconciliation(purgatory: &Purgatory, repo: &RepoRef) -> Duration {
    let before = purgatory.status_now().reconciliations;
    let started = Instant::now();
    purgatory.reconcile_now(repo);
    while purgatory.status_now().reconciliations <= before {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    started.elapsed()
}

/// A fresh directory under the system's temporary directory.
fn temporary_root() -> PathBuf {
    let unique = format!(
        "grasp-bench-reconcile-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let root = std::env::temp_dir().join(unique);
    std::fs::create_dir_all(&root).expect("a temporary directory");
    root
}

fn reconcile_pull_requests(c: &mut Criterion) {
    let count = tips();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let root = temporary_root();
    let (purgatory, repo) = repository_with_tips(&root, count);
    let run = {
        let purgatory = purgatory.clone();
        runtime.spawn(async move { purgatory.run().await })
    };
    // The first reconciliation (the repository is new to the schedule) is not measured.
    runtime.block_on(async {
        purgatory.track_repository(&repo);
        while purgatory.status_now().reconciliations == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut group = c.benchmark_group("reconcile_pull_requests");
    group.sample_size(10);
    group.bench_with_input(BenchmarkId::new("tips", count), &count, |b, _| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    total += one_reconciliation(&purgatory, &repo).await;
                }
                total
            })
        });
    });
    group.finish();
    purgatory.shutdown();
    let _ = runtime.block_on(run);
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(benches, reconcile_pull_requests);
criterion_main!(benches);
