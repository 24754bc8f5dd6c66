//! Per-relay bookkeeping of the engine: what we learned about a relay, what
//! is open on its current connection, and the historic work waiting for a
//! free subscription slot.

use std::collections::{HashSet, VecDeque};

use indexmap::IndexSet;
use nostr::prelude::{Event, EventId, Filter, RelayUrl, SubscriptionId, Timestamp};

use super::bad_events::BadEventVerdict;
use super::config::{EngineConfig, RelayLimits};
use super::live_coverage::{LiveCoverage, LiveList, Polling};
use super::liveness::Liveness;
use super::session::{NegSession, SessionError, Step};
use super::Command;
use crate::clock::Instant;
use crate::filters::matches;
use crate::model::BatchId;
use crate::pagination::{PageOutcome, PaginationState};

mod subscriptions;
mod work_queue;

pub(crate) use subscriptions::Subscriptions;
pub(crate) use work_queue::WorkQueue;

/// Below this many events a page that repeats one second is taken for the
/// end of the results, not for a relay's page limit (no relay caps pages
/// that low), unless the relay told us its limit.
const PLAUSIBLE_PAGE_LEN: usize = 50;

/// A drop this soon after a large frame is blamed on the frame's size.
pub(crate) const FRAME_DROP_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// What a batch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Historic sync of Layer 2+3 items; confirms them.
    Items,
    /// Historic sync of Layer 1 (announcements and states).
    Layer1,
    /// Quick-reconnect catch-up of confirmed items with `since`.
    CatchUp,
    /// What was published while live coverage waited (a refused or late
    /// live subscription), with `since`.
    Gap,
    /// The periodic `since` poll of items whose live filters did not fit.
    Poll,
}

/// One unit of historic work: one filter or one chunk of ids.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Job {
    /// REQ+EOSE with `until` pagination.
    Req(Filter),
    /// A paginated REQ resumed where it stopped (refused or paused page).
    Page(Box<PaginationState>),
    /// NIP-77 reconciliation, then fetching what is missing.
    Negentropy(Filter),
    /// NIP-77 reconciliation of a fresh root event's replies against what
    /// the relay sent this sync and was handed to the store
    /// ([`RelaySession::sent_replies`]), not against a store query.
    NegentropySent(Filter),
    /// `REQ` for missing ids, restricted to the reconciled filter; tried
    /// again while it brings nothing new, up to the configured attempts.
    Fetch {
        /// The reconciled filter plus the ids.
        filter: Filter,
        /// Attempts that brought nothing new so far.
        fruitless: u32,
    },
    /// Several filters packed in one REQ (a poll, a gap catch-up, or
    /// filters that can match the same event on a relay whose page size we
    /// know); a filter that fills a page continues as a paginated
    /// [`Job::Page`].
    Poll(Vec<Filter>),
}

impl Job {
    /// The job as it starts on a relay whose REQ frames hold `room` bytes
    /// of filters and whose pages are `page_limit` events: a REQ's filter
    /// too large for the frames (a long list of repositories) is split, the
    /// other parts returned to join the batch, and it asks for a page of
    /// the limit unless it names one. Other jobs start as they are.
    pub(crate) fn fit(self, room: usize, page_limit: usize) -> (Job, Vec<Job>) {
        let Job::Req(filter) = self else {
            return (self, Vec::new());
        };
        let mut parts = super::frames::split_to_fit(filter, room);
        let mut filter = parts.remove(0);
        if filter.limit.is_none() {
            filter.limit = Some(page_limit);
        }
        (Job::Req(filter), parts.into_iter().map(Job::Req).collect())
    }

    /// The prefix of the id of the subscription that runs the job.
    pub(crate) fn sub_prefix(&self) -> &'static str {
        match self {
            Job::Req(_) | Job::Page(_) => "req",
            Job::Negentropy(_) | Job::NegentropySent(_) => "neg",
            Job::Fetch { .. } => "fetch",
            Job::Poll(_) => "poll",
        }
    }

    /// The subscription `id` that runs this job of `batch` on `relay`,
    /// opened at `now`, and how it starts ([`Opening`]); a historic REQ is
    /// numbered on `conn` ([`RelayConn::watch_request`]).
    pub(crate) fn open(
        self,
        batch: BatchId,
        relay: &RelayUrl,
        id: &SubscriptionId,
        now: Instant,
        conn: &mut RelayConn,
    ) -> (Sub, Opening) {
        let subscribe = |filters: Vec<Filter>| {
            Opening::Send(Command::Subscribe {
                relay: relay.clone(),
                id: id.clone(),
                filters,
            })
        };
        match self {
            Job::Req(filter) => {
                let first = subscribe(vec![filter.clone()]);
                let sub = Sub::Req {
                    batch,
                    paging: PaginationState::new(filter),
                    watch: conn.watch_request(now),
                };
                (sub, first)
            }
            Job::Page(paging) => {
                let first = subscribe(vec![paging.current_filter()]);
                let sub = Sub::Req {
                    batch,
                    paging: *paging,
                    watch: conn.watch_request(now),
                };
                (sub, first)
            }
            Job::Negentropy(filter) => {
                let first = Opening::Send(Command::QueryLocalItems {
                    relay: relay.clone(),
                    id: id.clone(),
                    filter: filter.clone(),
                });
                (Sub::negentropy(batch, filter, false, now), first)
            }
            Job::NegentropySent(filter) => {
                let first = Opening::FromSent(filter.clone());
                (Sub::negentropy(batch, filter, true, now), first)
            }
            Job::Fetch { filter, fruitless } => {
                let missing: HashSet<EventId> =
                    filter.ids.clone().unwrap_or_default().into_iter().collect();
                let first = subscribe(vec![filter.clone()]);
                let sub = Sub::Fetch {
                    batch,
                    filter,
                    missing,
                    fruitless,
                };
                (sub, first)
            }
            Job::Poll(filters) => {
                let first = subscribe(filters.clone());
                let pages: Vec<PaginationState> =
                    filters.iter().cloned().map(PaginationState::new).collect();
                let received = vec![Vec::new(); pages.len()];
                let sub = Sub::Poll {
                    batch,
                    filters,
                    pages,
                    received,
                    watch: conn.watch_request(now),
                };
                (sub, first)
            }
        }
    }
}

