//! The GRASP-02 sync engine: what to subscribe on which relay and when, as a
//! deterministic state machine.
//!
//! [`SyncEngine`] owns the three indexes of the spec (repository targets,
//! confirmed state, pending batches) and the relay health tracker. It does no
//! I/O and reads no clock: its driver feeds it inputs (`handle_*`, each with
//! the [`Now`] at which it happened) and executes the [`Command`]s it emits.
//!
//! # Driving contract
//!
//! 1. Create the engine; call [`SyncEngine::handle_timeout`] once to start.
//! 2. After **every** `handle_*` call, drain [`SyncEngine::poll_command`]
//!    until it returns `None` and execute each command: transport commands go
//!    to the relay's connection, [`Command::QueryLocalItems`] is answered with
//!    [`SyncEngine::handle_local_items`], [`Command::Store`] goes to the store.
//! 3. Wake up at [`SyncEngine::poll_timeout`] and call
//!    [`SyncEngine::handle_timeout`]. Waking early or twice is harmless.
//! 4. Feed what happens: events the own relay accepted
//!    ([`SyncEngine::handle_own_events`]), connection outcomes
//!    ([`SyncEngine::handle_connected`], [`SyncEngine::handle_connect_failed`],
//!    [`SyncEngine::handle_disconnected`]), every relay message
//!    ([`SyncEngine::handle_relay_message`]) and NIP-11 limits
//!    ([`SyncEngine::handle_relay_limits`]).
//!
//! ```no_run
//! use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
//! use grasp_sync_core::{Clock, SystemClock};
//!
//! let clock = SystemClock::new();
//! let mut engine = SyncEngine::new(EngineConfig::default(), clock.read());
//! engine.handle_timeout(clock.read());
//! loop {
//!     while let Some(command) = engine.poll_command() {
//!         match command {
//!             Command::Store { event, .. } => { /* store.ingest(&event) */ }
//!             other => { /* send to the relay's connection */ let _ = other; }
//!         }
//!     }
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

mod classify;
mod command;
mod config;
mod connection;
mod dispatch;
mod frames;
mod jobs;
mod messages;
mod planning;
mod runtime;
mod session;
mod stores;

use std::collections::{HashMap, VecDeque};

use nostr::prelude::{Event, EventId, RelayMessage, RelayUrl, SubscriptionId, Timestamp};

use crate::clock::{Instant, Now};
use crate::health::HealthTracker;
use crate::model::{BatchId, PendingSyncIndex, RelaySyncIndex};
use crate::nip34::RepoRef;
use crate::planner::RepoSyncIndex;

pub use classify::{classify, Classified, Prefix};
pub use command::Command;
pub use config::{EngineConfig, RelayLimits, DEFAULT_FRAME_BUDGET, MIN_FRAME_BUDGET};
pub use dispatch::{execute, CommandSink};
pub use frames::req_frame_len;
pub use session::SessionError;
pub use stores::StoreVerdict;

use config::Jitter;
use runtime::{BatchInfo, RelayConn, RelayKnowledge};
use stores::StoreTracker;

