//! The glue for our fetch scheduler: it works for the host's purgatory.
//!
//! The scheduler (queue, throttles, safe fetch, `refs/purgatory` sweep, served refs)
//! asks the host's purgatory what it needs and releases through it; clone URLs come
//! from the relay's database and the held announcements. The purgatory tells the
//! scheduler what it holds and the sync what it drops ([`Hooks`]).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use grasp_purgatory::{HostPurgatory, Origin, Purgatory, PurgatoryBuildError, ReleaseError};
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::EventSource;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_relay_builder::RelayBuilderAnnouncements;
use grasp_sync_tokio::HeldRepositories;
use nostr::prelude::{Event, EventId, Filter};
use tracing::warn;

use crate::host_purgatory::{HoldListener, OwnPurgatory};

#[async_trait]
impl HostPurgatory for OwnPurgatory {
    fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        OwnPurgatory::needed_oids(self, repo)
    }

    fn has_pending(&self, repo: &RepoRef) -> bool {
        OwnPurgatory::has_pending(self, repo)
    }

    fn event_sources(&self, repo: &RepoRef) -> Vec<EventSource> {
        OwnPurgatory::event_sources(self, repo)
    }

    async fn release_satisfied(
        &self,
        repo: &RepoRef,
        present: &(dyn for<'o> Fn(&'o GitOid) -> bool + Send + Sync),
    ) -> Result<usize, ReleaseError> {
        OwnPurgatory::release_satisfied(self, repo, present).await
    }

    fn held_announcements(&self, filter: &Filter) -> Vec<Event> {
        self.matching(filter)
    }
}

/// What the host's configuration says about fetching.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    /// Where the served repositories live (`<npub>/<identifier>.git`).
    pub git_root: PathBuf,
    /// How long a fetch for an event a user submitted waits (a push may follow).
    pub submitted_delay: Duration,
    /// Clone URLs on loopback and private addresses, and plain `http://`, may be used.
    pub local_network: bool,
}

/// Our scheduler, working for `purgatory` (clone URLs from the relay's `announcements`
/// and the held ones), its metrics in the host's `registry`.
pub fn build_scheduler(
    purgatory: Arc<OwnPurgatory>,
    announcements: RelayBuilderAnnouncements,
    registry: prometheus::Registry,
    settings: &SchedulerSettings,
) -> Result<Purgatory, PurgatoryBuildError> {
    let policy = CloneUrlPolicy::new()
        .allow_local_addresses(settings.local_network)
        .allow_http(settings.local_network);
    Purgatory::builder()
        .host_purgatory(purgatory)
        .announcements(Arc::new(announcements))
        .repos_root(&settings.git_root)
        .registry(registry)
        .clone_policy(policy)
        .default_delay(settings.submitted_delay)
        .build()
}

/// Tells our scheduler what the host's purgatory holds, and our sync what it drops
/// (the sync sees a promotion itself: the relay serves the released announcement).
#[derive(Debug, Clone)]
pub struct Hooks {
    scheduler: Purgatory,
    sync: HeldRepositories,
}

impl Hooks {
    /// Hooks to `scheduler` and to the sync's held repositories.
    pub fn new(scheduler: Purgatory, sync: HeldRepositories) -> Self {
        Hooks { scheduler, sync }
    }
}

#[async_trait]
impl HoldListener for Hooks {
    fn holding(&self, repo: &RepoRef, origin: Origin) {
        self.scheduler.schedule(repo, origin);
    }

    async fn dropped(&self, ids: Vec<EventId>) {
        if let Err(error) = self.sync.dropped(ids).await {
            warn!(%error, "the sync did not hear of the expired events");
        }
    }
}
