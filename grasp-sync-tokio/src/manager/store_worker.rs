//! The store task ([`StoreWorker`]): the run loop never awaits the store
//! itself, so a slow store never delays relay messages or deadlines. The
//! worker owns its end of the two channels (jobs in, answers out) and its
//! pacing (how many events are at the store, how many go in one call).
//! Answers go back to the engine, which decides what a refusal or a
//! failure means. [`StoreJob`] and [`StoreResult`] are what travels on the
//! channels.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use grasp_sync_core::engine::Command;
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use grasp_sync_core::verified::VerifiedEvent;
use nostr::prelude::{Event, EventId, Filter, RelayUrl, SubscriptionId, Timestamp};
use tokio::sync::{mpsc, watch};
use tracing::warn;

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

impl StoreJob {
    /// The store work `command` asks for, or the command back when it is
    /// for a connection.
    // The error is the command handed back whole (no failure, nothing to
    // box): it goes on to its connection.
    #[allow(clippy::result_large_err)]
    pub(super) fn of(command: Command) -> Result<StoreJob, Command> {
        match command {
            Command::QueryLocalItems { relay, id, filter } => Ok(StoreJob::Items {
                relay,
                id,
                filter: Box::new(filter),
            }),
            Command::Store { relay, event } => Ok(StoreJob::Ingest { relay, event }),
            command => Err(command),
        }
    }
}

/// What the store task reports back to the run loop.
pub(super) enum StoreResult {
    /// The answers to ingest jobs taken from the queue together, in order.
    Ingested(Vec<Ingested>),
    Items {
        relay: RelayUrl,
        id: SubscriptionId,
        items: Result<Vec<(EventId, Timestamp)>, StoreError>,
    },
}

impl StoreResult {
    /// How many answers it carries.
    pub(super) fn len(&self) -> usize {
        match self {
            StoreResult::Ingested(answers) => answers.len(),
            StoreResult::Items { .. } => 1,
        }
    }
}

/// The store's answer for one event.
pub(super) struct Ingested {
    pub(super) relay: RelayUrl,
    pub(super) id: EventId,
    pub(super) outcome: Result<IngestOutcome, StoreError>,
}

/// Store jobs running at once: a store that pipelines ([`RelayStore`]
/// keeps many events in flight on one connection, a database batches) gets
/// that many requests without waiting for each answer.
///
/// [`RelayStore`]: crate::RelayStore
const STORE_WINDOW: usize = 256;

/// Events handed to the store in one [`EventStore::ingest_many`] call, at
/// most: those already queued together (never waited for).
const STORE_BATCH: usize = 64;

/// The store task: takes jobs from its queue, runs up to [`STORE_WINDOW`]
/// events at once (the ingest jobs already queued go to the store together,
/// up to [`STORE_BATCH`]), and answers each batch as it completes (in any
/// order: the engine matches answers by event id).
pub(super) struct StoreWorker {
    store: Arc<dyn EventStore>,
    jobs: mpsc::Receiver<StoreJob>,
    results: mpsc::Sender<StoreResult>,
    shutdown: watch::Receiver<bool>,
    /// The work at the store: each answer and how many jobs it answers.
    running: FuturesUnordered<BoxFuture<'static, (StoreResult, usize)>>,
    /// Events (or listings) handed to the store and not answered yet.
    in_flight: usize,
    /// Jobs taken from the queue together, before they become work.
    taken: Vec<StoreJob>,
    /// Whether the job queue is still open.
    open: bool,
}

impl StoreWorker {
    /// A worker for `store` taking `jobs`, answering on `results`, until the
    /// job queue closes or `shutdown`.
    pub(super) fn new(
        store: Arc<dyn EventStore>,
        jobs: mpsc::Receiver<StoreJob>,
        results: mpsc::Sender<StoreResult>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        StoreWorker {
            store,
            jobs,
            results,
            shutdown,
            running: FuturesUnordered::new(),
            in_flight: 0,
            taken: Vec::with_capacity(STORE_BATCH),
            open: true,
        }
    }

    /// Runs store jobs until the job queue closed and every job was
    /// answered, or shutdown.
    pub(super) async fn run(mut self) {
        while self.open || !self.running.is_empty() {
            let room = self.room();
            tokio::select! {
                received = self.jobs.recv_many(&mut self.taken, room), if self.open && room > 0 => {
                    if received == 0 {
                        self.open = false;
                    }
                    self.in_flight += received;
                    for work in Work::split(&mut self.taken) {
                        self.running.push(Box::pin(work.run(self.store.clone())));
                    }
                }
                Some((result, done)) = self.running.next(), if !self.running.is_empty() => {
                    self.in_flight -= done;
                    tokio::select! {
                        _ = self.results.send(result) => {}
                        _ = self.shutdown.changed() => return,
                    }
                }
                _ = self.shutdown.changed() => return,
            }
        }
    }

    /// How many jobs may be taken from the queue now: a batch, within the
    /// window.
    fn room(&self) -> usize {
        STORE_BATCH.min(STORE_WINDOW.saturating_sub(self.in_flight))
    }
}

/// Work for the store: the events queued together, or one listing.
enum Work {
    Ingest(Vec<(RelayUrl, VerifiedEvent)>),
    Items {
        relay: RelayUrl,
        id: SubscriptionId,
        filter: Box<Filter>,
    },
}

impl Work {
    /// The jobs `taken` from the queue (emptied) as work: their events
    /// together, each listing on its own.
    fn split(taken: &mut Vec<StoreJob>) -> Vec<Work> {
        let mut events = Vec::new();
        let mut work = Vec::new();
        for job in taken.drain(..) {
            match job {
                StoreJob::Ingest { relay, event } => events.push((relay, event)),
                StoreJob::Items { relay, id, filter } => {
                    work.push(Work::Items { relay, id, filter })
                }
            }
        }
        if !events.is_empty() {
            work.push(Work::Ingest(events));
        }
        work
    }

