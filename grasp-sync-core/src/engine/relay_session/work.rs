//! The session's historic work on the connection: the jobs a batch runs
//! and the filters they ask for, queued on the connection's `WorkQueue`;
//! the room to start them (free slots under the learned limits, the live
//! slots kept, the rate); and the pump that starts waiting live REQs and
//! queued jobs as far as the relay allows.

use nostr::prelude::{Filter, SubscriptionId};

use super::super::config::EngineConfig;
use super::super::frames::pack_filters;
use super::super::live_coverage::LiveList;
use super::super::runtime::{Job, Opening, QueuedJob};
use super::super::timer_table::RelayTimer;
use super::{Ctx, RelaySession};
use crate::clock::{Instant, Now};
use crate::model::{BatchId, SyncMethod};

/// The session's queued work and the room to start it.
impl RelaySession {
    // --- Jobs and the filters they ask for -----------------------------------

    /// Adds jobs to the running `batch`, ahead of other queued work.
    pub(crate) fn add_jobs(&mut self, batch: BatchId, jobs: Vec<Job>) {
        self.batches.add_jobs(batch, jobs.len());
        if let Some(conn) = self.link.conn_mut() {
            conn.work_mut().enqueue(batch, jobs, true);
        }
    }

    /// Puts `job` back at the front of the queue in place of the slot `id`
    /// (a refused or rate-limited subscription, a negentropy fallback). The
    /// batch keeps the same amount of work.
    pub(crate) fn replace_job(&mut self, id: &SubscriptionId, job: Job, now: Instant) {
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let Some(batch) = conn.take_sub(id).and_then(|sub| sub.batch()) else {
            return;
        };
        conn.work_mut().put_back(batch, job);
        self.batches.progress(batch, now);
    }

    /// `filters` packed, in order, into as few REQs as the relay's filter
    /// and frame limits allow.
    pub(crate) fn pack(&self, filters: Vec<Filter>, config: &EngineConfig) -> Vec<Vec<Filter>> {
        pack_filters(
            filters,
            self.learned.filters_per_req(config),
            self.learned.frame_budget(config),
        )
    }

    /// REQ jobs for Layer 2+3 `filters`. Filters of one chunk
    /// (`#e`/`#E`/`#q`), a repository's `#a` and its roots' `#e`, can match
    /// the same event (a NIP-22 comment, a status): where the relay's page
    /// size is known ([`Learned::group_page_limit`]) they are packed, in
    /// order, into as few REQs as its limits allow, so a relay that dedupes
    /// within a subscription (strfry, nostr-relay-builder) sends such an
    /// event once. Otherwise one paginated REQ per filter.
    pub(crate) fn req_jobs(&self, filters: Vec<Filter>, config: &EngineConfig) -> Vec<Job> {
        let Some(page) = self.learned.group_page_limit(config) else {
            return filters.into_iter().map(Job::Req).collect();
        };
        let filters = filters
            .into_iter()
            .map(|mut filter| {
                filter.limit = Some(page);
                filter
            })
            .collect();
        self.pack(filters, config)
            .into_iter()
            .map(|mut pack| match pack.len() {
                1 => Job::Req(pack.remove(0)),
                _ => Job::Poll(pack),
            })
            .collect()
    }

    /// What `filters` (live ones) match from `since` on, packed into as few
    /// REQs as the relay's limits allow, each filter with the page limit (so
    /// a clamp is seen and paged).
    pub(crate) fn poll_jobs(
        &self,
        filters: &[Filter],
        since: nostr::prelude::Timestamp,
        config: &EngineConfig,
    ) -> Vec<Job> {
        let limit = self.learned.page_limit(config);
        let filters = filters
            .iter()
            .cloned()
            .map(|mut filter| {
                filter.limit = Some(limit);
                filter.since = Some(since);
                filter
            })
            .collect();
        self.pack(filters, config)
            .into_iter()
            .map(Job::Poll)
            .collect()
    }

    // --- Room to open work: slots and rate -----------------------------------

    /// `true` if one more subscription may be opened on the relay now: a
    /// free slot, no rate-limit cooldown, and the learned rate not used up.
    pub(crate) fn may_open(&mut self, now: Instant, config: &EngineConfig) -> bool {
        let limit = self.learned.subscription_limit(config);
        let free_slot = self
            .link
            .conn()
            .is_some_and(|conn| conn.has_free_slot(limit));
        free_slot && self.rate_allows(now, config)
    }

    /// `true` if one more historic job may start: it leaves room for the
    /// live REQs that are open or waiting (up to the live slots), the store
    /// keeps up (backpressure: a store that falls behind holds new historic
    /// work) and the rate allows.
    pub(crate) fn may_open_historic(
        &mut self,
        now: Instant,
        store_keeps_up: bool,
        config: &EngineConfig,
    ) -> bool {
        let limit = self.learned.subscription_limit(config);
        let live_slots = self.learned.live_slots(config);
        let fits = self
            .link
            .conn()
            .is_some_and(|conn| conn.historic_fits(limit, live_slots));
        fits && store_keeps_up && self.may_open(now, config)
    }

