//! The sync data model of the spec: what we want per repository, what we have
//! confirmed per relay, and the batches in flight.
//!
//! Three indexes hold the whole state of proactive sync:
//! - [`RepoSyncIndex`](crate::planner::RepoSyncIndex) — what we **want**, per
//!   repository (relays it lists, root events that point at it);
//! - per relay, what it has **confirmed** ([`RelayState`]; the spec's
//!   `RelaySyncIndex`);
//! - per relay, the batches of historic sync **in flight** ([`RelayPending`];
//!   the spec's `PendingSyncIndex`).
//!
//! The engine keeps a relay's [`RelayState`] and its batches in flight (each
//! a [`PendingBatch`] with its progress, and their [`ItemsInFlight`]) in its
//! session of the relay, with the relay's connection lifecycle;
//! [`RelaySyncIndex`] (with which relays are connected) and
//! [`PendingSyncIndex`] (of [`RelayPending`]s) are the same as plain maps,
//! for planning without an
//! engine. `compute_actions` (in
//! [`planner`](crate::planner)) subtracts pending and confirmed — asked
//! through [`RelayProgress`] — from the targets to decide what is new.
//! Repositories and root events are stored once, in the repository index's
//! [`ids::SyncIds`]; the confirmed sets hold their 4-byte ids.

pub mod ids;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use indexmap::IndexMap;
use nostr::prelude::{EventId, PublicKey, RelayUrl, Timestamp};

use crate::clock::Instant;
use crate::nip34::RepoRef;
use ids::{RepoId, RootId, SyncIds};

/// What we want to sync from one relay, as plain values (the spec's
/// `RelaySyncNeeds`): what the full recompute
/// [`derive_relay_targets`](crate::planner::derive_relay_targets) returns.
/// The repository index keeps the same without copies
/// ([`RelayTarget`](crate::planner::RelayTarget)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelaySyncNeeds {
    /// Repositories to follow on this relay (Layer 2).
    pub repos: HashSet<RepoRef>,
    /// Root events to follow on this relay (Layer 3).
    pub root_events: HashSet<EventId>,
}

impl RelaySyncNeeds {
    /// `true` when there is nothing to sync.
    pub fn is_empty(&self) -> bool {
        self.repos.is_empty() && self.root_events.is_empty()
    }
}

/// Connection status of a relay, as reported (the engine derives it from
/// the relay's session).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectionStatus {
    /// Not connected.
    Disconnected,
    /// A connection attempt is in progress.
    Connecting,
    /// Connected; subscriptions may be sent.
    Connected,
}

/// What one relay confirmed, and when it was last connected (the spec's
/// `RelayState`, without its connection status: the engine's relay session
/// holds the lifecycle, [`RelaySyncIndex`] which relays are connected).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayState {
    /// Repositories whose historic sync this relay has confirmed (ids of the
    /// repository index's [`SyncIds`]).
    pub repos: HashSet<RepoId>,
    /// Root events whose historic sync this relay has confirmed (ids of the
    /// repository index's [`SyncIds`]).
    pub root_events: HashSet<RootId>,
    /// Participants whose relay lists this relay's historic sync has
    /// confirmed (GRASP-03 Sync+).
    pub authors: HashSet<PublicKey>,
    /// A bootstrap relay is never dropped, even with nothing to sync.
    pub is_bootstrap: bool,
    /// Wall-clock time of the last successful connection; the `since` of a
    /// quick reconnect is computed from it.
    pub last_connected: Option<Timestamp>,
    /// Wall-clock time of the last disconnect, for the 15-minute rule.
    pub disconnected_at: Option<Timestamp>,
    /// Whether the Layer 1 (announcement) historic sync has completed, so a
    /// reconnect may use `since` for Layer 1.
    pub announcements_synced: bool,
}

impl RelayState {
    /// A newly discovered relay: nothing confirmed.
    pub(crate) fn new(is_bootstrap: bool) -> Self {
        RelayState {
            repos: HashSet::new(),
            root_events: HashSet::new(),
            authors: HashSet::new(),
            is_bootstrap,
            last_connected: None,
            disconnected_at: None,
            announcements_synced: false,
        }
    }

    /// The 15-minute rule: `true` when the relay has been disconnected for
    /// longer than `window` at wall-clock time `now`, so its confirmed state
    /// is too stale to trust.
    pub(crate) fn should_clear_state(&self, now: Timestamp, window: Duration) -> bool {
        match self.disconnected_at {
            Some(at) => now.as_secs().saturating_sub(at.as_secs()) > window.as_secs(),
            None => false,
        }
    }

