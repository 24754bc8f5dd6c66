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

use crate::clock::Instant;

/// What a domain's queue should do next; see [`DomainThrottle::next_step`].
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

/// Limits applied to each domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleConfig {
    /// Requests in flight at once (5).
    pub max_concurrent: u32,
    /// Requests started within one [`ThrottleConfig::window`] (30).
    pub max_per_minute: u32,
    /// The sliding window of the per-minute limit (60 s).
    pub window: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            max_concurrent: 5,
            max_per_minute: 30,
            window: Duration::from_secs(60),
        }
    }
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
    pub fn new(domain: impl Into<String>, config: ThrottleConfig) -> Self {
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
    pub fn has_capacity(&self, now: Instant) -> bool {
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
    pub fn next_ready_identifier(&mut self) -> Option<String> {
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
    pub fn next_step(&mut self, now: Instant) -> QueueStep {
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
    pub fn has_queued_work(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The queued identifiers in round-robin order.
    pub fn queued_identifiers(&self) -> impl Iterator<Item = &str> {
        self.queue.keys().map(String::as_str)
    }

    /// Whether the throttle holds nothing worth keeping at `now`: no request
    /// in flight or in the window, and no identifier queued.
    pub fn is_idle(&self, now: Instant) -> bool {
        self.in_flight == 0 && !self.has_queued_work() && self.requests_in_window(now) == 0
    }

    /// When per-minute capacity frees up, if identifiers are queued and the
    /// per-minute limit is reached at `now`; `None` otherwise (work can start
    /// now, a completion will trigger it, or nothing waits).
    ///
    /// The spec's trigger-only design stalls when the per-minute limit is
    /// reached with nothing in flight: no completion will come. A driver
    /// sleeps until this deadline instead. Waking early is harmless.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
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

/// The throttles of all domains, created on demand with one config.
#[derive(Clone, Debug, Default)]
pub struct DomainThrottles {
    config: ThrottleConfig,
    throttles: IndexMap<String, DomainThrottle>,
}

impl DomainThrottles {
    /// No throttles yet; each is created with `config`.
    pub fn new(config: ThrottleConfig) -> Self {
        DomainThrottles {
            config,
            throttles: IndexMap::new(),
        }
    }

    /// The limits each domain gets.
    pub fn config(&self) -> &ThrottleConfig {
        &self.config
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
        let config = self.config;
        self.throttles
            .entry(domain.to_owned())
            .or_insert_with(|| DomainThrottle::new(domain, config))
    }

    /// All throttles, in creation order.
    pub fn iter(&self) -> impl Iterator<Item = &DomainThrottle> {
        self.throttles.values()
    }

    /// Drops the throttles that are idle at `now` (see
    /// [`DomainThrottle::is_idle`]), so memory follows active domains only.
    pub fn remove_idle(&mut self, now: Instant) {
        self.throttles.retain(|_, throttle| !throttle.is_idle(now));
    }

    /// The earliest [`DomainThrottle::poll_timeout`] of all domains.
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
mod tests {
    use super::*;

    #[test]
    fn next_step_serves_waits_for_a_completion_or_wakes_when_the_window_frees() {
        let config = ThrottleConfig {
            max_concurrent: 2,
            max_per_minute: 2,
            window: Duration::from_secs(60),
        };
        let mut throttle = DomainThrottle::new("d", config);
        assert_eq!(throttle.next_step(Instant::ZERO), QueueStep::Idle);
        throttle.enqueue_identifier("a", HashSet::new());
        throttle.enqueue_identifier("b", HashSet::new());
        throttle.enqueue_identifier("c", HashSet::new());
        assert_eq!(
            throttle.next_step(Instant::ZERO),
            QueueStep::Serve("a".into())
        );
        assert!(throttle.try_start_request(Instant::ZERO));
        assert_eq!(
            throttle.next_step(Instant::ZERO),
            QueueStep::Serve("b".into())
        );
        assert!(throttle.try_start_request(Instant::from_secs(1)));
        // Both slots in flight: a completion will serve the queue.
        assert_eq!(throttle.next_step(Instant::from_secs(1)), QueueStep::Idle);
        throttle.complete_request(Instant::from_secs(2));
        throttle.complete_request(Instant::from_secs(2));
        throttle.mark_identifier_not_in_progress("a");
        // Nothing in flight, the window is full: wake when the first start leaves it.
        assert_eq!(
            throttle.next_step(Instant::from_secs(2)),
            QueueStep::WakeAt(Instant::from_secs(60))
        );
        assert_eq!(
            throttle.next_step(Instant::from_secs(60)),
            QueueStep::Serve("c".into())
        );
    }

    fn throttle() -> DomainThrottle {
        DomainThrottle::new("example.com", ThrottleConfig::default())
    }

    fn urls(list: &[&str]) -> HashSet<String> {
        list.iter().map(|u| (*u).to_owned()).collect()
    }

    fn served(t: &mut DomainThrottle) -> Option<String> {
        t.next_ready_identifier()
    }

    #[test]
    fn default_config_matches_the_spec() {
        let config = ThrottleConfig::default();
        assert_eq!(config.max_concurrent, 5);
        assert_eq!(config.max_per_minute, 30);
        assert_eq!(config.window, Duration::from_secs(60));
    }

    #[test]
    fn queue_round_robin() {
        let mut t = throttle();
        for id in ["id1", "id2", "id3"] {
            t.enqueue_identifier(id, HashSet::new());
        }
        for id in ["id1", "id2", "id3", "id1"] {
            assert_eq!(served(&mut t).as_deref(), Some(id));
            t.mark_identifier_not_in_progress(id);
        }
    }

    #[test]
    fn skips_in_progress() {
        let mut t = throttle();
        t.enqueue_identifier("id1", HashSet::new());
        t.enqueue_identifier("id2", HashSet::new());
        assert_eq!(served(&mut t).as_deref(), Some("id1"));
        assert_eq!(served(&mut t).as_deref(), Some("id2"));
        assert_eq!(served(&mut t), None);
        t.mark_identifier_not_in_progress("id1");
        assert_eq!(served(&mut t).as_deref(), Some("id1"));
    }

    #[test]
    fn empty_queue_serves_nothing() {
        let mut t = throttle();
        assert_eq!(served(&mut t), None);
    }

    #[test]
    fn remove_before_cursor_adjusts_index() {
        let mut t = throttle();
        for id in ["id1", "id2", "id3"] {
            t.enqueue_identifier(id, HashSet::new());
        }
        assert_eq!(served(&mut t).as_deref(), Some("id1"));
        t.mark_identifier_not_in_progress("id1");
        assert!(t.remove_identifier("id1"));
        assert_eq!(served(&mut t).as_deref(), Some("id2"));
    }

    #[test]
    fn remove_at_cursor_serves_its_successor() {
        let mut t = throttle();
        for id in ["id1", "id2", "id3"] {
            t.enqueue_identifier(id, HashSet::new());
        }
        assert_eq!(served(&mut t).as_deref(), Some("id1"));
        assert!(t.remove_identifier("id2"));
        assert_eq!(served(&mut t).as_deref(), Some("id3"));
    }

    #[test]
    fn remove_last_at_cursor_wraps_to_first() {
        let mut t = throttle();
        for id in ["id1", "id2", "id3"] {
            t.enqueue_identifier(id, HashSet::new());
        }
        assert_eq!(served(&mut t).as_deref(), Some("id1"));
        assert_eq!(served(&mut t).as_deref(), Some("id2"));
        t.mark_identifier_not_in_progress("id1");
        assert!(t.remove_identifier("id3"));
        assert!(!t.remove_identifier("id3"));
        assert_eq!(served(&mut t).as_deref(), Some("id1"));
    }

    #[test]
    fn has_queued_work() {
        let mut t = throttle();
        assert!(!t.has_queued_work());
        t.enqueue_identifier("id1", HashSet::new());
        assert!(t.has_queued_work());
        t.remove_identifier("id1");
        assert!(!t.has_queued_work());
        assert_eq!(served(&mut t), None);
    }

    #[test]
    fn tried_urls_merge() {
        let mut t = throttle();
        t.enqueue_identifier("id1", urls(&["url1"]));
        t.enqueue_identifier("id1", urls(&["url2"]));
        t.mark_url_tried("id1", "url3");
        t.mark_url_tried("unknown", "url4");
        assert_eq!(t.get_tried_urls("id1"), urls(&["url1", "url2", "url3"]));
        assert!(t.get_tried_urls("unknown").is_empty());
        assert_eq!(t.queued_identifiers().collect::<Vec<_>>(), vec!["id1"]);
    }

    #[test]
    fn concurrency_limit() {
        let mut t = throttle();
        let now = Instant::ZERO;
        for _ in 0..5 {
            assert!(t.try_start_request(now));
        }
        assert!(!t.has_capacity(now));
        assert!(!t.try_start_request(now));
        assert_eq!(t.in_flight(), 5);
        t.complete_request(now);
        assert!(t.has_capacity(now));
        assert!(t.try_start_request(now));
    }

    #[test]
    fn per_minute_limit_and_poll_timeout() {
        let mut t = throttle();
        t.enqueue_identifier("id1", HashSet::new());
        for second in 0..30u64 {
            let now = Instant::from_secs(second);
            assert!(t.try_start_request(now));
            t.complete_request(now);
        }
        let now = Instant::from_secs(30);
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.requests_in_window(now), 30);
        assert!(!t.try_start_request(now));
        // Nothing in flight, so no completion will trigger: the deadline does.
        assert_eq!(t.poll_timeout(now), Some(Instant::from_secs(60)));
        assert!(!t.has_capacity(Instant::from_millis(59_999)));
        assert!(t.has_capacity(Instant::from_secs(60)));
        assert_eq!(t.poll_timeout(Instant::from_secs(60)), None);
        assert!(t.try_start_request(Instant::from_secs(60)));
        assert_eq!(
            t.poll_timeout(Instant::from_secs(60)),
            Some(Instant::from_secs(61))
        );
    }

    #[test]
    fn poll_timeout_needs_queued_work_and_a_full_window() {
        let mut t = throttle();
        assert!(t.try_start_request(Instant::ZERO));
        t.enqueue_identifier("id1", HashSet::new());
        assert_eq!(t.poll_timeout(Instant::ZERO), None);
        t.remove_identifier("id1");
        let config = ThrottleConfig {
            max_per_minute: 0,
            ..ThrottleConfig::default()
        };
        let mut never = DomainThrottle::new("never.example", config);
        never.enqueue_identifier("id1", HashSet::new());
        assert!(!never.try_start_request(Instant::ZERO));
        assert_eq!(never.poll_timeout(Instant::ZERO), None);
    }

    #[test]
    fn time_going_backwards_does_not_panic_nor_reopen_the_window() {
        let mut t = throttle();
        t.enqueue_identifier("id1", HashSet::new());
        for _ in 0..30 {
            assert!(t.try_start_request(Instant::from_secs(100)));
            t.complete_request(Instant::from_secs(100));
        }
        // Earlier instants count as the latest one seen.
        assert!(!t.try_start_request(Instant::ZERO));
        assert!(!t.has_capacity(Instant::from_secs(10)));
        assert_eq!(t.requests_in_window(Instant::ZERO), 30);
        assert_eq!(t.poll_timeout(Instant::ZERO), Some(Instant::from_secs(160)));
        t.complete_request(Instant::ZERO);
        assert_eq!(t.in_flight(), 0);
        assert!(t.try_start_request(Instant::from_secs(160)));
    }

    #[test]
    fn throttles_are_created_on_demand() {
        let mut throttles = DomainThrottles::default();
        let now = Instant::ZERO;
        assert!(!throttles.is_throttled("a.example", now));
        assert!(throttles.get("a.example").is_none());
        for _ in 0..5 {
            assert!(throttles.entry("a.example").try_start_request(now));
        }
        assert!(throttles.is_throttled("a.example", now));
        assert!(!throttles.is_throttled("b.example", now));
        assert_eq!(throttles.len(), 1);
        assert_eq!(
            throttles.get("a.example").map(DomainThrottle::domain),
            Some("a.example")
        );
        if let Some(t) = throttles.get_mut("a.example") {
            t.complete_request(now);
        }
        assert!(!throttles.is_throttled("a.example", now));
    }

    #[test]
    fn idle_throttles_are_dropped() {
        let mut throttles = DomainThrottles::new(ThrottleConfig::default());
        throttles
            .entry("busy.example")
            .enqueue_identifier("id1", HashSet::new());
        assert!(throttles
            .entry("recent.example")
            .try_start_request(Instant::ZERO));
        throttles
            .entry("recent.example")
            .complete_request(Instant::ZERO);
        throttles.entry("idle.example");
        assert_eq!(throttles.len(), 3);
        throttles.remove_idle(Instant::from_secs(1));
        let left: Vec<&str> = throttles.iter().map(DomainThrottle::domain).collect();
        assert_eq!(left, vec!["busy.example", "recent.example"]);
        throttles.remove_idle(Instant::from_secs(61));
        assert_eq!(throttles.len(), 1);
        assert!(!throttles.is_empty());
    }

    #[test]
    fn earliest_poll_timeout_over_domains() {
        let config = ThrottleConfig {
            max_per_minute: 1,
            ..ThrottleConfig::default()
        };
        let mut throttles = DomainThrottles::new(config);
        for (domain, start) in [("a.example", 10), ("b.example", 5)] {
            let t = throttles.entry(domain);
            t.enqueue_identifier("id", HashSet::new());
            assert!(t.try_start_request(Instant::from_secs(start)));
            t.complete_request(Instant::from_secs(start));
        }
        assert_eq!(
            throttles.poll_timeout(Instant::from_secs(20)),
            Some(Instant::from_secs(65))
        );
    }
}

#[cfg(test)]
mod proptests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        TryStart,
        Complete,
        Enqueue { id: u8, tried: Vec<u8> },
        Remove { id: u8 },
        NextReady,
        NotInProgress { id: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::TryStart),
            2 => Just(Op::Complete),
            2 => (0u8..6, proptest::collection::vec(0u8..4, 0..3))
                .prop_map(|(id, tried)| Op::Enqueue { id, tried }),
            1 => (0u8..6).prop_map(|id| Op::Remove { id }),
            3 => Just(Op::NextReady),
            2 => (0u8..6).prop_map(|id| Op::NotInProgress { id }),
        ]
    }

    /// Mostly small forward steps, sometimes a jump backwards.
    fn time_step() -> impl Strategy<Value = i64> {
        prop_oneof![10 => 0i64..5_000, 1 => 0i64..120_000, 1 => -90_000i64..0]
    }

    fn step(now: Instant, delta_ms: i64) -> Instant {
        let magnitude = Duration::from_millis(delta_ms.unsigned_abs());
        if delta_ms >= 0 {
            now + magnitude
        } else {
            now.checked_sub(magnitude).unwrap_or(Instant::ZERO)
        }
    }

    fn config() -> impl Strategy<Value = ThrottleConfig> {
        (0u32..4, 0u32..8).prop_map(|(max_concurrent, max_per_minute)| ThrottleConfig {
            max_concurrent,
            max_per_minute,
            window: Duration::from_secs(60),
        })
    }

    /// What the test knows about one queued identifier.
    #[derive(Clone, Copy, Debug)]
    struct Model {
        in_progress: bool,
        /// Step since which it has been queued and not in progress.
        idle_since: usize,
    }

    proptest! {
        #[test]
        fn throttle_never_exceeds_limits_and_serves_round_robin(
            config in config(),
            ops in proptest::collection::vec((op(), time_step()), 1..300),
        ) {
            let mut t = DomainThrottle::new("example.com", config);
            let mut now = Instant::ZERO;
            // Latest instant handed to a mutating call: the throttle's clock.
            let mut throttle_clock = Instant::ZERO;
            let mut starts: Vec<Instant> = Vec::new();
            let mut queued: BTreeMap<String, Model> = BTreeMap::new();
            let mut last_served: BTreeMap<String, usize> = BTreeMap::new();

            for (step_index, (op, delta)) in ops.into_iter().enumerate() {
                now = step(now, delta);
                match op {
                    Op::TryStart => {
                        throttle_clock = throttle_clock.max(now);
                        if t.try_start_request(now) {
                            starts.push(throttle_clock);
                            let in_window = starts
                                .iter()
                                .filter(|&&s| throttle_clock.saturating_duration_since(s) < config.window)
                                .count();
                            prop_assert!(in_window <= config.max_per_minute as usize);
                        }
                    }
                    Op::Complete => {
                        throttle_clock = throttle_clock.max(now);
                        t.complete_request(now);
                    }
                    Op::Enqueue { id, tried } => {
                        let id = id.to_string();
                        let tried: HashSet<String> = tried.iter().map(|u| format!("u{u}")).collect();
                        t.enqueue_identifier(&id, tried.clone());
                        prop_assert!(tried.is_subset(&t.get_tried_urls(&id)));
                        queued.entry(id).or_insert(Model { in_progress: false, idle_since: step_index });
                    }
                    Op::Remove { id } => {
                        let id = id.to_string();
                        prop_assert_eq!(t.remove_identifier(&id), queued.remove(&id).is_some());
                        last_served.remove(&id);
                    }
                    Op::NotInProgress { id } => {
                        let id = id.to_string();
                        t.mark_identifier_not_in_progress(&id);
                        if let Some(model) = queued.get_mut(&id) {
                            if model.in_progress {
                                *model = Model { in_progress: false, idle_since: step_index };
                            }
                        }
                    }
                    Op::NextReady => {
                        let expect_some = queued.values().any(|m| !m.in_progress);
                        match t.next_ready_identifier() {
                            None => prop_assert!(!expect_some),
                            Some(y) => {
                                let model = queued.get(&y).copied();
                                prop_assert!(model.is_some_and(|m| !m.in_progress), "served {} wrongly", y);
                                if let Some(&previous) = last_served.get(&y) {
                                    for (x, m) in &queued {
                                        let waited_whole_interval = !m.in_progress && m.idle_since < previous;
                                        prop_assert!(
                                            x == &y || !waited_whole_interval,
                                            "{} served twice (steps {} and {}) while {} waited",
                                            y, previous, step_index, x
                                        );
                                    }
                                }
                                queued.insert(y.clone(), Model { in_progress: true, idle_since: step_index });
                                last_served.insert(y, step_index);
                            }
                        }
                    }
                }
                prop_assert!(t.in_flight() <= config.max_concurrent);
                prop_assert_eq!(t.has_queued_work(), !queued.is_empty());
            }
        }
    }
}
