//! [`RepoSyncIndex`]: announcements and root events in; relay targets, and
//! what each change added to them, out.

use std::collections::{HashMap, HashSet};

use indexmap::{IndexMap, IndexSet};
use nostr::prelude::{EventId, RelayUrl};

use super::tables::{RelayTarget, RepoEntry, RepoSyncNeeds, Repos, Tables};
use super::{AddedItems, RelayListChange, TargetChanges};
use crate::model::ids::{RepoId, RootId, SyncIds};
use crate::model::RelaySyncNeeds;
use crate::nip34::RepoRef;

/// What one relay's target gained since the last
/// [`RepoSyncIndex::take_changes`], as ids.
#[derive(Clone, Debug, Default)]
struct Gained {
    repos: HashSet<RepoId>,
    root_events: HashSet<RootId>,
}

impl Gained {
    fn is_empty(&self) -> bool {
        self.repos.is_empty() && self.root_events.is_empty()
    }
}

/// What we want to sync (the spec's `RepoSyncIndex`), with the relay-centric
/// targets kept up to date incrementally.
///
/// Each repository, root event and relay is stored once; a relay's target
/// is the repositories listing it, read through to their root events
/// ([`RelayTarget`]), so a root event costs the same however many relays
/// want it. Its ids ([`RepoSyncIndex::ids`]) are what the confirmed index
/// keeps.
///
/// Invariant (checked by the property tests): [`RepoSyncIndex::targets`]
/// always equals [`derive_relay_targets`](super::derive_relay_targets) over
/// [`RepoSyncIndex::repos`].
#[derive(Clone, Debug, Default)]
pub struct RepoSyncIndex {
    tables: Tables,
    /// Keyed by URL: a relay's position changes when another is forgotten.
    changes: IndexMap<RelayUrl, Gained>,
}