/// How a job's subscription starts ([`Job::open`]).
#[derive(Debug)]
pub(crate) enum Opening {
    /// With a command: the REQ, or the store asked for a negentropy
    /// session's local items.
    Send(Command),
    /// With nothing sent: a negentropy session of this filter whose local
    /// items are what the relay sent this sync, which the session knows
    /// (`RelaySession::sent_items`).
    FromSent(Filter),
}

/// What an EOSE means for the subscription it ends ([`Sub::on_eose`]), for
/// the session to carry out.
#[derive(Debug)]
pub(crate) enum EoseOutcome {
    /// A page of a paginated REQ ended.
    Page(PageEnded),
    /// A fetch of `batch` ended without `missing` (from `filter`): asked
    /// again (`retry`; `fruitless` attempts brought nothing so far), or, if
    /// not, reported.
    Fetched {
        batch: BatchId,
        filter: Filter,
        missing: Vec<EventId>,
        fruitless: u32,
        retry: bool,
    },
    /// A packed poll of `batch` ended: `follow_up` continues, paginated,
    /// the filters whose page may have been cut.
    Polled { batch: BatchId, follow_up: Vec<Job> },
    /// A live subscription is answered now: the relay holds it.
    LiveAnswered,
    /// Nothing to do (NIP-77 does not end with EOSE).
    Ignored,
}

/// A page of a paginated REQ of `batch` ended ([`EoseOutcome::Page`]).
#[derive(Debug)]
pub(crate) struct PageEnded {
    /// The batch of the REQ.
    pub(crate) batch: BatchId,
    /// The next page's filter; `None` when the job is done.
    pub(crate) next: Option<Filter>,
    /// Events the page brought.
    pub(crate) page_len: usize,
    /// Seconds of the page newly found full of events (some beyond the
    /// page may be missing).
    pub(crate) crowded: usize,
}

/// What a CLOSED means for the subscription it ends ([`Sub::on_closed`]),
/// for the session to carry out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClosedOutcome {
    /// The slot was refused: asked again later, from where it was.
    RetryLater,
    /// A live subscription is gone: covered again by the next rebuild.
    LiveLost,
    /// The relay refused a negentropy session: a refusal of NIP-77.
    NegentropyRefused,
    /// A historic job was refused: its batch fails.
    BatchFailed(BatchId),
}

/// What a NEG-MSG means for the negentropy session it answers
/// ([`Sub::on_neg_msg`]), for the session to carry out.
#[derive(Debug)]
pub(crate) enum NegMsgOutcome {
    /// The next round of `batch`'s reconciliation: send `message`.
    Continue { batch: BatchId, message: String },
    /// Reconciliation of `filter` for `batch` is done: `need`, the ids the
    /// relay holds and we do not, are to be fetched.
    Done {
        batch: BatchId,
        filter: Filter,
        need: Vec<EventId>,
    },
    /// The round failed: a cap was hit or the message was unreadable.
    Failed(SessionError),
}

/// A job waiting for a slot.
#[derive(Clone, Debug)]
pub(crate) struct QueuedJob {
    pub(crate) batch: BatchId,
    pub(crate) job: Job,
}

/// A subscription slot in use on the relay.
#[derive(Debug)]
pub(crate) enum Sub {
    /// A live subscription (`limit: 0`) with its filters. Until its EOSE
    /// arrives (`answered` is `false`), the relay has not shown it holds the
    /// subscription: a relay that sends nothing at all (no frame, no pong,
    /// [`SyncEngine::handle_relay_alive`](super::SyncEngine::handle_relay_alive))
    /// past the batch timeout then is reconnected, or a CLOSED lost in a
    /// stall would leave a live gap nobody sees. A relay that never EOSEs
    /// `limit: 0` (nostr-rs-relay) but answers pings is kept.
    Live {
        filters: Vec<Filter>,
        opened_at: Instant,
        answered: bool,
    },
    /// A paginated historic REQ.
    Req {
        batch: BatchId,
        paging: PaginationState,
        watch: ReqWatch,
    },
    /// A negentropy session; `session` is `None` while the store is asked
    /// for local items (the slot is reserved, nothing sent yet). `sent`:
    /// the local items are what the relay sent this sync
    /// ([`Job::NegentropySent`]), not the store's.
    Negentropy {
        batch: BatchId,
        filter: Filter,
        session: Option<NegSession>,
        answered: bool,
        opened_at: Instant,
        sent: bool,
    },
    /// A fetch of missing ids.
    Fetch {
        batch: BatchId,
        filter: Filter,
        missing: HashSet<EventId>,
        fruitless: u32,
    },
    /// Packed `since` filters, each paged on its own: the relay applies
    /// its limit per filter, so a filter whose page may have been cut
    /// continues paginated.
    Poll {
        batch: BatchId,
        filters: Vec<Filter>,
        pages: Vec<PaginationState>,
        /// Each page's events so far (id, `created_at`), duplicates
        /// included: where a filter's page ended when others' events match
        /// it too.
        received: Vec<Vec<(EventId, nostr::prelude::Timestamp)>>,
        watch: ReqWatch,
    },
}

/// When a historic REQ was last sent and last answered: a relay that
/// drops a query without EOSE or CLOSED (nostr-rs-relay on a slow client)
/// leaves it waiting (`RelayConn::req_stalls_at`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReqWatch {
    /// The connection's request number of its latest REQ frame
    /// ([`RelayConn::watch_request`]).
    pub(crate) sent: u64,
    /// When it was sent or last answered (an EVENT, an EOSE).
    pub(crate) heard_at: Instant,
}

