//! When each served repository is reconciled next (GRASP-02: missing git data is
//! pulled at least once an hour, whether or not an event arrives).
//!
//! A reconciliation compares what a repository serves with what it should
//! ([`serving`](super::serving)) and fetches what is missing. [`ReconcileSchedule`]
//! decides when: a repository seen for the first time (at start, too) is due at once,
//! so a restart never waits a whole interval for repositories that are behind; one that
//! serves its newest state is due again after the interval, jittered by up to ±10 %
//! per repository so that thousands of them do not all start in one second; one that
//! is behind is due again after the shorter retry; an event or a release that concerns
//! it makes it due at once. Pure: time is an argument.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::clock::Instant;
use crate::nip34::RepoRef;

/// How often repositories are reconciled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// A repository serving its newest state is reconciled again after this long
    /// (jittered by up to ±10 %). GRASP-02 asks for at least hourly.
    pub interval: Duration,
    /// A repository that is behind (objects missing, refs not applied) is reconciled
    /// again after this long, or the interval if shorter.
    pub behind_retry: Duration,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            interval: Duration::from_secs(3600),
            behind_retry: Duration::from_secs(300),
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

/// When each repository (keyed by its coordinate's text) is reconciled next.
#[derive(Clone, Debug, Default)]
pub struct ReconcileSchedule {
    config: ReconcileConfig,
    /// Repositories waiting, with when they are due.
    due: BTreeMap<String, Instant>,
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
        if !self.running.contains(key) {
            self.due.entry(key.to_owned()).or_insert(now);
        }
    }

    /// Something concerning the repository happened (an event released, a new
    /// announcement): it is due at once, or again right after the running one.
    pub fn due_now(&mut self, key: &str, now: Instant) {
        if self.running.contains(key) {
            self.again.insert(key.to_owned());
        } else {
            self.due
                .entry(key.to_owned())
                .and_modify(|at| *at = (*at).min(now))
                .or_insert(now);
        }
    }

    /// Events of `repo` were released: `repo` is due at once, and so is every tracked
    /// repository of the same identifier (a co-maintainer's state may count for each
    /// repository whose maintainer set lists them; the reconciliation decides).
    pub fn released(&mut self, repo: &RepoRef, now: Instant) {
        let same_identifier: Vec<String> = self
            .due
            .keys()
            .chain(&self.running)
            .filter(|key| {
                RepoRef::parse(key).is_ok_and(|other| other.identifier() == repo.identifier())
            })
            .cloned()
            .collect();
        self.due_now(&repo.to_string(), now);
        for key in same_identifier {
            self.due_now(&key, now);
        }
    }

    /// The repositories due at `now`, in key order, now running.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let ready: Vec<String> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &ready {
            self.due.remove(key);
            self.running.insert(key.clone());
        }
        ready
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
        self.due.insert(key.to_owned(), at);
    }

    /// The repository is no longer served (its announcement is gone).
    pub fn forget(&mut self, key: &str) {
        self.due.remove(key);
        self.again.remove(key);
    }

    /// Whether the repository is waiting for, or running, a reconciliation.
    pub fn is_tracked(&self, key: &str) -> bool {
        self.due.contains_key(key) || self.running.contains(key)
    }

    /// How many repositories are due at `now` or running.
    pub fn due_or_running(&self, now: Instant) -> usize {
        self.running.len() + self.due.values().filter(|at| **at <= now).count()
    }

    /// When the next repository is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// How many repositories are tracked.
    pub fn len(&self) -> usize {
        self.due.len() + self.running.len()
    }

    /// Whether no repository is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(interval: u64, retry: u64) -> ReconcileSchedule {
        ReconcileSchedule::new(ReconcileConfig {
            interval: Duration::from_secs(interval),
            behind_retry: Duration::from_secs(retry),
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
        };
        assert!(short.delay("x", true) <= Duration::from_secs(66));
    }

    #[test]
    fn a_release_makes_the_repository_and_those_of_its_identifier_due() {
        let key = |identifier: &str| {
            RepoRef::new(nostr::key::Keys::generate().public_key(), identifier).expect("valid")
        };
        let (owner, maintainer, other) = (key("r"), key("r"), key("s"));
        let mut schedule = schedule(3600, 300);
        let start = Instant::ZERO;
        for repo in [&owner, &maintainer, &other] {
            schedule.track(&repo.to_string(), start);
        }
        schedule.take_due(start);
        for repo in [&owner, &maintainer, &other] {
            schedule.finished(&repo.to_string(), start, false);
        }
        let later = start + Duration::from_secs(10);
        schedule.released(&owner, later);
        let mut due = schedule.take_due(later);
        due.sort();
        let mut expected = vec![owner.to_string(), maintainer.to_string()];
        expected.sort();
        assert_eq!(due, expected, "not the repository of another identifier");
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