    /// Runs the work; its answer and how many jobs it answers.
    async fn run(self, store: Arc<dyn EventStore>) -> (StoreResult, usize) {
        match self {
            Work::Ingest(events) => {
                let outcomes = {
                    let refs: Vec<&Event> = events.iter().map(|(_, event)| &**event).collect();
                    store.ingest_many(&refs).await
                };
                let done = events.len();
                let given = outcomes.len();
                if given > done {
                    warn!(given, done, "the store answered more events than it was given; the extra answers are ignored");
                }
                // An event the store gave no answer for fails (the engine
                // offers it again with backoff) rather than waiting for the
                // store timeout.
                let missing = std::iter::repeat_with(|| {
                    Err(StoreError::unavailable(format!(
                        "the store answered {given} of {done} events"
                    )))
                });
                // The events are dropped before the answers go back: the
                // engine's copy is then the last, and moves out without a
                // copy.
                let answers = events
                    .into_iter()
                    .zip(outcomes.into_iter().chain(missing))
                    .map(|((relay, event), outcome)| Ingested {
                        relay,
                        id: event.id,
                        outcome,
                    })
                    .collect();
                (StoreResult::Ingested(answers), done)
            }
            Work::Items { relay, id, filter } => {
                let items = store.negentropy_items(&filter).await;
                (StoreResult::Items { relay, id, items }, 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind};

    use super::*;

    /// Records the size of every batch it is handed and answers all but the
    /// last `short` events of each.
    #[derive(Default)]
    struct Recording {
        batches: Mutex<Vec<usize>>,
        short: usize,
    }

    #[async_trait]
    impl EventStore for Recording {
        async fn ingest(&self, _event: &Event) -> Result<IngestOutcome, StoreError> {
            Ok(IngestOutcome::Stored)
        }

        async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
            self.batches.lock().expect("lock").push(events.len());
            let answered = events.len().saturating_sub(self.short);
            vec![Ok(IngestOutcome::Stored); answered]
        }

        async fn contains(&self, _id: &EventId) -> Result<bool, StoreError> {
            Ok(false)
        }

        async fn negentropy_items(
            &self,
            _filter: &Filter,
        ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
            Ok(Vec::new())
        }
    }

    fn jobs(n: usize) -> Vec<StoreJob> {
        let keys = Keys::generate();
        let relay = RelayUrl::parse("ws://127.0.0.1:1").expect("url");
        (0..n)
            .map(|i| {
                let event = EventBuilder::new(Kind::TextNote, format!("{i}"))
                    .finalize(&keys)
                    .expect("signs");
                StoreJob::Ingest {
                    relay: relay.clone(),
                    event: VerifiedEvent::verify(event).expect("verifies"),
                }
            })
            .collect()
    }

    /// Queues `jobs` before the worker starts, closes the queue, and
    /// returns every answer (event id, outcome) and the batch sizes.
    async fn run_worker(
        store: Arc<Recording>,
        jobs: Vec<StoreJob>,
    ) -> Vec<(EventId, Result<IngestOutcome, StoreError>)> {
        let (jobs_tx, jobs_rx) = mpsc::channel(jobs.len());
        for job in jobs {
            jobs_tx
                .try_send(job)
                .map_err(|_| "queue full")
                .expect("fits");
        }
        drop(jobs_tx);
        let (results_tx, mut results_rx) = mpsc::channel(16);
        let (_shutdown_tx, shutdown_rx) = watch::channel(false);
        let worker = tokio::spawn(StoreWorker::new(store, jobs_rx, results_tx, shutdown_rx).run());
        let mut answers = Vec::new();
        while let Some(result) = results_rx.recv().await {
            if let StoreResult::Ingested(batch) = result {
                answers.extend(batch.into_iter().map(|answer| (answer.id, answer.outcome)));
            }
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), worker)
            .await
            .expect("the worker ends with its queue")
            .expect("the worker does not panic");
        answers
    }

    #[tokio::test]
    async fn jobs_queued_together_reach_the_store_in_batches_and_each_is_answered() {
        let store = Arc::new(Recording::default());
        let jobs = jobs(150);
        let ids: Vec<EventId> = jobs
            .iter()
            .filter_map(|job| match job {
                StoreJob::Ingest { event, .. } => Some(event.id),
                StoreJob::Items { .. } => None,
            })
            .collect();
        let answers = run_worker(store.clone(), jobs).await;
        let answered: Vec<EventId> = answers.iter().map(|(id, _)| *id).collect();
        assert_eq!(answered, ids, "every event answered once, in order");
        assert!(answers.iter().all(|(_, outcome)| outcome.is_ok()));
        let batches = store.batches.lock().expect("lock").clone();
        assert_eq!(
            batches,
            vec![STORE_BATCH, STORE_BATCH, 150 - 2 * STORE_BATCH]
        );
    }

    #[tokio::test]
    async fn events_a_store_gives_no_answer_for_fail_at_once() {
        let store = Arc::new(Recording {
            short: 1,
            ..Recording::default()
        });
        let answers = run_worker(store, jobs(3)).await;
        assert_eq!(answers.len(), 3, "no event left unanswered");
        assert!(answers[..2].iter().all(|(_, outcome)| outcome.is_ok()));
        match &answers[2].1 {
            Err(StoreError::Unavailable { reason }) => {
                assert_eq!(reason, "the store answered 2 of 3 events")
            }
            other => panic!("not a failure: {other:?}"),
        }
    }
}