impl RepoSyncIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ids of every repository and root event the index knows (never
    /// forgotten): what [`RelayState`](crate::model::RelayState) keeps.
    pub fn ids(&self) -> &SyncIds {
        &self.tables.ids
    }

    /// Every repository and what we want of it.
    pub fn repos(&self) -> Repos<'_> {
        Repos {
            tables: &self.tables,
        }
    }

    /// What we want of `repo`, if known.
    pub fn repo(&self, repo: &RepoRef) -> Option<RepoSyncNeeds<'_>> {
        let id = self.tables.ids.repo_id(repo)?;
        Some(RepoSyncNeeds::new(&self.tables, id))
    }

    /// The relay-centric view as plain values: what to sync from each relay.
    /// Copies every target (for tests and the full recompute); the engine
    /// reads one relay with [`RepoSyncIndex::target`].
    pub fn targets(&self) -> HashMap<RelayUrl, RelaySyncNeeds> {
        (0..self.tables.relays.len())
            .filter_map(|position| {
                let url = self.tables.relays.get_index(position)?;
                Some((url.clone(), self.tables.target(position)?.to_needs()))
            })
            .collect()
    }

    /// The repositories `root_event` references (none if it is unknown).
    pub fn repos_of_root_event(&self, root_event: &EventId) -> Vec<RepoRef> {
        let Some(root) = self.tables.ids.root_id(root_event) else {
            return Vec::new();
        };
        (self.tables.repos_of(root))
            .filter_map(|repo| self.tables.ids.repo(repo).cloned())
            .collect()
    }

    /// What to sync from `relay` (None if no repository lists it).
    pub fn target(&self, relay: &RelayUrl) -> Option<RelayTarget<'_>> {
        self.tables.target(self.tables.relays.get_index_of(relay)?)
    }

    /// Returns and forgets the items added to the targets since the last call.
    pub fn take_changes(&mut self) -> TargetChanges {
        let ids = &self.tables.ids;
        let added = std::mem::take(&mut self.changes)
            .into_iter()
            .map(|(relay, gained)| {
                let items = AddedItems {
                    repos: (gained.repos.into_iter())
                        .filter_map(|id| Some((id, ids.repo(id)?.clone())))
                        .collect(),
                    root_events: (gained.root_events.into_iter())
                        .filter_map(|id| Some((id, *ids.root_event(id)?)))
                        .collect(),
                };
                (relay, items)
            })
            .collect();
        TargetChanges { added }
    }

    /// Records that `repo`'s announcement lists exactly `relays` (a newer
    /// announcement replaces the older list). Returns which relays the
    /// repository gained and lost.
    pub fn set_repo_relays<I>(&mut self, repo: &RepoRef, relays: I) -> RelayListChange
    where
        I: IntoIterator<Item = RelayUrl>,
    {
        let new_relays: HashSet<RelayUrl> = relays.into_iter().collect();
        let id = self.intern_repo(repo);
        let old_relays: HashSet<RelayUrl> = RepoSyncNeeds::new(&self.tables, id)
            .relays
            .iter()
            .cloned()
            .collect();
        let mut positions = self.tables.repos[id.index()].relays.clone();
        let mut change = RelayListChange::default();
        for relay in sorted(new_relays.difference(&old_relays)) {
            let position = self.intern_relay(&relay);
            self.add_repo_to_relay(id, position);
            positions.push(position);
            change.added.push(relay);
        }
        let mut emptied = Vec::new();
        for relay in sorted(old_relays.difference(&new_relays)) {
            if let Some(position) = self.tables.relays.get_index_of(&relay) {
                self.remove_repo_from_relay(id, position);
                positions.retain(|listed| *listed != position);
                if self.tables.relay_repos[position].is_empty() {
                    emptied.push(position);
                }
            }
            change.removed.push(relay);
        }
        self.tables.repos[id.index()].relays = positions;
        // Highest first: forgetting one moves the last relay into its place.
        emptied.sort_unstable_by(|a, b| b.cmp(a));
        for position in emptied {
            self.forget_relay(position);
        }
        change
    }

    /// Records that `root_event` references `repo`. Returns `true` if this is
    /// new. A root event may arrive before its repository's announcement; it
    /// is kept and targeted once the announcement lists relays.
    pub fn add_root_event(&mut self, repo: &RepoRef, root_event: EventId) -> bool {
        let id = self.intern_repo(repo);
        let (root, new) = self.tables.ids.intern_root_event(root_event);
        if new {
            self.tables.push_first_repo(id);
        } else if self.tables.repos_of(root).any(|other| other == id) {
            return false;
        } else {
            self.tables.add_repo_of(root, id);
        }
        self.tables.repos[id.index()].root_events.push(root);
        for listed in 0..self.tables.repos[id.index()].relays.len() {
            let relay = self.tables.repos[id.index()].relays[listed];
            if !self.tables.another_repo_lists(root, id, relay) {
                gained(&mut self.changes, &self.tables.relays, relay)
                    .root_events
                    .insert(root);
            }
        }
        true
    }

    fn intern_repo(&mut self, repo: &RepoRef) -> RepoId {
        let (id, new) = self.tables.ids.intern_repo(repo);
        if new {
            self.tables.repos.push(RepoEntry::default());
        }
        id
    }

    fn intern_relay(&mut self, relay: &RelayUrl) -> usize {
        if let Some(position) = self.tables.relays.get_index_of(relay) {
            return position;
        }
        let (position, _) = self.tables.relays.insert_full(relay.clone());
        self.tables.relay_repos.push(HashSet::new());
        position
    }

    /// `repo` now lists the relay at `relay`: the relay's target gains it
    /// and each of its root events no other repository brought there.
    fn add_repo_to_relay(&mut self, repo: RepoId, relay: usize) {
        if self.tables.relay_repos[relay].insert(repo) {
            gained(&mut self.changes, &self.tables.relays, relay)
                .repos
                .insert(repo);
        }
        for listed in 0..self.tables.repos[repo.index()].root_events.len() {
            let root = self.tables.repos[repo.index()].root_events[listed];
            if !self.tables.another_repo_lists(root, repo, relay) {
                gained(&mut self.changes, &self.tables.relays, relay)
                    .root_events
                    .insert(root);
            }
        }
    }

    /// `repo` no longer lists the relay at `relay`: the relay's target loses
    /// it and each of its root events no other repository keeps there.
    fn remove_repo_from_relay(&mut self, repo: RepoId, relay: usize) {
        self.tables.relay_repos[relay].remove(&repo);
        let Some(url) = self.tables.relays.get_index(relay) else {
            return;
        };
        let Some(added) = self.changes.get_mut(url) else {
            return;
        };
        added.repos.remove(&repo);
        for root in &self.tables.repos[repo.index()].root_events {
            if !self.tables.another_repo_lists(*root, repo, relay) {
                added.root_events.remove(root);
            }
        }
        if added.is_empty() {
            self.changes.shift_remove(url);
        }
    }

    /// Forgets the relay at `position`, which no repository lists; the last
    /// relay takes its position.
    fn forget_relay(&mut self, position: usize) {
        let Tables {
            repos,
            relays,
            relay_repos,
            ..
        } = &mut self.tables;
        let last = relays.len().saturating_sub(1);
        relays.swap_remove_index(position);
        relay_repos.swap_remove(position);
        if position == last {
            return;
        }
        for repo in relay_repos.get(position).into_iter().flatten() {
            for listed in &mut repos[repo.index()].relays {
                if *listed == last {
                    *listed = position;
                }
            }
        }
    }
}

/// The gains of the relay at `relay`, made if there are none yet.
fn gained<'a>(
    changes: &'a mut IndexMap<RelayUrl, Gained>,
    relays: &IndexSet<RelayUrl>,
    relay: usize,
) -> &'a mut Gained {
    let url = &relays[relay];
    match changes.get_index_of(url) {
        Some(index) => &mut changes[index],
        None => changes.entry(url.clone()).or_default(),
    }
}

fn sorted<'a, I>(relays: I) -> Vec<RelayUrl>
where
    I: Iterator<Item = &'a RelayUrl>,
{
    let mut relays: Vec<RelayUrl> = relays.cloned().collect();
    relays.sort();
    relays
}
