//! One relay's batches in flight, in one map: for each, what it syncs and
//! how (its [`PendingBatch`], the spec's `PendingSyncIndex` entry), what it
//! is for and its progress ([`Batch`]). Planning's view, how many batches
//! sync each item ([`ItemsInFlight`]), is kept here as batches start and
//! end, so the two never disagree.

use std::collections::HashSet;

use indexmap::IndexMap;
use nostr::prelude::{EventId, Timestamp};

use crate::clock::{Instant, Now};
use crate::engine::runtime::Purpose;
use crate::model::{BatchId, ItemsInFlight, PendingBatch, PendingItems, SyncMethod};

/// One batch in flight: what it syncs and how, what it is for, and its
/// remaining work (queued plus running jobs, events waiting for the store).
#[derive(Debug)]
pub(crate) struct Batch {
    /// What the batch syncs and how (planning's and the API's view).
    pending: PendingBatch,
    purpose: Purpose,
    /// Jobs queued or running.
    jobs: usize,
    /// Events of the batch handed to the store and not stored yet.
    stores: usize,
    /// When the batch last made progress (a job started, an event, an EOSE,
    /// a NEG-MSG); its timeout counts from here while a job of it runs.
    last_progress: Instant,
    /// When the batch started (wall clock).
    started_unix: Timestamp,
    /// Ids a negentropy round of the batch already asked for.
    fetching: HashSet<EventId>,
    /// For a gap catch-up or a poll: the moment (wall clock, before the
    /// quick-reconnect window is taken off) it catches up from.
    covers_from: Option<Timestamp>,
    /// Stalled REQs of the batch resumed since it last heard anything
    /// (`RelaySession::resume_req`).
    req_resumes: u32,
}

impl Batch {
    /// No job queued or running, no event waiting for the store: the one
    /// completion rule of a batch.
    pub(crate) fn is_done(&self) -> bool {
        self.jobs == 0 && self.stores == 0
    }

    /// No job of the batch is queued or running (events may still wait for
    /// the store).
    pub(crate) fn jobs_finished(&self) -> bool {
        self.jobs == 0
    }

    /// What the batch is for.
    pub(crate) fn purpose(&self) -> Purpose {
        self.purpose
    }

    /// The items the batch syncs.
    pub(crate) fn items(&self) -> &PendingItems {
        &self.pending.items
    }

    /// When the batch started (wall clock).
    pub(crate) fn started_unix(&self) -> Timestamp {
        self.started_unix
    }

    /// For a gap catch-up or a poll: the moment it catches up from.
    pub(crate) fn covers_from(&self) -> Option<Timestamp> {
        self.covers_from
    }

    /// When the batch last made progress.
    pub(crate) fn last_progress(&self) -> Instant {
        self.last_progress
    }
}

