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
mod tests {
    use futures::executor::block_on;

    use super::super::test_support::{oid, repository};
    use super::*;
    use crate::url_policy::CloneUrlPolicy;

    fn url(text: &str) -> CloneUrl {
        CloneUrlPolicy::new().check(text).expect("public https url")
    }

    fn ids(list: &[u8]) -> BTreeSet<GitOid> {
        list.iter().map(|n| oid(*n)).collect()
    }

    #[test]
    fn repository_data_or_unknown() {
        let ctx = MemorySyncContext::new();
        let data = repository(&[&["https://a.example/r.git"]]);
        ctx.add_repository("r", data.clone());
        assert_eq!(block_on(ctx.fetch_repository_data("r")).ok(), Some(data));
        let missing = block_on(ctx.fetch_repository_data("other"));
        assert!(matches!(
            missing,
            Err(SyncContextError::UnknownRepository { identifier }) if identifier == "other"
        ));
    }

    #[test]
    fn needed_oids_exclude_local_ones() {
        let ctx = MemorySyncContext::new();
        ctx.add_pending_event("r", ids(&[1, 2]));
        ctx.add_pending_event("r", ids(&[2, 3]));
        ctx.add_local_oid(oid(2));
        assert_eq!(ctx.collect_needed_oids("r"), ids(&[1, 3]));
        assert!(ctx.collect_needed_oids("other").is_empty());
        assert!(ctx.oid_exists(Path::new("memory"), &oid(2)));
        assert!(!ctx.oid_exists(Path::new("memory"), &oid(1)));
    }

    #[test]
    fn fetch_returns_the_intersection_and_stores_it() {
        let ctx = MemorySyncContext::new();
        ctx.set_remote("https://a.example/r.git", ids(&[1, 3, 9]));
        let asked = [oid(1), oid(2), oid(3)];
        let fetched =
            block_on(ctx.fetch_oids(Path::new("memory"), &url("https://a.example/r.git"), &asked));
        assert_eq!(fetched.ok(), Some(vec![oid(1), oid(3)]));
        assert!(ctx.oid_exists(Path::new("memory"), &oid(3)));
        assert!(!ctx.oid_exists(Path::new("memory"), &oid(9)));
        assert_eq!(
            ctx.fetch_log(),
            vec![FetchCall {
                url: "https://a.example/r.git".to_owned(),
                oids: asked.to_vec(),
            }]
        );
    }

    #[test]
    fn failing_and_unknown_remotes_are_fetch_errors() {
        let ctx = MemorySyncContext::new();
        ctx.set_remote_error("https://down.example/r.git", "connection refused");
        let path = Path::new("memory");
        let down = block_on(ctx.fetch_oids(path, &url("https://down.example/r.git"), &[oid(1)]));
        assert!(matches!(
            &down,
            Err(SyncContextError::Fetch { reason, .. }) if reason == "connection refused"
        ));
        let message = down.err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            message,
            "fetch from https://down.example/r.git failed: connection refused"
        );
        let unknown =
            block_on(ctx.fetch_oids(path, &url("https://nowhere.example/r.git"), &[oid(1)]));
        assert!(matches!(unknown, Err(SyncContextError::Fetch { .. })));
        assert_eq!(ctx.fetch_log().len(), 2);
        assert!(!ctx.oid_exists(path, &oid(1)));
    }

    #[test]
    fn process_releases_only_satisfied_events() {
        let ctx = MemorySyncContext::new();
        ctx.add_pending_event("r", ids(&[1]));
        ctx.add_pending_event("r", ids(&[1, 2]));
        assert!(ctx.has_pending_events("r"));
        assert_eq!(block_on(ctx.process_satisfiable_events("r")).ok(), Some(0));

        ctx.add_local_oid(oid(1));
        assert_eq!(block_on(ctx.process_satisfiable_events("r")).ok(), Some(1));
        assert!(ctx.has_pending_events("r"));

        ctx.add_local_oid(oid(2));
        assert_eq!(block_on(ctx.process_satisfiable_events("r")).ok(), Some(1));
        assert!(!ctx.has_pending_events("r"));
        assert_eq!(ctx.released("r"), 2);
        assert_eq!(block_on(ctx.process_satisfiable_events("r")).ok(), Some(0));
        assert_eq!(ctx.released("unknown"), 0);
    }

    #[test]
    fn target_repo_and_our_domain() {
        let ctx = MemorySyncContext::default().with_our_domain("git.example.com");
        assert_eq!(ctx.our_domain(), Some("git.example.com"));
        assert_eq!(ctx.find_target_repo(&RepositoryData::default()), None);
        let data = repository(&[&["https://a.example/r.git"]]);
        assert_eq!(ctx.find_target_repo(&data), Some(PathBuf::from("memory")));
        assert_eq!(MemorySyncContext::new().our_domain(), None);
    }

    #[test]
    fn usable_as_a_shared_trait_object() {
        let ctx: std::sync::Arc<dyn SyncContext> = std::sync::Arc::new(MemorySyncContext::new());
        assert!(!ctx.has_pending_events("r"));
        assert!(block_on(ctx.fetch_repository_data("r")).is_err());
    }

    #[test]
    fn io_error_keeps_its_source() {
        let error = SyncContextError::Io {
            operation: "opening repository".to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        };
        assert_eq!(error.to_string(), "opening repository failed");
        assert!(std::error::Error::source(&error).is_some());
    }
}

#[cfg(test)]
mod proptests {
    use futures::executor::block_on;
    use proptest::prelude::*;

    use super::super::test_support::oid;
    use super::*;
    use crate::url_policy::CloneUrlPolicy;

    proptest! {
        #[test]
        fn fetch_then_process_releases_exactly_the_satisfied_events(
            events in proptest::collection::vec(proptest::collection::btree_set(0u8..8, 1..4), 0..6),
            served in proptest::collection::btree_set(0u8..8, 0..8),
        ) {
            let ctx = MemorySyncContext::new();
            for needed in &events {
                ctx.add_pending_event("r", needed.iter().map(|n| oid(*n)));
            }
            ctx.set_remote("https://a.example/r.git", served.iter().map(|n| oid(*n)));
            let url = CloneUrlPolicy::new().check("https://a.example/r.git");
            prop_assert!(url.is_ok());
            if let Ok(url) = url {
                let needed: Vec<GitOid> = ctx.collect_needed_oids("r").into_iter().collect();
                let fetched = block_on(ctx.fetch_oids(Path::new("memory"), &url, &needed));
                prop_assert!(fetched.is_ok());
            }
            let released = block_on(ctx.process_satisfiable_events("r")).unwrap_or(usize::MAX);
            let satisfiable = events.iter().filter(|needed| needed.is_subset(&served)).count();
            prop_assert_eq!(released, satisfiable);
            prop_assert_eq!(ctx.has_pending_events("r"), satisfiable < events.len());
            for n in ctx.collect_needed_oids("r") {
                prop_assert!(!served.iter().any(|s| oid(*s) == n));
            }
        }
    }
}
