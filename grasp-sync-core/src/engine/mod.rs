//! The GRASP-02 sync engine: what to subscribe on which relay and when, as a
//! deterministic state machine.
//!
//! [`SyncEngine`] holds what spans relays — the repository index and its
//! relay targets, the store tracker, the own relay, the caps — and one
//! session per relay holding everything about that relay: what it
//! confirmed (the spec's `RelayState`) and its batches in flight, what was
//! learned, its health and retries, its connection, its timers. It does no
//! I/O and reads no clock: its driver feeds it inputs (`handle_*`, each with
//! the [`Now`] at which it happened) and executes the [`Command`]s it emits.
//!
//! # Driving contract
//!
//! 1. Create the engine; call [`SyncEngine::handle_timeout`] once to start.
//! 2. After **every** `handle_*` call, drain [`SyncEngine::poll_command`]
//!    until it returns `None` and execute each command
//!    ([`SyncEngine::execute_commands`] does both): [`Command::Connect`] /
//!    [`Command::Disconnect`] / [`Command::Forget`] open and close the
//!    relay's connection, the other relay commands send
//!    [`Command::client_message`] on it, [`Command::QueryLocalItems`] is
//!    answered with [`SyncEngine::handle_local_items`], [`Command::Store`]
//!    goes to the store. A connection that cannot take a message is
//!    reported with [`SyncEngine::handle_send_failed`].
//! 3. Wake up at [`SyncEngine::poll_timeout`] and call
//!    [`SyncEngine::handle_timeout`]. Waking early or twice is harmless.
//! 4. Feed what happens on every connection — the own relay's
//!    ([`EngineConfig::own_relay`]) included, the engine tells it apart by
//!    its URL: connection outcomes ([`SyncEngine::handle_connected`],
//!    [`SyncEngine::handle_connect_failed`],
//!    [`SyncEngine::handle_disconnected`]), every relay message
//!    ([`SyncEngine::handle_relay_message`]), each WebSocket pong
//!    ([`SyncEngine::handle_relay_alive`]: a relay is alive while it sends
//!    anything, pongs included; ping at least every
//!    [`EngineConfig::liveness_probe_interval`]) and NIP-11 limits
//!    ([`SyncEngine::handle_relay_limits`]). A relay that embeds the library
//!    has no own relay connection: it hands accepted events to
//!    [`SyncEngine::handle_own_events`].
//!
//! ```no_run
//! use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
//! use grasp_sync_core::{Clock, SystemClock};
//!
//! let clock = SystemClock::new();
//! let mut engine = SyncEngine::new(EngineConfig::default(), clock.read());
//! engine.handle_timeout(clock.read());
//! loop {
//!     engine.execute_commands(clock.read(), |command| {
//!         match command {
//!             Command::Store { event, .. } => { /* store.ingest(&event) */ }
//!             other => { /* connect, or send other.client_message() */ let _ = other; }
//!         }
//!         Ok(())
//!     });
//!     // wait for the next relay message, own-relay event or the deadline
//!     // engine.poll_timeout(), then feed it:
//!     engine.handle_timeout(clock.read());
//! }
//! ```
//!
//! # What it guarantees
//! - An event reaches [`Command::Store`] only if its id and signature verify
//!   and it matches a filter of the subscription it arrived on; otherwise it is
//!   counted in [`EngineStats`] and dropped.
//! - A relay is never sent more concurrent subscriptions (REQs plus NIP-77
//!   sessions) than the smallest limit known for it: the configured default,
//!   its NIP-11 `max_subscriptions`, or the count at which it refused one.
//! - Items of a batch that fails (CLOSED, timeout, disconnect) are planned
//!   again; nothing is silently dropped.

mod batches;
mod caps;
mod catch_up;
// Each question has one function that holds its decision; ARCHITECTURE.md's
// "Where each decision is made" table names them. Per-relay state and
// answers: relay_session (RelaySession, Relays); timers: timer_table.
mod classify;
mod command;
mod config;
mod connection;
mod deadlines;
mod dispatch;
mod frames;
mod live;
mod messages;
mod nip77;
mod ours;
mod outbox;
mod own_relay;
mod planning;
mod refusals;
mod relay_session;
mod report;
mod runtime;
mod scheduler;
mod sent_replies;
mod session;
mod stats;
mod stores;
mod timer_table;
mod timers;
mod trust;
mod upkeep;

use std::collections::HashMap;

use nostr::prelude::{EventId, RelayMessage, RelayUrl, SubscriptionId, Timestamp};

