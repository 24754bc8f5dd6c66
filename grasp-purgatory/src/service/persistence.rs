//! Persistence of the held events through the journal (see [`crate::journal`]): replayed
//! when the purgatory is built (restored events are queued with the immediate delay and
//! their repositories' stale refs swept), compacted when it grows, `fsync`ed by the run
//! loop at most every [`SYNC_INTERVAL`] and at shutdown.

use std::path::Path;
use std::sync::PoisonError;

use grasp_sync_core::nip34::RepoRef;

use super::api::Purgatory;
use crate::context::lock;
use crate::held::hold_event;
use crate::journal::{self, Journal, RejectedLine, SYNC_INTERVAL};

/// The most line numbers of skipped journal lines one warning lists.
const MAX_LISTED_LINES: usize = 20;

/// Logs the journal lines replay skipped: one warning with their count and (the first
/// [`MAX_LISTED_LINES`]) line numbers, each line's reason at debug.
fn report_damage(path: &Path, rejected: &[RejectedLine]) {
    if rejected.is_empty() {
        return;
    }
    for line in rejected {
        tracing::debug!(line = line.line, reason = %line.reason, "purgatory journal line skipped");
    }
    let lines: Vec<usize> = rejected
        .iter()
        .take(MAX_LISTED_LINES)
        .map(|line| line.line)
        .collect();
    tracing::warn!(
        journal = %path.display(),
        count = rejected.len(),
        ?lines,
        first_reason = %rejected[0].reason,
        "purgatory journal damaged: lines skipped, every other record restored"
    );
}

/// When the run loop last `fsync`ed the journal.
#[derive(Debug)]
pub(super) struct JournalSync {
    last: tokio::time::Instant,
}

impl Default for JournalSync {
    fn default() -> Self {
        JournalSync {
            last: tokio::time::Instant::now(),
        }
    }
}

impl Purgatory {
    /// Compacts the journal to the events held now and `fsync`s it, if a journal is set.
    /// The run loop does this at shutdown; every event is in the journal long before.
    pub async fn save(&self) -> Result<(), std::io::Error> {
        if self.shared.config.persist_path.is_none() {
            return Ok(());
        }
        self.compact_journal().await?;
        self.sync_journal().await?;
        tracing::info!(
            events = self.held(),
            "purgatory journal compacted and synced"
        );
        Ok(())
    }

    /// Replays the journal at `path`: holds its live events again and queues their
    /// repositories, marks the repositories of every event it names for a sweep of stale
    /// refs, then rewrites it with the live events only and journals to it from now on.
    /// Lines (and events) that cannot be restored are logged and kept for
    /// [`Purgatory::restore_rejected`]. Blocking file I/O (the builder is synchronous).
    pub(super) fn restore(&self, path: &Path) -> Result<(), std::io::Error> {
        let replayed = journal::replay(path)?;
        report_damage(path, &replayed.rejected);
        let mut refused = replayed.rejected;
        let mut touched: Vec<RepoRef> = Vec::new();
        for saved in replayed.left {
            if let Ok(held) = hold_event(saved.event, saved.origin, saved.held_since) {
                touched.push(held.repo);
            }
        }
        for saved in replayed.live {
            let id = saved.event.id;
            let restored = hold_event(saved.event, saved.origin, saved.held_since)
                .map_err(Into::into)
                .and_then(|held| {
                    let repo = held.repo.clone();
                    self.hold(held).map(|_| repo)
                });
            match restored {
                Ok(repo) => {
                    self.enqueue(&repo, self.shared.config.queue.immediate_delay);
                    touched.push(repo);
                }
                Err(error) => {
                    tracing::warn!(%id, %error, "purgatory event not restored");
                    refused.push(RejectedLine {
                        line: 0,
                        reason: format!("event {id}: {error}"),
                    });
                }
            }
        }
        {
            let mut store = lock(&self.shared.store);
            let journal = Journal::create(path, store.iter())?;
            store.attach_journal(journal);
        }
        self.sweep_later(touched);
        *self
            .shared
            .restore_rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = refused;
        Ok(())
    }

    /// The run loop's journal upkeep: compacts it when it grew past its limit, and
    /// `fsync`s it when it was written and the last `fsync` is [`SYNC_INTERVAL`] old.
    /// Failures are logged (records keep being appended).
    pub(super) async fn maintain_journal(&self, sync: &mut JournalSync) {
        let needs_compaction = lock(&self.shared.store).journal_needs_compaction();
        if needs_compaction {
            if let Err(error) = self.compact_journal().await {
                tracing::warn!(%error, "compacting the purgatory journal failed");
            }
        }
        if sync.last.elapsed() >= SYNC_INTERVAL {
            sync.last = tokio::time::Instant::now();
            if let Err(error) = self.sync_journal().await {
                tracing::warn!(%error, "syncing the purgatory journal failed");
            }
        }
    }

    /// Rewrites the journal with the events held now: the snapshot is taken under the
    /// store lock, written and `fsync`ed on a blocking thread (records appended meanwhile
    /// are kept for it), then renamed over the journal.
    async fn compact_journal(&self) -> Result<(), std::io::Error> {
        let Some(snapshot) = lock(&self.shared.store).begin_compaction() else {
            return Ok(());
        };
        let written = tokio::task::spawn_blocking(move || snapshot.write())
            .await
            .map_err(std::io::Error::other)
            .and_then(|written| written);
        let mut store = lock(&self.shared.store);
        match written {
            Ok(written) => {
                store.finish_compaction(Some(written))?;
                tracing::debug!(
                    records = store.journal_records(),
                    "purgatory journal compacted"
                );
                Ok(())
            }
            Err(error) => {
                store.finish_compaction(None)?;
                Err(error)
            }
        }
    }

    /// `fsync`s the journal on a blocking thread if it was written since the last time.
    async fn sync_journal(&self) -> Result<(), std::io::Error> {
        let Some(file) = lock(&self.shared.store).journal_to_sync() else {
            return Ok(());
        };
        let file = file?;
        tokio::task::spawn_blocking(move || file.sync_data())
            .await
            .map_err(std::io::Error::other)?
    }
}
