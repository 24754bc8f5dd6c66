//! The `grasp-sync` sidecar as a service, run as a process against relays on
//! 127.0.0.1: configured by environment variables (a flag wins over its variable),
//! `--summary-json` matching the status it summarises, exit code 5 when a relay an
//! announcement lists is unreachable, plain text (no ANSI escapes) in a log file, and
//! the status page on `/` naming every relay of the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/http.rs"]
mod http;
use grasp_sync_test_harness::relays as support;
#[path = "common/threads.rs"]
mod threads;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use grasp_sync_test_support::ids;
use http::{free_port, get, get_with_head};
use nostr::prelude::*;
use serde_json::Value;
use support::{announcement, TestRelay, TestRelayConfig};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync");
const WAIT: Duration = Duration::from_secs(120);

/// The own relay with an announcement listing `listed` besides the own relay and
/// relay a; relay a with the repository's issues and replies. Returns the relays and
/// the ids the own relay must end with.
async fn world(listed: &[&str]) -> (TestRelay, TestRelay, BTreeSet<EventId>) {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let a = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 5_000;
    let listed: Vec<RelayUrl> = listed
        .iter()
        .map(|url| RelayUrl::parse(url).unwrap())
        .collect();
    let (own_url, a_url) = (own.url(), a.url());
    let mut relays = vec![&own_url, &a_url];
    relays.extend(listed.iter());
    let alpha = announcement(&maintainer, "alpha", &relays, base);
    let repo = ids::coordinate(&maintainer.public_key(), "alpha");
    let mut remote = vec![alpha.clone()];
    remote.extend(threads::issues_with_replies(&user, &repo, 20, base));
    own.add_event(&alpha).await;
    a.add_events(&remote).await;
    let expected = remote.iter().map(|event| event.id).collect();
    (own, a, expected)
}

/// The sidecar with `args` and `env` (on top of the fast loopback timings), stderr to
/// `stderr`.
fn sidecar(args: &[String], env: &[(&str, String)], stderr: Stdio) -> Child {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .env("NGIT_SYNC_BASE_BACKOFF_SECS", "1")
        .env("NGIT_SYNC_MAX_BACKOFF_SECS", "2")
        .env("RUST_LOG", "info");
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync")
}

