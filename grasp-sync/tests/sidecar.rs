//! The `grasp-sync` sidecar as a process against relays on 127.0.0.1:
//! `--once` ends with the own relay holding exactly the expected set, an
//! unreachable bootstrap relay is reported and not waited for (exit 5), an
//! unreachable own relay is one line and a non-zero exit; `/metrics` and
//! `/status` are served over HTTP; SIGTERM stops it gracefully; a relay's error text
//! reaches `/status` and the page clipped and without control characters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/http.rs"]
mod http;
use grasp_sync_test_harness::relays as support;
#[path = "common/threads.rs"]
mod threads;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use http::{free_port, get};
use nostr::prelude::*;
use support::{announcement, sign, Nip77Refusal, TestRelay, TestRelayConfig};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync");
const WAIT: Duration = Duration::from_secs(120);

/// Own relay with an announcement; relay a with its issues and replies.
async fn world() -> (TestRelay, TestRelay, BTreeSet<EventId>) {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let a = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 5_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &a.url()], base);
    let repo = RepoRef::new(maintainer.public_key(), "alpha")
        .unwrap()
        .to_string();
    let mut remote = vec![alpha.clone()];
    remote.extend(threads::issues_with_replies(&user, &repo, 30, base));
    let noise = sign(&user, 1, "noise", Vec::new(), base + 3);
    remote.push(noise);
    own.add_event(&alpha).await;
    a.add_events(&remote).await;
    let expected = remote
        .iter()
        .filter(|event| event.kind != Kind::TextNote)
        .map(|event| event.id)
        .collect();
    (own, a, expected)
}

fn sidecar(args: &[String]) -> Child {
    Command::new(BIN)
        .args(args)
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .env("NGIT_SYNC_BASE_BACKOFF_SECS", "1")
        .env("NGIT_SYNC_MAX_BACKOFF_SECS", "2")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync")
}

async fn finish(child: Child) -> (std::process::ExitStatus, String, String) {
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("grasp-sync exits in time")
        .expect("wait for grasp-sync");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_syncs_exactly_and_reports_an_unreachable_bootstrap_relay() {
    let (own, _a, expected) = world().await;
    let dead = format!("ws://127.0.0.1:{}", free_port());
    let child = sidecar(&[
        "--own-relay".into(),
        own.url().to_string(),
        "--bootstrap-relay".into(),
        dead.clone(),
        "--allow-local-addresses".into(),
        "--once".into(),
    ]);
    let (status, stdout, stderr) = finish(child).await;
    // 5: done on the reachable relays, one relay unreachable.
    assert_eq!(status.code(), Some(5), "exit {status}: {stdout}\n{stderr}");
    assert_eq!(own.event_ids().await, expected, "exactly the expected set");
    let dead_line = stdout
        .lines()
        .find(|line| line.contains(dead.as_str()))
        .unwrap_or_default();
    assert!(dead_line.contains("unreachable"), "{stdout}");
    assert!(stdout.contains("historic sync complete"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_own_relay_is_one_line_and_a_failure() {
    let own = format!("ws://127.0.0.1:{}", free_port());
    let child = sidecar(&["--own-relay".into(), own.clone(), "--once".into()]);
    let (status, stdout, stderr) = finish(child).await;
    assert!(!status.success());
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr:?} {stdout:?}");
    assert!(
        lines[0].contains("unreachable") && lines[0].contains(&own),
        "{stderr}"
    );
    let bad = sidecar(&["--own-relay".into(), "not a url".into()]);
    let (status, _, stderr) = finish(bad).await;
    assert_eq!(status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_are_served_and_sigterm_stops_it() {
    let (own, _a, expected) = world().await;
    let port = free_port();
    let child = sidecar(&[
        "--own-relay".into(),
        own.url().to_string(),
        "--allow-local-addresses".into(),
        "--metrics-addr".into(),
        format!("127.0.0.1:{port}"),
    ]);
    let deadline = tokio::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(body) = get(port, "/status").await {
            let status: serde_json::Value = serde_json::from_str(&body).unwrap();
            if status["historic_sync_complete"] == serde_json::Value::Bool(true) {
                break status;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never complete"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["repositories"], 1);
    assert!(status["relays"]
        .as_array()
        .is_some_and(|relays| !relays.is_empty()));
    assert_eq!(own.event_ids().await, expected);
    let metrics = get(port, "/metrics").await.expect("/metrics");
    assert!(
        metrics.contains("grasp_sync_events_synced_total"),
        "{metrics}"
    );
    assert!(metrics.contains("grasp_sync_relays_connected_total"));
    let pid = child.id().expect("pid").to_string();
    let started = tokio::time::Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let (status, _, stderr) = finish(child).await;
    assert!(
        status.success(),
        "graceful exit on SIGTERM: {status} {stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_too_old_to_pin_clone_url_hosts_is_a_clear_error_at_start() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let dir = std::env::temp_dir().join(format!("sidecar-old-git-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.join("repos")).unwrap();
    // Ubuntu 22.04's git, first on PATH.
    let git = bin.join("git");
    std::fs::write(&git, "#!/bin/sh\necho 'git version 2.34.1'\n").unwrap();
    std::fs::set_permissions(
        &git,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new(BIN)
        .args([
            "--own-relay",
            own.url().as_str(),
            "--git-root",
            &dir.join("repos").display().to_string(),
            "--allow-local-addresses",
            "--once",
        ])
        .env("PATH", path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync");
    let (status, stdout, stderr) = finish(child).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("git version 2.34.1")
            && stderr.contains("2.37")
            && stderr.contains("NGIT_PURGATORY_ALLOW_OLD_GIT=1"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relays_long_error_text_with_control_characters_shows_clipped_in_status() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let hostile = TestRelay::start(TestRelayConfig {
        nip77: Nip77Refusal::Hostile,
        ..TestRelayConfig::default()
    })
    .await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 5_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &hostile.url()], base);
    own.add_event(&alpha).await;
    hostile.add_event(&alpha).await;
    let port = free_port();
    let _child = sidecar(&[
        "--own-relay".into(),
        own.url().to_string(),
        "--allow-local-addresses".into(),
        "--metrics-addr".into(),
        format!("127.0.0.1:{port}"),
    ]);
    let relay_url = hostile.url().to_string();
    let deadline = tokio::time::Instant::now() + WAIT;
    let last_error = loop {
        let error = get(port, "/status").await.and_then(|body| {
            let status: serde_json::Value = serde_json::from_str(&body).unwrap();
            status["relays"]
                .as_array()?
                .iter()
                .find(|relay| relay["relay"].as_str() == Some(relay_url.as_str()))?["last_error"]
                .as_str()
                .filter(|error| error.starts_with("NIP-77 refused"))
                .map(str::to_owned)
        });
        if let Some(error) = error {
            break error;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refusal never showed in /status"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let bound = grasp_sync_core::relay_text::MAX_RELAY_TEXT_LEN + '…'.len_utf8();
    assert!(last_error.len() <= bound, "{} bytes", last_error.len());
    assert!(last_error.ends_with('…'), "cut and marked: {last_error:?}");
    assert!(
        !last_error.chars().any(char::is_control) && !last_error.contains('\u{202e}'),
        "{last_error:?}"
    );
    assert!(last_error.contains("forged log line"), "{last_error:?}");
    let page = get(port, "/").await.expect("the status page");
    assert!(!page.contains('\u{1b}') && !page.contains('\u{7}'));
    assert!(page.contains("forged log line"));
}
