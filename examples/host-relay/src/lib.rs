//! # An existing relay embedding grasp-sync
//!
//! A GRASP server built on nostr-relay-builder 0.44 that keeps its own purgatory, and
//! embeds our sync engine and our fetch scheduler. What is the host's and what is glue:
//!
//! - [`relay`] (the host's): a `LocalRelay` behind the host's WebSocket front, which
//!   answers `OK true "purgatory: …"` for announcements, states and PRs it holds.
//! - [`host_purgatory`] (the host's): held events by repository, released when their
//!   git data arrives, expired after 30 minutes.
//! - [`sync_glue`] (glue): the engine's store over the purgatory and the relay, and the
//!   manager with the host's registry and its NIP-77 switch.
//! - [`purgatory_glue`] (glue): our scheduler fetching for the host's purgatory.
//!
//! [`HostRelay::start`] wires them:
//!
//! ```no_run
//! use grasp_sync_host_example::{HostConfig, HostRelay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = HostConfig::new("127.0.0.1:7777".parse()?, "/srv/git");
//! let host = HostRelay::start(config).await?;
//! println!("serving {}", host.url());
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod host_purgatory;
pub mod purgatory_glue;
pub mod relay;
pub mod sync_glue;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{Purgatory, PurgatoryBuildError};
use grasp_sync_relay_builder::{r44, Bridge};
use grasp_sync_tokio::{BuildError, HeldRepositories, ShutdownHandle, SyncStatus};
use nostr::prelude::RelayUrl;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::host_purgatory::OwnPurgatory;
use crate::purgatory_glue::{build_scheduler, Hooks, SchedulerSettings};
use crate::relay::Front;
use crate::sync_glue::{build_sync, tell_held, HostStore, SyncSettings};

/// How often held events are checked for expiry.
const EXPIRY_CHECK: Duration = Duration::from_secs(30);

/// The host's configuration.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where the front listens (port 0: any free port).
    pub listen: SocketAddr,
    /// Where the served git repositories live (`<npub>/<identifier>.git`).
    pub git_root: PathBuf,
    /// Relays the sync connects to from the start.
    pub bootstrap_relays: Vec<RelayUrl>,
    /// NIP-77 on or off; `None`: `NGIT_SYNC_DISABLE_NEGENTROPY` decides (on by default).
    pub negentropy: Option<bool>,
    /// Relays and clone URLs on loopback and private addresses (and `http://` clone
    /// URLs) are allowed: tests, and a host next to its peers.
    pub local_network: bool,
    /// How long the fetch for an event a user submitted waits (3 min: a push may follow).
    pub submitted_delay: Duration,
    /// How long an event is held before it is dropped (30 min).
    pub expiry: Duration,
}

impl HostConfig {
    /// Listens on `listen`, serves git from `git_root`, the defaults otherwise.
    pub fn new(listen: SocketAddr, git_root: impl Into<PathBuf>) -> Self {
        HostConfig {
            listen,
            git_root: git_root.into(),
            bootstrap_relays: Vec::new(),
            negentropy: None,
            local_network: false,
            submitted_delay: Duration::from_secs(180),
            expiry: Duration::from_secs(30 * 60),
        }
    }
}

