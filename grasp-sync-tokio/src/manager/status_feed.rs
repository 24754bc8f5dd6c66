//! The status snapshots handed to [`SyncManager::status`](super::SyncManager::status)'s
//! watchers: at most one per [`STATUS_INTERVAL`], and only when something
//! changed.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::status::SyncStatus;

/// The shortest interval between two status snapshots.
const STATUS_INTERVAL: Duration = Duration::from_millis(100);

/// Where status snapshots are published, and when the last one was.
pub(super) struct StatusFeed {
    sender: watch::Sender<SyncStatus>,
    /// When the status was last refreshed.
    refreshed_at: Instant,
    /// A refresh held back by the interval, due then.
    due: Option<Instant>,
}

impl StatusFeed {
    /// Publishes on `sender`.
    pub(super) fn new(sender: watch::Sender<SyncStatus>) -> Self {
        StatusFeed {
            sender,
            refreshed_at: Instant::now(),
            due: None,
        }
    }

    /// When a refresh held back by the interval is due, if one is.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Publishes `status()` if the last snapshot is older than
    /// [`STATUS_INTERVAL`] (or `force`) and something changed; else notes
    /// the refresh as due when the interval is over, so that the last
    /// change before a quiet spell is not held back.
    pub(super) fn refresh(&mut self, force: bool, status: impl FnOnce() -> SyncStatus) {
        let now = Instant::now();
        if !force && now < self.refreshed_at + STATUS_INTERVAL {
            self.due = Some(self.refreshed_at + STATUS_INTERVAL);
            return;
        }
        self.refreshed_at = now;
        self.due = None;
        let status = status();
        self.sender.send_if_modified(|current| {
            let changed = *current != status;
            if changed {
                *current = status;
            }
            changed
        });
    }
}
