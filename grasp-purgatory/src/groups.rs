//! Repositories synced as one group: the owners of one identifier scheduled together
//! ([`Purgatory::schedule_identifier`](crate::Purgatory::schedule_identifier)).
//!
//! Each member stays a repository of its own (its queue entry, clone URLs, local
//! repository, disk quota). What the group adds: the members' main syncs take turns
//! ([`SyncGroups::turn`]), and each object fetched into a member's local repository is
//! recorded ([`SyncGroups::fetched`]), so that a member that needs it next copies it
//! from there ([`SyncGroups::sources`]) instead of asking a server again. Objects shared
//! between the owners are fetched once. A member waits for its turn at most
//! [`TURN_WAIT`], then syncs on its own: strangers who announce the same identifier
//! (each a member) cannot hold an honest owner's sync back longer than that, however
//! many they are or however slow their servers. The turns are those of the main sync; a
//! throttled domain's queue serves a member without waiting for them (it copies what
//! was fetched before its turn in the queue, but two members served side by side by
//! one domain may both fetch an object neither had yet).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use grasp_sync_core::nip34::{GitOid, RepoRef};
use tokio::sync::OwnedMutexGuard;

/// The longest a member waits for its group's turn before it syncs on its own
/// (fetching what the member before it may be fetching still).
pub(crate) const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The groups, by identifier.
#[derive(Debug, Default)]
pub(crate) struct SyncGroups {
    groups: Mutex<BTreeMap<String, Group>>,
}

/// The owners of one identifier, synced together.
#[derive(Debug, Default)]
struct Group {
    members: BTreeSet<RepoRef>,
    /// Held by the member whose main sync runs.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Each object fetched into a member's local repository, with the first member it
    /// was fetched into (bounded by what the members' held events need; forgotten with
    /// the group).
    fetched: BTreeMap<GitOid, RepoRef>,
}

impl SyncGroups {
    /// `members` (the owners of `identifier`) are synced as one group from now on;
    /// fewer than two make no group (one that was is forgotten). A group that exists
    /// keeps its turn and what its members fetched.
    pub(crate) fn set(&self, identifier: &str, members: &[RepoRef]) {
        let members: BTreeSet<RepoRef> = members
            .iter()
            .filter(|repo| repo.identifier() == identifier)
            .cloned()
            .collect();
        let mut groups = self.lock();
        if members.len() < 2 {
            groups.remove(identifier);
            return;
        }
        let group = groups.entry(identifier.to_owned()).or_default();
        group.fetched.retain(|_, holder| members.contains(holder));
        group.members = members;
    }

    /// Waits for `repo`'s turn among its group, at most [`TURN_WAIT`]: the guard ends
    /// it. `None` at once when it is in no group, or after the wait (it syncs on its
    /// own).
    pub(crate) async fn turn(&self, repo: &RepoRef) -> Option<OwnedMutexGuard<()>> {
        let turn = {
            let groups = self.lock();
            let group = groups
                .get(repo.identifier())
                .filter(|group| group.members.contains(repo))?;
            Arc::clone(&group.turn)
        };
        match tokio::time::timeout(TURN_WAIT, turn.lock_owned()).await {
            Ok(guard) => Some(guard),
            Err(_) => {
                tracing::debug!(%repo, "its group's turn did not come in time; syncing on its own");
                None
            }
        }
    }

