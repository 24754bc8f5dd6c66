//! [`SyncEngine`]: what spans relays — the repository index and its relay
//! targets (planning), the store tracker, the own relay, which Layer 1
//! events are ours, the caps — and the routing of every input to the
//! session of its relay ([`RelaySession`]), which holds everything about
//! that relay. The driving contract is in the [module documentation](super).

use std::borrow::Borrow;
use std::collections::HashSet;

use indexmap::IndexSet;
use nostr::prelude::{
    Event, EventId, Kind, PublicKey, RelayMessage, RelayUrl, SubscriptionId, Timestamp,
};
use tracing::{debug, info, warn};

use super::admission::{LeftOut, RelayAdmission};
use super::config::Jitter;
use super::deadlines::DeadlineTable;
use super::held::{announced_repo, HeldRepos};
use super::log_tally::CapLogs;
use super::ours::{identifier, Layer1Verdict, Ours};
use super::outbox::Outbox;
use super::own_relay::OwnRelay;
use super::relay_session::{count_refused, Arrived, Ctx, NegFailure, RelaySession};
use super::relays::Relays;
use super::session_events::{Reached, SessionEvent, SessionEvents};
use super::stats::{HeldBytes, SyncPlusCounts};
use super::stores::{Answered, Handover, StoreTracker};
use super::sync_plus::{Joined, RepoRelays, Role};
use super::timer_table::{EngineTimer, TimerTable};
use super::{
    Command, ConfigError, EngineConfig, EngineStats, RelayActivity, RelayLimits, RelayPhase,
    RelayReport, StoreVerdict, SyncReasons,
};
use crate::clock::{Instant, Now};
use crate::health::{HealthCounts, HealthState, RelayHealth};
use crate::model::RelayProgress;
use crate::model::{BatchId, ConnectionStatus, PendingBatch, PendingItems, RelayState, SyncMethod};
use crate::nip34::{
    conversation_refs, is_conversation_kind, is_relay_list_kind, is_root_kind, parse_announcement,
    replaces, root_event_repo_refs, RepoRef, KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE,
};
use crate::planner::{compute_actions_for_changes, compute_actions_for_relay, RepoSyncIndex};
use crate::screen::Refused;
use crate::store::{IngestOutcome, StoreError};
use crate::transport::TransportError;
use crate::verified::VerifiedEvent;

/// The sync engine. See the [module documentation](super) for the driving
/// contract.
///
/// ```
/// use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
/// use grasp_sync_core::{Instant, Now};
/// use nostr::prelude::{RelayUrl, Timestamp};
///
/// let start = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
/// let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
/// let mut config = EngineConfig::default();
/// config.identity.bootstrap_relays = vec![relay.clone()];
/// let mut engine = SyncEngine::new(config, start).expect("a valid configuration");
/// engine.handle_timeout(start);
/// // The bootstrap relay is connected first.
/// assert!(matches!(
///     engine.poll_command(),
///     Some(Command::Connect { relay: r, .. }) if r == relay
/// ));
/// engine.handle_connected(start, &relay);
/// // Layer 1: announcements live and their history.
/// let mut subscriptions = 0;
/// while let Some(command) = engine.poll_command() {
///     if matches!(command, Command::Subscribe { .. } | Command::QueryLocalItems { .. }) {
///         subscriptions += 1;
///     }
/// }
/// assert!(subscriptions >= 2);
/// assert!(!engine.is_idle(), "historic sync has only started");
/// ```
#[derive(Debug)]
pub struct SyncEngine {
    config: EngineConfig,
    repos: RepoSyncIndex,
    /// Each repository's relays: announced, and those Sync+ adds
    /// (GRASP-03), with the participants and their relay lists.
    repo_relays: RepoRelays,
    /// Every relay's session: what we learned, its connection, its timers.
    relays: Relays,
    /// The own relay's session: the self-subscriber's connection, its
    /// history read and batch ([`OwnRelay`]: a `RelaySession` in the own role).
    own: OwnRelay,
    /// Which Layer 1 events are ours to store, and those waiting to be.
    ours: Ours,
    stores: StoreTracker,
    /// Repositories the host holds until their git data arrives: synced by
    /// Layer 1 only until promoted ([`SyncEngine::handle_repository_held`]).
    held: HeldRepos,
    /// Each relay's next deadline (timers as data).
    deadlines: DeadlineTable,
    /// Relay URLs the policy refused (warned about once each).
    refused_relays: std::collections::HashSet<RelayUrl>,
    /// Relay admission under the caps: the slots, the relays waiting for
    /// one, the relays that yielded theirs ([`RelayAdmission`]).
    admission: RelayAdmission,
    /// What the sessions told of the input being handled, not taken yet
    /// ([`SyncEngine::absorb`]).
    events: SessionEvents,
    /// What those events reached beyond their relay, not acted on yet.
    reached: Reached,
    /// When the caps' routine refusals are logged (the first and every
    /// thousandth).
    cap_logs: CapLogs,
    /// The commands for the driver, the ids handed out, the latest `now`.
    out: Outbox,
    /// The engine's own timers: the daily re-sync, the disconnect check, the
    /// self-subscriber's batch window.
    timers: TimerTable<EngineTimer>,
    jitter: Jitter,
    stats: EngineStats,
}

