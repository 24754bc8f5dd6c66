//! The git-backed [`SyncContext`]: purgatory's store (or a host's own purgatory, see
//! [`GitSyncContext::for_host`]), the relay's announcements, the local repositories and
//! git, behind the trait the sync functions drive. Everything is per repository
//! (`30617:<owner>:<identifier>`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use grasp_sync_core::clock::Clock;
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::{OwnService, RepositoryData, SyncContext, SyncContextError};
use grasp_sync_core::url_policy::CloneUrl;
use nostr::prelude::PublicKey;

use crate::disk::{objects_bytes, DiskLimits, DiskUsage, QuotaError};
use crate::git::{GitBackend, GitError, NOSTR_REF_PREFIX, PURGATORY_REF_PREFIX};
use crate::groups::SyncGroups;
use crate::held::{HeldEvent, HeldKind};
use crate::host::{HostHeld, HostPurgatory};
use crate::metrics::Metrics;
use crate::refusals::UrlRefusals;
use crate::repos::{
    create_bare_repository, homes_of, owners_of, repository_data, AnnouncementError, Announcements,
    CreateRepoError, RepoLocator,
};
use crate::sink::{ReleaseError, ReleaseSink};
use crate::status::ReleaseRefusal;
use crate::store::PurgatoryStore;

/// Why a satisfied event was not released.
enum ReleaseFailure {
    /// The sink refused it for good: it is dropped.
    Refused(String),
    /// Its PR ref could not be written, or the sink failed or refused it for now: it
    /// stays held.
    Failed(String),
}

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
    own_service: OwnService,
    creates_repositories: bool,
    clock: Arc<dyn Clock>,
    expiry: Duration,
    metrics: Option<Metrics>,
    refusals: Option<UrlRefusals>,
    /// The host whose held events this context works for, if it is not our store's.
    host: Option<HostHeld>,
    /// Repositories that released events since the service last asked, with the
    /// authors of those events ([`GitSyncContext::take_released`]): their served refs,
    /// and those of the repositories the authors maintain, are reconciled next.
    released_in: Mutex<BTreeMap<RepoRef, BTreeSet<PublicKey>>>,
    /// The last released event the sink refused for good.
    last_store_refusal: Mutex<Option<ReleaseRefusal>>,
    /// Bytes of objects of the local repositories used, against the disk quotas.
    disk: Mutex<DiskUsage>,
    /// The owners of one identifier synced together, and what was fetched for them.
    groups: SyncGroups,
}

