//! NIP-77: opening a reconciliation with the store's items, its rounds,
//! fetching what it found missing, and a relay's refusal of it.

use super::classify::classify;

use nostr::prelude::{EventId, Filter, RelayUrl, SubscriptionId, Timestamp};
use tracing::{debug, warn};

use super::runtime::{Job, Sub};
use super::session::{NegSession, SessionCaps, SessionError, Step};
use super::{Command, SyncEngine};
use crate::clock::Now;

impl SyncEngine {
    /// The store answered with our items for a negentropy session: open it.
    pub(super) fn open_negentropy(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        items: &[(EventId, Timestamp)],
    ) {
        let Some(Sub::Negentropy {
            filter,
            session,
            sent,
            ..
        }) = self.relays.conn(relay).and_then(|conn| conn.subs.get(id))
        else {
            return;
        };
        if session.is_some() {
            return;
        }
        let (filter, sent) = (filter.clone(), *sent);
        if !self.relays.rate_allows(relay, now.instant, &self.config) {
            // The store answered during a rate-limit cooldown: wait for it.
            self.replace_job(now, relay, id, Sub::negentropy_job(filter, sent));
            return;
        }
        // `None` cannot happen (checked when the job started), but the
        // budget may have shrunk since.
        let Some(frame_size_limit) = self
            .relays
            .view(relay)
            .negentropy_frame_limit(&filter, &self.config)
        else {
            return self.negentropy_failed(now, relay, id, NegFailure::FrameTooSmall);
        };
        let Some(Sub::Negentropy {
            filter,
            session,
            opened_at,
            ..
        }) = self
            .relays
            .conn_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        let caps = SessionCaps {
            max_rounds: self.config.max_negentropy_rounds,
            max_need: self.config.max_negentropy_need,
        };
        match NegSession::start(items, frame_size_limit, caps) {
            Ok((started, initial_message)) => {
                *session = Some(started);
                *opened_at = now.instant;
                let filter = filter.clone();
                self.emit(Command::NegOpen {
                    relay: relay.clone(),
                    id: id.clone(),
                    filter,
                    initial_message,
                });
            }
            Err(error) => self.negentropy_failed(now, relay, id, NegFailure::CannotStart(error)),
        }
    }

    /// The local side of a [`Job::NegentropySent`] session of `batch`: the
    /// events `relay` sent this sync that match `filter` and were handed to
    /// the store (each stored, refused for good, or still on its way — then
    /// `batch` waits for its store answer, so it confirms only what is
    /// stored), plus the events the store refused for good.
    pub(super) fn sent_items(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        batch: crate::model::BatchId,
        filter: &Filter,
    ) -> Vec<(EventId, Timestamp)> {
        let mut items = self
            .relays
            .get(relay)
            .and_then(|known| known.sent_replies.as_ref())
            .and_then(|sent| sent.items_matching(filter))
            .unwrap_or_default();
        for (id, _) in &items {
            self.wait_for_store(now, relay, batch, id);
        }
        items.extend(self.stores.refused_items(filter));
        items
    }

    /// Remembers an event `relay` sent that names another event, as it is
    /// handed to the store ([`SyncEngine::sent_items`]).
    pub(super) fn note_sent_reply(&mut self, relay: &RelayUrl, event: &nostr::prelude::Event) {
        let capacity = self.config.sent_replies_per_relay;
        if capacity == 0 {
            return;
        }
        self.knowledge(relay)
            .sent_replies
            .get_or_insert_with(|| super::sent_replies::SentReplies::new(capacity))
            .note(event);
    }

    /// `true` if the replies of root events the store just took as new are
    /// reconciled on `relay` against what it sent this sync
    /// ([`Job::NegentropySent`]) rather than fetched by one REQ: the relay
    /// does NIP-77 and the engine remembers what relays send.
    pub(super) fn reconciles_fresh_roots(&self, relay: &RelayUrl) -> bool {
        let refused = self
            .relays
            .get(relay)
            .is_some_and(|known| known.negentropy_refused);
        !refused && self.config.sent_replies_per_relay > 0
    }

    /// A negentropy session of a filter ended without reconciling it: the
    /// one place that decides what follows. The filter is synced by REQ;
    /// a refusal in any form (NEG-ERR, a NOTICE, CLOSED on the session id,
    /// silence) or endless rounds teach that the relay does not do NIP-77,
    /// so later filters go by REQ from the start
    /// ([`RelaySession::sync_method`](super::relay_session::RelaySession::sync_method));
    /// every other failure is about this filter only.
    pub(super) fn negentropy_failed(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        failure: NegFailure<'_>,
    ) {
        let Some(Sub::Negentropy {
            filter, session, ..
        }) = self.relays.conn(relay).and_then(|conn| conn.subs.get(id))
        else {
            return;
        };
        let filter = filter.clone();
        let opened = session.is_some();
        let close = match &failure {
            NegFailure::Refused { close, .. } => *close && opened,
            NegFailure::Unanswered | NegFailure::Round(_) => opened,
            _ => false,
        };
        match &failure {
            NegFailure::Refused { reason, .. } => self.learn_negentropy_refused(relay, reason),
            NegFailure::Unanswered => self.learn_negentropy_refused(relay, "no answer to NEG-OPEN"),
            NegFailure::StoreCannotList(reason) => {
                tracing::warn!(%relay, reason, "store could not list local items; syncing the filter by REQ");
                self.stats.local_items_failures += 1;
            }
            NegFailure::FrameTooSmall => {}
            NegFailure::CannotStart(error) => {
                warn!(%relay, %error, "cannot start negentropy; using REQ");
            }
            NegFailure::Round(error) if error.is_cap() => {
                self.stats.negentropy_sessions_cut += 1;
                warn!(%relay, %error, "negentropy session cut off; using REQ for this filter");
                self.relays.note_error(relay, error.to_string());
                // A relay that keeps a session going is not reconciling.
                if matches!(error, SessionError::TooManyRounds { .. }) {
                    self.knowledge(relay).negentropy_refused = true;
                }
            }
            NegFailure::Round(error) => {
                warn!(%relay, %error, "bad negentropy message; using REQ for this filter");
            }
        }
        if close {
            self.emit(Command::NegClose {
                relay: relay.clone(),
                id: id.clone(),
            });
        }
        self.replace_job(now, relay, id, Job::Req(filter));
    }

