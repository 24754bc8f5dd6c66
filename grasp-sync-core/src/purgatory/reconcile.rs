//! When each served repository is reconciled next (GRASP-02: missing git data is
//! pulled at least once an hour, whether or not an event arrives), and how many at once.
//!
//! A reconciliation compares what a repository serves with what it should
//! ([`serving`](super::serving)) and fetches what is missing. [`ReconcileSchedule`]
//! decides when: a repository seen for the first time (at start, too) is due at once,
//! so a restart never waits a whole interval for repositories that are behind; one that
//! serves its newest state is due again after the interval, jittered by up to ±10 %
//! per repository so that thousands of them do not all start in one second; one that
//! is behind is due again after the shorter retry; an event or a release that concerns
//! it makes it due at once.
//!
//! Due is not running: at most [`ReconcileConfig::concurrency`] reconciliations run at
//! once (each runs several git processes), whatever anybody announces. The due ones
//! wait in one queue per owner and are started one owner at a time, round-robin, so
//! that 2 000 announcements by strangers delay an honest owner's repository by one
//! turn of the ring, never by their count times the owner's position in key order.
//! Pure: time is an argument.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use crate::clock::Instant;
use crate::nip34::RepoRef;

/// How many reconciliations run at once by default.
pub const DEFAULT_RECONCILE_CONCURRENCY: usize = 4;

/// How often repositories are reconciled, and how many at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// A repository serving its newest state is reconciled again after this long
    /// (jittered by up to ±10 %). GRASP-02 asks for at least hourly.
    pub interval: Duration,
    /// A repository that is behind (objects missing, refs not applied) is reconciled
    /// again after this long, or the interval if shorter.
    pub behind_retry: Duration,
    /// The most reconciliations running at once (at least 1).
    pub concurrency: usize,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            interval: Duration::from_secs(3600),
            behind_retry: Duration::from_secs(300),
            concurrency: DEFAULT_RECONCILE_CONCURRENCY,
        }
    }
}

impl ReconcileConfig {
    /// How long after a reconciliation of the repository keyed `key` the next one is
    /// due: the interval jittered by a fixed fraction of ±10 % derived from the key,
    /// or (`behind`) the retry, at most that.
    pub fn delay(&self, key: &str, behind: bool) -> Duration {
        let jittered = jitter(self.interval, key);
        if behind {
            self.behind_retry.min(jittered)
        } else {
            jittered
        }
    }
}

/// `interval` scaled by 0.9 to 1.1, the same for the same key (FNV-1a of the key).
fn jitter(interval: Duration, key: &str) -> Duration {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    // Per mille in [900, 1100].
    let per_mille = 900 + u32::try_from(hash % 201).unwrap_or(100);
    interval.saturating_mul(per_mille) / 1000
}

/// The owner part of a repository key (`30617:<owner>:<identifier>`): the unit the
/// ready queue is fair between. A key of another shape is its own owner.
fn owner_of(key: &str) -> &str {
    let mut parts = key.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(owner), Some(_)) => owner,
        _ => key,
    }
}

/// Repositories due and not started yet: a queue per owner, and the ring of owners
/// whose turn comes next.
#[derive(Clone, Debug, Default)]
struct ReadyRing {
    /// Each owner's due repositories, first due first.
    queues: HashMap<String, VecDeque<String>>,
    /// Owners with a non-empty queue, in turn order.
    turns: VecDeque<String>,
    /// Every key in a queue.
    members: BTreeSet<String>,
}

impl ReadyRing {
    /// Queues `key` behind its owner's other ready repositories (once).
    fn push(&mut self, key: String) {
        if !self.members.insert(key.clone()) {
            return;
        }
        let owner = owner_of(&key).to_owned();
        let queue = self.queues.entry(owner.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(owner);
        }
        queue.push_back(key);
    }

    /// The next owner's first repository; that owner goes to the back of the ring.
    fn pop(&mut self) -> Option<String> {
        let owner = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&owner)?;
        let key = queue.pop_front()?;
        if queue.is_empty() {
            self.queues.remove(&owner);
        } else {
            self.turns.push_back(owner);
        }
        self.members.remove(&key);
        Some(key)
    }

    /// Takes `key` out of its owner's queue.
    fn remove(&mut self, key: &str) {
        if !self.members.remove(key) {
            return;
        }
        let owner = owner_of(key).to_owned();
        let Some(queue) = self.queues.get_mut(&owner) else {
            return;
        };
        queue.retain(|queued| queued != key);
        if queue.is_empty() {
            self.queues.remove(&owner);
            self.turns.retain(|turn| *turn != owner);
        }
    }

    fn contains(&self, key: &str) -> bool {
        self.members.contains(key)
    }

    fn len(&self) -> usize {
        self.members.len()
    }
}

