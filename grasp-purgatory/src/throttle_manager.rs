//! Per-domain throttling of git fetches, and the queues of identifiers waiting for a
//! throttled domain, served when capacity frees (no polling loop).
//!
//! The decisions are the core's [`DomainThrottles`]; this module adds the locking, the
//! spawning and the triggers: a domain's queue is served when an identifier is enqueued,
//! when a fetch of the domain starts (to fill the next free slot) or completes, and, when
//! the domain is at its per-minute limit with nothing in flight, by a one-shot timer at
//! the moment the oldest request leaves the window.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use grasp_sync_core::purgatory::{DomainThrottles, QueueStep, SyncContext, ThrottleConfig};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use tokio::sync::Notify;

use crate::clock::PurgatoryClock;
use crate::metrics::Metrics;
use crate::sync::{sync_identifier_from_url, sync_identifier_next_url, FromUrl};
use crate::tasks::Tasks;

/// Rate limits per domain and the waiting queues, shared by the main sync and the
/// domain queues.
pub struct ThrottleManager {
    throttles: Mutex<DomainThrottles>,
    /// Domains with a wake-up timer scheduled.
    timers: Mutex<HashSet<String>>,
    clock: PurgatoryClock,
    policy: CloneUrlPolicy,
    ctx: Arc<dyn SyncContext>,
    metrics: Option<Metrics>,
    tasks: Arc<Tasks>,
    /// Wakes the main loop after a domain queue served an identifier.
    wake: Arc<Notify>,
}

impl std::fmt::Debug for ThrottleManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleManager")
            .field("throttles", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl ThrottleManager {
    /// A manager applying `config` to every domain, serving queues through `ctx`.
    pub(crate) fn new(
        config: ThrottleConfig,
        clock: PurgatoryClock,
        policy: CloneUrlPolicy,
        ctx: Arc<dyn SyncContext>,
        metrics: Option<Metrics>,
        tasks: Arc<Tasks>,
        wake: Arc<Notify>,
    ) -> Self {
        ThrottleManager {
            throttles: Mutex::new(DomainThrottles::new(config)),
            timers: Mutex::new(HashSet::new()),
            clock,
            policy,
            ctx,
            metrics,
            tasks,
            wake,
        }
    }

    /// The clone-URL policy candidate URLs pass.
    pub fn policy(&self) -> &CloneUrlPolicy {
        &self.policy
    }

    /// Whether `domain` is at one of its limits now.
    pub fn is_throttled(&self, domain: &str) -> bool {
        self.lock().is_throttled(domain, self.clock.now())
    }

    /// Fetches in flight for `domain`.
    pub fn in_flight(&self, domain: &str) -> u32 {
        self.lock().get(domain).map_or(0, |t| t.in_flight())
    }

    /// Identifiers waiting in `domain`'s queue.
    pub fn queued(&self, domain: &str) -> Vec<String> {
        self.lock()
            .get(domain)
            .map(|t| t.queued_identifiers().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Forgets the domains with nothing in flight, in the window or queued, so memory
    /// follows the active domains only.
    pub fn forget_idle_domains(&self) {
        self.lock().remove_idle(self.clock.now());
    }

    /// Takes a request slot of `domain` if it has capacity; on success a waiting
    /// identifier may take the next slot.
    pub fn try_start_request(self: &Arc<Self>, domain: &str) -> bool {
        let started = self
            .lock()
            .entry(domain)
            .try_start_request(self.clock.now());
        if started {
            if let Some(metrics) = &self.metrics {
                metrics.domain_requests.with_label_values(&[domain]).inc();
                metrics.domain_in_flight.with_label_values(&[domain]).inc();
            }
            self.trigger(domain);
        }
        started
    }

    /// Gives back a request slot of `domain` and serves its queue.
    pub fn complete_request(self: &Arc<Self>, domain: &str) {
        if let Some(throttle) = self.lock().get_mut(domain) {
            throttle.complete_request(self.clock.now());
        }
        if let Some(metrics) = &self.metrics {
            metrics.domain_in_flight.with_label_values(&[domain]).dec();
        }
        self.trigger(domain);
    }

    /// Puts `identifier` in `domain`'s queue (merging the URLs already tried) and serves
    /// the queue if the domain has capacity.
    pub fn enqueue_identifier(
        self: &Arc<Self>,
        domain: &str,
        identifier: &str,
        tried_urls_for_domain: HashSet<String>,
    ) {
        self.lock()
            .entry(domain)
            .enqueue_identifier(identifier, tried_urls_for_domain);
        tracing::debug!(%domain, %identifier, "identifier waits for a throttled domain");
        self.trigger(domain);
    }

    /// Serves the next waiting identifier of `domain` if it has capacity, or schedules a
    /// wake-up when only the per-minute window holds it back.
    fn trigger(self: &Arc<Self>, domain: &str) {
        let now = self.clock.now();
        let step = match self.lock().get_mut(domain) {
            Some(throttle) => throttle.next_step(now),
            None => return,
        };
        match step {
            QueueStep::Serve(identifier) => {
                let manager = Arc::clone(self);
                let domain = domain.to_owned();
                self.tasks
                    .spawn(async move { manager.serve(domain, identifier).await });
            }
            QueueStep::WakeAt(at) => self.wake_at(domain, at),
            QueueStep::Idle => {}
        }
    }

    /// Schedules one timer per domain that triggers it at `at`.
    fn wake_at(self: &Arc<Self>, domain: &str, at: grasp_sync_core::clock::Instant) {
        if !self.timers().insert(domain.to_owned()) {
            return;
        }
        let manager = Arc::clone(self);
        let domain = domain.to_owned();
        let deadline = self.clock.to_tokio(at);
        self.tasks.spawn(async move {
            tokio::time::sleep_until(deadline).await;
            manager.timers().remove(&domain);
            manager.trigger(&domain);
        });
    }

    /// Fetches for `identifier` from the next untried URL of `domain`, or drops the
    /// identifier from the domain's queue when none is left; then serves the queue again.
    async fn serve(self: Arc<Self>, domain: String, identifier: String) {
        let tried = self
            .lock()
            .get(&domain)
            .map(|t| t.get_tried_urls(&identifier))
            .unwrap_or_default();
        let ctx = Arc::clone(&self.ctx);
        let url =
            sync_identifier_next_url(ctx.as_ref(), &identifier, Some(&domain), &tried, &self).await;
        let Some(url) = url else {
            if let Some(throttle) = self.lock().get_mut(&domain) {
                throttle.remove_identifier(&identifier);
            }
            self.trigger(&domain);
            return;
        };
        let outcome = sync_identifier_from_url(ctx.as_ref(), &identifier, &url, &self).await;
        if let Some(throttle) = self.lock().get_mut(&domain) {
            if !matches!(outcome, FromUrl::Throttled) {
                throttle.mark_url_tried(&identifier, url.as_str());
            }
            throttle.mark_identifier_not_in_progress(&identifier);
        }
        self.wake.notify_one();
        self.trigger(&domain);
    }

    fn lock(&self) -> MutexGuard<'_, DomainThrottles> {
        self.throttles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn timers(&self) -> MutexGuard<'_, HashSet<String>> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