use crate::clock::{Instant, Now};
use crate::health::{HealthCounts, HealthState, RelayHealth};
use crate::model::{BatchId, PendingBatch, RelayState};
use crate::planner::RepoSyncIndex;
use crate::verified::{Forged, VerifiedEvent};

pub use classify::{classify, Classified, Prefix};
pub use command::Command;
pub use config::{
    ConfigError, EngineConfig, RelayLimits, DEFAULT_FRAME_BUDGET, MIN_FRAME_BUDGET,
    MIN_NEGENTROPY_FRAME,
};
pub use frames::req_frame_len;
pub use ours::MAX_CANDIDATES;
pub use report::RelayReport;
pub use session::SessionError;
pub use stats::{EngineStats, LiveMode, RelayActivity};
pub use stores::StoreVerdict;

use config::Jitter;
use own_relay::OwnRelay;
use relay_session::{RelaySession, Relays};
use runtime::RelayConn;
use stores::StoreTracker;
use timer_table::{EngineTimer, TimerTable};

/// The sync engine. See the [module documentation](self) for the driving
/// contract.
///
/// ```
/// use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
/// use grasp_sync_core::{Instant, Now};
/// use nostr::prelude::{RelayUrl, Timestamp};
///
/// let start = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
/// let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
/// let config = EngineConfig {
///     bootstrap_relays: vec![relay.clone()],
///     ..EngineConfig::default()
/// };
/// let mut engine = SyncEngine::new(config, start);
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
    /// Every relay's session: what we learned, its connection, its timers.
    relays: Relays,
    own: OwnRelay,
    /// Which Layer 1 events are ours to store, and those waiting to be.
    ours: ours::Ours,
    stores: StoreTracker,
    /// Each relay's next deadline (timers as data).
    deadlines: deadlines::DeadlineTable,
    /// Relay URLs the policy refused (warned about once each).
    refused_relays: std::collections::HashSet<RelayUrl>,
    /// Repositories some of whose relays wait for room under
    /// [`EngineConfig::max_relays`]: every relay they list within the
    /// per-announcement cap.
    over_cap: HashMap<crate::nip34::RepoRef, Vec<RelayUrl>>,
    /// The commands for the driver, the ids handed out, the latest `now`.
    out: outbox::Outbox,
    /// The engine's own timers: the daily re-sync, the disconnect check, the
    /// self-subscriber's batch window.
    timers: TimerTable<EngineTimer>,
    jitter: Jitter,
    stats: EngineStats,
}

impl SyncEngine {
    /// A new engine; bootstrap relays are registered and connect on the
    /// first [`SyncEngine::handle_timeout`].
    pub fn new(config: EngineConfig, now: Now) -> Self {
        let mut jitter = Jitter::new(config.seed);
        let mut timers = TimerTable::default();
        timers.set(
            EngineTimer::Daily,
            now.instant + jitter.between(config.daily_min, config.daily_max),
        );
        timers.set(
            EngineTimer::DisconnectCheck,
            now.instant + config.disconnect_check_interval,
        );
        let own = OwnRelay::new(config.own_relay.clone(), now.instant);
        let mut engine = SyncEngine {
            repos: RepoSyncIndex::new(),
            relays: Relays::default(),
            own,
            ours: ours::Ours::default(),
            stores: StoreTracker::default(),
            deadlines: deadlines::DeadlineTable::default(),
            refused_relays: Default::default(),
            over_cap: HashMap::new(),
            out: outbox::Outbox::new(now.instant),
            timers,
            jitter,
            stats: EngineStats::default(),
            config,
        };
        for relay in engine.config.bootstrap_relays.clone() {
            if engine.own.is_for(&relay) {
                tracing::warn!(%relay, "the own relay is not synced from as a bootstrap relay");
                continue;
            }
            engine.register_relay(relay, true);
        }
        engine
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

    /// Every tracked relay with what it confirmed and its connection
    /// status (the spec's `RelaySyncIndex`), in the order first met.
    pub fn relay_states(&self) -> impl Iterator<Item = (&RelayUrl, &RelayState)> {
        self.relays.tracked()
    }

    /// What `relay` confirmed and its connection status, if it is tracked.
    pub fn relay_state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.relays.state(relay)
    }

    /// `relay`'s batches in flight (its part of the spec's
    /// `PendingSyncIndex`), oldest first.
    pub fn pending_batches(&self, relay: &RelayUrl) -> &[PendingBatch] {
        self.relays.view(relay).pending.batches()
    }