/// When each repository (keyed by its coordinate's text) is reconciled next, and which
/// due ones start now.
#[derive(Clone, Debug, Default)]
pub struct ReconcileSchedule {
    config: ReconcileConfig,
    /// Repositories waiting for their time, with when they are due.
    due: HashMap<String, Instant>,
    /// The same, by time.
    by_time: BTreeSet<(Instant, String)>,
    /// Repositories due, waiting for a free place in the pool.
    ready: ReadyRing,
    /// Repositories being reconciled now.
    running: BTreeSet<String>,
    /// Running repositories that something concerned meanwhile: due again at once.
    again: BTreeSet<String>,
}

impl ReconcileSchedule {
    /// An empty schedule.
    pub fn new(config: ReconcileConfig) -> Self {
        ReconcileSchedule {
            config,
            ..Self::default()
        }
    }

    /// The configuration.
    pub fn config(&self) -> ReconcileConfig {
        self.config
    }

    /// A repository that is served: due at once if it is new to the schedule.
    pub fn track(&mut self, key: &str, now: Instant) {
        if !self.is_tracked(key) {
            self.set_due(key, now);
        }
    }

    /// Something concerning the repository happened (an event released, a new
    /// announcement): it is due at once, or again right after the running one.
    pub fn due_now(&mut self, key: &str, now: Instant) {
        if self.running.contains(key) {
            self.again.insert(key.to_owned());
        } else if !self.ready.contains(key) {
            let at = self.due.get(key).map_or(now, |at| (*at).min(now));
            self.set_due(key, at);
        }
    }

