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
//!
//! Each repository and root event is stored once ([`SyncIds`]); relay
//! targets and the confirmed index hold 4-byte ids, and the diff looks items
//! up by id.

mod index;
mod tables;

use std::collections::HashMap;

use indexmap::IndexMap;
use nostr::prelude::{EventId, RelayUrl};

use crate::model::ids::{RepoId, RootId, SyncIds};
use crate::model::{PendingItems, RelayProgress, RelaySyncNeeds};
use crate::nip34::RepoRef;

pub use index::RepoSyncIndex;
pub use tables::{
    RelayTarget, RepoRelays, RepoRootEvents, RepoSyncNeeds, Repos, TargetRepos, TargetRootEvents,
};

/// New Layer 2+3 items to subscribe on one relay: the output of
/// `compute_actions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddFilters {
    /// The relay to subscribe on.
    pub relay: RelayUrl,
    /// The items that are neither pending nor confirmed there.
    pub items: PendingItems,
}

/// How the relay targets changed: which items each relay gained since the
/// last [`RepoSyncIndex::take_changes`], in the order the relays first
/// changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetChanges {
    added: IndexMap<RelayUrl, AddedItems>,
}

/// The items one relay gained, with their ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct AddedItems {
    repos: Vec<(RepoId, RepoRef)>,
    root_events: Vec<(RootId, EventId)>,
}

impl TargetChanges {
    /// `true` when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
    }

    /// The relays whose targets gained items, in the order they first did.
    pub fn relays(&self) -> impl Iterator<Item = &RelayUrl> {
        self.added.keys()
    }

    /// The items `relay` gained (`None` if none).
    pub fn items(&self, relay: &RelayUrl) -> Option<PendingItems> {
        let added = self.added.get(relay)?;
        Some(PendingItems {
            repos: added.repos.iter().map(|(_, repo)| repo.clone()).collect(),
            root_events: added.root_events.iter().map(|(_, id)| *id).collect(),
            authors: Default::default(),
        })
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

/// Inverts repository → relays into relay → (repositories, root events): the
/// full recompute of the spec.
pub fn derive_relay_targets<'a, I>(repos: I) -> HashMap<RelayUrl, RelaySyncNeeds>
where
    I: IntoIterator<Item = (&'a RepoRef, RepoSyncNeeds<'a>)>,
{
    let mut targets: HashMap<RelayUrl, RelaySyncNeeds> = HashMap::new();
    for (repo, needs) in repos {
        for relay in needs.relays.iter() {
            let target = targets.entry(relay.clone()).or_default();
            target.repos.insert(repo.clone());
            target.root_events.extend(needs.root_events.iter().copied());
        }
    }
    targets
}

/// The three-way diff `target − pending − confirmed` for every relay that is
/// connected; relays that are not connected (or not registered) are skipped —
/// they are planned when they connect. Output is sorted by relay URL. `ids`
/// are the repository index's ([`RepoSyncIndex::ids`]), the ids the
/// confirmed index keeps.
pub fn compute_actions(
    targets: &HashMap<RelayUrl, RelaySyncNeeds>,
    ids: &SyncIds,
    progress: &impl RelayProgress,
) -> Vec<AddFilters> {
    let mut relays: Vec<&RelayUrl> = targets.keys().collect();
    relays.sort();
    relays
        .into_iter()
        .filter_map(|relay| {
            let target = &targets[relay];
            diff(
                relay,
                target.repos.iter().map(|repo| (ids.repo_id(repo), repo)),
                target.root_events.iter().map(|id| (ids.root_id(id), id)),
                progress,
            )
        })
        .collect()
}

/// The three-way diff for one relay over the given candidate items (each
/// with its id in the repository index, as a [`RelayTarget`] gives them);
/// `None` when the relay is not connected or nothing is new.
pub fn compute_actions_for_relay<'a, R, E>(
    relay: &RelayUrl,
    repos: R,
    root_events: E,
    progress: &impl RelayProgress,
) -> Option<AddFilters>
where
    R: IntoIterator<Item = (RepoId, &'a RepoRef)>,
    E: IntoIterator<Item = (RootId, &'a EventId)>,
{
    diff(
        relay,
        repos.into_iter().map(|(id, repo)| (Some(id), repo)),
        root_events.into_iter().map(|(id, event)| (Some(id), event)),
        progress,
    )
}

/// The diff over candidates with their ids; an item without an id is not
/// confirmed anywhere.
fn diff<'a>(
    relay: &RelayUrl,
    repos: impl Iterator<Item = (Option<RepoId>, &'a RepoRef)>,
    root_events: impl Iterator<Item = (Option<RootId>, &'a EventId)>,
    progress: &impl RelayProgress,
) -> Option<AddFilters> {
    let state = progress.connected_state(relay)?;
    let pending = progress.pending(relay);
    let items = PendingItems {
        repos: repos
            .filter(|(id, repo)| {
                !id.is_some_and(|id| state.repos.contains(&id))
                    && !pending.is_some_and(|pending| pending.contains_repo(repo))
            })
            .map(|(_, repo)| repo.clone())
            .collect(),
        root_events: root_events
            .filter(|(root, id)| {
                !root.is_some_and(|root| state.root_events.contains(&root))
                    && !pending.is_some_and(|pending| pending.contains_root_event(id))
            })
            .map(|(_, id)| *id)
            .collect(),
        authors: Default::default(),
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
    progress: &impl RelayProgress,
) -> Vec<AddFilters> {
    changes
        .added
        .iter()
        .filter_map(|(relay, items)| {
            compute_actions_for_relay(
                relay,
                items.repos.iter().map(|(id, repo)| (*id, repo)),
                items.root_events.iter().map(|(root, id)| (*root, id)),
                progress,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
