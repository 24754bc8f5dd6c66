//! The repository index's storage and its read-only views.
//!
//! Each repository, root event and relay is stored once; everything else
//! holds its number. A relay's target is not stored as a set of root events
//! (that would copy each event once per relay): it is the repositories
//! listing the relay, and their root events are read through them.

use std::collections::{HashMap, HashSet};

use indexmap::IndexSet;
use nostr::prelude::{EventId, RelayUrl};

use crate::model::ids::{RepoId, RootId, SyncIds};
use crate::model::RelaySyncNeeds;
use crate::nip34::RepoRef;

/// Marks a root event of more than one repository in
/// [`Tables::first_repo`]; the others are in [`Tables::more_repos`].
const SHARED: u32 = 1 << 31;

/// What one repository lists and is referenced by.
#[derive(Clone, Debug, Default)]
pub(super) struct RepoEntry {
    /// Positions in [`Tables::relays`] of the relays its announcement lists.
    pub(super) relays: Vec<usize>,
    /// Its root events.
    pub(super) root_events: Vec<RootId>,
}

/// The storage of [`RepoSyncIndex`](super::RepoSyncIndex).
#[derive(Clone, Debug, Default)]
pub(super) struct Tables {
    /// Repository and root event ids.
    pub(super) ids: SyncIds,
    /// Per [`RepoId`].
    pub(super) repos: Vec<RepoEntry>,
    /// Per [`RootId`]: the first repository it references (the common case
    /// is one), with [`SHARED`] set when it references more.
    pub(super) first_repo: Vec<u32>,
    /// The repositories after the first of a root event with [`SHARED`].
    pub(super) more_repos: HashMap<RootId, Vec<RepoId>>,
    /// Every relay some repository lists; a relay no repository lists any
    /// more is removed.
    pub(super) relays: IndexSet<RelayUrl>,
    /// Per relay position: the repositories listing it.
    pub(super) relay_repos: Vec<HashSet<RepoId>>,
}

impl Tables {
    /// The repositories `root` references.
    pub(super) fn repos_of(&self, root: RootId) -> impl Iterator<Item = RepoId> + '_ {
        let first = self.first_repo.get(root.index()).copied();
        let shared = first.is_some_and(|first| first & SHARED != 0);
        let more = shared
            .then(|| self.more_repos.get(&root))
            .flatten()
            .into_iter()
            .flatten()
            .copied();
        first
            .map(|first| RepoId::from_index((first & !SHARED) as usize))
            .into_iter()
            .chain(more)
    }

    /// Records that `root` also references `repo` (not its first).
    pub(super) fn add_repo_of(&mut self, root: RootId, repo: RepoId) {
        if let Some(first) = self.first_repo.get_mut(root.index()) {
            *first |= SHARED;
        }
        self.more_repos.entry(root).or_default().push(repo);
    }

    /// Records the first repository of a new root event.
    pub(super) fn push_first_repo(&mut self, repo: RepoId) {
        self.first_repo.push(repo.index() as u32);
    }

    /// `true` if `repo` lists the relay at `relay`.
    pub(super) fn lists(&self, repo: RepoId, relay: usize) -> bool {
        self.repos
            .get(repo.index())
            .is_some_and(|entry| entry.relays.contains(&relay))
    }

    /// `true` if a repository of `root` other than `repo` lists `relay`.
    pub(super) fn another_repo_lists(&self, root: RootId, repo: RepoId, relay: usize) -> bool {
        self.repos_of(root)
            .any(|other| other != repo && self.lists(other, relay))
    }

    /// `true` if `relay`'s target reaches `root` through `repo` and through
    /// no repository with a lower id (so that a walk over the relay's
    /// repositories meets each root event once).
    fn reaches_first(&self, root: RootId, repo: RepoId, relay: usize) -> bool {
        self.repos_of(root)
            .all(|other| other >= repo || !self.lists(other, relay))
    }

    /// The view of what `relay` (a position) is targeted for.
    pub(super) fn target(&self, relay: usize) -> Option<RelayTarget<'_>> {
        let repos = self.relay_repos.get(relay)?;
        (!repos.is_empty()).then_some(RelayTarget {
            repos: TargetRepos {
                tables: self,
                repos,
            },
            root_events: TargetRootEvents {
                tables: self,
                repos,
                relay,
            },
        })
    }
}