/// A file under the temporary directory, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("{name}-{}.log", std::process::id()));
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_by_environment_the_json_summary_matches_and_an_unreachable_listed_relay_exits_5(
) {
    let dead = format!("ws://127.0.0.1:{}", free_port());
    let (own, a, expected) = world(&[&dead]).await;
    let log = TempFile::new("grasp-sync-service-log");
    let file = std::fs::File::create(&log.0).unwrap();
    // No flag at all: everything from the environment.
    let env = [
        ("NGIT_SYNC_OWN_RELAY", own.url().to_string()),
        ("NGIT_SYNC_ALLOW_LOCAL_ADDRESSES", "1".to_owned()),
        ("NGIT_SYNC_ONCE", "1".to_owned()),
        ("NGIT_SYNC_SUMMARY_JSON", "1".to_owned()),
        // A terminal would get colour; a file never does, and NO_COLOR is not set.
        ("NO_COLOR", String::new()),
    ];
    let child = sidecar(&[], &env, Stdio::from(file));
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("grasp-sync exits in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let log_text = std::fs::read_to_string(&log.0).unwrap();
    assert_eq!(output.status.code(), Some(5), "{stdout}\n{log_text}");
    assert_eq!(
        own.event_ids().await,
        expected,
        "complete on the reachable relays"
    );

    // stdout is one JSON object, and it says what the status said.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let summary: Value = serde_json::from_str(&stdout).expect("the summary is JSON");
    assert_eq!(
        summary["outcome"], "complete_on_reachable_relays",
        "{summary}"
    );
    assert_eq!(summary["exit_code"], 5);
    assert_eq!(summary["sync_plus"]["enabled"], true, "on by default");
    assert_eq!(summary["historic_sync_complete"], true);
    assert_eq!(summary["repositories"], 1);
    assert_eq!(summary["root_events"], 20);
    assert_eq!(summary["relays_unreachable"], 1);
    assert_eq!(summary["unreachable_relays"], serde_json::json!([dead]));
    let relays = summary["relays"].as_array().unwrap();
    let relay = |url: &str| {
        relays
            .iter()
            .find(|relay| relay["relay"] == url)
            .unwrap_or_else(|| panic!("{url} in {summary}"))
    };
    let from_a = relay(&a.url().to_string());
    assert_eq!(
        from_a["reasons"],
        serde_json::json!(["announcement"]),
        "{from_a}"
    );
    assert_eq!(from_a["historic_confirmed"], true, "{from_a}");
    assert_eq!(from_a["unreachable"], false);
    assert!(
        from_a["events_received"].as_u64().unwrap() >= 40,
        "{from_a}"
    );
    assert!(from_a["bytes_received"].as_u64().unwrap() > 0, "{from_a}");
    let from_dead = relay(&dead);
    assert_eq!(from_dead["unreachable"], true, "{from_dead}");
    assert_eq!(from_dead["events_received"], 0);

    // The human summary went to stderr, with the same numbers.
    let complete = format!(
        "historic sync complete: 1 repositories, 20 root events, {} events stored",
        summary["events_stored"]
    );
    assert!(log_text.contains(&complete), "{complete:?} in {log_text}");
    let last = log_text
        .lines()
        .find(|line| line.starts_with("done on the reachable relays"))
        .unwrap_or_else(|| panic!("the final line in {log_text}"));
    assert_eq!(
        last,
        format!(
            "done on the reachable relays, but 1 relay unreachable and not synced from: {dead}"
        )
    );
    // A log written to a file is plain text.
    assert!(
        log_text.contains(" INFO "),
        "info logs were written: {log_text}"
    );
    assert!(!log_text.contains("\x1b["), "no ANSI escapes: {log_text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_win_over_their_variables_and_the_status_page_names_every_relay() {
    let (own, a, expected) = world(&[]).await;
    let (dead_one, dead_two) = (
        format!("ws://127.0.0.1:{}", free_port()),
        format!("ws://127.0.0.1:{}", free_port()),
    );
    let (port, env_port) = (free_port(), free_port());
    let env = [
        // Both overridden by their flags: the sidecar would fail on this own relay, and
        // serve nothing on the flag's port.
        (
            "NGIT_SYNC_OWN_RELAY",
            format!("ws://127.0.0.1:{}", free_port()),
        ),
        ("NGIT_SYNC_METRICS_ADDR", format!("127.0.0.1:{env_port}")),
        // A repeatable flag's variable: a comma-separated list.
        (
            "NGIT_SYNC_BOOTSTRAP_RELAYS",
            format!("{dead_one},{dead_two}"),
        ),
        ("NGIT_SYNC_ALLOW_LOCAL_ADDRESSES", "1".to_owned()),
    ];
    let child = sidecar(
        &[
            "--own-relay".into(),
            own.url().to_string(),
            "--metrics-addr".into(),
            format!("127.0.0.1:{port}"),
        ],
        &env,
        Stdio::piped(),
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(body) = get(port, "/status").await {
            let status: Value = serde_json::from_str(&body).unwrap();
            if status["historic_sync_complete"] == true && status["relays_unreachable"] == 2 {
                break status;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never complete"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(own.event_ids().await, expected);
    assert_eq!(get(env_port, "/").await, None, "the flag's address won");
    let (head, page) = get_with_head(port, "/").await.expect("the status page");
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(
        head.contains("content-security-policy: default-src 'none';"),
        "{head}"
    );
    let relays: Vec<&str> = status["relays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|relay| relay["relay"].as_str().unwrap())
        .collect();
    let a_url = a.url().to_string();
    for url in [a_url.as_str(), dead_one.as_str(), dead_two.as_str()] {
        assert!(relays.contains(&url), "{url} in {relays:?}");
    }
    // Why each relay is synced: a bootstrap relay, or one the announcement lists.
    for relay in status["relays"].as_array().unwrap() {
        let expected = if relay["relay"] == a_url.as_str() {
            serde_json::json!(["announcement"])
        } else if relay["relay"] == dead_one.as_str() || relay["relay"] == dead_two.as_str() {
            serde_json::json!(["bootstrap"])
        } else {
            continue;
        };
        assert_eq!(relay["reasons"], expected, "{relay}");
    }
    assert!(page.contains("<th>why</th>"), "{page}");
    for url in &relays {
        assert!(
            page.contains(&format!("<td class=\"url\">{url}</td>")),
            "{url} on the page"
        );
    }
    assert!(page.contains("unreachable"), "{page}");
    assert!(
        !page.contains("src=\"http"),
        "nothing loaded from elsewhere"
    );
    let pid = child.id().expect("pid").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("grasp-sync exits in time")
        .unwrap();
    assert!(output.status.success(), "{}", output.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_names_every_variable_and_exit_code_and_bad_values_are_one_line() {
    let help = Command::new(BIN).arg("--help").output().await.unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for variable in [
        "NGIT_SYNC_OWN_RELAY",
        "NGIT_SYNC_SERVICE_URLS",
        "NGIT_SYNC_BOOTSTRAP_RELAYS",
        "NGIT_SYNC_PLUS_ENABLED",
        "NGIT_SYNC_DISABLE_NEGENTROPY",
        "NGIT_USER_INDEX_RELAYS",
        "NGIT_PURGATORY_GIT_ROOT",
        "NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY",
        "NGIT_PURGATORY_ALLOW_INSECURE_CLONE_URLS",
        "NGIT_PURGATORY_HOST_MAX_CONCURRENT",
        "NGIT_PURGATORY_HOST_MAX_PER_MINUTE",
        "NGIT_PURGATORY_HOST_LIMITS",
        "NGIT_SYNC_METRICS_ADDR",
        "NGIT_SYNC_ALLOW_LOCAL_ADDRESSES",
        "NGIT_SYNC_ONCE",
        "NGIT_SYNC_TIMEOUT_SECS",
        "NGIT_SYNC_SUMMARY_JSON",
        "NGIT_SYNC_LOG_JSON",
    ] {
        assert!(
            text.contains(&format!("[env: {variable}=")),
            "{variable}: {text}"
        );
    }
    assert!(text.contains("never synced from"), "{text}");
    assert!(text.contains("GRASP-03 \"Sync+\""), "{text}");
    for tuning in [
        "NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS",
        "NGIT_SYNC_PLUS_RELAYS_PER_PASS",
        "NGIT_SYNC_PLUS_MAX_RELAYS",
        "NGIT_SYNC_PLUS_PASS_SECS",
    ] {
        assert!(text.contains(tuning), "{tuning}: {text}");
    }
    assert!(text.contains("5 done on the reachable relays"), "{text}");
    assert!(!text.contains("\x1b["), "{text:?}");

    let own = format!("ws://127.0.0.1:{}", free_port());
    for (name, value) in [
        ("NGIT_SYNC_ONCE", "maybe"),
        ("NGIT_SYNC_PLUS_ENABLED", "maybe"),
        ("NGIT_SYNC_DISABLE_NEGENTROPY", "maybe"),
        ("NGIT_USER_INDEX_RELAYS", "not a relay"),
        ("NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY", "1"),
        ("NGIT_SYNC_SUMMARY_JSON", "1"),
        ("NGIT_PURGATORY_HOST_MAX_CONCURRENT", "0"),
        ("NGIT_PURGATORY_HOST_MAX_PER_MINUTE", "lots"),
        (
            "NGIT_PURGATORY_HOST_LIMITS",
            "git.example.org=fast\nsecond line",
        ),
        ("NGIT_PURGATORY_HOST_LIMITS", "git.example.org=120/10"),
    ] {
        let output = Command::new(BIN)
            .args(["--own-relay", &own])
            .env(name, value)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}={value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}={value}: {stderr}");
        assert!(stderr.contains(name) || stderr.contains("--"), "{stderr}");
    }
}

/// The variables `SyncManagerBuilder::from_env` reads (grasp-sync-tokio).
const SYNC_TUNING: &[&str] = &[
    "NGIT_SYNC_BATCH_WINDOW_MS",
    "NGIT_SYNC_BASE_BACKOFF_SECS",
    "NGIT_SYNC_MAX_BACKOFF_SECS",
    "NGIT_SYNC_BATCH_TIMEOUT_SECS",
    "NGIT_SYNC_MAX_EVENT_BYTES",
    "NGIT_SYNC_MAX_EVENT_TAGS",
    "NGIT_SYNC_MAX_MESSAGE_BYTES",
    "NGIT_SYNC_MAX_BAD_EVENTS",
    "NGIT_SYNC_MAX_RELAYS",
    "NGIT_SYNC_MAX_RELAYS_PER_AUTHOR",
    "NGIT_SYNC_MAX_RELAYS_PER_DOMAIN",
    "NGIT_SYNC_RELAY_TRIAL_SECS",
    "NGIT_SYNC_RELAY_EARN_WINDOW_SECS",
    "NGIT_SYNC_DISABLE_NEGENTROPY",
    "NGIT_SYNC_PLUS_ENABLED",
    "NGIT_USER_INDEX_RELAYS",
    "NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS",
    "NGIT_SYNC_PLUS_RELAYS_PER_PASS",
    "NGIT_SYNC_PLUS_MAX_RELAYS",
    "NGIT_SYNC_PLUS_PASS_SECS",
];

/// The variables the environment file names (commented or not).
fn variables_named(env_file: &str) -> Vec<&str> {
    env_file
        .lines()
        .map(|line| line.trim_start_matches('#'))
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .filter(|name| !name.is_empty() && !name.contains(' '))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_file_names_every_variable_the_sidecar_reads_and_no_other() {
    let help = Command::new(BIN).arg("--help").output().await.unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let env_file = include_str!("../deploy/grasp-sync.env");
    let unit = include_str!("../deploy/grasp-sync.service");
    let named = variables_named(env_file);
    let flags: Vec<&str> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .collect();
    assert!(flags.len() >= 10, "{help}");
    let read: Vec<&str> = flags
        .iter()
        .copied()
        .chain(
            grasp_purgatory::config::ENV_VARIABLES
                .iter()
                .map(|(name, _)| *name),
        )
        .chain(SYNC_TUNING.iter().copied())
        .chain(["RUST_LOG"])
        .collect();
    for name in &named {
        assert!(
            read.contains(name),
            "{name} in grasp-sync.env is read by nothing"
        );
    }
    for name in &read {
        assert!(
            named.contains(name),
            "{name} is read but not in grasp-sync.env"
        );
    }
    assert!(unit.contains("EnvironmentFile=/etc/default/grasp-sync"));
    assert!(unit.contains("ExecStart=/usr/bin/grasp-sync"));
    // The git root the environment file suggests is the one the unit may write.
    assert!(env_file.contains("NGIT_PURGATORY_GIT_ROOT=/srv/grasp-sync/git"));
    assert!(unit.contains("ReadWritePaths=-/srv/grasp-sync/git"));
}
