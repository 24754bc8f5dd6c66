//! NIP-77 reconciliation on one relay: what the session keeps for it across
//! connections ([`Nip77`]: the events the relay sent that name another
//! event, the local side of a [`Job::NegentropySent`] session), the
//! decisions of its own (the caps of a session, the fetch jobs for what a
//! round found missing, whether a failed session is closed), and the
//! session's NIP-77 handlers: opening a session from our items, its rounds
//! (NEG-MSG, NEG-ERR), and the one place a failed session is decided.

use nostr::prelude::{Event, EventId, Filter, SubscriptionId, Timestamp};
use tracing::{debug, warn};

use super::super::config::EngineConfig;
use super::super::runtime::{Job, NegMsgOutcome, Sub};
use super::super::sent_replies::SentReplies;
use super::super::session::{NegSession, SessionCaps, SessionError};
use super::super::session_events::Noted;
use super::super::Command;
use super::{Ctx, RelaySession};
use crate::classify::classify;
use crate::clock::Now;
use crate::model::BatchId;

/// What a relay's session keeps for NIP-77 across connections.
#[derive(Debug, Default)]
pub(crate) struct Nip77 {
    /// Events the relay sent that name an event (`e`, `E`, `q`) and were
    /// handed to the store (at most
    /// [`Caps::sent_replies_per_relay`](super::super::Caps::sent_replies_per_relay)),
    /// created with the first.
    sent_replies: Option<SentReplies>,
}

impl Nip77 {
    /// Remembers `event`, which names another event, as it is handed to
    /// the store, in a memory of `capacity` (none is kept at 0).
    pub(crate) fn note_sent_reply(&mut self, capacity: usize, event: &Event) {
        if capacity == 0 {
            return;
        }
        self.sent_replies
            .get_or_insert_with(|| SentReplies::new(capacity))
            .note(event);
    }

    /// The remembered events matching `filter` (none if the memory cannot
    /// answer it, [`SentReplies::items_matching`]).
    pub(crate) fn sent_items(&self, filter: &Filter) -> Vec<(EventId, Timestamp)> {
        self.sent_replies
            .as_ref()
            .and_then(|sent| sent.items_matching(filter))
            .unwrap_or_default()
    }

    /// The caps a session is held to.
    pub(crate) fn session_caps(config: &EngineConfig) -> SessionCaps {
        SessionCaps {
            max_rounds: config.caps.max_negentropy_rounds,
            max_need: config.caps.max_negentropy_need,
        }
    }

    /// Fetch jobs for ids a round found missing (`need`), restricted to the
    /// reconciled `filter` so a relay cannot slip other events in: its ids,
    /// limit and time bounds dropped, in chunks of at most `fetch_chunk`
    /// ids and as many as a frame of `budget` bytes holds (at least one).
    pub(crate) fn fetch_jobs(
        filter: &Filter,
        need: &[EventId],
        budget: usize,
        fetch_chunk: usize,
        fruitless: u32,
    ) -> Vec<Job> {
        let mut base = filter.clone();
        // `Filter::ids` adds to the ids already there: start afresh.
        base.ids = None;
        base.limit = None;
        base.until = None;
        base.since = None;
        let fit = super::super::frames::ids_per_fetch(budget, &base);
        need.chunks(fetch_chunk.min(fit).max(1))
            .map(|chunk| Job::Fetch {
                filter: base.clone().ids(chunk.iter().copied()),
                fruitless,
            })
            .collect()
    }
}

/// Why a negentropy session of a filter ended without reconciling it
/// ([`RelaySession::negentropy_failed`]).
#[derive(Debug)]
pub(crate) enum NegFailure<'a> {
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

impl NegFailure<'_> {
    /// `true` if a session that failed this way is closed with NEG-CLOSE:
    /// only one the relay may still hold (`opened`: its NEG-OPEN sent),
    /// and not after a CLOSED or NEG-ERR, which end it already.
    pub(crate) fn closes(&self, opened: bool) -> bool {
        match self {
            NegFailure::Refused { close, .. } => *close && opened,
            NegFailure::Unanswered | NegFailure::Round(_) => opened,
            _ => false,
        }
    }
}

