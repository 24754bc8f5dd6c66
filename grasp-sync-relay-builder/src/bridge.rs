//! The bridge: the sync's store over the relay's database (delivering synced
//! events to its live subscribers), the relay's database wrapped to report
//! the announcements and root events it stores to the sync, purgatory's
//! announcements.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use grasp_purgatory::{AnnouncementError, Announcements};
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use nostr::prelude::{Event, EventId, Filter, Timestamp};
use nostr_relay_builder::prelude as r44;
use tokio::sync::mpsc;
use tracing::warn;

use crate::convert::{event_from_r44, event_to_r44, filter_to_r44, id_to_r44, item_from_r44};
use crate::report::{self, Handoff, ReportingDatabase};

/// Stored events waiting to be handed to the sync, by default.
const REPORT_QUEUE: usize = 4096;

/// Ties one relay-builder relay to the sync. See the [crate docs](crate).
#[derive(Debug)]
pub struct Bridge {
    database: Arc<dyn r44::NostrDatabase>,
    handoff: Arc<Handoff>,
    pending: Mutex<Option<mpsc::Receiver<r44::Event>>>,
}

impl Bridge {
    /// A bridge over the relay's `database`; give the relay
    /// [`Bridge::database`] (this one, reporting what it stores).
    pub fn new(database: Arc<dyn r44::NostrDatabase>) -> Self {
        Bridge::with_report_queue(database, REPORT_QUEUE)
    }

    /// A bridge holding up to `capacity` stored events (at least one) for
    /// the sync (4096 with [`Bridge::new`]). When the sync falls further
    /// behind, the relay still stores at full speed and the overflow is
    /// re-read from the database once the sync reads again.
    pub fn with_report_queue(database: Arc<dyn r44::NostrDatabase>, capacity: usize) -> Self {
        let (handoff, pending) = Handoff::new(capacity);
        Bridge {
            database,
            handoff,
            pending: Mutex::new(Some(pending)),
        }
    }

    /// The database to give the relay's builder
    /// ([`RelayBuilder::database`](r44::RelayBuilder::database)): the
    /// relay's own, reporting each announcement and root event (30617,
    /// 1617, 1618, 1621) the relay **stored** (after all its write policies
    /// and its duplicate and deletion checks) to the sync, without ever
    /// making the relay wait.
    pub fn database(&self) -> Arc<dyn r44::NostrDatabase> {
        Arc::new(ReportingDatabase::new(
            self.database.clone(),
            self.handoff.clone(),
        ))
    }

    /// The sync's store: saves into the relay's database and delivers each
    /// new event to the relay's live subscribers (the sync is not told of
    /// its own writes).
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

    /// Hands what the relay stores to `own_events` (the manager's
    /// [`own_events_sender`](grasp_sync_tokio::SyncManager::own_events_sender)),
    /// in the order stored; what overflowed the queue follows, re-read from
    /// the database. Call it once, inside the runtime.
    pub fn forward_accepted_to(&self, own_events: mpsc::Sender<Event>) {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(queue) = pending else {
            warn!("forward_accepted_to called twice; the first call forwards");
            return;
        };
        tokio::spawn(report::forward(
            self.handoff.clone(),
            queue,
            self.database.clone(),
            own_events,
        ));
    }

    /// How many stored events overflowed the queue while the sync was not
    /// reading, since the bridge was made: each was re-read from the
    /// database and reported, none lost.
    pub fn overflowed_reports(&self) -> u64 {
        self.handoff.overflowed()
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
