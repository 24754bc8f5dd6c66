//! Timeouts and delayed work: batches without progress, silent relays,
//! unanswered NEG-OPENs, and the retries whose delay is over.

use nostr::prelude::{RelayUrl, SubscriptionId};

use super::runtime::{BatchInfo, Sub};
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
            .conns
            .get(&info.relay)
            .map_or(own, |conn| conn.last_historic_data + timeout);
        own.max(relay_idle.min(hard))
    }

    /// Fails batches without progress ([`SyncEngine::batch_stalls_at`]),
    /// reconnects relays silent for the batch timeout, and treats unanswered
    /// NEG-OPENs as refusals.
    pub(super) fn expire_batches(&mut self, now: Now) {
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
                .conns
                .get(&relay)
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
            .conns
            .iter()
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
            .conns
            .iter()
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
            self.negentropy_refused(now, &relay, &id, "no answer to NEG-OPEN", true);
        }
    }

    /// Deadlines of batch timeouts. Part of the debug builds' reference
    /// scan.
    #[cfg(debug_assertions)]
    pub(super) fn batch_deadlines(&self) -> Vec<Option<crate::clock::Instant>> {
        let timeout = self.config.batch_timeout;
        self.batches
            .iter()
            .filter(|(batch, info)| self.has_running_job(&info.relay, **batch))
            .map(|(_, info)| Some(self.batch_stalls_at(info)))
            .chain(self.conns.values().flat_map(|conn| {
                conn.subs.values().filter_map(move |sub| match sub {
                    Sub::Live {
                        answered: false,
                        opened_at,
                        ..
                    } => Some(Some((*opened_at).max(conn.last_heard) + timeout)),
                    _ => None,
                })
            }))
            .collect()
    }

    /// Re-plans failed items, retries Layer 1, rebuilds refused live
    /// subscriptions, when their delays are over.
    pub(super) fn run_retries(&mut self, now: Now) {
        let relays: Vec<RelayUrl> = self.known.keys().cloned().collect();
        for relay in relays {
            let known = self.knowledge(&relay);
            let replan = known.replan_at.is_some_and(|at| at <= now.instant);
            let layer1 = known.layer1_retry_at.is_some_and(|at| at <= now.instant);
            let live = known.rebuild_live_at.is_some_and(|at| at <= now.instant);
            if replan {
                known.replan_at = None;
            }
            if layer1 {
                known.layer1_retry_at = None;
            }
            if live {
                known.rebuild_live_at = None;
            }
            if !self.conns.contains_key(&relay) {
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