    /// Events were released whose served refs can change only these repositories
    /// (the released events' own, and the repositories whose maintainer set lists a
    /// released state's author): each is due at once.
    pub fn released<'a>(&mut self, repos: impl IntoIterator<Item = &'a RepoRef>, now: Instant) {
        for repo in repos {
            self.due_now(&repo.to_string(), now);
        }
    }

    /// The repositories to start at `now`: those due, at most as many as the pool has
    /// free places, one owner at a time; now running.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        while let Some((at, key)) = self.by_time.first().cloned() {
            if at > now {
                break;
            }
            self.by_time.remove(&(at, key.clone()));
            self.due.remove(&key);
            self.ready.push(key);
        }
        let free = self
            .config
            .concurrency
            .max(1)
            .saturating_sub(self.running.len());
        let mut started = Vec::new();
        while started.len() < free {
            let Some(key) = self.ready.pop() else { break };
            self.running.insert(key.clone());
            started.push(key);
        }
        started
    }

    /// The reconciliation of `key` ended; `behind` when the repository does not serve
    /// its newest state yet. Schedules the next one.
    pub fn finished(&mut self, key: &str, now: Instant, behind: bool) {
        self.running.remove(key);
        let at = if self.again.remove(key) {
            now
        } else {
            now + self.config.delay(key, behind)
        };
        self.set_due(key, at);
    }

    /// The repository is no longer served (its announcement is gone).
    pub fn forget(&mut self, key: &str) {
        self.unset_due(key);
        self.ready.remove(key);
        self.again.remove(key);
    }

    /// Whether the repository is waiting for, or running, a reconciliation.
    pub fn is_tracked(&self, key: &str) -> bool {
        self.due.contains_key(key) || self.ready.contains(key) || self.running.contains(key)
    }

    /// How many repositories are due at `now` or running.
    pub fn due_or_running(&self, now: Instant) -> usize {
        let waiting_due = self.by_time.iter().take_while(|(at, _)| *at <= now).count();
        self.running.len() + self.ready.len() + waiting_due
    }

    /// How many reconciliations run now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// When the loop must look again: the next repository due, or `None` when nothing
    /// waits for a time (repositories waiting for a place start when one ends).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// How many repositories are tracked.
    pub fn len(&self) -> usize {
        self.due.len() + self.ready.len() + self.running.len()
    }

    /// Whether no repository is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `key` waits until `at` (replacing when it waited until before).
    fn set_due(&mut self, key: &str, at: Instant) {
        self.unset_due(key);
        self.due.insert(key.to_owned(), at);
        self.by_time.insert((at, key.to_owned()));
    }

    fn unset_due(&mut self, key: &str) {
        if let Some(at) = self.due.remove(key) {
            self.by_time.remove(&(at, key.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(interval: u64, retry: u64) -> ReconcileSchedule {
        ReconcileSchedule::new(ReconcileConfig {
            interval: Duration::from_secs(interval),
            behind_retry: Duration::from_secs(retry),
            concurrency: 4,
        })
    }

    #[test]
    fn a_new_repository_is_due_at_once_then_after_the_jittered_interval() {
        let mut schedule = schedule(3600, 300);
        let start = Instant::from_secs(100);
        schedule.track("a", start);
        assert_eq!(schedule.take_due(start), vec!["a".to_owned()]);
        schedule.track("a", start);
        assert!(
            schedule.take_due(start).is_empty(),
            "running: not due twice"
        );
        schedule.finished("a", start, false);
        let next = schedule.poll_timeout().expect("due again");
        let wait = next.saturating_duration_since(start);
        assert!(
            wait >= Duration::from_secs(3240) && wait <= Duration::from_secs(3960),
            "{wait:?}"
        );
        assert!(schedule
            .take_due(start + Duration::from_secs(3239))
            .is_empty());
        assert_eq!(
            schedule.take_due(start + Duration::from_secs(3960)),
            vec!["a".to_owned()]
        );
    }

    #[test]
    fn a_repository_behind_retries_sooner_and_an_event_makes_it_due_now() {
        let mut schedule = schedule(3600, 300);
        let start = Instant::ZERO;
        schedule.track("a", start);
        schedule.take_due(start);
        schedule.due_now("a", start);
        schedule.finished("a", start, true);
        assert_eq!(
            schedule.poll_timeout(),
            Some(start),
            "concerned while running"
        );
        schedule.take_due(start);
        schedule.finished("a", start, true);
        assert_eq!(
            schedule.poll_timeout(),
            Some(start + Duration::from_secs(300))
        );
        let later = start + Duration::from_secs(10);
        schedule.due_now("a", later);
        assert_eq!(schedule.take_due(later), vec!["a".to_owned()]);
    }

    #[test]
    fn the_jitter_stays_within_ten_percent_and_spreads_repositories() {
        let config = ReconcileConfig::default();
        let delays: BTreeSet<Duration> = (0..100)
            .map(|n| config.delay(&format!("30617:key:{n}"), false))
            .collect();
        assert!(delays.len() > 50, "spread: {}", delays.len());
        for delay in &delays {
            assert!(*delay >= Duration::from_secs(3240) && *delay <= Duration::from_secs(3960));
        }
        assert_eq!(config.delay("x", false), config.delay("x", false));
        let short = ReconcileConfig {
            interval: Duration::from_secs(60),
            behind_retry: Duration::from_secs(300),
            concurrency: 1,
        };
        assert!(short.delay("x", true) <= Duration::from_secs(66));
    }

    #[test]
    fn a_release_makes_only_the_repositories_named_due() {
        let key = |identifier: &str| {
            RepoRef::new(nostr::key::Keys::generate().public_key(), identifier).expect("valid")
        };
        let (owner, maintainer, stranger) = (key("r"), key("r"), key("r"));
        let mut schedule = schedule(3600, 300);
        let start = Instant::ZERO;
        for repo in [&owner, &maintainer, &stranger] {
            schedule.track(&repo.to_string(), start);
        }
        schedule.take_due(start);
        for repo in [&owner, &maintainer, &stranger] {
            schedule.finished(&repo.to_string(), start, false);
        }
        let later = start + Duration::from_secs(10);
        schedule.released([&owner, &maintainer], later);
        let mut due = schedule.take_due(later);
        due.sort();
        let mut expected = vec![owner.to_string(), maintainer.to_string()];
        expected.sort();
        assert_eq!(
            due, expected,
            "not the stranger's repository of the same identifier"
        );
    }

    #[test]
    fn at_most_the_pool_runs_and_owners_take_turns() {
        let mut schedule = schedule(3600, 300);
        let start = Instant::ZERO;
        // One stranger with 100 repositories whose keys sort first, then an honest owner.
        for n in 0..100 {
            schedule.track(&format!("30617:0000:x{n:03}"), start);
        }
        schedule.track("30617:ffff:honest", start);
        let first = schedule.take_due(start);
        assert_eq!(first.len(), 4, "the pool's size: {first:?}");
        assert!(
            first.contains(&"30617:ffff:honest".to_owned()),
            "the honest owner's turn comes in the first round: {first:?}"
        );
        assert!(schedule.take_due(start).is_empty(), "the pool is full");
        assert_eq!(schedule.due_or_running(start), 101);
        assert_eq!(schedule.poll_timeout(), None, "the ready wait for a place");
        schedule.finished(&first[0], start, false);
        assert_eq!(schedule.take_due(start).len(), 1, "one place freed");
        assert_eq!(schedule.running(), 4);
        assert_eq!(schedule.len(), 101);
    }

    #[test]
    fn a_ready_repository_forgotten_or_made_due_again_is_started_once() {
        let mut schedule = ReconcileSchedule::new(ReconcileConfig {
            concurrency: 1,
            ..ReconcileConfig::default()
        });
        let start = Instant::ZERO;
        for key in ["30617:a:r", "30617:b:r", "30617:c:r"] {
            schedule.track(key, start);
        }
        assert_eq!(schedule.take_due(start), vec!["30617:a:r".to_owned()]);
        schedule.due_now("30617:b:r", start);
        schedule.track("30617:b:r", start);
        schedule.forget("30617:c:r");
        schedule.finished("30617:a:r", start, false);
        assert_eq!(schedule.take_due(start), vec!["30617:b:r".to_owned()]);
        schedule.finished("30617:b:r", start, false);
        assert!(schedule.take_due(start).is_empty(), "c was forgotten");
        assert_eq!(schedule.len(), 2);
    }

    #[test]
    fn a_forgotten_repository_is_never_due() {
        let mut schedule = schedule(60, 10);
        schedule.track("a", Instant::ZERO);
        schedule.forget("a");
        assert!(schedule.is_empty());
        assert_eq!(schedule.poll_timeout(), None);
    }
}
