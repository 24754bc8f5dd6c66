//! The run loop's side of the store task: the queue of jobs it hands the
//! [`StoreWorker`], the jobs a full queue refused (answered to the engine
//! as a transient failure instead of growing memory), and the task itself.

use std::sync::Arc;

use grasp_sync_core::store::EventStore;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::warn;

use super::store_worker::{StoreJob, StoreResult, StoreWorker};

/// Store jobs queued for the store task before more are answered "store
/// queue full" (the engine then retries them with backoff).
const STORE_QUEUE: usize = 65_536;

/// Answers of the store task waiting for the run loop.
const STORE_ANSWERS: usize = 4096;

/// The store task's queue, what it refused, and the task.
pub(super) struct StoreQueue {
    jobs: mpsc::Sender<StoreJob>,
    /// Jobs refused because the queue was full, to be answered to the
    /// engine as a transient store failure.
    refused: Vec<StoreJob>,
    task: JoinSet<()>,
}

impl StoreQueue {
    /// Starts the store task on `store`; its answers come on the receiver.
    pub(super) fn start(
        store: Arc<dyn EventStore>,
        shutdown: watch::Receiver<bool>,
    ) -> (Self, mpsc::Receiver<StoreResult>) {
        let (jobs, jobs_rx) = mpsc::channel(STORE_QUEUE);
        let (results, results_rx) = mpsc::channel(STORE_ANSWERS);
        let mut task = JoinSet::new();
        task.spawn(StoreWorker::new(store, jobs_rx, results, shutdown).run());
        let queue = StoreQueue {
            jobs,
            refused: Vec::new(),
            task,
        };
        (queue, results_rx)
    }

    /// Hands a job to the store task; a full queue (a store far behind)
    /// keeps it for [`StoreQueue::take_refused`].
    pub(super) fn queue(&mut self, job: StoreJob) {
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job)) => self.refused.push(job),
            Err(mpsc::error::TrySendError::Closed(_)) => warn!("the store task stopped"),
        }
    }

    /// The jobs the full queue refused since the last call.
    pub(super) fn take_refused(&mut self) -> Vec<StoreJob> {
        std::mem::take(&mut self.refused)
    }

    /// The store task, to wait for it on shutdown.
    pub(super) fn take_task(&mut self) -> JoinSet<()> {
        std::mem::take(&mut self.task)
    }
}
