//! Timeouts and delayed work: batches without progress, silent relays,
//! unanswered NEG-OPENs, and the retries whose delay is over.

use nostr::prelude::{RelayUrl, SubscriptionId};
use tracing::debug;

use super::runtime::{BatchInfo, Job, RelayConn, ReqWatch, Sub};
use super::timer_table::RelayTimer;
use super::Command;
use super::SyncEngine;
use crate::clock::{Instant, Now};
use crate::model::BatchId;

impl SyncEngine {
    /// When a batch with a running job counts as stalled: once it has had
    /// no progress of its own (a job started, an event, an EOSE, a NEG-MSG)
    /// for the batch timeout **and** its relay has sent nothing for any of
    /// our historic subscriptions for the batch timeout either — a relay
    /// answering our REQs one after another, or slowed by a loaded machine,
    /// is still working on this one. Whatever the relay sends, a batch with
    /// no progress of its own for [`EngineConfig::batch_stall_limit`]
    /// stalls (a subscription the relay dropped silently while it streams
    /// the others).
    ///
    /// [`EngineConfig::batch_stall_limit`]: super::EngineConfig::batch_stall_limit
    pub(super) fn batch_stalls_at(&self, info: &BatchInfo) -> Instant {
        let timeout = self.config.batch_timeout;
        let own = info.last_progress + timeout;
        let hard = info.last_progress + self.config.batch_stall_limit.max(timeout);
        let relay_idle = self
            .relays
            .conn(&info.relay)
            .map_or(own, |conn| conn.last_historic_data + timeout);
        own.max(relay_idle.min(hard))
    }

    /// When a historic REQ (a [`Sub::Req`], a [`Sub::Poll`]) counts as
    /// dropped by its relay — nostr-rs-relay aborts a query without EOSE or
    /// CLOSED when a client reads slowly or a WAL checkpoint runs: once it
    /// has brought nothing (no EVENT, no EOSE) for the batch timeout while
    /// the relay still shows it is alive (a frame, a pong) and either
    /// answered a REQ sent after it (it overtook this one) or has sent
    /// nothing for any historic subscription for the batch timeout either
    /// (a relay answering our REQs one after another is still working on
    /// this one). `None` while the relay as a whole would be silent by then:
    /// it is reconnected instead ([`SyncEngine::expire_batches`]).
    pub(super) fn req_stalls_at(&self, conn: &RelayConn, watch: &ReqWatch) -> Option<Instant> {
        let timeout = self.config.batch_timeout;
        let overtaken = conn.newest_answered > watch.sent;
        let quiet_since = if overtaken {
            watch.heard_at
        } else {
            watch.heard_at.max(conn.last_historic_data)
        };
        let at = quiet_since + timeout;
        (at < conn.last_heard + timeout).then_some(at)
    }

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
                        .and_then(|watch| this.req_stalls_at(conn, watch))?;
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
        let Some(info) = self.batches.get_mut(&batch) else {
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
            .batches
            .iter()
            .filter(|(_, info)| self.batch_stalls_at(info) <= now.instant)
            .filter(|(batch, info)| self.has_running_job(&info.relay, **batch))
            .map(|(batch, info)| (info.relay.clone(), *batch))
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