/// Why the host did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The front cannot listen.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, #[source] std::io::Error),
    /// The front's address is not a relay URL.
    #[error("the front's URL: {0}")]
    Url(String),
    /// The scheduler's configuration.
    #[error(transparent)]
    Scheduler(#[from] PurgatoryBuildError),
    /// The sync's configuration.
    #[error(transparent)]
    Sync(#[from] BuildError),
}

/// The running host: its front, purgatory, scheduler and sync.
#[derive(Debug)]
pub struct HostRelay {
    url: RelayUrl,
    registry: prometheus::Registry,
    purgatory: Arc<OwnPurgatory>,
    scheduler: Purgatory,
    store: HostStore,
    settings: SyncSettings,
    sync: RunningSync,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// One run of the sync manager.
#[derive(Debug)]
struct RunningSync {
    held: HeldRepositories,
    status: watch::Receiver<SyncStatus>,
    shutdown: ShutdownHandle,
    task: JoinHandle<()>,
}

impl HostRelay {
    /// Starts the host: binds the front, builds the relay, purgatory, scheduler and
    /// sync, and runs them in the background.
    pub async fn start(config: HostConfig) -> Result<HostRelay, StartError> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|error| StartError::Listen(config.listen, error))?;
        let addr = listener
            .local_addr()
            .map_err(|error| StartError::Listen(config.listen, error))?;
        let url = RelayUrl::parse(&format!("ws://{addr}"))
            .map_err(|error| StartError::Url(error.to_string()))?;
        let database = Arc::new(r44::MemoryDatabase::with_opts(r44::MemoryDatabaseOptions {
            events: true,
            max_events: None,
        }));
        let bridge = Bridge::new(database.clone());
        let relay = r44::LocalRelay::new(r44::RelayBuilder::default().database(database));
        let relay_store = bridge.store(relay.clone());
        let purgatory = Arc::new(OwnPurgatory::new(
            relay_store.clone(),
            &config.git_root,
            config.expiry,
        ));
        let registry = prometheus::Registry::new();
        let scheduler = build_scheduler(
            purgatory.clone(),
            bridge.announcements(),
            registry.clone(),
            &SchedulerSettings {
                git_root: config.git_root.clone(),
                submitted_delay: config.submitted_delay,
                local_network: config.local_network,
            },
        )?;
        let settings = SyncSettings {
            own_relay: url.clone(),
            bootstrap_relays: config.bootstrap_relays.clone(),
            negentropy: config.negentropy,
            local_network: config.local_network,
        };
        let store = HostStore::new(purgatory.clone(), relay_store);
        let sync = RunningSync::start(&store, &purgatory, registry.clone(), &settings)?;
        purgatory.listen(Arc::new(Hooks::new(scheduler.clone(), sync.held.clone())));
        let (stop, stopped) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(Front::new(relay, purgatory.clone()).serve(listener, stopped)),
            tokio::spawn({
                let scheduler = scheduler.clone();
                async move {
                    if let Err(error) = scheduler.run().await {
                        warn!(%error, "the fetch scheduler stopped");
                    }
                }
            }),
            tokio::spawn(purgatory.clone().run_expiry(EXPIRY_CHECK)),
        ];
        Ok(HostRelay {
            url,
            registry,
            purgatory,
            scheduler,
            store,
            settings,
            sync,
            stop,
            tasks,
        })
    }

    /// The front's URL, `ws://<address>`.
    pub fn url(&self) -> &RelayUrl {
        &self.url
    }

    /// The host's metrics registry, holding the sync's and the scheduler's metrics.
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    /// The host's purgatory.
    pub fn purgatory(&self) -> &Arc<OwnPurgatory> {
        &self.purgatory
    }

    /// Our fetch scheduler, working for the host's purgatory.
    pub fn scheduler(&self) -> &Purgatory {
        &self.scheduler
    }

    /// The sync's status, as it changes.
    pub fn sync_status(&self) -> watch::Receiver<SyncStatus> {
        self.sync.status.clone()
    }

    /// Stops the sync and starts it again over the same store (held events, database):
    /// a fresh engine that must reconcile everything again. The new run's metrics go
    /// to a registry of its own (the host's keeps the first run's, which cannot be
    /// registered twice).
    pub async fn restart_sync(&mut self) -> Result<(), StartError> {
        self.sync.stop().await;
        let sync = RunningSync::start(
            &self.store,
            &self.purgatory,
            prometheus::Registry::new(),
            &self.settings,
        )?;
        self.purgatory.listen(Arc::new(Hooks::new(
            self.scheduler.clone(),
            sync.held.clone(),
        )));
        self.sync = sync;
        Ok(())
    }

    /// Stops the front (and its connections), the sync and the scheduler.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        self.scheduler.shutdown();
        self.sync.stop().await;
        for task in self.tasks {
            task.abort();
        }
    }
}

impl RunningSync {
    /// Builds the sync over `store` and runs it.
    fn start(
        store: &HostStore,
        purgatory: &OwnPurgatory,
        registry: prometheus::Registry,
        settings: &SyncSettings,
    ) -> Result<RunningSync, BuildError> {
        let manager = build_sync(store.clone(), registry, settings)?;
        tell_held(&manager, purgatory);
        let sync = RunningSync {
            held: manager.held_repositories(),
            status: manager.status(),
            shutdown: manager.shutdown_handle(),
            task: tokio::spawn(async move {
                manager.run().await;
            }),
        };
        Ok(sync)
    }

    /// Stops this run and waits for it.
    async fn stop(&mut self) {
        self.shutdown.shutdown();
        if let Err(error) = (&mut self.task).await {
            warn!(%error, "the sync task failed");
        }
    }
}
