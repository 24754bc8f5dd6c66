//! One relay's session: what we learned about the relay, its open
//! connection, its health and retries, its timers and counters — and the
//! collection of them the engine routes inputs to by URL.

use std::collections::HashSet;

use nostr::prelude::{EventId, Filter, RelayMessage, RelayUrl, SubscriptionId, Timestamp};
use tracing::{debug, info, warn};

use super::bad_events::BadEventVerdict;
use super::config::{EngineConfig, RelayLimits};
use super::live_coverage::LiveList;
use super::outbox::Outbox;
use super::runtime::{ClosedOutcome, EoseOutcome, Job, PageEnded, Purpose, RelayConn, Sub};
use super::session_events::{Dropped, Noted, SessionEvent, SessionEvents};
use super::stats::{LiveMode, RelayActivity};
use super::stores::StoreTracker;
use super::timer_table::{Deadline, Earliest, RelayTimer, TimerTable};
use super::Command;
use crate::classify::{classify, Classified};
use crate::clock::{Instant, Now};
use crate::filters::{announcement_filter, item_filters, FilterMode};
use crate::health::{HealthConfig, HealthState, RelayHealth, Retry};
use crate::model::{
    BatchId, ConnectionStatus, ItemsInFlight, PendingBatch, PendingItems, RelayState, SyncMethod,
};
use crate::planner::RepoSyncIndex;
use crate::relay_text::RelayText;
use crate::screen::Refused;
use crate::transport::TransportError;
use crate::verified::VerifiedEvent;

mod batches;
mod catch_up;
mod learned;
mod link;
mod live;
mod nip77;
mod own_read;
mod work;

pub(crate) use batches::{Batch, Batches};

pub(crate) use learned::Learned;
use link::Link;
pub(crate) use nip77::NegFailure;
use nip77::Nip77;
use own_read::{OwnRead, OwnStep};

/// Everything about one relay: what we learned about it (kept across
/// connections), its open connection if any, and its counters.
#[derive(Debug, Default)]
pub(crate) struct RelaySession {
    /// What the relay confirmed (the spec's `RelayState`): `Some` while the
    /// engine tracks the relay (registered, not dropped). A session without
    /// it only remembers what was learned.
    state: Option<RelayState>,
    /// Where the connection stands: idle, connecting (until its deadline)
    /// or open (with its connection). The one record of the relay's
    /// connection lifecycle.
    link: Link,
    /// What was learned of the relay: its limits, told and learned.
    learned: Learned,
    /// The relay's batches in flight: what each syncs, how, and its
    /// progress.
    batches: Batches,
    /// What the session waits for: replan, Layer 1 retry, live rebuild,
    /// the next poll of uncovered filters.
    timers: TimerTable<RelayTimer>,
    /// The earliest moment live coverage was missing and not caught up when
    /// the last connection dropped (a gap, a poll span): the next quick
    /// reconnect catches up from there.
    uncaught_since: Option<nostr::prelude::Timestamp>,
    /// Verified events from the relay handed to the store.
    events_received: u64,
    /// Events the relay sent that it had sent lately already (on another
    /// subscription, or a page again): `events_received` over
    /// `events_received - events_received_again` is how often it sent each.
    events_received_again: u64,
    /// Ids the relay sent lately (at most
    /// [`Caps::received_ids_per_relay`]), created with the first.
    received_lately: Option<crate::recent::RecentIds>,
    /// What NIP-77 reconciliation keeps across connections: the events the
    /// relay sent that name an event ([`Nip77`]).
    nip77: Nip77,
    /// Events from the relay the store reported newly stored.
    events_stored: u64,
    /// The last thing that went wrong with the relay (clipped: it may quote the relay).
    last_error: Option<RelayText>,
    /// Connection health: failures and their backoff, rate limiting, the
    /// stability of a connection after failures.
    health: RelayHealth,
    /// Failed historic work in a row (batches closed or timed out, live
    /// subscriptions refused) and its backoff; `None` after a confirmation.
    work_retry: Option<Retry>,
    /// A remote relay we sync from, or the own relay we read ourselves
    /// back from: where the session differs, the role says.
    role: Role,
}

/// What a session is for: where it differs, it asks its role.
#[derive(Debug, Default)]
enum Role {
    /// A relay we sync from: planned work, its events to the store.
    #[default]
    Remote,
    /// The own relay, read back by the self-subscriber: never tracked or
    /// planned; on connect its self-subscription ([`OwnRead`]) opens, its
    /// events go to the self-subscriber; it reconnects after
    /// `HealthConfig::own_relay_backoff`.
    Own(Box<OwnRead>),
}

/// What the engine asks a session, and the session's handlers: what the
/// relay's messages and timeouts, and the work the engine plans for it, do
/// to its subscriptions and batches, and the commands they emit.
///
/// The sections follow a relay's life: what the engine asks; connecting,
/// opening (fresh start or quick reconnect) and losing the connection;
/// sending; the relay's messages, its refusals and what they teach; NIP-77;
/// the live plan, live subscriptions and catching up by `since`; the work
/// the engine plans, its jobs and the room to start them; batches ending or
/// stalling, and retries; the timers and the session's next deadline.
impl RelaySession {
    /// Emits `command` ([`RelaySession::send`]).
    fn emit(&mut self, cx: &mut Ctx<'_>, command: Command) {
        self.send(cx.out, command);
    }

    // --- What the engine asks and tells a session ----------------------------

    /// The own relay's session ([`Role::Own`]): idle, its first connection
    /// due at once.
    pub(crate) fn own() -> Self {
        RelaySession {
            role: Role::Own(Box::default()),
            ..RelaySession::default()
        }
    }

    /// The own relay's self-subscription, if this is its session.
    fn own_read(&self) -> Option<&OwnRead> {
        match &self.role {
            Role::Own(read) => Some(read),
            Role::Remote => None,
        }
    }

    /// `true` for the own relay's session.
    fn is_own(&self) -> bool {
        self.own_read().is_some()
    }

    /// The health timing the session's reconnects follow: the
    /// configuration's, or for the own relay its own backoff
    /// ([`OwnRead::health`]).
    fn health_config(&self, config: &HealthConfig) -> HealthConfig {
        match self.role {
            Role::Own(_) => OwnRead::health(config),
            Role::Remote => config.clone(),
        }
    }

    /// `true` once the own relay's history was read completely on its open
    /// connection (`false` for any other session).
    pub(crate) fn own_history_read(&self) -> bool {
        self.is_connected() && self.own_read().is_some_and(OwnRead::history_read)
    }

    /// The own relay's self-subscription filter ([`OwnRead::subscription_filter`]).
    pub(crate) fn own_subscription_filter(&self, config: &EngineConfig) -> Option<Filter> {
        Some(self.own_read()?.subscription_filter(config))
    }

    /// What the relay confirmed, while the engine tracks the relay.
    pub(crate) fn state(&self) -> Option<&RelayState> {
        self.state.as_ref()
    }

    /// `true` while the engine tracks the relay (registered, not dropped).
    pub(crate) fn is_tracked(&self) -> bool {
        self.state.is_some()
    }

    /// Starts tracking the relay, or marks a tracked one bootstrap if
    /// `is_bootstrap` (registering never unmarks it). `true` when the relay
    /// was not tracked before.
    pub(crate) fn track(&mut self, is_bootstrap: bool) -> bool {
        match &mut self.state {
            Some(state) => {
                state.is_bootstrap |= is_bootstrap;
                false
            }
            None => {
                self.state = Some(RelayState::new(is_bootstrap));
                true
            }
        }
    }

