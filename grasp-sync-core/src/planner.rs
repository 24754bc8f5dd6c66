//! What to subscribe where: the repository index with its incrementally
//! maintained relay targets, `derive_relay_targets`, and `compute_actions`,
//! the only decision point for new Layer 2+3 subscriptions.
//!
//! The spec recomputes `derive_relay_targets` over every repository and diffs
//! every relay on each trigger. [`RepoSyncIndex`] instead keeps the relay
//! targets up to date as announcements and root events arrive, and records
//! what each change added ([`TargetChanges`]). Re-planning after one new root
//! event then costs a look at that event on the relays of its repositories —
//! not a walk over every repository ([`compute_actions_for_changes`]). The full
//! recompute ([`derive_relay_targets`] + [`compute_actions`]) stays available
//! and is what the incremental path is tested against.

use std::collections::{HashMap, HashSet};

use indexmap::IndexMap;
use nostr::prelude::{EventId, RelayUrl};

use crate::model::{PendingItems, PendingSyncIndex, RelaySyncIndex, RelaySyncNeeds, RepoSyncNeeds};
use crate::nip34::RepoRef;

/// New Layer 2+3 items to subscribe on one relay: the output of
/// `compute_actions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddFilters {
    /// The relay to subscribe on.
    pub relay: RelayUrl,
    /// The items that are neither pending nor confirmed there.
    pub items: PendingItems,
}

/// How the relay targets changed: which relays were added to or dropped from
/// the targets, and which items each relay gained since the last
/// [`RepoSyncIndex::take_changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetChanges {
    /// Items each relay gained, in the order the relays first changed.
    pub added: IndexMap<RelayUrl, PendingItems>,
}

impl TargetChanges {
    /// `true` when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
    }
}

/// Which relays a repository gained or lost when its announcement changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayListChange {
    /// Relays the repository now lists and did not before.
    pub added: Vec<RelayUrl>,
    /// Relays the repository no longer lists.
    pub removed: Vec<RelayUrl>,
}

/// What we want to sync (the spec's `RepoSyncIndex`), with the relay-centric
/// targets kept up to date incrementally.
///
/// Invariant (checked by the property tests): [`RepoSyncIndex::targets`]
/// always equals [`derive_relay_targets`] over [`RepoSyncIndex::repos`].
#[derive(Clone, Debug, Default)]
pub struct RepoSyncIndex {
    repos: IndexMap<RepoRef, RepoSyncNeeds>,
    /// For each root event, the positions in `repos` of the repositories it
    /// references (almost always one), to know whether a relay still needs
    /// the event when one repository drops that relay.
    event_repos: HashMap<EventId, Vec<usize>>,
    targets: HashMap<RelayUrl, RelaySyncNeeds>,
    changes: TargetChanges,
}

