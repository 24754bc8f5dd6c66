//! The relay's connection lifecycle, run by its session: asking for a
//! connection when its health allows (`RelaySession::connect_if_due`), a
//! connect attempt failing or timing out, the connection opening (fresh
//! start or quick reconnect; the own role opens its self-subscription), a
//! send failing, and the connection lost. The engine only routes each
//! input here and plans a relay that opened.

use super::*;

impl RelaySession {
    // --- Connecting, and hearing from the relay ------------------------------

    /// `true` when a connection should be tried at `now`: the relay is
    /// tracked, idle (not connected, no attempt in flight) and its health
    /// allows (`RelayHealth::should_attempt_connection`: backoff over, not
    /// rate-limited).
    pub(crate) fn should_connect(&self, now: Instant, health: &HealthConfig) -> bool {
        (self.is_tracked() || self.is_own())
            && self.is_idle()
            && self
                .health
                .should_attempt_connection(now, &self.health_config(health))
    }

    /// Asks for a connection ([`Command::Connect`]) if one should be tried
    /// at `now` ([`RelaySession::should_connect`]), given up after
    /// `HealthConfig::connect_timeout`; `true` if it did.
    pub(crate) fn connect_if_due(&mut self, cx: &mut Ctx<'_>, now: Instant) -> bool {
        if !self.should_connect(now, &cx.config.health) {
            return false;
        }
        let relay = cx.relay.clone();
        debug!(%relay, "connecting");
        let timeout = cx.config.health.connect_timeout();
        self.link.start_connecting(now + timeout);
        self.emit(cx, Command::Connect { relay, timeout });
        true
    }

    /// The connection attempt failed (or was given up) at `now`: the health
    /// counts the failure and the retry waits for its backoff. An input
    /// ignored if no attempt was under way.
    pub(crate) fn on_connect_failed(&mut self, cx: &mut Ctx<'_>, now: Now) {
        if !self.is_connecting() {
            return ignored(cx, "connect failure without an attempt");
        }
        self.link.close();
        self.health.on_connect_failed(now.instant);
        debug!(
            relay = %cx.relay,
            failures = self.health.consecutive_failures(),
            next_attempt_at = ?self.retry_at(&cx.config.health),
            "relay connection failed"
        );
        self.note_error("connection failed or timed out");
    }

    /// Gives up the connection attempt, past its timeout: the driver is
    /// told to drop it ([`Command::Disconnect`]) and the attempt failed.
    pub(super) fn abandon_connect_attempt(&mut self, cx: &mut Ctx<'_>, now: Now) {
        debug!(relay = %cx.relay, "connection attempt timed out");
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.on_connect_failed(cx, now);
    }

    /// The connection opened: a fresh start on a first connect or after a
    /// long outage, a quick reconnect after a short one
    /// ([`RelaySession::connected`] tells which), and
    /// [`SessionEvent::Connected`] for the engine, which plans the relay's
    /// items. `false` (and the connection dropped) for a relay not tracked;
    /// ignored when connected already.
    pub(crate) fn on_connected(&mut self, cx: &mut Ctx<'_>, now: Now) -> bool {
        if self.is_connected() {
            ignored(cx, "connected twice");
            return false;
        }
        if self.is_own() {
            if !self.is_connecting() {
                ignored(cx, "connected without an attempt");
                return false;
            }
            self.health.on_connected();
            self.link.open(now.instant);
            if let Role::Own(read) = &mut self.role {
                read.opened(cx);
            }
            return false;
        }
        if !self.is_tracked() {
            ignored(cx, "connected to a relay not tracked");
            let relay = cx.relay.clone();
            self.emit(cx, Command::Disconnect { relay });
            return false;
        }
        match self.connected(now, cx.config.timeouts.quick_reconnect_window) {
            Some(since) => self.quick_reconnect(cx, now, since),
            None => self.fresh_start(cx, now),
        }
        cx.events.push(SessionEvent::Connected);
        true
    }