    /// Forgets every confirmed repository and root event (fresh start).
    pub(crate) fn clear_sync_state(&mut self) {
        self.repos.clear();
        self.root_events.clear();
        self.authors.clear();
        self.announcements_synced = false;
    }

    /// Moves `items` into the confirmed state, as ids of `ids` (the
    /// repository index's). An item without an id is not recorded: every
    /// item is planned from the repository index, which never forgets one.
    pub fn confirm(&mut self, items: &PendingItems, ids: &SyncIds) {
        self.repos
            .extend(items.repos.iter().filter_map(|repo| ids.repo_id(repo)));
        self.root_events
            .extend(items.root_events.iter().filter_map(|id| ids.root_id(id)));
        self.authors.extend(items.authors.iter().copied());
    }

    /// The confirmed items as values, looked up in `ids`.
    pub fn items(&self, ids: &SyncIds) -> PendingItems {
        PendingItems {
            repos: self
                .repos
                .iter()
                .filter_map(|id| ids.repo(*id))
                .cloned()
                .collect(),
            root_events: self
                .root_events
                .iter()
                .filter_map(|id| ids.root_event(*id))
                .copied()
                .collect(),
            authors: self.authors.clone(),
        }
    }
}

/// The relay-centric confirmed index (the spec's `RelaySyncIndex`), in
/// registration order so that every walk over it is deterministic, with
/// which relays are connected (planning skips the others).
#[derive(Clone, Debug, Default)]
pub struct RelaySyncIndex {
    relays: IndexMap<RelayUrl, RelayState>,
    connected: HashSet<RelayUrl>,
}

impl RelaySyncIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `relay` if it is unknown and returns its state. Registering a
    /// known relay as bootstrap marks it bootstrap; it never unmarks.
    pub fn register(&mut self, relay: RelayUrl, is_bootstrap: bool) -> &mut RelayState {
        let state = self
            .relays
            .entry(relay)
            .or_insert_with(|| RelayState::new(is_bootstrap));
        state.is_bootstrap |= is_bootstrap;
        state
    }

    /// The state of `relay`, if registered.
    pub fn get(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.relays.get(relay)
    }

    /// The mutable state of `relay`, if registered.
    pub fn get_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelayState> {
        self.relays.get_mut(relay)
    }

    /// Forgets `relay` entirely (intentional disconnect).
    pub fn remove(&mut self, relay: &RelayUrl) -> Option<RelayState> {
        self.connected.remove(relay);
        self.relays.shift_remove(relay)
    }

    /// Marks registered `relay` connected or not (a relay is registered not
    /// connected); an unregistered relay is ignored.
    pub fn set_connected(&mut self, relay: &RelayUrl, connected: bool) {
        if !connected {
            self.connected.remove(relay);
        } else if self.relays.contains_key(relay) {
            self.connected.insert(relay.clone());
        }
    }

    /// `true` if `relay` is registered and connected.
    pub fn is_connected(&self, relay: &RelayUrl) -> bool {
        self.connected.contains(relay)
    }

    /// Every registered relay and its state, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (&RelayUrl, &RelayState)> {
        self.relays.iter()
    }

    /// Number of registered relays.
    pub fn len(&self) -> usize {
        self.relays.len()
    }

    /// `true` when no relay is registered.
    pub fn is_empty(&self) -> bool {
        self.relays.is_empty()
    }
}

/// The items a batch (or an [`AddFilters`](crate::planner::AddFilters) action)
/// is syncing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingItems {
    /// Repositories (Layer 2).
    pub repos: HashSet<RepoRef>,
    /// Root events (Layer 3).
    pub root_events: HashSet<EventId>,
    /// Participants whose relay lists (kinds 10002, 10317) are read
    /// (GRASP-03 Sync+).
    pub authors: HashSet<PublicKey>,
}

impl PendingItems {
    /// `true` when there are no items.
    pub fn is_empty(&self) -> bool {
        self.repos.is_empty() && self.root_events.is_empty() && self.authors.is_empty()
    }

    /// Number of items of every kind.
    pub(crate) fn len(&self) -> usize {
        self.repos.len() + self.root_events.len() + self.authors.len()
    }

    /// Adds every item of `other`.
    pub(crate) fn extend(&mut self, other: &PendingItems) {
        self.repos.extend(other.repos.iter().cloned());
        self.root_events.extend(other.root_events.iter().copied());
        self.authors.extend(other.authors.iter().copied());
    }
}

/// How a batch's historic sync is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SyncMethod {
    /// REQ until EOSE, with `until` pagination.
    ReqEose,
    /// NIP-77 negentropy set reconciliation.
    Negentropy,
}

