//! Per-domain rate limits and the queue of identifiers waiting for a domain.
//!
//! [`DomainThrottle`] is the only place that decides whether a git server may
//! receive another request: at most [`ThrottleConfig::max_concurrent`] in
//! flight and at most [`ThrottleConfig::max_per_minute`] started within any
//! [`ThrottleConfig::window`]. It also holds the identifiers that wait for
//! that domain, served round-robin, each with the URLs of this domain already
//! tried for it.
//!
//! Driving contract (the spec's trigger-based processing, without tasks):
//! - after [`DomainThrottle::enqueue_identifier`] or
//!   [`DomainThrottle::complete_request`], while [`DomainThrottle::has_capacity`]
//!   and [`DomainThrottle::next_ready_identifier`] gives an identifier, pick
//!   its next URL and start the fetch with [`DomainThrottle::try_start_request`];
//! - when a fetch ends, call [`DomainThrottle::complete_request`],
//!   [`DomainThrottle::mark_url_tried`] and
//!   [`DomainThrottle::mark_identifier_not_in_progress`]; when no URL is left
//!   for an identifier, [`DomainThrottle::remove_identifier`];
//! - when nothing is in flight but the per-minute limit is reached, no
//!   completion will come to trigger more work: wake up at
//!   [`DomainThrottle::poll_timeout`] and try again.
//!
//! Time never runs backwards inside a throttle: an earlier `now` than one a
//! mutating call already saw is treated as that latest instant.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use indexmap::IndexMap;

use super::host_limits::HostLimits;
pub use super::host_limits::ThrottleConfig;
use crate::clock::Instant;

/// What a domain's queue should do next; see `DomainThrottle::next_step`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueStep {
    /// Fetch for this identifier now (it is marked in progress).
    Serve(String),
    /// Nothing can start before this instant and no completion will come:
    /// serve the queue again then.
    WakeAt(Instant),
    /// Nothing to do until a request completes or an identifier is queued.
    Idle,
}

/// An identifier waiting in a domain's queue.
#[derive(Clone, Debug, Default)]
struct QueuedIdentifier {
    /// URLs of this domain already tried for the identifier.
    tried_urls: HashSet<String>,
    /// Whether a fetch for the identifier on this domain is running.
    in_progress: bool,
}

/// Rate limits and waiting identifiers of one domain.
#[derive(Clone, Debug)]
pub struct DomainThrottle {
    domain: String,
    config: ThrottleConfig,
    in_flight: u32,
    /// Start times of recent requests, oldest first (non-decreasing).
    request_times: VecDeque<Instant>,
    /// The latest `now` a mutating call saw.
    latest: Instant,
    /// Waiting identifiers in round-robin order.
    queue: IndexMap<String, QueuedIdentifier>,
    /// Position in `queue` where the next round-robin scan starts.
    round_robin_index: usize,
}

impl DomainThrottle {
    /// An idle throttle for `domain`.
    pub(crate) fn new(domain: impl Into<String>, config: ThrottleConfig) -> Self {
        DomainThrottle {
            domain: domain.into(),
            config,
            in_flight: 0,
            request_times: VecDeque::new(),
            latest: Instant::ZERO,
            queue: IndexMap::new(),
            round_robin_index: 0,
        }
    }

    /// The domain this throttle limits.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The limits of this throttle.
    pub fn config(&self) -> &ThrottleConfig {
        &self.config
    }

    /// Requests currently in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// `now`, or the latest instant already seen if `now` is earlier.
    fn effective_now(&self, now: Instant) -> Instant {
        now.max(self.latest)
    }

    /// Whether a request started at `start` still counts at `now`.
    fn counts_at(&self, start: Instant, now: Instant) -> bool {
        now.saturating_duration_since(start) < self.config.window
    }

    /// Advances the latest seen instant and forgets expired request times.
    fn observe(&mut self, now: Instant) -> Instant {
        let now = self.effective_now(now);
        self.latest = now;
        while let Some(&oldest) = self.request_times.front() {
            if self.counts_at(oldest, now) {
                break;
            }
            self.request_times.pop_front();
        }
        now
    }