impl SyncEngine {
    /// A new engine; bootstrap relays are registered and connect on the
    /// first [`SyncEngine::handle_timeout`]. A configuration that
    /// [`EngineConfig::validate`] refuses is an error here, at start.
    pub fn new(config: EngineConfig, now: Now) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut jitter = Jitter::new(config.seed);
        let mut timers = TimerTable::default();
        timers.set(
            EngineTimer::Daily,
            now.instant + jitter.between(config.timeouts.daily_min, config.timeouts.daily_max),
        );
        timers.set(
            EngineTimer::DisconnectCheck,
            now.instant + config.timeouts.disconnect_check_interval,
        );
        if config.sync_plus.enabled {
            timers.set(
                EngineTimer::SyncPlusPass,
                now.instant + config.sync_plus.pass_interval,
            );
        }
        let own = OwnRelay::new(config.identity.own_relay.clone());
        let mut engine = SyncEngine {
            repos: RepoSyncIndex::new(),
            repo_relays: RepoRelays::new(&config.sync_plus),
            relays: Relays::default(),
            own,
            ours: Ours::default(),
            stores: StoreTracker::default(),
            held: HeldRepos::default(),
            deadlines: DeadlineTable::default(),
            refused_relays: Default::default(),
            admission: RelayAdmission::default(),
            events: SessionEvents::default(),
            reached: Reached::default(),
            cap_logs: CapLogs::default(),
            out: Outbox::new(now.instant),
            timers,
            jitter,
            stats: EngineStats::default(),
            config,
        };
        for relay in engine.config.identity.bootstrap_relays.clone() {
            if engine.own.is_for(&relay) {
                tracing::warn!(%relay, "the own relay is not synced from as a bootstrap relay");
                continue;
            }
            engine.register_relay(relay, true);
        }
        for relay in engine.repo_relays.index_relays().to_vec() {
            if engine.own.is_for(&relay) {
                tracing::warn!(%relay, "the own relay is not read as an index relay");
                continue;
            }
            engine.register_relay(relay, false);
        }
        Ok(engine)
    }

    /// The configuration in use.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Counters of accepted and dropped events, batches, refusals.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// What we want to sync: repositories, their relays and root events.
    pub fn repo_index(&self) -> &RepoSyncIndex {
        &self.repos
    }

    /// Every tracked relay with what it confirmed (the spec's
    /// `RelaySyncIndex`), in the order first met.
    pub fn relay_states(&self) -> impl Iterator<Item = (&RelayUrl, &RelayState)> {
        self.relays.tracked()
    }

    /// What `relay` confirmed, if it is tracked.
    pub fn relay_state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.relays.state(relay)
    }

    /// `true` while `relay`'s connection is open (the own relay's
    /// connection is not a relay the engine syncs from: `false`).
    pub fn is_connected(&self, relay: &RelayUrl) -> bool {
        self.relays.is_connected(relay)
    }

    /// `relay`'s batches in flight (its part of the spec's
    /// `PendingSyncIndex`), oldest first.
    pub fn pending_batches<'a>(
        &'a self,
        relay: &RelayUrl,
    ) -> impl ExactSizeIterator<Item = &'a PendingBatch> + 'a {
        self.relays.view(relay).pending_batches()
    }

    /// Where `relay` stands between its connection and historic sync
    /// confirmed ([`RelayPhase`]); a relay the engine does not track is
    /// only connected or not.
    pub fn relay_phase(&self, relay: &RelayUrl) -> RelayPhase {
        let session = self.relays.view(relay);
        match session.connection_status() {
            ConnectionStatus::Disconnected => RelayPhase::Disconnected,
            ConnectionStatus::Connecting => RelayPhase::Connecting,
            ConnectionStatus::Connected => match self.relays.state(relay) {
                Some(state) if self.relay_confirmed(relay, state) => RelayPhase::Synced,
                _ if session.work_failing() => RelayPhase::SyncFailed,
                _ => RelayPhase::Syncing,
            },
        }
    }

    /// The connection health of `relay`, if the engine knows it.
    pub fn relay_health(&self, relay: &RelayUrl) -> Option<&RelayHealth> {
        self.relays.get(relay).map(RelaySession::health)
    }

    /// The health state of `relay` at `now`; an unknown relay is
    /// [`HealthState::Disconnected`].
    pub fn health_state(&self, relay: &RelayUrl, now: Instant) -> HealthState {
        self.relays
            .view(relay)
            .health_state(now, &self.config.health)
    }

    /// How many tracked relays are in each health state at `now`, for the
    /// summary metrics.
    pub fn health_counts(&self, now: Instant) -> HealthCounts {
        let mut counts = HealthCounts::default();
        for (relay, _) in self.relays.tracked() {
            let session = self.relays.view(relay);
            let state = session.health_state(now, &self.config.health);
            counts.add(state, session.is_connected());
        }
        counts
    }

    /// The next command for the driver, oldest first.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop()
    }

    /// `true` when every registered relay is connected and confirmed,
    /// nothing is pending, queued or waiting for the store: historic sync is
    /// confirmed everywhere, no relay left out as unreachable. It asks what
    /// [`SyncEngine::historic_sync_complete`] asks
    /// (`SyncEngine::historic_sync_confirmed`), made strict: no relay left
    /// out as unreachable, the own relay's history not asked, and no batch
    /// and no queued work on any relay, tracked or not.
    pub fn is_idle(&self) -> bool {
        self.historic_sync_confirmed(false) && self.relays.all_quiet()
    }

    /// A relay's NIP-11 limits.
    pub fn handle_relay_limits(&mut self, now: Now, relay: &RelayUrl, limits: RelayLimits) {
        self.route(now, relay, Input::Limits(limits));
    }

    /// The store's answer to [`Command::QueryLocalItems`]
    /// (`RelaySession::on_local_items`).
    pub fn handle_local_items(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        items: Vec<(EventId, Timestamp)>,
    ) {
        self.observe(now);
        if let Some((session, mut cx)) = self.session(relay) {
            session.on_local_items(&mut cx, now, id, items);
        }
        self.maintain(now);
    }

    /// The store could not answer [`Command::QueryLocalItems`]: the filter
    /// is synced by REQ instead (never by negentropy from an empty set, which
    /// would download everything the relay has as if we held nothing).
    pub fn handle_local_items_failed(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        reason: &str,
    ) {
        self.observe(now);
        if let Some((session, mut cx)) = self.session(relay) {
            let failure = NegFailure::StoreCannotList(reason);
            session.negentropy_failed(&mut cx, now, id, failure);
        }
        self.maintain(now);
    }

    /// A message from a relay.
    pub fn handle_relay_message(&mut self, now: Now, relay: &RelayUrl, message: RelayMessage<'_>) {
        self.route(now, relay, Input::Message(message));
    }

    /// An `EVENT` from a relay that the driver verified already (or found
    /// forged) — e.g. in parallel on its own threads: the engine does not
    /// verify it again. Same as passing the `EVENT` to
    /// [`SyncEngine::handle_relay_message`] otherwise.
    pub fn handle_checked_event<E: Into<Refused>>(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, E>,
    ) {
        self.handle_checked_events(now, relay, [(subscription_id, checked)]);
    }

    /// Several `EVENT`s from one relay, in the order they arrived, each as
    /// [`SyncEngine::handle_checked_event`] takes it: what the relay's
    /// session does next (its next request, its deadline) is worked out
    /// once, after the last of them, instead of after each.
    ///
    /// A driver that screens events before their signature
    /// ([`crate::screen`]) passes what it refused as the error
    /// ([`Refused`]): it is counted like the engine's own refusals, and
    /// toward the relay's [`Caps::max_bad_events`](super::Caps::max_bad_events).
    pub fn handle_checked_events<S, E, I>(&mut self, now: Now, relay: &RelayUrl, events: I)
    where
        S: Borrow<SubscriptionId>,
        E: Into<Refused>,
        I: IntoIterator<Item = (S, Result<VerifiedEvent, E>)>,
    {
        let mut events = events
            .into_iter()
            .map(|(subscription_id, checked)| (subscription_id, checked.map_err(Into::into)));
        self.route(now, relay, RelayInput::CheckedEvents(&mut events));
    }

    /// An event from `relay` the driver refused before it could be parsed
    /// (an `EVENT` frame over the event size limit): counted and logged like
    /// the engine's own refusals, and toward the relay's
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events).
    pub fn handle_refused_event(&mut self, now: Now, relay: &RelayUrl, refused: Refused) {
        self.route(now, relay, Input::Refused(refused));
    }

    /// A refused event from a remote relay ([`SyncEngine::handle_refused_event`]).
    fn on_refused_event(&mut self, now: Now, relay: &RelayUrl, refused: Refused) {
        let Some((session, mut cx)) = self.connected_session(relay) else {
            return self.ignored(relay, "message from a relay not connected");
        };
        session.heard(now.instant, None);
        session.refuse(&mut cx, now, refused);
        self.maintain_after(now, Some(relay));
    }

    /// A message from `relay` over the driver's size limit ended its
    /// connection (a WebSocket message larger than the driver reads): it is
    /// counted in [`EngineStats::dropped_oversized`](super::EngineStats::dropped_oversized)
    /// and logged, and the connection counts as failed, so the relay is
    /// connected again only after its backoff, which grows each time (a
    /// relay answering our request with the same oversized message is not
    /// asked again at once, forever). No `handle_disconnected` is needed
    /// after it.
    pub fn handle_message_too_large(&mut self, now: Now, relay: &RelayUrl, bytes: usize) {
        self.route(now, relay, Input::TooLarge(bytes));
    }

    /// An oversized message from a remote relay
    /// ([`SyncEngine::handle_message_too_large`]).
    fn on_message_too_large(&mut self, now: Now, relay: &RelayUrl, bytes: usize) {
        let connected = self.relays.is_connected(relay);
        match self.session(relay) {
            Some((session, mut cx)) if connected => session.message_too_large(&mut cx, now, bytes),
            _ => return self.on_disconnected(now, relay),
        }
        self.maintain_after(now, Some(relay));
    }

    /// Timers: the self-subscriber batch window and connection, the
    /// store's retries, each relay whose deadline is due (its session fires
    /// its own timers: connect timeout, polls, batch, REQ, negentropy and
    /// live timeouts, delayed re-planning and retries; its health's
    /// reconnect and rate-limit recovery are then `maintain`'s), the daily
    /// re-sync and the check for relays to drop.
    pub fn handle_timeout(&mut self, now: Now) {
        self.observe(now);
        if self.timers.is_due(EngineTimer::OwnBatch, now.instant) {
            self.process_own_batch(now);
        }
        self.run_store_timers(now);
        self.run_due_sessions(now);
        if self.timers.fire(EngineTimer::Daily, now.instant) {
            self.daily_sync(now);
            let next = self.jitter.between(
                self.config.timeouts.daily_min,
                self.config.timeouts.daily_max,
            );
            self.timers.set(EngineTimer::Daily, now.instant + next);
        }
        if self.timers.fire(EngineTimer::SyncPlusPass, now.instant) {
            self.sync_plus_pass(now);
            let next = now.instant + self.config.sync_plus.pass_interval;
            self.timers.set(EngineTimer::SyncPlusPass, next);
        }
        if self.timers.fire(EngineTimer::DisconnectCheck, now.instant) {
            self.check_disconnects(now.instant);
            let next = now.instant + self.config.timeouts.disconnect_check_interval;
            self.timers.set(EngineTimer::DisconnectCheck, next);
        }
        self.maintain(now);
        self.own_timeout(now);
    }

    /// The next instant [`SyncEngine::handle_timeout`] has work to do: the
    /// earliest of the engine's own timers and the relays' deadline table
    /// (no scan over relays, subscriptions or batches).
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.timers.earliest(),
            self.own.next_deadline(self.last_now(), &self.config),
            self.stores
                .next_deadline(self.config.timeouts.store_timeout),
            self.deadlines.first(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Counts and logs an input that does not fit the state.
    fn ignored(&mut self, relay: &RelayUrl, what: &str) {
        self.stats.inputs_ignored += 1;
        tracing::debug!(%relay, what, "input ignored in the current state");
    }

    /// Emits `command`; a command for a relay with a session goes through
    /// the session's bookkeeping ([`RelaySession::send`]).
    fn emit(&mut self, command: Command) {
        match self.relays.get_mut(command.relay()) {
            Some(session) => session.send(&mut self.out, command),
            None => self.out.push(command),
        }
    }

    /// Records the time of an input, so commands emitted while handling it
    /// are stamped with it.
    fn observe(&mut self, now: Now) {
        self.out.observe(now);
    }

    /// The latest `now` seen, for deadlines computed without an input.
    fn last_now(&self) -> Instant {
        self.out.now()
    }

    // --- Routing: each relay's input to its session -------------------------

    /// The one place an input on a relay's connection is routed: to the
    /// own relay's session (a `RelaySession` in the own role, held by
    /// [`OwnRelay`]) if `relay` is the own relay
    /// connection's URL, else to the remote relay's handling.
    fn route<S: Borrow<SubscriptionId>>(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        input: RelayInput<'_, S>,
    ) {
        self.observe(now);
        if self.own.is_for(relay) {
            self.on_own_input(now, relay, input);
        } else {
            self.on_remote_input(now, relay, input);
        }
    }

    /// An input on a remote relay's connection.
    fn on_remote_input<S: Borrow<SubscriptionId>>(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        input: RelayInput<'_, S>,
    ) {
        match input {
            RelayInput::Connected => self.on_connected(now, relay),
            RelayInput::ConnectFailed => self.on_connect_failed(now, relay),
            RelayInput::Disconnected => self.on_disconnected(now, relay),
            RelayInput::Alive => self.on_alive(now, relay),
            RelayInput::Limits(limits) => {
                self.relays.entry(relay.clone()).set_limits(limits);
                self.maintain(now);
            }
            RelayInput::Message(message) => {
                self.on_relay_message(now, relay, message);
                self.maintain_after(now, Some(relay));
            }
            RelayInput::CheckedEvents(events) => {
                for (subscription_id, checked) in events {
                    self.on_checked_event(now, relay, subscription_id.borrow(), checked);
                }
                self.maintain_after(now, Some(relay));
            }
            RelayInput::Refused(refused) => self.on_refused_event(now, relay, refused),
            RelayInput::TooLarge(bytes) => self.on_message_too_large(now, relay, bytes),
            RelayInput::SendFailed(error) => self.on_send_failed(now, relay, error),
        }
    }

    /// An input on the own relay's connection, for its session; the
    /// engine acts on the session events it queued
    /// ([`SyncEngine::maintain_after`]). Its NIP-11 limits and pongs change
    /// nothing.
    fn on_own_input<S: Borrow<SubscriptionId>>(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        input: RelayInput<'_, S>,
    ) {
        let (_, own, mut cx) = self.split(relay);
        let Some(session) = own.session_mut() else {
            return;
        };
        match input {
            RelayInput::Message(message) => session.on_own_message(&mut cx, now, message),
            RelayInput::CheckedEvents(events) => {
                for (id, checked) in events {
                    session.on_own_checked_event(&mut cx, id.borrow(), checked);
                }
            }
            RelayInput::Connected => {
                session.on_connected(&mut cx, now);
            }
            RelayInput::ConnectFailed => session.on_connect_failed(&mut cx, now),
            RelayInput::Disconnected => session.on_disconnected(&mut cx, now),
            RelayInput::Refused(refused) => count_refused(cx.events, cx.relay, &refused),
            RelayInput::TooLarge(bytes) => session.message_too_large(&mut cx, now, bytes),
            RelayInput::SendFailed(error) => session.on_send_failed(&mut cx, now, error),
            RelayInput::Alive | RelayInput::Limits(_) => {}
        }
        self.maintain_after(now, None);
    }

    /// `relay`'s session with what its handlers are given ([`Ctx`]), if the
    /// engine knows the relay.
    fn session<'a>(&'a mut self, relay: &'a RelayUrl) -> Option<(&'a mut RelaySession, Ctx<'a>)> {
        let (relays, _, cx) = self.split(relay);
        Some((relays.get_mut(relay)?, cx))
    }

    /// The engine borrowed apart for a handler of `relay`: the relays, the
    /// own relay's session, and what a session's handlers are given
    /// ([`Ctx`]).
    fn split<'a>(&'a mut self, relay: &'a RelayUrl) -> (&'a mut Relays, &'a mut OwnRelay, Ctx<'a>) {
        let discovers = self.discovers(relay);
        let cx = Ctx {
            relay,
            config: &self.config,
            out: &mut self.out,
            events: &mut self.events,
            stores: &mut self.stores,
            repos: &self.repos,
            discovers,
        };
        (&mut self.relays, &mut self.own, cx)
    }

    /// `relay`'s session with its [`Ctx`] while its connection is open; an
    /// input for a relay not connected is counted as ignored.
    fn connected_session<'a>(
        &'a mut self,
        relay: &'a RelayUrl,
    ) -> Option<(&'a mut RelaySession, Ctx<'a>)> {
        let connected = self.relays.is_connected(relay);
        if !connected {
            self.ignored(relay, "message from a relay not connected");
            return None;
        }
        self.session(relay)
    }

    /// A relay message: EVENTs are admitted by the session and stored here
    /// (the store spans relays); the rest is the session's, which notes the
    /// subscription it answers ([`RelaySession::on_message`]).
    fn on_relay_message(&mut self, now: Now, relay: &RelayUrl, message: RelayMessage<'_>) {
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => self.on_event(
                now,
                relay,
                &subscription_id,
                Arrived::Unchecked(event.into_owned()),
            ),
            message => {
                if let Some((session, mut cx)) = self.connected_session(relay) {
                    session.on_message(&mut cx, now, message);
                }
            }
        }
    }

    /// An EVENT the driver verified already (or found forged).
    fn on_checked_event(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Refused>,
    ) {
        match checked {
            Ok(event) => self.on_event(now, relay, subscription_id, Arrived::Verified(event)),
            Err(refused) => {
                if let Some((session, mut cx)) = self.connected_session(relay) {
                    session.heard(now.instant, Some(subscription_id));
                    session.refuse(&mut cx, now, refused);
                }
            }
        }
    }

    /// An EVENT on `relay`'s subscription `id`: stored if the session admits
    /// it ([`RelaySession::admit`]: it matches the subscription and
    /// verifies) and it is ours ([`SyncEngine::admit_ours`]).
    fn on_event(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId, arrived: Arrived) {
        let Some((session, mut cx)) = self.connected_session(relay) else {
            return;
        };
        let Some((event, batch)) = session.admit(&mut cx, now, id, arrived) else {
            return;
        };
        self.store_if_ours(now, relay, event, batch);
    }

    /// Stores a verified event from `relay` if it is ours
    /// ([`SyncEngine::admit_ours`]); an announcement of ours goes to the
    /// store before the candidates it lets through
    /// ([`SyncEngine::accept_ours`]), so they find it there.
    fn store_if_ours(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        event: VerifiedEvent,
        batch: Option<BatchId>,
    ) {
        if !self.admit_ours(relay, &event) {
            return;
        }
        let lets_through = (event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT)
            && !self.config.identity.service_relays.is_empty())
        .then(|| event.event().clone());
        self.store(now, relay, event, batch);
        if let Some(announcement) = lets_through {
            self.accept_ours(now, &announcement);
        }
    }

    /// Runs `relay`'s session's pump ([`RelaySession::pump`]).
    fn pump(&mut self, now: Now, relay: &RelayUrl) {
        if let Some((session, mut cx)) = self.session(relay) {
            session.pump(&mut cx, now);
        }
    }

    // --- Connections ---------------------------------------------------------

    /// Starts tracking `relay` (bootstrap relays are never dropped).
    fn register_relay(&mut self, relay: RelayUrl, is_bootstrap: bool) {
        if self.relays.register(relay, is_bootstrap) {
            self.reached.others = true;
        }
    }

    /// Asks each relay's session to connect if its backoff allows
    /// ([`RelaySession::connect_if_due`]).
    fn connect_ready_relays(&mut self, now: Now) {
        let health = &self.config.health;
        let relays: Vec<RelayUrl> = self
            .relays
            .urls()
            .filter(|relay| {
                self.relays
                    .get(relay)
                    .is_some_and(|session| session.should_connect(now.instant, health))
            })
            .cloned()
            .collect();
        for relay in relays {
            if let Some((session, mut cx)) = self.session(&relay) {
                session.connect_if_due(&mut cx, now.instant);
            }
        }
    }

    /// A connection attempt failed.
    pub fn handle_connect_failed(&mut self, now: Now, relay: &RelayUrl) {
        self.route(now, relay, Input::ConnectFailed);
    }

    /// A remote relay's connection attempt failed
    /// ([`RelaySession::on_connect_failed`]).
    fn on_connect_failed(&mut self, now: Now, relay: &RelayUrl) {
        match self.session(relay) {
            Some((session, mut cx)) => session.on_connect_failed(&mut cx, now),
            None => self.ignored(relay, "connect failure without an attempt"),
        }
        self.maintain(now);
    }

    /// A connection opened: fresh start on a first connect or after a long
    /// outage, quick reconnect after a short one
    /// (`RelaySession::connected` tells which), then new items planned.
    pub fn handle_connected(&mut self, now: Now, relay: &RelayUrl) {
        self.route(now, relay, Input::Connected);
    }

    /// A remote relay's connection opened ([`SyncEngine::handle_connected`]):
    /// its session starts ([`RelaySession::on_connected`]), then the
    /// engine plans its items.
    fn on_connected(&mut self, now: Now, relay: &RelayUrl) {
        let opened = match self.session(relay) {
            Some((session, mut cx)) => session.on_connected(&mut cx, now),
            None => {
                self.ignored(relay, "connected to a relay not tracked");
                self.emit(Command::Disconnect {
                    relay: relay.clone(),
                });
                false
            }
        };
        if opened {
            self.plan_relay(now, relay);
        }
        self.maintain(now);
    }

    /// The connection dropped. Pending batches are cleared; confirmed state
    /// is kept for a quick reconnect
    /// (`RelaySession::connection_closed`).
    pub fn handle_disconnected(&mut self, now: Now, relay: &RelayUrl) {
        self.route(now, relay, Input::Disconnected);
    }

    /// A remote relay's connection dropped
    /// ([`SyncEngine::handle_disconnected`], [`RelaySession::on_disconnected`]).
    fn on_disconnected(&mut self, now: Now, relay: &RelayUrl) {
        match self.session(relay) {
            Some((session, mut cx)) => session.on_disconnected(&mut cx, now),
            None => self.ignored(relay, "disconnected while not connected"),
        }
        self.maintain(now);
    }

    /// A sign of life from `relay` that is not a relay message: a WebSocket
    /// pong to the driver's ping. A relay is alive while it sends anything
    /// (a frame, or this): one that never answers a live `limit: 0` REQ
    /// with an EOSE (nostr-rs-relay) is not taken for silent and reconnected
    /// while it answers pings. It is no progress of any batch. Drivers that
    /// can ping should do so at least every
    /// [`EngineConfig::liveness_probe_interval`].
    pub fn handle_relay_alive(&mut self, now: Now, relay: &RelayUrl) {
        self.route(now, relay, Input::Alive);
    }

    /// A sign of life from a remote relay ([`SyncEngine::handle_relay_alive`]).
    fn on_alive(&mut self, now: Now, relay: &RelayUrl) {
        match self.relays.connected_mut(relay) {
            Some(session) => session.heard(now.instant, None),
            None => self.ignored(relay, "sign of life from a relay not connected"),
        }
        self.maintain_after(now, Some(relay));
    }

    /// The daily full re-sync of every connected relay.
    fn daily_sync(&mut self, now: Now) {
        // The re-sync compares with the store itself: what it lost (a
        // deletion, a restore) is stored again.
        self.stores.forget_lately();
        let connected: Vec<RelayUrl> = self.relays.connected().cloned().collect();
        for relay in connected {
            info!(%relay, "daily sync");
            if let Some((session, mut cx)) = self.session(&relay) {
                session.fresh_start(&mut cx, now);
            }
            self.plan_relay(now, &relay);
        }
    }

    /// Drops relays that are neither bootstrap nor listed by any repository,
    /// then gives the slots freed, and those of relays that have not earned
    /// theirs ([`RelaySlots::yielding`](super::relay_slots::RelaySlots::yielding)), to relays waiting for one.
    fn check_disconnects(&mut self, now: Instant) {
        let unwanted: Vec<RelayUrl> = self
            .relays
            .tracked()
            .filter(|(relay, state)| {
                !state.is_bootstrap
                    && !self.repo_relays.is_index(relay)
                    && self.repos.target(relay).is_none()
            })
            .map(|(relay, _)| relay.clone())
            .collect();
        for relay in unwanted {
            info!(%relay, "dropping relay with nothing to sync");
            self.emit(Command::Forget {
                relay: relay.clone(),
            });
            self.relays.remove(&relay);
            self.reached.others = true;
            self.admission.release(&relay);
            self.stats.relays_dropped += 1;
        }
        self.admission.forget_old_benches(&self.config.caps, now);
        self.readmit_relays_over_cap(now);
        self.yield_slots_to_waiting(now);
    }

    // --- Planning ------------------------------------------------------------

    /// The self-subscriber batch: update the repository index from the
    /// accepted events, register newly listed relays, and plan what changed.
    fn process_own_batch(&mut self, now: Now) {
        self.timers.clear(EngineTimer::OwnBatch);
        let events = self.own.take_queued();
        debug!(events = events.len(), "processing self-subscriber batch");
        for event in &events {
            if event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
                self.apply_announcement(event, now.instant);
                if !self.config.identity.service_relays.is_empty() {
                    self.accept_ours(now, event);
                }
            } else if is_root_kind(event.kind) {
                for repo in root_event_repo_refs(event).value {
                    if self.root_repo_allowed(&repo) {
                        self.repos.add_root_event(&repo, event.id);
                    }
                }
            }
        }
        // After the batch's announcements and roots (a comment may come
        // before its root), then its conversation (a list is kept only for
        // someone who takes part).
        for event in events
            .iter()
            .filter(|event| is_conversation_kind(event.kind))
        {
            self.join_conversation(event);
        }
        for event in events.iter().filter(|event| is_relay_list_kind(event.kind)) {
            self.apply_relay_list(event);
        }
        self.plan_repo_relay_changes(now);
    }

    /// Plans what the repository index gained since it was last planned
    /// ([`RepoSyncIndex::take_changes`]).
    fn plan_target_changes(&mut self, now: Now) {
        let changes = self.repos.take_changes();
        for action in compute_actions_for_changes(&changes, &self.relays) {
            self.add_filters(now, &action.relay, action.items);
        }
    }

    // --- Sync+ (GRASP-03) ------------------------------------------------------

    /// `true` if announcements are discovered on `relay` (Layer 1): a
    /// bootstrap relay or one an announcement of ours lists; never a relay
    /// reached only through Sync+ (an outbox or index relay).
    fn discovers(&self, relay: &RelayUrl) -> bool {
        self.relays
            .state(relay)
            .is_some_and(|state| state.is_bootstrap)
            || self.repo_relays.is_announced(relay)
    }

    /// `true` if only Sync+ brought `relay` in: an outbox or index relay
    /// that announcements are not discovered on.
    fn only_sync_plus(&self, relay: &RelayUrl) -> bool {
        !self.discovers(relay)
            && (self.repo_relays.is_outbox(relay) || self.repo_relays.is_index(relay))
    }

    /// `key` takes part in `repo` (the owner, a maintainer, or the author
    /// of an event admitted to its conversation); over the cap it is
    /// counted.
    fn join(&mut self, repo: &RepoRef, key: PublicKey, role: Role) {
        let joined = (self.repo_relays).add_participant(repo, key, role, &self.config.sync_plus);
        if matches!(joined, Joined::OverCap | Joined::Displacing) {
            self.stats.sync_plus_participants_over_cap += 1;
            if self.cap_logs.participants.add(1) {
                let count = self.cap_logs.participants.count();
                warn!(%repo, cap = self.config.sync_plus.max_participants_per_repo, not_remembered = count, "Sync+ participants not remembered: the repository has as many as it may; the lowest-ranked give way to those who brought as much");
            } else {
                debug!(%repo, "participant not remembered: the repository has as many as it may");
            }
        }
    }

    /// The author of a conversation event the store took joins the
    /// repositories it points at: those of its `a`/`A` tags, and those of
    /// the root events of its `e`/`E` tags.
    fn join_conversation(&mut self, event: &Event) {
        if !self.repo_relays.enabled() {
            return;
        }
        let refs = conversation_refs(event);
        let mut repos: IndexSet<RepoRef> = refs
            .repos
            .into_iter()
            .filter(|repo| self.repo_relays.knows(repo))
            .collect();
        for id in refs
            .events
            .iter()
            .chain(is_root_kind(event.kind).then_some(&event.id))
        {
            repos.extend(self.repos.repos_of_root_event(id));
        }
        for repo in repos {
            self.join(&repo, event.pubkey, Role::Author);
        }
    }

    /// A relay list (10002, 10317) the store took or the own relay holds:
    /// kept if its author takes part, its relays those the relay policy
    /// allows that are neither our service nor the own relay.
    fn apply_relay_list(&mut self, event: &Event) {
        let identity = &self.config.identity;
        let own = &self.own;
        let usable = |relay: &RelayUrl| {
            identity.relay_policy.check_relay_url(relay).is_ok()
                && !identity.service_relays.contains(relay)
                && !own.is_for(relay)
        };
        let left_out = self
            .repo_relays
            .apply_list(event, usable, &self.config.sync_plus);
        self.stats.sync_plus_list_relays_left_out += left_out;
    }

    /// Counts the outbox relays the global cap kept out, warning the first
    /// time and every thousandth.
    fn note_sync_plus_over_cap(&mut self, over_cap: u64) {
        if over_cap == 0 {
            return;
        }
        self.stats.sync_plus_relays_over_cap += over_cap;
        if self.cap_logs.outbox_relays.add(over_cap) {
            warn!(
                cap = self.config.sync_plus.max_relays,
                kept_out = self.cap_logs.outbox_relays.count(),
                "Sync+ outbox relays kept out by the global cap"
            );
        }
    }

    /// A Sync+ pass: the choice of participants and outbox relays moves on
    /// ([`RepoRelays::next_pass`]), and what it changed is planned.
    fn sync_plus_pass(&mut self, now: Now) {
        self.stats.sync_plus_passes += 1;
        self.repo_relays.next_pass(&self.config.sync_plus);
        for repo in self.admission.take_outbox_waiting() {
            self.list_repo_relays(&repo);
        }
        self.plan_repo_relay_changes(now);
    }

    /// What Sync+ changed, carried out: repositories whose outbox relays
    /// changed list them ([`SyncEngine::list_repo_relays`]), newly chosen
    /// participants' relay lists are looked up where they are read, and
    /// after a pass that chose others every connected relay's lookups are
    /// planned again; then the repository index's changes are planned.
    fn plan_repo_relay_changes(&mut self, now: Now) {
        let changes = self.repo_relays.take_changes();
        self.note_sync_plus_over_cap(changes.over_cap);
        for repo in &changes.repos {
            self.list_repo_relays(repo);
        }
        if changes.participants_moved {
            let connected: Vec<RelayUrl> = self.relays.connected().cloned().collect();
            for relay in connected {
                self.plan_lookups(now, &relay, None);
            }
        } else {
            for (relay, authors) in changes.lookups {
                self.plan_lookups(now, &relay, Some(authors));
            }
        }
        self.plan_target_changes(now);
    }

    /// Plans the relay lists to read from `relay` that are neither
    /// confirmed nor pending there: of `candidates`, or of every
    /// participant read there ([`RepoRelays::lookups`]). Nothing while it
    /// is not connected: it is planned when it connects.
    fn plan_lookups(&mut self, now: Now, relay: &RelayUrl, candidates: Option<Vec<PublicKey>>) {
        let Some(state) = self.relays.connected_state(relay) else {
            return;
        };
        let wanted = candidates.unwrap_or_else(|| self.repo_relays.lookups(relay));
        let pending = self.relays.pending(relay);
        let authors: HashSet<PublicKey> = wanted
            .into_iter()
            .filter(|author| {
                !state.authors.contains(author)
                    && !pending.is_some_and(|pending| pending.contains_author(author))
            })
            .collect();
        if !authors.is_empty() {
            let items = PendingItems {
                authors,
                ..PendingItems::default()
            };
            self.add_filters(now, relay, items);
        }
    }

    /// A repository announcement from the own relay: its relays (after the
    /// policy, without our own service relays) become the repository's.
    fn apply_announcement(&mut self, event: &Event, now: Instant) {
        let announcement = match parse_announcement(event) {
            Ok(announcement) => announcement,
            Err(error) => {
                debug!(id = %event.id, %error, "ignoring malformed announcement");
                return;
            }
        };
        let service = &self.config.identity.service_relays;
        if !service.is_empty()
            && !announcement
                .relays
                .iter()
                .any(|relay| service.contains(relay))
        {
            debug!(repo = %announcement.repo, "announcement does not list our service");
            return;
        }
        let this = (event.created_at, event.id);
        // The applied one stands unless this one replaces it (the same
        // event coming back included).
        if (self.own.announced(&announcement.repo)).is_some_and(|&kept| !replaces(this, kept)) {
            return;
        }
        self.own.note_announced(announcement.repo.clone(), this);
        let listed: Vec<RelayUrl> = announcement
            .relays
            .into_iter()
            .filter(|relay| !service.contains(relay) && !self.own.is_for(relay))
            .collect();
        let allowed: Vec<RelayUrl> = listed
            .into_iter()
            .filter(|relay| self.relay_allowed(relay))
            .collect();
        let (relays, left_out) = self.relays_within_caps(&announcement.repo, allowed, now);
        self.note_left_out(&announcement.repo, left_out);
        self.set_repo_relays(&announcement.repo, relays, now);
        self.join(
            &announcement.repo,
            *announcement.repo.pubkey(),
            Role::Maintainer,
        );
        for maintainer in announcement.maintainers {
            self.join(&announcement.repo, maintainer, Role::Maintainer);
        }
    }

    /// `true` if the relay policy allows `relay`. A refusal is counted and
    /// warned about once per URL (a sidecar tested on loopback without
    /// `allow_local_addresses` would otherwise sync nothing and look done).
    fn relay_allowed(&mut self, relay: &RelayUrl) -> bool {
        let Err(error) = self.config.identity.relay_policy.check_relay_url(relay) else {
            return true;
        };
        self.stats.relays_refused += 1;
        let first = self.refused_relays.len() < REFUSED_RELAYS_REMEMBERED
            && self.refused_relays.insert(relay.clone());
        if first {
            warn!(%relay, %error, "relay refused by the relay policy; not syncing from it");
        } else {
            debug!(%relay, %error, "relay refused by the relay policy");
        }
        false
    }

    /// Plans everything `relay` should sync that is neither pending nor
    /// confirmed (`compute_actions` for one relay).
    /// The participants' relay lists read there are planned too
    /// ([`SyncEngine::plan_lookups`]).
    fn plan_relay(&mut self, now: Now, relay: &RelayUrl) {
        self.plan_lookups(now, relay, None);
        let Some(target) = self.repos.target(relay) else {
            return;
        };
        let action =
            compute_actions_for_relay(relay, &target.repos, &target.root_events, &self.relays);
        if let Some(action) = action {
            self.add_filters(now, &action.relay, action.items);
        }
    }

    /// New items for `relay` ([`RelaySession::add_filters`]).
    fn add_filters(&mut self, now: Now, relay: &RelayUrl, items: PendingItems) {
        if let Some((session, mut cx)) = self.session(relay) {
            session.add_filters(&mut cx, now, items);
        }
    }

    // --- The store -------------------------------------------------------------

    /// Hands a verified event from `relay` to the store, unless it is
    /// already on its way (then `batch` waits for the same answer), stored
    /// lately or refused for good.
    fn store(&mut self, now: Now, relay: &RelayUrl, event: VerifiedEvent, batch: Option<BatchId>) {
        // A candidate held for its owner's announcement may come from a
        // relay dropped since.
        self.relays.entry(relay.clone());
        let only_sync_plus = self.only_sync_plus(relay);
        let handover = self.stores.handover(&event.id);
        match handover {
            Handover::StoredLately => self.stats.already_stored += 1,
            Handover::New => {
                self.stats.events_accepted += 1;
                if only_sync_plus {
                    self.stats.sync_plus_events += 1;
                }
            }
            Handover::Refused | Handover::OnItsWay => {}
        }
        let Some((session, mut cx)) = self.session(relay) else {
            return;
        };
        // Whatever follows, the store has it, is asked for it or refused it.
        session.note_sent_reply(cx.config, &event);
        match handover {
            Handover::Refused | Handover::StoredLately => {}
            Handover::OnItsWay => {
                if let Some(batch) = batch {
                    session.wait_for_store(&mut cx, now, batch, &event.id);
                }
            }
            Handover::New => {
                let batch_running = batch.is_some_and(|batch| session.batch_running(batch));
                if let Some(batch) = batch {
                    session.count_store(&mut cx, now, batch, 1);
                }
                let ids = cx.repos.ids();
                let known = |id: &EventId| ids.root_id(id).is_some();
                let sent =
                    cx.stores
                        .hand_over(event, relay, batch, batch_running, known, now.instant);
                match sent {
                    Some(command) => self.emit(command),
                    None => self.stats.store_waits += 1,
                }
            }
        }
    }

    /// The store's answer to [`Command::Store`] for the event `id`
    /// ([`StoreVerdict::of`] reads it).
    pub fn handle_store_outcome(
        &mut self,
        now: Now,
        id: &EventId,
        outcome: Result<IngestOutcome, StoreError>,
    ) {
        self.handle_store_outcomes(now, [(id, outcome)]);
    }

    /// Several answers of the store, each as
    /// [`SyncEngine::handle_store_outcome`] takes it: what they unblock
    /// (batches confirmed, a store that keeps up again) is worked out once,
    /// after the last of them.
    pub fn handle_store_outcomes<E, I>(&mut self, now: Now, outcomes: I)
    where
        E: Borrow<EventId>,
        I: IntoIterator<Item = (E, Result<IngestOutcome, StoreError>)>,
    {
        self.observe(now);
        self.stores.alive(now.instant);
        for (id, outcome) in outcomes {
            self.on_store_outcome(now, id.borrow(), &outcome);
        }
        self.maintain_after(now, None);
    }

    /// One store answer: the tracker settles the event (or keeps it for a
    /// retry); a settled event's batches count it, a stored or held
    /// announcement or root event is planned.
    fn on_store_outcome(
        &mut self,
        now: Now,
        id: &EventId,
        outcome: &Result<IngestOutcome, StoreError>,
    ) {
        let verdict = StoreVerdict::of(outcome);
        let (done, verdict) = match self.stores.answer(now, id, verdict, &self.config) {
            Answered::NotAwaited => {
                self.stats.inputs_ignored += 1;
                return;
            }
            Answered::Retrying => {
                self.stats.store_retries += 1;
                return;
            }
            Answered::Settled(done, verdict) => (done, verdict),
        };
        match verdict {
            StoreVerdict::Stored => self.stats.events_stored += 1,
            StoreVerdict::Held => self.stats.events_held += 1,
            StoreVerdict::Refused(_) => self.stats.store_refused += 1,
            StoreVerdict::Duplicate | StoreVerdict::Retry(_) | StoreVerdict::Unclear(_) => {}
        }
        for (relay, batch) in &done.batches {
            if let Some((session, mut cx)) = self.session(relay) {
                session.count_store(&mut cx, now, *batch, -1);
            }
        }
        if verdict == StoreVerdict::Stored {
            if let Some(session) = self.relays.get_mut(&done.relay) {
                session.event_stored();
            }
        }
        if matches!(verdict, StoreVerdict::Stored | StoreVerdict::Held) {
            // New to the store, and this relay's copy was the one handed
            // over: no other relay delivered it first. It earns its slot.
            self.admission
                .note_unique_delivery(&done.relay, now.instant);
        }
        if verdict == StoreVerdict::Held {
            if let Some(repo) = announced_repo(done.event.event()) {
                self.hold_repository(repo);
            }
        }
        if matches!(
            verdict,
            StoreVerdict::Stored | StoreVerdict::Duplicate | StoreVerdict::Held
        ) {
            self.plan_stored(now, done.event.into_event());
        }
    }

    // --- Held repositories and events ------------------------------------------

    /// The host holds `repo`'s announcement outside what it serves until
    /// its git data arrives: until [`SyncEngine::handle_repository_promoted`]
    /// only its announcement and states are synced (Layer 1), not the
    /// events tagging it (Layers 2+3). What was already asked of its relays
    /// finishes. The engine holds a repository by itself when the store
    /// answers [`IngestOutcome::Held`] for its announcement.
    pub fn handle_repository_held(&mut self, now: Now, repo: RepoRef) {
        self.observe(now);
        self.hold_repository(repo);
        self.maintain_after(now, None);
    }

    /// The host holds `announcement` outside what it serves until its git
    /// data arrives, and no store answer says so (it was held before this
    /// engine started): its repository is held and planned like one whose
    /// announcement the store answered `Held` for — its states are synced,
    /// its promotion starts the rest. Anything but an announcement is
    /// ignored.
    pub fn handle_held_announcement(&mut self, now: Now, announcement: Event) {
        self.observe(now);
        let Some(repo) = announced_repo(&announcement) else {
            debug!(id = %announcement.id, "a held announcement that is not one; ignored");
            return;
        };
        self.hold_repository(repo);
        self.stores.note_in_store(&announcement);
        self.plan_stored(now, announcement);
        self.maintain_after(now, None);
    }

    /// The host released `repo`'s announcement (its git data arrived): the
    /// repository becomes an item like a newly discovered one, its Layers
    /// 2+3 history and live sync start on the relays that serve it. A
    /// repository not held is left alone.
    pub fn handle_repository_promoted(&mut self, now: Now, repo: RepoRef) {
        self.observe(now);
        self.promote(now, repo);
        self.maintain_after(now, None);
    }

    /// Promotes `repo` if held: its relays are listed and its items planned.
    fn promote(&mut self, now: Now, repo: RepoRef) {
        if !self.held.promote(&repo) {
            debug!(%repo, "promoted a repository that was not held");
            return;
        }
        info!(%repo, "repository promoted; syncing the events that tag it");
        self.list_repo_relays(&repo);
        self.plan_target_changes(now);
    }

    /// The host discarded these held events (they expired without their
    /// data): they are forgotten, so a later sync fetches them again.
    pub fn handle_held_dropped(&mut self, now: Now, ids: impl IntoIterator<Item = EventId>) {
        self.observe(now);
        let forgotten = self.stores.forget_held(ids);
        debug!(
            forgotten,
            "held events dropped by the host; fetched again later"
        );
    }

    /// The repositories held ([`SyncEngine::handle_repository_held`]),
    /// oldest first.
    pub fn held_repositories(&self) -> impl Iterator<Item = &RepoRef> {
        self.held.iter()
    }

    /// Is `repo` held? Its Layers 2+3 wait for its promotion.
    pub fn is_repository_held(&self, repo: &RepoRef) -> bool {
        self.held.is_held(repo)
    }

    /// Holds `repo`: if it is an item already, its relays are taken out of
    /// the repository index (nothing more of its Layers 2+3 is planned).
    fn hold_repository(&mut self, repo: RepoRef) {
        if !self.held.hold(repo.clone()) {
            return;
        }
        info!(%repo, "repository held; syncing only its announcement and states until promoted");
        if self.repo_relays.knows(&repo) {
            self.list_repo_relays(&repo);
        }
    }

    /// A stored (or already held) announcement or root event is ours: plan
    /// it like one the self-subscription reports, so a relay that embeds the
    /// library gets Layer 3 without glue. Planning it twice is harmless.
    fn plan_stored(&mut self, now: Now, event: Event) {
        let ours = event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) || is_root_kind(event.kind);
        let sync_plus = self.repo_relays.enabled()
            && (is_conversation_kind(event.kind) || is_relay_list_kind(event.kind));
        if ours || sync_plus {
            self.queue_own_events(now, [event]);
        }
    }

    /// Offers the store again what is due ([`StoreTracker::resends_due`]).
    fn run_store_timers(&mut self, now: Now) {
        let (retried, silent) = self
            .stores
            .resends_due(now.instant, self.config.timeouts.store_timeout);
        if !silent.is_empty() {
            warn!(
                events = silent.len(),
                "store did not answer for the store timeout; offering its events again"
            );
            self.stats.store_retries += silent.len() as u64;
        }
        for command in retried.into_iter().chain(silent) {
            self.emit(command);
        }
    }

    // --- Timeouts ------------------------------------------------------------

    /// The relays whose deadline is due, earliest first
    /// ([`DeadlineTable::pop_due`]), each fire their own timers
    /// ([`RelaySession::handle_timeout`]); the engine then does what a
    /// session cannot: abandons a connection attempt past its timeout, plans
    /// the relay's items again. Each relay's deadline is refreshed after (a
    /// relay not due is not looked at).
    fn run_due_sessions(&mut self, now: Now) {
        for relay in self.deadlines.pop_due(now.instant) {
            let Some((session, mut cx)) = self.session(&relay) else {
                continue;
            };
            if session.handle_timeout(&mut cx, now) {
                self.plan_relay(now, &relay);
            }
            self.refresh_deadline(&relay);
        }
    }

    // --- Caps ---------------------------------------------------------------

    /// The relays of `repo`'s announcement that fit the caps
    /// ([`RelayAdmission::within_caps`]); relays left out for a slot wait
    /// for [`SyncEngine::readmit_relays_over_cap`]; what was left out and
    /// why is returned, for the caller to count and log
    /// ([`SyncEngine::note_left_out`]) when it is news.
    fn relays_within_caps(
        &mut self,
        repo: &RepoRef,
        listed: Vec<RelayUrl>,
        now: Instant,
    ) -> (Vec<RelayUrl>, LeftOut) {
        let tracked = self.relays.tracked_count();
        let relays = &self.relays;
        self.admission.within_caps(
            repo,
            listed,
            &self.config.caps,
            tracked,
            |relay| relays.state(relay).is_some(),
            now,
        )
    }

    /// Counts what an announcement of `repo` had left out
    /// ([`EngineStats::relays_over_cap`]) and logs it: a full total at
    /// `warn` (the operator may raise the cap), an author over its share at
    /// `info` the first time and every thousandth relay after, else at
    /// `debug` (one key flooding us is routine).
    fn note_left_out(&mut self, repo: &RepoRef, left: LeftOut) {
        self.stats.relays_over_cap += left.count() as u64;
        let log_author = self.cap_logs.relays.add(left.count() as u64);
        let caps = &self.config.caps;
        if left.over_announcement > 0 {
            warn!(%repo, listed = left.listed, cap = caps.max_relays_per_announcement, "announcement lists more relays than the cap; syncing from the first ones");
        }
        if left.total_full > 0 {
            warn!(%repo, left_out = left.total_full, cap = caps.max_relays, "relays tracked at the cap; these wait for a slot");
        }
        if left.author_full > 0 {
            let author = repo.pubkey();
            if log_author {
                info!(%repo, %author, left_out = left.author_full, cap = caps.max_relays_per_author, refused = self.cap_logs.relays.count(), "the author's relays hold its share of the slots; these wait for one of them");
            } else {
                debug!(%repo, %author, left_out = left.author_full, cap = caps.max_relays_per_author, "the author's relays hold its share of the slots");
            }
        }
        if left.network_full > 0 {
            debug!(%repo, left_out = left.network_full, cap = caps.max_relays_per_network, "the relays' networks (domains, address blocks) hold their share of the slots");
        }
        if left.benched > 0 {
            debug!(%repo, left_out = left.benched, "relays that yielded their slot lately wait for their turn");
        }
    }

    /// Records `relays` as those `repo`'s announcement lists (after the
    /// policy and caps) and lists them with its Sync+ relays
    /// ([`SyncEngine::list_repo_relays`]).
    /// A connected relay reached through Sync+ only until now starts
    /// discovering announcements (Layer 1) at its session's next timeout.
    fn set_repo_relays(&mut self, repo: &RepoRef, relays: Vec<RelayUrl>, now: Instant) {
        let discovering: Vec<RelayUrl> = relays
            .iter()
            .filter(|relay| !self.discovers(relay) && self.relays.is_connected(relay))
            .cloned()
            .collect();
        self.repo_relays.set_announced(repo, relays);
        self.list_repo_relays(repo);
        for relay in discovering {
            if let Some(session) = self.relays.get_mut(&relay) {
                session.start_layer1_at(now);
            }
            self.refresh_deadline(&relay);
        }
    }

    /// Lists `repo`'s relays in the repository index — announced, and this
    /// pass's Sync+ outbox relays ([`RepoRelays::relays_of`]) that hold a
    /// slot ([`SyncEngine::outbox_within_slots`]) — and registers those not
    /// tracked yet. A held repository lists none (it is no Layers 2+3
    /// item); its announced relays are registered, for Layer 1.
    fn list_repo_relays(&mut self, repo: &RepoRef) {
        let relays = if self.held.is_held(repo) {
            self.repos.set_repo_relays(repo, std::iter::empty());
            self.repo_relays.announced(repo).to_vec()
        } else {
            let relays = self.repo_relays.relays_of(repo);
            let relays = self.outbox_within_slots(repo, relays);
            self.repos.set_repo_relays(repo, relays.iter().cloned());
            relays
        };
        for relay in relays {
            if self.relays.state(&relay).is_none() {
                tracing::info!(%relay, "discovered relay");
                self.register_relay(relay, false);
            }
        }
    }

    /// Of `repo`'s relays, those that hold a slot or need none: announced
    /// ones (their slots were granted with the announcement,
    /// [`SyncEngine::relays_within_caps`]) and relays tracked already; a
    /// Sync+ outbox relay not tracked yet takes a slot like an announced one
    /// ([`RelaySlots::admission`](super::relay_slots::RelaySlots::admission), charged to `repo`'s owner and the
    /// relay's network), so it yields like one. One refused waits: `repo` is
    /// listed again at the next Sync+ pass.
    fn outbox_within_slots(&mut self, repo: &RepoRef, relays: Vec<RelayUrl>) -> Vec<RelayUrl> {
        let now = self.last_now();
        let tracked = self.relays.tracked_count();
        let (known, repo_relays) = (&self.relays, &self.repo_relays);
        let needs_slot = |relay: &RelayUrl| {
            known.state(relay).is_none() && !repo_relays.announced(repo).contains(relay)
        };
        let (kept, refused) = self.admission.outbox_within_slots(
            repo,
            relays,
            &self.config.caps,
            tracked,
            needs_slot,
            now,
        );
        if let Some(refused) = refused {
            self.stats.relays_over_cap += refused;
            debug!(%repo, left_out = refused, "Sync+ outbox relays wait for a slot");
        }
        kept
    }

    /// Gives relays waiting for a slot another chance, longest waiting
    /// first, now that dropped relays may have made room.
    fn readmit_relays_over_cap(&mut self, now: Instant) {
        let waiting: Vec<RepoRef> = self.admission.waiting_repos();
        for repo in waiting {
            if self.relays.tracked_count() >= self.config.caps.max_relays {
                return;
            }
            self.readmit(&repo, now);
        }
    }

    /// Admits what it can of `repo`'s waiting relays
    /// ([`SyncEngine::relays_within_caps`]); `true` if one took a slot.
    fn readmit(&mut self, repo: &RepoRef, now: Instant) -> bool {
        let Some(relays) = self.admission.waiting(repo) else {
            return false;
        };
        let tracked = self.relays.tracked_count();
        // Counted and logged once, when first left out.
        let (admitted, _) = self.relays_within_caps(repo, relays, now);
        self.set_repo_relays(repo, admitted, now);
        let gained = self.relays.tracked_count() > tracked;
        if gained {
            debug!(%repo, "relays waiting for a slot admitted");
        }
        gained
    }

    /// Relays that have not earned their slot (no unique delivery within
    /// the earn window) and whose trial period is over yield their slots
    /// ([`RelaySlots::yielding`](super::relay_slots::RelaySlots::yielding)), one at a time, to the relays waiting
    /// longest that only the total cap keeps out. Answering EOSE keeps no
    /// slot; delivering what no other relay did keeps it.
    fn yield_slots_to_waiting(&mut self, now: Instant) {
        let waiting: Vec<RepoRef> = self.admission.waiting_repos();
        for repo in waiting {
            while self.waits_for_a_free_slot(&repo, now) {
                let yielding = self
                    .admission
                    .yielding(now, &self.config.caps, |relay| self.is_dead(relay));
                let Some(relay) = yielding else {
                    return;
                };
                self.evict(&relay, now);
                if !self.readmit(&repo, now) {
                    break;
                }
            }
        }
    }

    /// `true` if a relay of `repo` waits that a free slot would admit (its
    /// author has room, it is not benched): only the total cap keeps it
    /// out.
    fn waits_for_a_free_slot(&self, repo: &RepoRef, now: Instant) -> bool {
        self.admission.waits_for_a_free_slot(
            repo,
            &self.config.caps,
            self.relays.tracked_count(),
            |relay| self.relays.state(relay).is_some(),
            now,
        )
    }

    /// `true` if `relay` fails to connect for long enough to count as
    /// dead: a unique delivery before keeps it no slot.
    fn is_dead(&self, relay: &RelayUrl) -> bool {
        self.health_state(relay, self.last_now()) == HealthState::Dead
    }

    /// `relay` yields its slot: it is benched, forgotten (the driver closes
    /// its connection), and the repositories listing it wait for it again
    /// (at the back), so it comes back when a slot frees after its bench.
    fn evict(&mut self, relay: &RelayUrl, now: Instant) {
        let (author, first) = self.admission.bench(relay, now);
        self.stats.relays_evicted += 1;
        if first {
            info!(%relay, author = ?author, "relay delivered nothing of ours that no other relay did, within its trial period and earn window; it yields its slot to one waiting");
        } else {
            debug!(%relay, author = ?author, "relay yields its slot again");
        }
        let repos: Vec<RepoRef> = self
            .repos
            .target(relay)
            .map(|target| target.repos.iter().map(|(_, repo)| repo.clone()).collect())
            .unwrap_or_default();
        for repo in repos {
            let listed: Vec<RelayUrl> = self.repo_relays.announced(&repo).to_vec();
            let waiting = self.admission.stop_waiting(&repo, &listed);
            let kept = listed
                .into_iter()
                .filter(|listed| listed != relay)
                .collect();
            self.set_repo_relays(&repo, kept, now);
            self.admission.wait_again(repo, waiting);
        }
        self.emit(Command::Forget {
            relay: relay.clone(),
        });
        self.relays.remove(relay);
        self.reached.others = true;
    }

    /// `true` if a root event of `repo` may be indexed: the repository is
    /// tracked already, or fewer than
    /// [`max_unannounced_repos`](super::Caps::max_unannounced_repos)
    /// repositories no announcement of ours names are.
    fn root_repo_allowed(&mut self, repo: &RepoRef) -> bool {
        if self.repos.repo(repo).is_some() {
            return true;
        }
        let unannounced = self
            .repos
            .repos()
            .len()
            .saturating_sub(self.own.announced_count());
        if unannounced < self.config.caps.max_unannounced_repos {
            return true;
        }
        self.stats.root_events_over_cap += 1;
        if self.cap_logs.roots.add(1) {
            let refused = self.cap_logs.roots.count();
            warn!(%repo, cap = self.config.caps.max_unannounced_repos, refused, "root event of an unannounced repository not indexed: too many such repositories");
        }
        false
    }

    // --- Executing commands -------------------------------------------------

    /// Step 2 of the driving contract in one call: hands every waiting
    /// command to `execute`, oldest first, and feeds back the relays whose
    /// connection could not take one (`execute` returned an error:
    /// [`SyncEngine::handle_send_failed`]). Returns how many commands were
    /// executed.
    ///
    /// ```
    /// use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
    /// use grasp_sync_core::{Instant, Now};
    /// use nostr::prelude::{RelayUrl, Timestamp};
    ///
    /// let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
    /// let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
    /// let mut config = EngineConfig::default();
    /// config.identity.bootstrap_relays = vec![relay.clone()];
    /// let mut engine = SyncEngine::new(config, now).expect("a valid configuration");
    /// engine.handle_timeout(now);
    /// let mut executed = Vec::new();
    /// engine.execute_commands(now, |command| {
    ///     // Connect, send `command.client_message()`, store, query …
    ///     executed.push(command);
    ///     Ok(())
    /// });
    /// assert!(matches!(executed.as_slice(), [Command::Connect { .. }]));
    /// ```
    pub fn execute_commands(
        &mut self,
        now: Now,
        mut execute: impl FnMut(Command) -> Result<(), TransportError>,
    ) -> usize {
        let mut executed = 0;
        while let Some(command) = self.poll_command() {
            executed += 1;
            let relay = command.relay().clone();
            if let Err(error) = execute(command) {
                self.handle_send_failed(now, &relay, &error);
            }
        }
        executed
    }

    /// The connection of `relay` could not take a command's message: the
    /// relay and the engine are out of step, so the connection is closed and
    /// its work planned again on reconnect (the own relay's: reconnected
    /// after its backoff).
    pub fn handle_send_failed(&mut self, now: Now, relay: &RelayUrl, error: &TransportError) {
        self.route(now, relay, Input::SendFailed(error));
    }

    /// A remote relay's connection could not take a message
    /// ([`SyncEngine::handle_send_failed`]).
    fn on_send_failed(&mut self, now: Now, relay: &RelayUrl, error: &TransportError) {
        match self.session(relay) {
            Some((session, mut cx)) => session.on_send_failed(&mut cx, now, error),
            None => self.ignored(relay, "send failure while not connected"),
        }
        self.maintain(now);
    }

    // --- Which Layer 1 events are ours --------------------------------------

    /// Is this Layer 1 event from a remote relay ours to store? The one
    /// place the rule is decided (see the [module documentation](self)).
    fn is_ours(&self, event: &Event) -> Layer1Verdict {
        let service = &self.config.identity.service_relays;
        let layer1 = [KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE]
            .iter()
            .any(|kind| event.kind == Kind::Custom(*kind));
        if service.is_empty() || !layer1 {
            return Layer1Verdict::Store;
        }
        if event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
            let lists_us = parse_announcement(event)
                .is_ok_and(|announcement| announcement.relays.iter().any(|r| service.contains(r)));
            if lists_us {
                return Layer1Verdict::Store;
            }
        }
        let by_an_author = identifier(event)
            .and_then(|id| self.ours.authors(&id))
            .is_some_and(|authors| authors.contains(&event.pubkey));
        if by_an_author {
            Layer1Verdict::Store
        } else {
            Layer1Verdict::Hold
        }
    }

    /// A verified event from `relay` on its way to the store: `false` if it
    /// is a Layer 1 event that is not ours (held as a candidate, counted in
    /// [`EngineStats::not_ours`](super::EngineStats::not_ours)).
    fn admit_ours(&mut self, relay: &RelayUrl, event: &VerifiedEvent) -> bool {
        match self.is_ours(event) {
            Layer1Verdict::Store => true,
            Layer1Verdict::Hold => {
                self.hold_candidate(relay, event);
                false
            }
        }
    }

    /// An announcement (from a remote relay, or accepted by the own relay),
    /// with service relays configured: if it is ours
    /// ([`SyncEngine::is_ours`]), its authors become ours, and their
    /// candidates are stored.
    fn accept_ours(&mut self, now: Now, event: &Event) {
        if self.is_ours(event) == Layer1Verdict::Hold {
            return;
        }
        let Some(id) = self.ours.accept(event) else {
            return;
        };
        let Some(authors) = self.ours.authors(&id).cloned() else {
            return;
        };
        let mut ready = self.ours.candidates_mut().take(|candidate| {
            identifier(candidate).as_deref() == Some(id.as_str())
                && authors.contains(&candidate.pubkey)
        });
        // Announcements first: the states need them in the store.
        ready.sort_by_key(|(_, candidate)| candidate.kind != Kind::Custom(KIND_REPO_ANNOUNCEMENT));
        // Those no longer held: the next sync brings them.
        self.stores.forget_refused(|refused| {
            identifier(refused).as_deref() == Some(id.as_str()) && authors.contains(&refused.pubkey)
        });
        for (relay, candidate) in ready {
            debug!(id = %candidate.id, "candidate is ours now: storing it");
            self.stats.candidates_stored += 1;
            let lists_maintainers = (candidate.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT))
                .then(|| candidate.event().clone());
            self.store(now, &relay, candidate, None);
            if let Some(announcement) = lists_maintainers {
                // A maintainer's announcement lists maintainers too.
                self.accept_ours(now, &announcement);
            }
        }
    }

    /// Holds a Layer 1 event that is not ours (yet), the oldest candidates
    /// dropped past [`MAX_CANDIDATES`](super::MAX_CANDIDATES) or
    /// [`MAX_CANDIDATE_BYTES`](super::MAX_CANDIDATE_BYTES) (counted
    /// in [`EngineStats::candidates_dropped`](super::EngineStats::candidates_dropped)).
    fn hold_candidate(&mut self, relay: &RelayUrl, event: &VerifiedEvent) {
        if self.ours.candidates().holds(&event.id) {
            return;
        }
        self.stats.not_ours += 1;
        debug!(id = %event.id, kind = %event.kind, "layer 1 event not ours: not stored");
        // Counted as held by reconciliation: not downloaded again at every
        // Layer 1 sync (forgotten if it becomes ours).
        self.stores
            .remember_refused(event, self.config.caps.refused_memory);
        let dropped = self.ours.candidates_mut().hold(relay, event);
        if dropped > 0 {
            self.stats.candidates_dropped += dropped as u64;
            debug!(
                dropped,
                held = self.ours.candidates().len(),
                bytes = self.ours.candidates().bytes(),
                "oldest candidates dropped to stay within their caps"
            );
        }
    }

    /// Bytes held by the candidates (events not ours held in case they
    /// become ours; at most [`MAX_CANDIDATE_BYTES`](super::MAX_CANDIDATE_BYTES)) and by the memory of
    /// events refused for good (at most
    /// [`Caps::refused_memory`](super::Caps::refused_memory) records of
    /// bounded size): what strangers' events can make the engine hold
    /// beyond its queues.
    pub fn held_bytes(&self) -> HeldBytes {
        HeldBytes {
            candidates: self.ours.candidates().bytes(),
            candidate_count: self.ours.candidates().len(),
            refused: self.stores.refused_bytes(),
            refused_count: self.stores.refused_count(),
            held_events: self.stores.held_count(),
        }
    }

    // --- The own relay ------------------------------------------------------

    /// The filter of the self-subscription on the own relay: kinds 30617,
    /// 1617, 1618, 1621, and once the own relay's history was read
    /// completely, `since` the last moment everything was read minus the
    /// quick-reconnect window. The engine subscribes with it when the own
    /// relay connection opens; reading it changes nothing.
    pub fn own_subscription_filter(&self) -> nostr::prelude::Filter {
        self.own.subscription_filter(&self.config)
    }

    /// Events the own relay accepted, for an embedder that has no own relay
    /// connection (or besides it). They are processed together when the
    /// batch window, started by the first of them, closes.
    pub fn handle_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        self.observe(now);
        let events: Vec<Event> = events.into_iter().collect();
        for event in &events {
            self.stores.note_in_store(event);
        }
        let promoted = self.promote_served(now, &events);
        self.queue_own_events(now, events);
        if promoted {
            self.maintain_after(now, None);
        } else {
            self.release_parked(now);
        }
    }

    /// The own relay serves `events`: an announcement of a repository the
    /// host held promotes it — the host stored it, so its git data arrived
    /// (`SyncEngine::handle_repository_promoted`, without the host having to
    /// say so). Events the store merely answered for are not served ones:
    /// a held announcement is answered `Held`, never seen here. `true` if
    /// any was promoted.
    fn promote_served(&mut self, now: Now, events: &[Event]) -> bool {
        let promoted: Vec<RepoRef> = events
            .iter()
            .filter_map(announced_repo)
            .filter(|repo| self.held.is_held(repo))
            .collect();
        for repo in &promoted {
            info!(%repo, "the own relay serves the held repository's announcement; promoting it");
            self.promote(now, repo.clone());
        }
        !promoted.is_empty()
    }

    /// `true` once the own relay's history was read completely on its
    /// current connection (every page of the self-subscription's history
    /// query, up to an EOSE that brought nothing more), and always without
    /// an own relay (an embedding relay hands its events in process).
    pub fn own_history_complete(&self) -> bool {
        self.own.history_complete()
    }

    /// Queues accepted events for the self-subscriber batch.
    fn queue_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        if self.own.queue(events) {
            self.start_own_batch_window(now);
        }
    }

    /// Events were queued for the self-subscriber: its batch window starts
    /// unless it runs already.
    fn start_own_batch_window(&mut self, now: Now) {
        let closes = now.instant + self.config.timeouts.batch_window;
        self.timers.set_unless_set(EngineTimer::OwnBatch, closes);
    }

    /// The own relay session's timers (`RelaySession::handle_timeout`) and its reconnect once the backoff is over (`RelaySession::connect_if_due`).
    fn own_timeout(&mut self, now: Now) {
        let Some(relay) = self.own.url().cloned() else {
            return;
        };
        let (_, own, mut cx) = self.split(&relay);
        if let Some(session) = own.session_mut() {
            // The own relay is never planned: a re-plan is not its.
            let _replan = session.handle_timeout(&mut cx, now);
            session.connect_if_due(&mut cx, now.instant);
        }
        self.end_input(now);
    }

    // --- After every input ---------------------------------------------------

    /// Sends the store the parked events free to go: what they needed was
    /// answered, or the batch that might still bring it ended
    /// ([`StoreTracker::release_parked`]).
    fn release_parked(&mut self, now: Now) {
        let relays = &self.relays;
        let running = |relay: &RelayUrl, batch: BatchId| {
            relays
                .get(relay)
                .is_some_and(|session| session.batch_running(batch))
        };
        let ids = self.repos.ids();
        let known = |id: &EventId| ids.root_id(id).is_some();
        let released = self
            .stores
            .release_parked(now.instant, running, known, &self.config);
        for command in released {
            self.emit(command);
        }
    }

    /// Takes the session events queued so far: each is counted
    /// ([`EngineStats::count`]) and what it reaches beyond its relay is
    /// gathered ([`Reached::note`]); events queued for the self-subscriber
    /// start its batch window. A store that started falling behind or
    /// caught up reaches every relay.
    fn absorb(&mut self, now: Now) {
        for event in self.events.take() {
            self.stats.count(&event);
            self.reached.note(&event);
            if let SessionEvent::OwnEvent(event) = event {
                self.stores.note_in_store(&event);
                if self.promote_served(now, std::slice::from_ref(&*event)) {
                    self.reached.others = true;
                }
                self.queue_own_events(now, [*event]);
            }
        }
        if self.stores.pace_changed(&self.config) {
            self.reached.others = true;
        }
    }

    /// The end of an input: what its last steps queued is counted; what
    /// they reach beyond their relay was acted on by the steps themselves
    /// (a completed history read waits for the next planning).
    fn end_input(&mut self, now: Now) {
        self.absorb(now);
        // What the absorbed own events showed stored frees parked events.
        self.release_parked(now);
        self.reached.others = false;
    }

    /// After an input on `relay` (or on no relay: a store answer, the own
    /// relay): only `relay` is pumped unless the input reached further than
    /// it (its session events say so, or the engine added or dropped a
    /// relay), then everything is.
    fn maintain_after(&mut self, now: Now, relay: Option<&RelayUrl>) {
        self.release_parked(now);
        self.plan_completed_history(now);
        if self.reached.others {
            return self.maintain(now);
        }
        self.observe(now);
        if let Some(relay) = relay {
            self.pump(now, relay);
            self.refresh_deadline(relay);
        }
        self.end_input(now);
    }

    /// After an input that may concern any relay: connect relays whose
    /// backoff allows it, start queued work where limits allow.
    fn maintain(&mut self, now: Now) {
        self.observe(now);
        self.release_parked(now);
        self.plan_completed_history(now);
        self.connect_ready_relays(now);
        let relays: Vec<RelayUrl> = self.relays.connected().cloned().collect();
        for relay in relays {
            self.pump(now, &relay);
        }
        self.refresh_all_deadlines();
        self.end_input(now);
    }

    /// Announcements and root events that came with a history read that
    /// ended — a Layer 1 or Layers 2+3 batch of any relay confirmed since —
    /// are planned at once: the self-subscriber's batch window gathers a
    /// drip of live events, it is no reason to wait for completed work (the
    /// own relay's history read is planned when read, too:
    /// `SessionEvent::OwnHistoryRead`).
    fn plan_completed_history(&mut self, now: Now) {
        self.absorb(now);
        if std::mem::take(&mut self.reached.history_read)
            && self.timers.is_set(EngineTimer::OwnBatch)
        {
            self.process_own_batch(now);
            self.reached.others = true;
        }
    }

    // --- Deadlines -----------------------------------------------------------

    /// Refreshes `relay`'s entry in the deadline table
    /// ([`RelaySession::next_deadline`]).
    fn refresh_deadline(&mut self, relay: &RelayUrl) {
        let at = self
            .relays
            .get(relay)
            .and_then(|session| session.next_deadline(self.last_now(), &self.config))
            .map(|(kind, at)| {
                tracing::trace!(%relay, ?kind, %at, "relay's next deadline");
                at
            });
        self.deadlines.set(relay, at);
    }

    /// Rebuilds the deadline table for every relay the engine knows.
    fn refresh_all_deadlines(&mut self) {
        let relays: Vec<RelayUrl> = self.relays.urls().cloned().collect();
        self.deadlines.clear();
        for relay in relays {
            self.refresh_deadline(&relay);
        }
    }

    // --- Reports ---------------------------------------------------------------

    /// Every tracked relay, in registration order.
    pub fn relay_reports(&self) -> Vec<RelayReport> {
        self.relays
            .tracked()
            .map(|(relay, state)| self.relay_report(relay, state))
            .collect()
    }

    fn relay_report(&self, relay: &RelayUrl, state: &RelayState) -> RelayReport {
        let known = self.relays.get(relay);
        let nip77 = known.map_or(self.config.negentropy, |known| {
            known.nip77_usable(&self.config)
        });
        let health = &self.config.health;
        let retry_at = known.and_then(|known| known.retry_at(health));
        RelayReport {
            relay: relay.clone(),
            connection: self.relays.view(relay).connection_status(),
            health: self
                .relays
                .view(relay)
                .health_state(self.last_now(), health),
            method: if nip77 {
                SyncMethod::Negentropy
            } else {
                SyncMethod::ReqEose
            },
            events_received: known.map_or(0, RelaySession::events_received),
            events_received_again: known.map_or(0, RelaySession::events_received_again),
            events_stored: known.map_or(0, RelaySession::events_stored),
            historic_confirmed: self.relay_confirmed(relay, state),
            unreachable: self.relay_unreachable(relay),
            last_error: known
                .and_then(RelaySession::last_error)
                .map(|text| text.as_str().to_owned()),
            retry_at,
            live_mode: self
                .relay_activity(relay)
                .map(|activity| activity.live_mode),
            reasons: self.sync_reasons(relay, state),
        }
    }

    /// Why `relay` is synced ([`SyncReasons`]).
    fn sync_reasons(&self, relay: &RelayUrl, state: &RelayState) -> SyncReasons {
        SyncReasons {
            bootstrap: state.is_bootstrap,
            announcement: self.repo_relays.is_announced(relay),
            index: self.repo_relays.is_index(relay),
            outbox: self.repo_relays.is_outbox(relay),
        }
    }

    /// What Sync+ holds now (GRASP-03): participants, their relay lists,
    /// the outbox relays synced from.
    pub fn sync_plus_counts(&self) -> SyncPlusCounts {
        self.repo_relays.counts()
    }

    /// `true` when historic sync is confirmed on every reachable relay: the
    /// own relay's history read ([`SyncEngine::own_history_complete`], true
    /// without an own relay), the self-subscriber's batch processed, every
    /// event handed to the store stored, and every relay either confirmed or
    /// unreachable
    /// ([`Timeouts::unreachable_after`](super::Timeouts::unreachable_after)
    /// failed connects in a row, or dead). Unlike
    /// [`SyncEngine::is_idle`], one unreachable relay does not hold it up.
    /// The one answer to "is historic sync complete?": the tokio adapter's
    /// status reports it as it is.
    pub fn historic_sync_complete(&self) -> bool {
        self.own_history_complete() && self.historic_sync_confirmed(true)
    }

    /// Is historic sync confirmed? Nothing waits for the store, and every
    /// tracked relay is confirmed or, if `leave_out_unreachable`,
    /// unreachable: the tests [`SyncEngine::historic_sync_complete`] and
    /// [`SyncEngine::is_idle`] both ask.
    fn historic_sync_confirmed(&self, leave_out_unreachable: bool) -> bool {
        self.nothing_waits_for_the_store()
            && self.relays.tracked().all(|(relay, state)| {
                (leave_out_unreachable && self.relay_unreachable(relay))
                    || self.relay_confirmed(relay, state)
            })
    }

    /// The self-subscriber's batch is processed and every event handed to
    /// the store was stored (or refused for good).
    fn nothing_waits_for_the_store(&self) -> bool {
        self.own.nothing_queued() && self.stores.in_flight() == 0
    }

    /// Connected, nothing pending or queued, Layer 1 and every target item
    /// confirmed.
    fn relay_confirmed(&self, relay: &RelayUrl, state: &RelayState) -> bool {
        self.relays.is_connected(relay)
            && (state.announcements_synced || !self.discovers(relay))
            && self.relays.view(relay).batch_count() == 0
            && self.relays.view(relay).is_quiet()
            && self.repos.target(relay).is_none_or(|target| {
                target.repos.is_subset(&state.repos)
                    && target.root_events.is_subset(&state.root_events)
            })
            && self.repo_relays.lookups_confirmed(relay, &state.authors)
    }

    /// Not connected, and failing to connect for the configured number of
    /// attempts in a row, or dead.
    fn relay_unreachable(&self, relay: &RelayUrl) -> bool {
        let Some(session) = self.relays.get(relay) else {
            return false;
        };
        !session.is_connected()
            && (session.health().consecutive_failures() >= self.config.timeouts.unreachable_after
                || session.health_state(self.last_now(), &self.config.health) == HealthState::Dead)
    }

    /// What is open and waiting on `relay`, if connected
    /// (asked of its session).
    pub fn relay_activity(&self, relay: &RelayUrl) -> Option<RelayActivity> {
        self.relays.get(relay)?.activity(&self.config)
    }

    /// Events handed to the store and not confirmed yet (not answered,
    /// waiting for a retry, or waiting for what they need to go first).
    pub fn unconfirmed_stores(&self) -> usize {
        self.stores.in_flight()
    }

    /// Events the store refused for now, waiting for their retry.
    pub fn store_retries_waiting(&self) -> usize {
        self.stores.retrying()
    }

    /// Events not sent to the store yet, waiting for what they need to
    /// reach it first (their repository's announcement, the event they
    /// reply to): counted in [`SyncEngine::unconfirmed_stores`] too.
    pub fn store_dependents_waiting(&self) -> usize {
        self.stores.parked()
    }

    /// The last event the store refused for good (counted in
    /// [`EngineStats::store_refused`]): its kind, id, the relay it came from
    /// and the store's reason, clipped. `None` until the store refuses one.
    pub fn last_store_refusal(&self) -> Option<&crate::store::StoreRefusal> {
        self.stores.last_refusal()
    }
}

