//! Per-domain capacity of git fetches, shared by the main sync and the domain queues.
//!
//! The decisions are the core's [`DomainThrottles`]; this module adds the lock, the
//! metrics and the triggers. It never spawns a task and never fetches: every input that
//! may let a domain's queue move (an identifier enqueued, a fetch of the domain started
//! — to fill the next free slot — or completed, a served identifier finished, a wake-up
//! deadline passed) records a trigger and wakes [`ThrottleManager::step_ready`]; the
//! driver (the purgatory's loop) drains the resulting [`QueueStep`]s with
//! [`ThrottleManager::poll_step`] and serves them.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use grasp_sync_core::clock::Clock;
use grasp_sync_core::purgatory::{DomainThrottles, QueueStep, ThrottleConfig};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// What one domain's queue should do next, from [`ThrottleManager::poll_step`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DomainStep {
    /// The domain whose queue this is.
    pub domain: String,
    /// What to do: serve an identifier now ([`QueueStep::Serve`], already marked in
    /// progress: finish it with [`ThrottleManager::finish_serving`] or
    /// [`ThrottleManager::remove_identifier`]) or look again at a deadline
    /// ([`QueueStep::WakeAt`], then [`ThrottleManager::wake_domain`]). Never
    /// [`QueueStep::Idle`].
    pub step: QueueStep,
}

/// Rate limits per domain and the waiting queues, shared by the main sync and the
/// domain queues. Decides capacity only; whoever drives it serves the steps of
/// [`ThrottleManager::poll_step`]. Queues hold repositories under the text of their
/// coordinate (`30617:<owner>:<identifier>`).
pub struct ThrottleManager {
    throttles: Mutex<DomainThrottles>,
    /// Domains whose queue should be looked at, one entry per trigger, oldest first.
    triggered: Mutex<VecDeque<String>>,
    clock: Arc<dyn Clock>,
    policy: CloneUrlPolicy,
    max_clone_urls: usize,
    metrics: Metrics,
    /// Wakes the driver when a domain was triggered.
    steps: Notify,
}