    /// Records that `oids` were fetched into `repo`'s local repository (nothing when
    /// `repo` is in no group).
    pub(crate) fn fetched<'a>(&self, repo: &RepoRef, oids: impl IntoIterator<Item = &'a GitOid>) {
        let mut groups = self.lock();
        let Some(group) = groups
            .get_mut(repo.identifier())
            .filter(|group| group.members.contains(repo))
        else {
            return;
        };
        for oid in oids {
            group
                .fetched
                .entry(oid.clone())
                .or_insert_with(|| repo.clone());
        }
    }

    /// Which other members of `repo`'s group each of `oids` was fetched into, by
    /// member (empty when `repo` is in no group or none was).
    pub(crate) fn sources(
        &self,
        repo: &RepoRef,
        oids: &BTreeSet<GitOid>,
    ) -> BTreeMap<RepoRef, Vec<GitOid>> {
        let groups = self.lock();
        let Some(group) = groups
            .get(repo.identifier())
            .filter(|group| group.members.contains(repo))
        else {
            return BTreeMap::new();
        };
        let mut sources: BTreeMap<RepoRef, Vec<GitOid>> = BTreeMap::new();
        for oid in oids {
            if let Some(holder) = group.fetched.get(oid).filter(|holder| *holder != repo) {
                sources.entry(holder.clone()).or_default().push(oid.clone());
            }
        }
        sources
    }

    /// Forgets the groups none of whose members `keep` (nothing of them queued or
    /// held any more).
    pub(crate) fn retain(&self, keep: impl Fn(&RepoRef) -> bool) {
        self.lock()
            .retain(|_, group| group.members.iter().any(&keep));
    }

    /// The members of `identifier`'s group (empty when there is none).
    #[cfg(test)]
    pub(crate) fn members(&self, identifier: &str) -> Vec<RepoRef> {
        self.lock()
            .get(identifier)
            .map(|group| group.members.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Group>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use nostr::prelude::Keys;

    use super::*;

    fn owner(identifier: &str) -> RepoRef {
        RepoRef::new(Keys::generate().public_key(), identifier).unwrap()
    }

    fn oid(n: u8) -> GitOid {
        GitOid::parse(&format!("{n:040x}")).unwrap()
    }

    #[test]
    fn an_object_fetched_for_one_member_is_copied_by_the_others_only() {
        let groups = SyncGroups::default();
        let (a, b, stranger) = (owner("r"), owner("r"), owner("r"));
        groups.set("r", &[a.clone(), b.clone()]);
        groups.fetched(&a, &[oid(1)]);
        groups.fetched(&b, &[oid(1), oid(2)]);
        let wanted = BTreeSet::from([oid(1), oid(2), oid(3)]);
        assert_eq!(
            groups.sources(&b, &wanted),
            BTreeMap::from([(a.clone(), vec![oid(1)])]),
            "b copies what a fetched first; its own objects are not sources"
        );
        assert_eq!(
            groups.sources(&a, &wanted),
            BTreeMap::from([(b.clone(), vec![oid(2)])])
        );
        assert!(
            groups.sources(&stranger, &wanted).is_empty(),
            "a repository in no group copies nothing"
        );
        groups.fetched(&stranger, &[oid(3)]);
        assert!(
            groups
                .sources(&a, &wanted)
                .values()
                .flatten()
                .all(|o| *o != oid(3)),
            "a fetch outside the group is not recorded"
        );
    }

    #[test]
    fn one_owner_makes_no_group_and_a_group_lasts_while_a_member_is_kept() {
        let groups = SyncGroups::default();
        let (a, b) = (owner("r"), owner("r"));
        groups.set("r", std::slice::from_ref(&a));
        assert!(groups.members("r").is_empty(), "one owner: no group");
        groups.set("r", &[a.clone(), b.clone(), owner("other")]);
        assert_eq!(
            groups.members("r").len(),
            2,
            "another identifier is no member"
        );
        groups.retain(|repo| *repo == b);
        assert_eq!(groups.members("r").len(), 2);
        groups.retain(|_| false);
        assert!(
            groups.members("r").is_empty(),
            "forgotten with its last member"
        );
        groups.set("r", &[a.clone(), b.clone()]);
        groups.set("r", std::slice::from_ref(&b));
        assert!(
            groups.members("r").is_empty(),
            "down to one owner: forgotten"
        );
    }

    #[tokio::test]
    async fn members_take_turns_and_others_do_not_wait() {
        let groups = SyncGroups::default();
        let (a, b) = (owner("r"), owner("r"));
        groups.set("r", &[a.clone(), b.clone()]);
        let first = groups.turn(&a).await;
        assert!(first.is_some());
        let second = tokio::time::timeout(std::time::Duration::from_millis(20), groups.turn(&b));
        assert!(second.await.is_err(), "b waits for a's turn to end");
        drop(first);
        assert!(groups.turn(&b).await.is_some());
        assert!(
            groups.turn(&owner("r")).await.is_none(),
            "no group: no turn"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_waits_for_its_turn_no_longer_than_the_turn_wait() {
        let groups = SyncGroups::default();
        let (slow_stranger, honest) = (owner("r"), owner("r"));
        groups.set("r", &[slow_stranger.clone(), honest.clone()]);
        let held = groups.turn(&slow_stranger).await;
        assert!(held.is_some());
        let started = tokio::time::Instant::now();
        assert!(
            groups.turn(&honest).await.is_none(),
            "the turn never came: it syncs on its own"
        );
        assert_eq!(started.elapsed(), TURN_WAIT);
    }
}
