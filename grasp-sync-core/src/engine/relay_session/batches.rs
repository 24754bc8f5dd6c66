//! One relay's batches in flight: for each, the items it syncs and how (the
//! spec's `PendingSyncIndex` entry, [`RelayPending`]) and its progress
//! ([`BatchInfo`]: purpose, jobs and stores left, last progress). A batch
//! is started, found and ended here only, so the two never disagree.

use std::collections::HashMap;

use crate::clock::{Instant, Now};
use crate::engine::runtime::{BatchInfo, Purpose};
use crate::model::{BatchId, PendingBatch, PendingItems, RelayPending, SyncMethod};

/// One relay's batches in flight (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Batches {
    /// What each batch syncs and how, oldest first.
    pending: RelayPending,
    /// Each batch's purpose and remaining work.
    progress: HashMap<BatchId, BatchInfo>,
}

impl Batches {
    /// Starts `batch`, of `jobs` jobs, syncing `items` by `method` for
    /// `purpose`, at `now`.
    pub(crate) fn start(
        &mut self,
        batch: BatchId,
        purpose: Purpose,
        items: PendingItems,
        method: SyncMethod,
        jobs: usize,
        now: Now,
    ) {
        self.pending
            .insert(PendingBatch::new(batch, items, method, now.instant));
        self.progress.insert(
            batch,
            BatchInfo {
                purpose,
                jobs,
                stores: 0,
                last_progress: now.instant,
                started_unix: now.unix,
                fetching: Default::default(),
                covers_from: None,
                req_resumes: 0,
            },
        );
    }

    /// Ends `batch`: its progress, and what it synced if that was still
    /// recorded; `None` if it is not in flight.
    pub(crate) fn end(&mut self, batch: BatchId) -> Option<(BatchInfo, Option<PendingBatch>)> {
        let info = self.progress.remove(&batch)?;
        Some((info, self.pending.remove_batch(batch)))
    }

    /// Forgets every batch in flight.
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
        self.progress.clear();
    }

    /// The progress of `batch`, if it is in flight.
    pub(crate) fn get(&self, batch: BatchId) -> Option<&BatchInfo> {
        self.progress.get(&batch)
    }

    /// [`Batches::get`], to change.
    pub(crate) fn get_mut(&mut self, batch: BatchId) -> Option<&mut BatchInfo> {
        self.progress.get_mut(&batch)
    }

    /// Records progress of `batch` at `now`.
    pub(crate) fn progress(&mut self, batch: BatchId, now: Instant) {
        if let Some(info) = self.progress.get_mut(&batch) {
            info.last_progress = now;
        }
    }

    /// Every batch in flight with its progress.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&BatchId, &BatchInfo)> {
        self.progress.iter()
    }

    /// What the batches in flight sync and how, oldest first.
    pub(crate) fn pending(&self) -> &RelayPending {
        &self.pending
    }

    /// Every item some batch in flight syncs.
    pub(crate) fn items(&self) -> PendingItems {
        self.pending.items()
    }
}
