//! The runtime: one task owns the engine, feeds it what the connections and
//! the self-subscriber report, executes its commands, and wakes at its
//! deadline. No decision is taken here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::clock::Clock;
use grasp_sync_core::engine::{Command, EngineConfig, EngineStats, StoreVerdict, SyncEngine};
use grasp_sync_core::pagination::PageOutcome;
use grasp_sync_core::store::{EventStore, IngestOutcome};
use grasp_sync_core::transport::RelayTransport;
use nostr::prelude::{Event, RelayMessage, RelayUrl, SubscriptionId};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::clock::TokioClock;
use crate::connection::{
    tls_config, ConnectionConfig, Dialer, Inbound, Report, SentCounter, WsTransport,
};
use crate::metrics::Metrics;
use crate::status::SyncStatus;

/// The shortest interval between two status snapshots.
pub(crate) const STATUS_INTERVAL: Duration = Duration::from_millis(100);

/// Why the manager could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No store was given.
    #[error("a store is required")]
    MissingStore,
    /// TLS could not be configured.
    #[error("tls configuration failed: {0}")]
    Tls(#[from] rustls::Error),
    /// Metrics could not be registered.
    #[error("metrics registration failed: {0}")]
    Metrics(#[from] prometheus::Error),
    /// An environment variable holds a value that is not a number.
    #[error("environment variable {name} is not a valid number: {value:?}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
}

/// Builds a [`SyncManager`].
pub struct SyncManagerBuilder {
    engine: EngineConfig,
    own_relay: Option<RelayUrl>,
    connection: ConnectionConfig,
    store: Option<Arc<dyn EventStore>>,
    registry: Option<prometheus::Registry>,
}

impl std::fmt::Debug for SyncManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncManagerBuilder")
            .field("engine", &self.engine)
            .field("own_relay", &self.own_relay)
            .finish_non_exhaustive()
    }
}

impl Default for SyncManagerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SyncManagerBuilder {
    /// Defaults of the spec.
    pub fn new() -> Self {
        SyncManagerBuilder {
            engine: EngineConfig::default(),
            own_relay: None,
            connection: ConnectionConfig::default(),
            store: None,
            registry: None,
        }
    }

    /// The own relay: the self-subscriber reads accepted announcements and
    /// root events from it over WebSocket. It is also our service relay.
    pub fn own_relay(mut self, url: RelayUrl) -> Self {
        if !self.engine.service_relays.contains(&url) {
            self.engine.service_relays.push(url.clone());
        }
        self.own_relay = Some(url);
        self
    }

    /// A URL under which announcements list our service, when it differs
    /// from the URL the self-subscriber connects to (a sidecar reaching its
    /// relay at `ws://127.0.0.1:…` while announcements say `wss://…`).
    pub fn service_relay(mut self, url: RelayUrl) -> Self {
        if !self.engine.service_relays.contains(&url) {
            self.engine.service_relays.push(url);
        }
        self
    }

    /// A relay connected from the start and never dropped.
    pub fn bootstrap_relay(mut self, url: RelayUrl) -> Self {
        self.engine.bootstrap_relays.push(url);
        self
    }

    /// Where verified events go (and what negentropy compares with).
    pub fn store(mut self, store: Arc<dyn EventStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Every constant of the engine.
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        let service = std::mem::take(&mut self.engine.service_relays);
        let bootstrap = std::mem::take(&mut self.engine.bootstrap_relays);
        self.engine = config;
        self.engine.service_relays.extend(service);
        self.engine.bootstrap_relays.extend(bootstrap);
        self
    }

    /// Connection limits and timers.
    pub fn connection_config(mut self, config: ConnectionConfig) -> Self {
        self.connection = config;
        self
    }

