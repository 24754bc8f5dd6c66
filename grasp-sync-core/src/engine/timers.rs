//! Timeouts and delayed work: batches without progress, silent relays,
//! unanswered NEG-OPENs, and the retries whose delay is over.

use nostr::prelude::{RelayUrl, SubscriptionId};
use tracing::debug;

use super::runtime::{Job, Sub};
use super::timer_table::RelayTimer;
use super::Command;
use super::SyncEngine;
use crate::clock::Now;
use crate::model::BatchId;

impl SyncEngine {
    /// Closes every historic REQ its relay dropped
    /// ([`RelaySession::stalled_reqs`](super::relay_session::RelaySession::stalled_reqs)) and asks again from where it was
    /// ([`PaginationState::resume_interrupted`]; each filter of a packed
    /// REQ from its current page), counted in
    /// [`EngineStats::reqs_resumed`](super::EngineStats::reqs_resumed).
    /// A batch whose REQs were resumed
    /// [`EngineConfig::req_resume_attempts`](super::EngineConfig::req_resume_attempts)
    /// times without hearing anything since fails.
    ///
    /// [`PaginationState::resume_interrupted`]: crate::pagination::PaginationState::resume_interrupted
    fn resume_stalled_reqs(&mut self, now: Now) {
        let stalled: Vec<(RelayUrl, SubscriptionId)> = self
            .relays
            .iter()
            .flat_map(|(relay, session)| {
                session
                    .stalled_reqs(now.instant, &self.config)
                    .into_iter()
                    .map(move |id| (relay.clone(), id))
            })
            .collect();
        for (relay, id) in stalled {
            self.resume_req(now, &relay, &id);
        }
    }

    /// Resumes the stalled REQ `id` on `relay`, or fails its batch once
    /// resuming has not helped often enough.
    fn resume_req(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(sub) = self.relays.conn(relay).and_then(|conn| conn.subs.get(id)) else {
            return;
        };
        let Some(batch) = sub.batch() else {
            return;
        };
        let mut jobs: Vec<Job> = match sub {
            Sub::Req { paging, .. } => vec![Job::Page(Box::new(paging.resume_interrupted()))],
            Sub::Poll { pages, .. } => pages
                .iter()
                .map(|page| {
                    let mut page = page.clone();
                    page.restart_page();
                    Job::Page(Box::new(page))
                })
                .collect(),
            _ => return,
        };
        let attempts = self.config.req_resume_attempts;
        let Some(info) = self.relays.batch_mut(relay, batch) else {
            // No batch to resume for (cannot happen: a batch ends with its
            // subscriptions): close it rather than wake for it forever.
            if let Some(sub) = self
                .relays
                .conn_mut(relay)
                .and_then(|conn| conn.subs.shift_remove(id))
            {
                self.send_close(relay, id.clone(), &sub);
            }
            return;
        };
        if info.req_resumes >= attempts {
            self.fail_batch(now, relay, batch, "a REQ resumed without an answer");
            return;
        }
        info.req_resumes += 1;
        self.stats.reqs_resumed += 1;
        debug!(%relay, %id, %batch, "REQ dropped by the relay without EOSE; resuming it where it was");
        self.emit(Command::Unsubscribe {
            relay: relay.clone(),
            id: id.clone(),
        });
        let first = jobs.remove(0);
        self.replace_job(now, relay, id, first);
        if !jobs.is_empty() {
            self.add_jobs(relay, batch, jobs);
        }
    }

    /// Resumes REQs the relay dropped ([`SyncEngine::resume_stalled_reqs`]),
    /// fails batches without progress
    /// ([`RelaySession::stalled_batches`](super::relay_session::RelaySession::stalled_batches)),
    /// reconnects relays silent for the batch timeout
    /// ([`RelaySession::is_silent`](super::relay_session::RelaySession::is_silent),
    /// [`RelaySession::live_unanswered`](super::relay_session::RelaySession::live_unanswered)),
    /// and treats unanswered NEG-OPENs as refusals
    /// ([`RelaySession::negentropy_unanswered`](super::relay_session::RelaySession::negentropy_unanswered)).
    pub(super) fn expire_batches(&mut self, now: Now) {
        // First: a resumed REQ is progress of its batch.
        self.resume_stalled_reqs(now);
        let stalled: Vec<(RelayUrl, BatchId)> = self
            .relays
            .iter()
            .flat_map(|(relay, session)| {
                session
                    .stalled_batches(now.instant, &self.config)
                    .into_iter()
                    .map(move |batch| (relay.clone(), batch))
            })
            .collect();
        for (relay, batch) in stalled {
            let silent = self
                .relays
                .get(&relay)
                .is_some_and(|session| session.is_silent(now.instant, &self.config));
            if silent {
                self.drop_silent_connection(now, &relay);
            } else {
                self.fail_batch(now, &relay, batch, "no progress before the batch timeout");
            }
        }
        let unanswered_live: Vec<RelayUrl> = self
            .relays
            .iter()
            .filter(|(_, session)| session.live_unanswered(now.instant, &self.config))
            .map(|(relay, _)| relay.clone())
            .collect();
        for relay in unanswered_live {
            self.drop_silent_connection(now, &relay);
        }
        let silent: Vec<(RelayUrl, SubscriptionId)> = self
            .relays
            .iter()
            .flat_map(|(relay, session)| {
                session
                    .negentropy_unanswered(now.instant, &self.config)
                    .into_iter()
                    .map(move |id| (relay.clone(), id))
            })
            .collect();
        for (relay, id) in silent {
            self.negentropy_failed(now, &relay, &id, super::nip77::NegFailure::Unanswered);
        }
    }

    /// Re-plans failed items, retries Layer 1, rebuilds refused live
    /// subscriptions, when their delays are over.
    pub(super) fn run_retries(&mut self, now: Now) {
        let relays: Vec<RelayUrl> = self.relays.urls().cloned().collect();
        for relay in relays {
            let known = self.knowledge(&relay);
            let replan = known.timers.fire(RelayTimer::Replan, now.instant);
            let layer1 = known.timers.fire(RelayTimer::Layer1Retry, now.instant);
            let live = known.timers.fire(RelayTimer::RebuildLive, now.instant);
            if !self.relays.is_connected(&relay) {
                continue;
            }
            if layer1 {
                self.start_layer1(now, &relay, None);
            }
            if live {
                self.rebuild_live(now, &relay, &Default::default());
            }
            if replan {
                self.plan_relay(now, &relay);
            }
        }
    }
}