    /// Requests started within the window ending at `now`.
    pub fn requests_in_window(&self, now: Instant) -> usize {
        let now = self.effective_now(now);
        self.request_times
            .iter()
            .filter(|&&start| self.counts_at(start, now))
            .count()
    }

    fn below_concurrency_limit(&self) -> bool {
        self.in_flight < self.config.max_concurrent
    }

    fn below_rate_limit(&self, now: Instant) -> bool {
        self.requests_in_window(now) < self.config.max_per_minute as usize
    }

    /// Whether a request may start at `now`.
    pub(crate) fn has_capacity(&self, now: Instant) -> bool {
        self.below_concurrency_limit() && self.below_rate_limit(now)
    }

    /// Starts a request at `now` if both limits allow it, and records it.
    /// Returns whether the request may go ahead.
    pub fn try_start_request(&mut self, now: Instant) -> bool {
        let now = self.observe(now);
        if !self.has_capacity(now) {
            return false;
        }
        self.in_flight = self.in_flight.saturating_add(1);
        self.request_times.push_back(now);
        true
    }

    /// A request started by [`DomainThrottle::try_start_request`] ended at `now`.
    pub fn complete_request(&mut self, now: Instant) {
        self.observe(now);
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Queues `identifier` for this domain, or adds `tried_urls` to the URLs
    /// already tried for it if it is queued. A queued identifier keeps its
    /// round-robin position.
    pub fn enqueue_identifier(&mut self, identifier: &str, tried_urls: HashSet<String>) {
        match self.queue.get_mut(identifier) {
            Some(queued) => queued.tried_urls.extend(tried_urls),
            None => {
                self.queue.insert(
                    identifier.to_owned(),
                    QueuedIdentifier {
                        tried_urls,
                        in_progress: false,
                    },
                );
            }
        }
    }

    /// The next queued identifier that is not in progress, round-robin from
    /// the one after the last served; marks it in progress.
    pub(crate) fn next_ready_identifier(&mut self) -> Option<String> {
        let len = self.queue.len();
        let start = self.round_robin_index;
        let index = (0..len)
            .map(|offset| start.saturating_add(offset) % len)
            .find(|&index| {
                self.queue
                    .get_index(index)
                    .is_some_and(|(_, queued)| !queued.in_progress)
            })?;
        let (identifier, queued) = self.queue.get_index_mut(index)?;
        queued.in_progress = true;
        self.round_robin_index = index.saturating_add(1) % len;
        Some(identifier.clone())
    }

    /// What serving the queue should do at `now`: serve the next ready
    /// identifier (marked in progress) when the domain has capacity; when only
    /// the per-minute window holds it back and nothing is in flight (so no
    /// completion will come), wake at the moment the window frees; otherwise
    /// wait for a completion or an enqueue.
    pub(crate) fn next_step(&mut self, now: Instant) -> QueueStep {
        if !self.has_queued_work() {
            return QueueStep::Idle;
        }
        if self.has_capacity(now) {
            return self
                .next_ready_identifier()
                .map_or(QueueStep::Idle, QueueStep::Serve);
        }
        match self.poll_timeout(now) {
            Some(at) if self.in_flight == 0 => QueueStep::WakeAt(at),
            _ => QueueStep::Idle,
        }
    }

    /// When a request may start again, when at `now` only the per-minute window
    /// holds it back and nothing is in flight (so no completion will come to say so);
    /// `None` otherwise. For a throttle others wait on without queueing in it (an
    /// address block a host name resolves to).
    pub fn window_frees_at(&self, now: Instant) -> Option<Instant> {
        if self.in_flight > 0 || self.below_rate_limit(now) {
            return None;
        }
        let max = self.config.max_per_minute as usize;
        let freeing = self.request_times.len().checked_sub(max)?;
        let start = self.request_times.get(freeing)?;
        Some(start.saturating_add(self.config.window))
    }

    /// The URLs of this domain already tried for `identifier` (empty when not
    /// queued).
    pub fn get_tried_urls(&self, identifier: &str) -> HashSet<String> {
        self.queue
            .get(identifier)
            .map(|queued| queued.tried_urls.clone())
            .unwrap_or_default()
    }

    /// Records that `url` was tried for `identifier` (ignored when not queued).
    pub fn mark_url_tried(&mut self, identifier: &str, url: &str) {
        if let Some(queued) = self.queue.get_mut(identifier) {
            queued.tried_urls.insert(url.to_owned());
        }
    }

    /// The fetch for `identifier` on this domain ended; it may be served again.
    pub fn mark_identifier_not_in_progress(&mut self, identifier: &str) {
        if let Some(queued) = self.queue.get_mut(identifier) {
            queued.in_progress = false;
        }
    }

    /// Removes `identifier` from the queue, keeping the round-robin position:
    /// the identifier that would have been served next still is. Returns
    /// whether it was queued.
    pub fn remove_identifier(&mut self, identifier: &str) -> bool {
        let Some((index, _, _)) = self.queue.shift_remove_full(identifier) else {
            return false;
        };
        if index < self.round_robin_index {
            self.round_robin_index -= 1;
        }
        self.round_robin_index = self
            .round_robin_index
            .checked_rem(self.queue.len())
            .unwrap_or(0);
        true
    }

    /// Whether any identifier waits for this domain.
    pub(crate) fn has_queued_work(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The queued identifiers in round-robin order.
    pub fn queued_identifiers(&self) -> impl Iterator<Item = &str> {
        self.queue.keys().map(String::as_str)
    }

    /// How many identifiers are queued (being served or waiting their turn).
    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    /// How many queued identifiers wait for their turn (not being served).
    pub fn waiting_len(&self) -> usize {
        self.queue
            .values()
            .filter(|queued| !queued.in_progress)
            .count()
    }

    /// An estimate at `now` of how long this domain's queue needs to drain: until the
    /// last identifier waiting its turn ([`DomainThrottle::waiting_len`]) may start its
    /// request under the per-minute limit.
    ///
    /// It counts one request per waiting identifier and nothing else arriving, and
    /// takes requests to end at once (the concurrency limit does not bind; a slow server
    /// adds its fetch time per round). Requests then start in rounds of
    /// `max_per_minute`, each one window after the round before: with the `w` requests
    /// already in the window and `n` waiting, the last one is request `m = w + n - 1`
    /// of the sequence, which starts `⌊m / r⌋` windows after request `m mod r` (one in
    /// the window, or now). With an empty window that is `window · ⌊(n - 1) / r⌋`:
    /// 40 waiting at 30 a minute drain in 60 s, at 120 a minute at once. Zero when
    /// nothing waits.
    pub fn drain_estimate(&self, now: Instant) -> Duration {
        let Some(last) = self.waiting_len().checked_sub(1) else {
            return Duration::ZERO;
        };
        let now = self.effective_now(now);
        let in_window: Vec<Instant> = self
            .request_times
            .iter()
            .copied()
            .filter(|&start| self.counts_at(start, now))
            .collect();
        let rate = usize::try_from(self.config.max_per_minute)
            .unwrap_or(usize::MAX)
            .max(1);
        let index = in_window.len().saturating_add(last);
        let rounds = u32::try_from(index / rate).unwrap_or(u32::MAX);
        let first = in_window.get(index % rate).copied().unwrap_or(now);
        first
            .saturating_add(self.config.window.saturating_mul(rounds))
            .saturating_duration_since(now)
    }

    /// Whether the throttle holds nothing worth keeping at `now`: no request
    /// in flight or in the window, and no identifier queued.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        self.in_flight == 0 && !self.has_queued_work() && self.requests_in_window(now) == 0
    }

    /// When per-minute capacity frees up, if identifiers are queued and the
    /// per-minute limit is reached at `now`; `None` otherwise (work can start
    /// now, a completion will trigger it, or nothing waits).
    ///
    /// The spec's trigger-only design stalls when the per-minute limit is
    /// reached with nothing in flight: no completion will come. A driver
    /// sleeps until this deadline instead. Waking early is harmless.
    pub(crate) fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        if !self.has_queued_work() || self.below_rate_limit(now) {
            return None;
        }
        // Times are sorted, and the in-window ones are the newest. Capacity
        // frees when all but `max_per_minute - 1` of them have expired.
        let max = self.config.max_per_minute as usize;
        let freeing = self.request_times.len().checked_sub(max)?;
        let start = self.request_times.get(freeing)?;
        Some(start.saturating_add(self.config.window))
    }
}

