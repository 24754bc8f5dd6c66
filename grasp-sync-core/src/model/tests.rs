//! Unit tests of the confirmed and pending indexes.

use super::*;
use nostr::prelude::{Keys, SecretKey};

fn repo(n: u8) -> RepoRef {
    let mut bytes = [0u8; 32];
    bytes[31] = 2;
    let pubkey = Keys::new(SecretKey::from_slice(&bytes).unwrap()).public_key();
    RepoRef::new(pubkey, format!("r{n}")).unwrap()
}

fn relay() -> RelayUrl {
    RelayUrl::parse("wss://relay.example.com").unwrap()
}

fn batch(id: u64, repos: &[u8]) -> PendingBatch {
    let items = PendingItems {
        repos: repos.iter().map(|n| repo(*n)).collect(),
        ..PendingItems::default()
    };
    PendingBatch::new(BatchId(id), items, SyncMethod::ReqEose, Instant::ZERO)
}

#[test]
fn fifteen_minute_rule_uses_wall_clock_seconds() {
    let mut state = RelayState::new(false);
    let window = Duration::from_secs(900);
    assert!(
        !state.should_clear_state(Timestamp::from_secs(10_000), window),
        "never disconnected"
    );
    state.disconnected_at = Some(Timestamp::from_secs(10_000));
    assert!(!state.should_clear_state(Timestamp::from_secs(10_900), window));
    assert!(state.should_clear_state(Timestamp::from_secs(10_901), window));
    assert!(
        !state.should_clear_state(Timestamp::from_secs(5), window),
        "clock going back"
    );
}

/// A table with ids for `repos` and the root events `roots`.
fn ids_of(repos: &[u8], roots: &[u8]) -> SyncIds {
    let mut ids = SyncIds::new();
    for n in repos {
        ids.intern_repo(&repo(*n));
    }
    for n in roots {
        ids.intern_root_event(EventId::from_byte_array([*n; 32]));
    }
    ids
}

#[test]
fn confirm_keeps_ids_and_items_gives_the_values_back() {
    let ids = ids_of(&[1, 2], &[7]);
    let mut state = RelayState::new(false);
    let mut items = batch(1, &[1, 2, 3]).items;
    items.root_events.insert(EventId::from_byte_array([7; 32]));
    items.root_events.insert(EventId::from_byte_array([8; 32]));
    state.confirm(&items, &ids);
    assert_eq!(state.repos.len(), 2, "repo 3 has no id: never planned");
    assert_eq!(state.root_events.len(), 1);
    let back = state.items(&ids);
    assert_eq!(back.repos, [repo(1), repo(2)].into());
    assert_eq!(back.root_events, [EventId::from_byte_array([7; 32])].into());
}

#[test]
fn clear_sync_state_forgets_confirmed_items() {
    let mut state = RelayState::new(true);
    state.confirm(&batch(1, &[1, 2]).items, &ids_of(&[1, 2], &[]));
    assert_eq!(state.repos.len(), 2);
    state.announcements_synced = true;
    state.clear_sync_state();
    assert!(state.repos.is_empty() && state.root_events.is_empty());
    assert!(!state.announcements_synced);
    assert!(state.is_bootstrap, "bootstrap survives a fresh start");
}

#[test]
fn register_keeps_state_and_only_adds_bootstrap() {
    let mut index = RelaySyncIndex::new();
    let (id, _) = SyncIds::new().intern_repo(&repo(1));
    index.register(relay(), false).repos.insert(id);
    assert!(!index.register(relay(), false).is_bootstrap);
    assert!(index.register(relay(), true).is_bootstrap);
    assert!(index.register(relay(), false).is_bootstrap);
    assert_eq!(index.get(&relay()).unwrap().repos.len(), 1);
}

#[test]
fn pending_membership_follows_batches() {
    let mut pending = PendingSyncIndex::new();
    pending.insert(relay(), batch(1, &[1, 2]));
    pending.insert(relay(), batch(2, &[2, 3]));
    assert!(pending.contains_repo(&relay(), &repo(2)));
    let removed = pending.remove_batch(&relay(), BatchId(1)).unwrap();
    assert_eq!(removed.items.repos.len(), 2);
    assert!(!pending.contains_repo(&relay(), &repo(1)));
    assert!(
        pending.contains_repo(&relay(), &repo(2)),
        "still in batch 2"
    );
    assert_eq!(pending.items(&relay()).repos, [repo(2), repo(3)].into());
    assert!(pending.remove_batch(&relay(), BatchId(1)).is_none());
    assert_eq!(pending.clear_relay(&relay()).len(), 1);
    assert!(!pending.contains_repo(&relay(), &repo(3)));
    assert_eq!(pending.batch_count(), 0);
}