    /// The connection could not take a message: an attempt that could not
    /// even start failed ([`RelaySession::on_connect_failed`]); an open
    /// connection is dropped ([`Command::Disconnect`]) and closed, to be
    /// reconnected after the backoff. Ignored while idle.
    pub(crate) fn on_send_failed(&mut self, cx: &mut Ctx<'_>, now: Now, error: &TransportError) {
        if self.is_connecting() {
            return self.on_connect_failed(cx, now);
        }
        if !self.is_connected() {
            return ignored(cx, "send failure while not connected");
        }
        warn!(relay = %cx.relay, %error, "cannot send to relay; reconnecting");
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.note_error(&format!("send failed: {error}"));
        self.connection_closed(cx, now);
    }

    /// The connection dropped: an attempt in flight failed
    /// ([`RelaySession::on_connect_failed`]); an open connection is lost —
    /// the error noted, a large frame it was sending remembered
    /// ([`RelaySession::learn_frame_budget`]), its bookkeeping closed
    /// ([`RelaySession::connection_closed`]). Ignored while idle.
    pub(crate) fn on_disconnected(&mut self, cx: &mut Ctx<'_>, now: Now) {
        if self.is_connecting() {
            return self.on_connect_failed(cx, now);
        }
        if !self.is_connected() {
            return ignored(cx, "disconnected while not connected");
        }
        info!(relay = %cx.relay, "disconnected");
        self.note_error("connection lost");
        self.learn_frame_budget(cx, now.instant);
        self.connection_closed(cx, now);
    }

    /// The connection opened at `now` (the relay is tracked and not
    /// connected): the connection state starts, and the answer is where a
    /// quick reconnect catches up from — the last connected moment minus
    /// `window` — or `None` for a fresh start (a first connect, or an outage
    /// longer than `window`).
    pub(super) fn connected(
        &mut self,
        now: Now,
        window: std::time::Duration,
    ) -> Option<nostr::prelude::Timestamp> {
        let state = self.state.as_mut()?;
        let quick_since = match state.last_connected {
            Some(last) if !state.should_clear_state(now.unix, window) => {
                Some(nostr::prelude::Timestamp::from_secs(
                    last.as_secs().saturating_sub(window.as_secs()),
                ))
            }
            _ => None,
        };
        state.last_connected = Some(now.unix);
        state.disconnected_at = None;
        self.health.on_connected();
        self.timers.clear(RelayTimer::Poll);
        self.link.open(now.instant);
        quick_since
    }

    /// The relay spoke at `now`, answering `answered` if it names one of our
    /// subscriptions: it is alive, the subscription is answered (its REQ
    /// watch heard, its frame no longer suspect), and a batch it belongs to
    /// starts counting its REQ resumes afresh.
    pub(crate) fn heard(&mut self, now: Instant, answered: Option<&SubscriptionId>) {
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        conn.heard(now);
        let Some(id) = answered else {
            return;
        };
        let batch = conn.answered(id, now);
        if let Some(batch) = batch {
            self.batches.heard(batch);
        }
    }

    // --- A connection opened: fresh start or quick reconnect; dropping it ---

    /// Fresh start: every subscription closed, pending then confirmed state
    /// forgotten, Layer 1 synced live and in full (the engine then plans
    /// Layers 2+3 from scratch).
    pub(crate) fn fresh_start(&mut self, cx: &mut Ctx<'_>, now: Now) {
        info!(relay = %cx.relay, "fresh start");
        // A full re-sync catches up everything.
        self.uncaught_since = None;
        self.close_all_subscriptions(cx);
        self.clear_pending();
        if let Some(state) = self.state.as_mut() {
            state.clear_sync_state();
        }
        self.start_layer1(cx, now, None);
    }

