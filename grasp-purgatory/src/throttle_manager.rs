//! Per-domain capacity of git fetches, shared by the main sync and the domain queues.
//!
//! The decisions are the core's [`DomainThrottles`]; this module adds the lock, the
//! metrics and the triggers. It never spawns a task and never fetches: every input that
//! may let a domain's queue move (an identifier enqueued, a fetch of the domain started
//! — to fill the next free slot — or completed, a served identifier finished, a wake-up
//! deadline passed) records a trigger and wakes [`ThrottleManager::step_ready`]; the
//! driver (the purgatory's loop) drains the resulting [`QueueStep`]s with
//! [`ThrottleManager::poll_step`] and serves them.
//!
//! A host name is throttled twice: by its name's key (its registrable domain) and by the
//! address block it resolves to ([`address_block_key`]: IPv4 /24, IPv6 /48), so names
//! of many domains pointing at one server share that server's throttle too. A request
//! starts only when both have capacity ([`ThrottleManager::try_start_request_in`]). A
//! repository waits in its name's queue; when only the block is full, its turn ends
//! with [`ThrottleManager::wait_for_block`], and the block's next completion (or the
//! moment its per-minute window frees) looks at that queue again.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use grasp_sync_core::clock::{Clock, Instant};
use grasp_sync_core::purgatory::{
    address_block_key, DomainThrottles, HostLimit, HostLimits, QueueStep, ThrottleConfig,
};
use grasp_sync_core::url_policy::{CloneUrl, CloneUrlPolicy};
use nostr::types::url::Url;
use tokio::sync::Notify;

use crate::git::Resolver;
use crate::metrics::Metrics;
use crate::status::{ThrottledHost, MAX_LISTED_HOSTS};

/// The default [`ThrottleManager::attempt_deadline`]: 120 s.
pub const DEFAULT_ATTEMPT_DEADLINE: Duration = Duration::from_secs(120);

/// Whether a request could start in its slots, from
/// [`ThrottleManager::try_start_request_in`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Slot {
    /// It started: a slot of the domain (and of the block) is taken.
    Started,
    /// The domain (the host's name) is at one of its limits.
    DomainFull,
    /// The domain had room, the address block the host resolves to did not.
    BlockFull,
}

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
    /// The operator's per-host overrides (the throttles' own, read without their lock).
    host_limits: HostLimits,
    /// Domains whose queue should be looked at, one entry per trigger, oldest first.
    triggered: Mutex<VecDeque<String>>,
    clock: Arc<dyn Clock>,
    policy: CloneUrlPolicy,
    max_clone_urls: usize,
    metrics: Metrics,
    /// Wakes the driver when a domain was triggered.
    steps: Notify,
    /// Resolves host names to their address block; the fetches resolve through the same
    /// one (see [`CachedResolver`](crate::CachedResolver)).
    resolver: Arc<dyn Resolver>,
    /// How long one attempt of a repository starts new fetches of its URLs in turn.
    attempt_deadline: Duration,
    /// Per address block, the domains whose queue waits for it to free.
    waiting_on_block: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Wake-ups decided outside a domain's own queue (a block's window), served first
    /// by [`ThrottleManager::poll_step`].
    pending: Mutex<VecDeque<DomainStep>>,
}

