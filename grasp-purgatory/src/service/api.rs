//! The [`Purgatory`] handle and what embedders call on it: holding events, triggering
//! a sync, reading what is held and queued, shutting down.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use grasp_sync_core::clock::{Clock, Instant};
use grasp_sync_core::nip34::{parse_announcement, RepoRef, KIND_REPO_ANNOUNCEMENT};
use grasp_sync_core::purgatory::{MaintainerIndex, ReconcileSchedule, SyncQueue, SyncQueueEntry};
use nostr::prelude::{Event, EventId};
use tokio::sync::{watch, Notify};

use super::pause::FetchPause;
use crate::config::PurgatoryConfig;
use crate::context::{lock, GitSyncContext, SharedStore};
use crate::held::{hold_event, HeldEvent, HoldError, Origin};
use crate::host::HostPurgatory;
use crate::journal::RejectedLine;
use crate::metrics::{Metrics, MetricsHandle};
use crate::refusals::EventRefusalLog;
use crate::repos::AnnouncementError;
use crate::serve::{Reconciler, ServedRepository};
use crate::sink::ReleaseSink;
use crate::status::PurgatoryStatus;
use crate::store::{AddError, Eviction, Inserted};
use crate::sync::SyncOutcome;
use crate::tasks::Tasks;
use crate::throttle_manager::ThrottleManager;

/// Why [`Purgatory::schedule_identifier`] scheduled nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleIdentifierError {
    /// The announcements of the identifier could not be read.
    #[error("reading the announcements of {identifier:?} failed: {source}")]
    Announcements {
        /// The identifier asked for.
        identifier: String,
        /// Why.
        #[source]
        source: AnnouncementError,
    },
}

/// Everything the clones of one [`Purgatory`] share.
pub(super) struct Shared {
    pub(super) config: PurgatoryConfig,
    pub(super) store: SharedStore,
    pub(super) queue: Mutex<SyncQueue>,
    /// Wakes the main loop: a new event, a finished sync (main or domain queue).
    pub(super) wake: Arc<Notify>,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) manager: Arc<ThrottleManager>,
    pub(super) ctx: Arc<GitSyncContext>,
    pub(super) sink: Arc<dyn ReleaseSink>,
    /// Read once per input; see [`super::PurgatoryBuilder::clock`].
    pub(super) clock: Arc<dyn Clock>,
    /// Always present; registered in the builder's registry (if any) and the handle's.
    pub(super) metrics: Metrics,
    /// Encodes the metrics not left out ([`Purgatory::metrics_handle`]).
    pub(super) metrics_handle: MetricsHandle,
    /// The last published status (see [`Purgatory::status`]).
    pub(super) status: watch::Sender<PurgatoryStatus>,
    pub(super) tasks: Arc<Tasks>,
    pub(super) restore_rejected: Mutex<Vec<RejectedLine>>,
    /// When refused events were last logged.
    pub(super) refusal_log: EventRefusalLog,
    /// How the last sync attempt of each held repository ended (forgotten once nothing
    /// of it is held).
    pub(super) attempts: Mutex<BTreeMap<RepoRef, SyncOutcome>>,
    /// Reads what each served repository should serve and makes it so.
    pub(super) reconciler: Reconciler,
    /// When each served repository is reconciled next.
    pub(super) schedule: Mutex<ReconcileSchedule>,
    /// Which served repositories list each key as a maintainer (as their last
    /// reconciliation found): a released state makes only those due.
    pub(super) maintainers: Mutex<MaintainerIndex>,
    /// How each served repository stood after its last reconciliation.
    pub(super) served: Mutex<BTreeMap<RepoRef, ServedRepository>>,
    /// When every announcement of the source was last listed (the served repositories).
    pub(super) listed_at: Mutex<Option<Instant>>,
    /// Whether every announcement was listed once (until then, "done" is not known).
    pub(super) listed: Mutex<bool>,
    /// Whether the host reports every announcement it serves: then the listing is read
    /// once, not every few minutes.
    pub(super) announcements_followed: bool,
    /// The host whose held events the scheduler works for, if it keeps its own
    /// purgatory (then the store holds nothing).
    pub(super) host: Option<Arc<dyn HostPurgatory>>,
    /// Over a host's purgatory: the repositories scheduled whose events the host still
    /// holds, as far as the scheduler knows (the status lists them). Locked after the
    /// queue.
    pub(super) scheduled: Mutex<BTreeSet<RepoRef>>,
    /// Fetches held back while a historic sync brings events in waves.
    pub(super) fetch_pause: FetchPause,
}

