//! `grasp-sync-demo` as a newcomer runs it: one command, its own relays and
//! git server on loopback, and its exit code says whether the own relay
//! ended with exactly the events the demo's oracle expects (computed from
//! the remotes, independently of the sync) and the bare repositories with
//! every referenced commit. The demo was failing its own check for a
//! while before anything ran it. Its log, written to a file as an operator's would be,
//! is plain text: no ANSI colour codes off a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync-demo");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_passes_its_exact_set_check() {
    let log_path = std::env::temp_dir().join(format!("grasp-sync-demo-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("a log file");
    let run = Command::new(BIN)
        // Info: the library's log lines reach the file too, not only warnings.
        .env("RUST_LOG", "grasp_sync_tokio=info,grasp_purgatory=info")
        .env_remove("NO_COLOR")
        .stderr(log)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        // `spawn`, not tokio's `output`, which would pipe stderr whatever was set.
        .spawn()
        .expect("the demo starts")
        .wait_with_output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the demo finishes within 4 minutes")
        .expect("the demo's output is read");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = std::fs::read_to_string(&log_path).expect("the log is text");
    let _ = std::fs::remove_file(&log_path);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.lines().count() > 5 && stderr.contains("INFO"),
        "the log has the library's lines: {stderr}"
    );
    assert!(
        !stderr.contains("\x1b["),
        "ANSI codes in a log file: {stderr:?}"
    );
    assert!(
        stdout.contains("check: the own relay holds exactly the"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|line| line.starts_with("PASSED in")),
        "{stdout}"
    );
}
