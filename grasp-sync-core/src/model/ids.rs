//! Shared ids: each repository and root event the sync indexes track is
//! stored once, here, and known everywhere else by a 4-byte number.
//!
//! A root event is wanted from every relay its repositories list and
//! confirmed per relay, so a 32-byte [`EventId`] kept in each of those sets
//! would be copied once per relay. [`SyncIds`] interns it once
//! ([`RootId`]); the per-relay and per-repository sets hold the number. Ids
//! are never forgotten (the repository index never forgets an item either),
//! so an id stays valid, and means the same item, for the index's lifetime.

use indexmap::IndexSet;
use nostr::prelude::EventId;

use crate::nip34::RepoRef;

/// The number of a repository in a [`SyncIds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoId(u32);

/// The number of a root event in a [`SyncIds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RootId(u32);

impl RepoId {
    /// The position of the repository in its [`SyncIds`], from 0.
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }

    /// The id at `index` (a position a [`SyncIds`] gave).
    pub(crate) fn from_index(index: usize) -> Self {
        RepoId(number(index))
    }
}

impl RootId {
    /// The position of the root event in its [`SyncIds`], from 0.
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// The number of the item at `position`. Ids stay below 2^31 so that users
/// may keep a flag in the top bit.
fn number(position: usize) -> u32 {
    u32::try_from(position)
        .ok()
        .filter(|number| *number < 1 << 31)
        .expect("fewer than 2^31 repositories or root events")
}

/// The id tables: repository ⇄ [`RepoId`] and root event ⇄ [`RootId`], each
/// item stored once. Owned by the repository index
/// ([`RepoSyncIndex::ids`](crate::planner::RepoSyncIndex::ids)); the
/// confirmed index ([`RelaySyncIndex`](super::RelaySyncIndex)) keeps ids of
/// this table.
#[derive(Clone, Debug, Default)]
pub struct SyncIds {
    repos: IndexSet<RepoRef>,
    root_events: IndexSet<EventId>,
}

impl SyncIds {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `repo`, giving it the next one if it has none yet; `true`
    /// when it is new.
    pub(crate) fn intern_repo(&mut self, repo: &RepoRef) -> (RepoId, bool) {
        match self.repos.get_index_of(repo) {
            Some(position) => (RepoId(number(position)), false),
            None => {
                let (position, _) = self.repos.insert_full(repo.clone());
                (RepoId(number(position)), true)
            }
        }
    }

    /// The id of `root_event`, giving it the next one if it has none yet;
    /// `true` when it is new.
    pub(crate) fn intern_root_event(&mut self, root_event: EventId) -> (RootId, bool) {
        let (position, new) = self.root_events.insert_full(root_event);
        (RootId(number(position)), new)
    }

    /// The id of `repo`, if it has one.
    pub fn repo_id(&self, repo: &RepoRef) -> Option<RepoId> {
        self.repos
            .get_index_of(repo)
            .map(|position| RepoId(number(position)))
    }

    /// The id of `root_event`, if it has one.
    pub fn root_id(&self, root_event: &EventId) -> Option<RootId> {
        self.root_events
            .get_index_of(root_event)
            .map(|position| RootId(number(position)))
    }

    /// The repository numbered `id` (`None` if this table never gave it).
    pub(crate) fn repo(&self, id: RepoId) -> Option<&RepoRef> {
        self.repos.get_index(id.index())
    }

    /// The root event numbered `id` (`None` if this table never gave it).
    pub(crate) fn root_event(&self, id: RootId) -> Option<&EventId> {
        self.root_events.get_index(id.index())
    }

    /// Number of repositories with an id.
    pub fn repo_count(&self) -> usize {
        self.repos.len()
    }

    /// Number of root events with an id.
    pub fn root_event_count(&self) -> usize {
        self.root_events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{Keys, SecretKey};

    fn repo(n: u8) -> RepoRef {
        let mut bytes = [0u8; 32];
        bytes[31] = 3;
        let pubkey = Keys::new(SecretKey::from_slice(&bytes).unwrap()).public_key();
        RepoRef::new(pubkey, format!("r{n}")).unwrap()
    }

    #[test]
    fn each_item_gets_one_id_for_good() {
        let mut ids = SyncIds::new();
        let a = EventId::from_byte_array([1; 32]);
        let b = EventId::from_byte_array([2; 32]);
        assert_eq!(ids.intern_root_event(a), (RootId(0), true));
        assert_eq!(ids.intern_root_event(b), (RootId(1), true));
        assert_eq!(ids.intern_root_event(a), (RootId(0), false));
        assert_eq!(ids.root_id(&b), Some(RootId(1)));
        assert_eq!(ids.root_event(RootId(1)), Some(&b));
        assert_eq!(ids.root_event(RootId(2)), None);
        assert_eq!(ids.intern_repo(&repo(1)), (RepoId(0), true));
        assert_eq!(ids.intern_repo(&repo(1)), (RepoId(0), false));
        assert_eq!(ids.repo_id(&repo(2)), None);
        assert_eq!(ids.repo(RepoId(0)), Some(&repo(1)));
        assert_eq!((ids.repo_count(), ids.root_event_count()), (1, 2));
    }
}