/// Counters of what the engine did and dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Events handed to the store.
    pub events_accepted: u64,
    /// Events dropped because the id or signature did not verify.
    pub dropped_forged: u64,
    /// Events dropped because they matched no filter of their subscription.
    pub dropped_off_filter: u64,
    /// Events on a subscription we do not have open.
    pub dropped_unknown_subscription: u64,
    /// Batches confirmed.
    pub batches_confirmed: u64,
    /// Batches failed (and planned again).
    pub batches_failed: u64,
    /// Relays that refused NIP-77 and are synced by REQ+EOSE.
    pub negentropy_refusals: u64,
    /// Negentropy rounds completed.
    pub negentropy_rounds: u64,
    /// Seconds that held a full page (of a plausible relay page size) during
    /// REQ pagination: events beyond the page may be missing.
    pub crowded_seconds: u64,
    /// Rate-limit signals received.
    pub rate_limits: u64,
    /// Subscription-limit refusals received.
    pub subscription_refusals: u64,
    /// Consolidations of live subscriptions.
    pub consolidations: u64,
    /// Relays dropped because nothing is left to sync from them.
    pub relays_dropped: u64,
    /// Ids a relay's negentropy set held but fetches did not return, after
    /// every retry.
    pub fetch_missing: u64,
    /// Fetches of missing ids asked again because they brought nothing new.
    pub fetch_retries: u64,
    /// Events the store reported newly stored.
    pub events_stored: u64,
    /// Store answers that asked for a retry (`rate-limited:`, `error:`,
    /// failures, timeouts).
    pub store_retries: u64,
    /// Events the store refused for good.
    pub store_refused: u64,
    /// Times a relay's frame budget was lowered after it dropped the
    /// connection right after a large frame.
    pub frame_budget_lowered: u64,
    /// Polls of items whose live subscription did not fit a relay's limits.
    pub uncovered_polls: u64,
    /// Negentropy sessions replaced by REQ because the store could not list
    /// its items.
    pub local_items_failures: u64,
    /// Inputs that did not fit the engine's state (a message from a relay
    /// not connected, a store answer for an event not waiting …), logged at
    /// `debug` and ignored.
    pub inputs_ignored: u64,
    /// Relay URLs from announcements refused by the relay policy.
    pub relays_refused: u64,
}

/// How a relay's live coverage stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LiveMode {
    /// Every item has a live subscription.
    #[default]
    Full,
    /// The relay's subscription and frame limits cannot hold live filters for
    /// every item: `uncovered_filters` of them are polled with a `since`
    /// catch-up every [`EngineConfig::uncovered_poll_interval`].
    Polling {
        /// Live filters that did not fit.
        uncovered_filters: usize,
    },
}

/// What is open and waiting on one connected relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayActivity {
    /// Subscriptions and negentropy sessions open (or reserved).
    pub open_subscriptions: usize,
    /// Live subscriptions among them.
    pub live_subscriptions: usize,
    /// Historic jobs waiting for a slot.
    pub queued_jobs: usize,
    /// Items whose live subscription waits.
    pub deferred_live_items: usize,
    /// The subscription limit in force.
    pub subscription_limit: usize,
    /// Slots live subscriptions may take (the rest is kept for history).
    pub live_slots: usize,
    /// The largest frame sent to the relay, in bytes.
    pub frame_budget: usize,
    /// Whether every item is covered live or some are polled.
    pub live_mode: LiveMode,
}

/// The own relay as the self-subscriber sees it.
#[derive(Debug, Default)]
struct OwnRelay {
    /// Accepted events waiting for the batch window.
    queued: Vec<Event>,
    /// When the current batch window closes.
    batch_deadline: Option<Instant>,
    /// Everything the own relay held was read up to this moment (wall
    /// clock): its history was read completely and the live subscription ran
    /// until then. The next self-subscription catches up from here.
    caught_up_to: Option<Timestamp>,
    /// The own relay connection is open.
    connected: bool,
    /// The current connection's history was read completely.
    history_complete: bool,
    /// When the self-subscriber should (re)connect, as the health tracker
    /// decided; `None` while a connection is open or being opened.
    reconnect_at: Option<Instant>,
    /// `created_at` of the announcement applied per repository, so an older
    /// announcement never replaces a newer one.
    announced_at: HashMap<RepoRef, Timestamp>,
}

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
    confirmed: RelaySyncIndex,
    pending: PendingSyncIndex,
    health: HealthTracker,
    /// What we learned about each relay; survives reconnects.
    known: HashMap<RelayUrl, RelayKnowledge>,
    /// The live connection state of each connected relay.
    conns: HashMap<RelayUrl, RelayConn>,
    batches: HashMap<BatchId, BatchInfo>,
    own: OwnRelay,
    stores: StoreTracker,
    /// Relay URLs the policy refused (warned about once each).
    refused_relays: std::collections::HashSet<RelayUrl>,
    commands: VecDeque<Command>,
    next_batch: u64,
    next_sub: u64,
    daily_at: Instant,
    disconnect_check_at: Instant,
    jitter: Jitter,
    stats: EngineStats,
    /// The latest `now` seen, for deadlines computed without an input.
    last_now: Instant,
}

