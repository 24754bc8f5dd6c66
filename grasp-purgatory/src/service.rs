//! The purgatory service: holds events, runs the sync queue's main loop, and shuts down
//! cleanly (saving the purgatory when asked to).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use grasp_sync_core::purgatory::{SyncContext, SyncQueue, SyncQueueEntry};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use nostr::prelude::{Event, EventId};
use prometheus::Registry;
use tokio::sync::{watch, Notify};

use crate::clock::PurgatoryClock;
use crate::config::{EnvError, PurgatoryConfig};
use crate::context::{lock, ContextParts, GitSyncContext, SharedStore};
use crate::git::{GitBackend, GitFetcher};
use crate::held::{hold_event, HeldEvent, HoldError, Origin};
use crate::metrics::Metrics;
use crate::persist::{self, LoadReport, RejectedLine};
use crate::repos::{Announcements, NpubLayout, RepoLocator};
use crate::sink::ReleaseSink;
use crate::store::{Inserted, PurgatoryStore};
use crate::sync::sync_identifier;
use crate::tasks::Tasks;
use crate::throttle_manager::ThrottleManager;

/// Why a purgatory could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A required part was not given.
    #[error("purgatory needs {0}")]
    Missing(&'static str),
    /// An environment variable was malformed.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The metrics could not be registered.
    #[error("registering purgatory metrics failed: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The persistence file could not be read.
    #[error("reading the purgatory file {path} failed: {source}")]
    Restore {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Builds a [`Purgatory`].
///
/// Needs the announcements (for clone URLs), where the repositories are
/// ([`PurgatoryBuilder::repos_root`] or a [`RepoLocator`]) and where released events go.
#[must_use]
pub struct PurgatoryBuilder {
    config: PurgatoryConfig,
    announcements: Option<Arc<dyn Announcements>>,
    locator: Option<Arc<dyn RepoLocator>>,
    git: Option<Arc<dyn GitBackend>>,
    sink: Option<Arc<dyn ReleaseSink>>,
    registry: Option<Registry>,
}

impl std::fmt::Debug for PurgatoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PurgatoryBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PurgatoryBuilder {
    fn new() -> Self {
        PurgatoryBuilder {
            config: PurgatoryConfig::default(),
            announcements: None,
            locator: None,
            git: None,
            sink: None,
            registry: None,
        }
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: PurgatoryConfig) -> Self {
        self.config = config;
        self
    }

    /// Applies the process environment (see [`crate::config::ENV_VARIABLES`]).
    pub fn from_env(mut self) -> Result<Self, BuildError> {
        self.config = self.config.apply_env(|name| std::env::var(name).ok())?;
        Ok(self)
    }

    /// Where repository announcements come from.
    pub fn announcements(mut self, announcements: Arc<dyn Announcements>) -> Self {
        self.announcements = Some(announcements);
        self
    }

    /// Repositories live at `<root>/<npub>/<identifier>.git` ([`NpubLayout`]).
    pub fn repos_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.locator = Some(Arc::new(NpubLayout::new(root)));
        self
    }

    /// Finds repositories with a custom locator.
    pub fn repo_locator(mut self, locator: Arc<dyn RepoLocator>) -> Self {
        self.locator = Some(locator);
        self
    }

    /// Where released and expired events go.
    pub fn sink(mut self, sink: Arc<dyn ReleaseSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Runs git through this backend instead of a [`GitFetcher`] built from the config.
    pub fn git_backend(mut self, git: Arc<dyn GitBackend>) -> Self {
        self.git = Some(git);
        self
    }

    /// Registers the `purgatory_*` metrics in `registry`.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Which clone URLs may be fetched from (https to public hosts by default).
    pub fn clone_policy(mut self, policy: CloneUrlPolicy) -> Self {
        self.config.git.policy = policy;
        self
    }

    /// How long one git command may run (at least 100 ms).
    pub fn fetch_timeout(mut self, timeout: Duration) -> Self {
        self.config.git.fetch_timeout = timeout.max(Duration::from_millis(100));
        self
    }

    /// Fetches in flight per domain.
    pub fn domain_concurrent(mut self, max: u32) -> Self {
        self.config.throttle.max_concurrent = max.max(1);
        self
    }

    /// Fetches started per domain per minute.
    pub fn domain_rate_limit(mut self, per_minute: u32) -> Self {
        self.config.throttle.max_per_minute = per_minute.max(1);
        self
    }

    /// Wait before syncing user-submitted events.
    pub fn default_delay(mut self, delay: Duration) -> Self {
        self.config.queue.default_delay = delay;
        self
    }

    /// Wait before syncing events that arrived by sync.
    pub fn immediate_delay(mut self, delay: Duration) -> Self {
        self.config.queue.immediate_delay = delay;
        self
    }

    /// How long an event waits for its data before it expires.
    pub fn expiry(mut self, expiry: Duration) -> Self {
        self.config.expiry = expiry;
        self
    }

    /// Our own git server's domain, never fetched from.
    pub fn our_domain(mut self, domain: impl Into<String>) -> Self {
        self.config.our_domain = Some(domain.into());
        self
    }

    /// Saves the purgatory to `path` on shutdown and restores it from there on build.
    pub fn persist_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.persist_path = Some(path.into());
        self
    }

    /// Builds the purgatory, restoring its saved events if a persistence file is set.
    pub async fn build(self) -> Result<Purgatory, BuildError> {
        let announcements = self
            .announcements
            .ok_or(BuildError::Missing("announcements"))?;
        let locator = self
            .locator
            .ok_or(BuildError::Missing("a repository locator"))?;
        let sink = self.sink.ok_or(BuildError::Missing("a release sink"))?;
        let git = self
            .git
            .unwrap_or_else(|| Arc::new(GitFetcher::new(self.config.git.clone())));
        let metrics = self.registry.as_ref().map(Metrics::register).transpose()?;
        let store: SharedStore = Arc::new(Mutex::new(PurgatoryStore::new()));
        let mut context = GitSyncContext::new(ContextParts {
            store: Arc::clone(&store),
            announcements,
            locator,
            git,
            sink: Arc::clone(&sink),
            our_domain: self.config.our_domain.clone(),
        });
        if let Some(metrics) = &metrics {
            context = context.with_metrics(metrics.clone());
        }
        let ctx: Arc<dyn SyncContext> = Arc::new(context);
        let clock = PurgatoryClock::new();
        let tasks = Arc::new(Tasks::default());
        let wake = Arc::new(Notify::new());
        let manager = Arc::new(ThrottleManager::new(
            self.config.throttle,
            clock,
            self.config.git.policy.clone(),
            Arc::clone(&ctx),
            metrics.clone(),
            Arc::clone(&tasks),
            Arc::clone(&wake),
        ));
        let (shutdown, _) = watch::channel(false);
        let purgatory = Purgatory {
            shared: Arc::new(Shared {
                queue: Mutex::new(SyncQueue::new(self.config.queue)),
                store,
                wake,
                shutdown,
                manager,
                ctx,
                sink,
                clock,
                metrics,
                tasks,
                restore_rejected: Mutex::new(Vec::new()),
                config: self.config,
            }),
        };
        purgatory.restore().await?;
        Ok(purgatory)
    }
}

struct Shared {
    config: PurgatoryConfig,
    store: SharedStore,
    queue: Mutex<SyncQueue>,
    wake: Arc<Notify>,
    shutdown: watch::Sender<bool>,
    manager: Arc<ThrottleManager>,
    ctx: Arc<dyn SyncContext>,
    sink: Arc<dyn ReleaseSink>,
    clock: PurgatoryClock,
    metrics: Option<Metrics>,
    tasks: Arc<Tasks>,
    restore_rejected: Mutex<Vec<RejectedLine>>,
}

/// Holds events until their git objects are present, fetching them from the
/// repositories' clone URLs. Cheap to clone; every clone is the same purgatory.
///
/// Add events with [`Purgatory::add`] (or [`Purgatory::add_state`] /
/// [`Purgatory::add_pr`]), and drive it with [`Purgatory::run`] until
/// [`Purgatory::shutdown`].
#[derive(Clone)]
pub struct Purgatory {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Purgatory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purgatory")
            .field("held", &self.held())
            .field("queued", &self.queue_len())
            .finish_non_exhaustive()
    }
}

