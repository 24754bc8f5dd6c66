//! The core's `EventStore` over a `nostr-database` `NostrDatabase`, so a
//! relay built on rust-nostr (its LMDB or memory store) plugs in directly.

use std::sync::Arc;

use async_trait::async_trait;
use grasp_sync_core::store::{EventStore, IngestOutcome, Refusal, StoreError};
use nostr::prelude::{Event, EventId, Filter, Timestamp};
use nostr_database::{DatabaseEventStatus, NostrDatabase, RejectedReason, SaveEventStatus};

/// A `NostrDatabase` as the sync's event store: for a relay built on
/// rust-nostr that embeds the library and stores synced events straight
/// into its own database.
///
/// ```no_run
/// use std::sync::Arc;
/// use grasp_sync_tokio::nostr_database::NostrDatabase;
/// use grasp_sync_tokio::{DatabaseStore, SyncManager};
///
/// # fn demo(database: Arc<dyn NostrDatabase>) -> Result<(), Box<dyn std::error::Error>> {
/// let manager = SyncManager::builder()
///     .store(Arc::new(DatabaseStore::new(database)))
///     .build()?;
/// // The relay hands the events it accepts (30617, 1617, 1618, 1621) to
/// // the engine in process instead of a self-subscription:
/// let accepted = manager.own_events_sender();
/// # drop(accepted);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct DatabaseStore {
    database: Arc<dyn NostrDatabase>,
}

impl DatabaseStore {
    /// Stores into `database`.
    pub fn new(database: Arc<dyn NostrDatabase>) -> Self {
        DatabaseStore { database }
    }
}

/// The database's refusal as the sync reads it: an event it says it will
/// never keep (ephemeral, deleted, expired, its author vanished, a deletion
/// of another's event) is refused for good; one it refused for another
/// reason is unclear (offered again a few times).
fn refusal(reason: RejectedReason) -> IngestOutcome {
    let text = format!("{reason:?}");
    match reason {
        RejectedReason::Other => IngestOutcome::Rejected {
            reason: text,
            refusal: Refusal::Unclear,
        },
        _ => IngestOutcome::refused_for_good(text),
    }
}

fn backend(error: nostr_database::error::Error) -> StoreError {
    StoreError::backend(error)
}

#[async_trait]
impl EventStore for DatabaseStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        let status = self.database.save_event(event).await.map_err(backend)?;
        Ok(match status {
            SaveEventStatus::Success => IngestOutcome::Stored,
            SaveEventStatus::Rejected(RejectedReason::Duplicate | RejectedReason::Replaced) => {
                IngestOutcome::Duplicate
            }
            SaveEventStatus::Rejected(reason) => refusal(reason),
        })
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        let status = self.database.check_id(id).await.map_err(backend)?;
        Ok(status == DatabaseEventStatus::Saved)
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        self.database
            .negentropy_items(filter.clone())
            .await
            .map_err(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_sync_test_support::nip34::Announcement;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind};

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn ingest_reports_new_duplicate_and_replaced_events() {
        let store = DatabaseStore::new(Arc::new(nostr_memory::MemoryDatabase::unbounded()));
        let keys = Keys::generate();
        let note = EventBuilder::new(Kind::TextNote, "hi")
            .finalize(&keys)
            .unwrap();
        assert_eq!(
            block_on(store.ingest(&note)).unwrap(),
            IngestOutcome::Stored
        );
        assert_eq!(
            block_on(store.ingest(&note)).unwrap(),
            IngestOutcome::Duplicate
        );
        assert!(block_on(store.contains(&note.id)).unwrap());
        let announce = |at: u64| Announcement::new("repo").at(at).sign(&keys);
        assert_eq!(
            block_on(store.ingest(&announce(20))).unwrap(),
            IngestOutcome::Stored
        );
        assert_eq!(
            block_on(store.ingest(&announce(10))).unwrap(),
            IngestOutcome::Duplicate,
            "older version"
        );
        let items = block_on(store.negentropy_items(&Filter::new().kind(Kind::TextNote))).unwrap();
        assert_eq!(items, vec![(note.id, note.created_at)]);
    }
}