impl std::fmt::Debug for ThrottleManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleManager")
            .field("throttles", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl ThrottleManager {
    /// A manager applying `config` to every domain; candidate URLs pass `policy`, at
    /// most `max_clone_urls` of them per attempt.
    pub(crate) fn new(
        config: ThrottleConfig,
        clock: Arc<dyn Clock>,
        policy: CloneUrlPolicy,
        max_clone_urls: usize,
        metrics: Metrics,
    ) -> Self {
        ThrottleManager {
            throttles: Mutex::new(DomainThrottles::new(config)),
            triggered: Mutex::new(VecDeque::new()),
            clock,
            policy,
            max_clone_urls,
            metrics,
            steps: Notify::new(),
        }
    }

    /// The clone-URL policy candidate URLs pass.
    pub fn policy(&self) -> &CloneUrlPolicy {
        &self.policy
    }

    /// The most distinct clone URLs one attempt of a repository tries
    /// ([`PurgatoryConfig::max_clone_urls`](crate::PurgatoryConfig::max_clone_urls)).
    pub fn max_clone_urls(&self) -> usize {
        self.max_clone_urls
    }

    /// Whether `domain` is at one of its limits now.
    pub fn is_throttled(&self, domain: &str) -> bool {
        self.lock().is_throttled(domain, self.clock.now())
    }

    /// Fetches in flight for `domain`.
    pub fn in_flight(&self, domain: &str) -> u32 {
        self.lock().get(domain).map_or(0, |t| t.in_flight())
    }

    /// Fetches in flight per domain, for the domains with at least one.
    pub fn in_flight_by_domain(&self) -> BTreeMap<String, u32> {
        self.lock()
            .iter()
            .filter(|throttle| throttle.in_flight() > 0)
            .map(|throttle| (throttle.domain().to_owned(), throttle.in_flight()))
            .collect()
    }

    /// Every identifier waiting in (or being served from) the queue of a throttled
    /// domain, whichever domain it waits for.
    pub fn queued_identifiers(&self) -> BTreeSet<String> {
        self.lock()
            .iter()
            .flat_map(|throttle| throttle.queued_identifiers().map(str::to_owned))
            .collect()
    }

    /// Identifiers waiting in `domain`'s queue.
    pub fn queued(&self, domain: &str) -> Vec<String> {
        self.lock()
            .get(domain)
            .map(|t| t.queued_identifiers().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Forgets the domains with nothing in flight, in the window or queued, and their
    /// `domain` metric series, so memory and the label set follow the active domains
    /// only.
    pub fn forget_idle_domains(&self) {
        let removed = self.lock().remove_idle(self.clock.now());
        for domain in removed {
            self.metrics.forget_domain(&domain);
        }
    }

    /// Takes a request slot of `domain` if it has capacity; on success a waiting
    /// identifier may take the next slot.
    pub fn try_start_request(&self, domain: &str) -> bool {
        let started = self
            .lock()
            .entry(domain)
            .try_start_request(self.clock.now());
        if started {
            let metrics = &self.metrics;
            metrics.domain_requests.with_label_values(&[domain]).inc();
            metrics.domain_in_flight.with_label_values(&[domain]).inc();
            self.trigger(domain);
        }
        started
    }

    /// Gives back a request slot of `domain`, so its queue may move.
    pub fn complete_request(&self, domain: &str) {
        if let Some(throttle) = self.lock().get_mut(domain) {
            throttle.complete_request(self.clock.now());
        }
        self.metrics
            .domain_in_flight
            .with_label_values(&[domain])
            .dec();
        self.trigger(domain);
    }

    /// Puts `identifier` in `domain`'s queue (merging the URLs already tried), to be
    /// served when the domain has capacity.
    pub fn enqueue_identifier(
        &self,
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

    /// The URLs of `domain` already tried for `identifier` from its queue.
    pub fn tried_urls(&self, domain: &str, identifier: &str) -> HashSet<String> {
        self.lock()
            .get(domain)
            .map(|t| t.get_tried_urls(identifier))
            .unwrap_or_default()
    }

    /// A served identifier's turn ended: records `tried_url` (when a fetch ran) and
    /// lets the identifier be served again.
    pub fn finish_serving(&self, domain: &str, identifier: &str, tried_url: Option<&str>) {
        if let Some(throttle) = self.lock().get_mut(domain) {
            if let Some(url) = tried_url {
                throttle.mark_url_tried(identifier, url);
            }
            throttle.mark_identifier_not_in_progress(identifier);
        }
        self.trigger(domain);
    }

    /// Drops `identifier` from `domain`'s queue (no URL of the domain is left for it).
    pub fn remove_identifier(&self, domain: &str, identifier: &str) {
        if let Some(throttle) = self.lock().get_mut(domain) {
            throttle.remove_identifier(identifier);
        }
        self.trigger(domain);
    }

    /// A [`QueueStep::WakeAt`] deadline of `domain` passed: look at its queue again.
    pub fn wake_domain(&self, domain: &str) {
        self.trigger(domain);
    }

    /// Waits until a domain was triggered since the last wait (at once if one was):
    /// then drain [`ThrottleManager::poll_step`]. One driver waits at a time.
    pub async fn step_ready(&self) {
        self.steps.notified().await;
    }

    /// The next step of a triggered domain's queue, decided now; `None` when no
    /// triggered domain has anything to do. Drain it after every
    /// [`ThrottleManager::step_ready`].
    pub fn poll_step(&self) -> Option<DomainStep> {
        loop {
            let domain = self.triggered().pop_front()?;
            match self.lock().next_step(&domain, self.clock.now()) {
                QueueStep::Idle => continue,
                step => return Some(DomainStep { domain, step }),
            }
        }
    }

    /// Records that `domain`'s queue may move and wakes the driver.
    fn trigger(&self, domain: &str) {
        self.triggered().push_back(domain.to_owned());
        self.steps.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, DomainThrottles> {
        self.throttles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn triggered(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.triggered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