/// The throttles of all domains, created on demand with one config, or an operator's
/// override of it for the keys [`HostLimits`] names.
#[derive(Clone, Debug, Default)]
pub struct DomainThrottles {
    config: ThrottleConfig,
    host_limits: HostLimits,
    throttles: IndexMap<String, DomainThrottle>,
}

impl DomainThrottles {
    /// No throttles yet; each is created with `config`.
    pub fn new(config: ThrottleConfig) -> Self {
        DomainThrottles {
            config,
            host_limits: HostLimits::new(),
            throttles: IndexMap::new(),
        }
    }

    /// These throttles, with the keys `host_limits` overrides created with the
    /// override's limits instead of the default config.
    pub fn with_host_limits(mut self, host_limits: HostLimits) -> Self {
        self.host_limits = host_limits;
        self
    }

    /// The limits each domain without an override gets.
    pub fn config(&self) -> &ThrottleConfig {
        &self.config
    }

    /// The operator's per-host overrides.
    pub fn host_limits(&self) -> &HostLimits {
        &self.host_limits
    }

    /// Whether `domain` has no capacity at `now`. A domain never seen is not
    /// throttled.
    pub fn is_throttled(&self, domain: &str, now: Instant) -> bool {
        self.throttles
            .get(domain)
            .is_some_and(|throttle| !throttle.has_capacity(now))
    }