    /// The connection health of `relay`, if the engine knows it.
    pub fn relay_health(&self, relay: &RelayUrl) -> Option<&RelayHealth> {
        self.relays.get(relay).map(|session| &session.health)
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
            counts.add(state, session.health.is_connected());
        }
        counts
    }

    /// The next command for the driver, oldest first.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop()
    }

    /// `true` when every registered relay is connected, nothing is pending
    /// or queued, and every target item is confirmed: historic sync is
    /// confirmed everywhere.
    pub fn is_idle(&self) -> bool {
        self.own.queued.is_empty()
            && self.stores.in_flight() == 0
            && self.relays.batch_count() == 0
            && self
                .relays
                .connections()
                .map(|(_, conn)| conn)
                .all(RelayConn::is_quiet)
            && self.relays.tracked().all(|(relay, state)| {
                self.relays.is_connected(relay)
                    && state.announcements_synced
                    && self.repos.target(relay).is_none_or(|target| {
                        target.repos.is_subset(&state.repos)
                            && target.root_events.is_subset(&state.root_events)
                    })
            })
    }

    /// A relay's NIP-11 limits.
    pub fn handle_relay_limits(&mut self, now: Now, relay: &RelayUrl, limits: RelayLimits) {
        self.observe(now);
        if self.own.is_for(relay) {
            return;
        }
        self.knowledge(relay).limits = limits;
        self.maintain(now);
    }

    /// The store's answer to [`Command::QueryLocalItems`].
    pub fn handle_local_items(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        items: Vec<(EventId, Timestamp)>,
    ) {
        self.observe(now);
        let mut items = items;
        let filter = self
            .relays
            .get(relay)
            .and_then(|session| session.negentropy_filter(id));
        if let Some(filter) = filter {
            // Refused events count as held: not downloaded again.
            items.extend(self.stores.refused_items(filter));
        }
        self.open_negentropy(now, relay, id, &items);
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
        let failure = nip77::NegFailure::StoreCannotList(reason);
        self.negentropy_failed(now, relay, id, failure);
        self.maintain(now);
    }

    /// A message from a relay.
    pub fn handle_relay_message(&mut self, now: Now, relay: &RelayUrl, message: RelayMessage<'_>) {
        self.observe(now);
        if self.own.is_for(relay) {
            return self.on_own_message(now, message);
        }
        let before = self.reach();
        self.on_relay_message(now, relay, message);
        self.maintain_after(now, Some(relay), before);
    }

    /// An `EVENT` from a relay that the driver verified already (or found
    /// forged) — e.g. in parallel on its own threads: the engine does not
    /// verify it again. Same as passing the `EVENT` to
    /// [`SyncEngine::handle_relay_message`] otherwise.
    pub fn handle_checked_event(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Forged>,
    ) {
        self.observe(now);
        if self.own.is_for(relay) {
            return self.on_own_checked_event(now, subscription_id, checked);
        }
        let before = self.reach();
        self.on_checked_event(now, relay, subscription_id, checked);
        self.maintain_after(now, Some(relay), before);
    }

    /// Timers: the self-subscriber batch window and connection, connection retries and
    /// timeouts, batch and negentropy timeouts, rate-limit recovery, delayed
    /// re-planning, the daily re-sync and the check for relays to drop.
    pub fn handle_timeout(&mut self, now: Now) {
        self.observe(now);
        if self.timers.is_due(EngineTimer::OwnBatch, now.instant) {
            self.process_own_batch(now);
        }
        self.run_store_timers(now);
        self.run_polls(now);
        self.expire_connects(now);
        self.expire_batches(now);
        self.run_retries(now);
        if self.timers.fire(EngineTimer::Daily, now.instant) {
            self.daily_sync(now);
            let next = self
                .jitter
                .between(self.config.daily_min, self.config.daily_max);
            self.timers.set(EngineTimer::Daily, now.instant + next);
        }
        if self.timers.fire(EngineTimer::DisconnectCheck, now.instant) {
            self.check_disconnects(now);
            let next = now.instant + self.config.disconnect_check_interval;
            self.timers.set(EngineTimer::DisconnectCheck, next);
        }
        self.maintain(now);
        self.run_own_relay(now);
    }

    /// The next instant [`SyncEngine::handle_timeout`] has work to do: the
    /// earliest of the engine's own timers and the relays' deadline table
    /// (no scan over relays, subscriptions or batches).
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.timers.earliest(),
            self.own.deadline(),
            self.stores.next_deadline(self.config.store_timeout),
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

    fn knowledge(&mut self, relay: &RelayUrl) -> &mut RelaySession {
        self.relays.entry(relay.clone())
    }

    fn next_sub_id(&mut self, purpose: &str) -> SubscriptionId {
        self.out.sub_id(purpose)
    }

    fn next_batch_id(&mut self) -> BatchId {
        self.out.batch_id()
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
}
