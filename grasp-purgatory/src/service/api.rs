//! The [`Purgatory`] handle and what embedders call on it: holding events, triggering
//! a sync, reading what is held and queued, shutting down.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use grasp_sync_core::purgatory::{SyncContext, SyncQueue, SyncQueueEntry};
use nostr::prelude::{Event, EventId};
use tokio::sync::{watch, Notify};

use crate::clock::PurgatoryClock;
use crate::config::PurgatoryConfig;
use crate::context::{lock, SharedStore};
use crate::held::{hold_event, HeldEvent, HoldError, Origin};
use crate::metrics::Metrics;
use crate::persist::RejectedLine;
use crate::sink::ReleaseSink;
use crate::status::PurgatoryStatus;
use crate::store::Inserted;
use crate::tasks::Tasks;
use crate::throttle_manager::ThrottleManager;

/// Everything the clones of one [`Purgatory`] share.
pub(super) struct Shared {
    pub(super) config: PurgatoryConfig,
    pub(super) store: SharedStore,
    pub(super) queue: Mutex<SyncQueue>,
    /// Wakes the main loop: a new event, a finished sync (main or domain queue).
    pub(super) wake: Arc<Notify>,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) manager: Arc<ThrottleManager>,
    pub(super) ctx: Arc<dyn SyncContext>,
    pub(super) sink: Arc<dyn ReleaseSink>,
    pub(super) clock: PurgatoryClock,
    /// Always present; registered only when the builder was given a registry.
    pub(super) metrics: Metrics,
    /// The last published status (see [`Purgatory::status`]).
    pub(super) status: watch::Sender<PurgatoryStatus>,
    pub(super) tasks: Arc<Tasks>,
    pub(super) restore_rejected: Mutex<Vec<RejectedLine>>,
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
/// run.await??; // saves the purgatory when a persistence file is set
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
    pub(super) fn hold(&self, held: HeldEvent) -> Inserted {
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
        self.publish_if_settled();
        inserted
    }

    /// Syncs `identifier` after the immediate delay (for example right after a push),
    /// resetting its backoff. Does nothing when no event of it is held.
    pub fn trigger_immediate_sync(&self, identifier: &str) {
        {
            let store = lock(&self.shared.store);
            if !store.has_pending(identifier) {
                return;
            }
            let now = self.shared.clock.now();
            let delay = self.shared.config.queue.immediate_delay;
            self.queue().enqueue(identifier, now, delay);
        }
        self.shared.wake.notify_one();
        self.publish_if_settled();
    }

    /// Queues `identifier` to be synced `delay` from now.
    pub(super) fn enqueue(&self, identifier: &str, delay: Duration) {
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

    /// Drops queue entries whose events were all released (by a domain queue) or
    /// expired, unless their sync is running.
    pub(super) fn forget_released(&self) {
        let forgotten = {
            let store = lock(&self.shared.store);
            self.queue()
                .retain_idle(|identifier| store.has_pending(identifier))
        };
        if forgotten > 0 {
            self.update_gauges();
        }
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