    /// The throttle of `domain`, if it exists.
    pub fn get(&self, domain: &str) -> Option<&DomainThrottle> {
        self.throttles.get(domain)
    }

    /// The throttle of `domain`, if it exists, for changing.
    pub fn get_mut(&mut self, domain: &str) -> Option<&mut DomainThrottle> {
        self.throttles.get_mut(domain)
    }

    /// The throttle of `domain`, created if missing.
    pub fn entry(&mut self, domain: &str) -> &mut DomainThrottle {
        let config = self.host_limits.config_for_key(domain, self.config);
        self.throttles
            .entry(domain.to_owned())
            .or_insert_with(|| DomainThrottle::new(domain, config))
    }

    /// What `domain`'s queue should do at `now` (see
    /// `DomainThrottle::next_step`); [`QueueStep::Idle`] for a domain that
    /// has no throttle.
    pub fn next_step(&mut self, domain: &str, now: Instant) -> QueueStep {
        self.throttles
            .get_mut(domain)
            .map_or(QueueStep::Idle, |throttle| throttle.next_step(now))
    }

    /// All throttles, in creation order.
    pub fn iter(&self) -> impl Iterator<Item = &DomainThrottle> {
        self.throttles.values()
    }

    /// Drops the throttles that are idle at `now` (see
    /// `DomainThrottle::is_idle`), so memory follows active domains only.
    /// Returns the domains dropped, in creation order (so a driver can drop
    /// what it keeps per domain too, such as metric label series).
    pub fn remove_idle(&mut self, now: Instant) -> Vec<String> {
        let mut removed = Vec::new();
        self.throttles.retain(|domain, throttle| {
            let idle = throttle.is_idle(now);
            if idle {
                removed.push(domain.clone());
            }
            !idle
        });
        removed
    }

    /// The earliest `DomainThrottle::poll_timeout` of all domains.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.throttles
            .values()
            .filter_map(|throttle| throttle.poll_timeout(now))
            .min()
    }

    /// How many domains have a throttle.
    pub fn len(&self) -> usize {
        self.throttles.len()
    }

    /// Whether no domain has a throttle.
    pub fn is_empty(&self) -> bool {
        self.throttles.is_empty()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