/// The session's NIP-77 handlers.
impl RelaySession {
    /// The store answered with our `items` for the negentropy session `id`
    /// (the events it refused for good or holds outside what it serves
    /// count as present: not downloaded again): open it.
    pub(crate) fn on_local_items(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        mut items: Vec<(EventId, Timestamp)>,
    ) {
        if let Some(filter) = self.negentropy_filter(id) {
            items.extend(cx.stores.unlisted_items(filter));
        }
        self.open_negentropy(cx, now, id, &items);
    }

    /// Opens the negentropy session `id` from our `items`.
    pub(super) fn open_negentropy(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        items: &[(EventId, Timestamp)],
    ) {
        let Some((filter, sent)) = self
            .link
            .conn()
            .and_then(|conn| conn.sub(id))
            .and_then(Sub::negentropy_waiting)
        else {
            return;
        };
        let (filter, sent) = (filter.clone(), sent);
        if !self.rate_allows(now.instant, cx.config) {
            // The store answered during a rate-limit cooldown: wait for it.
            self.replace_job(id, Sub::negentropy_job(filter, sent), now.instant);
            return;
        }
        // `None` cannot happen (checked when the job started), but the
        // budget may have shrunk since.
        let Some(frame_size_limit) = self.learned.negentropy_frame_limit(&filter, cx.config) else {
            return self.negentropy_failed(cx, now, id, NegFailure::FrameTooSmall);
        };
        let caps = Nip77::session_caps(cx.config);
        let (started, initial_message) = match NegSession::start(items, frame_size_limit, caps) {
            Ok(started) => started,
            Err(error) => {
                return self.negentropy_failed(cx, now, id, NegFailure::CannotStart(error))
            }
        };
        let Some(sub) = self.link.conn_mut().and_then(|conn| conn.sub_mut(id)) else {
            return;
        };
        sub.negentropy_started(started, now.instant);
        let relay = cx.relay.clone();
        self.emit(
            cx,
            Command::NegOpen {
                relay,
                id: id.clone(),
                filter,
                initial_message,
            },
        );
    }

    /// The local side of a [`Job::NegentropySent`] session of `batch`: the
    /// events the relay sent this sync that match `filter` and were handed
    /// to the store (each stored, refused for good, or still on its way —
    /// then `batch` waits for its store answer, so it confirms only what is
    /// stored), plus the events the store refused for good.
    pub(super) fn sent_items(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        batch: BatchId,
        filter: &Filter,
    ) -> Vec<(EventId, Timestamp)> {
        let mut items = self.nip77.sent_items(filter);
        for (id, _) in &items {
            self.wait_for_store(cx, now, batch, id);
        }
        items.extend(cx.stores.unlisted_items(filter));
        items
    }

    /// Remembers an event the relay sent that names another event, as it is
    /// handed to the store ([`RelaySession::sent_items`]).
    pub(crate) fn note_sent_reply(&mut self, config: &EngineConfig, event: &nostr::prelude::Event) {
        self.nip77
            .note_sent_reply(config.caps.sent_replies_per_relay, event);
    }

    /// `true` if the replies of root events the store just took as new are
    /// reconciled on the relay against what it sent this sync
    /// ([`Job::NegentropySent`]) rather than fetched by one REQ: the relay
    /// does NIP-77 and the engine remembers what relays send.
    pub(super) fn reconciles_fresh_roots(&self, config: &EngineConfig) -> bool {
        self.nip77_usable(config) && config.caps.sent_replies_per_relay > 0
    }

