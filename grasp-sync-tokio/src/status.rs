//! What a running [`SyncManager`](crate::SyncManager) has done so far, as a
//! cheap snapshot on a `tokio::sync::watch` channel: a program that embeds
//! the manager waits on [`SyncStatus::historic_sync_complete`] instead of
//! guessing from quiet time.
//!
//! ```no_run
//! # async fn demo(manager: grasp_sync_tokio::SyncManager) -> Result<(), Box<dyn std::error::Error>> {
//! let mut status = manager.status(); // before run()
//! tokio::spawn(manager.run());
//! let done = status
//!     .wait_for(|status| status.historic_sync_complete)
//!     .await?
//!     .clone();
//! for relay in done.relays.iter().filter(|relay| relay.report.unreachable) {
//!     eprintln!("{} unreachable: {:?}", relay.report.relay, relay.report.last_error);
//! }
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::engine::{
    EngineStats, LiveMode, RelayReport, SyncEngine, SyncPlusCounts, SyncReasons,
};
use grasp_sync_core::health::HealthState;
use grasp_sync_core::model::ConnectionStatus;
use grasp_sync_core::store::StoreRefusal;
use nostr::prelude::RelayUrl;

/// A snapshot of the sync's progress. Obtain the receiver with
/// [`SyncManager::status`](crate::SyncManager::status) before `run()`; it is
/// refreshed at most every 100 ms while something changes, and every 2 s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncStatus {
    /// The own relay's history was read completely (always `true` without
    /// an own relay: an embedding relay hands events in process).
    pub own_history_complete: bool,
    /// Historic sync is confirmed on every reachable relay: the own relay's
    /// history was read, every event handed to the store was stored (or
    /// refused for good), and every relay is confirmed or unreachable
    /// (see [`RelayReport::unreachable`](grasp_sync_core::engine::RelayReport::unreachable)). Without an own relay (an
    /// embedding relay hands events in process) it is also true before the
    /// first announcement arrived: wait for `repositories > 0` too when you
    /// expect some.
    pub historic_sync_complete: bool,
    /// Repositories we sync.
    pub repositories: usize,
    /// Root events (patches, PRs, issues) of those repositories.
    pub root_events: usize,
    /// Relays registered (bootstrap, listed by our repositories, and those
    /// Sync+ brought in: see each relay's [`RelayStatus::reasons`]).
    pub relays_tracked: usize,
    /// Relays connected now.
    pub relays_connected: usize,
    /// Relays that failed to connect too often: not waited for.
    pub relays_unreachable: usize,
    /// Relays failing for a day.
    pub relays_dead: usize,
    /// Connected relays whose limits cannot hold live filters for every
    /// item: the rest is polled with a `since` catch-up.
    pub relays_polling: usize,
    /// Events handed to the store and not confirmed yet.
    pub unconfirmed_stores: usize,
    /// The last event the store (the own relay) refused for good: kind,
    /// id, the relay it came from and the store's reason, shown as one line
    /// (`kind 30618 <id> from <relay>: <reason>`). How many it refused is
    /// [`EngineStats::store_refused`] in [`SyncStatus::engine`]. Such an
    /// event is accounted for (historic sync completes without it), not
    /// downloaded again.
    pub last_store_refusal: Option<StoreRefusal>,
    /// Each relay.
    pub relays: Vec<RelayStatus>,
    /// The engine's counters.
    pub engine: EngineStats,
    /// GRASP-03 Sync+ is on
    /// ([`SyncPlusConfig::enabled`](grasp_sync_core::engine::SyncPlusConfig::enabled)).
    pub sync_plus_enabled: bool,
    /// What GRASP-03 Sync+ holds now: participants, their relay lists, the
    /// outbox relays synced from, the index relays.
    pub sync_plus: SyncPlusCounts,
}

/// One relay in a [`SyncStatus`]: the engine's report and what the adapter
/// adds (traffic, time to the next attempt).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayStatus {
    /// What the engine knows: connection, health, method, events,
    /// confirmed, unreachable, last error, live mode.
    pub report: RelayReport,
    /// Bytes received from it.
    pub bytes_received: u64,
    /// Bytes sent to it.
    pub bytes_sent: u64,
    /// Time until the next connection attempt, while not connected.
    pub retry_in: Option<Duration>,
}

impl RelayStatus {
    /// Why the relay is synced, as words: `bootstrap` (configured, never
    /// dropped), `announcement` (an announcement of ours lists it), `index`
    /// (a Sync+ index relay: participants' relay lists only), `outbox` (a
    /// participant's write relay, Sync+: the conversation only), in that
    /// order. Empty while nothing holds it any more.
    pub fn reasons(&self) -> Vec<&'static str> {
        reason_names(self.report.reasons)
    }

    fn of(report: RelayReport, now: Instant, bytes: (u64, u64)) -> RelayStatus {
        RelayStatus {
            retry_in: report.retry_at.map(|at| at.saturating_duration_since(now)),
            report,
            bytes_received: bytes.0,
            bytes_sent: bytes.1,
        }
    }
}

impl SyncStatus {
    /// The snapshot of `engine` at `now`; `bytes` gives a relay's bytes
    /// received and sent.
    pub(crate) fn of(
        engine: &SyncEngine,
        now: Instant,
        bytes: impl Fn(&RelayUrl) -> (u64, u64),
    ) -> SyncStatus {
        let relays: Vec<RelayStatus> = engine
            .relay_reports()
            .into_iter()
            .map(|report| {
                let traffic = bytes(&report.relay);
                RelayStatus::of(report, now, traffic)
            })
            .collect();
        let count =
            |keep: fn(&RelayStatus) -> bool| relays.iter().filter(|relay| keep(relay)).count();
        SyncStatus {
            own_history_complete: engine.own_history_complete(),
            historic_sync_complete: engine.historic_sync_complete(),
            repositories: engine.repo_index().repos().len(),
            root_events: engine
                .repo_index()
                .repos()
                .values()
                .map(|needs| needs.root_events.len())
                .sum(),
            relays_tracked: relays.len(),
            relays_connected: count(|relay| relay.report.connection == ConnectionStatus::Connected),
            relays_unreachable: count(|relay| relay.report.unreachable),
            relays_dead: count(|relay| relay.report.health == HealthState::Dead),
            relays_polling: count(|relay| {
                matches!(relay.report.live_mode, Some(LiveMode::Polling { .. }))
            }),
            unconfirmed_stores: engine.unconfirmed_stores(),
            last_store_refusal: engine.last_store_refusal().cloned(),
            relays,
            engine: engine.stats().clone(),
            sync_plus_enabled: engine.config().sync_plus.enabled,
            sync_plus: engine.sync_plus_counts(),
        }
    }
}

/// The words of [`RelayStatus::reasons`].
fn reason_names(reasons: SyncReasons) -> Vec<&'static str> {
    [
        (reasons.bootstrap, "bootstrap"),
        (reasons.announcement, "announcement"),
        (reasons.index, "index"),
        (reasons.outbox, "outbox"),
    ]
    .into_iter()
    .filter_map(|(holds, name)| holds.then_some(name))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_words_in_a_fixed_order() {
        let mut reasons = SyncReasons::default();
        assert!(reason_names(reasons).is_empty());
        reasons.outbox = true;
        reasons.announcement = true;
        assert_eq!(reason_names(reasons), vec!["announcement", "outbox"]);
        reasons.bootstrap = true;
        reasons.index = true;
        assert_eq!(
            reason_names(reasons),
            vec!["bootstrap", "announcement", "index", "outbox"]
        );
    }
}