impl Purgatory {
    /// Starts building a purgatory.
    pub fn builder() -> PurgatoryBuilder {
        PurgatoryBuilder::new()
    }

    /// Holds a repository state event (30618) until every ref tip is present.
    pub fn add_state(&self, event: Event, origin: Origin) -> Result<Inserted, HoldError> {
        if event.kind.as_u16() != grasp_sync_core::nip34::KIND_REPO_STATE {
            return Err(HoldError::UnsupportedKind {
                kind: event.kind.as_u16(),
            });
        }
        self.add(event, origin)
    }

    /// Holds a pull request (1618) or update (1619) until its commit is present.
    pub fn add_pr(&self, event: Event, origin: Origin) -> Result<Inserted, HoldError> {
        if event.kind.as_u16() == grasp_sync_core::nip34::KIND_REPO_STATE {
            return Err(HoldError::UnsupportedKind {
                kind: event.kind.as_u16(),
            });
        }
        self.add(event, origin)
    }

    /// Holds a state, pull request or pull request update, and queues its identifier:
    /// after the default delay for [`Origin::Submitted`], the immediate delay for
    /// [`Origin::Synced`]. A new event resets the identifier's backoff.
    pub fn add(&self, event: Event, origin: Origin) -> Result<Inserted, HoldError> {
        let held = hold_event(event, origin, self.shared.clock.unix())?;
        Ok(self.hold(held))
    }