/// Holds events until their git objects are present, fetching them from the
/// repositories' clone URLs. Cheap to clone; every clone is the same purgatory.
///
/// Build it with [`Purgatory::builder`], drive it with [`Purgatory::run`] on a task
/// until [`Purgatory::shutdown`], and add events with [`Purgatory::add`] (or
/// [`Purgatory::add_state`] / [`Purgatory::add_pr`]). After a `git push` that may have
/// brought the objects, [`Purgatory::trigger_immediate_sync`] checks again without
/// waiting for the debounce.
///
/// Everything is per repository (`30617:<owner>:<identifier>`): an event waits for
/// objects in its owner's repository, fetched from the clone URLs of the owner's
/// announcement and of the maintainers it lists; another author announcing the same
/// identifier takes no part. How many events are held is limited
/// ([`HeldLimits`](crate::HeldLimits)): an event beyond its author's share is refused
/// ([`AddError::Full`]), logged and counted; when a repository or the whole purgatory
/// is full, the author who holds the most loses their oldest event (journaled, logged
/// and counted as evicted), so a newcomer is never refused outright.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use grasp_purgatory::nostr::prelude::Event;
/// use grasp_purgatory::{
///     ChannelSink, MemoryAnnouncements, Origin, Purgatory, PurgatoryOutput,
/// };
///
/// # async fn embed(pull_request: Event) -> Result<(), Box<dyn std::error::Error>> {
/// let (sink, mut outputs) = ChannelSink::new();
/// let purgatory = Purgatory::builder()
///     .announcements(Arc::new(MemoryAnnouncements::new()))
///     .repos_root("/srv/git")
///     .sink(Arc::new(sink))
///     .build()?;
/// let run = tokio::spawn({
///     let purgatory = purgatory.clone();
///     async move { purgatory.run().await }
/// });
///
/// // A user submitted a pull request; the commit is expected to be pushed next.
/// purgatory.add(pull_request, Origin::Submitted)?;
/// // The push arrived: sync "my-repo" now instead of after the debounce.
/// purgatory.trigger_immediate_sync("my-repo");
///
/// if let Some(PurgatoryOutput::Released(held)) = outputs.recv().await {
///     println!("released {}", held.event.id);
/// }
/// purgatory.shutdown();
/// run.await??; // syncs the journal to disk when one is set
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Purgatory {
    pub(super) shared: Arc<Shared>,
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
    /// Holds a repository state event (30618) until every ref tip is present.
    pub fn add_state(&self, event: Event, origin: Origin) -> Result<Inserted, AddError> {
        if event.kind.as_u16() != grasp_sync_core::nip34::KIND_REPO_STATE {
            return Err(HoldError::UnsupportedKind {
                kind: event.kind.as_u16(),
            }
            .into());
        }
        self.add(event, origin)
    }

    /// Holds a pull request (1618) or update (1619) until its commit is present.
    pub fn add_pr(&self, event: Event, origin: Origin) -> Result<Inserted, AddError> {
        if event.kind.as_u16() == grasp_sync_core::nip34::KIND_REPO_STATE {
            return Err(HoldError::UnsupportedKind {
                kind: event.kind.as_u16(),
            }
            .into());
        }
        self.add(event, origin)
    }

    /// Holds a state, pull request or pull request update, and queues its repository:
    /// after the default delay for [`Origin::Submitted`], the immediate delay for
    /// [`Origin::Synced`]. A new event resets the repository's backoff.
    ///
    /// When this returns `Ok`, the event is in the journal (if one is set) and survives a
    /// crash. Refused ([`AddError`]) when it is malformed, when purgatory holds as many
    /// events as its limits allow (counted in `purgatory_events_refused_total` and the
    /// status, logged at warn at most once a minute per reason), or when the journal
    /// cannot be written.
    pub fn add(&self, event: Event, origin: Origin) -> Result<Inserted, AddError> {
        let held = hold_event(event, origin, self.shared.clock.unix_time())?;
        self.hold(held)
    }

    /// Holds the event and queues its repository in one step (store lock, then queue
    /// lock: the order every check-and-remove of the queue uses too), so a concurrent
    /// clean-up never forgets a freshly queued repository.
    pub(super) fn hold(&self, held: HeldEvent) -> Result<Inserted, AddError> {
        if self.shared.host.is_some() {
            return Err(AddError::HeldByHost);
        }
        let repo = held.repo.clone();
        let delay = self.delay_of(held.origin);
        let (inserted, evicted) = {
            let mut store = lock(&self.shared.store);
            let inserted = store.insert(held);
            if matches!(inserted, Ok(Inserted::New | Inserted::Replaced { .. })) {
                self.queue()
                    .enqueue(&repo.to_string(), self.shared.clock.now(), delay);
            }
            (inserted, store.take_evictions())
        };
        // A replaced older state's refs are owed a sweep by the store; the loop runs it.
        if let Err(error) = &inserted {
            self.count_refusal(&repo, error);
        }
        self.count_evictions(&evicted);
        self.shared.wake.notify_one();
        self.update_gauges();
        self.publish_if_settled();
        inserted
    }

    /// How long a repository waits before its sync when an event of this origin arrives.
    fn delay_of(&self, origin: Origin) -> Duration {
        match origin {
            Origin::Submitted => self.shared.config.queue.default_delay,
            Origin::Synced => self.shared.config.queue.immediate_delay,
        }
    }

    /// The host holds a new event of `repo` (or learned of new objects it needs):
    /// schedules a fetch after the debounce of `origin` (the default delay, 3 min, for
    /// [`Origin::Submitted`]; the immediate delay, 500 ms, for [`Origin::Synced`]),
    /// resetting the repository's backoff; a burst of calls makes one sync. For a
    /// purgatory built with [`PurgatoryBuilder::host_purgatory`]; on one that holds its
    /// own events it queues `repo` just the same (a repository with nothing held is
    /// dropped from the queue when its turn comes).
    ///
    /// Do not call it while holding a lock the host's [`HostPurgatory`] methods take.
    ///
    /// [`PurgatoryBuilder::host_purgatory`]: super::PurgatoryBuilder::host_purgatory
    pub fn schedule(&self, repo: &RepoRef, origin: Origin) {
        let delay = self.delay_of(origin);
        {
            let mut queue = self.queue();
            queue.enqueue(&repo.to_string(), self.shared.clock.now(), delay);
            if self.shared.host.is_some() {
                lock_plain(&self.shared.scheduled).insert(repo.clone());
            }
        }
        tracing::debug!(%repo, ?origin, "sync scheduled");
        self.shared.wake.notify_one();
        self.update_gauges();
        self.publish_if_settled();
    }

    /// Schedules every repository of `identifier` (the `d` tag): one per author who
    /// announced it, read through the purgatory's
    /// [`Announcements::announcements`](crate::Announcements::announcements), each as
    /// [`Purgatory::schedule`] would (the debounce of `origin`, its backoff reset).
    /// Returns the repositories scheduled, in key order. For a host whose own
    /// purgatory is keyed by identifier.
    ///
    /// - Nobody announced `identifier`: nothing is scheduled, and `Ok` with no
    ///   repository (logged at info). An event of an unannounced repository is
    ///   scheduled with [`Purgatory::schedule`].
    /// - One owner: exactly [`Purgatory::schedule`] of that repository.
    /// - Several owners (co-maintainers, forks, strangers announcing the same
    ///   identifier): they are synced as one group, so an object they share is fetched
    ///   once. Each stays a repository of its own: its own queue entry (debounce,
    ///   backoff), its own clone URLs (its maintainer set's, checked by the policy, in
    ///   its domains' throttles; never another owner's), its own local repository and
    ///   disk quota, its own served refs. But their syncs take turns, and before asking
    ///   any server a member copies from the other members' local repositories the
    ///   objects it needs that were fetched there (a `git fetch` between local
    ///   repositories, checked by `fsck`, no server asked). A copy that fails is logged
    ///   and the objects are fetched as usual. The group lasts while one of its
    ///   members is queued or has events held; a later call replaces its members (a
    ///   [`Purgatory::schedule`] of a member meanwhile syncs in the group too).
    ///
    /// Refused ([`ScheduleIdentifierError`], logged at warn) when the announcements
    /// cannot be read: nothing is scheduled then; calling again later retries.
    ///
    /// Do not call it while holding a lock the host's [`HostPurgatory`] methods take.
    pub async fn schedule_identifier(
        &self,
        identifier: &str,
        origin: Origin,
    ) -> Result<Vec<RepoRef>, ScheduleIdentifierError> {
        let owners = match self.shared.ctx.owners_of(identifier).await {
            Ok(owners) => owners,
            Err(source) => {
                tracing::warn!(identifier, error = %source, "reading the identifier's announcements failed: nothing scheduled");
                return Err(ScheduleIdentifierError::Announcements {
                    identifier: identifier.to_owned(),
                    source,
                });
            }
        };
        if owners.is_empty() {
            tracing::info!(
                identifier,
                "nobody announced the identifier: nothing scheduled"
            );
            return Ok(owners);
        }
        self.shared.ctx.groups().set(identifier, &owners);
        if owners.len() > 1 {
            tracing::debug!(
                identifier,
                owners = owners.len(),
                "the identifier's repositories sync as one group"
            );
        }
        for repo in &owners {
            self.schedule(repo, origin);
        }
        Ok(owners)
    }

    /// Holds `event` (a state or pull request a reconciliation found missing objects
    /// for) as an event of `repo`: its objects are fetched into `repo`'s local
    /// repository. Already held: nothing changes.
    pub(super) fn hold_for(&self, event: Event, repo: &RepoRef) -> Result<Inserted, AddError> {
        let mut held = hold_event(event, Origin::Synced, self.shared.clock.unix_time())?;
        held.repo = repo.clone();
        self.hold(held)
    }

    /// An event stored beside purgatory: when it is an announcement, its repository is
    /// served, and reconciled at once (the first time) so that it serves its state.
    pub fn track_announcement(&self, event: &Event) {
        if event.kind.as_u16() != KIND_REPO_ANNOUNCEMENT {
            return;
        }
        let Ok(announcement) = parse_announcement(event) else {
            return;
        };
        self.track_repository(&announcement.repo);
    }

    /// Holds every fetch back for `max` at most, or until [`Purgatory::resume_fetches`]:
    /// for a host whose historic sync is about to bring events in waves (a
    /// repository's state first, its pull requests and their updates a moment later).
    /// Events are held and repositories reconciled meanwhile; each repository then
    /// needs one fetch per clone URL for all of its events, where fetching at the first
    /// wave would fetch again at the next and spend the host's politeness budget twice.
    /// The sidecar pauses for at most 60 s at start, until its historic sync is
    /// complete.
    pub fn pause_fetches(&self, max: Duration) {
        self.shared.fetch_pause.pause(self.shared.clock.now(), max);
        self.shared.wake.notify_one();
    }

    /// Ends a [`Purgatory::pause_fetches`]: the repositories waiting start now.
    pub fn resume_fetches(&self) {
        self.shared.fetch_pause.resume();
        self.shared.wake.notify_one();
    }

    /// Serves `repo` from now on: it is reconciled at once if it is new, then at least
    /// every reconciliation interval.
    pub fn track_repository(&self, repo: &RepoRef) {
        let now = self.shared.clock.now();
        lock_plain(&self.shared.schedule).track(&repo.to_string(), now);
        self.shared.wake.notify_one();
    }

    /// Reconciles `repo` (if served) at once: something it serves changed.
    pub fn reconcile_now(&self, repo: &RepoRef) {
        let now = self.shared.clock.now();
        lock_plain(&self.shared.schedule).due_now(&repo.to_string(), now);
        self.shared.wake.notify_one();
    }

    /// Counts (and, at most once a minute per reason, logs) a refused event.
    fn count_refusal(&self, repo: &RepoRef, error: &AddError) {
        let Some(reason) = error.refusal_label() else {
            return;
        };
        let shared = &self.shared;
        shared
            .metrics
            .events_refused
            .with_label_values(&[reason])
            .inc();
        if let Some(refused) = shared.refusal_log.due(reason, shared.clock.now()) {
            tracing::warn!(%repo, reason, %error, refused, "purgatory refused events (count since the last warning)");
        }
    }

    /// Counts the events evicted to make room (each was logged by the store), and
    /// forgets what was kept for their repositories if nothing of them is held any more.
    fn count_evictions(&self, evicted: &[Eviction]) {
        if evicted.is_empty() {
            return;
        }
        for eviction in evicted {
            self.shared
                .metrics
                .events_evicted
                .with_label_values(&[eviction.cap.label()])
                .inc();
        }
        self.forget_released();
    }

    /// Sweeps these repositories' stale `refs/purgatory/*` soon (from the run loop).
    pub(super) fn sweep_later(&self, repos: impl IntoIterator<Item = RepoRef>) {
        lock(&self.shared.store).request_sweeps(repos);
        self.shared.wake.notify_one();
    }

    /// Syncs every held repository with this `identifier` (whoever owns it) after the
    /// immediate delay, for example right after a push, resetting their backoff. Each
    /// repository still syncs on its own, from its own clone URLs. Does nothing when no
    /// event of such a repository is held.
    pub fn trigger_immediate_sync(&self, identifier: &str) {
        let repos: Vec<RepoRef> = match self.shared.host {
            Some(_) => lock_plain(&self.shared.scheduled)
                .iter()
                .filter(|repo| repo.identifier() == identifier)
                .cloned()
                .collect(),
            None => lock(&self.shared.store)
                .repositories()
                .filter(|repo| repo.identifier() == identifier)
                .cloned()
                .collect(),
        };
        for repo in repos {
            self.trigger_repository_sync(&repo);
        }
    }

    /// Syncs `repo` after the immediate delay (for example right after a push to it),
    /// resetting its backoff. Does nothing when no event of it is held.
    pub fn trigger_repository_sync(&self, repo: &RepoRef) {
        if let Some(host) = &self.shared.host {
            if host.has_pending(repo) {
                self.schedule(repo, Origin::Synced);
            }
            return;
        }
        {
            let store = lock(&self.shared.store);
            if !store.has_pending(repo) {
                return;
            }
            let now = self.shared.clock.now();
            let delay = self.shared.config.queue.immediate_delay;
            self.queue().enqueue(&repo.to_string(), now, delay);
        }
        self.shared.wake.notify_one();
        self.publish_if_settled();
    }

    /// Syncs every repository reported not fetchable again after the immediate delay
    /// (resetting its backoff): for a caller that knows the inputs changed, such as a
    /// sidecar whose proactive sync just completed (announcements that arrived since
    /// the last attempt count then). Returns how many were queued.
    pub fn retry_not_fetchable(&self) -> usize {
        let repos: Vec<RepoRef> = self
            .last_attempts()
            .into_iter()
            .filter(|(_, outcome)| matches!(outcome, SyncOutcome::NotFetchable(_)))
            .map(|(repo, _)| repo)
            .collect();
        for repo in &repos {
            self.trigger_repository_sync(repo);
        }
        repos.len()
    }

    /// How the last sync attempt of each held repository ended.
    pub(super) fn last_attempts(&self) -> BTreeMap<RepoRef, SyncOutcome> {
        self.attempts_lock().clone()
    }

    /// Records how the last attempt of `repo` ended (`None`: forget it).
    pub(super) fn note_attempt(&self, repo: &RepoRef, outcome: Option<SyncOutcome>) {
        let mut attempts = self.attempts_lock();
        match outcome {
            Some(outcome) => attempts.insert(repo.clone(), outcome),
            None => attempts.remove(repo),
        };
    }

    fn attempts_lock(&self) -> MutexGuard<'_, BTreeMap<RepoRef, SyncOutcome>> {
        self.shared
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `repo` to be synced `delay` from now.
    pub(super) fn enqueue(&self, repo: &RepoRef, delay: Duration) {
        let now = self.shared.clock.now();
        self.queue().enqueue(&repo.to_string(), now, delay);
        self.shared.wake.notify_one();
    }

    /// Whether the event with this id is held.
    pub fn contains(&self, id: &EventId) -> bool {
        lock(&self.shared.store).contains(id)
    }

    /// A handle that encodes purgatory's metrics (only purgatory's, even when the
    /// builder was given the host's registry) as Prometheus text, read live: for a host
    /// on another prometheus version than ours (0.14), whose registry cannot take our
    /// collectors, to append to its own `/metrics` output. Families left out
    /// ([`PurgatoryBuilder::leave_out_metric`](crate::PurgatoryBuilder::leave_out_metric))
    /// are not in it. See [`MetricsHandle`].
    pub fn metrics_handle(&self) -> MetricsHandle {
        self.shared.metrics_handle.clone()
    }

    /// How many events are held.
    pub fn held(&self) -> usize {
        lock(&self.shared.store).len()
    }

    /// The held events of `repo`.
    pub fn held_events(&self, repo: &RepoRef) -> Vec<HeldEvent> {
        lock(&self.shared.store).events(repo).to_vec()
    }

    /// Every held event.
    pub fn all_held_events(&self) -> Vec<HeldEvent> {
        lock(&self.shared.store).iter().cloned().collect()
    }

    /// How many repositories wait in the sync queue.
    pub fn queue_len(&self) -> usize {
        self.queue().len()
    }

    /// The sync-queue entry of `repo`, if queued.
    pub fn queue_entry(&self, repo: &RepoRef) -> Option<SyncQueueEntry> {
        self.queue().get(&repo.to_string()).copied()
    }

    /// How long until `repo` is synced next, if it is queued and not being synced (zero
    /// when it is due).
    pub fn retry_in(&self, repo: &RepoRef) -> Option<Duration> {
        let entry = self.queue_entry(repo).filter(|entry| !entry.in_progress)?;
        Some(
            entry
                .next_attempt
                .saturating_duration_since(self.shared.clock.now()),
        )
    }

    /// The per-domain throttles.
    pub fn throttle_manager(&self) -> &Arc<ThrottleManager> {
        &self.shared.manager
    }

    /// Lines of the journal that could not be restored at build (line 0: an event that
    /// was read but could not be held again, for example beyond a lowered limit).
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

    /// Drops queue entries (and last attempts) whose events were all released (by a
    /// domain queue) or expired, unless their sync is running.
    pub(super) fn forget_released(&self) {
        let forgotten = match &self.shared.host {
            Some(host) => self.forget_unless(|repo| host.has_pending(repo)),
            None => {
                let store = lock(&self.shared.store);
                self.forget_unless(|repo| store.has_pending(repo))
            }
        };
        if forgotten > 0 {
            self.update_gauges();
        }
    }

    /// Forgets the last attempts, the idle queue entries (and the scheduled
    /// repositories of a host) of the repositories for which `holds` is false; returns
    /// how many queue entries were forgotten. The queue stays locked from the question
    /// to the removal, so a repository scheduled meanwhile is not forgotten.
    fn forget_unless(&self, holds: impl Fn(&RepoRef) -> bool) -> usize {
        self.attempts_lock().retain(|repo, _| holds(repo));
        let mut queue = self.queue();
        let forgotten = queue.retain_idle(|key| RepoRef::parse(key).is_ok_and(|repo| holds(&repo)));
        lock_plain(&self.shared.scheduled)
            .retain(|repo| queue.get(&repo.to_string()).is_some() || holds(repo));
        self.shared
            .ctx
            .groups()
            .retain(|repo| queue.get(&repo.to_string()).is_some() || holds(repo));
        forgotten
    }

    /// Sets the queue-size and held-events gauges.
    pub(super) fn update_gauges(&self) {
        let metrics = &self.shared.metrics;
        metrics.queue_size.set(gauge(self.queue_len()));
        metrics.events_held.set(gauge(self.held()));
    }

    /// Locks the sync queue (plain data every operation leaves consistent, so a panic
    /// elsewhere does not make it unusable).
    pub(super) fn queue(&self) -> MutexGuard<'_, SyncQueue> {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Locks a mutex of plain data (a panic elsewhere leaves it consistent).
pub(super) fn lock_plain<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