    /// Registers the metrics in `registry` instead of a private one.
    pub fn registry(mut self, registry: prometheus::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Reads the spec's environment variables: `NGIT_SYNC_BATCH_WINDOW_MS`,
    /// `NGIT_SYNC_BASE_BACKOFF_SECS`, `NGIT_SYNC_MAX_BACKOFF_SECS`.
    pub fn from_env(mut self) -> Result<Self, BuildError> {
        if let Some(ms) = env_number("NGIT_SYNC_BATCH_WINDOW_MS")? {
            self.engine.batch_window = Duration::from_millis(ms);
        }
        if let Some(secs) = env_number("NGIT_SYNC_BASE_BACKOFF_SECS")? {
            self.engine.health.backoff.base = Duration::from_secs(secs);
        }
        if let Some(secs) = env_number("NGIT_SYNC_MAX_BACKOFF_SECS")? {
            self.engine.health.backoff.max = Duration::from_secs(secs);
        }
        Ok(self)
    }

    /// Builds the manager; call [`SyncManager::run`] inside a tokio runtime.
    pub fn build(self) -> Result<SyncManager, BuildError> {
        let store = self.store.ok_or(BuildError::MissingStore)?;
        let registry = self.registry.unwrap_or_default();
        let metrics = Metrics::register(&registry)?;
        let (inbound_tx, inbound_rx) = mpsc::channel(4096);
        let (own_events_tx, own_events_rx) = mpsc::channel(4096);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (status_tx, _) = watch::channel(SyncStatus::default());
        let dialer = Dialer {
            config: self.connection,
            tls: tls_config()?,
            inbound: inbound_tx,
            shutdown: shutdown_rx,
        };
        Ok(SyncManager {
            engine_config: self.engine,
            own_relay: self.own_relay,
            store,
            registry,
            metrics,
            dialer,
            inbound: inbound_rx,
            own_events_tx,
            own_events: own_events_rx,
            shutdown_tx,
            status_tx,
        })
    }
}

fn env_number(name: &'static str) -> Result<Option<u64>, BuildError> {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| BuildError::Env { name, value }),
        Err(_) => Ok(None),
    }
}

/// Stops a running [`SyncManager`].
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    sender: watch::Sender<bool>,
}

impl ShutdownHandle {
    /// Asks the manager and every connection task to stop.
    pub fn shutdown(&self) {
        let _ = self.sender.send(true);
    }
}

/// What a run did, returned when it stops.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// The engine's counters.
    pub engine: EngineStats,
    /// Events the store took as new.
    pub events_stored: u64,
    /// Events the store already had.
    pub events_duplicate: u64,
    /// Events the store refused for good.
    pub events_rejected: u64,
    /// Store answers that asked for a retry (`rate-limited:`, `error:`,
    /// failures); the engine offered those events again.
    pub store_retries: u64,
    /// Bytes received from relays.
    pub bytes_received: u64,
    /// Bytes sent to relays.
    pub bytes_sent: u64,
    /// Connection tasks still running after the shutdown grace period
    /// (aborted).
    pub tasks_aborted: usize,
}

/// Runs GRASP-02 proactive sync against real relays.
pub struct SyncManager {
    engine_config: EngineConfig,
    own_relay: Option<RelayUrl>,
    store: Arc<dyn EventStore>,
    registry: prometheus::Registry,
    metrics: Metrics,
    dialer: Dialer,
    inbound: mpsc::Receiver<Inbound>,
    own_events_tx: mpsc::Sender<Event>,
    own_events: mpsc::Receiver<Event>,
    shutdown_tx: watch::Sender<bool>,
    status_tx: watch::Sender<SyncStatus>,
}

impl std::fmt::Debug for SyncManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncManager")
            .field("own_relay", &self.own_relay)
            .finish_non_exhaustive()
    }
}

/// Work for the store task.
enum StoreJob {
    Ingest {
        relay: RelayUrl,
        event: Box<Event>,
    },
    Items {
        relay: RelayUrl,
        id: SubscriptionId,
        filter: Box<nostr::prelude::Filter>,
    },
}

/// What the store task reports back to the run loop.
enum StoreResult {
    Ingested {
        relay: RelayUrl,
        id: nostr::prelude::EventId,
        outcome: Result<IngestOutcome, grasp_sync_core::store::StoreError>,
    },
    Items {
        relay: RelayUrl,
        id: SubscriptionId,
        items: Result<
            Vec<(nostr::prelude::EventId, nostr::prelude::Timestamp)>,
            grasp_sync_core::store::StoreError,
        >,
    },
}

