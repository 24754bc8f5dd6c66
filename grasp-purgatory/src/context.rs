//! The git-backed [`SyncContext`]: purgatory's store, the relay's announcements, the local
//! repositories and git, behind the trait the sync functions drive.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::purgatory::{RepositoryData, SyncContext, SyncContextError};
use grasp_sync_core::url_policy::CloneUrl;

use crate::git::{GitBackend, GitError, NOSTR_REF_PREFIX, PURGATORY_REF_PREFIX};
use crate::held::{HeldEvent, HeldKind};
use crate::metrics::Metrics;
use crate::repos::{repository_data, Announcements, RepoLocator};
use crate::sink::ReleaseSink;
use crate::store::PurgatoryStore;

/// The purgatory store shared by the service and its context.
pub type SharedStore = Arc<Mutex<PurgatoryStore>>;

/// Locks the shared store (a panic elsewhere does not make it unusable: it holds plain
/// data that every operation leaves consistent).
pub(crate) fn lock(store: &SharedStore) -> MutexGuard<'_, PurgatoryStore> {
    store.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A [`SyncContext`] that fetches with git into the relay's bare repositories and
/// releases satisfied events to a [`ReleaseSink`].
pub struct GitSyncContext {
    store: SharedStore,
    announcements: Arc<dyn Announcements>,
    locator: Arc<dyn RepoLocator>,
    git: Arc<dyn GitBackend>,
    sink: Arc<dyn ReleaseSink>,
    our_domain: Option<String>,
    metrics: Option<Metrics>,
}

impl std::fmt::Debug for GitSyncContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitSyncContext")
            .field("our_domain", &self.our_domain)
            .finish_non_exhaustive()
    }
}

/// The parts a [`GitSyncContext`] is made of.
pub struct ContextParts {
    /// The purgatory store.
    pub store: SharedStore,
    /// Where announcements come from.
    pub announcements: Arc<dyn Announcements>,
    /// Where the local repositories are.
    pub locator: Arc<dyn RepoLocator>,
    /// How git is run.
    pub git: Arc<dyn GitBackend>,
    /// Where released events go.
    pub sink: Arc<dyn ReleaseSink>,
    /// Our own git server's domain (never fetched from).
    pub our_domain: Option<String>,
}

impl GitSyncContext {
    /// A context over these parts.
    pub fn new(parts: ContextParts) -> Self {
        GitSyncContext {
            store: parts.store,
            announcements: parts.announcements,
            locator: parts.locator,
            git: parts.git,
            sink: parts.sink,
            our_domain: parts.our_domain,
            metrics: None,
        }
    }

    /// Counts fetched objects in these metrics.
    pub(crate) fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Checks which needed objects are present and records it.
    async fn refresh_present(&self, identifier: &str, target: &Path) -> Result<(), GitError> {
        let needed: Vec<GitOid> = lock(&self.store)
            .needed_oids(identifier)
            .into_iter()
            .collect();
        let present = self.git.existing(target, &needed).await?;
        lock(&self.store).mark_present(identifier, present);
        Ok(())
    }

    /// Writes the PR tip ref (if any) and hands the event to the sink.
    async fn release_one(&self, target: &Path, held: &HeldEvent) -> Result<(), String> {
        if let HeldKind::PullRequest { tip } = &held.kind {
            let name = format!("{NOSTR_REF_PREFIX}{}", held.event.id);
            self.git
                .update_refs(target, &[(name, Some(tip.clone()))])
                .await
                .map_err(|error| error.to_string())?;
        }
        self.sink
            .release(held)
            .await
            .map_err(|error| error.to_string())
    }

    /// Deletes the temporary refs of objects no held event of `identifier` needs any more.
    async fn drop_temporary_refs(&self, identifier: &str, target: &Path, released: &[HeldEvent]) {
        let still_needed = lock(&self.store).needed_oids(identifier);
        let unneeded: BTreeSet<GitOid> = released
            .iter()
            .flat_map(HeldEvent::needed_oids)
            .filter(|oid| !still_needed.contains(oid))
            .collect();
        let deletions: Vec<(String, Option<GitOid>)> = unneeded
            .iter()
            .map(|oid| (format!("{PURGATORY_REF_PREFIX}{oid}"), None))
            .collect();
        if let Err(error) = self.git.update_refs(target, &deletions).await {
            tracing::warn!(%identifier, %error, "deleting temporary purgatory refs failed");
        }
    }
}

