//! What a watcher wants to know per relay and overall: connection, method,
//! events, whether historic sync is confirmed, whether the relay counts as
//! unreachable, the last error and when it is retried. Read-only.

use nostr::prelude::RelayUrl;

use super::stats::LiveMode;
use super::SyncEngine;
use crate::clock::Instant;
use crate::health::HealthState;
use crate::model::{ConnectionStatus, RelayState, SyncMethod};

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
    /// The last thing that went wrong with it.
    pub last_error: Option<String>,
    /// When the next connection attempt is due, while it is not connected.
    pub retry_at: Option<Instant>,
    /// Live coverage while connected.
    pub live_mode: Option<LiveMode>,
}

impl SyncEngine {
    /// Every tracked relay, in registration order.
    pub fn relay_reports(&self) -> Vec<RelayReport> {
        self.relays
            .tracked()
            .map(|(relay, state)| self.relay_report(relay, state))
            .collect()
    }

    fn relay_report(&self, relay: &RelayUrl, state: &RelayState) -> RelayReport {
        let known = self.relays.get(relay);
        let refused = known.is_some_and(|known| known.negentropy_refused);
        let health = &self.config.health;
        let retry_at = known
            .filter(|_| !self.relays.is_connected(relay))
            .and_then(|known| known.health.next_attempt_at(health));
        RelayReport {
            relay: relay.clone(),
            connection: state.connection_status,
            health: self
                .relays
                .view(relay)
                .health_state(self.last_now(), health),
            method: if refused {
                SyncMethod::ReqEose
            } else {
                SyncMethod::Negentropy
            },
            events_received: known.map_or(0, |known| known.events_received),
            events_received_again: known.map_or(0, |known| known.events_received_again),
            events_stored: known.map_or(0, |known| known.events_stored),
            historic_confirmed: self.relay_confirmed(relay, state),
            unreachable: self.relay_unreachable(relay),
            last_error: known.and_then(|known| known.last_error.clone()),
            retry_at,
            live_mode: self
                .relay_activity(relay)
                .map(|activity| activity.live_mode),
        }
    }

    /// `true` when historic sync is confirmed on every reachable relay: the
    /// self-subscriber's batch processed, every event handed to the store
    /// stored, and every relay either confirmed or unreachable
    /// ([`EngineConfig::unreachable_after`](super::EngineConfig::unreachable_after)
    /// failed connects in a row, or dead). Unlike
    /// [`SyncEngine::is_idle`], one unreachable relay does not hold it up.
    pub fn historic_sync_complete(&self) -> bool {
        self.own.queued.is_empty()
            && self.stores.in_flight() == 0
            && self.relays.tracked().all(|(relay, state)| {
                self.relay_unreachable(relay) || self.relay_confirmed(relay, state)
            })
    }

    /// Connected, nothing pending or queued, Layer 1 and every target item
    /// confirmed.
    fn relay_confirmed(&self, relay: &RelayUrl, state: &RelayState) -> bool {
        self.relays.is_connected(relay)
            && state.announcements_synced
            && self.relays.view(relay).pending.is_empty()
            && self.relays.conn(relay).is_some_and(|conn| conn.is_quiet())
            && self.repos.target(relay).is_none_or(|target| {
                target.repos.is_subset(&state.repos)
                    && target.root_events.is_subset(&state.root_events)
            })
    }

    /// Not connected, and failing to connect for the configured number of
    /// attempts in a row, or dead.
    fn relay_unreachable(&self, relay: &RelayUrl) -> bool {
        let Some(session) = self.relays.get(relay) else {
            return false;
        };
        session.conn.is_none()
            && (session.health.consecutive_failures() >= self.config.unreachable_after
                || session.health_state(self.last_now(), &self.config.health) == HealthState::Dead)
    }
}
