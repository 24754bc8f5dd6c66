//! Unit tests of the repository index and `compute_actions`.

use super::*;
use crate::clock::Instant;
use crate::model::{BatchId, PendingBatch, PendingSyncIndex, RelaySyncIndex, SyncMethod};
use nostr::prelude::{Keys, SecretKey};

fn repo(n: u8) -> RepoRef {
    let mut bytes = [0u8; 32];
    bytes[31] = 1;
    let pubkey = Keys::new(SecretKey::from_slice(&bytes).unwrap()).public_key();
    RepoRef::new(pubkey, format!("repo-{n}")).unwrap()
}

fn relay(n: u8) -> RelayUrl {
    RelayUrl::parse(&format!("wss://relay{n}.example.com")).unwrap()
}

fn id(n: u8) -> EventId {
    EventId::from_byte_array([n; 32])
}

fn connected(relays: &[u8]) -> RelaySyncIndex {
    let mut index = RelaySyncIndex::new();
    for n in relays {
        index.register(relay(*n), false);
        index.set_connected(&relay(*n), true);
    }
    index
}

#[test]
fn targets_invert_repos_to_relays() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1), relay(2)]);
    index.add_root_event(&repo(1), id(7));
    let target = index.target(&relay(2)).unwrap();
    assert!(target.repos.contains(&repo(1)));
    assert!(target.root_events.contains(&id(7)));
    assert_eq!(index.targets(), derive_relay_targets(index.repos()));
}

#[test]
fn root_event_before_announcement_is_targeted_once_relays_are_known() {
    let mut index = RepoSyncIndex::new();
    assert!(index.add_root_event(&repo(1), id(7)));
    assert!(
        !index.add_root_event(&repo(1), id(7)),
        "second time is not new"
    );
    assert!(index.targets().is_empty());
    let change = index.set_repo_relays(&repo(1), [relay(1)]);
    assert_eq!(change.added, vec![relay(1)]);
    assert!(index
        .target(&relay(1))
        .unwrap()
        .root_events
        .contains(&id(7)));
}

#[test]
fn dropping_a_relay_keeps_events_another_repo_still_needs_there() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1)]);
    index.set_repo_relays(&repo(2), [relay(1)]);
    index.add_root_event(&repo(1), id(7));
    index.add_root_event(&repo(2), id(7));
    index.add_root_event(&repo(1), id(8));
    let change = index.set_repo_relays(&repo(1), []);
    assert_eq!(change.removed, vec![relay(1)]);
    let target = index.target(&relay(1)).unwrap();
    assert!(target.root_events.contains(&id(7)), "repo 2 still needs it");
    assert!(!target.root_events.contains(&id(8)));
    assert!(!target.repos.contains(&repo(1)));
    index.set_repo_relays(&repo(2), []);
    assert!(
        index.target(&relay(1)).is_none(),
        "an empty target is removed"
    );
}

#[test]
fn take_changes_reports_each_addition_once() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1)]);
    index.add_root_event(&repo(1), id(7));
    let changes = index.take_changes();
    let added = changes.items(&relay(1)).unwrap();
    assert!(added.repos.contains(&repo(1)) && added.root_events.contains(&id(7)));
    assert!(index.take_changes().is_empty());
    index.add_root_event(&repo(1), id(8));
    let changes = index.take_changes();
    assert_eq!(changes.items(&relay(1)).unwrap().len(), 1);
}

#[test]
fn compute_actions_subtracts_pending_and_confirmed() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1)]);
    index.set_repo_relays(&repo(2), [relay(1)]);
    index.set_repo_relays(&repo(3), [relay(1)]);
    let mut confirmed = connected(&[1]);
    let repo_1 = index.ids().repo_id(&repo(1)).unwrap();
    confirmed.get_mut(&relay(1)).unwrap().repos.insert(repo_1);
    let mut pending = PendingSyncIndex::new();
    let items = PendingItems {
        repos: [repo(2)].into(),
        ..Default::default()
    };
    pending.insert(
        relay(1),
        PendingBatch::new(BatchId(1), items, SyncMethod::ReqEose, Instant::ZERO),
    );
    let actions = compute_actions(&index.targets(), index.ids(), &(&pending, &confirmed));
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0].items.repos, [repo(3)].into());
}

#[test]
fn compute_actions_skips_relays_that_are_not_connected() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1), relay(2), relay(3)]);
    let mut confirmed = connected(&[1]);
    confirmed.register(relay(2), false);
    let actions = compute_actions(
        &index.targets(),
        index.ids(),
        &(&PendingSyncIndex::new(), &confirmed),
    );
    let relays: Vec<_> = actions.iter().map(|a| a.relay.clone()).collect();
    assert_eq!(
        relays,
        vec![relay(1)],
        "registered relays not connected and unregistered relays are skipped"
    );
}

#[test]
fn incremental_planning_looks_only_at_the_change() {
    let mut index = RepoSyncIndex::new();
    for n in 0..50 {
        index.set_repo_relays(&repo(n), [relay(1)]);
    }
    let confirmed = connected(&[1]);
    let first = compute_actions_for_changes(
        &index.take_changes(),
        &(&PendingSyncIndex::new(), &confirmed),
    );
    assert_eq!(first[0].items.repos.len(), 50);
    index.add_root_event(&repo(3), id(9));
    let second = compute_actions_for_changes(
        &index.take_changes(),
        &(&PendingSyncIndex::new(), &confirmed),
    );
    assert_eq!(second.len(), 1);
    assert!(
        second[0].items.repos.is_empty(),
        "unchanged repos are not looked at again"
    );
    assert_eq!(second[0].items.root_events, [id(9)].into());
}

#[test]
fn a_relay_no_repository_lists_is_forgotten_and_the_others_keep_their_targets() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1), relay(2), relay(3)]);
    index.set_repo_relays(&repo(2), [relay(3)]);
    index.add_root_event(&repo(1), id(7));
    index.add_root_event(&repo(2), id(8));
    index.set_repo_relays(&repo(1), [relay(3)]);
    assert!(index.target(&relay(1)).is_none() && index.target(&relay(2)).is_none());
    let target = index.target(&relay(3)).unwrap();
    assert_eq!(target.repos.len(), 2);
    assert_eq!(target.root_events.len(), 2);
    assert_eq!(index.targets(), derive_relay_targets(index.repos()));
    index.set_repo_relays(&repo(2), [relay(4)]);
    assert!(index.repo(&repo(2)).unwrap().relays.contains(&relay(4)));
    assert_eq!(index.targets(), derive_relay_targets(index.repos()));
}

#[test]
fn a_root_event_of_two_repositories_is_targeted_once_per_relay() {
    let mut index = RepoSyncIndex::new();
    index.set_repo_relays(&repo(1), [relay(1)]);
    index.set_repo_relays(&repo(2), [relay(1), relay(2)]);
    assert!(index.add_root_event(&repo(1), id(7)));
    assert!(index.add_root_event(&repo(2), id(7)));
    assert!(!index.add_root_event(&repo(2), id(7)));
    let changes = index.take_changes();
    assert_eq!(
        changes.items(&relay(1)).unwrap().root_events,
        [id(7)].into()
    );
    assert_eq!(
        changes.items(&relay(2)).unwrap().root_events,
        [id(7)].into()
    );
    let target = index.target(&relay(1)).unwrap();
    assert_eq!(target.root_events.iter().count(), 1, "met once");
    assert!(index.repo(&repo(2)).unwrap().root_events.contains(&id(7)));
    assert_eq!(index.targets(), derive_relay_targets(index.repos()));
}
