//! What a watcher wants to know per relay and overall: connection, method,
//! events, whether historic sync is confirmed, whether the relay counts as
//! unreachable, the last error and when it is retried. Read-only.

use nostr::prelude::RelayUrl;

use super::stats::LiveMode;
use crate::clock::Instant;
use crate::health::HealthState;
use crate::model::{ConnectionStatus, SyncMethod};

/// One relay as the engine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayReport {
    /// The relay.
    pub relay: RelayUrl,
    /// Disconnected, connecting or connected.
    pub connection: ConnectionStatus,
    /// Its health (healthy, degraded, dead, rate-limited …).
    pub health: HealthState,
    /// How its history is synced: NIP-77, or REQ+EOSE once it refused NIP-77.
    pub method: SyncMethod,
    /// Verified events from it handed to the store.
    pub events_received: u64,
    /// Of those, events it had sent lately already (each event received
    /// once: 0).
    pub events_received_again: u64,
    /// Events from it the store reported newly stored.
    pub events_stored: u64,
    /// Historic sync of everything it should hold is confirmed.
    pub historic_confirmed: bool,
    /// It failed to connect too often (or is dead): historic sync does not
    /// wait for it.
    pub unreachable: bool,
    /// The last thing that went wrong with it, at most
    /// [`MAX_RELAY_TEXT_LEN`](crate::relay_text::MAX_RELAY_TEXT_LEN) bytes (and a `…`)
    /// without control characters: it may quote the relay.
    pub last_error: Option<String>,
    /// When the next connection attempt is due, while it is not connected.
    pub retry_at: Option<Instant>,
    /// Live coverage while connected.
    pub live_mode: Option<LiveMode>,
    /// Why it is synced.
    pub reasons: SyncReasons,
}

/// Where a relay stands between its connection and historic sync confirmed
/// ([`SyncEngine::relay_phase`](super::SyncEngine::relay_phase)): the
/// lifecycle the reference GRASP server's connection-state gauge reports.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RelayPhase {
    /// Not connected and no attempt in flight (waiting for its retry, or
    /// not asked for).
    Disconnected,
    /// A connection attempt is in flight.
    Connecting,
    /// Connected; historic sync of what it should hold is not confirmed
    /// yet and nothing of it failed since the last confirmation.
    Syncing,
    /// Connected, and historic sync of everything it should hold confirmed
    /// (its `historic_confirmed` in [`RelayReport`]).
    Synced,
    /// Connected, historic sync not confirmed, and work on it failed since
    /// its last confirmed batch (a batch closed by the relay or past its
    /// timeout, a live subscription refused): what it holds is synced only
    /// in part until a retry (after its backoff) is confirmed.
    SyncFailed,
}

impl RelayPhase {
    /// The value of the reference GRASP server's connection-state gauge
    /// (`ngit_sync_relay_connected`, documented as 0 disconnected,
    /// 1 connecting, 2 syncing, 3 connected, 4 connected with historic sync
    /// failures), which `grasp_sync_relay_connection_state` reports: 0, 1,
    /// 2, 3, 4 in the order of the variants.
    pub fn metric_value(self) -> i64 {
        match self {
            RelayPhase::Disconnected => 0,
            RelayPhase::Connecting => 1,
            RelayPhase::Syncing => 2,
            RelayPhase::Synced => 3,
            RelayPhase::SyncFailed => 4,
        }
    }
}

/// Why a relay is synced: each reason that holds (a relay may have several).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncReasons {
    /// A configured bootstrap relay: never dropped, announcements
    /// discovered on it (Layer 1).
    pub bootstrap: bool,
    /// An announcement of ours lists it: Layer 1 and the repositories'
    /// Layers 2 and 3.
    pub announcement: bool,
    /// A configured index relay (GRASP-03 Sync+): participants' relay lists
    /// are read from it, nothing else.
    pub index: bool,
    /// A participant's write relay chosen this pass (GRASP-03 Sync+): the
    /// repositories' Layers 2 and 3 only, never Layer 1.
    pub outbox: bool,
}

impl SyncReasons {
    /// `true` when announcements are discovered on the relay (Layer 1):
    /// a bootstrap relay or one an announcement lists; never a relay
    /// reached only through Sync+.
    pub fn discovers(&self) -> bool {
        self.bootstrap || self.announcement
    }

    /// `true` when only Sync+ brought the relay in.
    pub fn only_sync_plus(&self) -> bool {
        !self.discovers() && (self.index || self.outbox)
    }
}