    /// `true` if one more live subscription may be opened: a free live slot
    /// (the historic ones stay free) and the rate allows.
    pub(crate) fn may_open_live(&mut self, now: Instant, config: &EngineConfig) -> bool {
        let live_slots = self.learned.live_slots(config);
        let free = self
            .link
            .conn()
            .is_some_and(|conn| conn.live_slot_free(live_slots));
        free && self.may_open(now, config)
    }

    /// `true` if the live plan may be rebuilt now: the rate allows, and the
    /// rebuilt plan has a slot to open in — none needed when nothing is
    /// live ([`Learned::live_slots`] is 0: everything is polled), and the
    /// slots of the live subscriptions open count as free, since the
    /// rebuild closes them first. Requiring a slot free besides them would
    /// stall a relay whose learned limit fell to its open live
    /// subscriptions for good: the rebuild that shrinks them to the live
    /// slots would wait for a slot only it can free, and the historic work
    /// queued behind it with it.
    pub(super) fn may_rebuild_live(
        &mut self,
        now: Instant,
        live_slots: usize,
        config: &EngineConfig,
    ) -> bool {
        if !self.rate_allows(now, config) {
            return false;
        }
        let limit = self.learned.subscription_limit(config);
        let free_once_closed = self
            .link
            .conn()
            .is_some_and(|conn| conn.free_once_live_closed(limit));
        live_slots == 0 || free_once_closed
    }

    /// `true` if one more REQ (a new subscription or a next page) may be
    /// sent to the relay now: connected, no rate-limit cooldown and the
    /// learned rate not used up.
    pub(crate) fn rate_allows(&mut self, now: Instant, config: &EngineConfig) -> bool {
        if self.health.is_rate_limited(now) {
            return false;
        }
        let window = config.rate_window();
        self.learned.recover_rate(now, window);
        let rate = self.learned.rate();
        let Some(conn) = self.link.conn_mut() else {
            return false;
        };
        let within = conn.opens_within(now, window);
        rate.is_none_or(|rate| within < rate)
    }

    // --- Starting work within the relay's limits --------------------------

    /// Starts waiting live subscriptions, rebuilds the live plan if it must
    /// be ([`RelaySession::live_must_rebuild`]), and starts queued jobs
    /// while the relay is not rate-limited and has free subscription slots.
    pub(crate) fn pump(&mut self, cx: &mut Ctx<'_>, now: Now) {
        self.recover_limits(cx, now.instant);
        self.send_waiting_live(cx, now);
        let live_slots = self.learned.live_slots(cx.config);
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let waiting_live = conn.live_mut().take_deferred();
        let rebuild = self.live_must_rebuild(cx.config)
            && self.may_rebuild_live(now.instant, live_slots, cx.config);
        if rebuild {
            self.rebuild_live(cx, now, &waiting_live);
        } else if !waiting_live.is_empty() {
            self.add_live(cx, now, &waiting_live);
        }
        let rebuild_waiting = self.timers.is_set(RelayTimer::RebuildLive);
        if let Some(conn) = self.link.conn_mut() {
            if !conn.live().waits() && !rebuild_waiting {
                conn.live_mut().gap_covered();
            }
        }
        while self.may_open_historic(now.instant, cx.store_keeps_up(), cx.config) {
            let Some(queued) = self.link.conn_mut().and_then(|conn| conn.work_mut().next()) else {
                return;
            };
            self.start_job(cx, now, queued);
        }
    }

    /// Sends waiting live REQs (refused, or not sent for want of a slot), as
    /// far as the relay allows.
    pub(super) fn send_waiting_live(&mut self, cx: &mut Ctx<'_>, now: Now) {
        while self.may_open_live(now.instant, cx.config) {
            let Some(filters) = self
                .link
                .conn_mut()
                .and_then(|conn| conn.live_mut().next_waiting())
            else {
                return;
            };
            self.open_live(cx, now, filters, LiveList::Base);
        }
    }

    /// Starts a queued job: its subscription and its first frame
    /// ([`Job::open`] builds them by kind). What was learned since the job
    /// was planned may change how its filter is synced
    /// ([`RelaySession::sync_method`]) and how it fits the relay's frames
    /// ([`Job::fit`]).
    pub(super) fn start_job(&mut self, cx: &mut Ctx<'_>, now: Now, queued: QueuedJob) {
        let QueuedJob { batch, job } = queued;
        let budget = self.learned.frame_budget(cx.config);
        let job = match job {
            Job::Negentropy(filter) | Job::NegentropySent(filter)
                if self.sync_method(&filter, cx.config) == SyncMethod::ReqEose =>
            {
                Job::Req(filter)
            }
            job => job,
        };
        let page_limit = self.learned.page_limit(cx.config);
        let (job, parts) = job.fit(super::super::frames::req_room(budget), page_limit);
        if !parts.is_empty() {
            self.add_jobs(batch, parts);
        }
        let id = cx.out.sub_id(job.sub_prefix());
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let (sub, opening) = job.open(batch, cx.relay, &id, now.instant, conn);
        conn.opened(id.clone(), sub);
        self.batches.progress(batch, now.instant);
        match opening {
            Opening::Send(first) => self.emit(cx, first),
            Opening::FromSent(filter) => {
                // No store query: the local side is known already.
                let items = self.sent_items(cx, now, batch, &filter);
                self.open_negentropy(cx, now, &id, &items);
            }
        }
    }
}