/// The store task: the run loop never awaits the store itself, so a slow
/// store never delays relay messages or deadlines.
async fn store_worker(
    store: Arc<dyn EventStore>,
    mut jobs: mpsc::Receiver<StoreJob>,
    results: mpsc::Sender<StoreResult>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let job = tokio::select! {
            job = jobs.recv() => job,
            _ = shutdown.changed() => return,
        };
        let Some(job) = job else {
            return;
        };
        let result = match job {
            StoreJob::Ingest { relay, event } => StoreResult::Ingested {
                outcome: store.ingest(&event).await,
                id: event.id,
                relay,
            },
            StoreJob::Items { relay, id, filter } => StoreResult::Items {
                items: store.negentropy_items(&filter).await,
                relay,
                id,
            },
        };
        tokio::select! {
            _ = results.send(result) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The run loop's state.
struct Runner {
    engine: SyncEngine,
    clock: TokioClock,
    store_jobs: mpsc::Sender<StoreJob>,
    store_task: JoinSet<()>,
    metrics: Metrics,
    dialer: Dialer,
    transports: HashMap<RelayUrl, WsTransport>,
    own: Option<OwnConnection>,
    summary: Summary,
    sent: Arc<AtomicU64>,
    status: watch::Sender<SyncStatus>,
    has_own_relay: bool,
    /// When the status was last refreshed.
    status_at: tokio::time::Instant,
}

/// The self-subscriber's connection to the own relay.
struct OwnConnection {
    transport: WsTransport,
    /// The current connection reported `Connected`.
    connected: bool,
    /// Paging through the own relay's history, until done.
    history: Option<grasp_sync_core::pagination::PaginationState>,
    retry_at: Option<tokio::time::Instant>,
    failures: u32,
}

const OWN_LIVE: &str = "grasp-sync-own-live";
const OWN_HISTORY: &str = "grasp-sync-own-history";
/// Events per page of the own relay's history.
const OWN_PAGE: usize = 500;

impl SyncManager {
    /// A builder with the spec's defaults.
    pub fn builder() -> SyncManagerBuilder {
        SyncManagerBuilder::new()
    }

    /// A handle that stops [`SyncManager::run`].
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            sender: self.shutdown_tx.clone(),
        }
    }

    /// For relays that embed the library: hand accepted events (30617, 1617,
    /// 1618, 1621) here instead of (or besides) the WebSocket
    /// self-subscription.
    pub fn own_events_sender(&self) -> mpsc::Sender<Event> {
        self.own_events_tx.clone()
    }

    /// The sync's progress, refreshed while it runs: wait for
    /// [`SyncStatus::historic_sync_complete`] to know historic sync is done.
    pub fn status(&self) -> watch::Receiver<SyncStatus> {
        self.status_tx.subscribe()
    }

    /// The metrics registry (ours, or the one given to the builder).
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    /// Runs until shut down; every connection task stops within one second
    /// of the shutdown (stragglers are aborted and counted).
    pub async fn run(self) -> Summary {
        let SyncManager {
            engine_config,
            own_relay,
            store,
            metrics,
            dialer,
            mut inbound,
            mut own_events,
            shutdown_tx,
            status_tx,
            ..
        } = self;
        let has_own_relay = own_relay.is_some();
        let clock = TokioClock::new();
        let sent = Arc::new(AtomicU64::new(0));
        let own = own_relay.map(|url| OwnConnection {
            transport: WsTransport::new(
                url.clone(),
                dialer.clone(),
                SentCounter {
                    total: sent.clone(),
                    relay: metrics.bytes_sent.with_label_values(&[url.as_str()]),
                },
            ),
            retry_at: Some(tokio::time::Instant::now()),
            failures: 0,
            connected: false,
            history: None,
        });
        let (store_jobs, store_jobs_rx) = mpsc::channel(65_536);
        let (store_results_tx, mut store_results) = mpsc::channel(4096);
        let mut store_task = JoinSet::new();
        store_task.spawn(store_worker(
            store,
            store_jobs_rx,
            store_results_tx,
            shutdown_tx.subscribe(),
        ));
        let mut runner = Runner {
            engine: SyncEngine::new(engine_config, clock.read()),
            clock,
            store_jobs,
            store_task,
            metrics,
            dialer,
            transports: HashMap::new(),
            own,
            summary: Summary::default(),
            sent,
            status: status_tx,
            has_own_relay,
            status_at: tokio::time::Instant::now(),
        };
        let mut shutdown = shutdown_tx.subscribe();
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        runner.engine.handle_timeout(runner.clock.read());
        loop {
            if *shutdown.borrow_and_update() {
                break;
            }
            // Handing work to the store task may wait for room in its queue;
            // shutdown must not wait for it.
            tokio::select! {
                _ = runner.drain_commands() => {}
                _ = shutdown.changed() => break,
            }
            runner.connect_own();
            runner.refresh_status(false);
            let deadline = runner.next_deadline();
            // Biased: messages already received are handled before a
            // deadline fires, so a reply waiting in the queue is never taken
            // for silence.
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                Some(result) = store_results.recv() => runner.on_store_result(result),
                Some(message) = inbound.recv() => runner.on_inbound(message),
                Some(event) = own_events.recv() => {
                    let now = runner.clock.read();
                    runner.engine.handle_own_events(now, [event]);
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let now = runner.clock.read();
                    runner.engine.handle_timeout(now);
                }
                _ = tick.tick() => {
                    runner.update_metrics();
                    runner.refresh_status(true);
                }
            }
        }
        let _ = shutdown_tx.send(true);
        drop(inbound);
        runner.stop().await
    }
}

