//! The background tasks of a purgatory, so that shutdown can stop every one of them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::task::JoinSet;

/// Spawned tasks, reaped as they finish and aborted together at shutdown.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    set: Mutex<JoinSet<()>>,
    closed: AtomicBool,
}

impl Tasks {
    /// Spawns `task` unless shutdown has begun.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.lock();
        // Checked under the lock: `shutdown` sets it under the same lock, so no task
        // slips into the set after it was emptied.
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        while let Some(result) = set.try_join_next() {
            log_panic(result);
        }
        set.spawn(task);
    }

    /// Refuses new tasks and aborts the running ones; returns how many were aborted.
    pub(crate) async fn shutdown(&self) -> usize {
        let mut set = {
            let mut guard = self.lock();
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut *guard)
        };
        let running = set.len();
        set.abort_all();
        while let Some(result) = set.join_next().await {
            if let Err(error) = result {
                if error.is_panic() {
                    tracing::error!(%error, "a purgatory task panicked");
                }
            }
        }
        running
    }

    fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn log_panic(result: Result<(), tokio::task::JoinError>) {
    if let Err(error) = result {
        tracing::error!(%error, "a purgatory task failed");
    }
}