impl RepoSyncIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every repository and what we want of it.
    pub fn repos(&self) -> &IndexMap<RepoRef, RepoSyncNeeds> {
        &self.repos
    }

    /// What we want of `repo`, if known.
    pub fn repo(&self, repo: &RepoRef) -> Option<&RepoSyncNeeds> {
        self.repos.get(repo)
    }

    /// The relay-centric view: what to sync from each relay.
    pub fn targets(&self) -> &HashMap<RelayUrl, RelaySyncNeeds> {
        &self.targets
    }

    /// What to sync from `relay` (None if no repository lists it).
    pub fn target(&self, relay: &RelayUrl) -> Option<&RelaySyncNeeds> {
        self.targets.get(relay)
    }

    /// Returns and forgets the items added to the targets since the last call.
    pub fn take_changes(&mut self) -> TargetChanges {
        std::mem::take(&mut self.changes)
    }

    /// Records that `repo`'s announcement lists exactly `relays` (a newer
    /// announcement replaces the older list). Returns which relays the
    /// repository gained and lost.
    pub fn set_repo_relays<I>(&mut self, repo: &RepoRef, relays: I) -> RelayListChange
    where
        I: IntoIterator<Item = RelayUrl>,
    {
        let new_relays: HashSet<RelayUrl> = relays.into_iter().collect();
        let position = self.repo_position(repo);
        let old_relays = self.repos[position].relays.clone();
        let mut change = RelayListChange::default();
        for relay in sorted(new_relays.difference(&old_relays)) {
            self.add_repo_to_relay(position, &relay);
            change.added.push(relay);
        }
        for relay in sorted(old_relays.difference(&new_relays)) {
            self.remove_repo_from_relay(position, &relay);
            change.removed.push(relay);
        }
        self.repos[position].relays = new_relays;
        change
    }

    /// Records that `root_event` references `repo`. Returns `true` if this is
    /// new. A root event may arrive before its repository's announcement; it
    /// is kept and targeted once the announcement lists relays.
    pub fn add_root_event(&mut self, repo: &RepoRef, root_event: EventId) -> bool {
        let position = self.repo_position(repo);
        if !self.repos[position].root_events.insert(root_event) {
            return false;
        }
        self.event_repos
            .entry(root_event)
            .or_default()
            .push(position);
        let relays: Vec<RelayUrl> = self.repos[position].relays.iter().cloned().collect();
        for relay in relays {
            self.target_root_event(&relay, root_event);
        }
        true
    }

    fn repo_position(&mut self, repo: &RepoRef) -> usize {
        match self.repos.get_index_of(repo) {
            Some(position) => position,
            None => {
                self.repos
                    .insert_full(repo.clone(), RepoSyncNeeds::default())
                    .0
            }
        }
    }

    fn add_repo_to_relay(&mut self, position: usize, relay: &RelayUrl) {
        let (repo, needs) = match self.repos.get_index(position) {
            Some(entry) => entry,
            None => return,
        };
        let repo = repo.clone();
        let root_events: Vec<EventId> = needs.root_events.iter().copied().collect();
        let target = self.targets.entry(relay.clone()).or_default();
        if target.repos.insert(repo.clone()) {
            self.changes
                .added
                .entry(relay.clone())
                .or_default()
                .repos
                .insert(repo);
        }
        for id in root_events {
            self.target_root_event(relay, id);
        }
    }

    fn target_root_event(&mut self, relay: &RelayUrl, root_event: EventId) {
        let target = self.targets.entry(relay.clone()).or_default();
        if target.root_events.insert(root_event) {
            self.changes
                .added
                .entry(relay.clone())
                .or_default()
                .root_events
                .insert(root_event);
        }
    }

    fn remove_repo_from_relay(&mut self, position: usize, relay: &RelayUrl) {
        let (repo, needs) = match self.repos.get_index(position) {
            Some(entry) => entry,
            None => return,
        };
        let orphaned: Vec<EventId> = needs
            .root_events
            .iter()
            .copied()
            .filter(|id| !self.another_repo_lists(*id, position, relay))
            .collect();
        let repo = repo.clone();
        if let Some(target) = self.targets.get_mut(relay) {
            target.repos.remove(&repo);
            for id in &orphaned {
                target.root_events.remove(id);
            }
            if target.is_empty() {
                self.targets.remove(relay);
            }
        }
        if let Some(added) = self.changes.added.get_mut(relay) {
            added.repos.remove(&repo);
            for id in &orphaned {
                added.root_events.remove(id);
            }
            if added.is_empty() {
                self.changes.added.shift_remove(relay);
            }
        }
    }

    /// `true` if a repository other than the one at `position` references
    /// `root_event` and lists `relay`.
    fn another_repo_lists(&self, root_event: EventId, position: usize, relay: &RelayUrl) -> bool {
        self.event_repos.get(&root_event).is_some_and(|positions| {
            positions.iter().any(|&other| {
                other != position
                    && self
                        .repos
                        .get_index(other)
                        .is_some_and(|(_, needs)| needs.relays.contains(relay))
            })
        })
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

/// Inverts repository → relays into relay → (repositories, root events): the
/// full recompute of the spec.
pub fn derive_relay_targets<'a, I>(repos: I) -> HashMap<RelayUrl, RelaySyncNeeds>
where
    I: IntoIterator<Item = (&'a RepoRef, &'a RepoSyncNeeds)>,
{
    let mut targets: HashMap<RelayUrl, RelaySyncNeeds> = HashMap::new();
    for (repo, needs) in repos {
        for relay in &needs.relays {
            let target = targets.entry(relay.clone()).or_default();
            target.repos.insert(repo.clone());
            target.root_events.extend(needs.root_events.iter().copied());
        }
    }
    targets
}

/// The three-way diff `target − pending − confirmed` for every relay that is
/// connected; relays that are not connected (or not registered) are skipped —
/// they are planned when they connect. Output is sorted by relay URL.
pub fn compute_actions(
    targets: &HashMap<RelayUrl, RelaySyncNeeds>,
    pending: &PendingSyncIndex,
    confirmed: &RelaySyncIndex,
) -> Vec<AddFilters> {
    let mut relays: Vec<&RelayUrl> = targets.keys().collect();
    relays.sort();
    relays
        .into_iter()
        .filter_map(|relay| {
            let target = &targets[relay];
            compute_actions_for_relay(
                relay,
                &target.repos,
                &target.root_events,
                pending,
                confirmed,
            )
        })
        .collect()
}

/// The three-way diff for one relay over the given candidate items; `None`
/// when the relay is not connected or nothing is new.
pub fn compute_actions_for_relay<'a, R, E>(
    relay: &RelayUrl,
    repos: R,
    root_events: E,
    pending: &PendingSyncIndex,
    confirmed: &RelaySyncIndex,
) -> Option<AddFilters>
where
    R: IntoIterator<Item = &'a RepoRef>,
    E: IntoIterator<Item = &'a EventId>,
{
    let state = confirmed.get(relay).filter(|state| state.is_connected())?;
    let items = PendingItems {
        repos: repos
            .into_iter()
            .filter(|repo| !state.repos.contains(*repo) && !pending.contains_repo(relay, repo))
            .cloned()
            .collect(),
        root_events: root_events
            .into_iter()
            .filter(|id| {
                !state.root_events.contains(*id) && !pending.contains_root_event(relay, id)
            })
            .copied()
            .collect(),
    };
    (!items.is_empty()).then(|| AddFilters {
        relay: relay.clone(),
        items,
    })
}

