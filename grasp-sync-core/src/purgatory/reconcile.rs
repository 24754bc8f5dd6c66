//! When each served repository is reconciled next (GRASP-02: missing git data is
//! pulled at least once an hour, whether or not an event arrives), and how many at once.
//!
//! A reconciliation compares what a repository serves with what it should
//! ([`serving`](super::serving)) and fetches what is missing. [`ReconcileSchedule`]
//! decides when: a repository seen for the first time (at start, too) is due at once,
//! so a restart never waits a whole interval for repositories that are behind; one that
//! serves its newest state is due again after the interval, jittered by up to ±10 %
//! per repository so that thousands of them do not all start in one second; one that
//! is behind is due again after a retry that doubles with each reconciliation it stays
//! behind (5 min, 10 min, 20 min, … never longer than the interval), so a state whose
//! objects never come costs a few reconciliations an hour, not twelve; catching up, or
//! an event or a release that concerns it, starts the retry over, and the event or
//! release makes it due at once.
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
    /// again after this long the first time, then after twice as long each time it is
    /// still behind, never longer than the (jittered) interval.
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
    /// or (`behind`) the first retry, at most that.
    pub fn delay(&self, key: &str, behind: bool) -> Duration {
        if behind {
            self.behind_delay(key, 0)
        } else {
            jitter(self.interval, key)
        }
    }

    /// How long after a reconciliation that left the repository keyed `key` behind the
    /// next one is due, when the `behind_before` reconciliations just before this one
    /// left it behind too: [`behind_retry`](Self::behind_retry) doubled that many
    /// times, at most the interval jittered as in [`delay`](Self::delay).
    pub fn behind_delay(&self, key: &str, behind_before: u32) -> Duration {
        let factor = 1_u32.checked_shl(behind_before).unwrap_or(u32::MAX);
        self.behind_retry
            .saturating_mul(factor)
            .min(jitter(self.interval, key))
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
    /// How many reconciliations in a row left each repository behind since it last
    /// caught up or something concerned it (absent: none): its retry doubles with each.
    behind_streak: HashMap<String, u32>,
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
        self.behind_streak.remove(key);
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
    /// its newest state yet. Schedules the next one: at once if something concerned
    /// it meanwhile (its retry starts over), else after the interval, or after a retry
    /// that doubles with each reconciliation in a row that left it behind
    /// ([`ReconcileConfig::behind_delay`]).
    pub fn finished(&mut self, key: &str, now: Instant, behind: bool) {
        self.running.remove(key);
        let at = if self.again.remove(key) {
            now
        } else {
            now + self.next_delay(key, behind)
        };
        self.set_due(key, at);
    }

    /// The delay after a reconciliation of `key` that left it `behind` or not, counting
    /// it in the repository's behind streak (a caught-up repository's streak ends).
    fn next_delay(&mut self, key: &str, behind: bool) -> Duration {
        if !behind {
            self.behind_streak.remove(key);
            return self.config.delay(key, false);
        }
        let streak = self.behind_streak.entry(key.to_owned()).or_insert(0);
        let delay = self.config.behind_delay(key, *streak);
        *streak = streak.saturating_add(1);
        delay
    }

    /// The repository is no longer served (its announcement is gone).
    pub fn forget(&mut self, key: &str) {
        self.unset_due(key);
        self.ready.remove(key);
        self.again.remove(key);
        self.behind_streak.remove(key);
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

    /// Runs `key`'s next reconciliation when it is due, ending `behind` or not, and
    /// returns how long after the previous one it was due, with when it ended.
    fn run_when_due(
        schedule: &mut ReconcileSchedule,
        key: &str,
        now: Instant,
        behind: bool,
    ) -> (Duration, Instant) {
        let at = schedule.poll_timeout().expect("due again");
        assert_eq!(schedule.take_due(at), vec![key.to_owned()]);
        schedule.finished(key, at, behind);
        (at.saturating_duration_since(now), at)
    }

    #[test]
    fn a_repository_that_stays_behind_is_retried_after_a_growing_delay_capped_at_the_interval() {
        let mut schedule = schedule(3600, 300);
        let key = "30617:owner:r";
        let cap = schedule.config().delay(key, false);
        let mut now = Instant::from_secs(1000);
        schedule.track(key, now);
        assert_eq!(schedule.take_due(now), vec![key.to_owned()]);
        schedule.finished(key, now, true);
        let mut waits = Vec::new();
        for _ in 0..7 {
            let (wait, at) = run_when_due(&mut schedule, key, now, true);
            waits.push(wait);
            now = at;
        }
        let secs = |n: u64| Duration::from_secs(n);
        assert_eq!(
            waits,
            vec![secs(300), secs(600), secs(1200), secs(2400), cap, cap, cap],
            "doubling, never longer than the jittered interval ({cap:?})"
        );
        assert!(cap <= secs(3960), "GRASP-02: about hourly at most");

        // Caught up: the next time it falls behind, the retry starts over.
        let (_, at) = run_when_due(&mut schedule, key, now, false);
        now = at;
        let (wait, at) = run_when_due(&mut schedule, key, now, true);
        assert_eq!(wait, cap, "serving its newest state: the interval");
        now = at;
        let (wait, at) = run_when_due(&mut schedule, key, now, true);
        assert_eq!(wait, secs(300), "behind again after catching up: 300 s");
        now = at;
        let (wait, at) = run_when_due(&mut schedule, key, now, true);
        assert_eq!(wait, secs(600));
        now = at;

        // A new event or a release concerning it: due at once, then 300 s again.
        let event = now + secs(5);
        schedule.due_now(key, event);
        let (wait, at) = run_when_due(&mut schedule, key, now, true);
        assert_eq!(wait, secs(5), "an event makes it due at once");
        now = at;
        let (wait, at) = run_when_due(&mut schedule, key, now, true);
        assert_eq!(wait, secs(300), "the event started the retry over");
        now = at;

        // Concerned while running: due at once after it, and the retry starts over.
        schedule.finished(key, now, true);
        let at = schedule.poll_timeout().expect("due");
        assert_eq!(schedule.take_due(at), vec![key.to_owned()]);
        schedule.due_now(key, at);
        schedule.finished(key, at, true);
        assert_eq!(schedule.poll_timeout(), Some(at), "concerned while running");
        now = at;
        let (_, at) = run_when_due(&mut schedule, key, now, true);
        now = at;
        let (wait, _) = run_when_due(&mut schedule, key, now, true);
        assert_eq!(
            wait,
            secs(300),
            "first retry after the event's reconciliation"
        );
    }

    #[test]
    fn each_repository_backs_off_on_its_own_and_a_forgotten_one_starts_over() {
        let mut schedule = schedule(3600, 300);
        let start = Instant::ZERO;
        for key in ["30617:a:r", "30617:b:r"] {
            schedule.track(key, start);
        }
        schedule.take_due(start);
        schedule.finished("30617:a:r", start, true);
        schedule.finished("30617:b:r", start, true);
        // a stays behind twice more; b catches up.
        let t1 = start + Duration::from_secs(300);
        schedule.take_due(t1);
        schedule.finished("30617:a:r", t1, true);
        schedule.finished("30617:b:r", t1, false);
        let t2 = t1 + Duration::from_secs(600);
        assert_eq!(schedule.take_due(t2), vec!["30617:a:r".to_owned()]);
        schedule.finished("30617:a:r", t2, true);
        assert_eq!(
            schedule.poll_timeout(),
            Some(t2 + Duration::from_secs(1200)),
            "a's third retry, whatever b did"
        );
        schedule.forget("30617:a:r");
        schedule.track("30617:a:r", t2);
        schedule.take_due(t2);
        schedule.finished("30617:a:r", t2, true);
        assert_eq!(
            schedule.poll_timeout(),
            Some(t2 + Duration::from_secs(300)),
            "forgotten, then served again: the retry starts over"
        );
    }

    #[test]
    fn the_behind_delay_doubles_without_overflowing_and_never_passes_the_interval() {
        let config = ReconcileConfig::default();
        let cap = config.delay("k", false);
        let secs: Vec<Duration> = (0..6).map(|n| config.behind_delay("k", n)).collect();
        assert_eq!(secs[..4], [300, 600, 1200, 2400].map(Duration::from_secs));
        assert_eq!(secs[4..], [cap, cap]);
        assert_eq!(config.behind_delay("k", u32::MAX), cap);
        assert_eq!(config.delay("k", true), Duration::from_secs(300));
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