    /// What the relay's batches in flight sync and how, oldest first.
    pub(crate) fn pending_batches(&self) -> impl ExactSizeIterator<Item = &PendingBatch> {
        self.batches.pending()
    }

    /// How many of the relay's batches in flight sync each item: what
    /// planning subtracts.
    pub(crate) fn items_in_flight(&self) -> &ItemsInFlight {
        self.batches.in_flight()
    }

    /// How many batches are in flight on the relay.
    pub(crate) fn batch_count(&self) -> usize {
        self.batches.len()
    }

    /// The relay's connection lifecycle as reported: disconnected,
    /// connecting or connected (derived from its link).
    pub(crate) fn connection_status(&self) -> ConnectionStatus {
        self.link.status()
    }

    /// `true` while the relay's connection is open: the one answer to "is
    /// this relay connected".
    pub(crate) fn is_connected(&self) -> bool {
        self.connection_status() == ConnectionStatus::Connected
    }

    /// `true` while a connection attempt is in flight.
    pub(crate) fn is_connecting(&self) -> bool {
        self.connection_status() == ConnectionStatus::Connecting
    }

    /// `true` while neither connected nor connecting.
    fn is_idle(&self) -> bool {
        self.connection_status() == ConnectionStatus::Disconnected
    }

    /// Connection health: failures and their backoff.
    pub(crate) fn health(&self) -> &RelayHealth {
        &self.health
    }

    /// Remembers `error` as the last thing that went wrong with the relay
    /// (clipped: it may quote the relay).
    pub(crate) fn note_error(&mut self, error: &str) {
        self.last_error = Some(RelayText::new(error));
    }

    /// The last thing that went wrong with the relay.
    pub(crate) fn last_error(&self) -> Option<&RelayText> {
        self.last_error.as_ref()
    }

    /// Takes the relay's NIP-11 limits.
    pub(crate) fn set_limits(&mut self, limits: RelayLimits) {
        self.learned.set_limits(limits);
    }

    /// Counts one event from the relay the store reported newly stored.
    pub(crate) fn event_stored(&mut self) {
        self.events_stored += 1;
    }

    /// Verified events from the relay handed to the store.
    pub(crate) fn events_received(&self) -> u64 {
        self.events_received
    }

    /// Events the relay sent that it had sent lately already.
    pub(crate) fn events_received_again(&self) -> u64 {
        self.events_received_again
    }

    /// Events from the relay the store reported newly stored.
    pub(crate) fn events_stored(&self) -> u64 {
        self.events_stored
    }

    /// `true` when the connection attempt in flight is past its timeout.
    pub(crate) fn connect_timed_out(&self, now: Instant) -> bool {
        self.link
            .connect_deadline()
            .is_some_and(|deadline| deadline <= now)
    }

    /// `true` when the connection is open and the `since` poll of live
    /// filters that do not fit is due.
    fn poll_due(&self, now: Instant) -> bool {
        self.is_connected() && self.timers.is_due(RelayTimer::Poll, now)
    }

    /// What is open and waiting on the connection, if connected: its
    /// subscriptions, live coverage, queued jobs, and the limits they are
    /// held to.
    pub(crate) fn activity(&self, config: &EngineConfig) -> Option<RelayActivity> {
        let conn = self.link.conn()?;
        let live_mode = match conn.live().uncovered_count() {
            0 => LiveMode::Full,
            uncovered_filters => LiveMode::Polling { uncovered_filters },
        };
        Some(RelayActivity {
            open_subscriptions: conn.open_count(),
            live_subscriptions: conn.live().count(),
            queued_jobs: conn.work().len(),
            deferred_live_items: conn.live().deferred_count(),
            subscription_limit: self.learned.subscription_limit(config),
            live_slots: self.learned.live_slots(config),
            frame_budget: self.learned.frame_budget(config),
            live_mode,
        })
    }