/// An input on a relay's connection, as the driver reports it through the
/// public `handle_*` methods, routed once to the own relay's session or the
/// remote relay's ([`SyncEngine::route`]). `S` is how a checked event's
/// subscription id is held ([`SyncEngine::handle_checked_events`]).
enum RelayInput<'a, S> {
    /// The connection opened.
    Connected,
    /// The connection attempt failed.
    ConnectFailed,
    /// The connection dropped.
    Disconnected,
    /// A sign of life that is not a message (a pong).
    Alive,
    /// The relay's NIP-11 limits.
    Limits(RelayLimits),
    /// A relay message.
    Message(RelayMessage<'a>),
    /// `EVENT`s the driver checked, in the order they arrived.
    CheckedEvents(&'a mut dyn Iterator<Item = (S, Result<VerifiedEvent, Refused>)>),
    /// An event the driver refused before it could be parsed.
    Refused(Refused),
    /// A message over the driver's size limit ended the connection.
    TooLarge(usize),
    /// The connection could not take a command's message.
    SendFailed(&'a TransportError),
}

/// A [`RelayInput`] that carries no checked events.
type Input<'a> = RelayInput<'a, SubscriptionId>;

/// Relay URLs refused by the policy that are warned about once each.
const REFUSED_RELAYS_REMEMBERED: usize = 10_000;

#[cfg(test)]
mod tests {
    //! Which Layer 1 events are ours ([`SyncEngine::is_ours`] and
    //! [`SyncEngine::admit_ours`]).
    use super::*;
    use crate::engine::MAX_CANDIDATES;
    use crate::nip34::test_support::signed_event_by;
    use grasp_sync_test_support::ids::T0;
    use grasp_sync_test_support::nip34::Announcement;
    use nostr::prelude::Keys;

    fn own() -> RelayUrl {
        RelayUrl::parse("wss://own.example.com").expect("url")
    }

    fn remote() -> RelayUrl {
        RelayUrl::parse("wss://remote.example.com").expect("url")
    }

    fn now() -> Now {
        Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000))
    }

    fn engine(service: Vec<RelayUrl>) -> SyncEngine {
        let mut config = EngineConfig::default();
        config.identity.service_relays = service;
        SyncEngine::new(config, now()).expect("a valid configuration")
    }

    fn verified(event: Event) -> VerifiedEvent {
        VerifiedEvent::verify(event).expect("signed")
    }

    /// "Is historic sync complete?" asks the own relay's history: not before
    /// its EOSE, yes after it, and always yes without an own relay.
    #[test]
    fn historic_sync_is_complete_once_the_own_relays_history_was_read() {
        let mut config = EngineConfig::default();
        config.identity.own_relay = Some(own());
        let mut engine = SyncEngine::new(config, now()).expect("a valid configuration");
        assert!(!engine.historic_sync_complete(), "nothing read yet");
        engine.handle_timeout(now());
        engine.handle_connected(now(), &own());
        let mut history = None;
        while let Some(command) = engine.poll_command() {
            if let Command::Subscribe { id, filters, .. } = command {
                if filters[0].limit != Some(0) {
                    history = Some(id);
                }
            }
        }
        let history = history.expect("the history query");
        assert!(
            !engine.historic_sync_complete(),
            "connected, its history not read"
        );
        engine.handle_relay_message(now(), &own(), RelayMessage::eose(history));
        assert!(engine.own_history_complete());
        assert!(engine.historic_sync_complete(), "the history was read");

        let without =
            SyncEngine::new(EngineConfig::default(), now()).expect("a valid configuration");
        assert!(without.own_history_complete());
        assert!(without.historic_sync_complete(), "no own relay to read");
    }

    fn announcement(keys: &Keys, id: &str, relays: &[&RelayUrl], maintainers: &[&Keys]) -> Event {
        Announcement::new(id)
            .relays(relays.iter())
            .maintainers(maintainers.iter().map(|keys| keys.public_key()))
            .sign(keys)
    }

    fn state(keys: &Keys, id: &str) -> Event {
        grasp_sync_test_support::nip34::state(keys, id, &[], T0)
    }

    fn stored(engine: &mut SyncEngine) -> Vec<nostr::prelude::EventId> {
        std::iter::from_fn(|| engine.poll_command())
            .filter_map(|command| match command {
                Command::Store { event, .. } => Some(event.id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_own_relay_s_echo_of_what_we_stored_is_not_queued_again() {
        let mut config = EngineConfig::default();
        config.identity.service_relays = vec![own()];
        config.identity.own_relay = Some(own());
        let mut engine = SyncEngine::new(config, now()).expect("valid config");
        engine.handle_timeout(now());
        engine.handle_connected(now(), &own());
        let keys = Keys::generate();
        let ours = announcement(&keys, "stored-by-us", &[&own()], &[]);
        let theirs = announcement(&keys, "published-to-the-relay", &[&own()], &[]);
        engine.stores.note_stored_lately(ours.id);
        let live = SubscriptionId::new("grasp-sync-own-live");
        let event = |event: &Event| RelayMessage::event(live.clone(), event.clone());
        engine.handle_relay_message(now(), &own(), event(&ours));
        assert!(engine.own.nothing_queued(), "an echo is not queued");
        assert_eq!(engine.stats.own_echoes, 1);
        engine.handle_relay_message(now(), &own(), event(&theirs));
        assert_eq!(
            engine
                .own
                .take_queued()
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>(),
            vec![theirs.id],
            "an event someone else published is queued"
        );
        assert_eq!(engine.stats.own_echoes, 1);
    }

    /// The own relay's connect attempt is given up after the configured
    /// connect timeout (the base backoff), like any relay's, and it is
    /// connected again after its own backoff.
    #[test]
    fn the_own_relay_s_connect_timeout_is_the_configured_one() {
        let base = std::time::Duration::from_secs(9);
        let mut config = EngineConfig::default();
        config.identity.own_relay = Some(own());
        config.health.backoff = crate::health::ExponentialBackoff::new(base, base * 10);
        let mut engine = SyncEngine::new(config, now()).expect("valid config");
        engine.handle_timeout(now());
        assert!(matches!(
            engine.poll_command(),
            Some(Command::Connect { relay, timeout }) if relay == own() && timeout == base
        ));
        assert_eq!(engine.poll_timeout(), Some(now().instant + base));
        let late = Now::new(now().instant + base, now().unix);
        engine.handle_timeout(late);
        assert!(
            matches!(engine.poll_command(), Some(Command::Disconnect { relay }) if relay == own())
        );
        let backoff = engine.config().health.own_relay_backoff.base;
        assert_eq!(engine.poll_timeout(), Some(late.instant + backoff));
    }

    #[test]
    fn an_invalid_configuration_is_an_error_when_the_engine_is_built() {
        let mut config = EngineConfig::default();
        config.limits.page_limit = 0;
        assert_eq!(
            SyncEngine::new(config, now()).err(),
            Some(ConfigError::Zero("page_limit"))
        );
    }

    #[test]
    fn without_service_relays_everything_is_ours() {
        let engine = engine(Vec::new());
        let keys = Keys::generate();
        let foreign = announcement(&keys, "x", &[&remote()], &[]);
        assert_eq!(engine.is_ours(&foreign), Layer1Verdict::Store);
        assert_eq!(engine.is_ours(&state(&keys, "x")), Layer1Verdict::Store);
    }

    #[test]
    fn an_announcement_is_ours_only_if_it_lists_our_service() {
        let mut engine = engine(vec![own()]);
        let keys = Keys::generate();
        let ours = announcement(&keys, "a", &[&own(), &remote()], &[]);
        let foreign = announcement(&keys, "b", &[&remote()], &[]);
        assert_eq!(engine.is_ours(&ours), Layer1Verdict::Store);
        assert_eq!(engine.is_ours(&foreign), Layer1Verdict::Hold);
        assert!(!engine.admit_ours(&remote(), &verified(foreign)));
        assert_eq!(engine.stats().not_ours, 1);
        // Other kinds are not Layer 1's to judge.
        let issue = signed_event_by(&keys, 1621, &[&["a", "30617:x:y"]]);
        assert_eq!(engine.is_ours(&issue), Layer1Verdict::Store);
    }

    #[test]
    fn a_state_is_ours_only_for_a_repository_of_ours() {
        let mut engine = engine(vec![own()]);
        let (owner, stranger) = (Keys::generate(), Keys::generate());
        let ours = verified(announcement(&owner, "a", &[&own()], &[]));
        assert!(engine.admit_ours(&remote(), &ours));
        engine.store_if_ours(now(), &remote(), ours, None);
        assert_eq!(engine.is_ours(&state(&owner, "a")), Layer1Verdict::Store);
        assert_eq!(engine.is_ours(&state(&stranger, "a")), Layer1Verdict::Hold);
        assert_eq!(engine.is_ours(&state(&owner, "other")), Layer1Verdict::Hold);
    }

    #[test]
    fn a_maintainers_announcement_and_state_before_the_owners_are_stored_with_it() {
        let mut engine = engine(vec![own()]);
        let (owner, maintainer) = (Keys::generate(), Keys::generate());
        // The maintainer's announcement does not list us; it came first.
        let theirs = announcement(&maintainer, "a", &[&remote()], &[]);
        let their_state = state(&maintainer, "a");
        assert!(!engine.admit_ours(&remote(), &verified(theirs.clone())));
        assert!(!engine.admit_ours(&remote(), &verified(their_state.clone())));
        assert!(stored(&mut engine).is_empty());
        // The owner's announcement, listing us and the maintainer.
        let owners = announcement(&owner, "a", &[&own()], &[&maintainer]);
        engine.accept_ours(now(), &owners);
        // The maintainer's announcement goes to the store first; their
        // state once it is answered (dependency order).
        assert_eq!(stored(&mut engine), vec![theirs.id]);
        assert_eq!(engine.stats().candidates_stored, 2);
        assert_eq!(engine.store_dependents_waiting(), 1);
        engine.handle_store_outcome(now(), &theirs.id, Ok(IngestOutcome::Stored));
        assert_eq!(stored(&mut engine), vec![their_state.id]);
        // A stranger's candidate stays held.
        let stranger = Keys::generate();
        assert!(!engine.admit_ours(&remote(), &verified(state(&stranger, "a"))));
    }

    /// The own relay serving a held repository's announcement promotes it,
    /// with no `handle_repository_promoted` from the host; another
    /// repository's announcement promotes nothing.
    #[test]
    fn a_held_repository_is_promoted_when_the_own_relay_serves_its_announcement() {
        let mut engine = engine(vec![own()]);
        let owner = Keys::generate();
        let held = RepoRef::new(owner.public_key(), "held").expect("repo");
        let other = RepoRef::new(owner.public_key(), "other").expect("repo");
        engine.handle_repository_held(now(), held.clone());
        engine.handle_repository_held(now(), other.clone());
        assert!(engine.is_repository_held(&held));
        engine.handle_own_events(now(), [announcement(&owner, "held", &[&own()], &[])]);
        assert!(!engine.is_repository_held(&held), "served, so promoted");
        assert!(engine.is_repository_held(&other), "not served: still held");
        assert_eq!(engine.held_repositories().count(), 1);
    }

    #[test]
    fn candidates_are_bounded() {
        let mut engine = engine(vec![own()]);
        let keys = Keys::generate();
        for n in 0..MAX_CANDIDATES + 10 {
            let event = announcement(&keys, &format!("r{n}"), &[&remote()], &[]);
            engine.admit_ours(&remote(), &verified(event));
        }
        assert_eq!(engine.ours.candidates().len(), MAX_CANDIDATES);
        assert_eq!(engine.stats().candidates_dropped, 10);
    }
}