    /// A negentropy session of a filter ended without reconciling it: the
    /// one place that decides what follows. The filter is synced by REQ;
    /// a refusal in any form (NEG-ERR, a NOTICE, CLOSED on the session id,
    /// silence) or endless rounds teach that the relay does not do NIP-77,
    /// so later filters go by REQ from the start
    /// ([`RelaySession::sync_method`]); every other failure is about this
    /// filter only.
    pub(crate) fn negentropy_failed(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        failure: NegFailure<'_>,
    ) {
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        let Some(filter) = sub.negentropy_filter().cloned() else {
            return;
        };
        let close = failure.closes(sub.negentropy_opened());
        let relay = cx.relay;
        match &failure {
            NegFailure::Refused { reason, .. } => self.learn_negentropy_refused(cx, reason),
            NegFailure::Unanswered => self.learn_negentropy_refused(cx, "no answer to NEG-OPEN"),
            NegFailure::StoreCannotList(reason) => {
                warn!(%relay, reason, "store could not list local items; syncing the filter by REQ");
                cx.events.push(Noted::LocalItemsFailed);
            }
            NegFailure::FrameTooSmall => {}
            NegFailure::CannotStart(error) => {
                warn!(%relay, %error, "cannot start negentropy; using REQ");
            }
            NegFailure::Round(error) if error.is_cap() => {
                cx.events.push(Noted::NegentropySessionCut);
                warn!(%relay, %error, "negentropy session cut off; using REQ for this filter");
                self.last_error = Some(error.to_string().into());
                // A relay that keeps a session going is not reconciling.
                if matches!(error, SessionError::TooManyRounds { .. }) {
                    self.learned.refuse_negentropy();
                }
            }
            NegFailure::Round(error) => {
                warn!(%relay, %error, "bad negentropy message; using REQ for this filter");
            }
        }
        if close {
            let relay = cx.relay.clone();
            self.emit(
                cx,
                Command::NegClose {
                    relay,
                    id: id.clone(),
                },
            );
        }
        self.replace_job(id, Job::Req(filter), now.instant);
    }

    /// Remembers that the relay refused NIP-77, warning once.
    fn learn_negentropy_refused(&mut self, cx: &mut Ctx<'_>, reason: &str) {
        if self.learned.refuse_negentropy() {
            cx.events.push(Noted::NegentropyRefused);
            warn!(relay = %cx.relay, reason, "relay refused NIP-77; falling back to REQ+EOSE");
            self.last_error = Some(format!("NIP-77 refused: {reason}").into());
        }
    }

    /// Fetch jobs for ids a negentropy round found missing, restricted to the
    /// reconciled filter so a relay cannot slip other events in.
    /// Chunks are as large as the configured fetch chunk and the relay's
    /// frame budget allow.
    pub(super) fn fetch_jobs(
        &self,
        config: &EngineConfig,
        filter: &Filter,
        need: &[EventId],
        fruitless: u32,
    ) -> Vec<Job> {
        let budget = self.learned.frame_budget(config);
        Nip77::fetch_jobs(filter, need, budget, config.limits.fetch_chunk, fruitless)
    }

    /// A NEG-MSG: the next round, or, when reconciliation is done, the
    /// missing ids fetched (each once per batch, none stored lately or on
    /// its way to the store already).
    pub(super) fn on_neg_msg(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        message: &str,
    ) {
        let Some(outcome) = self
            .link
            .conn_mut()
            .and_then(|conn| conn.sub_mut(id))
            .and_then(|sub| sub.on_neg_msg(message))
        else {
            return;
        };
        match outcome {
            NegMsgOutcome::Continue {
                batch,
                message: next,
            } => {
                self.batches.progress(batch, now.instant);
                let relay = cx.relay.clone();
                self.emit(
                    cx,
                    Command::NegMsg {
                        relay,
                        id: id.clone(),
                        message: next,
                    },
                );
            }
            NegMsgOutcome::Done {
                batch,
                filter,
                need,
            } => {
                debug!(relay = %cx.relay, missing = need.len(), "negentropy round finished");
                cx.events.push(Noted::NegentropyRound);
                let relay = cx.relay.clone();
                self.emit(
                    cx,
                    Command::NegClose {
                        relay,
                        id: id.clone(),
                    },
                );
                // Another filter of the batch may have found the same ids
                // missing (a reply tagging its root with both `e` and `E`):
                // each id is fetched once per batch.
                let need = self.batches.not_fetching_yet(batch, need);
                // Another subscription (a fresh root's REQ, another batch)
                // brought some already.
                let need = self.still_to_fetch(cx, now, batch, need);
                let jobs = self.fetch_jobs(cx.config, &filter, &need, 0);
                self.add_jobs(batch, jobs);
                self.finish_job(cx, now, id);
            }
            NegMsgOutcome::Failed(error) => {
                self.negentropy_failed(cx, now, id, NegFailure::Round(error))
            }
        }
    }

