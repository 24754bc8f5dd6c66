//! The runtime: one task owns the engine, feeds it what the connections
//! (the own relay's included) report, executes its commands, and wakes at
//! its deadline. No decision is taken here.
//!
//! - [`builder`]: settings and their precedence, building the manager;
//! - `runner`: the loop's state, the connections, status and shutdown;
//! - `own_relay`: the self-subscriber's connection and its reports;
//! - `store_worker`: the store task and its answers;
//! - `summary`: the shutdown handle and the run's summary.

mod builder;
mod own_relay;
mod runner;
mod store_worker;
mod summary;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::SyncEngine;
use grasp_sync_core::store::EventStore;
use nostr::prelude::{Event, RelayUrl};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use builder::{BuildError, SyncManagerBuilder};
pub use summary::{ShutdownHandle, Summary};

use crate::clock::TokioClock;
use crate::connection::Dialer;
use crate::inbound::Inbound;
use crate::metrics::Metrics;
use crate::status::SyncStatus;
use runner::Connections;
use store_worker::store_worker;

/// The run loop's state.
struct Runner {
    engine: SyncEngine,
    clock: TokioClock,
    connections: Connections,
    store_task: JoinSet<()>,
    metrics: Metrics,
    summary: Summary,
    status: watch::Sender<SyncStatus>,
    /// When the status was last refreshed.
    status_at: tokio::time::Instant,
    /// A status refresh held back by the interval, due then.
    status_due: Option<tokio::time::Instant>,
    /// Relays whose refused address was warned about.
    address_refusals: WarnOnce,
}

/// Remembers which relays were warned about (at most
/// [`WarnOnce::REMEMBERED`]; past that, every refusal is logged at `debug`).
#[derive(Debug, Default)]
struct WarnOnce(std::collections::HashSet<RelayUrl>);

impl WarnOnce {
    const REMEMBERED: usize = 10_000;

    /// `true` the first time `relay` is seen.
    fn warn_once(&mut self, relay: &RelayUrl) -> bool {
        self.0.len() < Self::REMEMBERED && self.0.insert(relay.clone())
    }
}

/// Store jobs queued for the store task before more are answered "store
/// queue full" (the engine then retries them with backoff).
const STORE_QUEUE: usize = 65_536;

/// Relay reports (or store answers) handled in one go when they are
/// already waiting, at least: a message carrying several (the frames
/// decoded together, a batch of store answers) is handled whole.
const INBOUND_BURST: usize = 256;

/// Runs GRASP-02 proactive sync against real relays.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use grasp_sync_tokio::nostr::prelude::RelayUrl;
/// use grasp_sync_tokio::{RelayStore, SyncManager};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let own = RelayUrl::parse("wss://relay.example.com")?;
/// let manager = SyncManager::builder()
///     .own_relay(own.clone())
///     .store(Arc::new(RelayStore::new(own, Duration::from_secs(10))))
///     .from_env()?
///     .build()?;
/// let mut status = manager.status();
/// let shutdown = manager.shutdown_handle();
/// let run = tokio::spawn(manager.run());
/// status.wait_for(|status| status.historic_sync_complete).await?;
/// shutdown.shutdown();
/// let summary = run.await?;
/// println!("stored {} events", summary.events_stored);
/// # Ok(())
/// # }
/// ```
pub struct SyncManager {
    /// The engine, built with a valid configuration.
    engine: SyncEngine,
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
            .field("own_relay", &self.engine.config().identity.own_relay)
            .finish_non_exhaustive()
    }
}

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
            engine,
            store,
            metrics,
            dialer,
            mut inbound,
            mut own_events,
            shutdown_tx,
            status_tx,
            ..
        } = self;
        let clock = TokioClock::new();
        let (store_jobs, store_jobs_rx) = mpsc::channel(STORE_QUEUE);
        let (store_results_tx, mut store_results) = mpsc::channel(4096);
        let mut store_task = JoinSet::new();
        store_task.spawn(store_worker(
            store,
            store_jobs_rx,
            store_results_tx,
            shutdown_tx.subscribe(),
        ));
        let mut connections = Connections {
            dialer,
            transports: HashMap::new(),
            own: None,
            store_jobs,
            overflow: Vec::new(),
            sent: Arc::new(AtomicU64::new(0)),
            bytes_sent: metrics.bytes_sent.clone(),
            connection_attempts: metrics.connection_attempts.clone(),
            metrics: metrics.clone(),
        };
        connections.own = engine
            .config()
            .identity
            .own_relay
            .clone()
            .map(|url| connections.own_transport(url));
        let mut runner = Runner {
            engine,
            clock,
            connections,
            store_task,
            metrics,
            summary: Summary::default(),
            status: status_tx,
            status_at: tokio::time::Instant::now(),
            status_due: None,
            address_refusals: WarnOnce::default(),
        };
        let mut shutdown = shutdown_tx.subscribe();
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        let now = runner.clock_now();
        runner.engine.handle_timeout(now);
        loop {
            if *shutdown.borrow_and_update() {
                break;
            }
            runner.drain_commands();
            runner.refresh_status(false);
            let deadline = runner.next_deadline();
            // Biased: messages already received are handled before a
            // deadline fires, so a reply waiting in the queue is never taken
            // for silence.
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                Some(result) = store_results.recv() => {
                    let mut handled = result.len();
                    runner.on_store_result(result);
                    while handled < INBOUND_BURST {
                        let Ok(result) = store_results.try_recv() else { break };
                        handled += result.len();
                        runner.drain_commands();
                        runner.on_store_result(result);
                    }
                }
                Some(message) = inbound.recv() => {
                    let mut handled = message.reports.len();
                    runner.on_inbound(message);
                    // What else already arrived is handled (each after the
                    // commands of the one before) before the deadlines and
                    // the status are looked at again: their cost is paid
                    // once per burst, not per message.
                    while handled < INBOUND_BURST {
                        let Ok(message) = inbound.try_recv() else { break };
                        handled += message.reports.len();
                        runner.drain_commands();
                        runner.on_inbound(message);
                    }
                }
                Some(event) = own_events.recv() => {
                    let now = runner.clock_now();
                    runner.engine.handle_own_events(now, [event]);
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let now = runner.clock_now();
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
