//! The store task: the run loop never awaits the store itself, so a slow
//! store never delays relay messages or deadlines. Answers go back to the
//! engine, which decides what a refusal or a failure means.

use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use grasp_sync_core::engine::StoreVerdict;
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use grasp_sync_core::verified::VerifiedEvent;
use nostr::prelude::{EventId, Filter, RelayUrl, SubscriptionId, Timestamp};
use tokio::sync::{mpsc, watch};
use tracing::debug;

use super::Runner;

/// Work for the store task.
pub(super) enum StoreJob {
    Ingest {
        relay: RelayUrl,
        /// Shared with the engine's copy until the store answered.
        event: VerifiedEvent,
    },
    Items {
        relay: RelayUrl,
        id: SubscriptionId,
        filter: Box<Filter>,
    },
}

/// What the store task reports back to the run loop.
pub(super) enum StoreResult {
    Ingested {
        relay: RelayUrl,
        id: EventId,
        outcome: Result<IngestOutcome, StoreError>,
    },
    Items {
        relay: RelayUrl,
        id: SubscriptionId,
        items: Result<Vec<(EventId, Timestamp)>, StoreError>,
    },
}

/// Store jobs running at once: a store that pipelines ([`RelayStore`]
/// keeps many events in flight on one connection, a database batches) gets
/// that many requests without waiting for each answer.
///
/// [`RelayStore`]: crate::RelayStore
pub(super) const STORE_WINDOW: usize = 256;

/// Runs up to [`STORE_WINDOW`] store jobs at once, answering each as it
/// completes (in any order: the engine matches answers by event id), until
/// the job channel closes or shutdown.
pub(super) async fn store_worker(
    store: Arc<dyn EventStore>,
    mut jobs: mpsc::Receiver<StoreJob>,
    results: mpsc::Sender<StoreResult>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            job = jobs.recv(), if open && running.len() < STORE_WINDOW => match job {
                Some(job) => running.push(run(store.clone(), job)),
                None => open = false,
            },
            Some(result) = running.next(), if !running.is_empty() => {
                tokio::select! {
                    _ = results.send(result) => {}
                    _ = shutdown.changed() => return,
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// One store job and its answer.
async fn run(store: Arc<dyn EventStore>, job: StoreJob) -> StoreResult {
    match job {
        StoreJob::Ingest { relay, event } => {
            let outcome = store.ingest(&event).await;
            let id = event.id;
            // Dropped before the answer goes back: the engine's copy is then
            // the last, and moves out without a copy.
            drop(event);
            StoreResult::Ingested { outcome, id, relay }
        }
        StoreJob::Items { relay, id, filter } => StoreResult::Items {
            items: store.negentropy_items(&filter).await,
            relay,
            id,
        },
    }
}

impl Runner {
    /// Counts the store's answer and hands it to the engine.
    pub(super) fn on_store_result(&mut self, result: StoreResult) {
        let now = self.clock_now();
        match result {
            StoreResult::Ingested { relay, id, outcome } => {
                self.count_store_outcome(&relay, id, &outcome);
                self.engine.handle_store_outcome(now, &id, outcome);
            }
            StoreResult::Items { relay, id, items } => match items {
                Ok(items) => self.engine.handle_local_items(now, &relay, &id, items),
                Err(error) => {
                    self.engine
                        .handle_local_items_failed(now, &relay, &id, &error.to_string())
                }
            },
        }
    }

    /// The summary's and the metrics' view of a store answer (the engine
    /// decides what it means).
    fn count_store_outcome(
        &mut self,
        relay: &RelayUrl,
        id: EventId,
        outcome: &Result<IngestOutcome, StoreError>,
    ) {
        match StoreVerdict::of(outcome) {
            StoreVerdict::Stored => {
                self.summary.events_stored += 1;
                self.metrics.events_synced.inc();
            }
            StoreVerdict::Duplicate => self.summary.events_duplicate += 1,
            StoreVerdict::Refused(reason) => {
                self.summary.events_rejected += 1;
                self.metrics
                    .dropped
                    .with_label_values(&["rejected_by_store"])
                    .inc();
                debug!(%relay, %id, reason, "store refused event");
            }
            StoreVerdict::Retry(reason) | StoreVerdict::Unclear(reason) => {
                self.summary.store_retries += 1;
                debug!(%relay, %id, reason, "store refused event for now; the engine decides");
            }
            _ => {}
        }
    }
}
