//! The sidecar with `--git-root`: a state and a pull request synced from a
//! remote relay wait in purgatory until their commits are fetched from the
//! repository's clone URL (a real `git daemon` on 127.0.0.1), then reach the
//! own relay; `--once` waits for that.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as support;

use std::process::Stdio;
use std::time::Duration;

use git_support::{git, has_object, init_bare_repo, GitDaemon, SourceRepo, TempDir};
use grasp_purgatory::NpubLayout;
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use nostr::prelude::*;
use support::{TestRelay, TestRelayConfig};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_with_a_git_root_waits_for_purgatory_to_release_the_state_and_the_pr() {
    let dir = TempDir::new("sidecar-purgatory");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let main = source.commit("main");
    let pr_tip = source.commit_unreferenced("proposal");
    let daemon = GitDaemon::start(&dir.join("served"));

    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let at = Timestamp::now().as_secs() - 60;
    let (own_url, remote_url) = (own.url().to_string(), remote.url().to_string());
    let clone_url = daemon.url("r.git");
    let announcement = Announcement::new("r")
        .relays([&own_url, &remote_url])
        .clone_urls([&clone_url])
        .at(at)
        .sign(&maintainer);
    let coordinate = ids::coordinate(&maintainer.public_key(), "r");
    let state = sign(
        &maintainer,
        30618,
        "",
        vec![tag(&["d", "r"]), tag(&["refs/heads/main", &main])],
        at,
    );
    let contributor = Keys::generate();
    let pr = sign(
        &contributor,
        1618,
        "",
        vec![tag(&["a", &coordinate]), tag(&["c", &pr_tip])],
        at,
    );
    let issue = sign(&contributor, 1621, "", vec![tag(&["a", &coordinate])], at);
    own.add_event(&announcement).await;
    remote
        .add_events(&[
            announcement.clone(),
            state.clone(),
            pr.clone(),
            issue.clone(),
        ])
        .await;

    let repos = dir.join("repos");
    let local = NpubLayout::new(&repos)
        .path_of(&maintainer.public_key(), "r")
        .unwrap();
    std::fs::create_dir_all(&local).unwrap();
    init_bare_repo(&local);

    let child = Command::new(env!("CARGO_BIN_EXE_grasp-sync"))
        .args([
            "--own-relay",
            &own_url,
            "--git-root",
            repos.to_str().unwrap(),
            "--allow-local-addresses",
            "--allow-insecure-clone-urls",
            "--once",
        ])
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("exits in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    let held = own.event_ids().await;
    for (name, id) in [("state", state.id), ("pr", pr.id), ("issue", issue.id)] {
        assert!(held.contains(&id), "{name} on the own relay: {stderr}");
    }
    assert!(has_object(&local, &main));
    assert!(has_object(&local, &pr_tip));
    let nostr_ref = git(&local, &["rev-parse", &format!("refs/nostr/{}", pr.id)]);
    assert_eq!(nostr_ref.trim(), pr_tip);
}
