//! Fetched packs are checked and bounded, against a real `git daemon` on 127.0.0.1: a
//! pack over the size limit is cut off by the kernel and removed, a malformed object is
//! refused by `fsck`, a transfer that stalls is cut off by the timeout, git's memory is
//! limited; in every case nothing is kept (no temporary pack) and no ref is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as support;

use std::path::Path;
use std::time::Duration;

use grasp_purgatory::{GitError, GitFetcher, GitFetcherConfig};
use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use support::{
    fetch_by_sha, git, git_with_input, has_object, init_bare_repo, FetchOutcome, GitDaemon,
    StallingProxy, TempDir,
};

/// The size of the "large" fetch: 50 MB of noise.
const LARGE: usize = 50 * 1024 * 1024;

fn fetcher(max_pack_bytes: Option<u64>) -> GitFetcher {
    GitFetcher::new(GitFetcherConfig {
        policy: CloneUrlPolicy::new()
            .allow_git_protocol(true)
            .allow_local_addresses(true),
        fetch_timeout: Duration::from_secs(20),
        max_pack_bytes,
        ..GitFetcherConfig::default()
    })
}

/// Bytes no compression shrinks (xorshift), so the pack is as large as the blob.
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A commit in `repo` whose tree holds `content` as `file`, with `message`.
fn commit_with(repo: &Path, content: &[u8], message: &str) -> String {
    let blob = git_with_input(repo, &["hash-object", "-w", "--stdin"], content);
    let tree = git_with_input(
        repo,
        &["mktree"],
        format!("100644 blob {blob}\tfile\n").as_bytes(),
    );
    git(
        repo,
        &[
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.invalid",
            "commit-tree",
            &tree,
            "-m",
            message,
        ],
    )
}

/// The temporary files a fetch writes in `objects/pack/` (`tmp_pack_*`, `tmp_idx_*`…).
fn temporary_packs(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tmp_"))
        .collect()
}

/// A served repository `r.git` under `dir/served` with one commit of `LARGE` bytes of
/// noise, its daemon, and an empty local repository; returns the commit too.
fn large_repository(dir: &TempDir) -> (GitDaemon, std::path::PathBuf, GitOid) {
    let served = dir.join("served/r.git");
    init_bare_repo(&served);
    let big = commit_with(&served, &noise(LARGE), "fifty megabytes of noise");
    let daemon = GitDaemon::start(&dir.join("served"));
    let local = dir.join("local.git");
    init_bare_repo(&local);
    (daemon, local, GitOid::parse(&big).unwrap())
}

