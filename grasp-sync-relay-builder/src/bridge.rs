//! The bridge: the sync's store over the relay's database (delivering synced
//! events to its live subscribers), the write policy that reports accepted
//! announcements and root events to the sync, purgatory's announcements.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use grasp_purgatory::{AnnouncementError, Announcements};
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use nostr::prelude::{Event, EventId, Filter, Timestamp};
use nostr_relay_builder::prelude as r44;
use tokio::sync::mpsc;
use tracing::warn;

use crate::convert::{event_from_r44, event_to_r44, filter_to_r44, id_to_r44, item_from_r44};

/// Kinds the sync must hear about when the relay accepts them.
const OWN_KINDS: [u16; 4] = [30617, 1617, 1618, 1621];
/// Accepted events waiting to be handed to the sync.
const ACCEPTED_QUEUE: usize = 4096;

/// Ties one relay-builder relay to the sync. See the [crate docs](crate).
#[derive(Debug)]
pub struct Bridge {
    database: Arc<dyn r44::NostrDatabase>,
    accepted: mpsc::Sender<Event>,
    pending: Mutex<Option<mpsc::Receiver<Event>>>,
}

impl Bridge {
    /// A bridge over the relay's `database` (the one given to its builder).
    pub fn new(database: Arc<dyn r44::NostrDatabase>) -> Self {
        let (accepted, pending) = mpsc::channel(ACCEPTED_QUEUE);
        Bridge {
            database,
            accepted,
            pending: Mutex::new(Some(pending)),
        }
    }

    /// The relay's write policy: accepts what the relay would, and reports
    /// accepted announcements and root events to the sync. Wrap it in your
    /// own policy if the relay refuses some events.
    pub fn write_policy(&self) -> ForwardAccepted {
        ForwardAccepted {
            accepted: self.accepted.clone(),
        }
    }

    /// The sync's store: saves into the relay's database and delivers each
    /// new event to the relay's live subscribers.
    pub fn store(&self, relay: r44::LocalRelay) -> RelayBuilderStore {
        RelayBuilderStore {
            database: self.database.clone(),
            relay,
        }
    }

    /// Purgatory's announcements, read from the relay's database.
    pub fn announcements(&self) -> RelayBuilderAnnouncements {
        RelayBuilderAnnouncements {
            database: self.database.clone(),
        }
    }

    /// Hands what the write policy reports to `own_events` (the manager's
    /// [`own_events_sender`](grasp_sync_tokio::SyncManager::own_events_sender)).
    /// Call it once, inside the runtime.
    pub fn forward_accepted_to(&self, own_events: mpsc::Sender<Event>) {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut accepted) = pending else {
            warn!("forward_accepted_to called twice; the first call forwards");
            return;
        };
        tokio::spawn(async move {
            while let Some(event) = accepted.recv().await {
                if own_events.send(event).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// The relay's write policy reporting accepted events to the sync.
#[derive(Debug, Clone)]
pub struct ForwardAccepted {
    accepted: mpsc::Sender<Event>,
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

impl r44::WritePolicy for ForwardAccepted {
    fn admit_event<'a>(
        &'a self,
        event: &'a r44::Event,
        _addr: &'a SocketAddr,
    ) -> Boxed<'a, r44::PolicyResult> {
        Box::pin(async move {
            if OWN_KINDS.contains(&event.kind.as_u16()) {
                match event_from_r44(event) {
                    Ok(event) => {
                        // Waits for room rather than dropping: the sync
                        // must hear of every accepted announcement.
                        if self.accepted.send(event).await.is_err() {
                            warn!("the sync stopped; accepted event not reported");
                        }
                    }
                    Err(error) => warn!(%error, "accepted event not reported to the sync"),
                }
            }
            r44::PolicyResult::Accept
        })
    }
}

/// The sync's store over a relay-builder relay.
#[derive(Debug, Clone)]
pub struct RelayBuilderStore {
    database: Arc<dyn r44::NostrDatabase>,
    relay: r44::LocalRelay,
}

fn unavailable(error: impl std::fmt::Display) -> StoreError {
    StoreError::unavailable(error)
}

#[async_trait]
impl EventStore for RelayBuilderStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        let event = event_to_r44(event).map_err(unavailable)?;
        let status = self
            .database
            .save_event(&event)
            .await
            .map_err(unavailable)?;
        Ok(match status {
            r44::SaveEventStatus::Success => {
                // Saved: the relay's subscribers see it like a published one.
                self.relay.notify_event(event);
                IngestOutcome::Stored
            }
            r44::SaveEventStatus::Rejected(
                r44::RejectedReason::Duplicate | r44::RejectedReason::Replaced,
            ) => IngestOutcome::Duplicate,
            r44::SaveEventStatus::Rejected(reason) => {
                IngestOutcome::refused_for_good(format!("blocked: {reason:?}"))
            }
        })
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        let status = self
            .database
            .check_id(&id_to_r44(id))
            .await
            .map_err(unavailable)?;
        Ok(status == r44::DatabaseEventStatus::Saved)
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let filter = filter_to_r44(filter).map_err(unavailable)?;
        let items = self
            .database
            .negentropy_items(filter)
            .await
            .map_err(unavailable)?;
        Ok(items.into_iter().map(item_from_r44).collect())
    }
}

/// Purgatory's announcements from a relay-builder relay's database.
#[derive(Debug, Clone)]
pub struct RelayBuilderAnnouncements {
    database: Arc<dyn r44::NostrDatabase>,
}

#[async_trait]
impl Announcements for RelayBuilderAnnouncements {
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        let filter =
            filter_to_r44(filter).map_err(|error| AnnouncementError::Backend(error.to_string()))?;
        let events = self
            .database
            .query(filter)
            .await
            .map_err(|error| AnnouncementError::Backend(error.to_string()))?;
        events
            .into_iter()
            .map(|event| {
                event_from_r44(&event)
                    .map_err(|error| AnnouncementError::Backend(error.to_string()))
            })
            .collect()
    }
}
