//! A git older than 2.37 ignores `http.curloptResolve`, the pin of clone URL hosts to
//! their checked address: building a purgatory with one is refused unless the operator
//! allows it (then it starts, warning). The old git is a script that prints what
//! Ubuntu 22.04's git prints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use grasp_purgatory::{
    ChannelSink, GitVersionError, MemoryAnnouncements, Purgatory, PurgatoryBuildError,
    PurgatoryConfig,
};
use support::TempDir;

/// An executable `git` in `dir` that prints `git version <version>` (and nothing else
/// works).
fn fake_git(dir: &Path, version: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("git");
    std::fs::write(&path, format!("#!/bin/sh\necho 'git version {version}'\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn build(dir: &TempDir, config: PurgatoryConfig) -> Result<Purgatory, PurgatoryBuildError> {
    let (sink, _output) = ChannelSink::new();
    Purgatory::builder()
        .config(config)
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repos_root(dir.join("repos"))
        .sink(Arc::new(sink))
        .build()
}

#[test]
fn git_2_34_is_refused_at_start_unless_allowed() {
    let dir = TempDir::new("purgatory-git-version");
    let old = fake_git(&dir.join("old"), "2.34.1");
    let mut config = PurgatoryConfig::default();
    config.git.git_program = old.clone();

    let refused = build(&dir, config.clone());
    match refused {
        Err(PurgatoryBuildError::Git(GitVersionError::TooOld { found, .. })) => {
            assert_eq!(found, "git version 2.34.1");
        }
        other => panic!("expected the old git to be refused, got {other:?}"),
    }
    let message = build(&dir, config.clone()).err().unwrap().to_string();
    assert!(message.contains("2.37"), "{message}");
    assert!(
        message.contains("NGIT_PURGATORY_ALLOW_OLD_GIT=1"),
        "{message}"
    );

    // Allowed by the operator (the variable, or the builder): it starts, warning.
    let allowed = config
        .clone()
        .apply_env(|name| (name == "NGIT_PURGATORY_ALLOW_OLD_GIT").then(|| "1".to_owned()))
        .unwrap();
    assert!(build(&dir, allowed).is_ok());
    let (sink, _output) = ChannelSink::new();
    let built = Purgatory::builder()
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repos_root(dir.join("repos"))
        .sink(Arc::new(sink))
        .git_program(&old)
        .allow_old_git(true)
        .build();
    assert!(built.is_ok());

    // A git that pins hosts starts without being allowed anything.
    let mut current = PurgatoryConfig::default();
    current.git.git_program = fake_git(&dir.join("new"), "2.37.0");
    assert!(build(&dir, current).is_ok());
    // A git that cannot run is an error too.
    let mut missing = PurgatoryConfig::default();
    missing.git.git_program = dir.join("no-such-git");
    assert!(matches!(
        build(&dir, missing),
        Err(PurgatoryBuildError::Git(GitVersionError::Unrunnable { .. }))
    ));
}
