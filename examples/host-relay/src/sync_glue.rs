//! The glue for our sync: the store the engine writes to, and the manager.
//!
//! Announcements, states, PRs and PR updates go to the host's purgatory (answered
//! [`IngestOutcome::Held`] while their git data is missing), everything else to the
//! relay's database. What the purgatory holds counts as present for the engine
//! (`contains`, NIP-77's local items), so a re-sync never fetches it again.

use std::sync::Arc;

use async_trait::async_trait;
use grasp_purgatory::Origin;
use grasp_sync_core::nip34::KIND_REPO_ANNOUNCEMENT;
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use grasp_sync_relay_builder::RelayBuilderStore;
use grasp_sync_tokio::{BuildError, SyncManager};
use nostr::prelude::{Event, EventId, Filter, Kind, RelayUrl, Timestamp};

use crate::host_purgatory::{Admission, AdmitError, OwnPurgatory, HELD_KINDS};

/// The engine's store: the host's purgatory for held kinds, the relay for the rest.
#[derive(Debug, Clone)]
pub struct HostStore {
    purgatory: Arc<OwnPurgatory>,
    relay: RelayBuilderStore,
}

impl HostStore {
    /// A store over the host's `purgatory` and its `relay`.
    pub fn new(purgatory: Arc<OwnPurgatory>, relay: RelayBuilderStore) -> Self {
        HostStore { purgatory, relay }
    }
}

#[async_trait]
impl EventStore for HostStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        if !HELD_KINDS.contains(&event.kind.as_u16()) || self.relay.contains(&event.id).await? {
            return self.relay.ingest(event).await;
        }
        match self.purgatory.admit(event.clone(), Origin::Synced).await {
            Ok(Admission::Held) => Ok(IngestOutcome::Held),
            Ok(Admission::Ready) => self.relay.ingest(event).await,
            Err(AdmitError::Full) => Ok(IngestOutcome::refused_for_now("blocked: purgatory full")),
            Err(error) => Ok(IngestOutcome::refused_for_good(format!("invalid: {error}"))),
        }
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        Ok(self.purgatory.holds(id) || self.relay.contains(id).await?)
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let mut items = self.relay.negentropy_items(filter).await?;
        let held = self.purgatory.matching(filter);
        items.extend(held.iter().map(|event| (event.id, event.created_at)));
        items.sort_unstable();
        items.dedup();
        Ok(items)
    }
}

/// What the host's configuration says about the sync.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// The host's own relay (its front), as announcements list it.
    pub own_relay: RelayUrl,
    /// Relays connected from the start.
    pub bootstrap_relays: Vec<RelayUrl>,
    /// NIP-77 on or off; `None`: the environment's `NGIT_SYNC_DISABLE_NEGENTROPY`.
    pub negentropy: Option<bool>,
    /// Relays on loopback and private addresses may be synced from.
    pub local_network: bool,
}

/// The sync manager: our engine over `store`, its metrics in the host's `registry`.
pub fn build_sync(
    store: HostStore,
    registry: prometheus::Registry,
    settings: &SyncSettings,
) -> Result<SyncManager, BuildError> {
    let mut builder = SyncManager::builder()
        .from_env()?
        .own_relay(settings.own_relay.clone())
        .store(Arc::new(store))
        .registry(registry)
        .allow_local_addresses(settings.local_network);
    for relay in &settings.bootstrap_relays {
        builder = builder.bootstrap_relay(relay.clone());
    }
    if let Some(negentropy) = settings.negentropy {
        builder = builder.negentropy(negentropy);
    }
    builder.build()
}

/// Tells a sync that starts while the host holds announcements about them (held
/// events are present to its store, so it would not fetch them): the sync holds each
/// repository and syncs its states. It promotes one itself when the host's relay
/// serves its announcement.
pub fn tell_held(manager: &SyncManager, purgatory: &OwnPurgatory) {
    let held = manager.held_repositories();
    let kind = Filter::new().kind(Kind::Custom(KIND_REPO_ANNOUNCEMENT));
    let announcements = purgatory.matching(&kind);
    tokio::spawn(async move {
        for event in announcements {
            if held.hold_announcement(event).await.is_err() {
                return;
            }
        }
    });
}