fn purgatory_refs(repo: &Path) -> String {
    git(
        repo,
        &["for-each-ref", "--format=%(refname)", "refs/purgatory/"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_over_the_size_limit_is_cut_off_and_removed() {
    let dir = TempDir::new("purgatory-pack-limit");
    let served = dir.join("served/r.git");
    init_bare_repo(&served);
    let big = commit_with(&served, &noise(2 * 1024 * 1024), "two megabytes of noise");
    let daemon = GitDaemon::start(&dir.join("served"));
    let local = dir.join("local.git");
    init_bare_repo(&local);
    let oid = GitOid::parse(&big).unwrap();

    let limited = fetcher(Some(256 * 1024));
    let result = limited
        .fetch(&local, &daemon.url("r.git"), std::slice::from_ref(&oid))
        .await;
    assert!(
        matches!(result, Err(GitError::PackTooLarge { limit: 262_144 })),
        "{result:?}"
    );
    assert!(!has_object(&local, &big));
    assert!(
        temporary_packs(&local).is_empty(),
        "the cut-off pack is removed"
    );
    assert_eq!(purgatory_refs(&local), "");

    // The same fetch under a limit the pack fits in succeeds.
    let roomy = fetcher(Some(64 * 1024 * 1024));
    let report = roomy
        .fetch(&local, &daemon.url("r.git"), std::slice::from_ref(&oid))
        .await
        .unwrap();
    assert!(report.present.contains(&oid));
    assert_eq!(purgatory_refs(&local), format!("refs/purgatory/{big}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_object_is_refused_by_fsck_and_nothing_is_kept() {
    let dir = TempDir::new("purgatory-fsck");
    let served = dir.join("served/r.git");
    init_bare_repo(&served);
    let tree = git_with_input(&served, &["mktree"], b"");
    let broken = format!(
        "tree {tree}\nauthor Bad <bad@example.invalid> not-a-date +0000\n\
         committer Bad <bad@example.invalid> 1 +0000\n\nbroken\n"
    );
    let bad = git_with_input(
        &served,
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            "--literally",
            "--stdin",
        ],
        broken.as_bytes(),
    );
    let daemon = GitDaemon::start(&dir.join("served"));
    let local = dir.join("local.git");
    init_bare_repo(&local);

    let result = fetcher(None)
        .fetch(
            &local,
            &daemon.url("r.git"),
            &[GitOid::parse(&bad).unwrap()],
        )
        .await;
    match result {
        Err(GitError::Failed { stderr, .. }) => assert!(stderr.contains("fsck"), "{stderr}"),
        other => panic!("expected fsck to refuse the pack, got {other:?}"),
    }
    assert!(!has_object(&local, &bad));
    assert!(
        temporary_packs(&local).is_empty(),
        "the refused pack is removed: {:?}",
        temporary_packs(&local)
    );
    assert_eq!(purgatory_refs(&local), "");

    // git without the check takes it: the check is what refused it.
    let unchecked = dir.join("unchecked.git");
    init_bare_repo(&unchecked);
    let outcome = fetch_by_sha(
        &unchecked,
        &daemon.url("r.git"),
        &bad,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(outcome, FetchOutcome::Fetched);
    assert!(has_object(&unchecked, &bad));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_fetch_cut_off_by_the_timeout_leaves_no_temporary_pack() {
    let dir = TempDir::new("purgatory-pack-timeout");
    let (daemon, local, oid) = large_repository(&dir);
    // The server's first 4 MiB reach git, then the transfer stalls.
    let passed = 4 * 1024 * 1024;
    let proxy = StallingProxy::start(daemon.addr(), passed).await;
    let url = format!("git://{}/r.git", proxy.addr());
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: CloneUrlPolicy::new()
            .allow_git_protocol(true)
            .allow_local_addresses(true),
        fetch_timeout: Duration::from_secs(15),
        ..GitFetcherConfig::default()
    });

    let fetch = tokio::spawn({
        let fetcher = fetcher.clone();
        let local = local.clone();
        let oid = oid.clone();
        async move { fetcher.fetch(&local, &url, &[oid]).await }
    });
    assert!(
        proxy
            .wait_for_forwarded(passed, Duration::from_secs(60))
            .await,
        "the pack started to arrive"
    );
    let result = fetch.await.unwrap();
    assert!(
        matches!(result, Err(GitError::Timeout { .. })),
        "{result:?}"
    );
    assert!(!has_object(&local, oid.as_str()));
    assert!(
        temporary_packs(&local).is_empty(),
        "the cut-off pack is removed: {:?}",
        temporary_packs(&local)
    );
    assert_eq!(purgatory_refs(&local), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_runs_under_a_memory_limit_that_real_fetches_pass() {
    let dir = TempDir::new("purgatory-git-memory");
    let (daemon, local, oid) = large_repository(&dir);
    let fetcher = |max_memory_bytes| {
        GitFetcher::new(GitFetcherConfig {
            policy: CloneUrlPolicy::new()
                .allow_git_protocol(true)
                .allow_local_addresses(true),
            fetch_timeout: Duration::from_secs(60),
            max_memory_bytes,
            ..GitFetcherConfig::default()
        })
    };

    // index-pack inflates a 50 MB blob in memory: under a 32 MiB limit it cannot.
    let starved = fetcher(Some(32 * 1024 * 1024))
        .fetch(&local, &daemon.url("r.git"), std::slice::from_ref(&oid))
        .await;
    match starved {
        Err(GitError::Failed { stderr, .. }) => {
            let stderr = stderr.to_ascii_lowercase();
            assert!(
                stderr.contains("memory") || stderr.contains("alloc"),
                "{stderr}"
            );
        }
        other => panic!("expected git to run out of memory, got {other:?}"),
    }
    assert!(!has_object(&local, oid.as_str()));
    assert!(
        temporary_packs(&local).is_empty(),
        "{:?}",
        temporary_packs(&local)
    );

    // The default limit lets the same real fetch through.
    let report = fetcher(GitFetcherConfig::default().max_memory_bytes)
        .fetch(&local, &daemon.url("r.git"), std::slice::from_ref(&oid))
        .await
        .unwrap();
    assert!(report.present.contains(&oid), "{report:?}");
}