impl Sub {
    /// The sending and answering of a historic REQ (not of live, negentropy
    /// or fetch subscriptions).
    pub(crate) fn watch(&self) -> Option<&ReqWatch> {
        match self {
            Sub::Req { watch, .. } | Sub::Poll { watch, .. } => Some(watch),
            _ => None,
        }
    }

    /// [`Sub::watch`], to update.
    pub(crate) fn watch_mut(&mut self) -> Option<&mut ReqWatch> {
        match self {
            Sub::Req { watch, .. } | Sub::Poll { watch, .. } => Some(watch),
            _ => None,
        }
    }

    /// `true` if `event` is something this subscription asked for: it
    /// matches one of its filters (a historic REQ's, where its pages are).
    /// A negentropy session asks for no event: ids it finds missing are
    /// fetched by their own subscriptions.
    pub(crate) fn asked_for(&self, event: &Event) -> bool {
        match self {
            Sub::Live { filters, .. } | Sub::Poll { filters, .. } => {
                filters.iter().any(|filter| matches(filter, event))
            }
            Sub::Req { paging, .. } => paging.matches(event),
            Sub::Fetch { filter, .. } => matches(filter, event),
            Sub::Negentropy { .. } => false,
        }
    }

    /// The command that tells the relay this slot, `id`, is no longer
    /// wanted: NEG-CLOSE for a negentropy session that was opened, nothing
    /// for one still waiting for our items (no NEG-OPEN was sent), CLOSE
    /// for every other kind.
    pub(crate) fn close_command(&self, relay: RelayUrl, id: SubscriptionId) -> Option<Command> {
        match self {
            Sub::Negentropy { session: None, .. } => None,
            Sub::Negentropy { .. } => Some(Command::NegClose { relay, id }),
            _ => Some(Command::Unsubscribe { relay, id }),
        }
    }

