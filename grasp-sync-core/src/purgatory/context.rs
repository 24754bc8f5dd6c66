//! The effects purgatory sync needs, behind one trait, and an in-memory
//! implementation of it for tests and simulations.
//!
//! [`SyncContext`] is what the async sync functions (in the purgatory crate)
//! call: read repository data and purgatory state, check and fetch git
//! objects, release events whose objects arrived. The git-backed
//! implementation lives in the purgatory crate; [`MemorySyncContext`] keeps
//! everything in maps and records each fetch for assertions.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::own_service::OwnService;
use super::repository::RepositoryData;
use crate::nip34::{GitOid, RepoRef};
use crate::url_policy::CloneUrl;

/// Why a [`SyncContext`] operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncContextError {
    /// The local store has no announcement of the repository by its owner.
    #[error("no announcement of repository {repo}")]
    UnknownRepository {
        /// The repository asked for.
        repo: RepoRef,
    },
    /// Fetching from a clone URL failed (unreachable, refused, missing repo).
    #[error("fetch from {url} failed: {reason}")]
    Fetch {
        /// The clone URL.
        url: String,
        /// What went wrong, as reported by git or the transport.
        reason: String,
    },
    /// The server refused a request for several objects because it lacks some
    /// of them (git servers refuse the whole request): nothing was fetched.
    /// Asking for the objects one at a time, each as its own request, gets
    /// those it has.
    #[error("{url} lacks some of the objects asked for: {reason}")]
    ObjectsMissing {
        /// The clone URL.
        url: String,
        /// What the server said.
        reason: String,
    },
    /// Releasing satisfied events (saving, notifying) failed.
    #[error("processing events of {repo} failed: {reason}")]
    Processing {
        /// The repository whose events were processed.
        repo: RepoRef,
        /// What went wrong.
        reason: String,
    },
    /// There is no place for the local repository (an identifier that is not a safe
    /// file name, or a layout that does not create repositories): it can never be
    /// created.
    #[error("no place for the local repository of {repo}")]
    NoPlaceForRepository {
        /// The repository.
        repo: RepoRef,
    },
    /// The local repository could not be created.
    #[error("creating the local repository of {repo} failed: {reason}")]
    CreateRepository {
        /// The repository.
        repo: RepoRef,
        /// What went wrong.
        reason: String,
    },
    /// A local I/O operation failed.
    #[error("{operation} failed")]
    Io {
        /// What was being done.
        operation: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The effects of purgatory sync: everything that reads the store or the
/// purgatory, or talks to git.
///
/// Everything is per repository ([`RepoRef`]: owner and identifier), never per
/// bare identifier: the repository's data comes from its owner's announcement
/// and the maintainers it lists (see [`select_repository`](super::select_repository)),
/// and objects are fetched into the owner's repository.
///
/// The decisions (which URL, when, whether a domain has capacity) stay out of
/// it, in [`candidate_urls`](super::candidate_urls),
/// [`next_url`](super::next_url), [`SyncQueue`](super::SyncQueue) and
/// [`DomainThrottle`](super::DomainThrottle).
#[async_trait]
pub trait SyncContext: Send + Sync {
    /// The announcements that speak for `repo`, from the local store.
    async fn fetch_repository_data(
        &self,
        repo: &RepoRef,
    ) -> Result<RepositoryData, SyncContextError>;

    /// The OIDs that purgatory events of `repo` need and that are not
    /// available locally yet. Empty means nothing is left to fetch.
    fn collect_needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid>;

    /// Whether `oid` is known to exist in `repo`'s local repository.
    fn oid_exists(&self, repo: &RepoRef, oid: &GitOid) -> bool;

    /// Fetches `oids` from `url` into the repository at `repo_path` with one
    /// request; returns the OIDs that were obtained.
    /// [`SyncContextError::ObjectsMissing`] when the server refused the request
    /// because it lacks some of them.
    async fn fetch_oids(
        &self,
        repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError>;

    /// Releases the purgatory events of `repo` whose objects are all present
    /// (store, notify, remove from purgatory); returns how many.
    async fn process_satisfiable_events(&self, repo: &RepoRef) -> Result<usize, SyncContextError>;

    /// Whether purgatory still holds events of `repo`.
    fn has_pending_events(&self, repo: &RepoRef) -> bool;

    /// The local repository of `repo` to fetch into, if it exists.
    fn find_target_repo(&self, repo: &RepoRef) -> Option<PathBuf>;

    /// Whether a missing local repository is created by this context
    /// ([`SyncContext::create_target_repo`]) rather than by someone else (a GRASP
    /// server managing its git root); see
    /// [`missing_repository_action`](super::missing_repository_action).
    fn creates_repositories(&self) -> bool;

    /// Creates the local repository of `repo` (an empty bare repository, laid out the
    /// way a GRASP server lays it out) and returns its path. Creating one that exists
    /// (another sync was first) is not an error.
    async fn create_target_repo(&self, repo: &RepoRef) -> Result<PathBuf, SyncContextError>;

    /// Our own service's hosts: clone URLs there are never fetched from.
    fn own_service(&self) -> &OwnService;

    /// `repo` has no announcement: every repository of the same identifier whose
    /// maintainer set holds its author ([`home_repositories`](super::home_repositories))
    /// takes `repo`'s held events, each its own copy (a co-maintainer's state counts
    /// for every repository listing them, each fetching and releasing it on its own);
    /// they are returned, none when no repository lists the author.
    async fn move_to_home_repositories(
        &self,
        repo: &RepoRef,
    ) -> Result<Vec<RepoRef>, SyncContextError>;

    /// Makes present in `repo`'s local repository, by a local copy, the objects its
    /// held events need that were already fetched into the local repository of
    /// another repository synced with it as one group (the owners of one identifier,
    /// scheduled together): no server is asked. Returns how many of the objects it
    /// asked for are present now (more than zero: the caller releases what they
    /// satisfy). Called before any fetch; a repository in no group copies nothing. The
    /// default copies nothing.
    async fn copy_from_group(&self, repo: &RepoRef) -> Result<usize, SyncContextError> {
        let _ = repo;
        Ok(0)
    }
}

/// One call of [`SyncContext::fetch_oids`] on a [`MemorySyncContext`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchCall {
    /// The clone URL fetched from.
    pub url: String,
    /// The OIDs asked for, in the order given.
    pub oids: Vec<GitOid>,
}

/// What a remote clone URL answers in a [`MemorySyncContext`].
#[derive(Clone, Debug)]
enum Remote {
    /// Serves these objects; a request for several objects some of which it
    /// lacks is refused whole when `strict` (as git servers do), answered with
    /// the ones it has otherwise.
    Serves {
        oids: BTreeSet<GitOid>,
        strict: bool,
    },
    /// Every fetch fails with this reason.
    Fails(String),
}

#[derive(Debug, Default)]
struct MemoryState {
    repositories: HashMap<RepoRef, RepositoryData>,
    /// Per repository, the OIDs each waiting event needs.
    pending: HashMap<RepoRef, Vec<BTreeSet<GitOid>>>,
    released: HashMap<RepoRef, usize>,
    local: BTreeSet<GitOid>,
    /// Repositories whose local repository does not exist (yet).
    missing_local: BTreeSet<RepoRef>,
    remotes: HashMap<String, Remote>,
    fetches: Vec<FetchCall>,
    /// The repository each unannounced one belongs to.
    homes: HashMap<RepoRef, Vec<RepoRef>>,
}

impl MemoryState {
    fn fetch(&mut self, url: &str, oids: &[GitOid]) -> Result<Vec<GitOid>, SyncContextError> {
        self.fetches.push(FetchCall {
            url: url.to_owned(),
            oids: oids.to_vec(),
        });
        let (served, strict) = match self.remotes.get(url) {
            Some(Remote::Serves { oids, strict }) => (oids, *strict),
            Some(Remote::Fails(reason)) => return Err(fetch_error(url, reason)),
            None => return Err(fetch_error(url, "no such remote")),
        };
        let fetched: Vec<GitOid> = oids
            .iter()
            .filter(|oid| served.contains(*oid))
            .cloned()
            .collect();
        if strict && oids.len() > 1 && fetched.len() < oids.len() {
            return Err(SyncContextError::ObjectsMissing {
                url: url.to_owned(),
                reason: "not our ref".to_owned(),
            });
        }
        self.local.extend(fetched.iter().cloned());
        Ok(fetched)
    }

    fn release_satisfied(&mut self, repo: &RepoRef) -> usize {
        let Some(mut events) = self.pending.remove(repo) else {
            return 0;
        };
        let before = events.len();
        events.retain(|needed| !needed.is_subset(&self.local));
        let released = before.saturating_sub(events.len());
        if !events.is_empty() {
            self.pending.insert(repo.clone(), events);
        }
        let total = self.released.entry(repo.clone()).or_default();
        *total = total.saturating_add(released);
        released
    }
}

fn fetch_error(url: &str, reason: &str) -> SyncContextError {
    SyncContextError::Fetch {
        url: url.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A [`SyncContext`] held in memory: repositories, purgatory events with the
/// OIDs they need, one local object set, and remotes that serve a set of
/// OIDs or fail. Every fetch is recorded; see [`MemorySyncContext::fetch_log`].
///
/// Setters take `&self`, so a context shared with running syncs can still be
/// changed by the test.
#[derive(Debug)]
pub struct MemorySyncContext {
    own_service: OwnService,
    creates_repositories: bool,
    target_repo: PathBuf,
    state: Mutex<MemoryState>,
}

impl Default for MemorySyncContext {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySyncContext {
    /// An empty context whose target repository is the path `memory`.
    pub fn new() -> Self {
        MemorySyncContext {
            own_service: OwnService::new(),
            creates_repositories: true,
            target_repo: PathBuf::from("memory"),
            state: Mutex::new(MemoryState::default()),
        }
    }

    /// The same context, reporting every port of `host` as our own service.
    pub fn with_our_domain(mut self, host: &str) -> Self {
        self.own_service = self.own_service.with_host(host);
        self
    }

    /// The same context, with `own` as our own service.
    pub fn with_own_service(mut self, own: OwnService) -> Self {
        self.own_service = own;
        self
    }

    /// The same context, creating missing local repositories or not (it does by
    /// default).
    pub fn with_repository_creation(mut self, creates: bool) -> Self {
        self.creates_repositories = creates;
        self
    }

    /// Makes the local repository of `repo` missing until it is created.
    pub fn remove_local_repository(&self, repo: &RepoRef) {
        self.lock().missing_local.insert(repo.clone());
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // A poisoned lock means a test panicked while holding it; the maps
        // are still usable for the assertions that follow.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores the repository data of `repo`.
    pub fn add_repository(&self, repo: &RepoRef, data: RepositoryData) {
        self.lock().repositories.insert(repo.clone(), data);
    }

    /// Puts one event of `repo` into purgatory, waiting for `needed`.
    pub fn add_pending_event(&self, repo: &RepoRef, needed: impl IntoIterator<Item = GitOid>) {
        self.lock()
            .pending
            .entry(repo.clone())
            .or_default()
            .push(needed.into_iter().collect());
    }

    /// Makes `oid` available locally.
    pub fn add_local_oid(&self, oid: GitOid) {
        self.lock().local.insert(oid);
    }

    /// Makes `url` serve `oids` (replacing what it served or its failure),
    /// answering a request with the objects it has.
    pub fn set_remote(&self, url: &str, oids: impl IntoIterator<Item = GitOid>) {
        let remote = Remote::Serves {
            oids: oids.into_iter().collect(),
            strict: false,
        };
        self.lock().remotes.insert(url.to_owned(), remote);
    }

    /// Makes `url` serve `oids` the way git servers do: a request for several
    /// objects, some of which it lacks, fails whole with
    /// [`SyncContextError::ObjectsMissing`].
    pub fn set_remote_strict(&self, url: &str, oids: impl IntoIterator<Item = GitOid>) {
        let remote = Remote::Serves {
            oids: oids.into_iter().collect(),
            strict: true,
        };
        self.lock().remotes.insert(url.to_owned(), remote);
    }

    /// Makes every fetch from `url` fail with `reason`.
    pub fn set_remote_error(&self, url: &str, reason: &str) {
        let remote = Remote::Fails(reason.to_owned());
        self.lock().remotes.insert(url.to_owned(), remote);
    }

    /// Makes `home` one of the repositories `repo`'s held events belong to
    /// ([`SyncContext::move_to_home_repositories`]).
    pub fn set_home(&self, repo: &RepoRef, home: &RepoRef) {
        self.lock()
            .homes
            .entry(repo.clone())
            .or_default()
            .push(home.clone());
    }

    /// Every fetch so far, in call order.
    pub fn fetch_log(&self) -> Vec<FetchCall> {
        self.lock().fetches.clone()
    }

    /// How many events of `repo` were released so far.
    pub fn released(&self, repo: &RepoRef) -> usize {
        self.lock().released.get(repo).copied().unwrap_or(0)
    }
}

#[async_trait]
impl SyncContext for MemorySyncContext {
    async fn fetch_repository_data(
        &self,
        repo: &RepoRef,
    ) -> Result<RepositoryData, SyncContextError> {
        self.lock()
            .repositories
            .get(repo)
            .cloned()
            .ok_or_else(|| SyncContextError::UnknownRepository { repo: repo.clone() })
    }

    fn collect_needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        let state = self.lock();
        state
            .pending
            .get(repo)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|oid| !state.local.contains(*oid))
            .cloned()
            .collect()
    }

    fn oid_exists(&self, _repo: &RepoRef, oid: &GitOid) -> bool {
        self.lock().local.contains(oid)
    }

    async fn fetch_oids(
        &self,
        _repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError> {
        self.lock().fetch(url.as_str(), oids)
    }

    async fn process_satisfiable_events(&self, repo: &RepoRef) -> Result<usize, SyncContextError> {
        Ok(self.lock().release_satisfied(repo))
    }

    fn has_pending_events(&self, repo: &RepoRef) -> bool {
        self.lock()
            .pending
            .get(repo)
            .is_some_and(|events| !events.is_empty())
    }

    fn find_target_repo(&self, repo: &RepoRef) -> Option<PathBuf> {
        let state = self.lock();
        (state.repositories.contains_key(repo) && !state.missing_local.contains(repo))
            .then(|| self.target_repo.clone())
    }

    fn creates_repositories(&self) -> bool {
        self.creates_repositories
    }

    async fn create_target_repo(&self, repo: &RepoRef) -> Result<PathBuf, SyncContextError> {
        let mut state = self.lock();
        if !state.repositories.contains_key(repo) {
            return Err(SyncContextError::UnknownRepository { repo: repo.clone() });
        }
        state.missing_local.remove(repo);
        Ok(self.target_repo.clone())
    }

    fn own_service(&self) -> &OwnService {
        &self.own_service
    }

    async fn move_to_home_repositories(
        &self,
        repo: &RepoRef,
    ) -> Result<Vec<RepoRef>, SyncContextError> {
        let mut state = self.lock();
        let homes = state.homes.get(repo).cloned().unwrap_or_default();
        if homes.is_empty() {
            return Ok(homes);
        }
        let moved = state.pending.remove(repo).unwrap_or_default();
        for home in &homes {
            state
                .pending
                .entry(home.clone())
                .or_default()
                .extend(moved.iter().cloned());
        }
        Ok(homes)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
