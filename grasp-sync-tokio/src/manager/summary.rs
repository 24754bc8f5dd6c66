//! Stopping a running manager, and what it reports when it stops.

use grasp_sync_core::engine::EngineStats;
use tokio::sync::watch;

/// Stops a running [`SyncManager`](super::SyncManager).
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    pub(super) sender: watch::Sender<bool>,
}

impl ShutdownHandle {
    /// Asks the manager and every connection task to stop.
    pub fn shutdown(&self) {
        let _ = self.sender.send(true);
    }
}

/// What a run did, returned when it stops.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Summary {
    /// The engine's counters.
    pub engine: EngineStats,
    /// Events the store took as new.
    pub events_stored: u64,
    /// Events the store already had.
    pub events_duplicate: u64,
    /// Events the store holds outside what it serves until their git data
    /// arrives ([`IngestOutcome::Held`](grasp_sync_core::store::IngestOutcome::Held));
    /// not in `events_stored`.
    pub events_held: u64,
    /// Events the store refused for good.
    pub events_rejected: u64,
    /// Store answers that asked for a retry (`rate-limited:`, `error:`,
    /// failures); the engine offered those events again.
    pub store_retries: u64,
    /// Bytes received from relays.
    pub bytes_received: u64,
    /// Bytes sent to relays.
    pub bytes_sent: u64,
    /// Connection tasks still running after the shutdown grace period
    /// (aborted).
    pub tasks_aborted: usize,
}