impl Runner {
    /// The engine's next deadline, or the own relay's reconnect, capped so
    /// the loop never sleeps forever.
    fn next_deadline(&self) -> tokio::time::Instant {
        let engine = self.engine.poll_timeout().map(|at| self.clock.to_tokio(at));
        let own = self.own.as_ref().and_then(|own| own.retry_at);
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        [engine, own].into_iter().flatten().min().unwrap_or(far)
    }

    async fn drain_commands(&mut self) {
        while let Some(command) = self.engine.poll_command() {
            self.execute(command).await;
        }
    }

    async fn execute(&mut self, command: Command) {
        let job = match command {
            Command::Store { relay, event } => StoreJob::Ingest { relay, event },
            Command::QueryLocalItems { relay, id, filter } => StoreJob::Items {
                relay,
                id,
                filter: Box::new(filter),
            },
            command => return self.send(command),
        };
        if self.store_jobs.send(job).await.is_err() {
            warn!("the store task stopped");
        }
    }

    fn on_store_result(&mut self, result: StoreResult) {
        match result {
            StoreResult::Ingested { relay, id, outcome } => self.on_ingested(&relay, id, outcome),
            StoreResult::Items { relay, id, items } => {
                let now = self.clock.read();
                match items {
                    Ok(items) => self.engine.handle_local_items(now, &relay, &id, items),
                    Err(error) => {
                        self.engine
                            .handle_local_items_failed(now, &relay, &id, &error.to_string())
                    }
                }
            }
        }
    }

    /// Counts the store's answer and hands it to the engine, which decides
    /// whether the event is retried, remembered as refused, or done.
    fn on_ingested(
        &mut self,
        relay: &RelayUrl,
        id: nostr::prelude::EventId,
        outcome: Result<IngestOutcome, grasp_sync_core::store::StoreError>,
    ) {
        match StoreVerdict::of(&outcome) {
            StoreVerdict::Stored => {
                self.summary.events_stored += 1;
                self.metrics.events_synced.inc();
            }
            StoreVerdict::Duplicate => self.summary.events_duplicate += 1,
            StoreVerdict::Refused(reason) => {
                self.summary.events_rejected += 1;
                self.metrics
                    .dropped
                    .with_label_values(&["rejected_by_store"])
                    .inc();
                debug!(%relay, %id, reason, "store refused event");
            }
            StoreVerdict::Retry(reason) => {
                self.summary.store_retries += 1;
                debug!(%relay, %id, reason, "store refused event for now; the engine retries");
            }
            _ => {}
        }
        let now = self.clock.read();
        self.engine.handle_store_outcome(now, &id, outcome);
    }

