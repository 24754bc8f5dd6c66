//! Unit tests of the pure parts of running git, and of the policy check before any
//! process.

use std::collections::BTreeSet;
use std::path::Path;

use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::url_policy::CloneUrlPolicy;

use super::connectivity::present_in_batch_check;
use super::error::GitError;
use super::fetch::{GitFetcher, GitFetcherConfig};
use super::process::last_lines;
use super::refs::purgatory_refspec;

fn oid(byte: char) -> GitOid {
    GitOid::parse(&byte.to_string().repeat(40)).unwrap()
}

#[test]
fn batch_check_output_gives_the_existing_ids_only() {
    let asked = [oid('a'), oid('b'), oid('c')];
    let stdout = format!(
        "{} commit 210\n{} missing\n{} tag 150\n{} commit 1\n",
        oid('a'),
        oid('b'),
        oid('c'),
        oid('d')
    );
    let present = present_in_batch_check(stdout.as_bytes(), &asked);
    assert_eq!(present, BTreeSet::from([oid('a'), oid('c')]));
}

#[test]
fn refspecs_keep_objects_under_the_purgatory_namespace() {
    assert_eq!(
        purgatory_refspec(&oid('e')),
        format!("{0}:refs/purgatory/{0}", oid('e'))
    );
}

#[test]
fn error_text_keeps_the_last_lines() {
    let stderr = b"one\ntwo\n\nthree\nfour\nfive\n";
    assert_eq!(last_lines(stderr), "two | three | four | five");
}

#[test]
fn fetch_settings_allow_only_the_protocols_the_policy_allows() {
    let strict = GitFetcher::new(GitFetcherConfig::default());
    let keys: Vec<&str> = strict.protocol_settings().iter().map(|(k, _)| *k).collect();
    assert!(keys.contains(&"protocol.https.allow"));
    assert!(!keys.contains(&"protocol.http.allow"));
    assert!(!keys.contains(&"protocol.git.allow"));
    let loose = GitFetcher::new(GitFetcherConfig {
        policy: CloneUrlPolicy::new()
            .allow_http(true)
            .allow_git_protocol(true),
        ..GitFetcherConfig::default()
    });
    let keys: Vec<&str> = loose.protocol_settings().iter().map(|(k, _)| *k).collect();
    assert!(keys.contains(&"protocol.http.allow"));
    assert!(keys.contains(&"protocol.git.allow"));
}

#[test]
fn every_fetch_checks_its_objects_and_keeps_them_in_one_pack() {
    let settings = GitFetcher::new(GitFetcherConfig::default()).protocol_settings();
    for (key, value) in [
        ("fetch.fsckObjects", "true"),
        ("transfer.fsckObjects", "true"),
        ("fetch.unpackLimit", "1"),
        ("transfer.unpackLimit", "1"),
    ] {
        assert!(
            settings.iter().any(|(k, v)| *k == key && v == value),
            "{key}={value} in {settings:?}"
        );
    }
}

#[tokio::test]
async fn refused_urls_spawn_nothing() {
    let fetcher = GitFetcher::new(GitFetcherConfig::default());
    let hostile = [
        "file:///etc",
        "ext::sh -c touch% /tmp/pwned",
        "-u/bin/sh",
        "--upload-pack=touch /tmp/pwned",
        "https://user:pass@example.com/r.git",
        "https://127.0.0.1/r.git",
        "https://10.0.0.1/r.git",
        "git://example.com/r.git",
        "http://example.com/r.git",
        "ssh://example.com/r.git",
        "git@example.com:r.git",
    ];
    for url in hostile {
        let result = fetcher
            .fetch(Path::new("/nonexistent"), url, &[oid('a')])
            .await;
        assert!(
            matches!(result, Err(GitError::Policy { .. })),
            "{url}: {result:?}"
        );
    }
    assert_eq!(fetcher.processes_spawned(), 0);
}

#[test]
fn proxy_variables_reach_git_only_when_kept() {
    use std::ffi::OsString;

    use super::process::{passed_environment, PROXY_ENV};

    let lookup = |name: &str| Some(OsString::from(format!("value of {name}")));
    let cleared = passed_environment(lookup, false);
    let names: Vec<&str> = cleared.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, vec!["PATH"]);
    let kept = passed_environment(lookup, true);
    let names: BTreeSet<&str> = kept.iter().map(|(name, _)| *name).collect();
    for proxy in [
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
    ] {
        assert!(names.contains(proxy), "{proxy} kept when asked");
    }
    assert_eq!(names.len(), PROXY_ENV.len() + 1);
    // Unset variables are not invented.
    assert!(passed_environment(|_| None, true).is_empty());
}

#[tokio::test]
async fn fetches_into_one_repository_wait_for_each_other_and_others_do_not() {
    use std::time::Duration;

    use super::fetch::RepoLocks;

    let locks = RepoLocks::default();
    let first = locks.lock(Path::new("/repos/a.git")).await;
    // Another repository is not held up.
    let other = tokio::time::timeout(
        Duration::from_secs(5),
        locks.lock(Path::new("/repos/b.git")),
    )
    .await
    .expect("another repository's lock is free");
    // The same repository waits until the first fetch is done.
    let same = tokio::time::timeout(
        Duration::from_millis(100),
        locks.lock(Path::new("/repos/a.git")),
    )
    .await;
    assert!(same.is_err(), "a second fetch into a.git must wait");
    drop(first);
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        locks.lock(Path::new("/repos/a.git")),
    )
    .await
    .expect("free once the first is done");
    drop((second, other));
    // Entries nobody holds are pruned when the next lock is taken.
    let _third = locks.lock(Path::new("/repos/c.git")).await;
    assert_eq!(locks.entries(), 1);
}