    /// Quick reconnect: Layer 1 and the confirmed Layers 2+3 live, their
    /// history caught up from `since` (and from the coverage missing before
    /// the disconnect); the engine then plans new items.
    pub(crate) fn quick_reconnect(&mut self, cx: &mut Ctx<'_>, now: Now, since: Timestamp) {
        let window = cx.config.timeouts.quick_reconnect_window.as_secs();
        let since = match self.uncaught_since.take() {
            Some(uncaught) => since.min(Timestamp::from_secs(
                uncaught.as_secs().saturating_sub(window),
            )),
            None => since,
        };
        info!(relay = %cx.relay, since = since.as_secs(), "quick reconnect");
        // Layer 1 catches up from `since` only if its full history was
        // confirmed before; otherwise it syncs in full.
        let announcements_synced = self
            .state
            .as_ref()
            .is_some_and(|state| state.announcements_synced);
        self.start_layer1(cx, now, announcements_synced.then_some(since));
        self.rebuild_live(cx, now, &PendingItems::default());
        self.start_catch_up(cx, now, since);
    }

    /// Closes every subscription open on the relay and forgets queued work.
    pub(super) fn close_all_subscriptions(&mut self, cx: &mut Ctx<'_>) {
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let open = conn.take_subscriptions();
        *conn = RelayConn::default();
        self.timers.clear(RelayTimer::Poll);
        for (id, sub) in open {
            self.send_close(cx, id, &sub);
        }
    }

    /// Closes a connection that stopped answering (a half-open socket): no
    /// message for a whole batch timeout while work was outstanding.
    pub(crate) fn drop_silent_connection(&mut self, cx: &mut Ctx<'_>, now: Now) {
        warn!(relay = %cx.relay, "relay silent for the batch timeout; reconnecting");
        self.last_error = Some("silent for the batch timeout".into());
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.connection_closed(cx, now);
    }

    // --- Losing the connection -----------------------------------------------

    /// The bookkeeping of a closed connection ([`RelaySession::close`]),
    /// and the health told: a drop of an open connection
    /// (`RelayHealth::on_disconnected`: a failure unless it was stable), or
    /// the failure of an attempt in flight.
    pub(crate) fn connection_closed(&mut self, cx: &mut Ctx<'_>, now: Now) {
        match self.close(now) {
            Link::Open { since, .. } => {
                let health = self.health_config(&cx.config.health);
                self.health.on_disconnected(since, now.instant, &health);
                match &mut self.role {
                    Role::Own(read) => read.lost(now),
                    Role::Remote => cx.events.push(SessionEvent::Disconnected),
                }
            }
            Link::Connecting { .. } => self.health.on_connect_failed(now.instant),
            Link::Idle => {}
        }
        debug!(relay = %cx.relay, failures = self.health.consecutive_failures(), "relay disconnected");
    }

    /// What was not caught up is remembered, the link goes back to idle
    /// (the answer is the link as it was), the connection and its batches
    /// are forgotten (their items are planned again), the confirmed state
    /// kept for a quick reconnect.
    pub(super) fn close(&mut self, now: Now) -> Link {
        self.remember_uncaught();
        self.timers.clear(RelayTimer::Poll);
        let was = self.link.close();
        self.clear_pending();
        if let Some(state) = self.state.as_mut() {
            state.disconnected_at = Some(now.unix);
            // The last moment we were connected: a quick reconnect catches
            // up from here minus the window.
            state.last_connected = Some(now.unix);
        }
        was
    }

    /// Forgets every batch in flight.
    pub(crate) fn clear_pending(&mut self) {
        self.batches.clear();
    }

    /// Keeps, across the reconnect, the earliest moment live coverage was
    /// missing and not caught up yet: a live gap, the span of uncovered
    /// filters since their last poll, a gap or poll batch still running.
    pub(super) fn remember_uncaught(&mut self) {
        let Some(conn) = self.link.conn() else {
            return;
        };
        let earliest = [conn.live().uncaught_since(), self.batches.uncaught_since()]
            .into_iter()
            .flatten()
            .min();
        if let Some(earliest) = earliest {
            self.uncaught_since = Some(
                self.uncaught_since
                    .map_or(earliest, |old| old.min(earliest)),
            );
        }
    }

    /// The filter of the negentropy session `id`.
    pub(crate) fn negentropy_filter(&self, id: &SubscriptionId) -> Option<&Filter> {
        self.link.conn()?.sub(id)?.negentropy_filter()
    }
}
