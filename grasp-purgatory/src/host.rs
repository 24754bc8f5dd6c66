//! A host's own purgatory: a GRASP server that holds its announcements, states and pull
//! requests itself (it answers push authorisation from them) and only wants our
//! scheduler. [`HostPurgatory`] is what it implements; [`HostHeld`] is how the
//! [`GitSyncContext`](crate::GitSyncContext) works for it: the host's needed objects
//! minus those last seen in the local repository.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use grasp_sync_core::nip34::{GitOid, RepoRef, KIND_REPO_ANNOUNCEMENT};
use grasp_sync_core::purgatory::EventSource;
use nostr::prelude::{Event, Filter, Kind};

use crate::repos::{AnnouncementError, Announcements};
use crate::sink::ReleaseError;

/// The held events of a host that keeps its own purgatory.
///
/// The scheduler ([`Purgatory`](crate::Purgatory) built with
/// [`PurgatoryBuilder::host_purgatory`](crate::PurgatoryBuilder::host_purgatory)) calls
/// these from its tasks, sometimes while it holds its sync queue's lock: they must not
/// call back into the purgatory, and the host must not call
/// [`Purgatory::schedule`](crate::Purgatory::schedule) while it holds a lock these
/// methods take (hold the event, drop the lock, then schedule).
#[async_trait]
pub trait HostPurgatory: Send + Sync {
    /// Every git object the held events of `repo` need (the scheduler works out which
    /// are missing).
    fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid>;

    /// Whether the host still holds events of `repo`.
    fn has_pending(&self, repo: &RepoRef) -> bool;

    /// Releases the held events of `repo` whose objects are all present (`present(oid)`
    /// says whether an object is in the local repository now; it answers for the
    /// objects [`HostPurgatory::needed_oids`] returned): the host stores and serves
    /// them; returns how many. An error leaves them held; they are offered again after
    /// the next fetch or check. Two calls for one repository may overlap (the main sync
    /// and a throttled domain's queue): release each event once. After a release the
    /// scheduler sweeps the `refs/purgatory/*` no held event needs and reconciles the
    /// repository's served refs.
    async fn release_satisfied(
        &self,
        repo: &RepoRef,
        present: &(dyn for<'o> Fn(&'o GitOid) -> bool + Send + Sync),
    ) -> Result<usize, ReleaseError>;

    /// The held events of `repo` that name clone URLs of their own (a pull request's
    /// `clone` tags, often the contributor's fork), each with the objects it needs
    /// (in [`EventSource::missing`]; the scheduler leaves out those already present):
    /// those URLs are asked for these objects only, after the announcements' URLs.
    /// None by default: the announcements' clone URLs only.
    fn event_sources(&self, repo: &RepoRef) -> Vec<EventSource> {
        let _ = repo;
        Vec::new()
    }

    /// The announcements (30617) the host holds that match `filter`: held until a
    /// state's data arrives, so not served and not in the
    /// [`Announcements`] the scheduler was given. The scheduler reads them with the
    /// stored ones for clone URLs and maintainers, and for the owners of an identifier
    /// ([`Purgatory::schedule_identifier`](crate::Purgatory::schedule_identifier));
    /// what is served is decided from the stored ones only. Events of other kinds are
    /// ignored. None by default.
    fn held_announcements(&self, filter: &Filter) -> Vec<Event> {
        let _ = filter;
        Vec::new()
    }
}

/// The announcements a host's scheduler fetches by: the stored ones, and those the
/// host holds ([`HostPurgatory::held_announcements`]), each once.
pub(crate) struct WithHeld {
    stored: Arc<dyn Announcements>,
    host: Arc<dyn HostPurgatory>,
}

impl WithHeld {
    /// `stored` announcements with those `host` holds.
    pub(crate) fn new(stored: Arc<dyn Announcements>, host: Arc<dyn HostPurgatory>) -> Self {
        WithHeld { stored, host }
    }
}

#[async_trait]
impl Announcements for WithHeld {
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        let mut events = self.stored.query(filter).await?;
        let held = self.host.held_announcements(filter).into_iter();
        for held in held.filter(|event| event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT)) {
            if !events.iter().any(|event| event.id == held.id) {
                events.push(held);
            }
        }
        Ok(events)
    }
}

/// A host's held events, with the objects of each repository last seen present in its
/// local repository (forgotten once the host holds nothing of it).
pub(crate) struct HostHeld {
    host: Arc<dyn HostPurgatory>,
    present: Mutex<BTreeMap<RepoRef, BTreeSet<GitOid>>>,
}

impl HostHeld {
    /// Works for `host`.
    pub(crate) fn new(host: Arc<dyn HostPurgatory>) -> Self {
        HostHeld {
            host,
            present: Mutex::new(BTreeMap::new()),
        }
    }

    /// The host.
    pub(crate) fn host(&self) -> &dyn HostPurgatory {
        self.host.as_ref()
    }

    /// Every object the host's held events of `repo` need.
    pub(crate) fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        self.host.needed_oids(repo)
    }

    /// The needed objects of `repo` not seen present in its local repository.
    pub(crate) fn missing_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        let needed = self.host.needed_oids(repo);
        let present = self.lock();
        match present.get(repo) {
            Some(seen) => needed.difference(seen).cloned().collect(),
            None => needed,
        }
    }

    /// The host's events of `repo` with clone URLs of their own, each with the objects
    /// it needs that were not seen present (none left: left out).
    pub(crate) fn event_sources(&self, repo: &RepoRef) -> Vec<EventSource> {
        let sources = self.host.event_sources(repo);
        let present = self.lock();
        let seen = present.get(repo);
        sources
            .into_iter()
            .map(|mut source| {
                source
                    .missing
                    .retain(|oid| !seen.is_some_and(|seen| seen.contains(oid)));
                source
            })
            .filter(|source| !source.missing.is_empty())
            .collect()
    }

    /// Whether `oid` was seen present in `repo`'s local repository.
    pub(crate) fn is_known_present(&self, repo: &RepoRef, oid: &GitOid) -> bool {
        self.lock().get(repo).is_some_and(|seen| seen.contains(oid))
    }

    /// Records which of `repo`'s needed objects its local repository has now.
    pub(crate) fn set_present(&self, repo: &RepoRef, present: BTreeSet<GitOid>) {
        self.lock().insert(repo.clone(), present);
    }

    /// Forgets what was seen in `repo` unless the host still holds events of it.
    pub(crate) fn forget_if_done(&self, repo: &RepoRef) {
        if !self.host.has_pending(repo) {
            self.lock().remove(repo);
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<RepoRef, BTreeSet<GitOid>>> {
        self.present.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
