//! The [`PurgatoryStatus`] of a purgatory: computed from the store, the sync queue, the
//! throttles and the metrics' counters, and published on a watch channel by the run
//! loop at most every [`STATUS_INTERVAL`] while something changes.

use std::time::Duration;

use tokio::sync::watch;

use super::api::Purgatory;
use crate::context::lock;
use crate::status::PurgatoryStatus;

/// The shortest interval between two snapshots published by the run loop.
const STATUS_INTERVAL: Duration = Duration::from_millis(100);

/// When the run loop last published the status, and whether it skipped a refresh since
/// (to publish it once the interval has passed).
#[derive(Debug, Default)]
pub(super) struct StatusRefresh {
    last: Option<tokio::time::Instant>,
    skipped: bool,
}

impl StatusRefresh {
    /// When to publish the refresh that was skipped, if one was.
    pub(super) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.last
            .filter(|_| self.skipped)
            .map(|last| last + STATUS_INTERVAL)
    }
}

impl Purgatory {
    /// A receiver of the purgatory's [`PurgatoryStatus`], obtainable before
    /// [`Purgatory::run`]. It starts with the status at build (restored events
    /// included); the run loop refreshes it at most every 100 ms while something
    /// changes and at least every loop interval, and adding an event (or
    /// [`Purgatory::trigger_immediate_sync`]) to a purgatory whose published status
    /// says [`nothing_ready`](PurgatoryStatus::nothing_ready) publishes at once, so
    /// that flag is never stale after an add returned.
    ///
    /// ```no_run
    /// use grasp_purgatory::nostr::prelude::Event;
    /// use grasp_purgatory::{Origin, Purgatory};
    ///
    /// # async fn demo(purgatory: Purgatory, pull_request: Event) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut status = purgatory.status(); // before run()
    /// tokio::spawn({
    ///     let purgatory = purgatory.clone();
    ///     async move { purgatory.run().await }
    /// });
    /// purgatory.add(pull_request, Origin::Synced)?;
    /// // Released, or waiting for a backoff (its clone URLs lack the commit).
    /// let settled = status
    ///     .wait_for(|status| status.nothing_ready)
    ///     .await?
    ///     .clone();
    /// println!(
    ///     "released {}, expired {}, still held {}, objects fetched {}",
    ///     settled.events_released, settled.events_expired, settled.events_held, settled.oids_fetched,
    /// );
    /// // What is being fetched, on demand rather than from the last snapshot.
    /// for (domain, fetches) in &purgatory.status_now().fetches_by_domain {
    ///     println!("{domain}: {fetches} fetches in flight");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn status(&self) -> watch::Receiver<PurgatoryStatus> {
        self.shared.status.subscribe()
    }

    /// The status now, computed on demand (it locks the store, the sync queue and the
    /// throttles briefly, one after the other).
    pub fn status_now(&self) -> PurgatoryStatus {
        let shared = &self.shared;
        let now = shared.clock.now();
        let soon = now + shared.config.queue.immediate_delay;
        let (events_held, events_releasing, identifiers_queued, ready, syncing) = {
            let store = lock(&shared.store);
            let queue = self.queue();
            let (mut ready, mut syncing) = (0, 0);
            for repo in store.repositories() {
                match queue.get(&repo.to_string()) {
                    Some(entry) if entry.in_progress => syncing += 1,
                    Some(entry) if entry.next_attempt <= soon => ready += 1,
                    _ => {}
                }
            }
            (store.len(), store.releasing(), queue.len(), ready, syncing)
        };
        let fetches_by_domain = shared.manager.in_flight_by_domain();
        let fetches_in_flight: u32 = fetches_by_domain.values().sum();
        let waiting = shared.manager.queued_identifiers().len();
        let metrics = &shared.metrics;
        PurgatoryStatus {
            events_held,
            events_releasing,
            events_released: metrics.events_released.get(),
            events_expired: metrics.events_expired.get(),
            events_refused: metrics.events_refused_total(),
            identifiers_queued,
            identifiers_ready: ready,
            identifiers_syncing: syncing,
            identifiers_waiting_for_domain: waiting,
            fetches_in_flight,
            fetches_by_domain,
            oids_fetched: metrics.oids_fetched.get(),
            nothing_ready: ready == 0
                && syncing == 0
                && waiting == 0
                && fetches_in_flight == 0
                && events_releasing == 0,
        }
    }

    /// Publishes the status unless the last one was published less than
    /// [`STATUS_INTERVAL`] ago (then [`StatusRefresh::deadline`] says when to).
    pub(super) fn refresh_status(&self, refresh: &mut StatusRefresh) {
        let now = tokio::time::Instant::now();
        if refresh
            .last
            .is_some_and(|last| now < last + STATUS_INTERVAL)
        {
            refresh.skipped = true;
            return;
        }
        refresh.last = Some(now);
        refresh.skipped = false;
        self.publish_status();
    }

    /// Publishes the status now if the published one says nothing is ready: an event
    /// just added may change that, and nobody should read the stale flag meanwhile.
    pub(super) fn publish_if_settled(&self) {
        let settled = self.shared.status.borrow().nothing_ready;
        if settled {
            self.publish_status();
        }
    }

    /// Publishes the status now, waking receivers only if it changed. Computed under
    /// the channel's lock, so concurrent publishers never replace a newer snapshot with
    /// an older one (callers must not hold the store or queue lock).
    pub(super) fn publish_status(&self) {
        self.shared.status.send_if_modified(|current| {
            let status = self.status_now();
            let changed = *current != status;
            if changed {
                *current = status;
            }
            changed
        });
    }
}
