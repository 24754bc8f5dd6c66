//! Fetched packs are checked and bounded, against a real `git daemon` on 127.0.0.1: a
//! pack over the size limit is cut off by the kernel and removed, a malformed object is
//! refused by `fsck`; in both cases nothing is kept and no ref is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use grasp_purgatory::{GitError, GitFetcher, GitFetcherConfig};
use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use support::{
    fetch_by_sha, git, git_with_input, has_object, init_bare_repo, FetchOutcome, GitDaemon, TempDir,
};

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

fn temporary_packs(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tmp_pack_"))
        .collect()
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