    /// A transport command for a relay's connection.
    fn send(&mut self, command: Command) {
        let relay = command.relay().clone();
        let dialer = self.dialer.clone();
        let sent = SentCounter {
            total: self.sent.clone(),
            relay: self.metrics.bytes_sent.with_label_values(&[relay.as_str()]),
        };
        let transport = self
            .transports
            .entry(relay.clone())
            .or_insert_with(|| WsTransport::new(relay.clone(), dialer, sent));
        let result = match &command {
            Command::Connect { timeout, .. } => {
                self.metrics
                    .connection_attempts
                    .with_label_values(&[relay.as_str(), "started"])
                    .inc();
                transport.connect(*timeout)
            }
            Command::Disconnect { .. } => {
                let _ = transport.close();
                Ok(())
            }
            Command::Subscribe { id, filters, .. } => transport.subscribe(id, filters),
            Command::Unsubscribe { id, .. } => transport.unsubscribe(id),
            Command::NegOpen {
                id,
                filter,
                initial_message,
                ..
            } => transport.neg_open(id, filter, initial_message),
            Command::NegMsg { id, message, .. } => transport.neg_msg(id, message),
            Command::NegClose { id, .. } => transport.neg_close(id),
            _ => Ok(()),
        };
        if let Err(error) = result {
            // A message that cannot be sent leaves the relay and the engine
            // out of step: drop the connection so the engine plans again.
            warn!(%relay, %error, "cannot send to relay; reconnecting");
            if let Some(transport) = self.transports.get_mut(&relay) {
                let _ = transport.close();
            }
            let now = self.clock.read();
            self.engine.handle_disconnected(now, &relay);
        }
    }

    fn on_inbound(&mut self, inbound: Inbound) {
        let Inbound {
            relay,
            generation,
            report,
        } = inbound;
        if let Some(own) = &self.own {
            if own.transport.relay_url() == &relay {
                return self.on_own(generation, report);
            }
        }
        let current = self.transports.get(&relay).map(WsTransport::generation);
        if current != Some(generation) {
            return;
        }
        let now = self.clock.read();
        match report {
            Report::Connected => {
                self.metrics
                    .connection_attempts
                    .with_label_values(&[relay.as_str(), "success"])
                    .inc();
                self.engine.handle_connected(now, &relay);
            }
            Report::Limits(limits) => self.engine.handle_relay_limits(now, &relay, limits),
            Report::ConnectFailed(reason) => {
                self.metrics
                    .connection_attempts
                    .with_label_values(&[relay.as_str(), "failure"])
                    .inc();
                debug!(%relay, reason, "connect failed");
                self.engine.handle_connect_failed(now, &relay);
            }
            Report::Disconnected(reason) => {
                info!(%relay, reason, "connection lost");
                self.engine.handle_disconnected(now, &relay);
            }
            Report::Message(message, size) => {
                self.summary.bytes_received += size as u64;
                self.metrics
                    .bytes_received
                    .with_label_values(&[relay.as_str()])
                    .inc_by(size as u64);
                self.engine.handle_relay_message(now, &relay, *message);
            }
            Report::Malformed(size) => {
                self.summary.bytes_received += size as u64;
                self.metrics.dropped.with_label_values(&["malformed"]).inc();
            }
        }
    }

    /// Starts (or restarts after its backoff) the self-subscription.
    fn connect_own(&mut self) {
        let Some(own) = &mut self.own else {
            return;
        };
        if own
            .retry_at
            .is_some_and(|at| at <= tokio::time::Instant::now())
        {
            own.retry_at = None;
            let _ = own.transport.connect(Duration::from_secs(5));
        }
    }

    fn on_own(&mut self, generation: u64, report: Report) {
        let now = self.clock.read();
        let Some(own) = &mut self.own else {
            return;
        };
        if own.transport.generation() != generation {
            return;
        }
        match report {
            Report::Connected => {
                own.failures = 0;
                own.connected = true;
                self.engine.handle_own_relay_connected(now);
                let filter = self.engine.own_subscription_filter();
                self.subscribe_own(filter);
            }
            Report::Message(message, _) => self.on_own_message(now, *message),
            Report::ConnectFailed(reason) | Report::Disconnected(reason) => {
                self.own_lost(now, &reason)
            }
            Report::Malformed(_) | Report::Limits(_) => {}
        }
    }

