//! Per-relay bookkeeping of the engine: what we learned about a relay, what
//! is open on its current connection, and the historic work waiting for a
//! free subscription slot.

use std::collections::{HashSet, VecDeque};

use indexmap::IndexMap;
use nostr::prelude::{EventId, Filter, SubscriptionId};

use super::config::{EngineConfig, RelayLimits};
use super::session::NegSession;
use crate::clock::Instant;
use crate::model::{BatchId, PendingItems};
use crate::pagination::PaginationState;

/// What a batch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Historic sync of Layer 2+3 items; confirms them.
    Items,
    /// Historic sync of Layer 1 (announcements and states).
    Layer1,
    /// Quick-reconnect catch-up of confirmed items with `since`.
    CatchUp,
}

/// A batch's relay, purpose and remaining work (queued plus running jobs).
#[derive(Clone, Debug)]
pub(crate) struct BatchInfo {
    pub(crate) relay: nostr::prelude::RelayUrl,
    pub(crate) purpose: Purpose,
    pub(crate) jobs: usize,
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
    /// `REQ` for missing ids, restricted to the reconciled filter.
    Fetch(Filter),
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
    /// arrives (`answered_at` is `None`), the relay has not shown it holds the
    /// subscription: a relay silent past the batch timeout then is reconnected,
    /// or a CLOSED lost in a stall would leave a live gap nobody sees.
    Live {
        filters: Vec<Filter>,
        opened_at: Instant,
        answered: bool,
    },
    /// A paginated historic REQ.
    Req {
        batch: BatchId,
        paging: PaginationState,
    },
    /// A negentropy session; `session` is `None` while the store is asked
    /// for local items (the slot is reserved, nothing sent yet).
    Negentropy {
        batch: BatchId,
        filter: Filter,
        session: Option<NegSession>,
        answered: bool,
        opened_at: Instant,
    },
    /// A fetch of missing ids.
    Fetch {
        batch: BatchId,
        filter: Filter,
        missing: HashSet<EventId>,
    },
}

impl Sub {
    /// The batch a historic subscription belongs to.
    pub(crate) fn batch(&self) -> Option<BatchId> {
        match self {
            Sub::Live { .. } => None,
            Sub::Req { batch, .. } | Sub::Negentropy { batch, .. } | Sub::Fetch { batch, .. } => {
                Some(*batch)
            }
        }
    }
}

/// What we know about a relay across connections.
#[derive(Debug, Default)]
pub(crate) struct RelayKnowledge {
    /// NIP-11 limits.
    pub(crate) limits: RelayLimits,
    /// The subscription count at which the relay refused one more.
    pub(crate) learned_sub_limit: Option<usize>,
    /// Subscriptions the relay lets us open per rate window, learned from a
    /// rate-limit refusal.
    pub(crate) learned_rate: Option<usize>,
    /// The relay refused NIP-77 in some form.
    pub(crate) negentropy_refused: bool,
    /// When a connection attempt is abandoned.
    pub(crate) connect_deadline: Option<Instant>,
    /// When failed items are planned again.
    pub(crate) replan_at: Option<Instant>,
    /// When a failed Layer 1 historic sync is tried again.
    pub(crate) layer1_retry_at: Option<Instant>,
    /// When live subscriptions are rebuilt after one was refused.
    pub(crate) rebuild_live_at: Option<Instant>,
    /// Batch or live failures in a row (CLOSED, timeout), for the backoff of
    /// retries; reset when a batch confirms.
    pub(crate) failures_in_a_row: u32,
}

impl RelayKnowledge {
    /// The smallest subscription limit we know of.
    pub(crate) fn subscription_limit(&self, config: &EngineConfig) -> usize {
        [
            Some(config.max_subscriptions),
            self.limits.max_subscriptions,
            self.learned_sub_limit,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(config.max_subscriptions)
        .max(1)
    }

    /// Filters per REQ we may send.
    pub(crate) fn filters_per_req(&self, config: &EngineConfig) -> usize {
        self.limits
            .max_filters
            .map_or(config.max_filters_per_req, |max| {
                max.min(config.max_filters_per_req)
            })
            .max(1)
    }

    /// The most events a page of `filter` can hold, as far as the relay told us.
    pub(crate) fn known_page_limit(&self, filter: &Filter) -> Option<usize> {
        match filter.limit {
            Some(_) => self.limits.max_limit,
            None => self.limits.default_limit,
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [
            self.connect_deadline,
            self.replan_at,
            self.layer1_retry_at,
            self.rebuild_live_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The state of one open connection.
#[derive(Debug, Default)]
pub(crate) struct RelayConn {
    /// When the relay last sent anything (or the connection opened).
    pub(crate) last_heard: Instant,
    /// Every slot in use, in opening order.
    pub(crate) subs: IndexMap<SubscriptionId, Sub>,
    /// The Layer 1 live subscription.
    pub(crate) layer1_live: Option<SubscriptionId>,
    /// Live Layer 2+3 subscriptions of the last consolidation.
    pub(crate) live_base: Vec<SubscriptionId>,
    /// Live Layer 2+3 subscriptions added since.
    pub(crate) live_incremental: Vec<SubscriptionId>,
    /// Filters in `live_incremental`.
    pub(crate) incremental_filters: usize,
    /// Items whose live subscription waits (rate limit, no free slot).
    pub(crate) deferred_live: PendingItems,
    /// Filters of live subscriptions closed by a consolidation, for events
    /// the relay sent on them before it saw the CLOSE (newest last, bounded).
    pub(crate) closed_live: IndexMap<SubscriptionId, Vec<Filter>>,
    /// Live REQs the relay refused, to send again when it allows.
    pub(crate) refused_live: Vec<Vec<Filter>>,
    /// Since when some live coverage has been waiting (wall clock): the REQs
    /// that finally open also fetch what was published meanwhile.
    pub(crate) live_gap_since: Option<nostr::prelude::Timestamp>,
    /// When each recent subscription was opened, for the learned rate.
    pub(crate) opened_at: VecDeque<Instant>,
    /// Historic work waiting for a slot.
    pub(crate) queue: VecDeque<QueuedJob>,
    /// The most recently opened subscription.
    pub(crate) last_opened: Option<SubscriptionId>,
    /// Subscriptions sent that the relay has not answered at all yet, oldest
    /// first: a relay answers in order, so a NOTICE refusing one (which
    /// names no subscription) is about the oldest of them.
    pub(crate) unanswered: VecDeque<SubscriptionId>,
}

impl RelayConn {
    /// Subscriptions live right now (Layer 1 included).
    pub(crate) fn live_count(&self) -> usize {
        usize::from(self.layer1_live.is_some()) + self.live_base.len() + self.live_incremental.len()
    }

    /// `true` when no historic work is queued or running and no live
    /// subscription waits.
    pub(crate) fn is_quiet(&self) -> bool {
        self.queue.is_empty()
            && self.deferred_live.is_empty()
            && self.refused_live.is_empty()
            && self
                .subs
                .values()
                .all(|sub| matches!(sub, Sub::Live { .. }))
    }

    /// Forgets a live subscription id in whichever live list holds it.
    pub(crate) fn forget_live(&mut self, id: &SubscriptionId) {
        if self.layer1_live.as_ref() == Some(id) {
            self.layer1_live = None;
        }
        self.live_base.retain(|live| live != id);
        if let Some(position) = self.live_incremental.iter().position(|live| live == id) {
            self.live_incremental.remove(position);
        }
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
                } => Some(*opened_at + config.negentropy_timeout),
                _ => None,
            })
            .min()
    }
}
