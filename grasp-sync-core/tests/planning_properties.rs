//! Property tests of planning: `compute_actions` (full and incremental) and
//! the incrementally maintained relay targets.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};

use common::{event_id, relay, repo};
use grasp_sync_core::clock::Instant;
use grasp_sync_core::model::{
    BatchId, PendingBatch, PendingItems, PendingSyncIndex, RelayState, RelaySyncIndex,
    RelaySyncNeeds, SyncMethod,
};
use grasp_sync_core::planner::{
    compute_actions, compute_actions_for_changes, derive_relay_targets, RepoSyncIndex,
};
use grasp_sync_core::RepoRef;
use nostr::prelude::{EventId, RelayUrl};
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

/// The targets in relay order (a walk over a `HashMap` is in no order).
fn sorted(targets: HashMap<RelayUrl, RelaySyncNeeds>) -> Vec<(RelayUrl, RelaySyncNeeds)> {
    let mut targets: Vec<_> = targets.into_iter().collect();
    targets.sort_by(|a, b| a.0.cmp(&b.0));
    targets
}

/// `true` if `state` confirmed `repo` (looked up by its id in `index`).
fn confirms_repo(index: &RepoSyncIndex, state: &RelayState, repo: &RepoRef) -> bool {
    index
        .ids()
        .repo_id(repo)
        .is_some_and(|id| state.repos.contains(&id))
}

/// `true` if `state` confirmed `root_event`.
fn confirms_root_event(index: &RepoSyncIndex, state: &RelayState, root_event: &EventId) -> bool {
    index
        .ids()
        .root_id(root_event)
        .is_some_and(|id| state.root_events.contains(&id))
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
        confirmed.register(relay(n), false);
        confirmed.set_connected(&relay(n), *is_connected);
    }
    let mut bit = 0u32;
    let mut next_bit = |mask: u64| {
        bit = (bit + 1) % 64;
        mask & (1 << bit) != 0
    };
    let mut batch = 0;
    let ids = index.ids();
    for (url, target) in sorted(index.targets()) {
        let mut items = PendingItems::default();
        let mut confirm = PendingItems::default();
        for r in &target.repos {
            if next_bit(confirm_mask) {
                confirm.repos.insert(r.clone());
            } else if next_bit(pending_mask) {
                items.repos.insert(r.clone());
            }
        }
        for id in &target.root_events {
            if next_bit(confirm_mask) {
                confirm.root_events.insert(*id);
            } else if next_bit(pending_mask) {
                items.root_events.insert(*id);
            }
        }
        confirmed.get_mut(&url).unwrap().confirm(&confirm, ids);
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
            for (url, needs) in &full {
                let target = index.target(url).unwrap();
                prop_assert_eq!(target.repos.len(), needs.repos.len());
                prop_assert_eq!(target.root_events.len(), needs.root_events.len());
                prop_assert!(needs.repos.iter().all(|r| target.repos.contains(r)));
                prop_assert!(needs.root_events.iter().all(|id| target.root_events.contains(id)));
            }
            prop_assert_eq!(index.targets(), full);
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
        let targets = index.targets();
        let actions = compute_actions(&targets, index.ids(), &(&pending, &confirmed));

        let mut planned_relays = HashSet::new();
        for action in &actions {
            prop_assert!(planned_relays.insert(action.relay.clone()), "one action per relay");
            prop_assert!(confirmed.is_connected(&action.relay));
            prop_assert!(!action.items.is_empty());
            let state = confirmed.get(&action.relay).unwrap();
            for r in &action.items.repos {
                prop_assert!(!confirms_repo(&index, state, r) && !pending.contains_repo(&action.relay, r));
            }
            for id in &action.items.root_events {
                prop_assert!(!confirms_root_event(&index, state, id) && !pending.contains_root_event(&action.relay, id));
            }
        }
        for (url, target) in &targets {
            if !confirmed.is_connected(url) {
                prop_assert!(!planned_relays.contains(url));
                continue;
            }
            let planned = actions.iter().find(|a| &a.relay == url).map(|a| a.items.clone()).unwrap_or_default();
            let state = confirmed.get(url).unwrap();
            for r in &target.repos {
                prop_assert!(planned.repos.contains(r) || confirms_repo(&index, state, r) || pending.contains_repo(url, r));
            }
            for id in &target.root_events {
                prop_assert!(planned.root_events.contains(id) || confirms_root_event(&index, state, id) || pending.contains_root_event(url, id));
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
            for action in compute_actions_for_changes(&delta, &(&pending, &confirmed)) {
                batch += 1;
                pending.insert(action.relay, PendingBatch::new(BatchId(batch), action.items, SyncMethod::ReqEose, Instant::ZERO));
            }
            prop_assert!(compute_actions(&index.targets(), index.ids(), &(&pending, &confirmed)).is_empty());
        }
        // Confirming every batch keeps the answer empty.
        for n in 0..RELAYS {
            for batch in pending.clear_relay(&relay(n)) {
                confirmed.get_mut(&relay(n)).unwrap().confirm(&batch.items, index.ids());
            }
        }
        prop_assert!(compute_actions(&index.targets(), index.ids(), &(&pending, &confirmed)).is_empty());
    }
}