    /// `true` while the connection is open and quiet
    /// ([`RelayConn::is_quiet`]: nothing queued, no live coverage waiting,
    /// only live subscriptions open).
    pub(crate) fn is_quiet(&self) -> bool {
        self.link.conn().is_some_and(RelayConn::is_quiet)
    }

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
    fn abandon_connect_attempt(&mut self, cx: &mut Ctx<'_>, now: Now) {
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
    fn connected(
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
    fn close_all_subscriptions(&mut self, cx: &mut Ctx<'_>) {
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
    fn close(&mut self, now: Now) -> Link {
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
    fn remember_uncaught(&mut self) {
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

    // --- Sending ---------------------------------------------------------------

    /// Emits `command` for this relay, noting first what the connection
    /// tracks of it: when a subscription opened and that it waits for an
    /// answer, and the size of each frame sent (a relay that drops the
    /// connection right after a large one teaches a smaller frame budget).
    pub(crate) fn send(&mut self, out: &mut Outbox, command: Command) {
        let now = out.now();
        if let Some(conn) = self.link.conn_mut() {
            conn.note_sent(now, &command);
        }
        out.push(command);
    }

    // --- Messages -------------------------------------------------------

    /// A message of the own relay's self-subscription (its session only,
    /// [`OwnRead::on_message`]); a CLOSED drops the connection to reconnect
    /// after the backoff.
    pub(crate) fn on_own_message(&mut self, cx: &mut Ctx<'_>, now: Now, message: RelayMessage<'_>) {
        if !self.is_connected() {
            return ignored(cx, "message while not connected");
        }
        let Role::Own(read) = &mut self.role else {
            return ignored(cx, "own relay message for a remote relay");
        };
        if read.on_message(cx, now, message) == OwnStep::Reconnect {
            let relay = cx.relay.clone();
            self.emit(cx, Command::Disconnect { relay });
            self.connection_closed(cx, now);
        }
    }

    /// An `EVENT` of the own relay that the driver verified already (or
    /// found forged, counted): for the self-subscriber
    /// ([`OwnRead::on_event`]).
    pub(crate) fn on_own_checked_event(
        &mut self,
        cx: &mut Ctx<'_>,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Refused>,
    ) {
        if !self.is_connected() {
            return ignored(cx, "event while not connected");
        }
        let Role::Own(read) = &mut self.role else {
            return ignored(cx, "own relay event for a remote relay");
        };
        match checked {
            Ok(event) => read.on_event(cx, subscription_id, event.into_event()),
            Err(refused) => count_refused(cx.events, cx.relay, &refused),
        }
    }

    /// A relay message other than EVENT (those go through
    /// [`RelaySession::admit`]): EOSE, CLOSED, NOTICE, a `rate-limited:`
    /// OK, NEG-MSG, NEG-ERR.
    pub(crate) fn on_message(&mut self, cx: &mut Ctx<'_>, now: Now, message: RelayMessage<'_>) {
        match message {
            RelayMessage::EndOfStoredEvents(id) => {
                self.heard(now.instant, Some(&id));
                self.on_eose(cx, now, &id)
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                self.heard(now.instant, Some(&subscription_id));
                self.on_closed(cx, now, &subscription_id, &message)
            }
            RelayMessage::NegMsg {
                subscription_id,
                message,
            } => {
                self.heard(now.instant, Some(&subscription_id));
                self.on_neg_msg(cx, now, &subscription_id, &message)
            }
            RelayMessage::NegErr {
                subscription_id,
                message,
            } => {
                self.heard(now.instant, Some(&subscription_id));
                self.on_neg_err(cx, now, &subscription_id, &message)
            }
            RelayMessage::Notice(message) => {
                self.heard(now.instant, None);
                self.on_notice(cx, now, &message)
            }
            RelayMessage::Ok {
                status: false,
                message,
                ..
            } if classify(&message).rate_limited => {
                self.heard(now.instant, None);
                self.heed_rate_limit(cx, now)
            }
            _ => self.heard(now.instant, None),
        }
    }

    /// Trust: the event `arrived` on subscription `id`, if it matches a
    /// filter of that subscription and its id and signature verify (here,
    /// unless the driver did), with the batch it counts for; `None` (counted
    /// in the stats) otherwise. An event on a live subscription closed by a
    /// consolidation is still admitted if it matches the filters it had.
    pub(crate) fn admit(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        arrived: Arrived,
    ) -> Option<(VerifiedEvent, Option<BatchId>)> {
        self.heard(now.instant, Some(id));
        let event = arrived.event();
        if let Some(refused) = cx.config.limits.size_limits().event_too_large(event) {
            self.refuse(cx, now, refused);
            return None;
        }
        // Sent before the relay saw our CLOSE of a consolidated live
        // subscription: still something we asked for.
        let Some(matches) = self.link.conn()?.asked_for(id, event) else {
            let refused = Refused::UnknownSubscription { id: event.id };
            self.refuse(cx, now, refused);
            return None;
        };
        if !matches {
            let refused = Refused::OffFilter { id: event.id };
            self.refuse(cx, now, refused);
            return None;
        }
        let checked = match arrived {
            Arrived::Verified(event) => Ok(event),
            Arrived::Unchecked(event) => VerifiedEvent::verify(event),
        };
        let event = match checked {
            Ok(event) => event,
            Err(forged) => {
                self.refuse(cx, now, Refused::Forged(forged));
                return None;
            }
        };
        let batch = self
            .link
            .conn_mut()?
            .sub_mut(id)
            .and_then(|sub| sub.on_event(&event));
        if let Some(batch) = batch {
            self.batches.progress(batch, now.instant);
        }
        self.note_received(cx, event.id);
        Some((event, batch))
    }

    /// An event of this relay we refused (`refused` says why): counted and
    /// logged at `debug`, and counted for the connection; the one past
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) cuts the relay
    /// off ([`RelaySession::cut_off`]).
    pub(crate) fn refuse(&mut self, cx: &mut Ctx<'_>, now: Now, refused: Refused) {
        count_refused(cx.events, cx.relay, &refused);
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let threshold = cx.config.caps.max_bad_events;
        if conn.record_bad_event(threshold) == BadEventVerdict::CutOff {
            self.cut_off(cx, now);
        }
    }

    /// Cuts the relay off for sending more refused events than
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) on one
    /// connection: counted and logged once, disconnected, and the health
    /// told of a failure (the interrupted failure run continues, so the
    /// backoff before the next connection grows with each cut).
    fn cut_off(&mut self, cx: &mut Ctx<'_>, now: Now) {
        cx.events.push(Noted::RelayCut);
        let refused = self.link.conn().map_or(0, |conn| conn.bad_event_count());
        warn!(
            relay = %cx.relay,
            refused,
            threshold = cx.config.caps.max_bad_events,
            "relay sent too many forged, unrequested, oversized or malformed messages; disconnecting and backing off"
        );
        self.last_error = Some(format!("cut off after {refused} refused events").into());
        self.lose_connection(cx, now);
    }

    /// A message from the relay over the connection's size limit ended
    /// the connection (the driver cannot read past it), counted and logged.
    /// While a NIP-77 session waits for its answer, the message is that
    /// answer (strfry builds `NEG-MSG`s of up to 500 000 bytes, hex: twice
    /// that on the wire): the relay is fine, its NIP-77 frames are not for
    /// us, so it is synced by REQ from now on, like a relay that refuses
    /// NIP-77, and connected again at once ([`RelaySession::negentropy_over_limit`]).
    /// Any other such message is a failure for the health (the backoff
    /// grows), so a relay that answers the same request with the same
    /// oversized message is asked again ever more rarely, not at once.
    pub(crate) fn message_too_large(&mut self, cx: &mut Ctx<'_>, now: Now, bytes: usize) {
        cx.events.push(Noted::Oversized);
        if self.is_own() {
            warn!(relay = %cx.relay, bytes, "own relay sent a message over the size limit; reconnecting");
            return self.connection_closed(cx, now);
        }
        if self.negentropy_waits_for_answer() {
            return self.negentropy_over_limit(cx, now, bytes);
        }
        warn!(relay = %cx.relay, bytes, "relay sent a message over the size limit; connection lost, backing off");
        self.last_error = Some(format!("sent a message of {bytes} bytes, over the limit").into());
        self.lose_connection(cx, now);
    }

    /// `true` while a NEG-OPEN or NEG-MSG of ours waits for the relay's
    /// answer on the current connection.
    fn negentropy_waits_for_answer(&self) -> bool {
        self.link
            .conn()
            .is_some_and(RelayConn::negentropy_waits_for_answer)
    }

    /// The relay's NIP-77 answer was over our message limit: NIP-77 is
    /// refused for the relay (its status says why and that it is synced by
    /// REQ), the connection, which cannot read past the message, is closed
    /// without counting a failure, and the next connection syncs every
    /// filter by REQ. Never "unreachable": the relay answered.
    fn negentropy_over_limit(&mut self, cx: &mut Ctx<'_>, now: Now, bytes: usize) {
        cx.events.push(Noted::NegentropyOverLimit);
        self.learned.refuse_negentropy();
        warn!(
            relay = %cx.relay,
            bytes,
            "relay's NIP-77 message is over our message limit (NGIT_SYNC_MAX_MESSAGE_BYTES); syncing it by REQ"
        );
        self.last_error = Some(
            format!("NIP-77 message of {bytes} bytes over our message limit: synced by REQ").into(),
        );
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.close(now);
        debug!(relay = %cx.relay, "reconnecting to sync by REQ");
    }

    /// Closes the connection for the relay's fault: the health counts a
    /// failure (whether or not the connection was stable), then the usual
    /// bookkeeping of a closed connection.
    fn lose_connection(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.close(now);
        self.health.on_connect_failed(now.instant);
        debug!(relay = %cx.relay, failures = self.health.consecutive_failures(), "relay disconnected");
    }

    /// Counts an event the relay sent, and whether it sent it lately
    /// already.
    fn note_received(&mut self, cx: &mut Ctx<'_>, id: EventId) {
        let capacity = cx.config.caps.received_ids_per_relay;
        self.events_received += 1;
        let lately = self
            .received_lately
            .get_or_insert_with(|| crate::recent::RecentIds::new(capacity));
        if lately.contains(&id) {
            self.events_received_again += 1;
            cx.events.push(Noted::ReceivedAgain);
        } else {
            lately.insert(id, ());
        }
    }

    /// What an EOSE means for the subscription it ends ([`Sub::on_eose`]
    /// decides; [`EoseOutcome`]): the next page (or a pause, over the rate
    /// or while the store is behind), a finished job, a fetch asked again
    /// for what it did not bring, a poll continued where a page may have
    /// been cut.
    fn on_eose(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        let group_limit = self.learned.group_page_limit(cx.config);
        let told = *self.learned.told_limits();
        let fetch_attempts = cx.config.timeouts.fetch_attempts;
        let Some(sub) = self.link.conn_mut().and_then(|conn| conn.sub_mut(id)) else {
            return;
        };
        match sub.on_eose(&told, group_limit, fetch_attempts) {
            EoseOutcome::Page(page) => self.page_ended(cx, now, id, page),
            EoseOutcome::Fetched {
                batch,
                filter,
                missing,
                fruitless,
                retry,
            } => {
                if !missing.is_empty() && !retry {
                    cx.events.push(Noted::FetchMissing(missing.len() as u64));
                    warn!(relay = %cx.relay, missing = missing.len(), "relay did not return ids its negentropy set holds");
                }
                if retry && fruitless > 0 {
                    cx.events.push(Noted::FetchRetry);
                }
                let again = if retry {
                    self.fetch_jobs(cx.config, &filter, &missing, fruitless)
                } else {
                    Vec::new()
                };
                self.end_job(cx, now, id, batch, again);
            }
            EoseOutcome::Polled { batch, follow_up } => self.end_job(cx, now, id, batch, follow_up),
            EoseOutcome::LiveAnswered | EoseOutcome::Ignored => {}
        }
    }

    /// A page of the REQ `id` ended: its crowded seconds counted, and the
    /// next page asked for — paused (the slot freed, resumed later) over
    /// the learned rate or while the store is behind — or the job is done.
    fn page_ended(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId, page: PageEnded) {
        let PageEnded {
            batch,
            next,
            page_len,
            crowded,
        } = page;
        if crowded > 0 {
            cx.events.push(Noted::Crowded(crowded as u64));
            warn!(relay = %cx.relay, "a full page of events shares one second; events beyond the page may be missing");
        }
        self.batches.progress(batch, now.instant);
        let page_limit_ours = self.learned.page_limit(cx.config);
        self.learned.note_page_len(page_len, page_limit_ours);
        match next {
            Some(filter) if cx.store_keeps_up() && self.rate_allows(now.instant, cx.config) => {
                if let Some(conn) = self.link.conn_mut() {
                    conn.watch_next_page(id, now.instant);
                }
                let relay = cx.relay.clone();
                self.emit(
                    cx,
                    Command::Subscribe {
                        relay,
                        id: id.clone(),
                        filters: vec![filter],
                    },
                )
            }
            Some(_) => {
                self.unsubscribe(cx, id);
                self.pause_page(now, id);
            }
            None => self.end_job(cx, now, id, batch, Vec::new()),
        }
    }

    /// What a CLOSED means for the subscription it ends: a refused slot is
    /// retried later ([`RelaySession::learn_from_refusal`] says whether it
    /// was one); otherwise a live subscription waits for its rebuild, a
    /// negentropy session falls back to REQ, a historic job fails its batch.
    fn on_closed(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId, message: &str) {
        let classified = classify(message);
        if !self.link.conn().is_some_and(|conn| conn.is_open(id)) {
            return;
        }
        info!(relay = %cx.relay, %id, message, "subscription closed by relay");
        let slot_refused = self.heed_refusal(cx, now, &classified);
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        match sub.on_closed(slot_refused) {
            ClosedOutcome::RetryLater => self.retry_later(now, id),
            ClosedOutcome::LiveLost => self.live_closed(id, now, cx.config),
            ClosedOutcome::NegentropyRefused => {
                let failure = NegFailure::Refused {
                    reason: message,
                    close: false,
                };
                self.negentropy_failed(cx, now, id, failure);
            }
            ClosedOutcome::BatchFailed(batch) => self.fail_batch(cx, now, batch, message),
        }
    }

    // --- Refusals -------------------------------------------------------

    /// Learns from a refusal ([`RelaySession::learn_from_refusal`] holds
    /// the decision) and counts and logs what it taught: `true` when the
    /// refused subscription should simply be retried later.
    fn heed_refusal(&mut self, cx: &mut Ctx<'_>, now: Now, classified: &Classified) -> bool {
        let lesson = self.learn_from_refusal(now.instant, classified, cx.config);
        note_lesson(cx, lesson);
        lesson.retry()
    }

    /// A `rate-limited:` refusal ([`RelaySession::rate_limited`]), counted
    /// and logged: an `OK` refusing an event we published, which says
    /// nothing about subscriptions whatever its wording (so not
    /// [`RelaySession::heed_refusal`], which would read "too many
    /// subscriptions" into it).
    fn heed_rate_limit(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let lesson = self.rate_limited(now.instant, cx.config);
        note_lesson(cx, lesson);
    }

    /// A NOTICE: a subscription or rate refusal (relays answer in order, so
    /// it refuses the oldest subscription not answered yet), or else, for
    /// every NIP-77 session waiting for its first answer, a refusal of
    /// NIP-77.
    fn on_notice(&mut self, cx: &mut Ctx<'_>, now: Now, message: &str) {
        let classified = classify(message);
        info!(relay = %cx.relay, message, "notice");
        if classified.too_many_subscriptions || classified.rate_limited {
            self.heed_refusal(cx, now, &classified);
            if let Some(id) = self
                .link
                .conn_mut()
                .and_then(|conn| conn.oldest_unanswered())
            {
                self.retry_refused_slot(cx, now, &id);
            }
            return;
        }
        let waiting: Vec<SubscriptionId> = self
            .link
            .conn()
            .map(|conn| {
                conn.negentropy_unanswered()
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in waiting {
            let failure = NegFailure::Refused {
                reason: message,
                close: true,
            };
            self.negentropy_failed(cx, now, &id, failure);
        }
    }

    /// Retries the slot `id` later after the relay refused it.
    fn retry_refused_slot(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        if !self.link.conn().is_some_and(|conn| conn.is_open(id)) {
            return;
        }
        // The guess may be wrong: tell the relay too (a CLOSE of an unknown
        // id is harmless), so it never holds more than we count.
        self.unsubscribe(cx, id);
        self.retry_later(now, id);
    }

    /// The refused slot `id` is asked for again when the relay allows: its
    /// job from where it was, back in the queue, or a live REQ unchanged.
    fn retry_later(&mut self, now: Now, id: &SubscriptionId) {
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        match sub.job() {
            Some(job) => self.replace_job(id, job, now.instant),
            None => self.requeue_live(now, id),
        }
    }

    /// Moves a paginated subscription back to the queue, keeping its paging.
    fn pause_page(&mut self, now: Now, id: &SubscriptionId) {
        let Some(job) = self
            .link
            .conn()
            .and_then(|conn| conn.sub(id))
            .and_then(Sub::job)
        else {
            return;
        };
        self.replace_job(id, job, now.instant);
    }

    /// A refused live REQ is sent again, unchanged, when the relay allows.
    fn requeue_live(&mut self, now: Now, id: &SubscriptionId) {
        if let Some(conn) = self.link.conn_mut() {
            conn.requeue_live(id, now.unix);
        }
    }

    // --- Lessons from refusals and drops -------------------------------------

    /// What a refusal teaches — the whole decision: a refused subscription
    /// ("too many subscriptions") lowers the relay's known limit to one
    /// below what was open (never below two: one live, one historic slot)
    /// and starts the cooldown without halving the rate (the lower limit
    /// prevents the next refusal); `rate-limited:` starts the cooldown and,
    /// once per episode, halves the REQs sent per window
    /// ([`RelaySession::rate_limited`]).
    pub(crate) fn learn_from_refusal(
        &mut self,
        now: Instant,
        classified: &Classified,
        config: &EngineConfig,
    ) -> Lesson {
        if classified.too_many_subscriptions {
            let open = self.link.conn().map_or(1, RelayConn::open_count);
            let limit = self.learned.refused_subscription(open, now);
            self.health.on_rate_limited(now, &config.health);
            return Lesson {
                subscription_limit: Some(limit),
                cooldown: true,
                rate_refused: false,
            };
        }
        if classified.rate_limited {
            return self.rate_limited(now, config);
        }
        Lesson::default()
    }

    /// A `rate-limited:` refusal: the cooldown starts (or is extended) and,
    /// the first time in an episode, the learned rate becomes half of what
    /// was opened within the last window (at least one).
    pub(crate) fn rate_limited(&mut self, now: Instant, config: &EngineConfig) -> Lesson {
        let already = self.health.is_rate_limited(now);
        self.health.on_rate_limited(now, &config.health);
        if !already {
            let window = config.rate_window();
            let opened = self
                .link
                .conn_mut()
                .map_or(1, |conn| conn.opens_within(now, window));
            self.learned.halve_rate(opened, now);
        }
        Lesson {
            subscription_limit: None,
            cooldown: true,
            rate_refused: true,
        }
    }

    /// A relay that drops the connection right after a large frame (strfry
    /// closes the socket on any frame over its limit, without a word) gets
    /// half that frame as its budget, so the next attempt fits (counted and
    /// logged when it was lowered).
    pub(crate) fn learn_frame_budget(&mut self, cx: &mut Ctx<'_>, now: Instant) {
        let Some(len) = self
            .link
            .conn()
            .and_then(|conn| conn.large_frame_before(now))
        else {
            return;
        };
        let Some(budget) = self.learned.dropped_after_frame(len, now) else {
            return;
        };
        cx.events.push(Noted::FrameBudgetLowered);
        warn!(relay = %cx.relay, frame = len, budget, "relay dropped the connection after a large frame; sending smaller frames");
    }

    /// Raises the relay's lowered subscription limit and frame budget a
    /// step once a quiet period passed without a new lesson
    /// ([`Learned::recover_limits`]), counted and logged.
    fn recover_limits(&mut self, cx: &mut Ctx<'_>, now: Instant) {
        if !self.learned.recover_limits(now, cx.config) {
            return;
        }
        cx.events.push(Noted::LimitsRaised);
        debug!(
            relay = %cx.relay,
            subscriptions = self.learned.subscription_limit(cx.config),
            frame_budget = self.learned.frame_budget(cx.config),
            "no refusal or drop for a while; probing the relay's limits upward"
        );
    }

    /// If `id` is on its way to the store, `batch` confirms only once it is
    /// stored (`true`); `false` if it is not waiting for the store.
    pub(crate) fn wait_for_store(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        batch: BatchId,
        id: &EventId,
    ) -> bool {
        match cx.stores.add_waiter(id, cx.relay, batch) {
            None => false,
            Some(newly) => {
                if newly {
                    self.count_store(cx, now, batch, 1);
                }
                true
            }
        }
    }

    // --- Sync method and live plan -------------------------------------------

    /// How to sync a historic filter on this relay — the whole decision:
    /// NIP-77 reconciliation, unless the relay refused NIP-77 in some form
    /// ([`RelaySession::negentropy_failed`]),
    /// the filter has a `since` (a catch-up fetches what is new; reconciling
    /// would compare the whole history), or a NEG frame for it does not fit
    /// the relay's frame budget; then REQ+EOSE with `until` pagination.
    /// Missing ids a reconciliation found are fetched by REQ
    /// ([`RelaySession::fetch_jobs`]). The batches whose filters all carry
    /// a `since` — a quick reconnect's catch-up, a live gap's, a poll — are
    /// REQ batches without asking: this answers REQ for every such filter.
    pub(crate) fn sync_method(&self, filter: &Filter, config: &EngineConfig) -> SyncMethod {
        let negentropy = self.nip77_usable(config)
            && filter.since.is_none()
            && self
                .learned
                .negentropy_frame_limit(filter, config)
                .is_some();
        if negentropy {
            SyncMethod::Negentropy
        } else {
            SyncMethod::ReqEose
        }
    }

    /// `true` while NIP-77 is switched on ([`EngineConfig::negentropy`])
    /// and the relay has not refused it in any form
    /// ([`RelaySession::negentropy_failed`]): the relay-wide half of
    /// [`RelaySession::sync_method`], asked on its own where no filter is
    /// in question (the method a relay report shows, whether fresh roots
    /// are reconciled against what the relay sent).
    pub(crate) fn nip77_usable(&self, config: &EngineConfig) -> bool {
        config.negentropy && !self.learned.negentropy_refused()
    }

    // --- Planned work -----------------------------------------------------

    /// New items for the connected relay: live subscriptions and a historic
    /// batch. Replies to root events the store took as new just now are new
    /// to the store too: asking it for them costs a scan per session and
    /// finds only what this sync brought. On a NIP-77 relay they are
    /// reconciled against what the relay sent this sync (a status that came
    /// with its repository's reconciliation is not fetched again); elsewhere
    /// a REQ brings them in one go. Once: the next relay planned for the
    /// root, and every later pass, reconcile with the store.
    pub(crate) fn add_filters(&mut self, cx: &mut Ctx<'_>, now: Now, items: PendingItems) {
        if !self.is_connected() || items.is_empty() {
            return;
        }
        self.add_live(cx, now, &items);
        let (fresh, held): (HashSet<EventId>, HashSet<EventId>) = items
            .root_events
            .iter()
            .partition(|id| cx.stores.take_fresh_root(id));
        let sent = self.reconciles_fresh_roots(cx.config);
        if sent {
            cx.events
                .push(Noted::FreshRootsReconciled(fresh.len() as u64));
        } else {
            cx.events.push(Noted::FreshRootsByReq(fresh.len() as u64));
        }
        let reconciled = PendingItems {
            repos: items.repos.clone(),
            root_events: held,
            authors: items.authors.clone(),
        };
        let fresh = PendingItems {
            root_events: fresh,
            ..PendingItems::default()
        };
        let chunk = cx.config.limits.chunk_size;
        let filters = item_filters(&reconciled, chunk, FilterMode::FULL_HISTORY);
        let (reconcile, req): (Vec<_>, Vec<_>) = filters
            .into_iter()
            .partition(|filter| self.sync_method(filter, cx.config) == SyncMethod::Negentropy);
        let mut jobs: Vec<Job> = reconcile.into_iter().map(Job::Negentropy).collect();
        jobs.extend(self.req_jobs(req, cx.config));
        let fresh_filters = item_filters(&fresh, chunk, FilterMode::FULL_HISTORY);
        if sent {
            jobs.extend(fresh_filters.into_iter().map(Job::NegentropySent));
        } else {
            jobs.extend(self.req_jobs(fresh_filters, cx.config));
        }
        let reconciles = jobs
            .iter()
            .any(|job| matches!(job, Job::Negentropy(_) | Job::NegentropySent(_)));
        let method = if reconciles {
            SyncMethod::Negentropy
        } else {
            SyncMethod::ReqEose
        };
        self.start_batch(cx, now, Purpose::Items, items, method, jobs);
    }

    /// Layer 1: the live announcement subscription and its history
    /// (negentropy when the relay allows and there is no `since`). Not on
    /// a relay reached only through Sync+ (`Ctx::discovers`).
    pub(crate) fn start_layer1(&mut self, cx: &mut Ctx<'_>, now: Now, since: Option<Timestamp>) {
        if !cx.discovers {
            return;
        }
        let needs_live = self
            .link
            .conn()
            .is_some_and(|conn| conn.live().count() == 0);
        // Otherwise `pump` rebuilds live coverage, Layer 1 included, once the
        // relay allows.
        if needs_live && self.may_open_live(now.instant, cx.config) {
            let filters = vec![announcement_filter(FilterMode::Live)];
            self.open_live(cx, now, filters, LiveList::Layer1);
        }
        let filter = announcement_filter(FilterMode::Historic { since });
        let method = self.sync_method(&filter, cx.config);
        let job = match method {
            SyncMethod::Negentropy => Job::Negentropy(filter),
            SyncMethod::ReqEose => Job::Req(filter),
        };
        self.start_batch(
            cx,
            now,
            Purpose::Layer1,
            PendingItems::default(),
            method,
            vec![job],
        );
    }

    /// Layer 1 starts at the session's timeout at `at` (its retry timer):
    /// for a relay that now discovers announcements, connected while it
    /// did not (reached only through Sync+).
    pub(crate) fn start_layer1_at(&mut self, at: Instant) {
        self.timers.set(RelayTimer::Layer1Retry, at);
    }

    /// Starts a batch of `jobs` syncing `items` by `method`: its jobs join
    /// the queue (a gap's or a poll's at the front: they are small and close
    /// a hole in live coverage). Returns the batch, if it has work.
    fn start_batch(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        purpose: Purpose,
        items: PendingItems,
        method: SyncMethod,
        jobs: Vec<Job>,
    ) -> Option<BatchId> {
        if jobs.is_empty() {
            return None;
        }
        let batch = cx.out.batch_id();
        cx.events.push(SessionEvent::BatchOpened(batch));
        self.batches
            .start(batch, purpose, items, method, jobs.len(), now);
        if let Some(conn) = self.link.conn_mut() {
            let ahead = matches!(purpose, Purpose::Gap | Purpose::Poll);
            conn.work_mut().enqueue(batch, jobs, ahead);
        }
        Some(batch)
    }

    // --- Batches ----------------------------------------------------------

    /// Removes the finished subscription slot `id`; when its batch has no
    /// work left, the batch is confirmed. A poll whose last job finished
    /// schedules the next poll (it does not wait for a slow store; it
    /// starts from where the last confirmed poll did).
    fn finish_job(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        let Some(batch) = self
            .link
            .conn_mut()
            .and_then(|conn| conn.take_sub(id))
            .and_then(|sub| sub.batch())
        else {
            return;
        };
        let Some(info) = self.batches.finish_job(batch, now.instant) else {
            return;
        };
        let done = info.is_done();
        if info.jobs_finished() && info.purpose() == Purpose::Poll && self.is_connected() {
            let next = now.instant + cx.config.timeouts.uncovered_poll_interval;
            self.timers.set_unless_set(RelayTimer::Poll, next);
        }
        if done {
            self.complete_batch(cx, now, batch);
        }
    }

    /// Ends the job of `batch` on subscription `id`: its CLOSE sent, the
    /// jobs that continue it (`follow_up`: what a clamp cut, ids asked
    /// again) queued in its batch, its slot freed ([`RelaySession::finish_job`]).
    fn end_job(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        batch: BatchId,
        follow_up: Vec<Job>,
    ) {
        self.unsubscribe(cx, id);
        if !follow_up.is_empty() {
            self.add_jobs(batch, follow_up);
        }
        self.finish_job(cx, now, id);
    }

    /// Counts events of `batch` handed to the store (`+1`) or answered
    /// (`-1`); a batch whose jobs are done confirms with its last store.
    pub(crate) fn count_store(&mut self, cx: &mut Ctx<'_>, now: Now, batch: BatchId, delta: i32) {
        let Some(info) = self.batches.count_store(batch, delta) else {
            return;
        };
        if info.is_done() {
            self.complete_batch(cx, now, batch);
        }
    }

    /// Confirms `batch` (the one completion rule, [`Batch::is_done`],
    /// held): what it synced is recorded by its purpose — its items
    /// confirmed, Layer 1 synced, the next poll scheduled from its start.
    fn complete_batch(&mut self, cx: &mut Ctx<'_>, now: Now, batch: BatchId) {
        let Some(info) = self.batches.end(batch) else {
            return;
        };
        debug!(relay = %cx.relay, %batch, purpose = ?info.purpose(), "batch confirmed");
        cx.events.push(SessionEvent::BatchConfirmed {
            batch,
            history: matches!(info.purpose(), Purpose::Layer1 | Purpose::Items),
        });
        self.work_confirmed();
        let Some(state) = self.state.as_mut() else {
            return;
        };
        match info.purpose() {
            Purpose::Items => state.confirm(info.items(), cx.repos.ids()),
            Purpose::Layer1 => state.announcements_synced = true,
            Purpose::CatchUp | Purpose::Gap => {}
            Purpose::Poll => {
                if let Some(conn) = self.link.conn_mut() {
                    conn.live_mut().polled_from(info.started_unix());
                    let next = now.instant + cx.config.timeouts.uncovered_poll_interval;
                    self.timers.set(RelayTimer::Poll, next);
                }
            }
        }
    }

    /// Fails `batch` for `reason`: it and its queued jobs are dropped, its
    /// subscriptions closed, the failure is counted for the retry delay, and
    /// what retries it is timed by its purpose — its items are planned
    /// again, Layer 1 retried, a catch-up's items synced fully again (the
    /// gap was not caught up), a gap's live coverage rebuilt from the same
    /// moment, a poll repeated (`poll_from` stays: the next poll covers this
    /// one's span).
    pub(crate) fn fail_batch(&mut self, cx: &mut Ctx<'_>, now: Now, batch: BatchId, reason: &str) {
        let Some(info) = self.batches.end(batch) else {
            return;
        };
        warn!(relay = %cx.relay, %batch, reason, "batch failed; its items will be planned again");
        cx.events.push(SessionEvent::BatchFailed(batch));
        self.last_error = Some(format!("batch failed: {reason}").into());
        let mut closing = Vec::new();
        if let Some(conn) = self.link.conn_mut() {
            closing = conn.drop_batch(batch);
        }
        let retry_at = now.instant + self.work_failed(&cx.config.health);
        match info.purpose() {
            Purpose::Items => self.timers.set(RelayTimer::Replan, retry_at),
            Purpose::Layer1 => self.timers.set(RelayTimer::Layer1Retry, retry_at),
            Purpose::CatchUp => {
                if let Some(state) = self.state.as_mut() {
                    state.repos.clear();
                    state.root_events.clear();
                }
                self.timers.set(RelayTimer::Replan, retry_at);
            }
            Purpose::Gap => {
                if let (Some(conn), Some(from)) = (self.link.conn_mut(), info.covers_from()) {
                    conn.live_mut().missing_since(from);
                }
                self.timers.set(RelayTimer::RebuildLive, retry_at);
            }
            Purpose::Poll => {
                if self.is_connected() {
                    self.timers.set(RelayTimer::Poll, retry_at);
                }
            }
        }
        for (id, sub) in closing {
            self.send_close(cx, id, &sub);
        }
    }

    /// Tells the relay the slot `id` is no longer wanted.
    fn send_close(&mut self, cx: &mut Ctx<'_>, id: SubscriptionId, sub: &Sub) {
        if let Some(command) = sub.close_command(cx.relay.clone(), id) {
            self.emit(cx, command);
        }
    }

    /// Sends a CLOSE of `id`.
    fn unsubscribe(&mut self, cx: &mut Ctx<'_>, id: &SubscriptionId) {
        let relay = cx.relay.clone();
        self.emit(
            cx,
            Command::Unsubscribe {
                relay,
                id: id.clone(),
            },
        );
    }

    // --- When a batch stalls -------------------------------------------------

    /// When a batch of the relay with a running job counts as stalled: once
    /// it has had no progress of its own (a job started, an event, an EOSE,
    /// a NEG-MSG) for the batch timeout **and** the relay has sent nothing
    /// for any of our historic subscriptions for the batch timeout either —
    /// a relay answering our REQs one after another, or slowed by a loaded
    /// machine, is still working on this one. Whatever the relay sends, a
    /// batch with no progress of its own for
    /// [`Timeouts::batch_stall_limit`] stalls (a subscription the relay
    /// dropped silently while it streams the others).
    pub(crate) fn batch_stalls_at(&self, info: &Batch, config: &EngineConfig) -> Instant {
        let timeout = config.timeouts.batch_timeout;
        let last_progress = info.last_progress();
        let own = last_progress + timeout;
        let hard = last_progress + config.timeouts.batch_stall_limit.max(timeout);
        let relay_idle = self
            .link
            .conn()
            .map_or(own, |conn| conn.last_historic_data() + timeout);
        own.max(relay_idle.min(hard))
    }

    /// `true` while a job of `batch` holds a subscription slot (queued jobs
    /// wait for a slot and do not time out).
    pub(crate) fn has_running_job(&self, batch: BatchId) -> bool {
        self.link
            .conn()
            .is_some_and(|conn| conn.has_running_job(batch))
    }

    // --- Health and work retries ---------------------------------------------

    /// Historic work on the relay failed: the delay before it is planned
    /// again, doubling for each failure in a row
    /// ([`HealthConfig::work_backoff`]).
    pub(crate) fn work_failed(&mut self, health: &HealthConfig) -> std::time::Duration {
        let backoff = health.work_backoff;
        Retry::fail_in(&mut self.work_retry, backoff)
    }

    /// Historic work on the relay was confirmed: its next failure starts
    /// over.
    pub(crate) fn work_confirmed(&mut self) {
        self.work_retry = None;
    }

    /// The relay's health at `now`.
    pub(crate) fn health_state(&self, now: Instant, health: &HealthConfig) -> HealthState {
        self.health.state(now, self.link.connected_since(), health)
    }

    /// When the relay's health answers differently next (a retry allowed,
    /// a rate limit over, a connection stable, a failing relay dead), after
    /// `now` (`RelayHealth::poll_timeout`).
    pub(crate) fn health_changes_at(&self, now: Instant, health: &HealthConfig) -> Option<Instant> {
        self.health.poll_timeout(
            now,
            self.link.connected_since(),
            &self.health_config(health),
        )
    }

    /// When the next connection attempt is allowed, while the relay is idle
    /// (not connected, no attempt in flight).
    pub(crate) fn retry_at(&self, health: &HealthConfig) -> Option<Instant> {
        self.is_idle()
            .then(|| self.health.next_attempt_at(&self.health_config(health)))
    }

    // --- Timeouts -----------------------------------------------------------

    /// Fires everything of the session due at `now`
    /// ([`RelaySession::next_deadline`] names each kind), in this order:
    /// the due `since` poll of live filters that do not fit
    /// ([`RelaySession::poll_uncovered`]), what is overdue
    /// ([`RelaySession::expire`]), the retries whose delay is over
    /// ([`RelaySession::run_retries`]), then a connection attempt past its
    /// timeout is given up ([`RelaySession::connect_timed_out`]). What only
    /// the engine can do is returned: `true` when the relay's items are due
    /// to be planned again (the engine holds the targets). Firing early or
    /// twice is harmless: each step checks the state again.
    pub(crate) fn handle_timeout(&mut self, cx: &mut Ctx<'_>, now: Now) -> bool {
        if self.poll_due(now.instant) {
            self.poll_uncovered(cx, now);
        }
        let connect_timed_out = self.connect_timed_out(now.instant);
        self.expire(cx, now);
        let replan = self.run_retries(cx, now);
        if connect_timed_out {
            self.abandon_connect_attempt(cx, now);
        }
        replan
    }

    /// What is overdue on the relay at `now`, in order: REQs it dropped are
    /// resumed ([`RelaySession::stalled_reqs`]; a resumed REQ is progress of
    /// its batch), batches without progress fail
    /// ([`RelaySession::stalled_batches`]) — or the connection is dropped if
    /// the relay is not alive ([`RelaySession::is_alive`],
    /// [`RelaySession::live_unanswered`]) — and unanswered NEG-OPENs are
    /// refusals ([`RelaySession::negentropy_unanswered`]). Nothing without
    /// an open connection.
    fn expire(&mut self, cx: &mut Ctx<'_>, now: Now) {
        for id in self.stalled_reqs(now.instant, cx.config) {
            self.resume_req(cx, now, &id);
        }
        for batch in self.stalled_batches(now.instant, cx.config) {
            if !self.is_alive(now.instant, cx.config) {
                self.drop_silent_connection(cx, now);
            } else {
                self.fail_batch(cx, now, batch, "no progress before the batch timeout");
            }
        }
        if self.live_unanswered(now.instant, cx.config) {
            self.drop_silent_connection(cx, now);
        }
        for id in self.negentropy_unanswered(now.instant, cx.config) {
            self.negentropy_failed(cx, now, &id, NegFailure::Unanswered);
        }
    }

    /// Resumes the stalled REQ `id` where it was
    /// ([`PaginationState::resume_interrupted`](crate::pagination::PaginationState::resume_interrupted);
    /// each filter of a packed
    /// REQ from its current page), counted in
    /// `EngineStats::reqs_resumed`; a batch whose REQs were resumed
    /// [`Timeouts::req_resume_attempts`] times without hearing anything
    /// since fails.
    fn resume_req(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        let Some(batch) = sub.batch() else {
            return;
        };
        let Some(mut jobs) = sub.resume_jobs() else {
            return;
        };
        let attempts = cx.config.timeouts.req_resume_attempts;
        let Some(may_resume) = self.batches.resume(batch, attempts) else {
            // No batch to resume for (cannot happen: a batch ends with its
            // subscriptions): close it rather than wake for it forever.
            if let Some(sub) = self.link.conn_mut().and_then(|conn| conn.take_sub(id)) {
                self.send_close(cx, id.clone(), &sub);
            }
            return;
        };
        if !may_resume {
            self.fail_batch(cx, now, batch, "a REQ resumed without an answer");
            return;
        }
        cx.events.push(Noted::ReqResumed);
        debug!(relay = %cx.relay, %id, %batch, "REQ dropped by the relay without EOSE; resuming it where it was");
        self.unsubscribe(cx, id);
        let first = jobs.remove(0);
        self.replace_job(id, first, now.instant);
        if !jobs.is_empty() {
            self.add_jobs(batch, jobs);
        }
    }

    /// Runs the retries whose delay is over, while connected: Layer 1
    /// again, the live subscriptions rebuilt. `true` if the relay's items
    /// are due to be planned again (by the engine, which holds the targets).
    fn run_retries(&mut self, cx: &mut Ctx<'_>, now: Now) -> bool {
        let replan = self.timers.fire(RelayTimer::Replan, now.instant);
        let layer1 = self.timers.fire(RelayTimer::Layer1Retry, now.instant);
        let live = self.timers.fire(RelayTimer::RebuildLive, now.instant);
        if !self.is_connected() {
            return false;
        }
        if layer1 {
            self.start_layer1(cx, now, None);
        }
        if live {
            self.rebuild_live(cx, now, &PendingItems::default());
        }
        replan
    }

    // --- Stalls and silence --------------------------------------------------

    /// The historic REQs the relay dropped by now
    /// ([`RelayConn::req_stalls_at`]).
    pub(crate) fn stalled_reqs(&self, now: Instant, config: &EngineConfig) -> Vec<SubscriptionId> {
        self.link
            .conn()
            .map(|conn| conn.stalled_reqs(now, config))
            .unwrap_or_default()
    }

    /// The batches with a running job that stalled by now
    /// ([`RelaySession::batch_stalls_at`]).
    pub(crate) fn stalled_batches(&self, now: Instant, config: &EngineConfig) -> Vec<BatchId> {
        self.batches
            .iter()
            .filter(|(_, info)| self.batch_stalls_at(info, config) <= now)
            .filter(|(batch, _)| self.has_running_job(*batch))
            .map(|(batch, _)| batch)
            .collect()
    }

    /// `true` while the connection is open and the relay sent something (a
    /// frame, a pong) within the batch timeout before `now`
    /// ([`Liveness::is_alive`](super::liveness::Liveness::is_alive)); `false` for a relay silent that long — or
    /// not connected.
    pub(crate) fn is_alive(&self, now: Instant, config: &EngineConfig) -> bool {
        self.link
            .conn()
            .is_some_and(|conn| conn.is_alive(now, config))
    }

    /// `true` if the connected relay is not alive
    /// ([`RelaySession::is_alive`]) while a live subscription opened a batch
    /// timeout ago has not been answered: a half-open socket. A driver that
    /// pings keeps a relay that answers from ever getting here, EOSE or not.
    pub(crate) fn live_unanswered(&self, now: Instant, config: &EngineConfig) -> bool {
        self.live_unanswered_at(config).is_some_and(|at| at <= now)
    }

    /// When [`RelaySession::live_unanswered`] turns true if nothing comes:
    /// a batch timeout after the oldest unanswered live subscription opened,
    /// and not before the relay counts as silent
    /// ([`Liveness::silent_at`](super::liveness::Liveness::silent_at)).
    /// `None` without such a subscription.
    fn live_unanswered_at(&self, config: &EngineConfig) -> Option<Instant> {
        self.link.conn()?.live_unanswered_at(config)
    }

    /// The NIP-77 sessions whose NEG-OPEN the relay has not answered within
    /// [`Timeouts::negentropy_timeout`].
    pub(crate) fn negentropy_unanswered(
        &self,
        now: Instant,
        config: &EngineConfig,
    ) -> Vec<SubscriptionId> {
        let Some(conn) = self.link.conn() else {
            return Vec::new();
        };
        conn.negentropy_unanswered()
            .filter(|(_, opened_at)| *opened_at + config.timeouts.negentropy_timeout <= now)
            .map(|(id, _)| id.clone())
            .collect()
    }

    // --- The session's next deadline -----------------------------------------

    /// When the session next has work for [`RelaySession::handle_timeout`]
    /// (or for the engine's `connect_ready_relays`, when its health
    /// changes), and which [`Deadline`] it is: the earliest of its timers,
    /// its health (when its `RelayHealth`'s answer changes next), its
    /// negentropy and batch timeouts, its stalled REQs, its unanswered live
    /// subscriptions and its rate window, as of `now`.
    pub(crate) fn next_deadline(
        &self,
        now: Instant,
        config: &EngineConfig,
    ) -> Option<(Deadline, Instant)> {
        // The earliest so far (asked after every input of the relay: no
        // list of them is built).
        let mut earliest = Earliest::default();
        if let Some((timer, at)) = self.timers.earliest_entry() {
            earliest.consider(timer.into(), Some(at));
        }
        earliest.consider(
            Deadline::Health,
            self.health_changes_at(now, &config.health),
        );
        earliest.consider(Deadline::ConnectTimeout, self.link.connect_deadline());
        earliest.consider(Deadline::LiveUnanswered, self.live_unanswered_at(config));
        if let Some(conn) = self.link.conn() {
            earliest.consider(Deadline::NegentropyUnanswered, conn.next_deadline(config));
            if !conn.is_quiet() && self.learned.rate().is_some() {
                earliest.consider(
                    Deadline::RateWindow,
                    conn.rate_window_frees_at(now, config.rate_window()),
                );
            }
            for sub in conn.subscriptions() {
                if let Some(watch) = sub.watch() {
                    earliest.consider(Deadline::ReqStall, conn.req_stalls_at(watch, config));
                }
                // An unanswered live subscription is not a batch's
                // (`live_unanswered_at` above).
                if sub.live_unanswered_since().is_none() {
                    earliest.consider(
                        Deadline::BatchStall,
                        sub.batch()
                            .and_then(|batch| self.batches.get(batch))
                            .map(|info| self.batch_stalls_at(info, config)),
                    );
                }
            }
        }
        earliest.get()
    }
}

/// What a refusal taught ([`RelaySession::learn_from_refusal`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lesson {
    /// The subscription limit was lowered to this.
    pub(crate) subscription_limit: Option<usize>,
    /// The rate-limit cooldown started or was extended.
    pub(crate) cooldown: bool,
    /// A `rate-limited:` refusal (the rate is halved the first time in its
    /// episode).
    pub(crate) rate_refused: bool,
}

impl Lesson {
    /// `true` when the refused subscription should simply be retried later.
    pub(crate) fn retry(&self) -> bool {
        self.cooldown
    }
}

/// What a session's handlers are given besides the session: its relay's
/// URL, the configuration, and the parts of the engine that span relays
/// and that one relay's work reads or adds to — the outbox, the counters,
/// the store tracker (an event is stored once, whichever relay sent it) and
/// the repository index.
pub(crate) struct Ctx<'a> {
    /// The session's relay.
    pub(crate) relay: &'a RelayUrl,
    /// The engine's configuration.
    pub(crate) config: &'a EngineConfig,
    /// Where commands go.
    pub(crate) out: &'a mut Outbox,
    /// What the session tells the engine happened ([`SessionEvent`]).
    pub(crate) events: &'a mut SessionEvents,
    /// Every event between `Command::Store` and the store's answer.
    pub(crate) stores: &'a mut StoreTracker,
    /// The repositories we sync (a confirmation counts only theirs).
    pub(crate) repos: &'a RepoSyncIndex,
    /// `true` if announcements are discovered on this relay (Layer 1): a
    /// bootstrap relay or one an announcement lists, not one reached only
    /// through Sync+ (`SyncEngine::discovers`).
    pub(crate) discovers: bool,
}

impl Ctx<'_> {
    /// `false` while the store falls behind: new historic jobs and next
    /// pages wait (backpressure).
    pub(crate) fn store_keeps_up(&self) -> bool {
        self.stores.keeps_up(self.config)
    }
}

/// An EVENT as it reaches the session: verified by the driver, or not yet.
#[derive(Debug)]
pub(crate) enum Arrived {
    /// From a plain `RelayMessage`: verified here if it matches.
    Unchecked(nostr::prelude::Event),
    /// Verified by the driver.
    Verified(VerifiedEvent),
}

impl Arrived {
    fn event(&self) -> &nostr::prelude::Event {
        match self {
            Arrived::Unchecked(event) => event,
            Arrived::Verified(event) => event,
        }
    }
}

/// Counts and logs what a refusal taught.
fn note_lesson(cx: &mut Ctx<'_>, lesson: Lesson) {
    let relay = cx.relay;
    if let Some(limit) = lesson.subscription_limit {
        cx.events.push(Noted::SubscriptionRefused);
        warn!(%relay, limit, "relay refused a subscription; lowering its subscription limit");
    }
    if lesson.cooldown {
        cx.events.push(Noted::RateLimited);
        info!(%relay, cooldown = ?cx.config.health.rate_limit_cooldown, "relay rate limited");
    }
    if lesson.rate_refused {
        warn!(%relay, "rate-limited by relay; pausing new subscriptions for the cooldown");
    }
}

/// Notes an input that does not fit the session's state (counted by the
/// engine) and logs it at `debug`.
fn ignored(cx: &mut Ctx<'_>, what: &str) {
    cx.events.push(Noted::InputIgnored);
    debug!(relay = %cx.relay, what, "input ignored in the current state");
}

/// Counts an event from `relay` refused before it could be stored, and
/// logs it at `debug` (a relay sending many is logged once, when it is cut
/// off: [`RelaySession::refuse`]).
pub(crate) fn count_refused(events: &mut SessionEvents, relay: &RelayUrl, refused: &Refused) {
    events.push(Noted::Dropped(Dropped::of(refused)));
    debug!(%relay, %refused, "dropped event");
}

#[cfg(test)]
mod tests;