/// Identifier of a pending batch, unique within one engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch-{}", self.0)
    }
}

/// A batch of historic sync in flight on one relay: the items it syncs.
/// When the engine confirms it (every job finished and every event stored),
/// its items move to [`RelayState`]; how far its work got is the engine's
/// runtime state, not part of this index.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingBatch {
    /// Unique id, for logs and for matching completions.
    pub batch_id: BatchId,
    /// The items this batch syncs. Fixed once the batch is in a
    /// [`RelayPending`] (or the engine's session's batches): remove and
    /// re-insert a batch to change them.
    pub items: PendingItems,
    /// How the batch syncs.
    pub sync_method: SyncMethod,
    /// When the batch started.
    pub started_at: Instant,
}

impl PendingBatch {
    /// A batch of `items` started at `now`.
    pub fn new(
        batch_id: BatchId,
        items: PendingItems,
        sync_method: SyncMethod,
        now: Instant,
    ) -> Self {
        PendingBatch {
            batch_id,
            items,
            sync_method,
            started_at: now,
        }
    }
}

/// How many batches in flight on one relay sync each item, so that "is this
/// item pending on this relay?" costs O(1) instead of a walk over batches:
/// what planning asks of a relay's batches ([`RelayProgress::pending`]).
/// Kept by whoever holds the batches ([`RelayPending`], or the batches of
/// the engine's session), as batches start and end.
#[derive(Clone, Debug, Default)]
pub struct ItemsInFlight {
    repos: HashMap<RepoRef, u32>,
    root_events: HashMap<EventId, u32>,
    authors: HashMap<PublicKey, u32>,
}

impl ItemsInFlight {
    /// `true` if `author`'s relay lists are pending.
    pub(crate) fn contains_author(&self, author: &PublicKey) -> bool {
        self.authors.contains_key(author)
    }

    /// `true` if `repo` is pending.
    pub(crate) fn contains_repo(&self, repo: &RepoRef) -> bool {
        self.repos.contains_key(repo)
    }

    /// `true` if `root_event` is pending.
    pub(crate) fn contains_root_event(&self, root_event: &EventId) -> bool {
        self.root_events.contains_key(root_event)
    }

    /// The union of the items pending.
    pub(crate) fn items(&self) -> PendingItems {
        PendingItems {
            repos: self.repos.keys().cloned().collect(),
            root_events: self.root_events.keys().copied().collect(),
            authors: self.authors.keys().copied().collect(),
        }
    }

    /// A batch syncing `items` started.
    pub(crate) fn count_in(&mut self, items: &PendingItems) {
        for repo in &items.repos {
            *self.repos.entry(repo.clone()).or_insert(0) += 1;
        }
        for id in &items.root_events {
            *self.root_events.entry(*id).or_insert(0) += 1;
        }
        for author in &items.authors {
            *self.authors.entry(*author).or_insert(0) += 1;
        }
    }

    /// A batch syncing `items` ended.
    pub(crate) fn count_out(&mut self, items: &PendingItems) {
        for repo in &items.repos {
            decrement(&mut self.repos, repo);
        }
        for id in &items.root_events {
            decrement(&mut self.root_events, id);
        }
        for author in &items.authors {
            decrement(&mut self.authors, author);
        }
    }

    /// Every batch ended.
    pub(crate) fn clear(&mut self) {
        self.repos.clear();
        self.root_events.clear();
        self.authors.clear();
    }
}

/// One relay's batches in flight, with the items they sync counted
/// ([`ItemsInFlight`]). [`PendingSyncIndex`] keeps one per relay for
/// planning without an engine (the engine's session keeps its batches with
/// their progress, and the same counts).
#[derive(Clone, Debug, Default)]
pub struct RelayPending {
    batches: Vec<PendingBatch>,
    items: ItemsInFlight,
}

impl RelayPending {
    /// Adds a batch.
    pub(crate) fn insert(&mut self, batch: PendingBatch) {
        self.items.count_in(&batch.items);
        self.batches.push(batch);
    }

    /// The batches in flight, oldest first.
    pub(crate) fn batches(&self) -> &[PendingBatch] {
        &self.batches
    }

    /// Removes a batch (confirmed or failed) and returns it.
    pub(crate) fn remove_batch(&mut self, batch_id: BatchId) -> Option<PendingBatch> {
        let position = self
            .batches
            .iter()
            .position(|batch| batch.batch_id == batch_id)?;
        let batch = self.batches.remove(position);
        self.items.count_out(&batch.items);
        Some(batch)
    }

