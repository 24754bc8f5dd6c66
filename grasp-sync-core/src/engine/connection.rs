//! Connection lifecycle: registering, connecting per each relay's health,
//! and what to do on connect (fresh start or quick reconnect), on disconnect,
//! daily, and when a relay has nothing left to sync.

use nostr::prelude::{RelayUrl, Timestamp};
use tracing::{debug, info, warn};

use super::runtime::{RelayConn, Sub};
use super::timer_table::RelayTimer;
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::model::ConnectionStatus;

impl SyncEngine {
    /// Starts tracking `relay` (bootstrap relays are never dropped).
    pub(super) fn register_relay(&mut self, relay: RelayUrl, is_bootstrap: bool) {
        self.relays.register(relay, is_bootstrap);
    }

    /// Starts a connection to every disconnected relay whose backoff allows.
    pub(super) fn connect_ready_relays(&mut self, now: Now) {
        let ready: Vec<RelayUrl> = self
            .relays
            .tracked()
            .filter(|(_, state)| state.connection_status == ConnectionStatus::Disconnected)
            .map(|(relay, _)| relay.clone())
            .filter(|relay| {
                self.relays
                    .view(relay)
                    .health
                    .should_attempt_connection(now.instant, &self.config.health)
            })
            .collect();
        let timeout = self.config.health.connect_timeout();
        for relay in ready {
            debug!(%relay, "connecting");
            self.relays
                .entry(relay.clone())
                .connect_attempt(now.instant, timeout);
            self.emit(Command::Connect { relay, timeout });
        }
    }

    /// Abandons connection attempts past their timeout.
    pub(super) fn expire_connects(&mut self, now: Now) {
        let expired: Vec<RelayUrl> = self
            .relays
            .iter()
            .filter(|(_, known)| known.timers.is_due(RelayTimer::ConnectTimeout, now.instant))
            .map(|(relay, _)| relay.clone())
            .collect();
        for relay in expired {
            debug!(%relay, "connection attempt timed out");
            self.emit(Command::Disconnect {
                relay: relay.clone(),
            });
            self.handle_connect_failed(now, &relay);
        }
    }

    /// A connection attempt failed.
    pub fn handle_connect_failed(&mut self, now: Now, relay: &RelayUrl) {
        self.observe(now);
        if self.own.is_for(relay) {
            return self.own_closed(now, "connection failed");
        }
        let failed = self
            .relays
            .get_mut(relay)
            .is_some_and(|session| session.connect_failed(now.instant));
        if !failed {
            return self.ignored(relay, "connect failure without an attempt");
        }
        let session = self.relays.view(relay);
        debug!(
            %relay,
            failures = session.health.consecutive_failures(),
            next_attempt_at = ?session.health.next_attempt_at(&self.config.health),
            "relay connection failed"
        );
        self.relays
            .note_error(relay, "connection failed or timed out");
        self.maintain(now);
    }

    /// A connection opened: fresh start on a first connect or after a long
    /// outage, quick reconnect after a short one.
    pub fn handle_connected(&mut self, now: Now, relay: &RelayUrl) {
        self.observe(now);
        if self.own.is_for(relay) {
            return self.own_connected();
        }
        let window = self.config.quick_reconnect_window;
        let status = self
            .relays
            .state(relay)
            .map(|state| state.connection_status);
        if status == Some(ConnectionStatus::Connected) {
            return self.ignored(relay, "connected twice");
        }
        let Some(session) = self
            .relays
            .get_mut(relay)
            .filter(|session| session.state.is_some())
        else {
            self.ignored(relay, "connected to a relay not tracked");
            self.emit(Command::Disconnect {
                relay: relay.clone(),
            });
            return;
        };
        match session.connected(now, window) {
            Some(since) => self.quick_reconnect(now, relay, since),
            None => self.fresh_start(now, relay),
        }
        self.maintain(now);
    }

    /// The connection dropped. Pending batches are cleared; confirmed state
    /// is kept for a quick reconnect.
    pub fn handle_disconnected(&mut self, now: Now, relay: &RelayUrl) {
        self.observe(now);
        if self.own.is_for(relay) {
            return self.own_closed(now, "connection lost");
        }
        let status = self
            .relays
            .state(relay)
            .map(|state| state.connection_status);
        match status {
            Some(ConnectionStatus::Connecting) => return self.handle_connect_failed(now, relay),
            Some(ConnectionStatus::Connected) => {}
            _ => return self.ignored(relay, "disconnected while not connected"),
        }
        info!(%relay, "disconnected");
        self.relays.note_error(relay, "connection lost");
        self.learn_frame_budget(now, relay);
        self.forget_connection(now, relay);
        self.maintain(now);
    }

    /// A sign of life from `relay` that is not a relay message: a WebSocket
    /// pong to the driver's ping. A relay is alive while it sends anything
    /// (a frame, or this): one that never answers a live `limit: 0` REQ
    /// with an EOSE (nostr-rs-relay) is not taken for silent and reconnected
    /// while it answers pings. It is no progress of any batch. Drivers that
    /// can ping should do so at least every
    /// [`EngineConfig::liveness_probe_interval`](super::EngineConfig::liveness_probe_interval).
    pub fn handle_relay_alive(&mut self, now: Now, relay: &RelayUrl) {
        self.observe(now);
        if self.own.is_for(relay) {
            return;
        }
        let before = self.reach();
        match self.relays.conn_mut(relay) {
            Some(conn) => conn.last_heard = conn.last_heard.max(now.instant),
            None => self.ignored(relay, "sign of life from a relay not connected"),
        }
        self.maintain_after(now, Some(relay), before);
    }

