//! Planning at scale (issue "Historic sync at the machine's limit", benchmark
//! 1): 100 000 repositories, 1 000 000 root events, 1 000 relays (each
//! repository lists 3), every relay connected and every item confirmed.
//!
//! - `full_recompute`: the spec's pseudo-code — derive every relay's targets
//!   from the repositories, then `compute_actions` over all of them (the
//!   baseline).
//! - `one_new_root_event`: what the engine does — the incremental index
//!   takes one new root event and `compute_actions_for_changes` plans only
//!   what it added.
//!
//! `GRASP_BENCH_SCALE` divides the sizes (e.g. 10 for a quick run); CI only
//! builds this.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use grasp_sync_core::model::{PendingItems, PendingSyncIndex, RelaySyncIndex};
use grasp_sync_core::planner::{
    compute_actions, compute_actions_for_changes, derive_relay_targets, RepoSyncIndex,
};
use grasp_sync_core::RepoRef;

use grasp_sync_benches::{event_id, inputs, Inputs, RELAYS_PER_REPO};

/// The index, and the confirmed state of relays that synced all of it.
struct World {
    index: RepoSyncIndex,
    confirmed: RelaySyncIndex,
    pending: PendingSyncIndex,
    repos: Vec<RepoRef>,
    next_event: u64,
}

fn world() -> World {
    let Inputs {
        relays,
        repos,
        root_events: roots_n,
        ..
    } = inputs();
    let (repos_n, relays_n) = (repos.len(), relays.len());
    let mut index = RepoSyncIndex::new();
    for (n, repo) in repos.iter().enumerate() {
        let listed = (0..RELAYS_PER_REPO).map(|k| relays[(n * 7 + k * 131) % relays_n].clone());
        index.set_repo_relays(repo, listed);
    }
    for n in 0..roots_n {
        index.add_root_event(&repos[n % repos_n], event_id(n as u64));
    }
    let _ = index.take_changes();
    let mut confirmed = RelaySyncIndex::new();
    for (relay, needs) in index.targets() {
        let state = confirmed.register(relay.clone(), false);
        let items = PendingItems {
            repos: needs.repos,
            root_events: needs.root_events,
            authors: Default::default(),
        };
        state.confirm(&items, index.ids());
        confirmed.set_connected(&relay, true);
    }
    World {
        index,
        confirmed,
        pending: PendingSyncIndex::new(),
        repos,
        next_event: roots_n as u64,
    }
}

fn planning(c: &mut Criterion) {
    let mut world = world();
    let mut group = c.benchmark_group("planning");
    group.sample_size(10);
    group.bench_function("full_recompute", |b| {
        b.iter(|| {
            let targets = derive_relay_targets(world.index.repos());
            black_box(compute_actions(
                &targets,
                world.index.ids(),
                &(&world.pending, &world.confirmed),
            ))
        })
    });
    group.bench_function("one_new_root_event", |b| {
        b.iter(|| {
            world.next_event += 1;
            let repo = &world.repos[(world.next_event as usize) % world.repos.len()];
            world.index.add_root_event(repo, event_id(world.next_event));
            let changes = world.index.take_changes();
            black_box(compute_actions_for_changes(
                &changes,
                &(&world.pending, &world.confirmed),
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
