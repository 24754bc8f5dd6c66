//! Memory per tracked root event (issue "Historic sync at the machine's
//! limit", benchmark 4; target ≤ 200 B): the sync indexes as the engine holds
//! them in steady state, at the planning benchmark's scale — 100 000
//! repositories, each listing 3 of 1 000 relays, 1 000 000 root events, every
//! relay connected and every item confirmed on each relay that lists it.
//!
//! Resident memory (`/proc/self/statm`) is read before and after each step of
//! building the indexes; the inputs (relay URLs and repository references)
//! exist before the first reading and event ids are made on the fly, so the
//! deltas are the indexes alone. Steps:
//!
//! 1. `RepoSyncIndex`: every announcement (`set_repo_relays`);
//! 2. `RepoSyncIndex`: every root event (`add_root_event`), with the relay
//!    targets it keeps;
//! 3. `RelaySyncIndex`: each relay planned (`compute_actions_for_relay`) and
//!    its items confirmed, as a completed batch confirms them.
//!
//! Steady state is 1 + 2 + 3. Then, not part of it: the `PendingSyncIndex`
//! just after planning an initial sync (every item in flight on every relay),
//! on top of the steady state.
//!
//! Runs only with `--bench` (`cargo bench -p grasp-sync-benches --bench
//! memory`), so `cargo test --all-targets` stays quick. `GRASP_BENCH_SCALE`
//! divides the sizes.

use std::hint::black_box;
use std::time::Instant as WallClock;

use grasp_sync_benches::resident_bytes;
use grasp_sync_core::clock::Instant;
use grasp_sync_core::model::{BatchId, PendingBatch, PendingSyncIndex, RelaySyncIndex, SyncMethod};
use grasp_sync_core::planner::{compute_actions_for_relay, RepoSyncIndex};

use grasp_sync_benches::{event_id, inputs, Inputs, RELAYS_PER_REPO};

/// Resident memory now, in bytes (0 where `/proc` is missing).
fn rss() -> u64 {
    resident_bytes().unwrap_or(0)
}

/// Prints one measured step.
fn report(step: &str, bytes: u64, root_events: usize, seconds: f64) {
    println!(
        "{step:<58} {:>9.1} MiB {:>7.1} B/root event  ({seconds:.1} s)",
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / root_events as f64,
    );
}

fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let Inputs {
        scale,
        relays,
        repos,
        root_events: roots_n,
    } = inputs();
    let (repos_n, relays_n) = (repos.len(), relays.len());
    println!(
        "memory: {repos_n} repositories, {roots_n} root events, {relays_n} relays \
         ({RELAYS_PER_REPO} per repository), scale 1/{scale}"
    );

    let start = rss();
    let clock = WallClock::now();
    let mut index = RepoSyncIndex::new();
    for (n, repo) in repos.iter().enumerate() {
        let listed = (0..RELAYS_PER_REPO).map(|k| relays[(n * 7 + k * 131) % relays_n].clone());
        index.set_repo_relays(repo, listed);
        // The engine takes the changes after every input.
        black_box(index.take_changes());
    }
    let after_repos = rss();
    let repos_seconds = clock.elapsed().as_secs_f64();

    let clock = WallClock::now();
    for n in 0..roots_n {
        index.add_root_event(&repos[n % repos_n], event_id(n as u64));
        black_box(index.take_changes());
    }
    let after_roots = rss();
    let roots_seconds = clock.elapsed().as_secs_f64();

    let clock = WallClock::now();
    let mut confirmed = RelaySyncIndex::new();
    for relay in &relays {
        confirmed.register(relay.clone(), false);
        confirmed.set_connected(relay, true);
    }
    let none_pending = PendingSyncIndex::new();
    for relay in &relays {
        let Some(target) = index.target(relay) else {
            continue;
        };
        let action = compute_actions_for_relay(
            relay,
            &target.repos,
            &target.root_events,
            &(&none_pending, &confirmed),
        );
        if let (Some(action), Some(state)) = (action, confirmed.get_mut(relay)) {
            state.confirm(&action.items, index.ids());
        }
    }
    let after_confirmed = rss();
    let confirmed_seconds = clock.elapsed().as_secs_f64();

    let clock = WallClock::now();
    let mut fresh = RelaySyncIndex::new();
    for relay in &relays {
        fresh.register(relay.clone(), false);
        fresh.set_connected(relay, true);
    }
    let mut pending = PendingSyncIndex::new();
    for (n, relay) in relays.iter().enumerate() {
        let Some(target) = index.target(relay) else {
            continue;
        };
        let action = compute_actions_for_relay(
            relay,
            &target.repos,
            &target.root_events,
            &(&pending, &fresh),
        );
        if let Some(action) = action {
            let batch = PendingBatch::new(
                BatchId(n as u64),
                action.items,
                SyncMethod::ReqEose,
                Instant::ZERO,
            );
            pending.insert(action.relay, batch);
        }
    }
    let after_pending = rss();
    let pending_seconds = clock.elapsed().as_secs_f64();

    let steady = after_confirmed.saturating_sub(start);
    report(
        "1. RepoSyncIndex: repositories and their relays",
        after_repos.saturating_sub(start),
        roots_n,
        repos_seconds,
    );
    report(
        "2. RepoSyncIndex: root events and relay targets",
        after_roots.saturating_sub(after_repos),
        roots_n,
        roots_seconds,
    );
    report(
        "3. RelaySyncIndex: every item confirmed",
        after_confirmed.saturating_sub(after_roots),
        roots_n,
        confirmed_seconds,
    );
    report(
        "steady state (1 + 2 + 3)",
        steady,
        roots_n,
        repos_seconds + roots_seconds + confirmed_seconds,
    );
    report(
        "not steady: PendingSyncIndex after planning an initial sync",
        after_pending.saturating_sub(after_confirmed),
        roots_n,
        pending_seconds,
    );
    println!(
        "memory per tracked root event (steady state): {:.1} B (target: <= 200 B)",
        steady as f64 / roots_n as f64
    );
    black_box((&index, &confirmed, &fresh, &pending, &(&repos, &relays)));
}