    /// Removes every batch (disconnect, fresh start, consolidation) and
    /// returns them.
    pub(crate) fn clear(&mut self) -> Vec<PendingBatch> {
        self.items.clear();
        std::mem::take(&mut self.batches)
    }

    /// How many batches sync each item.
    pub(crate) fn in_flight(&self) -> &ItemsInFlight {
        &self.items
    }

    /// `true` if `repo` is pending.
    pub(crate) fn contains_repo(&self, repo: &RepoRef) -> bool {
        self.items.contains_repo(repo)
    }

    /// `true` if `root_event` is pending.
    pub(crate) fn contains_root_event(&self, root_event: &EventId) -> bool {
        self.items.contains_root_event(root_event)
    }

    /// The union of the items pending.
    pub(crate) fn items(&self) -> PendingItems {
        self.items.items()
    }

    /// How many batches are in flight.
    pub(crate) fn len(&self) -> usize {
        self.batches.len()
    }

    /// `true` when no batch is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(key);
        }
    }
}

/// Batches in flight per relay (the spec's `PendingSyncIndex`), for planning
/// without an engine (the engine's session of each relay keeps its batches
/// with their progress, and their [`ItemsInFlight`], in its own map, not in
/// a [`RelayPending`]).
#[derive(Clone, Debug, Default)]
pub struct PendingSyncIndex {
    relays: HashMap<RelayUrl, RelayPending>,
}

impl PendingSyncIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a batch for `relay`.
    pub fn insert(&mut self, relay: RelayUrl, batch: PendingBatch) {
        self.relays.entry(relay).or_default().insert(batch);
    }

    /// The batches in flight on `relay`, oldest first.
    pub fn batches(&self, relay: &RelayUrl) -> &[PendingBatch] {
        self.relays
            .get(relay)
            .map_or(&[][..], RelayPending::batches)
    }

    /// `relay`'s batches in flight, if it has any.
    pub(crate) fn get(&self, relay: &RelayUrl) -> Option<&RelayPending> {
        self.relays.get(relay)
    }

    /// Removes a batch (confirmed or failed) and returns it.
    pub fn remove_batch(&mut self, relay: &RelayUrl, batch_id: BatchId) -> Option<PendingBatch> {
        let pending = self.relays.get_mut(relay)?;
        let batch = pending.remove_batch(batch_id);
        if pending.is_empty() {
            self.relays.remove(relay);
        }
        batch
    }

    /// Removes every batch of `relay` and returns them.
    pub fn clear_relay(&mut self, relay: &RelayUrl) -> Vec<PendingBatch> {
        self.relays
            .remove(relay)
            .map(|mut pending| pending.clear())
            .unwrap_or_default()
    }

    /// `true` if `repo` is pending on `relay`.
    pub fn contains_repo(&self, relay: &RelayUrl, repo: &RepoRef) -> bool {
        self.relays
            .get(relay)
            .is_some_and(|pending| pending.contains_repo(repo))
    }

    /// `true` if `root_event` is pending on `relay`.
    pub fn contains_root_event(&self, relay: &RelayUrl, root_event: &EventId) -> bool {
        self.relays
            .get(relay)
            .is_some_and(|pending| pending.contains_root_event(root_event))
    }

    /// The union of the items pending on `relay`.
    pub fn items(&self, relay: &RelayUrl) -> PendingItems {
        self.relays
            .get(relay)
            .map(RelayPending::items)
            .unwrap_or_default()
    }

    /// Relays with at least one batch in flight.
    pub fn relays(&self) -> impl Iterator<Item = &RelayUrl> {
        self.relays.keys()
    }

    /// Total number of batches in flight.
    pub fn batch_count(&self) -> usize {
        self.relays.values().map(RelayPending::len).sum()
    }
}

/// What the three-way diff of planning asks about a relay: its confirmed
/// state while it is connected, and its batches in flight. The engine
/// answers from its relay sessions; `(&PendingSyncIndex, &RelaySyncIndex)`
/// answers from the spec's two indexes.
pub trait RelayProgress {
    /// `relay`'s confirmed state, if it is tracked and connected.
    fn connected_state(&self, relay: &RelayUrl) -> Option<&RelayState>;
    /// The items of `relay`'s batches in flight, if it has any.
    fn pending(&self, relay: &RelayUrl) -> Option<&ItemsInFlight>;
}

impl RelayProgress for (&PendingSyncIndex, &RelaySyncIndex) {
    fn connected_state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.1.get(relay).filter(|_| self.1.is_connected(relay))
    }

    fn pending(&self, relay: &RelayUrl) -> Option<&ItemsInFlight> {
        self.0.get(relay).map(RelayPending::in_flight)
    }
}

#[cfg(test)]
mod tests;
