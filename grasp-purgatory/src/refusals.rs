//! Logging refusals without letting strangers flood the log: refused clone URLs are
//! logged (warn) and counted once per URL, refused events at most once a minute per
//! reason (with how many were refused since).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use grasp_sync_core::clock::Instant;
use prometheus::IntCounterVec;

use crate::git::GitError;

/// Refused URLs remembered for "once per URL"; when full, the memory starts over (a URL
/// refused again is then logged and counted again).
const MAX_REMEMBERED_URLS: usize = 10_000;

/// The shortest interval between two warnings of one event refusal reason.
const EVENT_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Clone URLs refused before any process ran (policy, forbidden address, unresolvable).
#[derive(Debug)]
pub(crate) struct UrlRefusals {
    seen: Mutex<HashSet<String>>,
    counter: IntCounterVec,
}

impl UrlRefusals {
    /// Counts into `counter` (`purgatory_clone_url_refusals_total{reason}`).
    pub(crate) fn new(counter: IntCounterVec) -> Self {
        UrlRefusals {
            seen: Mutex::new(HashSet::new()),
            counter,
        }
    }

    /// Notes that `url` was refused with `error`: the first time, logs it at warn and
    /// counts it by reason. Errors that are not refusals are ignored. Returns whether it
    /// was logged.
    pub(crate) fn note(&self, url: &str, error: &GitError) -> bool {
        let Some(reason) = error.refusal_reason() else {
            return false;
        };
        let first = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if seen.len() >= MAX_REMEMBERED_URLS {
                seen.clear();
            }
            seen.insert(url.to_owned())
        };
        if first {
            tracing::warn!(%url, reason, %error, "clone url refused");
            self.counter.with_label_values(&[reason]).inc();
        }
        first
    }
}

/// When each event refusal reason was last logged, and how many were refused since.
#[derive(Debug, Default)]
pub(crate) struct EventRefusalLog {
    last: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl EventRefusalLog {
    /// An event was refused for `reason` at `now`: the number of refusals to report if
    /// a warning is due (this one included), `None` while the reason was warned about
    /// less than a minute ago.
    pub(crate) fn due(&self, reason: &'static str, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match last.get_mut(reason) {
            Some((at, suppressed))
                if now.saturating_duration_since(*at) < EVENT_WARNING_INTERVAL =>
            {
                *suppressed = suppressed.saturating_add(1);
                None
            }
            Some((at, suppressed)) => {
                let count = suppressed.saturating_add(1);
                *at = now;
                *suppressed = 0;
                Some(count)
            }
            None => {
                last.insert(reason, (now, 0));
                Some(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use grasp_sync_core::url_policy::CloneUrlPolicy;
    use prometheus::Opts;

    use super::*;

    #[test]
    fn a_refused_url_is_logged_and_counted_once() {
        let counter = IntCounterVec::new(Opts::new("t", "t"), &["reason"]).unwrap();
        let refusals = UrlRefusals::new(counter.clone());
        let policy = CloneUrlPolicy::new().check("file:///etc").unwrap_err();
        let error = GitError::Policy {
            url: "file:///etc".to_owned(),
            source: policy,
        };
        assert!(refusals.note("file:///etc", &error));
        assert!(!refusals.note("file:///etc", &error));
        let timeout = GitError::Timeout {
            operation: "fetch",
            after: Duration::from_secs(1),
        };
        assert!(!refusals.note("https://a.example/r.git", &timeout));
        assert_eq!(counter.with_label_values(&["policy"]).get(), 1);
    }

    #[test]
    fn event_refusals_warn_at_most_once_a_minute_per_reason() {
        let log = EventRefusalLog::default();
        let start = Instant::from_secs(100);
        assert_eq!(log.due("repository_full", start), Some(1));
        assert_eq!(log.due("repository_full", Instant::from_secs(130)), None);
        assert_eq!(log.due("total_full", Instant::from_secs(130)), Some(1));
        assert_eq!(log.due("repository_full", Instant::from_secs(159)), None);
        assert_eq!(log.due("repository_full", Instant::from_secs(160)), Some(3));
    }
}