    /// Holds the event and queues its identifier in one step (store lock, then queue
    /// lock: the order every check-and-remove of the queue uses too), so a concurrent
    /// clean-up never forgets a freshly queued identifier.
    fn hold(&self, held: HeldEvent) -> Inserted {
        let identifier = held.identifier.clone();
        let delay = match held.origin {
            Origin::Submitted => self.shared.config.queue.default_delay,
            Origin::Synced => self.shared.config.queue.immediate_delay,
        };
        let inserted = {
            let mut store = lock(&self.shared.store);
            let inserted = store.insert(held);
            if matches!(inserted, Inserted::New | Inserted::Replaced { .. }) {
                self.queue()
                    .enqueue(&identifier, self.shared.clock.now(), delay);
            }
            inserted
        };
        self.shared.wake.notify_one();
        self.update_gauges();
        inserted
    }

    /// Syncs `identifier` after the immediate delay (for example right after a push),
    /// resetting its backoff. Does nothing when no event of it is held.
    pub fn trigger_immediate_sync(&self, identifier: &str) {
        let store = lock(&self.shared.store);
        if store.has_pending(identifier) {
            let now = self.shared.clock.now();
            let delay = self.shared.config.queue.immediate_delay;
            self.queue().enqueue(identifier, now, delay);
            self.shared.wake.notify_one();
        }
    }

    fn enqueue(&self, identifier: &str, delay: Duration) {
        let now = self.shared.clock.now();
        self.queue().enqueue(identifier, now, delay);
        self.shared.wake.notify_one();
    }

    /// Whether the event with this id is held.
    pub fn contains(&self, id: &EventId) -> bool {
        lock(&self.shared.store).contains(id)
    }

    /// How many events are held.
    pub fn held(&self) -> usize {
        lock(&self.shared.store).len()
    }

    /// The held events of `identifier`.
    pub fn held_events(&self, identifier: &str) -> Vec<HeldEvent> {
        lock(&self.shared.store).events(identifier).to_vec()
    }

    /// Every held event.
    pub fn all_held_events(&self) -> Vec<HeldEvent> {
        lock(&self.shared.store).iter().cloned().collect()
    }

    /// How many identifiers wait in the sync queue.
    pub fn queue_len(&self) -> usize {
        self.queue().len()
    }

    /// The sync-queue entry of `identifier`, if queued.
    pub fn queue_entry(&self, identifier: &str) -> Option<SyncQueueEntry> {
        self.queue().get(identifier).copied()
    }

    /// The per-domain throttles.
    pub fn throttle_manager(&self) -> &Arc<ThrottleManager> {
        &self.shared.manager
    }

    /// Lines of the persistence file that could not be restored at build.
    pub fn restore_rejected(&self) -> Vec<RejectedLine> {
        self.shared
            .restore_rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Asks [`Purgatory::run`] to stop.
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
    }

