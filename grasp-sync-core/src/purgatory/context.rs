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

use super::url_select::RepositoryData;
use crate::nip34::GitOid;
use crate::url_policy::CloneUrl;

/// Why a [`SyncContext`] operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncContextError {
    /// The local store has no announcement for the identifier.
    #[error("no repository data for identifier {identifier}")]
    UnknownRepository {
        /// The identifier asked for.
        identifier: String,
    },
    /// Fetching from a clone URL failed (unreachable, refused, missing repo).
    #[error("fetch from {url} failed: {reason}")]
    Fetch {
        /// The clone URL.
        url: String,
        /// What went wrong, as reported by git or the transport.
        reason: String,
    },
    /// Releasing satisfied events (saving, notifying) failed.
    #[error("processing events of {identifier} failed: {reason}")]
    Processing {
        /// The identifier whose events were processed.
        identifier: String,
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
/// The decisions (which URL, when, whether a domain has capacity) stay out of
/// it, in [`candidate_urls`](super::candidate_urls),
/// [`next_url`](super::next_url), [`SyncQueue`](super::SyncQueue) and
/// [`DomainThrottle`](super::DomainThrottle).
#[async_trait]
pub trait SyncContext: Send + Sync {
    /// The repository's announcements from the local store.
    async fn fetch_repository_data(
        &self,
        identifier: &str,
    ) -> Result<RepositoryData, SyncContextError>;

    /// The OIDs that purgatory events of `identifier` need and that are not
    /// available locally yet. Empty means nothing is left to fetch.
    fn collect_needed_oids(&self, identifier: &str) -> BTreeSet<GitOid>;

    /// Whether `oid` exists in the local repository at `repo_path`.
    fn oid_exists(&self, repo_path: &Path, oid: &GitOid) -> bool;

    /// Fetches `oids` from `url` into the repository at `repo_path`; returns
    /// the OIDs that were obtained.
    async fn fetch_oids(
        &self,
        repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError>;

    /// Releases the purgatory events of `identifier` whose objects are all
    /// present (store, notify, remove from purgatory); returns how many.
    async fn process_satisfiable_events(&self, identifier: &str)
        -> Result<usize, SyncContextError>;

    /// Whether purgatory still holds events of `identifier`.
    fn has_pending_events(&self, identifier: &str) -> bool;

    /// The local repository to fetch into for this repository, if any.
    fn find_target_repo(&self, data: &RepositoryData) -> Option<PathBuf>;

    /// Our own git server's domain, excluded from clone URLs.
    fn our_domain(&self) -> Option<&str>;
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
    /// Serves these objects.
    Serves(BTreeSet<GitOid>),
    /// Every fetch fails with this reason.
    Fails(String),
}

#[derive(Debug, Default)]
struct MemoryState {
    repositories: HashMap<String, RepositoryData>,
    /// Per identifier, the OIDs each waiting event needs.
    pending: HashMap<String, Vec<BTreeSet<GitOid>>>,
    released: HashMap<String, usize>,
    local: BTreeSet<GitOid>,
    remotes: HashMap<String, Remote>,
    fetches: Vec<FetchCall>,
}

impl MemoryState {
    fn fetch(&mut self, url: &str, oids: &[GitOid]) -> Result<Vec<GitOid>, SyncContextError> {
        self.fetches.push(FetchCall {
            url: url.to_owned(),
            oids: oids.to_vec(),
        });
        let served = match self.remotes.get(url) {
            Some(Remote::Serves(served)) => served,
            Some(Remote::Fails(reason)) => return Err(fetch_error(url, reason)),
            None => return Err(fetch_error(url, "no such remote")),
        };
        let fetched: Vec<GitOid> = oids
            .iter()
            .filter(|oid| served.contains(*oid))
            .cloned()
            .collect();
        self.local.extend(fetched.iter().cloned());
        Ok(fetched)
    }

    fn release_satisfied(&mut self, identifier: &str) -> usize {
        let Some(mut events) = self.pending.remove(identifier) else {
            return 0;
        };
        let before = events.len();
        events.retain(|needed| !needed.is_subset(&self.local));
        let released = before.saturating_sub(events.len());
        if !events.is_empty() {
            self.pending.insert(identifier.to_owned(), events);
        }
        let total = self.released.entry(identifier.to_owned()).or_default();
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
    our_domain: Option<String>,
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
            our_domain: None,
            target_repo: PathBuf::from("memory"),
            state: Mutex::new(MemoryState::default()),
        }
    }

    /// The same context, reporting `domain` as ours.
    pub fn with_our_domain(mut self, domain: impl Into<String>) -> Self {
        self.our_domain = Some(domain.into());
        self
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // A poisoned lock means a test panicked while holding it; the maps
        // are still usable for the assertions that follow.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores the repository data of `identifier`.
    pub fn add_repository(&self, identifier: &str, data: RepositoryData) {
        self.lock().repositories.insert(identifier.to_owned(), data);
    }

    /// Puts one event of `identifier` into purgatory, waiting for `needed`.
    pub fn add_pending_event(&self, identifier: &str, needed: impl IntoIterator<Item = GitOid>) {
        self.lock()
            .pending
            .entry(identifier.to_owned())
            .or_default()
            .push(needed.into_iter().collect());
    }

    /// Makes `oid` available locally.
    pub fn add_local_oid(&self, oid: GitOid) {
        self.lock().local.insert(oid);
    }

    /// Makes `url` serve `oids` (replacing what it served or its failure).
    pub fn set_remote(&self, url: &str, oids: impl IntoIterator<Item = GitOid>) {
        let remote = Remote::Serves(oids.into_iter().collect());
        self.lock().remotes.insert(url.to_owned(), remote);
    }

    /// Makes every fetch from `url` fail with `reason`.
    pub fn set_remote_error(&self, url: &str, reason: &str) {
        let remote = Remote::Fails(reason.to_owned());
        self.lock().remotes.insert(url.to_owned(), remote);
    }

    /// Every fetch so far, in call order.
    pub fn fetch_log(&self) -> Vec<FetchCall> {
        self.lock().fetches.clone()
    }

    /// How many events of `identifier` were released so far.
    pub fn released(&self, identifier: &str) -> usize {
        self.lock().released.get(identifier).copied().unwrap_or(0)
    }
}

#[async_trait]
impl SyncContext for MemorySyncContext {
    async fn fetch_repository_data(
        &self,
        identifier: &str,
    ) -> Result<RepositoryData, SyncContextError> {
        self.lock()
            .repositories
            .get(identifier)
            .cloned()
            .ok_or_else(|| SyncContextError::UnknownRepository {
                identifier: identifier.to_owned(),
            })
    }

    fn collect_needed_oids(&self, identifier: &str) -> BTreeSet<GitOid> {
        let state = self.lock();
        state
            .pending
            .get(identifier)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|oid| !state.local.contains(*oid))
            .cloned()
            .collect()
    }

    fn oid_exists(&self, _repo_path: &Path, oid: &GitOid) -> bool {
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

    async fn process_satisfiable_events(
        &self,
        identifier: &str,
    ) -> Result<usize, SyncContextError> {
        Ok(self.lock().release_satisfied(identifier))
    }

    fn has_pending_events(&self, identifier: &str) -> bool {
        self.lock()
            .pending
            .get(identifier)
            .is_some_and(|events| !events.is_empty())
    }

    fn find_target_repo(&self, data: &RepositoryData) -> Option<PathBuf> {
        (!data.announcements.is_empty()).then(|| self.target_repo.clone())
    }

    fn our_domain(&self) -> Option<&str> {
        self.our_domain.as_deref()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
