//! What a running [`SyncManager`](crate::SyncManager) has done so far, as a
//! cheap snapshot on a `tokio::sync::watch` channel: a program that embeds
//! the manager waits on [`SyncStatus::historic_sync_complete`] instead of
//! guessing from quiet time.

use grasp_sync_core::engine::{EngineStats, LiveMode, SyncEngine};

/// A snapshot of the sync's progress. Obtain the receiver with
/// [`SyncManager::status`](crate::SyncManager::status) before `run()`; it is
/// refreshed at most every 100 ms
/// while something changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncStatus {
    /// The own relay's history was read completely (always `true` without
    /// an own relay: an embedding relay hands events in process).
    pub own_history_complete: bool,
    /// Historic sync is confirmed: the own relay's history was read, every
    /// registered relay is connected with every target item confirmed,
    /// nothing is pending or queued, and every event handed to the store
    /// was stored (or refused for good).
    pub historic_sync_complete: bool,
    /// Relays registered (bootstrap and listed by our repositories).
    pub relays_tracked: usize,
    /// Relays connected now.
    pub relays_connected: usize,
    /// Connected relays whose limits cannot hold live filters for every
    /// item: the rest is polled with a `since` catch-up
    /// ([`LiveMode::Polling`]).
    pub relays_polling: usize,
    /// Events handed to the store and not confirmed yet.
    pub unconfirmed_stores: usize,
    /// The engine's counters.
    pub engine: EngineStats,
}

impl SyncStatus {
    /// The snapshot of `engine` now.
    pub(crate) fn of(engine: &SyncEngine, has_own_relay: bool) -> SyncStatus {
        let own_history_complete = !has_own_relay || engine.own_history_complete();
        let index = engine.relay_index();
        SyncStatus {
            own_history_complete,
            historic_sync_complete: own_history_complete && engine.is_idle(),
            relays_tracked: index.len(),
            relays_connected: index
                .iter()
                .filter(|(_, state)| state.is_connected())
                .count(),
            relays_polling: index
                .iter()
                .filter_map(|(relay, _)| engine.relay_activity(relay))
                .filter(|activity| matches!(activity.live_mode, LiveMode::Polling { .. }))
                .count(),
            unconfirmed_stores: engine.unconfirmed_stores(),
            engine: engine.stats().clone(),
        }
    }
}
