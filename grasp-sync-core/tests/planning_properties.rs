//! Property tests of planning: `compute_actions` (full and incremental) and
//! the incrementally maintained relay targets.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;

use common::{event_id, relay, repo};
use grasp_sync_core::clock::Instant;
use grasp_sync_core::model::{
    BatchId, ConnectionStatus, PendingBatch, PendingItems, PendingSyncIndex, RelaySyncIndex,
    SyncMethod,
};
use grasp_sync_core::planner::{
    compute_actions, compute_actions_for_changes, derive_relay_targets, RepoSyncIndex,
};
use proptest::prelude::*;

const REPOS: usize = 12;
const RELAYS: usize = 6;

/// One change to the repository index.
#[derive(Clone, Debug)]
enum Change {
    Announce { repo: usize, relays: Vec<usize> },
    RootEvent { repo: usize, event: u64 },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0..REPOS, proptest::collection::vec(0..RELAYS, 0..4))
            .prop_map(|(repo, relays)| Change::Announce { repo, relays }),
        (0..REPOS, 0u64..40).prop_map(|(repo, event)| Change::RootEvent { repo, event }),
    ]
}

fn apply(index: &mut RepoSyncIndex, change: &Change) {
    match change {
        Change::Announce { repo: r, relays } => {
            index.set_repo_relays(&repo(*r), relays.iter().map(|n| relay(*n)));
        }
        Change::RootEvent { repo: r, event } => {
            index.add_root_event(&repo(*r), event_id(*event));
        }
    }
}

/// Random confirmed and pending state over the targets of `index`.
fn confirmed_and_pending(
    index: &RepoSyncIndex,
    connected: &[bool],
    confirm_mask: u64,
    pending_mask: u64,
) -> (RelaySyncIndex, PendingSyncIndex) {
    let mut confirmed = RelaySyncIndex::new();
    let mut pending = PendingSyncIndex::new();
    for (n, is_connected) in connected.iter().enumerate() {
        let state = confirmed.register(relay(n), false);
        if *is_connected {
            state.connection_status = ConnectionStatus::Connected;
        }
    }
    let mut bit = 0u32;
    let mut next_bit = |mask: u64| {
        bit = (bit + 1) % 64;
        mask & (1 << bit) != 0
    };
    let mut batch = 0;
    for (url, target) in index.targets() {
        let mut items = PendingItems::default();
        for r in &target.repos {
            if next_bit(confirm_mask) {
                confirmed.get_mut(url).unwrap().repos.insert(r.clone());
            } else if next_bit(pending_mask) {
                items.repos.insert(r.clone());
            }
        }
        for id in &target.root_events {
            if next_bit(confirm_mask) {
                confirmed.get_mut(url).unwrap().root_events.insert(*id);
            } else if next_bit(pending_mask) {
                items.root_events.insert(*id);
            }
        }
        if !items.is_empty() {
            batch += 1;
            pending.insert(
                url.clone(),
                PendingBatch::new(BatchId(batch), items, SyncMethod::ReqEose, Instant::ZERO),
            );
        }
    }
    (confirmed, pending)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The incrementally kept targets always equal the full recompute.
    #[test]
    fn incremental_targets_equal_full_recompute(changes in proptest::collection::vec(change(), 0..60)) {
        let mut index = RepoSyncIndex::new();
        for change in &changes {
            apply(&mut index, change);
            let full = derive_relay_targets(index.repos());
            prop_assert_eq!(index.targets(), &full);
        }
    }

    /// `compute_actions` output is disjoint from pending ∪ confirmed and,
    /// with them, covers every target of every connected relay; relays that
    /// are not connected get nothing.
    #[test]
    fn compute_actions_is_disjoint_and_covers_targets(
        changes in proptest::collection::vec(change(), 0..60),
        connected in proptest::collection::vec(any::<bool>(), RELAYS),
        confirm_mask in any::<u64>(),
        pending_mask in any::<u64>(),
    ) {
        let mut index = RepoSyncIndex::new();
        for change in &changes {
            apply(&mut index, change);
        }
        let (confirmed, pending) = confirmed_and_pending(&index, &connected, confirm_mask, pending_mask);
        let actions = compute_actions(index.targets(), &pending, &confirmed);

        let mut planned_relays = HashSet::new();
        for action in &actions {
            prop_assert!(planned_relays.insert(action.relay.clone()), "one action per relay");
            prop_assert!(confirmed.is_connected(&action.relay));
            prop_assert!(!action.items.is_empty());
            let state = confirmed.get(&action.relay).unwrap();
            for r in &action.items.repos {
                prop_assert!(!state.repos.contains(r) && !pending.contains_repo(&action.relay, r));
            }
            for id in &action.items.root_events {
                prop_assert!(!state.root_events.contains(id) && !pending.contains_root_event(&action.relay, id));
            }
        }
        for (url, target) in index.targets() {
            if !confirmed.is_connected(url) {
                prop_assert!(!planned_relays.contains(url));
                continue;
            }
            let planned = actions.iter().find(|a| &a.relay == url).map(|a| a.items.clone()).unwrap_or_default();
            let state = confirmed.get(url).unwrap();
            for r in &target.repos {
                prop_assert!(planned.repos.contains(r) || state.repos.contains(r) || pending.contains_repo(url, r));
            }
            for id in &target.root_events {
                prop_assert!(planned.root_events.contains(id) || state.root_events.contains(id) || pending.contains_root_event(url, id));
            }
        }
    }

    /// Planning only what changed, and putting each action in flight, leaves
    /// nothing for a full recompute to add: the incremental path decides
    /// exactly what the full one would.
    #[test]
    fn incremental_planning_matches_full_planning(
        changes in proptest::collection::vec(change(), 1..60),
        connected in proptest::collection::vec(any::<bool>(), RELAYS),
    ) {
        let mut index = RepoSyncIndex::new();
        let (mut confirmed, mut pending) = confirmed_and_pending(&index, &connected, 0, 0);
        let mut batch = 0;
        for change in &changes {
            apply(&mut index, change);
            let delta = index.take_changes();
            for action in compute_actions_for_changes(&delta, &pending, &confirmed) {
                batch += 1;
                pending.insert(action.relay, PendingBatch::new(BatchId(batch), action.items, SyncMethod::ReqEose, Instant::ZERO));
            }
            prop_assert!(compute_actions(index.targets(), &pending, &confirmed).is_empty());
        }
        // Confirming every batch keeps the answer empty.
        for n in 0..RELAYS {
            for batch in pending.clear_relay(&relay(n)) {
                confirmed.get_mut(&relay(n)).unwrap().confirm(&batch.items);
            }
        }
        prop_assert!(compute_actions(index.targets(), &pending, &confirmed).is_empty());
    }
}