    /// The jobs that ask again for what a stalled historic REQ was fetching:
    /// a page resumed where it was interrupted, or a poll's pages each
    /// restarted; `None` for the kinds that are not resumed (live,
    /// negentropy, fetch).
    pub(crate) fn resume_jobs(&self) -> Option<Vec<Job>> {
        match self {
            Sub::Req { paging, .. } => Some(vec![Job::Page(Box::new(paging.resume_interrupted()))]),
            Sub::Poll { pages, .. } => Some(
                pages
                    .iter()
                    .map(|page| {
                        let mut page = page.clone();
                        page.restart_page();
                        Job::Page(Box::new(page))
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The job that starts a negentropy session of `filter` again, with its
    /// local items from the same source.
    pub(crate) fn negentropy_job(filter: Filter, sent: bool) -> Job {
        if sent {
            Job::NegentropySent(filter)
        } else {
            Job::Negentropy(filter)
        }
    }

    /// A negentropy session of `filter` for `batch`, waiting for our items
    /// (`sent`: from what the relay sent, else from the store).
    pub(crate) fn negentropy(batch: BatchId, filter: Filter, sent: bool, now: Instant) -> Sub {
        Sub::Negentropy {
            batch,
            filter,
            session: None,
            answered: false,
            opened_at: now,
            sent,
        }
    }

    /// The job that asks the relay again for what this subscription asks,
    /// from where it is (a refused slot retried later); `None` for a live
    /// subscription, which is sent again as it is.
    pub(crate) fn job(&self) -> Option<Job> {
        match self {
            Sub::Live { .. } => None,
            Sub::Req { paging, .. } => Some(Job::Page(Box::new(paging.clone()))),
            Sub::Negentropy { filter, sent, .. } => {
                Some(Sub::negentropy_job(filter.clone(), *sent))
            }
            Sub::Fetch {
                filter, fruitless, ..
            } => Some(Job::Fetch {
                filter: filter.clone(),
                fruitless: *fruitless,
            }),
            Sub::Poll { filters, .. } => Some(Job::Poll(filters.clone())),
        }
    }

    /// The batch a historic subscription belongs to.
    pub(crate) fn batch(&self) -> Option<BatchId> {
        match self {
            Sub::Live { .. } => None,
            Sub::Req { batch, .. }
            | Sub::Negentropy { batch, .. }
            | Sub::Fetch { batch, .. }
            | Sub::Poll { batch, .. } => Some(*batch),
        }
    }

    /// What an EOSE means for this subscription (see [`EoseOutcome`]): a
    /// page of a REQ ends (`told`: the page limits the relay told), a fetch
    /// is asked again for what it did not bring while an attempt in
    /// `fetch_attempts` brings something, a packed poll continues each
    /// filter whose page may have been cut (on a relay whose page size,
    /// `group_page_limit`, is known: from its page-th newest event, since
    /// others' events may match it too), a live subscription is answered.
    pub(crate) fn on_eose(
        &mut self,
        told: &RelayLimits,
        group_page_limit: Option<usize>,
        fetch_attempts: u32,
    ) -> EoseOutcome {
        match self {
            Sub::Req { batch, paging, .. } => {
                let page_limit = told.page_limit_of(&paging.original_filter);
                let crowded_before = paging.crowded_seconds.len();
                let page_len = paging.event_count;
                let outcome = paging.on_eose(page_limit);
                let plausible = page_limit.unwrap_or(PLAUSIBLE_PAGE_LEN);
                let crowded = paging.crowded_seconds[crowded_before..]
                    .iter()
                    .filter(|second| second.page_len >= plausible)
                    .count();
                let next = match outcome {
                    PageOutcome::NextPage(filter) => Some(filter),
                    PageOutcome::Complete => None,
                };
                EoseOutcome::Page(PageEnded {
                    batch: *batch,
                    next,
                    page_len,
                    crowded,
                })
            }
            Sub::Fetch {
                batch,
                filter,
                missing,
                fruitless,
            } => {
                let requested = filter.ids.as_ref().map_or(0, |ids| ids.len());
                let missing: Vec<_> = missing.iter().copied().collect();
                // A fetch that brought some ids was cut by a clamp: ask for
                // the rest. One that brought none is asked again a few times,
                // then the ids are reported.
                let fruitless = if missing.len() < requested {
                    0
                } else {
                    fruitless.saturating_add(1)
                };
                let retry = !missing.is_empty() && fruitless < fetch_attempts;
                EoseOutcome::Fetched {
                    batch: *batch,
                    filter: filter.clone(),
                    missing,
                    fruitless,
                    retry,
                }
            }
            Sub::Poll {
                batch,
                pages,
                received,
                ..
            } => {
                let follow_up = pages
                    .iter_mut()
                    .zip(received.iter())
                    .filter_map(|(page, seen)| {
                        if let Some(group) = group_page_limit {
                            return page
                                .continue_alone(seen, group)
                                .map(|next| Job::Page(Box::new(next)));
                        }
                        let limit = told.page_limit_of(&page.original_filter);
                        match page.on_eose(limit) {
                            PageOutcome::NextPage(_) => Some(Job::Page(Box::new(page.clone()))),
                            PageOutcome::Complete => None,
                        }
                    })
                    .collect();
                EoseOutcome::Polled {
                    batch: *batch,
                    follow_up,
                }
            }
            Sub::Live { answered, .. } => {
                *answered = true;
                EoseOutcome::LiveAnswered
            }
            Sub::Negentropy { .. } => EoseOutcome::Ignored,
        }
    }

    /// What a CLOSED means for this subscription (see [`ClosedOutcome`]):
    /// a refused slot (`slot_refused`) is retried later; otherwise a live
    /// subscription waits for its rebuild, a negentropy session is a
    /// refusal of NIP-77, a historic job fails its batch.
    pub(crate) fn on_closed(&self, slot_refused: bool) -> ClosedOutcome {
        match (self, slot_refused) {
            (_, true) => ClosedOutcome::RetryLater,
            (Sub::Live { .. }, false) => ClosedOutcome::LiveLost,
            (Sub::Negentropy { .. }, false) => ClosedOutcome::NegentropyRefused,
            (
                Sub::Req { batch, .. } | Sub::Fetch { batch, .. } | Sub::Poll { batch, .. },
                false,
            ) => ClosedOutcome::BatchFailed(*batch),
        }
    }

    /// Records `event`, which this subscription asked for, where its pages
    /// are (a fetch's id as found); the batch it counts for, if it is
    /// historic.
    pub(crate) fn on_event(&mut self, event: &Event) -> Option<BatchId> {
        match self {
            Sub::Req { batch, paging, .. } => {
                paging.on_event(event.id, event.created_at);
                Some(*batch)
            }
            Sub::Fetch { batch, missing, .. } => {
                missing.remove(&event.id);
                Some(*batch)
            }
            Sub::Poll {
                batch,
                pages,
                received,
                ..
            } => {
                for (page, seen) in pages.iter_mut().zip(received.iter_mut()) {
                    if page.matches(event) {
                        page.on_event(event.id, event.created_at);
                        seen.push((event.id, event.created_at));
                    }
                }
                Some(*batch)
            }
            Sub::Live { .. } | Sub::Negentropy { .. } => None,
        }
    }

    /// `true` for a live subscription.
    pub(crate) fn is_live(&self) -> bool {
        matches!(self, Sub::Live { .. })
    }

    /// A live subscription's filters, as it is closed; `None` for the
    /// other kinds.
    pub(crate) fn into_live_filters(self) -> Option<Vec<Filter>> {
        match self {
            Sub::Live { filters, .. } => Some(filters),
            _ => None,
        }
    }

    /// When a live subscription the relay has not answered yet was opened.
    pub(crate) fn live_unanswered_since(&self) -> Option<Instant> {
        match self {
            Sub::Live {
                answered: false,
                opened_at,
                ..
            } => Some(*opened_at),
            _ => None,
        }
    }

    /// When a negentropy session's NEG-OPEN, sent and not answered yet,
    /// was sent.
    pub(crate) fn neg_open_unanswered_since(&self) -> Option<Instant> {
        match self {
            Sub::Negentropy {
                session: Some(_),
                answered: false,
                opened_at,
                ..
            } => Some(*opened_at),
            _ => None,
        }
    }

    /// A negentropy session's filter.
    pub(crate) fn negentropy_filter(&self) -> Option<&Filter> {
        match self {
            Sub::Negentropy { filter, .. } => Some(filter),
            _ => None,
        }
    }

    /// `true` for a negentropy session whose NEG-OPEN was sent.
    pub(crate) fn negentropy_opened(&self) -> bool {
        matches!(
            self,
            Sub::Negentropy {
                session: Some(_),
                ..
            }
        )
    }

    /// A negentropy session waiting for its local items (no NEG-OPEN sent
    /// yet): its filter, and whether the items are what the relay sent
    /// this sync ([`Job::NegentropySent`]).
    pub(crate) fn negentropy_waiting(&self) -> Option<(&Filter, bool)> {
        match self {
            Sub::Negentropy {
                filter,
                session: None,
                sent,
                ..
            } => Some((filter, *sent)),
            _ => None,
        }
    }

    /// The negentropy session `started` from our items, its NEG-OPEN sent
    /// at `now`.
    pub(crate) fn negentropy_started(&mut self, started: NegSession, now: Instant) {
        if let Sub::Negentropy {
            session, opened_at, ..
        } = self
        {
            *session = Some(started);
            *opened_at = now;
        }
    }

    /// What a NEG-MSG means for this subscription (see [`NegMsgOutcome`]):
    /// the relay answered, and the session takes its next step; `None` if
    /// this is not an opened negentropy session.
    pub(crate) fn on_neg_msg(&mut self, message: &str) -> Option<NegMsgOutcome> {
        let Sub::Negentropy {
            batch,
            filter,
            session: Some(session),
            answered,
            ..
        } = self
        else {
            return None;
        };
        *answered = true;
        let batch = *batch;
        Some(match session.step(message) {
            Ok(Step::Continue(message)) => NegMsgOutcome::Continue { batch, message },
            Ok(Step::Done) => NegMsgOutcome::Done {
                batch,
                filter: filter.clone(),
                need: std::mem::take(&mut session.need),
            },
            Err(error) => NegMsgOutcome::Failed(error),
        })
    }
}

/// The state of one open connection.
#[derive(Debug, Default)]
pub(crate) struct RelayConn {
    /// When the relay last sent anything — a message, or a pong
    /// ([`SyncEngine::handle_relay_alive`](super::SyncEngine::handle_relay_alive))
    /// — or the connection opened: whether it is alive.
    liveness: Liveness,
    /// When the relay last sent a message for one of our historic
    /// subscriptions (an EVENT, EOSE, CLOSED, NEG-MSG or NEG-ERR of a
    /// batch's job): a relay still answering some of them is busy, not
    /// stalled (see `RelaySession::batch_stalls_at`).
    last_historic_data: Instant,
    /// Every slot in use, in opening order.
    subs: Subscriptions,
    /// Live coverage: the live subscriptions, what waits, what is polled
    /// (a part of its own, handed out by [`RelayConn::live`]).
    live: LiveCoverage,
    /// When each recent subscription was opened, for the learned rate.
    opened_at: VecDeque<Instant>,
    /// Historic work waiting for a slot.
    queue: WorkQueue,
    /// The largest frame sent recently that the relay has not answered yet,
    /// when, and on which subscription: a drop right after it is blamed on
    /// its size.
    recent_frame: Option<(Instant, usize, SubscriptionId)>,
    /// The most recently opened subscription.
    last_opened: Option<SubscriptionId>,
    /// Subscriptions sent that the relay has not answered at all yet, oldest
    /// first: a relay answers in order, so a NOTICE refusing one (which
    /// names no subscription) is about the oldest of them.
    unanswered: VecDeque<SubscriptionId>,
    /// Historic REQ frames sent on this connection (each page counts).
    requests_sent: u64,
    /// The number ([`ReqWatch::sent`]) of the latest historic REQ frame the
    /// relay answered: a REQ sent before it and not answered since was
    /// overtaken.
    newest_answered: u64,
    /// Events of this connection we refused: past
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) the relay is
    /// cut off.
    bad_events: super::bad_events::BadEvents,
}

impl RelayConn {
    /// A connection that opened at `now`, with nothing open on it yet.
    pub(crate) fn new(now: Instant) -> Self {
        RelayConn {
            liveness: Liveness::opened(now),
            last_historic_data: now,
            ..RelayConn::default()
        }
    }

    // --- Hearing from the relay ------------------------------------------

    /// The relay sent something at `now`: it is alive.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.liveness.heard(now);
    }

    /// The relay answered on subscription `id` at `now`: its REQ watch is
    /// heard (and counts as the newest answered), the subscription is no
    /// longer unanswered and its frame no longer suspect. Returns the
    /// batch of a historic subscription, which makes the relay's historic
    /// data fresh.
    pub(crate) fn answered(&mut self, id: &SubscriptionId, now: Instant) -> Option<BatchId> {
        let mut batch = None;
        if let Some(sub) = self.subs.get_mut(id) {
            batch = sub.batch();
            if let Some(watch) = sub.watch_mut() {
                watch.heard_at = now;
                self.newest_answered = self.newest_answered.max(watch.sent);
            }
        }
        if batch.is_some() {
            self.last_historic_data = now;
        }
        self.unanswered.retain(|waiting| waiting != id);
        self.frame_answered(id);
        batch
    }

    /// `true` while the relay sent something within the batch timeout
    /// before `now` ([`Liveness::is_alive`]).
    pub(crate) fn is_alive(&self, now: Instant, config: &EngineConfig) -> bool {
        self.liveness.is_alive(now, config)
    }

    /// When the relay last sent something for one of our historic
    /// subscriptions (or the connection opened).
    pub(crate) fn last_historic_data(&self) -> Instant {
        self.last_historic_data
    }

    /// Counts one refused event against `threshold`
    /// ([`BadEvents::record`](super::bad_events::BadEvents::record)).
    pub(crate) fn record_bad_event(&mut self, threshold: u64) -> BadEventVerdict {
        self.bad_events.record(threshold)
    }

    /// How many events of this connection we refused.
    pub(crate) fn bad_event_count(&self) -> u64 {
        self.bad_events.count()
    }

    // --- Sending -----------------------------------------------------------

    /// Notes `command`, sent at `now`: a subscription opened (for the
    /// learned rate) and waiting for an answer, and the size of a frame
    /// that opens or continues one ([`RelayConn::note_frame`]).
    pub(crate) fn note_sent(&mut self, now: Instant, command: &Command) {
        if let Command::Subscribe { id, .. } | Command::NegOpen { id, .. } = command {
            self.opened_at.push_back(now);
            if !self.unanswered.contains(id) {
                self.unanswered.push_back(id.clone());
            }
        }
        if let Command::Subscribe { id, .. }
        | Command::NegOpen { id, .. }
        | Command::NegMsg { id, .. } = command
        {
            if let Some(len) = super::frames::command_frame_len(command) {
                self.note_frame(now, len, id);
            }
        }
    }

    // --- The subscriptions open --------------------------------------------

    /// The open subscription `id`.
    pub(crate) fn sub(&self, id: &SubscriptionId) -> Option<&Sub> {
        self.subs.get(id)
    }

    /// The open subscription `id`, to change.
    pub(crate) fn sub_mut(&mut self, id: &SubscriptionId) -> Option<&mut Sub> {
        self.subs.get_mut(id)
    }

    /// `true` while subscription `id` is open.
    pub(crate) fn is_open(&self, id: &SubscriptionId) -> bool {
        self.subs.contains(id)
    }

    /// How many subscriptions are open (live and historic).
    pub(crate) fn open_count(&self) -> usize {
        self.subs.len()
    }

    /// Every open subscription, in opening order.
    pub(crate) fn subscriptions(&self) -> impl Iterator<Item = &Sub> {
        self.subs.values()
    }

    /// Every open subscription, taken: the connection holds none.
    pub(crate) fn take_subscriptions(&mut self) -> Vec<(SubscriptionId, Sub)> {
        self.subs.take_all()
    }

    /// Subscription `id`, taken: its slot is free.
    pub(crate) fn take_sub(&mut self, id: &SubscriptionId) -> Option<Sub> {
        self.subs.remove(id)
    }

    /// Drops the failed `batch`: its queued jobs, and its subscriptions,
    /// returned for closing.
    pub(crate) fn drop_batch(&mut self, batch: BatchId) -> Vec<(SubscriptionId, Sub)> {
        self.queue.drop_batch(batch);
        self.subs.remove_batch(batch)
    }

    /// `true` while a job of `batch` holds a subscription slot.
    pub(crate) fn has_running_job(&self, batch: BatchId) -> bool {
        self.subs.has_running_job(batch)
    }

    /// Whether `event`, sent on subscription `id`, is something we asked
    /// for: by the open subscription's filters, or by those of a live
    /// subscription we closed lately (its late events are still ours).
    /// `None` when `id` is no subscription of ours.
    pub(crate) fn asked_for(&self, id: &SubscriptionId, event: &Event) -> Option<bool> {
        match self.subs.get(id) {
            Some(sub) => Some(sub.asked_for(event)),
            None => self
                .live
                .closed_filters(id)
                .map(|filters| filters.iter().any(|filter| matches(filter, event))),
        }
    }

    /// The historic REQs the relay dropped by `now`
    /// ([`RelayConn::req_stalls_at`]).
    pub(crate) fn stalled_reqs(&self, now: Instant, config: &EngineConfig) -> Vec<SubscriptionId> {
        self.subs
            .iter()
            .filter(|(_, sub)| {
                sub.watch()
                    .and_then(|watch| self.req_stalls_at(watch, config))
                    .is_some_and(|at| at <= now)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The NIP-77 sessions whose NEG-OPEN the relay has not answered, with
    /// when each opened.
    pub(crate) fn negentropy_unanswered(&self) -> impl Iterator<Item = (&SubscriptionId, Instant)> {
        self.subs.negentropy_unanswered()
    }

    /// `true` while a NEG-OPEN or NEG-MSG of ours waits for an answer.
    pub(crate) fn negentropy_waits_for_answer(&self) -> bool {
        self.subs.values().any(Sub::negentropy_opened)
    }

    /// When an unanswered live subscription counts as a half-open socket:
    /// a batch timeout after the oldest opened, and not before the relay
    /// counts as silent ([`Liveness::silent_at`]).
    pub(crate) fn live_unanswered_at(&self, config: &EngineConfig) -> Option<Instant> {
        let opened_at = self.subs.live_unanswered_since()?;
        Some((opened_at + config.timeouts.batch_timeout).max(self.liveness.silent_at(config)))
    }

    // --- Live subscriptions and coverage -----------------------------------

    /// Live coverage: the live subscriptions, what waits, what is polled.
    pub(crate) fn live(&self) -> &LiveCoverage {
        &self.live
    }

    /// Live coverage, to change.
    pub(crate) fn live_mut(&mut self) -> &mut LiveCoverage {
        &mut self.live
    }

    /// Files the live subscription `id` of `list` asking for `filters`,
    /// opened at `now`.
    pub(crate) fn open_live(
        &mut self,
        id: SubscriptionId,
        filters: Vec<Filter>,
        list: LiveList,
        now: Instant,
    ) {
        self.live.file(id.clone(), list, filters.len());
        self.opened(
            id,
            Sub::Live {
                filters,
                opened_at: now,
                answered: false,
            },
        );
    }

    /// The live subscription `id` was refused: sent again, unchanged,
    /// when the relay allows (`now` is when live coverage went missing).
    pub(crate) fn requeue_live(&mut self, id: &SubscriptionId, now: Timestamp) {
        if let Some(filters) = self.subs.remove(id).and_then(Sub::into_live_filters) {
            self.live.refused(id, filters, now);
        }
    }

    /// The relay closed the live subscription `id` at `now`: a gap opens in
    /// live coverage.
    pub(crate) fn live_lost(&mut self, id: &SubscriptionId, now: Timestamp) {
        self.subs.remove(id);
        self.live.forget(id);
        self.live.gap_opens(now);
    }

    /// Applies a consolidation's live plan ([`LiveCoverage::apply`]):
    /// every live subscription closed (its late events still accepted for a
    /// while), then the `covered` REQs fill the slots free under `limit`
    /// (at most `live_slots`) and the `polled` filters are polled. Returns
    /// the subscriptions to close, the REQs to open now and the poll.
    pub(crate) fn apply_live_plan(
        &mut self,
        covered: Vec<Vec<Filter>>,
        polled: IndexSet<Filter>,
        limit: usize,
        live_slots: usize,
        now: Timestamp,
    ) -> (Vec<SubscriptionId>, Vec<Vec<Filter>>, Polling) {
        let closing = self.live.close_all();
        for id in &closing {
            if let Some(filters) = self.subs.remove(id).and_then(Sub::into_live_filters) {
                self.live.closed(id.clone(), filters);
            }
        }
        let available = limit.saturating_sub(self.subs.len()).min(live_slots);
        let (opened, polling) = self.live.apply(covered, polled, available, now);
        (closing, opened, polling)
    }

    // --- Room to open work ---------------------------------------------------

    /// Historic work waiting for a slot.
    pub(crate) fn work(&self) -> &WorkQueue {
        &self.queue
    }

    /// Historic work waiting for a slot, to change.
    pub(crate) fn work_mut(&mut self) -> &mut WorkQueue {
        &mut self.queue
    }

    /// `true` if a subscription slot is free under `limit`.
    pub(crate) fn has_free_slot(&self, limit: usize) -> bool {
        self.subs.len() < limit
    }

    /// `true` if a historic job fits under `limit` besides the live REQs
    /// open or waiting, up to `live_slots` of them.
    pub(crate) fn historic_fits(&self, limit: usize, live_slots: usize) -> bool {
        let live = self.live.count();
        let live_reserved = live_slots.min(live + self.live.waiting_count());
        let historic = self.subs.len().saturating_sub(live);
        historic + live_reserved < limit
    }

    /// `true` if a live slot of `live_slots` is free.
    pub(crate) fn live_slot_free(&self, live_slots: usize) -> bool {
        self.live.count() < live_slots
    }

    /// `true` if a slot under `limit` would be free once every live
    /// subscription closed.
    pub(crate) fn free_once_live_closed(&self, limit: usize) -> bool {
        self.subs.len().saturating_sub(self.live.count()) < limit
    }

    /// `true` if the live REQs open and waiting, with `new_reqs` more, are
    /// more than `live_slots` (the learned live slots).
    pub(crate) fn over_live_slots(&self, new_reqs: usize, live_slots: usize) -> bool {
        self.live.count() + self.live.waiting_count() + new_reqs > live_slots
    }

    // --- Requests, frames and the rate ------------------------------------

    /// Files the subscription `id`, just opened.
    pub(crate) fn opened(&mut self, id: SubscriptionId, sub: Sub) {
        self.subs.insert(id.clone(), sub);
        self.last_opened = Some(id);
    }

    /// The next page of the historic REQ `id` is sent at `now`: numbered
    /// ([`RelayConn::watch_request`]) and watched afresh.
    pub(crate) fn watch_next_page(&mut self, id: &SubscriptionId, now: Instant) {
        let next = self.watch_request(now);
        if let Some(watch) = self.subs.get_mut(id).and_then(Sub::watch_mut) {
            *watch = next;
        }
    }

    /// Numbers a historic REQ frame sent at `now`.
    pub(crate) fn watch_request(&mut self, now: Instant) -> ReqWatch {
        self.requests_sent += 1;
        ReqWatch {
            sent: self.requests_sent,
            heard_at: now,
        }
    }

    /// `true` when no historic work is queued or running and no live
    /// subscription waits.
    pub(crate) fn is_quiet(&self) -> bool {
        self.queue.is_empty() && !self.live.waits() && self.subs.all_live()
    }

    /// The oldest open subscription the relay has not answered at all: the
    /// one a NOTICE refusal is about, since relays answer in order.
    pub(crate) fn oldest_unanswered(&mut self) -> Option<SubscriptionId> {
        while let Some(id) = self.unanswered.pop_front() {
            if self.subs.contains(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Records a frame sent at `now` on subscription `id`: the largest
    /// unanswered one of the last [`FRAME_DROP_WINDOW`] is kept.
    pub(crate) fn note_frame(&mut self, now: Instant, len: usize, id: &SubscriptionId) {
        let keep = self.recent_frame.as_ref().is_some_and(|(at, largest, _)| {
            *largest >= len && now.saturating_duration_since(*at) < FRAME_DROP_WINDOW
        });
        if !keep {
            self.recent_frame = Some((now, len, id.clone()));
        }
    }

    /// The relay answered on `id`: a frame it answered did not make it
    /// drop the connection.
    pub(crate) fn frame_answered(&mut self, id: &SubscriptionId) {
        if self
            .recent_frame
            .as_ref()
            .is_some_and(|(_, _, frame)| frame == id)
        {
            self.recent_frame = None;
        }
    }

    /// The largest unanswered frame sent within [`FRAME_DROP_WINDOW`]
    /// before `now`.
    pub(crate) fn large_frame_before(&self, now: Instant) -> Option<usize> {
        self.recent_frame
            .as_ref()
            .filter(|(at, ..)| now.saturating_duration_since(*at) < FRAME_DROP_WINDOW)
            .map(|(_, len, _)| *len)
    }

    /// Subscriptions opened within `window` before `now`.
    pub(crate) fn opens_within(&mut self, now: Instant, window: std::time::Duration) -> usize {
        while self
            .opened_at
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= window)
        {
            self.opened_at.pop_front();
        }
        self.opened_at.len()
    }

    /// When the oldest opening still inside the window leaves it.
    pub(crate) fn rate_window_frees_at(
        &self,
        now: Instant,
        window: std::time::Duration,
    ) -> Option<Instant> {
        self.opened_at
            .iter()
            .map(|at| *at + window)
            .find(|frees| *frees > now)
    }

    /// When a historic REQ (a [`Sub::Req`], a [`Sub::Poll`]) counts as
    /// dropped by the relay — nostr-rs-relay aborts a query without EOSE or
    /// CLOSED when a client reads slowly or a WAL checkpoint runs: once it
    /// has brought nothing (no EVENT, no EOSE) for the batch timeout while
    /// the relay still shows it is alive (a frame, a pong) and either
    /// answered a REQ sent after it (it overtook this one) or has sent
    /// nothing for any historic subscription for the batch timeout either
    /// (a relay answering our REQs one after another is still working on
    /// this one). `None` while the relay as a whole would be silent by then
    /// ([`Liveness::is_alive`]): it is reconnected instead
    /// (`RelaySession::expire`).
    pub(crate) fn req_stalls_at(&self, watch: &ReqWatch, config: &EngineConfig) -> Option<Instant> {
        let timeout = config.timeouts.batch_timeout;
        let overtaken = self.newest_answered > watch.sent;
        let quiet_since = if overtaken {
            watch.heard_at
        } else {
            watch.heard_at.max(self.last_historic_data)
        };
        let at = quiet_since + timeout;
        self.liveness.is_alive(at, config).then_some(at)
    }

    /// The negentropy timeout of the oldest unanswered session.
    pub(crate) fn next_deadline(&self, config: &EngineConfig) -> Option<Instant> {
        self.subs
            .negentropy_unanswered()
            .map(|(_, opened_at)| opened_at + config.timeouts.negentropy_timeout)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Kind;

    fn at(secs: u64) -> Instant {
        Instant::ZERO + std::time::Duration::from_secs(secs)
    }

    fn filter(kind: u16) -> Filter {
        Filter::new().kind(Kind::Custom(kind))
    }

    fn relay() -> RelayUrl {
        RelayUrl::parse("wss://relay.example.com").unwrap()
    }

    /// Opens a historic REQ `id` of `batch` on `conn` at `now`, as sent.
    fn open_req(conn: &mut RelayConn, id: &str, batch: u64, now: Instant) -> SubscriptionId {
        let id = SubscriptionId::new(id);
        let job = Job::Req(filter(1));
        let (sub, _) = job.open(BatchId(batch), &relay(), &id, now, conn);
        conn.opened(id.clone(), sub);
        let command = Command::Subscribe {
            relay: relay(),
            id: id.clone(),
            filters: vec![filter(1)],
        };
        conn.note_sent(now, &command);
        id
    }

    #[test]
    fn an_answer_hears_the_request_and_makes_historic_data_fresh() {
        let mut conn = RelayConn::new(at(0));
        let id = open_req(&mut conn, "req-1", 7, at(1));
        assert_eq!(conn.last_historic_data(), at(0));
        assert_eq!(conn.answered(&id, at(5)), Some(BatchId(7)));
        assert_eq!(conn.last_historic_data(), at(5));
        assert_eq!(
            conn.oldest_unanswered(),
            None,
            "answered: no NOTICE blames it"
        );
        let live = SubscriptionId::new("live-1");
        conn.open_live(live.clone(), vec![filter(2)], LiveList::Base, at(6));
        assert_eq!(
            conn.answered(&live, at(9)),
            None,
            "a live answer is not historic"
        );
        assert_eq!(conn.last_historic_data(), at(5));
        assert_eq!(
            conn.opens_within(at(9), std::time::Duration::from_secs(60)),
            1
        );
    }

    #[test]
    fn room_for_work_keeps_the_live_slots() {
        let mut conn = RelayConn::new(at(0));
        for n in 0..2 {
            let id = SubscriptionId::new(format!("live-{n}"));
            conn.open_live(id, vec![filter(n)], LiveList::Base, at(1));
        }
        assert_eq!(conn.open_count(), 2);
        assert!(conn.has_free_slot(3));
        assert!(conn.historic_fits(3, 2));
        assert!(!conn.historic_fits(2, 2));
        assert!(!conn.live_slot_free(2));
        assert!(conn.live_slot_free(3));
        assert!(conn.free_once_live_closed(1));
        assert!(!conn.over_live_slots(0, 2));
        assert!(conn.over_live_slots(1, 2));
        open_req(&mut conn, "req-1", 1, at(2));
        assert!(!conn.has_free_slot(3));
        assert!(!conn.historic_fits(3, 2));
        assert!(!conn.free_once_live_closed(1));
    }

    #[test]
    fn a_failed_batch_leaves_nothing_open_or_queued() {
        let mut conn = RelayConn::new(at(0));
        let first = open_req(&mut conn, "req-1", 1, at(1));
        let other = open_req(&mut conn, "req-2", 2, at(1));
        conn.work_mut()
            .enqueue(BatchId(1), vec![Job::Req(filter(3))], false);
        conn.work_mut()
            .enqueue(BatchId(2), vec![Job::Req(filter(4))], false);
        assert!(conn.has_running_job(BatchId(1)));
        let closing = conn.drop_batch(BatchId(1));
        assert_eq!(closing.len(), 1);
        assert_eq!(closing[0].0, first);
        assert!(!conn.has_running_job(BatchId(1)));
        assert!(conn.is_open(&other));
        assert_eq!(conn.work().len(), 1);
    }

    #[test]
    fn an_event_is_asked_for_by_an_open_or_lately_closed_subscription_only() {
        use nostr::event::FinalizeEvent;
        use nostr::prelude::{EventBuilder, Keys};
        let event = EventBuilder::new(Kind::Custom(2), "")
            .finalize(&Keys::generate())
            .expect("signed");
        let mut conn = RelayConn::new(at(0));
        let live = SubscriptionId::new("live-1");
        assert_eq!(conn.asked_for(&live, &event), None);
        conn.open_live(live.clone(), vec![filter(2)], LiveList::Base, at(1));
        assert_eq!(conn.asked_for(&live, &event), Some(true));
        let req = open_req(&mut conn, "req-1", 1, at(1));
        assert_eq!(conn.asked_for(&req, &event), Some(false));
        let plan =
            conn.apply_live_plan(Vec::new(), IndexSet::new(), 10, 2, Timestamp::from_secs(5));
        assert_eq!(plan.0, vec![live.clone()]);
        assert!(!conn.is_open(&live));
        assert_eq!(
            conn.asked_for(&live, &event),
            Some(true),
            "closed lately: still ours"
        );
    }
}