#[async_trait]
impl SyncContext for GitSyncContext {
    async fn fetch_repository_data(
        &self,
        identifier: &str,
    ) -> Result<RepositoryData, SyncContextError> {
        let events = self
            .announcements
            .announcements(identifier)
            .await
            .map_err(|error| SyncContextError::Processing {
                identifier: identifier.to_owned(),
                reason: error.to_string(),
            })?;
        let data = repository_data(&events);
        if data.announcements.is_empty() {
            return Err(SyncContextError::UnknownRepository {
                identifier: identifier.to_owned(),
            });
        }
        Ok(data)
    }

    fn collect_needed_oids(&self, identifier: &str) -> BTreeSet<GitOid> {
        lock(&self.store).missing_oids(identifier)
    }

    /// Answers from what purgatory last saw in the repositories (no process is run).
    fn oid_exists(&self, _repo_path: &Path, oid: &GitOid) -> bool {
        lock(&self.store).is_known_present(oid)
    }

    async fn fetch_oids(
        &self,
        repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError> {
        let report = self
            .git
            .fetch(repo_path, url.as_str(), oids)
            .await
            .map_err(|error| SyncContextError::Fetch {
                url: url.as_str().to_owned(),
                reason: error.to_string(),
            })?;
        if let Some(error) = &report.error {
            tracing::info!(
                url = %url,
                fetched = report.present.len(),
                missing = report.missing.len(),
                %error,
                "partial fetch: some objects are not on this server"
            );
        }
        if let Some(metrics) = &self.metrics {
            metrics.oids_fetched.inc_by(report.present.len() as u64);
        }
        Ok(report.present.into_iter().collect())
    }

    async fn process_satisfiable_events(
        &self,
        identifier: &str,
    ) -> Result<usize, SyncContextError> {
        let data = self.fetch_repository_data(identifier).await?;
        let Some(target) = self.find_target_repo(&data) else {
            return Ok(0);
        };
        self.refresh_present(identifier, &target)
            .await
            .map_err(|error| SyncContextError::Processing {
                identifier: identifier.to_owned(),
                reason: error.to_string(),
            })?;
        let satisfied = lock(&self.store).begin_release(identifier);
        let mut released = Vec::new();
        let mut failed = Vec::new();
        let mut last_error = None;
        for held in satisfied {
            match self.release_one(&target, &held).await {
                Ok(()) => released.push(held),
                Err(reason) => {
                    tracing::warn!(id = %held.event.id, %reason, "releasing a purgatory event failed");
                    last_error = Some(reason);
                    failed.push(held.event.id);
                }
            }
        }
        let released_ids: Vec<_> = released.iter().map(|held| held.event.id).collect();
        {
            let mut store = lock(&self.store);
            store.finish_release(identifier, &released_ids);
            store.abort_release(&failed);
        }
        self.drop_temporary_refs(identifier, &target, &released)
            .await;
        if let Some(metrics) = &self.metrics {
            metrics.events_released.inc_by(released.len() as u64);
        }
        if !released.is_empty() {
            tracing::info!(%identifier, released = released.len(), "released purgatory events");
        }
        match last_error {
            Some(reason) if released.is_empty() => Err(SyncContextError::Processing {
                identifier: identifier.to_owned(),
                reason,
            }),
            _ => Ok(released.len()),
        }
    }

    fn has_pending_events(&self, identifier: &str) -> bool {
        lock(&self.store).has_pending(identifier)
    }

    fn find_target_repo(&self, data: &RepositoryData) -> Option<PathBuf> {
        self.locator.locate(data)
    }

    fn our_domain(&self) -> Option<&str> {
        self.our_domain.as_deref()
    }
}