impl std::fmt::Debug for GitSyncContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitSyncContext")
            .field("own_service", &self.own_service)
            .field("creates_repositories", &self.creates_repositories)
            .field("for_host", &self.host.is_some())
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
    /// Our own service's hosts (never fetched from).
    pub own_service: OwnService,
    /// Whether a missing local repository is created (`git init --bare` at the
    /// locator's [`RepoLocator::place`]) rather than waited for.
    pub creates_repositories: bool,
    /// Where the time of a release check comes from.
    pub clock: Arc<dyn Clock>,
    /// How long an event waits for its data before it expires: one that waited
    /// longer is not released (the expiry sweep drops it).
    pub expiry: Duration,
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
            own_service: parts.own_service,
            creates_repositories: parts.creates_repositories,
            clock: parts.clock,
            expiry: parts.expiry,
            metrics: None,
            refusals: None,
            host: None,
            released_in: Mutex::new(BTreeMap::new()),
            last_store_refusal: Mutex::new(None),
            disk: Mutex::new(DiskUsage::new(DiskLimits::default())),
            groups: SyncGroups::default(),
        }
    }

    /// Refuses fetches into (and the creation of) the local repositories of an owner
    /// whose repositories, or all, hold these quotas of objects.
    pub fn with_disk_limits(self, limits: DiskLimits) -> Self {
        GitSyncContext {
            disk: Mutex::new(DiskUsage::new(limits)),
            ..self
        }
    }

    fn disk(&self) -> std::sync::MutexGuard<'_, DiskUsage> {
        self.disk.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Measures the objects of `repo`'s local repository at `path` again.
    fn measure(&self, repo: &RepoRef, path: &Path) {
        let bytes = objects_bytes(path);
        let total = {
            let mut disk = self.disk();
            disk.record(repo, path, bytes);
            disk.total()
        };
        if let Some(metrics) = &self.metrics {
            metrics
                .git_objects_bytes
                .set(i64::try_from(total).unwrap_or(i64::MAX));
        }
    }

    /// Whether objects may be fetched into `repo`'s local repository (or it created):
    /// a refusal is logged and counted.
    fn check_quota(&self, repo: &RepoRef) -> Result<(), QuotaError> {
        let checked = self.disk().check(repo.pubkey());
        if let Err(error) = &checked {
            tracing::warn!(%repo, %error, "disk quota reached: no fetch into the repository");
            if let Some(metrics) = &self.metrics {
                metrics
                    .disk_quota_refusals
                    .with_label_values(&[error.label()])
                    .inc();
            }
        }
        checked
    }

    /// Works for `host`'s held events instead of the store's: the objects needed are
    /// the host's ([`HostPurgatory::needed_oids`]) minus those seen in the local
    /// repository, and satisfied events are released by the host
    /// ([`HostPurgatory::release_satisfied`]), not handed to the sink. The store is then
    /// only the bookkeeping of `refs/purgatory/*` sweeps; the sink and the expiry are
    /// not used (expiry is the host's business).
    pub fn for_host(mut self, host: Arc<dyn HostPurgatory>) -> Self {
        self.host = Some(HostHeld::new(host));
        self
    }

    /// The repositories synced as groups (the owners of one identifier).
    pub(crate) fn groups(&self) -> &SyncGroups {
        &self.groups
    }

    /// The repositories of `identifier`: one per author who announced it, in key order.
    pub(crate) async fn owners_of(
        &self,
        identifier: &str,
    ) -> Result<Vec<RepoRef>, AnnouncementError> {
        owners_of(self.announcements.as_ref(), identifier).await
    }

    /// Copies `oids` (fetched into the local repository of `from`, a member of `repo`'s
    /// group) into `target`, `repo`'s local repository, within `repo`'s disk quota;
    /// returns those of `oids` present in `target` now.
    async fn copy_from(
        &self,
        repo: &RepoRef,
        target: &Path,
        from: &RepoRef,
        oids: &[GitOid],
    ) -> Result<BTreeSet<GitOid>, SyncContextError> {
        let Some(source) = self.locator.locate(from) else {
            return Ok(BTreeSet::new());
        };
        self.check_quota(repo)
            .map_err(|error| Self::processing_error(repo, error))?;
        let copied = self.git.copy_objects(&source, target, oids).await;
        self.measure(repo, target);
        let present = copied.map_err(|error| Self::processing_error(repo, error))?;
        if self.host.is_none() {
            lock(&self.store).mark_present(repo, present.iter().cloned());
        }
        Ok(present)
    }

    /// The repositories that released events since the last call, each with the
    /// authors of the events released.
    pub(crate) fn take_released(&self) -> BTreeMap<RepoRef, BTreeSet<PublicKey>> {
        std::mem::take(
            &mut *self
                .released_in
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Whether some repository released events that [`GitSyncContext::take_released`]
    /// has not handed over yet.
    pub(crate) fn has_unreported_releases(&self) -> bool {
        !self
            .released_in
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// The last released event the sink refused for good (dropped from purgatory).
    pub(crate) fn last_store_refusal(&self) -> Option<ReleaseRefusal> {
        self.last_store_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The sink refused `held` for good: logged, counted and kept as the last refusal;
    /// the caller drops it from purgatory.
    fn refused_by_store(&self, held: &HeldEvent, reason: &str) {
        tracing::warn!(
            id = %held.event.id,
            kind = held.event.kind.as_u16(),
            repo = %held.repo,
            reason,
            "the store refused a purgatory event for good; dropped, not offered again"
        );
        if let Some(metrics) = &self.metrics {
            metrics.events_refused_by_store.inc();
        }
        let refusal = ReleaseRefusal::new(held, reason, self.clock.unix_time());
        *self
            .last_store_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(refusal);
    }

    /// Counts fetched objects, refused URLs and removed refs in these metrics.
    pub(crate) fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.refusals = Some(UrlRefusals::new(metrics.url_refusals.clone()));
        self.metrics = Some(metrics);
        self
    }

    /// Every object the held events of `repo` need (ours or the host's).
    fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        match &self.host {
            Some(host) => host.needed_oids(repo),
            None => lock(&self.store).needed_oids(repo),
        }
    }

    /// Checks which needed objects are present, records it and returns them.
    async fn refresh_present(
        &self,
        repo: &RepoRef,
        target: &Path,
    ) -> Result<BTreeSet<GitOid>, GitError> {
        let needed: Vec<GitOid> = self.needed_oids(repo).into_iter().collect();
        let present = self.git.existing(target, &needed).await?;
        match &self.host {
            Some(host) => host.set_present(repo, present.clone()),
            None => lock(&self.store).mark_present(repo, present.iter().cloned()),
        }
        Ok(present)
    }

    /// Checks which of the objects `repo`'s held events need and purgatory does not
    /// know present (a fetch marks what it brought) are in `target` now (a push may have
    /// brought them), and records them: no git process when every object is known.
    async fn check_unknown_present(&self, repo: &RepoRef, target: &Path) -> Result<(), GitError> {
        let unknown: Vec<GitOid> = lock(&self.store).missing_oids(repo).into_iter().collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let present = self.git.existing(target, &unknown).await?;
        lock(&self.store).mark_present(repo, present);
        Ok(())
    }

    /// The host's satisfied events of `repo` released by the host (its local repository
    /// is `target`); their stale refs swept, the repository noted for reconciliation.
    async fn release_for_host(
        &self,
        host: &HostHeld,
        repo: &RepoRef,
        target: &Path,
    ) -> Result<usize, SyncContextError> {
        let present = self
            .refresh_present(repo, target)
            .await
            .map_err(|error| Self::processing_error(repo, error))?;
        let is_present = move |oid: &GitOid| present.contains(oid);
        let released = host
            .host()
            .release_satisfied(repo, &is_present)
            .await
            .map_err(|error| {
                tracing::warn!(%repo, %error, "the host failed to release its purgatory events");
                Self::processing_error(repo, error)
            })?;
        host.forget_if_done(repo);
        if released == 0 {
            return Ok(0);
        }
        tracing::info!(%repo, released, "the host released its purgatory events");
        let sweep = {
            let mut store = lock(&self.store);
            store.request_sweeps([repo.clone()]);
            store.claim_sweep(repo)
        };
        if sweep {
            self.sweep_refs(repo).await;
        }
        // The host does not say whose events it released: no author, read by the
        // service as "any of the repository's maintainers".
        self.released_in
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(repo.clone())
            .or_default();
        if let Some(metrics) = &self.metrics {
            metrics.events_released.inc_by(released as u64);
        }
        Ok(released)
    }

    /// Writes the `refs/nostr/<id>` tip ref of every pull request (and update) of
    /// `releasing` in one `update-ref` transaction, before any of them is published:
    /// one git process for the batch, not one per event. `Err` names why it failed
    /// (those events then fail to release and stay held).
    async fn write_pull_request_tips(
        &self,
        target: &Path,
        releasing: &[HeldEvent],
    ) -> Result<(), String> {
        let tips: Vec<(String, Option<GitOid>)> = releasing
            .iter()
            .filter_map(|held| match &held.kind {
                HeldKind::PullRequest { tip, .. } => Some((
                    format!("{NOSTR_REF_PREFIX}{}", held.event.id),
                    Some(tip.clone()),
                )),
                _ => None,
            })
            .collect();
        self.git
            .update_refs(target, &tips)
            .await
            .map_err(|error| error.to_string())
    }

    /// Hands `held` to the sink, unless its tip ref could not be written (`tips`).
    async fn release_one(
        &self,
        held: &HeldEvent,
        tips: &Result<(), String>,
    ) -> Result<(), ReleaseFailure> {
        if let (HeldKind::PullRequest { .. }, Err(reason)) = (&held.kind, tips) {
            return Err(ReleaseFailure::Failed(reason.clone()));
        }
        self.sink.release(held).await.map_err(|error| match error {
            ReleaseError::Refused(reason) => ReleaseFailure::Refused(reason),
            error => ReleaseFailure::Failed(error.to_string()),
        })
    }

    /// Runs a sweep of `repo` claimed from the store ([`PurgatoryStore::claim_sweep`] or
    /// [`PurgatoryStore::claim_sweeps`]) and marks it finished; returns how many refs it
    /// deleted.
    pub(crate) async fn sweep_refs(&self, repo: &RepoRef) -> usize {
        // Asked before the refs are listed: an event leaving meanwhile owes another.
        let prune = lock(&self.store).take_prune(repo);
        let removed = self.delete_stale_refs(repo).await;
        if prune && removed > 0 {
            self.prune_unreachable(repo).await;
        }
        lock(&self.store).sweep_finished(repo);
        removed
    }

    /// Deletes the objects of `repo`'s local repository that its swept refs kept:
    /// those fetched for events that left purgatory unreleased. Failures are logged.
    async fn prune_unreachable(&self, repo: &RepoRef) {
        let Some(target) = self.locator.locate(repo) else {
            return;
        };
        match self.git.prune_unreachable(&target).await {
            Ok(()) => {
                tracing::debug!(%repo, "unreachable objects pruned");
                self.measure(repo, &target);
                if let Some(metrics) = &self.metrics {
                    metrics.repositories_pruned.inc();
                }
            }
            Err(error) => tracing::warn!(%repo, %error, "pruning unreachable objects failed"),
        }
    }

    /// Deletes the `refs/purgatory/*` of `repo`'s local repository that no held event of
    /// `repo` needs (their events were released, expired or replaced, or a crash left
    /// them); returns how many. Failures are logged: the refs only keep objects alive.
    async fn delete_stale_refs(&self, repo: &RepoRef) -> usize {
        let Some(target) = self.locator.locate(repo) else {
            return 0;
        };
        let names = match self.git.purgatory_refs(&target).await {
            Ok(names) => names,
            Err(error) => {
                tracing::warn!(%repo, %error, "listing purgatory refs failed");
                return 0;
            }
        };
        let needed = self.needed_oids(repo);
        let stale: Vec<(String, Option<GitOid>)> = names
            .into_iter()
            .filter(|name| {
                let oid = name
                    .strip_prefix(PURGATORY_REF_PREFIX)
                    .and_then(|hex| GitOid::parse(hex).ok());
                oid.is_none_or(|oid| !needed.contains(&oid))
            })
            .map(|name| (name, None))
            .collect();
        if stale.is_empty() {
            return 0;
        }
        if let Err(error) = self.git.update_refs(&target, &stale).await {
            tracing::warn!(%repo, %error, "deleting stale purgatory refs failed");
            return 0;
        }
        tracing::debug!(%repo, removed = stale.len(), "stale purgatory refs deleted");
        if let Some(metrics) = &self.metrics {
            metrics.stale_refs_removed.inc_by(stale.len() as u64);
        }
        stale.len()
    }

    fn processing_error(repo: &RepoRef, reason: impl std::fmt::Display) -> SyncContextError {
        SyncContextError::Processing {
            repo: repo.clone(),
            reason: reason.to_string(),
        }
    }
}

#[async_trait]
impl SyncContext for GitSyncContext {
    async fn fetch_repository_data(
        &self,
        repo: &RepoRef,
    ) -> Result<RepositoryData, SyncContextError> {
        let mut data = repository_data(self.announcements.as_ref(), repo)
            .await
            .map_err(|error| Self::processing_error(repo, error))?
            .ok_or_else(|| SyncContextError::UnknownRepository { repo: repo.clone() })?;
        data.event_sources = match &self.host {
            Some(host) => host.event_sources(repo),
            None => lock(&self.store).event_sources(repo),
        };
        Ok(data)
    }

    async fn move_to_home_repositories(
        &self,
        repo: &RepoRef,
    ) -> Result<Vec<RepoRef>, SyncContextError> {
        if self.host.is_some() {
            // The host's events are the host's to move: nothing is moved here.
            return Ok(Vec::new());
        }
        let homes = homes_of(self.announcements.as_ref(), repo)
            .await
            .map_err(|error| Self::processing_error(repo, error))?;
        if !homes.is_empty() {
            let moved = lock(&self.store).spread_repository(repo, &homes);
            tracing::info!(%repo, homes = homes.len(), moved, "held events held for every repository whose maintainers list their author");
        }
        Ok(homes)
    }

    fn collect_needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        match &self.host {
            Some(host) => host.missing_oids(repo),
            None => lock(&self.store).missing_oids(repo),
        }
    }

    /// Answers from what purgatory last saw in `repo`'s local repository (no process is
    /// run).
    fn oid_exists(&self, repo: &RepoRef, oid: &GitOid) -> bool {
        match &self.host {
            Some(host) => host.is_known_present(repo, oid),
            None => lock(&self.store).is_known_present(repo, oid),
        }
    }

    async fn fetch_oids(
        &self,
        repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError> {
        let repo = self.disk().repository_at(repo_path).cloned();
        if let Some(repo) = &repo {
            self.check_quota(repo)
                .map_err(|error| Self::processing_error(repo, error))?;
        }
        let fetched = self.git.fetch(repo_path, url.as_str(), oids).await;
        if let Some(repo) = &repo {
            self.measure(repo, repo_path);
        }
        let report = match fetched {
            Ok(report) => report,
            Err(error) => {
                if let Some(refusals) = &self.refusals {
                    refusals.note(url.as_str(), &error);
                }
                return Err(SyncContextError::Fetch {
                    url: url.as_str().to_owned(),
                    reason: error.to_string(),
                });
            }
        };
        if let Some(reason) = report.error {
            if oids.len() > 1 {
                return Err(SyncContextError::ObjectsMissing {
                    url: url.as_str().to_owned(),
                    reason,
                });
            }
            tracing::debug!(%url, %reason, "the server lacks the object");
        }
        if let Some(metrics) = &self.metrics {
            metrics.oids_fetched.inc_by(report.present.len() as u64);
        }
        if let (Some(repo), None) = (&repo, &self.host) {
            // The fetch checked them: the release that follows runs no check of its own.
            lock(&self.store).mark_present(repo, report.present.iter().cloned());
        }
        if let Some(repo) = &repo {
            // The other owners of the identifier copy them from here.
            self.groups.fetched(repo, &report.present);
        }
        Ok(report.present.into_iter().collect())
    }

    async fn process_satisfiable_events(&self, repo: &RepoRef) -> Result<usize, SyncContextError> {
        let Some(target) = self.find_target_repo(repo) else {
            return Ok(0);
        };
        if let Some(host) = &self.host {
            return self.release_for_host(host, repo, &target).await;
        }
        self.check_unknown_present(repo, &target)
            .await
            .map_err(|error| Self::processing_error(repo, error))?;
        let now = self.clock.unix_time();
        let satisfied = lock(&self.store).begin_release(repo, now, self.expiry);
        let mut released = Vec::new();
        let mut authors = BTreeSet::new();
        let mut refused = Vec::new();
        let mut failed = Vec::new();
        let mut stale = BTreeSet::new();
        let mut last_error = None;
        let tips = self.write_pull_request_tips(&target, &satisfied).await;
        for held in satisfied {
            match self.release_one(&held, &tips).await {
                Ok(()) => {
                    released.push(held.event.id);
                    authors.insert(held.event.pubkey);
                }
                Err(ReleaseFailure::Refused(reason)) => {
                    self.refused_by_store(&held, &reason);
                    refused.push(held.event.id);
                }
                Err(ReleaseFailure::Failed(reason)) => {
                    tracing::warn!(id = %held.event.id, %reason, "releasing a purgatory event failed");
                    last_error = Some(reason);
                    failed.push(held.event.id);
                    stale.extend(held.needed_oids());
                }
            }
        }
        let sweep = {
            let mut store = lock(&self.store);
            store.finish_release(repo, &released);
            store.refuse_release(repo, &refused);
            store.abort_release(&failed);
            store.forget_present(repo, &stale);
            store.claim_sweep(repo)
        };
        if sweep {
            self.sweep_refs(repo).await;
        }
        if !released.is_empty() {
            tracing::info!(%repo, released = released.len(), "released purgatory events");
            self.released_in
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(repo.clone())
                .or_default()
                .extend(authors);
        }
        if let Some(metrics) = &self.metrics {
            metrics.events_released.inc_by(released.len() as u64);
        }
        match last_error {
            Some(reason) if released.is_empty() => Err(Self::processing_error(repo, reason)),
            _ => Ok(released.len()),
        }
    }

    fn has_pending_events(&self, repo: &RepoRef) -> bool {
        match &self.host {
            Some(host) => host.host().has_pending(repo),
            None => lock(&self.store).has_pending(repo),
        }
    }

    fn find_target_repo(&self, repo: &RepoRef) -> Option<PathBuf> {
        let path = self.locator.locate(repo)?;
        if !self.disk().is_measured(&path) {
            self.measure(repo, &path);
        }
        Some(path)
    }

    fn creates_repositories(&self) -> bool {
        self.creates_repositories
    }

    async fn create_target_repo(&self, repo: &RepoRef) -> Result<PathBuf, SyncContextError> {
        let failed = |error: CreateRepoError| {
            tracing::warn!(%repo, %error, "creating the local repository failed");
            SyncContextError::CreateRepository {
                repo: repo.clone(),
                reason: error.to_string(),
            }
        };
        let Some(path) = self.locator.place(repo) else {
            tracing::debug!(%repo, "no place for the local repository");
            return Err(SyncContextError::NoPlaceForRepository { repo: repo.clone() });
        };
        if !path.is_dir() {
            self.check_quota(repo)
                .map_err(|error| SyncContextError::CreateRepository {
                    repo: repo.clone(),
                    reason: error.to_string(),
                })?;
        }
        let created = create_bare_repository(self.git.as_ref(), &path)
            .await
            .map_err(failed)?;
        self.measure(repo, &path);
        if created {
            tracing::info!(%repo, path = %path.display(), "created the local repository");
            if let Some(metrics) = &self.metrics {
                metrics.repositories_created.inc();
            }
        }
        Ok(path)
    }

    fn own_service(&self) -> &OwnService {
        &self.own_service
    }

    /// Copies, from the local repositories of the other members of `repo`'s group (the
    /// owners of its identifier scheduled by
    /// [`Purgatory::schedule_identifier`](crate::Purgatory::schedule_identifier)), the
    /// needed objects that were fetched there; a copy that fails is logged, and its
    /// objects are then fetched from clone URLs as usual.
    async fn copy_from_group(&self, repo: &RepoRef) -> Result<usize, SyncContextError> {
        let missing = self.collect_needed_oids(repo);
        if missing.is_empty() {
            return Ok(0);
        }
        let sources = self.groups.sources(repo, &missing);
        if sources.is_empty() {
            return Ok(0);
        }
        let Some(target) = self.find_target_repo(repo) else {
            return Ok(0);
        };
        let mut copied = 0;
        for (from, oids) in sources {
            match self.copy_from(repo, &target, &from, &oids).await {
                Ok(present) => {
                    let got = oids.iter().filter(|oid| present.contains(*oid)).count();
                    tracing::info!(%repo, %from, objects = got, "objects copied from another owner's repository of the identifier, not fetched again");
                    copied += got;
                }
                Err(error) => {
                    tracing::warn!(%repo, %from, %error, "copying objects from another owner's repository failed; fetching them instead");
                }
            }
        }
        Ok(copied)
    }
}