impl SyncEngine {
    /// A new engine; bootstrap relays are registered and connect on the
    /// first [`SyncEngine::handle_timeout`].
    pub fn new(config: EngineConfig, now: Now) -> Self {
        let mut jitter = Jitter::new(config.seed);
        let daily_at = now.instant + jitter.between(config.daily_min, config.daily_max);
        let disconnect_check_at = now.instant + config.disconnect_check_interval;
        let own = OwnRelay {
            reconnect_at: Some(now.instant),
            ..OwnRelay::default()
        };
        let mut engine = SyncEngine {
            health: HealthTracker::new(config.health.clone()),
            repos: RepoSyncIndex::new(),
            confirmed: RelaySyncIndex::new(),
            pending: PendingSyncIndex::new(),
            known: HashMap::new(),
            conns: HashMap::new(),
            batches: HashMap::new(),
            own,
            stores: StoreTracker::default(),
            refused_relays: Default::default(),
            commands: VecDeque::new(),
            next_batch: 0,
            next_sub: 0,
            daily_at,
            disconnect_check_at,
            jitter,
            stats: EngineStats::default(),
            last_now: now.instant,
            config,
        };
        for relay in engine.config.bootstrap_relays.clone() {
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

    /// Confirmed state and connection status per relay.
    pub fn relay_index(&self) -> &RelaySyncIndex {
        &self.confirmed
    }

    /// Batches in flight per relay.
    pub fn pending_index(&self) -> &PendingSyncIndex {
        &self.pending
    }

    /// Relay health.
    pub fn health(&self) -> &HealthTracker {
        &self.health
    }

    /// What is open and waiting on `relay`, if connected.
    pub fn relay_activity(&self, relay: &RelayUrl) -> Option<RelayActivity> {
        let conn = self.conns.get(relay)?;
        let live_mode = match conn.uncovered.len() {
            0 => LiveMode::Full,
            uncovered_filters => LiveMode::Polling { uncovered_filters },
        };
        Some(RelayActivity {
            open_subscriptions: conn.subs.len(),
            live_subscriptions: conn.live_count(),
            queued_jobs: conn.queue.len(),
            deferred_live_items: conn.deferred_live.len(),
            subscription_limit: self.sub_limit(relay),
            live_slots: self.live_slots(relay),
            frame_budget: self.frame_budget(relay),
            live_mode,
        })
    }

    /// `true` once the own relay's history was read completely on its
    /// current connection ([`SyncEngine::handle_own_history_complete`]).
    pub fn own_history_complete(&self) -> bool {
        self.own.connected && self.own.history_complete
    }

    /// Events handed to the store and not confirmed yet (answered or
    /// waiting for a retry).
    pub fn unconfirmed_stores(&self) -> usize {
        self.stores.in_flight()
    }

    /// Events the store refused for now, waiting for their retry.
    pub fn store_retries_waiting(&self) -> usize {
        self.stores.retrying()
    }

    /// The next command for the driver, oldest first.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// `true` when every registered relay is connected, nothing is pending
    /// or queued, and every target item is confirmed: historic sync is
    /// confirmed everywhere.
    pub fn is_idle(&self) -> bool {
        self.own.queued.is_empty()
            && self.stores.in_flight() == 0
            && self.pending.batch_count() == 0
            && self.conns.values().all(RelayConn::is_quiet)
            && self.confirmed.iter().all(|(relay, state)| {
                state.is_connected()
                    && state.announcements_synced
                    && self.repos.target(relay).is_none_or(|target| {
                        target.repos.is_subset(&state.repos)
                            && target.root_events.is_subset(&state.root_events)
                    })
            })
    }

    /// The filter of the self-subscription on the own relay: kinds 30617,
    /// 1617, 1618, 1621, and once the own relay's history was read
    /// completely, `since` the last moment everything was read minus the
    /// quick-reconnect window. Read it (it changes nothing) when the own relay
    /// connection opens, after [`SyncEngine::handle_own_relay_connected`].
    pub fn own_subscription_filter(&self) -> nostr::prelude::Filter {
        let since = self.own.caught_up_to.map(|at| {
            Timestamp::from_secs(
                at.as_secs()
                    .saturating_sub(self.config.quick_reconnect_window.as_secs()),
            )
        });
        let filter = crate::filters::own_relay_filter();
        match since {
            Some(since) => filter.since(since),
            None => filter,
        }
    }

    /// When the self-subscriber should open the own relay connection: at
    /// the start, then after every loss with the health tracker's backoff.
    /// Open it then and report [`SyncEngine::handle_own_relay_connecting`].
    /// A driver with a self-subscriber wakes for it besides
    /// [`SyncEngine::poll_timeout`] (which leaves it out: a relay that
    /// embeds the library has no own relay connection).
    pub fn own_relay_reconnect_at(&self) -> Option<Instant> {
        self.own.reconnect_at
    }

    /// The self-subscriber started opening the own relay connection.
    pub fn handle_own_relay_connecting(&mut self, now: Now) {
        self.observe(now);
        self.own.reconnect_at = None;
    }

    /// The own relay connection opened; its history is being read.
    pub fn handle_own_relay_connected(&mut self, now: Now) {
        self.observe(now);
        self.own.connected = true;
        self.own.history_complete = false;
        self.own.reconnect_at = None;
        self.health.on_own_relay_connected();
    }

    /// The own relay's history (every page of the self-subscription's
    /// history query) was read completely on the current connection: the
    /// catch-up point moves to now, and the live subscription keeps it
    /// moving until the connection drops.
    pub fn handle_own_history_complete(&mut self, now: Now) {
        self.observe(now);
        if self.own.connected {
            self.own.history_complete = true;
            self.own.caught_up_to = Some(now.unix);
        }
    }

    /// The own relay connection dropped or could not be opened. If its
    /// history had been read completely, everything up to now was seen;
    /// otherwise the catch-up point stays where the last complete read left
    /// it. The next attempt is due after the health tracker's backoff
    /// ([`SyncEngine::own_relay_reconnect_at`]).
    pub fn handle_own_relay_disconnected(&mut self, now: Now) {
        self.observe(now);
        if self.own.connected && self.own.history_complete {
            self.own.caught_up_to = Some(now.unix);
        }
        self.own.connected = false;
        self.own.history_complete = false;
        let delay = self.health.on_own_relay_lost();
        self.own.reconnect_at = Some(now.instant + delay);
    }

    /// Events the own relay accepted (from the self-subscription). They are
    /// processed together when the batch window, started by the first of them,
    /// closes.
    pub fn handle_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        self.observe(now);
        self.queue_own_events(now, events);
    }

    /// Queues accepted events for the self-subscriber batch.
    fn queue_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        let before = self.own.queued.len();
        self.own.queued.extend(events);
        if self.own.queued.len() > before && self.own.batch_deadline.is_none() {
            self.own.batch_deadline = Some(now.instant + self.config.batch_window);
        }
    }