    /// A NEG-ERR: a refused slot is retried later; anything else is a
    /// refusal of NIP-77.
    pub(super) fn on_neg_err(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        message: &str,
    ) {
        let classified = classify(message);
        let Some(job) = self
            .link
            .conn()
            .and_then(|conn| conn.sub(id))
            .filter(|sub| sub.negentropy_filter().is_some())
            .and_then(Sub::job)
        else {
            return;
        };
        if self.heed_refusal(cx, now, &classified) {
            self.replace_job(id, job, now.instant);
        } else {
            let failure = NegFailure::Refused {
                reason: message,
                close: false,
            };
            self.negentropy_failed(cx, now, id, failure);
        }
    }

    /// Of the ids a negentropy round of `batch` found missing, those to
    /// fetch: not one stored lately (the store has it), nor one on its way
    /// to the store already (`batch` then waits for that answer, so it
    /// confirms only once the event is stored). Counted in
    /// `EngineStats::fetches_saved`.
    fn still_to_fetch(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        batch: BatchId,
        need: Vec<EventId>,
    ) -> Vec<EventId> {
        let mut fetch = Vec::with_capacity(need.len());
        for id in need {
            if cx.stores.stored_lately(&id) || self.wait_for_store(cx, now, batch, &id) {
                cx.events.push(Noted::FetchSaved);
            } else {
                fetch.push(id);
            }
        }
        fetch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::event::FinalizeEvent;
    use nostr::prelude::{EventBuilder, Keys, Kind, SingleLetterTag, Tag};

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    #[test]
    fn fetch_jobs_ask_for_the_missing_ids_within_the_filter_in_chunks() {
        let filter = Filter::new()
            .kind(Kind::Custom(1111))
            .id(id(9))
            .limit(10)
            .since(Timestamp::from_secs(5))
            .until(Timestamp::from_secs(50));
        let need: Vec<EventId> = (1..=5).map(id).collect();
        let jobs = Nip77::fetch_jobs(&filter, &need, 64 * 1024, 2, 3);
        let asked: Vec<Vec<EventId>> = jobs
            .iter()
            .map(|job| match job {
                Job::Fetch { filter, fruitless } => {
                    assert_eq!(*fruitless, 3);
                    assert_eq!(filter.kinds, Filter::new().kind(Kind::Custom(1111)).kinds);
                    assert!(filter.limit.is_none() && filter.since.is_none());
                    assert!(filter.until.is_none());
                    let mut ids: Vec<EventId> = filter.ids.iter().flatten().copied().collect();
                    ids.sort();
                    ids
                }
                other => panic!("not a fetch: {other:?}"),
            })
            .collect();
        assert_eq!(
            asked,
            vec![vec![id(1), id(2)], vec![id(3), id(4)], vec![id(5)]]
        );
        assert_eq!(Nip77::fetch_jobs(&filter, &need, 64 * 1024, 0, 0).len(), 5);
        let tiny = Nip77::fetch_jobs(&filter, &need, 0, 100, 0);
        assert_eq!(
            tiny.len(),
            5,
            "a frame too small still fetches one id at a time"
        );
    }

    #[test]
    fn only_a_session_the_relay_may_still_hold_is_closed() {
        let refused = |close| NegFailure::Refused {
            reason: "no",
            close,
        };
        let round = NegFailure::Round(SessionError::TooManyRounds { rounds: 1 });
        for opened in [false, true] {
            assert_eq!(refused(true).closes(opened), opened);
            assert!(!refused(false).closes(opened));
            assert_eq!(NegFailure::Unanswered.closes(opened), opened);
            assert_eq!(round.closes(opened), opened);
            assert!(!NegFailure::FrameTooSmall.closes(opened));
            assert!(!NegFailure::StoreCannotList("down").closes(opened));
        }
    }

    #[test]
    fn sent_replies_are_remembered_only_with_a_capacity() {
        let root = id(1).to_hex();
        let reply = EventBuilder::new(Kind::Custom(1111), "")
            .tags([Tag::parse(["e", root.as_str()]).expect("tag")])
            .finalize(&Keys::generate())
            .expect("signed");
        let filter = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_E, root);
        let mut none = Nip77::default();
        none.note_sent_reply(0, &reply);
        assert!(none.sent_items(&filter).is_empty());
        let mut kept = Nip77::default();
        kept.note_sent_reply(10, &reply);
        assert_eq!(kept.sent_items(&filter), vec![(reply.id, reply.created_at)]);
        let other = Filter::new().kind(Kind::Custom(1111));
        assert!(
            kept.sent_items(&other).is_empty(),
            "a filter it cannot answer"
        );
    }
}