    /// A relay that drops the connection right after a large frame gets a
    /// smaller frame budget ([`RelaySession::learn_frame_budget`]).
    fn learn_frame_budget(&mut self, now: Now, relay: &RelayUrl) {
        let learned = self
            .relays
            .get_mut(relay)
            .and_then(|session| session.learn_frame_budget(now.instant));
        if let Some((frame, budget)) = learned {
            self.stats.frame_budget_lowered += 1;
            warn!(%relay, frame, budget, "relay dropped the connection after a large frame; sending smaller frames");
        }
    }

    /// Closes a connection that stopped answering (a half-open socket): no
    /// message for a whole batch timeout while work was outstanding.
    pub(super) fn drop_silent_connection(&mut self, now: Now, relay: &RelayUrl) {
        warn!(%relay, "relay silent for the batch timeout; reconnecting");
        self.relays
            .note_error(relay, "silent for the batch timeout");
        self.emit(Command::Disconnect {
            relay: relay.clone(),
        });
        self.forget_connection(now, relay);
    }

    /// The bookkeeping of a closed connection
    /// ([`RelaySession::connection_closed`]).
    pub(super) fn forget_connection(&mut self, now: Now, relay: &RelayUrl) {
        if let Some(session) = self.relays.get_mut(relay) {
            session.connection_closed(now, &self.config);
            debug!(%relay, failures = session.health.consecutive_failures(), "relay disconnected");
        }
    }

    /// Fresh start: forget pending then confirmed state, sync Layer 1 live
    /// and historic, then plan Layers 2+3 from scratch.
    pub(super) fn fresh_start(&mut self, now: Now, relay: &RelayUrl) {
        info!(%relay, "fresh start");
        // A full re-sync catches up everything.
        self.knowledge(relay).uncaught_since = None;
        self.close_all_subscriptions(relay);
        self.clear_pending(relay);
        if let Some(state) = self.relays.state_mut(relay) {
            state.clear_sync_state();
        }
        self.start_layer1(now, relay, None);
        self.plan_relay(now, relay);
    }

    /// Quick reconnect: Layer 1 and the confirmed Layers 2+3 live, their
    /// history caught up from `since`, then new items planned.
    fn quick_reconnect(&mut self, now: Now, relay: &RelayUrl, since: Timestamp) {
        // Coverage missing before the disconnect is caught up too.
        let window = self.config.quick_reconnect_window.as_secs();
        let since = match self.knowledge(relay).uncaught_since.take() {
            Some(uncaught) => since.min(Timestamp::from_secs(
                uncaught.as_secs().saturating_sub(window),
            )),
            None => since,
        };
        info!(%relay, since = since.as_secs(), "quick reconnect");
        // Layer 1 catches up from `since` only if its full history was
        // confirmed before; otherwise it syncs in full.
        let announcements_synced = self
            .relays
            .state(relay)
            .is_some_and(|state| state.announcements_synced);
        self.start_layer1(now, relay, announcements_synced.then_some(since));
        self.rebuild_live(now, relay, &Default::default());
        self.start_catch_up(now, relay, since);
        self.plan_relay(now, relay);
    }

    /// The daily full re-sync of every connected relay.
    pub(super) fn daily_sync(&mut self, now: Now) {
        // The re-sync compares with the store itself: what it lost (a
        // deletion, a restore) is stored again.
        self.stores.stored_lately.clear();
        self.stores.fresh_roots.clear();
        let connected: Vec<RelayUrl> = self.relays.connected().cloned().collect();
        for relay in connected {
            info!(%relay, "daily sync");
            self.fresh_start(now, &relay);
        }
    }

    /// Drops relays that are neither bootstrap nor listed by any repository.
    pub(super) fn check_disconnects(&mut self, _now: Now) {
        let unwanted: Vec<RelayUrl> = self
            .relays
            .tracked()
            .filter(|(relay, state)| !state.is_bootstrap && self.repos.target(relay).is_none())
            .map(|(relay, _)| relay.clone())
            .collect();
        for relay in unwanted {
            info!(%relay, "dropping relay with nothing to sync");
            self.emit(Command::Forget {
                relay: relay.clone(),
            });
            self.clear_pending(&relay);
            self.relays.close_connection(&relay);
            self.relays.remove(&relay);
            self.stats.relays_dropped += 1;
        }
        self.readmit_relays_over_cap();
    }

    /// Closes every subscription open on `relay` and forgets queued work.
    pub(super) fn close_all_subscriptions(&mut self, relay: &RelayUrl) {
        let Some(session) = self.relays.connected_mut(relay) else {
            return;
        };
        session.timers.clear(RelayTimer::Poll);
        let Some(conn) = session.conn.as_mut() else {
            return;
        };
        let open: Vec<(nostr::prelude::SubscriptionId, Sub)> = conn.subs.drain(..).collect();
        *conn = RelayConn::default();
        for (id, sub) in open {
            self.send_close(relay, id, &sub);
        }
    }

    /// Removes every pending batch of `relay`.
    pub(super) fn clear_pending(&mut self, relay: &RelayUrl) {
        if let Some(session) = self.relays.get_mut(relay) {
            session.clear_pending();
        }
    }
}
