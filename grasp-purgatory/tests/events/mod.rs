//! The purgatory's integration-test helpers: its main loop on a task, bounded polling,
//! and an in-memory git backend. Signed events come from `grasp-sync-test-support`.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod memory_git;

/// Runs `purgatory`'s main loop on a task until its shutdown.
pub fn spawn_run(
    purgatory: &grasp_purgatory::Purgatory,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let purgatory = purgatory.clone();
    tokio::spawn(async move { purgatory.run().await })
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after `within`.
pub async fn eventually(what: &str, within: std::time::Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