/// The three-way diff restricted to what changed
/// ([`RepoSyncIndex::take_changes`]): the same answer `compute_actions` would
/// give for those items, at a cost proportional to the change.
pub fn compute_actions_for_changes(
    changes: &TargetChanges,
    pending: &PendingSyncIndex,
    confirmed: &RelaySyncIndex,
) -> Vec<AddFilters> {
    changes
        .added
        .iter()
        .filter_map(|(relay, items)| {
            compute_actions_for_relay(relay, &items.repos, &items.root_events, pending, confirmed)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Instant;
    use crate::model::{BatchId, ConnectionStatus, PendingBatch, SyncMethod};
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
            index.register(relay(*n), false).connection_status = ConnectionStatus::Connected;
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
        assert_eq!(index.targets(), &derive_relay_targets(index.repos()));
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
        let added = &changes.added[&relay(1)];
        assert!(added.repos.contains(&repo(1)) && added.root_events.contains(&id(7)));
        assert!(index.take_changes().is_empty());
        index.add_root_event(&repo(1), id(8));
        let changes = index.take_changes();
        assert_eq!(changes.added[&relay(1)].len(), 1);
    }

    #[test]
    fn compute_actions_subtracts_pending_and_confirmed() {
        let mut index = RepoSyncIndex::new();
        index.set_repo_relays(&repo(1), [relay(1)]);
        index.set_repo_relays(&repo(2), [relay(1)]);
        index.set_repo_relays(&repo(3), [relay(1)]);
        let mut confirmed = connected(&[1]);
        confirmed.get_mut(&relay(1)).unwrap().repos.insert(repo(1));
        let mut pending = PendingSyncIndex::new();
        let items = PendingItems {
            repos: [repo(2)].into(),
            ..Default::default()
        };
        pending.insert(
            relay(1),
            PendingBatch::new(BatchId(1), items, SyncMethod::ReqEose, Instant::ZERO),
        );
        let actions = compute_actions(index.targets(), &pending, &confirmed);
        assert_eq!(actions.len(), 1);
        assert_eq!(actions[0].items.repos, [repo(3)].into());
    }

    #[test]
    fn compute_actions_skips_relays_that_are_not_connected() {
        let mut index = RepoSyncIndex::new();
        index.set_repo_relays(&repo(1), [relay(1), relay(2), relay(3)]);
        let mut confirmed = connected(&[1]);
        confirmed.register(relay(2), false).connection_status = ConnectionStatus::Connecting;
        let actions = compute_actions(index.targets(), &PendingSyncIndex::new(), &confirmed);
        let relays: Vec<_> = actions.iter().map(|a| a.relay.clone()).collect();
        assert_eq!(
            relays,
            vec![relay(1)],
            "connecting and unregistered relays are skipped"
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
            &PendingSyncIndex::new(),
            &confirmed,
        );
        assert_eq!(first[0].items.repos.len(), 50);
        index.add_root_event(&repo(3), id(9));
        let second = compute_actions_for_changes(
            &index.take_changes(),
            &PendingSyncIndex::new(),
            &confirmed,
        );
        assert_eq!(second.len(), 1);
        assert!(
            second[0].items.repos.is_empty(),
            "unchanged repos are not looked at again"
        );
        assert_eq!(second[0].items.root_events, [id(9)].into());
    }
}