    /// Runs the main sync loop until [`Purgatory::shutdown`]: starts every ready
    /// identifier in parallel, applies backoff or removes it when its sync ends, and
    /// expires events that waited too long. On shutdown, stops every task and saves the
    /// purgatory if a persistence file is set.
    pub async fn run(&self) -> Result<(), std::io::Error> {
        let mut shutdown = self.shared.shutdown.subscribe();
        while !*shutdown.borrow_and_update() {
            self.expire().await;
            self.forget_released();
            self.shared.manager.forget_idle_domains();
            self.start_ready();
            let deadline = self.next_wake();
            tokio::select! {
                _ = shutdown.changed() => {}
                () = self.shared.wake.notified() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
        let aborted = self.shared.tasks.shutdown().await;
        tracing::debug!(aborted, "purgatory stopped");
        self.save().await
    }

    /// Saves the purgatory to its persistence file, if one is set.
    pub async fn save(&self) -> Result<(), std::io::Error> {
        let Some(path) = &self.shared.config.persist_path else {
            return Ok(());
        };
        let events = self.all_held_events();
        persist::save(path, &events).await?;
        tracing::info!(path = %path.display(), events = events.len(), "purgatory saved");
        Ok(())
    }

    /// How long until `identifier` is synced next, if it is queued and not being
    /// synced (zero when it is due).
    pub fn retry_in(&self, identifier: &str) -> Option<Duration> {
        let entry = self
            .queue_entry(identifier)
            .filter(|entry| !entry.in_progress)?;
        Some(
            entry
                .next_attempt
                .saturating_duration_since(self.shared.clock.now()),
        )
    }

    async fn restore(&self) -> Result<(), BuildError> {
        let Some(path) = self.shared.config.persist_path.clone() else {
            return Ok(());
        };
        let report: LoadReport = persist::load(&path)
            .await
            .map_err(|source| BuildError::Restore { path, source })?;
        for rejected in &report.rejected {
            tracing::warn!(line = rejected.line, reason = %rejected.reason, "purgatory line not restored");
        }
        let mut refused = report.rejected;
        for saved in report.events {
            match hold_event(saved.event, saved.origin, saved.held_since) {
                Ok(held) => {
                    let identifier = held.identifier.clone();
                    self.hold(held);
                    self.enqueue(&identifier, self.shared.config.queue.immediate_delay);
                }
                Err(error) => refused.push(RejectedLine {
                    line: 0,
                    reason: error.to_string(),
                }),
            }
        }
        *self
            .shared
            .restore_rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = refused;
        Ok(())
    }

    /// When the loop wakes next: the next queue deadline, and at least every loop interval.
    fn next_wake(&self) -> tokio::time::Instant {
        let clock = &self.shared.clock;
        let latest = clock.tokio_after(self.shared.config.loop_interval);
        match self.queue().poll_timeout() {
            Some(at) => clock.to_tokio(at).min(latest),
            None => latest,
        }
    }

    /// Drops queue entries whose events were all released (by a domain queue) or
    /// expired, unless their sync is running.
    fn forget_released(&self) {
        let forgotten = {
            let store = lock(&self.shared.store);
            self.queue()
                .retain_idle(|identifier| store.has_pending(identifier))
        };
        if forgotten > 0 {
            self.update_gauges();
        }
    }

    /// Ends the running sync of `identifier` (removing it from the queue) if no event
    /// of it is held; checked and done under the store lock so no event added meanwhile
    /// is left unqueued. Returns whether it was ended.
    fn finish_if_nothing_held(
        &self,
        identifier: &str,
        now: grasp_sync_core::clock::Instant,
    ) -> bool {
        let store = lock(&self.shared.store);
        if store.has_pending(identifier) {
            return false;
        }
        self.queue().complete(identifier, now, true);
        true
    }

    /// Starts a sync task for every ready identifier.
    fn start_ready(&self) {
        let now = self.shared.clock.now();
        let ready = self.queue().take_ready(now);
        for identifier in ready {
            if self.finish_if_nothing_held(&identifier, now) {
                continue;
            }
            let purgatory = self.clone();
            self.shared
                .tasks
                .spawn(async move { purgatory.sync_one(identifier).await });
        }
        self.update_gauges();
    }

    /// One attempt for `identifier`; then backoff or removal.
    async fn sync_one(&self, identifier: String) {
        let shared = &self.shared;
        let complete = sync_identifier(shared.ctx.as_ref(), &identifier, &shared.manager).await;
        let now = shared.clock.now();
        let done = self.finish_if_nothing_held(&identifier, now);
        if !done {
            // Events remain (or arrived during the sync): back off, or keep the new
            // event's shorter delay.
            self.queue().complete(&identifier, now, false);
            if complete {
                tracing::debug!(%identifier, "new events arrived during the sync");
            }
        }
        if let Some(metrics) = &shared.metrics {
            let result = if done { "done" } else { "retry" };
            metrics.sync_attempts.with_label_values(&[result]).inc();
        }
        if !done {
            tracing::debug!(%identifier, entry = ?self.queue_entry(&identifier), "backing off");
        }
        self.update_gauges();
        shared.wake.notify_one();
    }

    /// Drops events that waited longer than the expiry time and reports each.
    async fn expire(&self) {
        let shared = &self.shared;
        let cutoff = shared.clock.unix() - shared.config.expiry;
        let expired = lock(&shared.store).take_expired(cutoff);
        for held in &expired {
            shared.sink.expired(held).await;
        }
        if !expired.is_empty() {
            self.forget_released();
        }
        if let Some(metrics) = &shared.metrics {
            metrics.events_expired.inc_by(expired.len() as u64);
        }
        if !expired.is_empty() {
            self.update_gauges();
        }
    }

    fn update_gauges(&self) {
        if let Some(metrics) = &self.shared.metrics {
            metrics.queue_size.set(gauge(self.queue_len()));
            metrics.events_held.set(gauge(self.held()));
        }
    }

    fn queue(&self) -> MutexGuard<'_, SyncQueue> {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