/// One relay's batches in flight (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Batches {
    /// Each batch in flight, oldest first.
    batches: IndexMap<BatchId, Batch>,
    /// How many batches sync each item: planning's view of `batches`.
    in_flight: ItemsInFlight,
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
        self.in_flight.count_in(&items);
        let pending = PendingBatch::new(batch, items, method, now.instant);
        let started = Batch {
            pending,
            purpose,
            jobs,
            stores: 0,
            last_progress: now.instant,
            started_unix: now.unix,
            fetching: HashSet::new(),
            covers_from: None,
            req_resumes: 0,
        };
        if let Some(replaced) = self.batches.insert(batch, started) {
            // Batch ids are unique within an engine: cannot happen.
            self.in_flight.count_out(replaced.items());
        }
    }

    /// Ends `batch`, `None` if it is not in flight.
    pub(crate) fn end(&mut self, batch: BatchId) -> Option<Batch> {
        let ended = self.batches.shift_remove(&batch)?;
        self.in_flight.count_out(ended.items());
        Some(ended)
    }

    /// Forgets every batch in flight.
    pub(crate) fn clear(&mut self) {
        self.batches.clear();
        self.in_flight.clear();
    }

    /// `batch`, if it is in flight.
    pub(crate) fn get(&self, batch: BatchId) -> Option<&Batch> {
        self.batches.get(&batch)
    }

    /// Every batch in flight, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (BatchId, &Batch)> {
        self.batches.iter().map(|(batch, info)| (*batch, info))
    }

    /// How many batches are in flight.
    pub(crate) fn len(&self) -> usize {
        self.batches.len()
    }

    /// What the batches in flight sync and how, oldest first.
    pub(crate) fn pending(&self) -> impl ExactSizeIterator<Item = &PendingBatch> {
        self.batches.values().map(|batch| &batch.pending)
    }

    /// How many batches in flight sync each item.
    pub(crate) fn in_flight(&self) -> &ItemsInFlight {
        &self.in_flight
    }

    /// Every item some batch in flight syncs.
    pub(crate) fn items(&self) -> PendingItems {
        self.in_flight.items()
    }

    /// The earliest moment a gap catch-up or a poll in flight catches up
    /// from: live coverage missing until it confirms.
    pub(crate) fn uncaught_since(&self) -> Option<Timestamp> {
        self.batches
            .values()
            .filter(|batch| matches!(batch.purpose, Purpose::Gap | Purpose::Poll))
            .filter_map(|batch| batch.covers_from)
            .min()
    }

    /// Records progress of `batch` at `now`.
    pub(crate) fn progress(&mut self, batch: BatchId, now: Instant) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.last_progress = now;
        }
    }

    /// `batch` (a gap catch-up or a poll) catches up from `from`.
    pub(crate) fn cover_from(&mut self, batch: BatchId, from: Timestamp) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.covers_from = Some(from);
        }
    }

    /// `count` more jobs of `batch` are queued.
    pub(crate) fn add_jobs(&mut self, batch: BatchId, count: usize) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.jobs += count;
        }
    }

    /// A job of `batch` finished at `now` (progress); the batch as it is
    /// now, if it is in flight.
    pub(crate) fn finish_job(&mut self, batch: BatchId, now: Instant) -> Option<&Batch> {
        let info = self.batches.get_mut(&batch)?;
        info.last_progress = now;
        info.jobs = info.jobs.saturating_sub(1);
        Some(info)
    }

    /// Counts events of `batch` handed to the store (`+1`) or answered
    /// (`-1`); the batch as it is now, if it is in flight.
    pub(crate) fn count_store(&mut self, batch: BatchId, delta: i32) -> Option<&Batch> {
        let info = self.batches.get_mut(&batch)?;
        info.stores = if delta >= 0 {
            info.stores.saturating_add(delta.unsigned_abs() as usize)
        } else {
            info.stores.saturating_sub(delta.unsigned_abs() as usize)
        };
        Some(info)
    }

    /// Of the ids a negentropy round of `batch` found missing, those no
    /// round of it asked for yet (each id is fetched once per batch), now
    /// counted as asked for; all of them if `batch` is not in flight.
    pub(crate) fn not_fetching_yet(&mut self, batch: BatchId, need: Vec<EventId>) -> Vec<EventId> {
        match self.batches.get_mut(&batch) {
            Some(info) => need
                .into_iter()
                .filter(|id| info.fetching.insert(*id))
                .collect(),
            None => need,
        }
    }

    /// The relay answered a subscription of `batch`: its REQ resumes count
    /// afresh.
    pub(crate) fn heard(&mut self, batch: BatchId) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.req_resumes = 0;
        }
    }

    /// A stalled REQ of `batch` is to be resumed: `Some(true)` when it may
    /// (counted), `Some(false)` when the batch's REQs were resumed
    /// `attempts` times without an answer since, `None` if `batch` is not
    /// in flight.
    pub(crate) fn resume(&mut self, batch: BatchId, attempts: u32) -> Option<bool> {
        let info = self.batches.get_mut(&batch)?;
        if info.req_resumes >= attempts {
            return Some(false);
        }
        info.req_resumes += 1;
        Some(true)
    }
}