/// Every repository of the index and what we want of it (a view, no copy).
#[derive(Clone, Copy, Debug)]
pub struct Repos<'a> {
    pub(super) tables: &'a Tables,
}

impl<'a> Repos<'a> {
    /// Number of repositories.
    pub fn len(&self) -> usize {
        self.tables.repos.len()
    }

    /// `true` when there is no repository.
    pub fn is_empty(&self) -> bool {
        self.tables.repos.is_empty()
    }

    /// Each repository with what we want of it, in the order they came.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a RepoRef, RepoSyncNeeds<'a>)> + 'a {
        let tables = self.tables;
        (0..tables.repos.len()).filter_map(move |index| {
            let id = RepoId::from_index(index);
            Some((tables.ids.repo(id)?, RepoSyncNeeds::new(tables, id)))
        })
    }

    /// What we want of each repository, in the order they came.
    pub fn values(&self) -> impl Iterator<Item = RepoSyncNeeds<'a>> + 'a {
        self.iter().map(|(_, needs)| needs)
    }
}

impl<'a> IntoIterator for Repos<'a> {
    type Item = (&'a RepoRef, RepoSyncNeeds<'a>);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// What we want to sync for one repository (the spec's `RepoSyncNeeds`; a
/// view of the index, no copy).
#[derive(Clone, Copy, Debug)]
pub struct RepoSyncNeeds<'a> {
    /// Relays listed in this repository's 30617 announcement (after policy).
    pub relays: RepoRelays<'a>,
    /// Root events (1617/1618/1621) that reference this repository.
    pub root_events: RepoRootEvents<'a>,
}

impl<'a> RepoSyncNeeds<'a> {
    pub(super) fn new(tables: &'a Tables, repo: RepoId) -> Self {
        RepoSyncNeeds {
            relays: RepoRelays { tables, repo },
            root_events: RepoRootEvents { tables, repo },
        }
    }
}

/// The relays one repository lists (a view).
#[derive(Clone, Copy, Debug)]
pub struct RepoRelays<'a> {
    tables: &'a Tables,
    repo: RepoId,
}

impl<'a> RepoRelays<'a> {
    fn positions(&self) -> &'a [usize] {
        self.tables
            .repos
            .get(self.repo.index())
            .map_or(&[][..], |entry| entry.relays.as_slice())
    }

    /// Number of relays.
    pub fn len(&self) -> usize {
        self.positions().len()
    }

    /// `true` when the repository lists no relay.
    pub fn is_empty(&self) -> bool {
        self.positions().is_empty()
    }

    /// `true` if the repository lists `relay`.
    pub fn contains(&self, relay: &RelayUrl) -> bool {
        self.tables
            .relays
            .get_index_of(relay)
            .is_some_and(|position| self.positions().contains(&position))
    }

    /// The relays, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a RelayUrl> + 'a {
        let relays = &self.tables.relays;
        self.positions()
            .iter()
            .filter_map(move |position| relays.get_index(*position))
    }
}

/// The root events that reference one repository (a view).
#[derive(Clone, Copy, Debug)]
pub struct RepoRootEvents<'a> {
    tables: &'a Tables,
    repo: RepoId,
}

impl<'a> RepoRootEvents<'a> {
    fn roots(&self) -> &'a [RootId] {
        self.tables
            .repos
            .get(self.repo.index())
            .map_or(&[][..], |entry| entry.root_events.as_slice())
    }

    /// Number of root events.
    pub fn len(&self) -> usize {
        self.roots().len()
    }

    /// `true` when no root event references the repository.
    pub fn is_empty(&self) -> bool {
        self.roots().is_empty()
    }

    /// `true` if `root_event` references the repository.
    pub fn contains(&self, root_event: &EventId) -> bool {
        self.tables
            .ids
            .root_id(root_event)
            .is_some_and(|root| self.tables.repos_of(root).any(|repo| repo == self.repo))
    }

    /// The root events, in the order they came.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a EventId> + 'a {
        let ids = &self.tables.ids;
        self.roots()
            .iter()
            .filter_map(move |root| ids.root_event(*root))
    }
}