    /// The self-subscription: a live REQ for what comes, and the history
    /// read page by page with `until` (a relay caps each REQ, and root events
    /// would crowd old announcements out of a single one).
    fn subscribe_own(&mut self, filter: nostr::prelude::Filter) {
        let Some(own) = &mut self.own else {
            return;
        };
        let live = filter.clone().limit(0);
        let mut history = filter;
        history.limit = Some(OWN_PAGE);
        let _ = own
            .transport
            .subscribe(&SubscriptionId::new(OWN_LIVE), &[live]);
        let _ = own
            .transport
            .subscribe(&SubscriptionId::new(OWN_HISTORY), &[history.clone()]);
        own.history = Some(grasp_sync_core::pagination::PaginationState::new(history));
    }

    fn on_own_message(&mut self, now: grasp_sync_core::clock::Now, message: RelayMessage<'static>) {
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => {
                let event = event.into_owned();
                if subscription_id.as_str() == OWN_HISTORY {
                    if let Some(paging) = self.own.as_mut().and_then(|own| own.history.as_mut()) {
                        paging.on_event(event.id, event.created_at);
                    }
                }
                self.engine.handle_own_events(now, [event]);
            }
            RelayMessage::EndOfStoredEvents(id) if id.as_str() == OWN_HISTORY => {
                let Some(own) = &mut self.own else {
                    return;
                };
                let history = SubscriptionId::new(OWN_HISTORY);
                match own.history.as_mut().map(|paging| paging.on_eose(None)) {
                    Some(PageOutcome::NextPage(filter)) => {
                        let _ = own.transport.subscribe(&history, &[filter]);
                    }
                    _ => {
                        own.history = None;
                        let _ = own.transport.unsubscribe(&history);
                        self.engine.handle_own_history_complete(now);
                    }
                }
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                // The own relay ended the self-subscription: start over.
                warn!(id = %subscription_id, %message, "own relay closed the self-subscription; reconnecting");
                if let Some(own) = &mut self.own {
                    let _ = own.transport.close();
                }
                self.own_lost(now, "self-subscription closed");
            }
            _ => {}
        }
    }

    /// The own relay connection is gone: retry after a backoff.
    fn own_lost(&mut self, now: grasp_sync_core::clock::Now, reason: &str) {
        let Some(own) = &mut self.own else {
            return;
        };
        warn!(reason, "own relay connection lost; retrying");
        own.failures = own.failures.saturating_add(1);
        own.history = None;
        let delay = Duration::from_secs(1u64 << own.failures.min(5));
        own.retry_at = Some(tokio::time::Instant::now() + delay);
        // Only a connection that was open moves the catch-up point: a
        // failed connect must not skip what we never read.
        if std::mem::take(&mut own.connected) {
            self.engine.handle_own_relay_disconnected(now);
        }
    }

    /// Publishes a new status snapshot if the last one is older than
    /// [`STATUS_INTERVAL`] (or `force`) and something changed.
    fn refresh_status(&mut self, force: bool) {
        let now = tokio::time::Instant::now();
        if !force && now < self.status_at + STATUS_INTERVAL {
            return;
        }
        self.status_at = now;
        let status = SyncStatus::of(&self.engine, self.has_own_relay);
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            if changed {
                *current = status;
            }
            changed
        });
    }

    fn update_metrics(&mut self) {
        let now = self.clock.read();
        self.metrics.update(&self.engine, now.instant);
        self.summary.bytes_sent = self.sent.load(Ordering::Relaxed);
    }

    /// Closes every connection and waits up to one second for the tasks.
    async fn stop(mut self) -> Summary {
        self.update_metrics();
        let mut tasks: Vec<JoinSet<()>> = self
            .transports
            .values_mut()
            .chain(self.own.as_mut().map(|own| &mut own.transport))
            .filter_map(WsTransport::take_tasks)
            .collect();
        tasks.push(std::mem::take(&mut self.store_task));
        let deadline = tokio::time::Instant::now() + Duration::from_millis(900);
        for set in &mut tasks {
            while tokio::time::timeout_at(deadline, set.join_next())
                .await
                .ok()
                .flatten()
                .is_some()
            {}
        }
        for set in &mut tasks {
            self.summary.tasks_aborted += set.len();
            set.abort_all();
        }
        self.summary.engine = self.engine.stats().clone();
        self.summary.bytes_sent = self.sent.load(Ordering::Relaxed);
        self.summary
    }
}
