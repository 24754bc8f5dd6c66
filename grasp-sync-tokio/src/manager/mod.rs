//! The runtime: one task owns the engine, feeds it what the connections
//! (the own relay's included) and the store task report, executes its
//! commands, and wakes at its deadlines. The sync's decisions are the
//! engine's; what this adds is I/O (which connection or queue a command
//! goes to, how many events are at the store at once, how often the status
//! is published).
//!
//! One type per file, each owned by one task:
//!
//! - [`SyncManager`] (here): the public handle; `run` runs the `Runner`
//!   on the caller's task;
//! - [`builder`]: settings and their precedence, building the manager;
//! - `runner`: `Runner`, the run loop's task: the engine, feeding it,
//!   executing its commands, counting, shutdown;
//! - `connections`: `Connections`, owned by the runner: every relay's
//!   connection and the own relay's (each connection's driver and decoding
//!   tasks are `crate::connection`'s);
//! - `store_queue`: `StoreQueue`, owned by the runner: the store task's job
//!   queue, the jobs a full queue refused, the task;
//! - `store_worker`: `StoreWorker`, the store task: its end of the
//!   channels, how many events are at the store at once, how many go in
//!   one call;
//! - `status_feed`: `StatusFeed`, owned by the runner: the status
//!   snapshots and their interval;
//! - `warn_once`: `WarnOnce`, relays warned about once;
//! - `held`: [`HeldRepositories`], the host's handle on the repositories
//!   and events it holds until their git data arrives;
//! - `summary`: the shutdown handle and the run's summary.
//!
//! The path of an `EVENT` from a relay's socket to the store (five tasks,
//! four channels):
//!
//! 1. the connection's driver task reads the frame (with those already
//!    received, up to 32) and spawns
//! 2. a decoding task (parse, screen, verify; `crate::decode`) whose
//!    handle (channel 1) the driver keeps in arrival order
//!    (`crate::delivery`); between frames it sends each decoded run of
//!    reports, the subscription id with each event, on the manager's
//!    inbound channel (channel 2, shared by every connection) to
//! 3. the runner, which hands the run of events with their subscription
//!    ids to the engine in one call (`SyncEngine::handle_checked_events`:
//!    the id parsed once, by the decoder) and queues each `Command::Store`
//!    on the store queue (channel 3) for
//! 4. the store worker, which hands the events queued together to the
//!    store in one call; a `RelayStore` sends them on its ingest channel
//!    (channel 4) to
//! 5. the ingest connection's task, which writes them to the own relay.

mod builder;
mod connections;
mod held;
mod runner;
mod status_feed;
mod store_queue;
mod store_worker;
mod summary;
mod warn_once;

use std::sync::Arc;

use grasp_sync_core::engine::SyncEngine;
use grasp_sync_core::store::EventStore;
use nostr::prelude::Event;
use tokio::sync::{mpsc, watch};

pub use builder::{BuildError, SyncManagerBuilder};
pub use held::{HeldRepositories, ManagerStopped};
pub use summary::{ShutdownHandle, Summary};

use crate::connection::Dialer;
use crate::inbound::Inbound;
use crate::metrics::{Metrics, MetricsHandle};
use crate::status::SyncStatus;
use runner::Runner;

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
    metrics_handle: MetricsHandle,
    dialer: Dialer,
    inbound: mpsc::Receiver<Inbound>,
    own_events_tx: mpsc::Sender<Event>,
    own_events: mpsc::Receiver<Event>,
    held_tx: mpsc::Sender<held::HeldNote>,
    held: mpsc::Receiver<held::HeldNote>,
    shutdown_tx: watch::Sender<bool>,
    status_tx: watch::Sender<SyncStatus>,
    /// Told of every announcement the own relay serves, if set.
    own_announcements: Option<OwnAnnouncementObserver>,
}

/// What [`SyncManagerBuilder::on_own_announcement`] calls with each announcement the own
/// relay serves.
#[derive(Clone)]
pub(crate) struct OwnAnnouncementObserver(Arc<dyn Fn(&Event) + Send + Sync>);

impl OwnAnnouncementObserver {
    fn new(observer: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        OwnAnnouncementObserver(Arc::new(observer))
    }

    /// Tells the observer of `event` if it is an announcement.
    pub(crate) fn saw(&self, event: &Event) {
        if event.kind.as_u16() == grasp_sync_core::nip34::KIND_REPO_ANNOUNCEMENT {
            (self.0)(event);
        }
    }
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

    /// For hosts that keep announcements in a purgatory of their own until
    /// git data arrives: tell the engine which repositories are held, which
    /// are promoted, and which held events were dropped
    /// ([`HeldRepositories`]).
    pub fn held_repositories(&self) -> HeldRepositories {
        HeldRepositories::new(self.held_tx.clone())
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

    /// A handle that encodes our metrics (only ours, even when the builder
    /// was given the host's registry) as Prometheus text while
    /// [`SyncManager::run`] goes on: for a host on another prometheus
    /// version than ours (0.14), whose registry cannot take our collectors,
    /// to append to its own `/metrics` output. See [`MetricsHandle`].
    pub fn metrics_handle(&self) -> MetricsHandle {
        self.metrics_handle.clone()
    }

    /// Runs until shut down; every connection task stops within one second
    /// of the shutdown (stragglers are aborted and counted).
    pub async fn run(self) -> Summary {
        let SyncManager {
            engine,
            store,
            metrics,
            dialer,
            inbound,
            own_events,
            held,
            shutdown_tx,
            status_tx,
            own_announcements,
            ..
        } = self;
        let (runner, store_results) = Runner::start(
            engine,
            store,
            dialer,
            metrics,
            status_tx,
            shutdown_tx.subscribe(),
            own_announcements,
        );
        runner
            .run(inbound, own_events, held, store_results, shutdown_tx)
            .await
    }
}