    /// A relay's NIP-11 limits.
    pub fn handle_relay_limits(&mut self, now: Now, relay: &RelayUrl, limits: RelayLimits) {
        self.observe(now);
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
        if let Some(filter) = self.negentropy_filter(relay, id) {
            // Refused events count as held: not downloaded again.
            items.extend(self.stores.refused_items(&filter));
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
        if let Some(filter) = self.negentropy_filter(relay, id) {
            tracing::warn!(%relay, reason, "store could not list local items; syncing the filter by REQ");
            self.stats.local_items_failures += 1;
            self.replace_job(now, relay, id, runtime::Job::Req(filter));
        }
        self.maintain(now);
    }

    /// A message from a relay.
    pub fn handle_relay_message(&mut self, now: Now, relay: &RelayUrl, message: RelayMessage<'_>) {
        self.observe(now);
        self.on_relay_message(now, relay, message);
        self.maintain(now);
    }

    /// Timers: the self-subscriber batch window, connection retries and
    /// timeouts, batch and negentropy timeouts, rate-limit recovery, delayed
    /// re-planning, the daily re-sync and the check for relays to drop.
    pub fn handle_timeout(&mut self, now: Now) {
        self.observe(now);
        if self.own.batch_deadline.is_some_and(|at| at <= now.instant) {
            self.process_own_batch(now);
        }
        self.run_store_timers(now);
        self.run_polls(now);
        self.expire_connects(now);
        self.expire_batches(now);
        self.run_retries(now);
        if self.daily_at <= now.instant {
            self.daily_sync(now);
            self.daily_at = now.instant
                + self
                    .jitter
                    .between(self.config.daily_min, self.config.daily_max);
        }
        if self.disconnect_check_at <= now.instant {
            self.check_disconnects(now);
            self.disconnect_check_at = now.instant + self.config.disconnect_check_interval;
        }
        self.maintain(now);
    }

    /// The next instant [`SyncEngine::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut deadlines = vec![
            Some(self.daily_at),
            Some(self.disconnect_check_at),
            self.own.batch_deadline,
            self.stores.next_deadline(self.config.store_timeout),
        ];
        deadlines.extend(self.known.values().map(RelayKnowledge::next_deadline));
        deadlines.extend(
            self.conns
                .values()
                .map(|conn| conn.next_deadline(&self.config)),
        );
        deadlines.extend(self.conns.values().map(|conn| conn.next_poll_at));
        let window = self.rate_window();
        deadlines.extend(
            self.conns
                .iter()
                .filter(|(relay, conn)| {
                    !conn.is_quiet()
                        && self
                            .known
                            .get(*relay)
                            .is_some_and(|known| known.learned_rate.is_some())
                })
                .map(|(_, conn)| conn.rate_window_frees_at(self.last_now, window)),
        );
        deadlines.extend(self.batch_deadlines());
        deadlines.push(self.health_deadline());
        deadlines.into_iter().flatten().min()
    }

    /// Counts and logs an input that does not fit the state.
    fn ignored(&mut self, relay: &RelayUrl, what: &str) {
        self.stats.inputs_ignored += 1;
        tracing::debug!(%relay, what, "input ignored in the current state");
    }

    fn knowledge(&mut self, relay: &RelayUrl) -> &mut RelayKnowledge {
        self.known.entry(relay.clone()).or_default()
    }

    /// The smallest subscription limit known for `relay`.
    fn sub_limit(&self, relay: &RelayUrl) -> usize {
        self.known
            .get(relay)
            .map_or(self.config.max_subscriptions.max(1), |known| {
                known.subscription_limit(&self.config)
            })
    }

    /// Filters per REQ allowed on `relay`.
    fn filters_per_req(&self, relay: &RelayUrl) -> usize {
        self.known
            .get(relay)
            .map_or(self.config.max_filters_per_req.max(1), |known| {
                known.filters_per_req(&self.config)
            })
    }

    /// Subscription slots live subscriptions may take on `relay`: the limit
    /// minus the slots kept for historic work (at least one each).
    /// A relay allowing a single subscription gets none live: everything
    /// is polled and the one slot serves history.
    fn live_slots(&self, relay: &RelayUrl) -> usize {
        let limit = self.sub_limit(relay);
        if limit < 2 {
            return 0;
        }
        let historic = self.config.historic_slots.clamp(1, limit / 2);
        limit.saturating_sub(historic)
    }

    /// The largest frame `relay` may be sent: its NIP-11
    /// `max_message_length`, a smaller budget learned from a drop, or the
    /// configured default.
    fn frame_budget(&self, relay: &RelayUrl) -> usize {
        let known = self.known.get(relay);
        let told = known.and_then(|known| known.limits.max_message_length);
        let learned = known.and_then(|known| known.learned_frame_budget);
        // A told budget is honoured even below the learning floor; a
        // kilobyte is the least any REQ needs.
        [told, learned]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.config.default_frame_budget)
            .max(1024)
    }

    /// The filter of the negentropy session `id` on `relay`.
    fn negentropy_filter(
        &self,
        relay: &RelayUrl,
        id: &SubscriptionId,
    ) -> Option<nostr::prelude::Filter> {
        match self.conns.get(relay)?.subs.get(id)? {
            runtime::Sub::Negentropy { filter, .. } => Some(filter.clone()),
            _ => None,
        }
    }

    fn next_sub_id(&mut self, purpose: &str) -> SubscriptionId {
        self.next_sub += 1;
        SubscriptionId::new(format!("gs-{purpose}-{}", self.next_sub))
    }

    fn next_batch_id(&mut self) -> BatchId {
        self.next_batch += 1;
        BatchId(self.next_batch)
    }

    fn emit(&mut self, command: Command) {
        let now = self.last_now;
        if let Command::Subscribe { relay, id, .. } | Command::NegOpen { relay, id, .. } = &command
        {
            if let Some(conn) = self.conns.get_mut(relay) {
                conn.opened_at.push_back(now);
                if !conn.unanswered.contains(id) {
                    conn.unanswered.push_back(id.clone());
                }
            }
        }
        let frame = match &command {
            Command::Subscribe { id, .. }
            | Command::NegOpen { id, .. }
            | Command::NegMsg { id, .. } => {
                frames::command_frame_len(&command).map(|len| (len, id))
            }
            _ => None,
        };
        if let Some((len, id)) = frame {
            if let Some(conn) = self.conns.get_mut(command.relay()) {
                conn.note_frame(now, len, id);
            }
        }
        self.commands.push_back(command);
    }

    /// The window over which a learned rate counts openings.
    fn rate_window(&self) -> std::time::Duration {
        self.config.health.rate_limit_cooldown
    }

    /// `true` if one more subscription may be opened on `relay` now: a free
    /// slot, no rate-limit cooldown, and the learned rate not used up.
    fn may_open(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let limit = self.sub_limit(relay);
        let free_slot = self
            .conns
            .get(relay)
            .is_some_and(|conn| conn.subs.len() < limit);
        free_slot && self.rate_allows(now, relay)
    }

    /// `true` if one more REQ (a new subscription or a next page) may be
    /// sent to `relay` now: no rate-limit cooldown and the learned rate not
    /// used up.
    fn rate_allows(&mut self, now: Now, relay: &RelayUrl) -> bool {
        if self
            .health
            .get(relay)
            .is_some_and(|health| health.is_rate_limited(now.instant))
        {
            return false;
        }
        let rate = self.known.get(relay).and_then(|known| known.learned_rate);
        let window = self.rate_window();
        let Some(conn) = self.conns.get_mut(relay) else {
            return false;
        };
        let within = conn.opens_within(now.instant, window);
        rate.is_none_or(|rate| within < rate)
    }

    /// The delay before retrying work that failed on `relay`, as the health
    /// tracker decides: doubling for each failure in a row, so a relay that
    /// keeps refusing (`blocked:`, `auth-required:`) is not hammered.
    fn retry_delay(&mut self, relay: &RelayUrl) -> std::time::Duration {
        self.health.on_work_failed(relay)
    }

    /// Records the time of an input, so commands emitted while handling it
    /// are stamped with it.
    fn observe(&mut self, now: Now) {
        self.last_now = self.last_now.max(now.instant);
    }

    /// After every input: connect relays whose backoff allows it, start
    /// queued work where limits allow.
    fn maintain(&mut self, now: Now) {
        self.observe(now);
        self.connect_ready_relays(now);
        let relays: Vec<RelayUrl> = self.conns.keys().cloned().collect();
        for relay in relays {
            self.pump(now, &relay);
        }
    }
}