/// What to sync from one relay (a view of the index, no copy): the
/// repositories listing it and their root events.
#[derive(Clone, Copy, Debug)]
pub struct RelayTarget<'a> {
    /// Repositories to follow on this relay (Layer 2).
    pub repos: TargetRepos<'a>,
    /// Root events to follow on this relay (Layer 3).
    pub root_events: TargetRootEvents<'a>,
}

impl RelayTarget<'_> {
    /// The same as plain values.
    pub(crate) fn to_needs(self) -> RelaySyncNeeds {
        RelaySyncNeeds {
            repos: self.repos.iter().map(|(_, repo)| repo.clone()).collect(),
            root_events: self.root_events.iter().map(|(_, id)| *id).collect(),
        }
    }
}

/// The repositories a relay is targeted for (a view).
#[derive(Clone, Copy, Debug)]
pub struct TargetRepos<'a> {
    tables: &'a Tables,
    repos: &'a HashSet<RepoId>,
}

impl<'a> TargetRepos<'a> {
    /// Number of repositories.
    pub fn len(&self) -> usize {
        self.repos.len()
    }

    /// `true` when there is none.
    pub fn is_empty(&self) -> bool {
        self.repos.is_empty()
    }

    /// `true` if `repo` is one.
    pub fn contains(&self, repo: &RepoRef) -> bool {
        self.tables
            .ids
            .repo_id(repo)
            .is_some_and(|id| self.repos.contains(&id))
    }

    /// `true` if every one is in `confirmed` (a relay's confirmed ids).
    pub(crate) fn is_subset(&self, confirmed: &HashSet<RepoId>) -> bool {
        self.repos.is_subset(confirmed)
    }

    /// Each repository with its id, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RepoId, &'a RepoRef)> + 'a {
        let ids = &self.tables.ids;
        self.repos
            .iter()
            .filter_map(move |id| Some((*id, ids.repo(*id)?)))
    }
}

impl<'a> IntoIterator for &TargetRepos<'a> {
    type Item = (RepoId, &'a RepoRef);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// The root events a relay is targeted for: those of the repositories
/// listing it (a view, read through the repositories).
#[derive(Clone, Copy, Debug)]
pub struct TargetRootEvents<'a> {
    tables: &'a Tables,
    repos: &'a HashSet<RepoId>,
    relay: usize,
}

impl<'a> TargetRootEvents<'a> {
    /// Each root event with its id, once, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RootId, &'a EventId)> + 'a {
        let (tables, relay) = (self.tables, self.relay);
        self.repos.iter().flat_map(move |repo| {
            let roots = tables
                .repos
                .get(repo.index())
                .map_or(&[][..], |entry| entry.root_events.as_slice());
            roots.iter().filter_map(move |root| {
                if !tables.reaches_first(*root, *repo, relay) {
                    return None;
                }
                Some((*root, tables.ids.root_event(*root)?))
            })
        })
    }

    /// Number of root events (a walk over them).
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// `true` when there is none.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// `true` if `root_event` is one.
    pub fn contains(&self, root_event: &EventId) -> bool {
        self.tables.ids.root_id(root_event).is_some_and(|root| {
            self.tables
                .repos_of(root)
                .any(|repo| self.repos.contains(&repo))
        })
    }

    /// `true` if every one is in `confirmed` (a relay's confirmed ids).
    pub(crate) fn is_subset(&self, confirmed: &HashSet<RootId>) -> bool {
        self.iter().all(|(root, _)| confirmed.contains(&root))
    }
}

impl<'a> IntoIterator for &TargetRootEvents<'a> {
    type Item = (RootId, &'a EventId);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}
