//! Per-relay bookkeeping of the engine: what we learned about a relay, what
//! is open on its current connection, and the historic work waiting for a
//! free subscription slot.

use std::collections::{HashSet, VecDeque};

use indexmap::IndexMap;
use nostr::prelude::{Event, EventId, Filter, RelayUrl, SubscriptionId};

use super::config::EngineConfig;
use super::live_coverage::LiveCoverage;
use super::session::NegSession;
use super::Command;
use crate::clock::{Instant, Now};
use crate::filters::matches;
use crate::model::BatchId;
use crate::pagination::PaginationState;

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
    pub(crate) fn negentropy(batch: BatchId, filter: Filter, sent: bool, now: Now) -> Sub {
        Sub::Negentropy {
            batch,
            filter,
            session: None,
            answered: false,
            opened_at: now.instant,
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
}

/// The state of one open connection.
#[derive(Debug, Default)]
pub(crate) struct RelayConn {
    /// When the relay last sent anything — a message, or a pong
    /// ([`SyncEngine::handle_relay_alive`](super::SyncEngine::handle_relay_alive))
    /// — or the connection opened.
    pub(crate) last_heard: Instant,
    /// When the relay last sent a message for one of our historic
    /// subscriptions (an EVENT, EOSE, CLOSED, NEG-MSG or NEG-ERR of a
    /// batch's job): a relay still answering some of them is busy, not
    /// stalled (see `RelaySession::batch_stalls_at`).
    pub(crate) last_historic_data: Instant,
    /// Every slot in use, in opening order.
    pub(crate) subs: IndexMap<SubscriptionId, Sub>,
    /// Live coverage: the live subscriptions, what waits, what is polled.
    pub(crate) live: LiveCoverage,
    /// When each recent subscription was opened, for the learned rate.
    pub(crate) opened_at: VecDeque<Instant>,
    /// Historic work waiting for a slot.
    pub(crate) queue: VecDeque<QueuedJob>,
    /// The largest frame sent recently that the relay has not answered yet,
    /// when, and on which subscription: a drop right after it is blamed on
    /// its size.
    pub(crate) recent_frame: Option<(Instant, usize, SubscriptionId)>,
    /// The most recently opened subscription.
    pub(crate) last_opened: Option<SubscriptionId>,
    /// Subscriptions sent that the relay has not answered at all yet, oldest
    /// first: a relay answers in order, so a NOTICE refusing one (which
    /// names no subscription) is about the oldest of them.
    pub(crate) unanswered: VecDeque<SubscriptionId>,
    /// Historic REQ frames sent on this connection (each page counts).
    pub(crate) requests_sent: u64,
    /// The number ([`ReqWatch::sent`]) of the latest historic REQ frame the
    /// relay answered: a REQ sent before it and not answered since was
    /// overtaken.
    pub(crate) newest_answered: u64,
    /// Events of this connection we refused: past
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) the relay is
    /// cut off.
    pub(crate) bad_events: super::bad_events::BadEvents,
}

impl RelayConn {
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
        self.queue.is_empty()
            && !self.live.waits()
            && self
                .subs
                .values()
                .all(|sub| matches!(sub, Sub::Live { .. }))
    }

    /// The oldest open subscription the relay has not answered at all: the
    /// one a NOTICE refusal is about, since relays answer in order.
    pub(crate) fn oldest_unanswered(&mut self) -> Option<SubscriptionId> {
        while let Some(id) = self.unanswered.pop_front() {
            if self.subs.contains_key(&id) {
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
    /// this one). `None` while the relay as a whole would be silent by then:
    /// it is reconnected instead (`SyncEngine::expire_batches`).
    pub(crate) fn req_stalls_at(&self, watch: &ReqWatch, config: &EngineConfig) -> Option<Instant> {
        let timeout = config.timeouts.batch_timeout;
        let overtaken = self.newest_answered > watch.sent;
        let quiet_since = if overtaken {
            watch.heard_at
        } else {
            watch.heard_at.max(self.last_historic_data)
        };
        let at = quiet_since + timeout;
        (at < self.last_heard + timeout).then_some(at)
    }

    /// The negentropy timeout of the oldest unanswered session.
    pub(crate) fn next_deadline(&self, config: &EngineConfig) -> Option<Instant> {
        self.subs
            .values()
            .filter_map(|sub| match sub {
                Sub::Negentropy {
                    session: Some(_),
                    answered: false,
                    opened_at,
                    ..
                } => Some(*opened_at + config.timeouts.negentropy_timeout),
                _ => None,
            })
            .min()
    }
}
