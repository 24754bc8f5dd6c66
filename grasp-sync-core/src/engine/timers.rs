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
    /// ([`SyncEngine::req_stalls_at`]) and asks again from where it was
    /// ([`PaginationState::resume_interrupted`]; each filter of a packed
    /// REQ from its current page), counted in
    /// [`EngineStats::reqs_resumed`](super::EngineStats::reqs_resumed).
    /// A batch whose REQs were resumed
    /// [`EngineConfig::req_resume_attempts`](super::EngineConfig::req_resume_attempts)
    /// times without hearing anything since fails.
    ///
    /// [`PaginationState::resume_interrupted`]: crate::pagination::PaginationState::resume_interrupted
    fn resume_stalled_reqs(&mut self, now: Now) {
        let this = &*self;
        let stalled: Vec<(RelayUrl, SubscriptionId)> = this
            .relays
            .connections()
            .flat_map(|(relay, conn)| {
                conn.subs.iter().filter_map(move |(id, sub)| {
                    let at = sub
                        .watch()
                        .and_then(|watch| conn.req_stalls_at(watch, &this.config))?;
                    (at <= now.instant).then(|| (relay.clone(), id.clone()))
                })
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
    /// fails batches without progress ([`SyncEngine::batch_stalls_at`]),
    /// reconnects relays silent for the batch timeout, and treats unanswered
    /// NEG-OPENs as refusals.
    pub(super) fn expire_batches(&mut self, now: Now) {
        // First: a resumed REQ is progress of its batch.
        self.resume_stalled_reqs(now);
        let timeout = self.config.batch_timeout;
        let stalled: Vec<(RelayUrl, BatchId)> = self
            .relays
            .iter()
            .flat_map(|(relay, session)| {
                session
                    .batches
                    .iter()
                    .filter(|(_, info)| session.batch_stalls_at(info, &self.config) <= now.instant)
                    .filter(|(batch, _)| session.has_running_job(**batch))
                    .map(move |(batch, _)| (relay.clone(), *batch))
            })
            .collect();
        for (relay, batch) in stalled {
            let silent = self
                .relays
                .conn(&relay)
                .is_some_and(|conn| conn.last_heard + timeout <= now.instant);
            if silent {
                self.drop_silent_connection(now, &relay);
            } else {
                self.fail_batch(now, &relay, batch, "no progress before the batch timeout");
            }
        }
        // A relay that sent nothing at all (no frame, no pong) for the
        // timeout while a live subscription has not been answered: a
        // half-open socket. A driver that pings keeps a relay that answers
        // from ever getting here, EOSE or not.
        let unanswered_live: Vec<RelayUrl> = self
            .relays
            .connections()
            .filter(|(_, conn)| conn.last_heard + timeout <= now.instant)
            .filter(|(_, conn)| {
                conn.subs.values().any(|sub| {
                    matches!(sub, Sub::Live { answered: false, opened_at, .. }
                        if *opened_at + timeout <= now.instant)
                })
            })
            .map(|(relay, _)| relay.clone())
            .collect();
        for relay in unanswered_live {
            self.drop_silent_connection(now, &relay);
        }
        let negentropy_timeout = self.config.negentropy_timeout;
        let silent: Vec<(RelayUrl, SubscriptionId)> = self
            .relays
            .connections()
            .flat_map(|(relay, conn)| {
                conn.subs.iter().filter_map(move |(id, sub)| match sub {
                    Sub::Negentropy {
                        session: Some(_),
                        answered: false,
                        opened_at,
                        ..
                    } if *opened_at + negentropy_timeout <= now.instant => {
                        Some((relay.clone(), id.clone()))
                    }
                    _ => None,
                })
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