impl std::fmt::Debug for ThrottleManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleManager")
            .field("throttles", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl ThrottleManager {
    /// A manager applying `config` to every domain and address block; candidate URLs
    /// pass `policy`, at most `max_clone_urls` of them per attempt; host names are
    /// resolved to their address block through `resolver`.
    pub(crate) fn new(
        config: ThrottleConfig,
        clock: Arc<dyn Clock>,
        policy: CloneUrlPolicy,
        max_clone_urls: usize,
        metrics: Metrics,
        resolver: Arc<dyn Resolver>,
    ) -> Self {
        ThrottleManager {
            throttles: Mutex::new(DomainThrottles::new(config)),
            host_limits: HostLimits::new(),
            triggered: Mutex::new(VecDeque::new()),
            clock,
            policy,
            max_clone_urls,
            metrics,
            steps: Notify::new(),
            resolver,
            attempt_deadline: DEFAULT_ATTEMPT_DEADLINE,
            waiting_on_block: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(VecDeque::new()),
        }
    }

    /// This manager with the operator's per-host overrides: an overridden host is a
    /// throttle key of its own, with the override's limits, and takes no slot of its
    /// address block (see [`HostLimits`]).
    pub(crate) fn with_host_limits(mut self, host_limits: HostLimits) -> Self {
        let config = *lock_any(&self.throttles).config();
        self.throttles =
            Mutex::new(DomainThrottles::new(config).with_host_limits(host_limits.clone()));
        self.host_limits = host_limits;
        self
    }

    /// This manager with one attempt of a repository starting fetches for at most
    /// `deadline` ([`ThrottleManager::attempt_deadline`]).
    pub(crate) fn with_attempt_deadline(mut self, deadline: Duration) -> Self {
        self.attempt_deadline = deadline;
        self
    }

    /// How long one attempt of a repository starts new fetches of its URLs, one after
    /// another ([`PurgatoryConfig::attempt_deadline`](crate::PurgatoryConfig)): then the
    /// URLs not tried yet are left to their domains' queues, which try them in turns
    /// beside other repositories', and the attempt ends.
    pub fn attempt_deadline(&self) -> Duration {
        self.attempt_deadline
    }

    /// Now, on the purgatory's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The operator's per-host overrides.
    pub fn host_limits(&self) -> &HostLimits {
        &self.host_limits
    }

    /// The throttle key of `url`'s host: the host itself when the operator gave it
    /// limits of its own, else its registrable domain or address block
    /// ([`HostLimits::throttle_key`]).
    pub fn throttle_key(&self, url: &CloneUrl) -> String {
        self.host_limits.throttle_key(url.domain())
    }

    /// The throttle key of the address block `url`'s host name resolves to (its first
    /// address, the one a fetch is pinned to), which its fetch takes a slot of too;
    /// `None` for an IP literal (its own key is already its block), a host whose key has
    /// an operator's override ([`HostLimits::charges_address_block`]) or a name that
    /// does not resolve (its fetch fails before connecting).
    pub async fn address_block(&self, url: &CloneUrl) -> Option<String> {
        if url.domain().parse::<IpAddr>().is_ok()
            || !self
                .host_limits
                .charges_address_block(&self.throttle_key(url))
        {
            return None;
        }
        let port = Url::parse(url.as_str())
            .ok()
            .and_then(|parsed| parsed.port_or_known_default())
            .unwrap_or(9418);
        let addresses = self.resolver.resolve(url.domain(), port).await.ok()?;
        let first = addresses.first()?;
        Some(address_block_key(first.ip()))
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

    /// The throttles with a fetch in flight, a fetch started within their window or a
    /// repository queued, for the status: the [`MAX_LISTED_HOSTS`] with the most queued
    /// (then the most in flight, then by key), and how many there are in all.
    pub fn throttled_hosts(&self) -> (Vec<ThrottledHost>, usize) {
        let now = self.clock.now();
        let throttles = self.lock();
        let default = *throttles.config();
        let mut hosts: Vec<ThrottledHost> = throttles
            .iter()
            .filter(|throttle| {
                throttle.in_flight() > 0
                    || throttle.queued_len() > 0
                    || throttle.requests_in_window(now) > 0
            })
            .map(|throttle| {
                let overridden = self.host_limits.limit_for_key(throttle.domain());
                ThrottledHost {
                    key: throttle.domain().to_owned(),
                    limit: overridden.unwrap_or(HostLimit::Limited {
                        max_per_minute: default.max_per_minute,
                        max_concurrent: default.max_concurrent,
                    }),
                    overridden: overridden.is_some(),
                    in_flight: throttle.in_flight(),
                    started_in_window: throttle.requests_in_window(now),
                    queued: throttle.queued_len(),
                    drain_estimate: throttle.drain_estimate(now),
                }
            })
            .collect();
        drop(throttles);
        let total = hosts.len();
        hosts.sort_by(|a, b| {
            b.queued
                .cmp(&a.queued)
                .then(b.in_flight.cmp(&a.in_flight))
                .then_with(|| a.key.cmp(&b.key))
        });
        hosts.truncate(MAX_LISTED_HOSTS);
        (hosts, total)
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
        self.try_start_request_in(domain, None) == Slot::Started
    }

    /// Takes a request slot of `domain` and, for a host name, of the address `block` it
    /// resolves to: both or neither. On success a waiting identifier may take the next
    /// slot.
    pub fn try_start_request_in(&self, domain: &str, block: Option<&str>) -> Slot {
        let now = self.clock.now();
        let slot = {
            let mut throttles = self.lock();
            if throttles.is_throttled(domain, now) {
                Slot::DomainFull
            } else if block.is_some_and(|block| throttles.is_throttled(block, now)) {
                Slot::BlockFull
            } else {
                let started = throttles.entry(domain).try_start_request(now);
                if let (true, Some(block)) = (started, block) {
                    throttles.entry(block).try_start_request(now);
                }
                if started {
                    Slot::Started
                } else {
                    Slot::DomainFull
                }
            }
        };
        if slot == Slot::Started {
            for key in std::iter::once(domain).chain(block) {
                let metrics = &self.metrics;
                metrics.domain_requests.with_label_values(&[key]).inc();
                metrics.domain_in_flight.with_label_values(&[key]).inc();
            }
            self.trigger(domain);
        }
        slot
    }

    /// Gives back a request slot of `domain`, so its queue may move.
    pub fn complete_request(&self, domain: &str) {
        self.complete_request_in(domain, None);
    }

    /// Gives back the slots [`ThrottleManager::try_start_request_in`] took, so the
    /// domain's queue, and those waiting for the block, may move.
    pub fn complete_request_in(&self, domain: &str, block: Option<&str>) {
        let now = self.clock.now();
        {
            let mut throttles = self.lock();
            for key in std::iter::once(domain).chain(block) {
                if let Some(throttle) = throttles.get_mut(key) {
                    throttle.complete_request(now);
                }
            }
        }
        for key in std::iter::once(domain).chain(block) {
            self.metrics
                .domain_in_flight
                .with_label_values(&[key])
                .dec();
        }
        self.trigger(domain);
        if let Some(block) = block {
            self.wake_waiting_on(block);
        }
    }

    /// A served identifier of `domain`'s queue could not start because the address
    /// `block` was full: its turn ends without a URL tried, and the queue is looked at
    /// again when the block frees (a completion, or its per-minute window), not at once.
    pub fn wait_for_block(&self, domain: &str, identifier: &str, block: &str) {
        let now = self.clock.now();
        let (has_room, frees_at) = {
            let mut throttles = self.lock();
            if let Some(throttle) = throttles.get_mut(domain) {
                throttle.mark_identifier_not_in_progress(identifier);
            }
            let has_room = !throttles.is_throttled(block, now);
            let frees_at = throttles
                .get(block)
                .and_then(|throttle| throttle.window_frees_at(now));
            (has_room, frees_at)
        };
        if has_room {
            // It freed meanwhile: no completion is coming to say so.
            self.trigger(domain);
            return;
        }
        lock_any(&self.waiting_on_block)
            .entry(block.to_owned())
            .or_default()
            .insert(domain.to_owned());
        if let Some(at) = frees_at {
            lock_any(&self.pending).push_back(DomainStep {
                domain: domain.to_owned(),
                step: QueueStep::WakeAt(at),
            });
            self.steps.notify_one();
        }
        tracing::debug!(%domain, %block, %identifier, "waiting for a full address block");
    }

    /// Looks again at the queues waiting for `block`.
    fn wake_waiting_on(&self, block: &str) {
        let waiting = lock_any(&self.waiting_on_block).remove(block);
        for domain in waiting.into_iter().flatten() {
            self.trigger(&domain);
        }
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
        if let Some(step) = lock_any(&self.pending).pop_front() {
            return Some(step);
        }
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
        lock_any(&self.throttles)
    }

    fn triggered(&self) -> MutexGuard<'_, VecDeque<String>> {
        lock_any(&self.triggered)
    }
}

/// Locks `mutex`, taking over a poisoned one (every update here leaves it consistent).
fn lock_any<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