    /// Remembers that `relay` refused NIP-77, warning once.
    fn learn_negentropy_refused(&mut self, relay: &RelayUrl, reason: &str) {
        let known = self.knowledge(relay);
        if !known.negentropy_refused {
            known.negentropy_refused = true;
            self.stats.negentropy_refusals += 1;
            warn!(%relay, reason, "relay refused NIP-77; falling back to REQ+EOSE");
            self.relays
                .note_error(relay, format!("NIP-77 refused: {reason}"));
        }
    }

    /// Fetch jobs for ids a negentropy round found missing, restricted to the
    /// reconciled filter so a relay cannot slip other events in.
    /// Chunks are as large as the configured fetch chunk and the relay's
    /// frame budget allow.
    pub(super) fn fetch_jobs(
        &self,
        relay: &RelayUrl,
        filter: &Filter,
        need: &[EventId],
        fruitless: u32,
    ) -> Vec<Job> {
        let mut base = filter.clone();
        // `Filter::ids` adds to the ids already there: start afresh.
        base.ids = None;
        base.limit = None;
        base.until = None;
        base.since = None;
        let fit =
            super::frames::ids_per_fetch(self.relays.view(relay).frame_budget(&self.config), &base);
        need.chunks(self.config.fetch_chunk.min(fit).max(1))
            .map(|chunk| Job::Fetch {
                filter: base.clone().ids(chunk.iter().copied()),
                fruitless,
            })
            .collect()
    }

    pub(super) fn on_neg_msg(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        message: &str,
    ) {
        let Some(Sub::Negentropy {
            batch,
            filter,
            session: Some(session),
            answered,
            ..
        }) = self
            .relays
            .conn_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        *answered = true;
        let batch = *batch;
        let step = session.step(message);
        match step {
            Ok(Step::Continue(next)) => {
                self.progress(now, relay, batch);
                self.emit(Command::NegMsg {
                    relay: relay.clone(),
                    id: id.clone(),
                    message: next,
                });
            }
            Ok(Step::Done) => {
                let need = std::mem::take(&mut session.need);
                let filter = filter.clone();
                debug!(%relay, missing = need.len(), "negentropy round finished");
                self.stats.negentropy_rounds += 1;
                self.emit(Command::NegClose {
                    relay: relay.clone(),
                    id: id.clone(),
                });
                // Another filter of the batch may have found the same ids
                // missing (a reply tagging its root with both `e` and `E`):
                // each id is fetched once per batch.
                let need: Vec<_> = match self.relays.batch_mut(relay, batch) {
                    Some(info) => need
                        .into_iter()
                        .filter(|id| info.fetching.insert(*id))
                        .collect(),
                    None => need,
                };
                // Another subscription (a fresh root's REQ, another batch)
                // brought some already.
                let need = self.still_to_fetch(now, relay, batch, need);
                let jobs = self.fetch_jobs(relay, &filter, &need, 0);
                self.add_jobs(relay, batch, jobs);
                self.finish_job(now, relay, id);
            }
            Err(error) => self.negentropy_failed(now, relay, id, NegFailure::Round(error)),
        }
    }

    pub(super) fn on_neg_err(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        message: &str,
    ) {
        let classified = classify(message);
        let Some(Sub::Negentropy { filter, sent, .. }) =
            self.relays.conn(relay).and_then(|conn| conn.subs.get(id))
        else {
            return;
        };
        let (filter, sent) = (filter.clone(), *sent);
        if self.learn_from_refusal(now, relay, &classified) {
            self.replace_job(now, relay, id, Sub::negentropy_job(filter, sent));
        } else {
            let failure = NegFailure::Refused {
                reason: message,
                close: false,
            };
            self.negentropy_failed(now, relay, id, failure);
        }
    }
}

/// Why a negentropy session of a filter ended without reconciling it
/// ([`SyncEngine::negentropy_failed`]).
#[derive(Debug)]
pub(super) enum NegFailure<'a> {
    /// The relay refused NIP-77: a NEG-ERR, a NOTICE, CLOSED on the session
    /// id. `close`: send NEG-CLOSE if the session was opened (a NOTICE
    /// names no session; CLOSED and NEG-ERR end it already).
    Refused {
        /// What the relay said.
        reason: &'a str,
        /// Whether the relay may still hold the session.
        close: bool,
    },
    /// No answer to NEG-OPEN within the negentropy timeout.
    Unanswered,
    /// The store could not list its items for the filter (never reconcile
    /// from an empty set: that downloads everything as if we held nothing).
    StoreCannotList(&'a str),
    /// The relay's frame budget shrank below a NEG frame for the filter.
    FrameTooSmall,
    /// The session could not start from our items.
    CannotStart(SessionError),
    /// A round failed: a cap was hit or the relay's message was unreadable.
    Round(SessionError),
}
