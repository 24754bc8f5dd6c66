//! `grasp-sync-demo` as a newcomer runs it: one command, its own relays and
//! git server on loopback, and its exit code says whether the own relay
//! ended with exactly the events the demo's oracle expects (computed from
//! the remotes, independently of the sync) and the bare repositories with
//! every referenced commit. The demo was failing its own check for a
//! while before anything ran it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync-demo");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_passes_its_exact_set_check() {
    let run = Command::new(BIN)
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the demo finishes within 4 minutes")
        .expect("the demo starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("check: the own relay holds exactly the"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|line| line.starts_with("PASSED in")),
        "{stdout}"
    );
}
