//! A batch's lifecycle: its jobs finishing, its events stored, confirmed
//! (the one completion rule, [`BatchInfo::is_done`]) or failed and planned
//! again.

use nostr::prelude::{RelayUrl, SubscriptionId};
use tracing::{debug, warn};

use super::runtime::{Job, Purpose, Sub};
use super::timer_table::RelayTimer;
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::model::BatchId;

impl SyncEngine {
    /// [`RelaySession::progress`](super::relay_session::RelaySession::progress) on `relay`.
    pub(super) fn progress(&mut self, now: Now, relay: &RelayUrl, batch: BatchId) {
        if let Some(session) = self.relays.get_mut(relay) {
            session.progress(batch, now.instant);
        }
    }

    /// [`RelaySession::add_jobs`](super::relay_session::RelaySession::add_jobs) on `relay`.
    pub(super) fn add_jobs(&mut self, relay: &RelayUrl, batch: BatchId, jobs: Vec<Job>) {
        if let Some(session) = self.relays.get_mut(relay) {
            session.add_jobs(batch, jobs);
        }
    }

    /// Removes a finished subscription slot; when its batch has no work
    /// left, the batch is confirmed ([`RelaySession::finish_job`](super::relay_session::RelaySession::finish_job)).
    pub(super) fn finish_job(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let finished = self
            .relays
            .get_mut(relay)
            .and_then(|session| session.finish_job(id, now.instant, &self.config));
        if let Some((batch, true)) = finished {
            self.complete_batch(now, relay, batch);
        }
    }

    /// Counts events of `batch` handed to the store (`+1`) or answered
    /// (`-1`); a batch whose jobs are done confirms with its last store.
    pub(super) fn count_store(&mut self, now: Now, relay: &RelayUrl, batch: BatchId, delta: i32) {
        let done = self
            .relays
            .get_mut(relay)
            .is_some_and(|session| session.count_store(batch, delta));
        if done {
            self.complete_batch(now, relay, batch);
        }
    }

    /// [`RelaySession::replace_job`](super::relay_session::RelaySession::replace_job) on `relay`.
    pub(super) fn replace_job(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        job: Job,
    ) {
        if let Some(session) = self.relays.get_mut(relay) {
            session.replace_job(id, job, now.instant);
        }
    }

    pub(super) fn complete_batch(&mut self, now: Now, relay: &RelayUrl, batch: BatchId) {
        let Some(info) = self
            .relays
            .get_mut(relay)
            .and_then(|session| session.batches.remove(&batch))
        else {
            return;
        };
        let Some(pending) = self
            .relays
            .get_mut(relay)
            .and_then(|session| session.pending.remove_batch(batch))
        else {
            return;
        };
        debug!(%relay, %batch, purpose = ?info.purpose, "batch confirmed");
        self.stats.batches_confirmed += 1;
        if let Some(session) = self.relays.get_mut(relay) {
            session.work_confirmed();
        }
        let Some(state) = self.relays.state_mut(relay) else {
            return;
        };
        match info.purpose {
            Purpose::Items => state.confirm(&pending.items, self.repos.ids()),
            Purpose::Layer1 => state.announcements_synced = true,
            Purpose::CatchUp | Purpose::Gap => {}
            Purpose::Poll => {
                let next_poll = now.instant + self.config.uncovered_poll_interval;
                if let Some(session) = self.relays.connected_mut(relay) {
                    if let Some(conn) = session.conn.as_mut() {
                        conn.poll_from = Some(info.started_unix);
                    }
                    session.timers.set(RelayTimer::Poll, next_poll);
                }
            }
        }
    }

    /// Fails a batch: closes its subscriptions, drops its queued jobs and
    /// schedules its work to be planned again.
    pub(super) fn fail_batch(&mut self, now: Now, relay: &RelayUrl, batch: BatchId, reason: &str) {
        let Some(closing) = self
            .relays
            .get_mut(relay)
            .and_then(|session| session.fail_batch(batch, now, reason, &self.config))
        else {
            return;
        };
        warn!(%relay, %batch, reason, "batch failed; its items will be planned again");
        self.stats.batches_failed += 1;
        for (id, sub) in closing {
            self.send_close(relay, id, &sub);
        }
    }

    /// Tells the relay a slot is no longer wanted.
    pub(super) fn send_close(&mut self, relay: &RelayUrl, id: SubscriptionId, sub: &Sub) {
        match sub {
            Sub::Negentropy { session: None, .. } => {}
            Sub::Negentropy { .. } => self.emit(Command::NegClose {
                relay: relay.clone(),
                id,
            }),
            _ => self.emit(Command::Unsubscribe {
                relay: relay.clone(),
                id,
            }),
        }
    }
}
