//! One relay's session: what we learned about the relay, its open
//! connection, its health and retries, its timers and counters — and the
//! collection of them the engine routes inputs to by URL.

use std::collections::HashMap;

use indexmap::IndexMap;

use nostr::prelude::{Filter, RelayUrl, SubscriptionId};

use super::classify::Classified;
use super::config::MIN_FRAME_BUDGET;
use super::config::{EngineConfig, RelayLimits};
use super::frames::pack_filters;
use super::live::LiveList;
use super::outbox::Outbox;
use super::runtime::{BatchInfo, Job, Purpose, QueuedJob, RelayConn, Sub};
use super::timer_table::{RelayTimer, TimerTable};
use super::Command;
use crate::clock::{Instant, Now};
use crate::filters::{announcement_filter, layer2_and_layer3_filters, FilterMode};
use crate::health::{HealthConfig, HealthState, RelayHealth, Retry};
use crate::model::{
    BatchId, ConnectionStatus, PendingBatch, PendingItems, RelayPending, RelayProgress, RelayState,
    SyncMethod,
};

/// Everything about one relay: what we learned about it (kept across
/// connections), its open connection if any, and its counters.
#[derive(Debug, Default)]
pub(crate) struct RelaySession {
    /// What the relay confirmed and its connection lifecycle (the spec's
    /// `RelayState`): `Some` while the engine tracks the relay (registered,
    /// not dropped). A session without it only remembers what was learned.
    pub(crate) state: Option<RelayState>,
    /// The relay's batches in flight: the items each syncs (their progress
    /// is in [`RelaySession::batches`]).
    pub(crate) pending: RelayPending,
    /// The open connection: `Some` from `handle_connected` until the
    /// connection closes. The one answer to "is this relay connected".
    pub(crate) conn: Option<RelayConn>,
    /// NIP-11 limits.
    pub(crate) limits: RelayLimits,
    /// The subscription count at which the relay refused one more.
    pub(crate) learned_sub_limit: Option<usize>,
    /// Subscriptions the relay lets us open per rate window, learned from a
    /// rate-limit refusal.
    pub(crate) learned_rate: Option<usize>,
    /// When the learned rate last changed (a refusal halved it, or it was
    /// raised again).
    pub(crate) learned_rate_at: Option<Instant>,
    /// The relay refused NIP-77 in some form.
    pub(crate) negentropy_refused: bool,
    /// The relay's batches in flight: their purpose and remaining work.
    pub(crate) batches: HashMap<BatchId, BatchInfo>,
    /// What the session waits for: connect timeout, replan, Layer 1
    /// retry, live rebuild, the next poll of uncovered filters.
    pub(crate) timers: TimerTable<RelayTimer>,
    /// A frame budget smaller than the relay announced, learned when it
    /// dropped the connection right after a large frame.
    pub(crate) learned_frame_budget: Option<usize>,
    /// The earliest moment live coverage was missing and not caught up when
    /// the last connection dropped (a gap, a poll span): the next quick
    /// reconnect catches up from there.
    pub(crate) uncaught_since: Option<nostr::prelude::Timestamp>,
    /// The most events one single-filter page of the relay brought: its
    /// per-filter page size is at least this.
    pub(crate) page_floor: usize,
    /// Verified events from the relay handed to the store.
    pub(crate) events_received: u64,
    /// Events the relay sent that it had sent lately already (on another
    /// subscription, or a page again): `events_received` over
    /// `events_received - events_received_again` is how often it sent each.
    pub(crate) events_received_again: u64,
    /// Ids the relay sent lately (at most
    /// [`EngineConfig::received_ids_per_relay`]), created with the first.
    pub(crate) received_lately: Option<crate::recent::RecentIds>,
    /// Events the relay sent that name an event (`e`, `E`, `q`) and were
    /// handed to the store (at most
    /// [`EngineConfig::sent_replies_per_relay`]), created with the first.
    pub(crate) sent_replies: Option<super::sent_replies::SentReplies>,
    /// Events from the relay the store reported newly stored.
    pub(crate) events_stored: u64,
    /// The last thing that went wrong with the relay.
    pub(crate) last_error: Option<String>,
    /// Connection health: attempts, failures and their backoff, rate
    /// limiting.
    pub(crate) health: RelayHealth,
    /// Failed historic work in a row (batches closed or timed out, live
    /// subscriptions refused) and its backoff; `None` after a confirmation.
    pub(crate) work_retry: Option<Retry>,
}

impl RelaySession {
    /// Emits `command` for this relay, noting first what the connection
    /// tracks of it: when a subscription opened and that it waits for an
    /// answer, and the size of each frame sent (a relay that drops the
    /// connection right after a large one teaches a smaller frame budget).
    pub(crate) fn send(&mut self, out: &mut Outbox, command: Command) {
        let now = out.now();
        if let Some(conn) = self.conn.as_mut() {
            if let Command::Subscribe { id, .. } | Command::NegOpen { id, .. } = &command {
                conn.opened_at.push_back(now);
                if !conn.unanswered.contains(id) {
                    conn.unanswered.push_back(id.clone());
                }
            }
            if let Command::Subscribe { id, .. }
            | Command::NegOpen { id, .. }
            | Command::NegMsg { id, .. } = &command
            {
                if let Some(len) = super::frames::command_frame_len(&command) {
                    conn.note_frame(now, len, id);
                }
            }
        }
        out.push(command);
    }

    /// `true` if one more subscription may be opened on the relay now: a
    /// free slot, no rate-limit cooldown, and the learned rate not used up.
    pub(crate) fn may_open(&mut self, now: Instant, config: &EngineConfig) -> bool {
        let limit = self.subscription_limit(config);
        let free_slot = self
            .conn
            .as_ref()
            .is_some_and(|conn| conn.subs.len() < limit);
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
        let limit = self.subscription_limit(config);
        let live_slots = self.live_slots(config);
        let Some(conn) = &self.conn else {
            return false;
        };
        let live = conn.live_count();
        let live_reserved = live_slots.min(live + conn.waiting_live.len());
        let historic = conn.subs.len().saturating_sub(live);
        historic + live_reserved < limit && store_keeps_up && self.may_open(now, config)
    }

    /// `true` if one more live subscription may be opened: a free live slot
    /// (the historic ones stay free) and the rate allows.
    pub(crate) fn may_open_live(&mut self, now: Instant, config: &EngineConfig) -> bool {
        let live_slots = self.live_slots(config);
        let free = self
            .conn
            .as_ref()
            .is_some_and(|conn| conn.live_count() < live_slots);
        free && self.may_open(now, config)
    }

    /// `true` if one more REQ (a new subscription or a next page) may be
    /// sent to the relay now: connected, no rate-limit cooldown and the
    /// learned rate not used up.
    pub(crate) fn rate_allows(&mut self, now: Instant, config: &EngineConfig) -> bool {
        if self.health.is_rate_limited(now) {
            return false;
        }
        let window = config.rate_window();
        self.recover_learned_rate(now, window);
        let rate = self.learned_rate;
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        let within = conn.opens_within(now, window);
        rate.is_none_or(|rate| within < rate)
    }

    /// Starts batch `batch` of `jobs` syncing `items` by `method`: its jobs
    /// join the queue (a gap's or a poll's at the front: they close a hole
    /// in live coverage).
    pub(crate) fn start_batch(
        &mut self,
        batch: BatchId,
        now: Now,
        purpose: Purpose,
        items: PendingItems,
        method: SyncMethod,
        jobs: Vec<Job>,
    ) {
        self.pending
            .insert(PendingBatch::new(batch, items, method, now.instant));
        self.batches.insert(
            batch,
            BatchInfo {
                purpose,
                jobs: jobs.len(),
                stores: 0,
                last_progress: now.instant,
                started_unix: now.unix,
                fetching: Default::default(),
                covers_from: None,
                req_resumes: 0,
            },
        );
        if let Some(conn) = self.conn.as_mut() {
            let queued = jobs.into_iter().map(|job| QueuedJob { batch, job });
            if matches!(purpose, Purpose::Gap | Purpose::Poll) {
                for job in queued.rev() {
                    conn.queue.push_front(job);
                }
            } else {
                conn.queue.extend(queued);
            }
        }
    }

    /// Fails `batch` for `reason`: it and its queued jobs are dropped, the
    /// failure is counted for the retry delay, and what retries it is timed
    /// by its purpose — its items are planned again, Layer 1 retried, a
    /// catch-up's items synced fully again (the gap was not caught up), a
    /// gap's live coverage rebuilt from the same moment, a poll repeated
    /// (`poll_from` stays: the next poll covers this one's span). Returns
    /// its open subscriptions, to be closed; `None` if there is no such
    /// batch.
    pub(crate) fn fail_batch(
        &mut self,
        batch: BatchId,
        now: Now,
        reason: &str,
        config: &EngineConfig,
    ) -> Option<Vec<(SubscriptionId, Sub)>> {
        let info = self.batches.remove(&batch)?;
        self.last_error = Some(format!("batch failed: {reason}"));
        self.pending.remove_batch(batch);
        let mut closing = Vec::new();
        if let Some(conn) = self.conn.as_mut() {
            conn.queue.retain(|queued| queued.batch != batch);
            let ids: Vec<SubscriptionId> = conn
                .subs
                .iter()
                .filter(|(_, sub)| sub.batch() == Some(batch))
                .map(|(id, _)| id.clone())
                .collect();
            closing = ids
                .into_iter()
                .filter_map(|id| conn.subs.shift_remove(&id).map(|sub| (id, sub)))
                .collect();
        }
        let retry_at = now.instant + self.work_failed(&config.health);
        match info.purpose {
            Purpose::Items => self.timers.set(RelayTimer::Replan, retry_at),
            Purpose::Layer1 => self.timers.set(RelayTimer::Layer1Retry, retry_at),
            Purpose::CatchUp => {
                if let Some(state) = self.state.as_mut() {
                    state.repos.clear();
                    state.root_events.clear();
                }
                self.timers.set(RelayTimer::Replan, retry_at);
            }
            Purpose::Gap => {
                if let (Some(conn), Some(from)) = (self.conn.as_mut(), info.covers_from) {
                    conn.live_gap_since =
                        Some(conn.live_gap_since.map_or(from, |gap| gap.min(from)));
                }
                self.timers.set(RelayTimer::RebuildLive, retry_at);
            }
            Purpose::Poll => {
                if self.conn.is_some() {
                    self.timers.set(RelayTimer::Poll, retry_at);
                }
            }
        }
        Some(closing)
    }

    /// Records progress of `batch` at `now`.
    pub(crate) fn progress(&mut self, batch: BatchId, now: Instant) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.last_progress = now;
        }
    }

    /// Adds jobs to the running `batch`, ahead of other queued work.
    pub(crate) fn add_jobs(&mut self, batch: BatchId, jobs: Vec<Job>) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.jobs += jobs.len();
        }
        if let Some(conn) = self.conn.as_mut() {
            for job in jobs.into_iter().rev() {
                conn.queue.push_front(QueuedJob { batch, job });
            }
        }
    }

    /// Puts `job` back at the front of the queue in place of the slot `id`
    /// (a refused or rate-limited subscription, a negentropy fallback). The
    /// batch keeps the same amount of work.
    pub(crate) fn replace_job(&mut self, id: &SubscriptionId, job: Job, now: Instant) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let Some(batch) = conn.subs.shift_remove(id).and_then(|sub| sub.batch()) else {
            return;
        };
        conn.queue.push_front(QueuedJob { batch, job });
        self.progress(batch, now);
    }

    /// Counts events of `batch` handed to the store (`+1`) or answered
    /// (`-1`): whether the batch is done now (its jobs done, its last event
    /// stored).
    pub(crate) fn count_store(&mut self, batch: BatchId, delta: i32) -> bool {
        let Some(info) = self.batches.get_mut(&batch) else {
            return false;
        };
        info.stores = if delta >= 0 {
            info.stores.saturating_add(delta.unsigned_abs() as usize)
        } else {
            info.stores.saturating_sub(delta.unsigned_abs() as usize)
        };
        info.is_done()
    }

    /// Removes the finished subscription slot `id`: its batch, and whether
    /// the batch is done now. A poll whose last job finished schedules the
    /// next poll (it does not wait for a slow store; it starts from where
    /// the last confirmed poll did).
    pub(crate) fn finish_job(
        &mut self,
        id: &SubscriptionId,
        now: Instant,
        config: &EngineConfig,
    ) -> Option<(BatchId, bool)> {
        let batch = self.conn.as_mut()?.subs.shift_remove(id)?.batch()?;
        self.progress(batch, now);
        let info = self.batches.get_mut(&batch)?;
        info.jobs = info.jobs.saturating_sub(1);
        let done = info.is_done();
        if info.jobs == 0 && info.purpose == Purpose::Poll && self.conn.is_some() {
            self.timers
                .set_unless_set(RelayTimer::Poll, now + config.uncovered_poll_interval);
        }
        Some((batch, done))
    }

    /// `filters` packed, in order, into as few REQs as the relay's filter
    /// and frame limits allow.
    pub(crate) fn pack(&self, filters: Vec<Filter>, config: &EngineConfig) -> Vec<Vec<Filter>> {
        pack_filters(
            filters,
            self.filters_per_req(config),
            self.frame_budget(config),
        )
    }

    /// REQ jobs for Layer 2+3 `filters`. Filters of one chunk
    /// (`#e`/`#E`/`#q`), a repository's `#a` and its roots' `#e`, can match
    /// the same event (a NIP-22 comment, a status): where the relay's page
    /// size is known ([`RelaySession::group_page_limit`]) they are packed, in
    /// order, into as few REQs as its limits allow, so a relay that dedupes
    /// within a subscription (strfry, nostr-relay-builder) sends such an
    /// event once. Otherwise one paginated REQ per filter.
    pub(crate) fn req_jobs(&self, filters: Vec<Filter>, config: &EngineConfig) -> Vec<Job> {
        let Some(page) = self.group_page_limit(config) else {
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
        let limit = self.page_limit(config);
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

    /// What a refusal teaches — the whole decision: a refused subscription
    /// ("too many subscriptions") lowers the relay's known limit to one
    /// below what was open (never below two: one live, one historic slot)
    /// and starts the cooldown without halving the rate (the lower limit
    /// prevents the next refusal); `rate-limited:` starts the cooldown and,
    /// once per episode, halves the REQs sent per window
    /// ([`RelaySession::rate_limited`]).
    pub(crate) fn learn_from_refusal(
        &mut self,
        now: Instant,
        classified: &Classified,
        config: &EngineConfig,
    ) -> Lesson {
        if classified.too_many_subscriptions {
            let open = self.conn.as_ref().map_or(1, |conn| conn.subs.len());
            let limit = open.saturating_sub(1).max(2);
            self.learned_sub_limit =
                Some(self.learned_sub_limit.map_or(limit, |old| old.min(limit)));
            self.health.on_rate_limited(now, &config.health);
            return Lesson {
                subscription_limit: Some(limit),
                cooldown: true,
                rate_refused: false,
            };
        }
        if classified.rate_limited {
            return self.rate_limited(now, config);
        }
        Lesson::default()
    }

    /// A `rate-limited:` refusal: the cooldown starts (or is extended) and,
    /// the first time in an episode, the learned rate becomes half of what
    /// was opened within the last window (at least one).
    pub(crate) fn rate_limited(&mut self, now: Instant, config: &EngineConfig) -> Lesson {
        let already = self.health.is_rate_limited(now);
        self.health.on_rate_limited(now, &config.health);
        if !already {
            let window = config.rate_window();
            let opened = self
                .conn
                .as_mut()
                .map_or(1, |conn| conn.opens_within(now, window));
            let rate = (self.learned_rate.unwrap_or(opened).min(opened) / 2).max(1);
            self.learned_rate = Some(rate);
            self.learned_rate_at = Some(now);
        }
        Lesson {
            subscription_limit: None,
            cooldown: true,
            rate_refused: true,
        }
    }

    /// A relay that drops the connection right after a large frame (strfry
    /// closes the socket on any frame over its limit, without a word) gets
    /// half that frame as its budget, so the next attempt fits: the frame
    /// and the new budget, if it was lowered.
    pub(crate) fn learn_frame_budget(&mut self, now: Instant) -> Option<(usize, usize)> {
        let len = self.conn.as_ref()?.large_frame_before(now)?;
        if len <= MIN_FRAME_BUDGET {
            return None;
        }
        let budget = (len / 2).max(MIN_FRAME_BUDGET);
        if self.learned_frame_budget.is_some_and(|old| budget >= old) {
            return None;
        }
        self.learned_frame_budget = Some(budget);
        Some((len, budget))
    }

    /// The bookkeeping of a closed connection: what was not caught up is
    /// remembered, the connection and its batches are forgotten (their items
    /// are planned again), the confirmed state kept for a quick reconnect,
    /// the health told.
    pub(crate) fn connection_closed(&mut self, now: Now, config: &EngineConfig) {
        self.remember_uncaught();
        self.timers.clear(RelayTimer::Poll);
        self.conn = None;
        self.clear_pending();
        if let Some(state) = self.state.as_mut() {
            state.connection_status = ConnectionStatus::Disconnected;
            state.disconnected_at = Some(now.unix);
            // The last moment we were connected: a quick reconnect catches
            // up from here minus the window.
            state.last_connected = Some(now.unix);
        }
        self.health.on_disconnected(now.instant, &config.health);
    }

    /// Forgets every batch in flight.
    pub(crate) fn clear_pending(&mut self) {
        self.pending.clear();
        self.batches.clear();
    }

    /// Keeps, across the reconnect, the earliest moment live coverage was
    /// missing and not caught up yet: a live gap, the span of uncovered
    /// filters since their last poll, a gap or poll batch still running.
    fn remember_uncaught(&mut self) {
        let Some(conn) = &self.conn else {
            return;
        };
        let polled = conn.poll_from.filter(|_| !conn.uncovered.is_empty());
        let batches = self
            .batches
            .values()
            .filter(|info| matches!(info.purpose, Purpose::Gap | Purpose::Poll))
            .filter_map(|info| info.covers_from);
        let earliest = [conn.live_gap_since, polled]
            .into_iter()
            .flatten()
            .chain(batches)
            .min();
        if let Some(earliest) = earliest {
            self.uncaught_since = Some(
                self.uncaught_since
                    .map_or(earliest, |old| old.min(earliest)),
            );
        }
    }

    /// The filter of the negentropy session `id`.
    pub(crate) fn negentropy_filter(&self, id: &SubscriptionId) -> Option<&Filter> {
        match self.conn.as_ref()?.subs.get(id)? {
            Sub::Negentropy { filter, .. } => Some(filter),
            _ => None,
        }
    }

    /// Historic work on the relay failed: the delay before it is planned
    /// again, doubling for each failure in a row
    /// ([`HealthConfig::work_backoff`]).
    pub(crate) fn work_failed(&mut self, health: &HealthConfig) -> std::time::Duration {
        let backoff = health.work_backoff;
        Retry::fail_in(&mut self.work_retry, backoff)
    }

    /// Historic work on the relay was confirmed: its next failure starts
    /// over.
    pub(crate) fn work_confirmed(&mut self) {
        self.work_retry = None;
    }

    /// The relay's health at `now`.
    pub(crate) fn health_state(&self, now: Instant, health: &HealthConfig) -> HealthState {
        self.health.state(now, health)
    }

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
        // (NIP-11 `max_filters` and the configured cap.)
        self.limits
            .max_filters
            .map_or(config.max_filters_per_req, |max| {
                max.min(config.max_filters_per_req)
            })
            .max(1)
    }

    /// Subscription slots live subscriptions may take: the limit minus the
    /// slots kept for historic work (at least one each). A relay allowing a
    /// single subscription gets none live: everything is polled and the one
    /// slot serves history.
    pub(crate) fn live_slots(&self, config: &EngineConfig) -> usize {
        let limit = self.subscription_limit(config);
        if limit < 2 {
            return 0;
        }
        let historic = config.historic_slots.clamp(1, limit / 2);
        limit.saturating_sub(historic)
    }

    /// The largest frame the relay may be sent: its NIP-11
    /// `max_message_length`, a smaller budget learned from a drop, or the
    /// configured default.
    pub(crate) fn frame_budget(&self, config: &EngineConfig) -> usize {
        // A told budget is honoured even below the learning floor; a
        // kilobyte is the least any REQ needs.
        [self.limits.max_message_length, self.learned_frame_budget]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(config.default_frame_budget)
            .max(1024)
    }

    /// The `limit` of a historic page: ours, or the relay's NIP-11
    /// `max_limit` if smaller.
    pub(crate) fn page_limit(&self, config: &EngineConfig) -> usize {
        self.limits
            .max_limit
            .map_or(config.page_limit, |max| max.min(config.page_limit))
            .max(1)
    }

    /// The page size the relay certainly honours per filter, if we know it:
    /// its NIP-11 `max_limit` (under our page limit), or our page limit once
    /// a single-filter page of it came back full. Only then may filters that
    /// can match the same event share one REQ ([`RelaySession::req_jobs`]): a
    /// relay that dedupes within a subscription sends such an event once,
    /// but for one filter's page it may then be one another filter brought,
    /// and where that filter's page ended can only be told from its
    /// `page`-th newest event. A relay that clamps silently below our limit
    /// gets separate REQs, paged one by one.
    pub(crate) fn group_page_limit(&self, config: &EngineConfig) -> Option<usize> {
        let page = self.page_limit(config);
        let told = self.limits.max_limit.is_some();
        (told || self.page_floor >= page).then_some(page)
    }

    /// Learns from a single-filter page of `len` events that the relay
    /// honours our page limit (`page`) per filter, once a page came full.
    pub(crate) fn note_page_len(&mut self, len: usize, page: usize) {
        if len >= page {
            self.page_floor = self.page_floor.max(len);
        }
    }

    /// How to sync a historic filter on this relay — the whole decision:
    /// NIP-77 reconciliation, unless the relay refused NIP-77 in some form
    /// ([`SyncEngine::negentropy_failed`](super::SyncEngine::negentropy_failed)),
    /// the filter has a `since` (a catch-up fetches what is new; reconciling
    /// would compare the whole history), or a NEG frame for it does not fit
    /// the relay's frame budget; then REQ+EOSE with `until` pagination.
    /// Missing ids a reconciliation found are fetched by REQ
    /// (`SyncEngine::fetch_jobs`).
    pub(crate) fn sync_method(&self, filter: &Filter, config: &EngineConfig) -> SyncMethod {
        let negentropy = !self.negentropy_refused
            && filter.since.is_none()
            && self.negentropy_frame_limit(filter, config).is_some();
        if negentropy {
            SyncMethod::Negentropy
        } else {
            SyncMethod::ReqEose
        }
    }

    /// The frame size limit of a negentropy session of `filter` on this
    /// relay, or `None` if no NEG frame fits its frame budget.
    pub(crate) fn negentropy_frame_limit(
        &self,
        filter: &Filter,
        config: &EngineConfig,
    ) -> Option<u64> {
        super::frames::negentropy_frame_limit(
            self.frame_budget(config),
            filter,
            config.negentropy_frame_size_limit,
        )
    }

    /// The live plan for `items` — which live REQs cover Layer 1 and the
    /// items' Layers 2+3, and which filters are polled instead: the filters
    /// packed into as few REQs as the relay's filter and frame limits allow,
    /// the first [`RelaySession::live_slots`] of them live, the rest polled
    /// with a `since` catch-up (historic work always keeps its slots).
    pub(crate) fn live_plan(&self, items: &PendingItems, config: &EngineConfig) -> LivePlan {
        let mut filters = vec![announcement_filter(FilterMode::Live)];
        filters.extend(layer2_and_layer3_filters(
            items,
            config.chunk_size,
            FilterMode::Live,
        ));
        let packed = self.pack(filters, config);
        let mut reqs = packed.into_iter();
        let covered = reqs.by_ref().take(self.live_slots(config)).collect();
        let polled = reqs.flatten().collect();
        LivePlan { covered, polled }
    }

    /// `true` if live REQs for `new_filters` more filters in `new_reqs` REQs
    /// do not fit next to the live subscriptions open or waiting: over the
    /// consolidation threshold of incremental filters, over the live slots,
    /// or over the subscription limit. Then the live plan is rebuilt
    /// ([`RelaySession::live_plan`]) instead of adding to it.
    pub(crate) fn live_overflows(
        &self,
        new_filters: usize,
        new_reqs: usize,
        config: &EngineConfig,
    ) -> bool {
        let Some(conn) = &self.conn else {
            return false;
        };
        let over_threshold =
            conn.incremental_filters + new_filters > config.consolidation_threshold;
        let live_wanted = conn.live_count() + conn.waiting_live.len() + new_reqs;
        let over_budget = live_wanted > self.live_slots(config)
            || conn.subs.len() + new_reqs > self.subscription_limit(config);
        over_threshold || over_budget
    }

    /// Raises a learned rate again: doubled after [`RECOVERY_WINDOWS`] rate
    /// windows (`window` each) without a refusal, forgotten once above
    /// [`RATE_FORGOTTEN_ABOVE`]. A single `rate-limited:` (a burst, a
    /// restart of the relay) must not slow the relay down for good; a relay
    /// that keeps refusing halves it again.
    pub(crate) fn recover_learned_rate(&mut self, now: Instant, window: std::time::Duration) {
        let (Some(rate), Some(at)) = (self.learned_rate, self.learned_rate_at) else {
            return;
        };
        if now.saturating_duration_since(at) < window.saturating_mul(RECOVERY_WINDOWS) {
            return;
        }
        let raised = rate.saturating_mul(2);
        self.learned_rate = (raised <= RATE_FORGOTTEN_ABOVE).then_some(raised);
        self.learned_rate_at = Some(now);
    }

    /// When a batch of the relay with a running job counts as stalled: once
    /// it has had no progress of its own (a job started, an event, an EOSE,
    /// a NEG-MSG) for the batch timeout **and** the relay has sent nothing
    /// for any of our historic subscriptions for the batch timeout either —
    /// a relay answering our REQs one after another, or slowed by a loaded
    /// machine, is still working on this one. Whatever the relay sends, a
    /// batch with no progress of its own for
    /// [`EngineConfig::batch_stall_limit`] stalls (a subscription the relay
    /// dropped silently while it streams the others).
    pub(crate) fn batch_stalls_at(&self, info: &BatchInfo, config: &EngineConfig) -> Instant {
        let timeout = config.batch_timeout;
        let own = info.last_progress + timeout;
        let hard = info.last_progress + config.batch_stall_limit.max(timeout);
        let relay_idle = self
            .conn
            .as_ref()
            .map_or(own, |conn| conn.last_historic_data + timeout);
        own.max(relay_idle.min(hard))
    }

    /// `true` while a job of `batch` holds a subscription slot (queued jobs
    /// wait for a slot and do not time out).
    pub(crate) fn has_running_job(&self, batch: BatchId) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|conn| conn.subs.values().any(|sub| sub.batch() == Some(batch)))
    }

    /// A connection attempt starts at `now`, given up after `timeout`.
    pub(crate) fn connect_attempt(&mut self, now: Instant, timeout: std::time::Duration) {
        if let Some(state) = self.state.as_mut() {
            state.connection_status = ConnectionStatus::Connecting;
        }
        self.health.on_connect_attempt(now);
        self.timers.set(RelayTimer::ConnectTimeout, now + timeout);
    }

    /// The connection attempt failed at `now`: `false` (nothing changed) if
    /// no attempt was under way.
    pub(crate) fn connect_failed(&mut self, now: Instant) -> bool {
        let Some(state) = self
            .state
            .as_mut()
            .filter(|state| state.connection_status == ConnectionStatus::Connecting)
        else {
            return false;
        };
        state.connection_status = ConnectionStatus::Disconnected;
        self.timers.clear(RelayTimer::ConnectTimeout);
        self.health.on_connect_failed(now);
        true
    }

    /// The connection opened at `now` (the relay is tracked and not
    /// connected): the connection state starts, and the answer is where a
    /// quick reconnect catches up from — the last connected moment minus
    /// `window` — or `None` for a fresh start (a first connect, or an outage
    /// longer than `window`).
    pub(crate) fn connected(
        &mut self,
        now: Now,
        window: std::time::Duration,
    ) -> Option<nostr::prelude::Timestamp> {
        let state = self.state.as_mut()?;
        let quick_since = match state.last_connected {
            Some(last) if !state.should_clear_state(now.unix, window) => {
                Some(nostr::prelude::Timestamp::from_secs(
                    last.as_secs().saturating_sub(window.as_secs()),
                ))
            }
            _ => None,
        };
        state.connection_status = ConnectionStatus::Connected;
        state.last_connected = Some(now.unix);
        state.disconnected_at = None;
        self.timers.clear(RelayTimer::ConnectTimeout);
        self.health.on_connected(now.instant);
        self.timers.clear(RelayTimer::Poll);
        self.conn = Some(RelayConn {
            last_heard: now.instant,
            last_historic_data: now.instant,
            ..RelayConn::default()
        });
        quick_since
    }

    /// The relay spoke at `now`, answering `answered` if it names one of our
    /// subscriptions: it is alive, the subscription is answered (its REQ
    /// watch heard, its frame no longer suspect), and a batch it belongs to
    /// starts counting its REQ resumes afresh.
    pub(crate) fn heard(&mut self, now: Instant, answered: Option<&SubscriptionId>) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.last_heard = now;
        let Some(id) = answered else {
            return;
        };
        let mut batch = None;
        if let Some(sub) = conn.subs.get_mut(id) {
            batch = sub.batch();
            if let Some(watch) = sub.watch_mut() {
                watch.heard_at = now;
                conn.newest_answered = conn.newest_answered.max(watch.sent);
            }
        }
        if batch.is_some() {
            conn.last_historic_data = now;
        }
        conn.unanswered.retain(|waiting| waiting != id);
        conn.frame_answered(id);
        if let Some(info) = batch.and_then(|batch| self.batches.get_mut(&batch)) {
            info.req_resumes = 0;
        }
    }

    /// The relay closed the live subscription `id` without refusing its
    /// slot: live coverage is gone until the rebuild, due after the work
    /// retry's delay; the rebuilt REQs fetch what was published meanwhile.
    pub(crate) fn live_closed(&mut self, id: &SubscriptionId, now: Now, config: &EngineConfig) {
        if let Some(conn) = self.conn.as_mut() {
            conn.subs.shift_remove(id);
            conn.forget_live(id);
            conn.live_gap_since.get_or_insert(now.unix);
        }
        let delay = self.work_failed(&config.health);
        self.timers
            .set(RelayTimer::RebuildLive, now.instant + delay);
    }

    /// Files the live subscription `id` of `filters`, just opened, in `list`.
    pub(crate) fn file_live(
        &mut self,
        id: SubscriptionId,
        filters: Vec<Filter>,
        list: LiveList,
        now: Instant,
    ) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        match list {
            LiveList::Layer1 => conn.layer1_live = Some(id.clone()),
            LiveList::Base => conn.live_base.push(id.clone()),
            LiveList::Incremental => {
                conn.incremental_filters += filters.len();
                conn.live_incremental.push(id.clone());
            }
        }
        conn.subs.insert(
            id.clone(),
            Sub::Live {
                filters,
                opened_at: now,
                answered: false,
            },
        );
        conn.last_opened = Some(id);
    }

    /// Applies a consolidation's live plan: every live subscription is
    /// closed (its late events still accepted for a while), the polled
    /// filters are set and their poll scheduled (what the last poll did not
    /// reach is caught up by filters that go live), and the covered REQs fill
    /// the free live slots, the rest waiting for one. Returns the
    /// subscriptions to close, the REQs to open now, and, when polling
    /// starts, how many filters are polled.
    pub(crate) fn apply_live_plan(
        &mut self,
        plan: LivePlan,
        now: Now,
        config: &EngineConfig,
    ) -> (Vec<SubscriptionId>, Vec<Vec<Filter>>, Option<usize>) {
        let limit = self.subscription_limit(config);
        let live_slots = self.live_slots(config);
        let Some(conn) = self.conn.as_mut() else {
            return (Vec::new(), Vec::new(), None);
        };
        // Their filters are part of the rebuilt set.
        conn.waiting_live.clear();
        let closing: Vec<_> = conn
            .layer1_live
            .take()
            .into_iter()
            .chain(conn.live_base.drain(..))
            .chain(conn.live_incremental.drain(..))
            .collect();
        conn.incremental_filters = 0;
        for id in &closing {
            if let Some(Sub::Live { filters, .. }) = conn.subs.shift_remove(id) {
                conn.closed_live.insert(id.clone(), filters);
            }
        }
        while conn.closed_live.len() > CLOSED_LIVE_KEPT {
            conn.closed_live.shift_remove_index(0);
        }
        let LivePlan {
            covered,
            polled: uncovered,
        } = plan;
        if conn
            .uncovered
            .iter()
            .any(|filter| !uncovered.contains(filter))
        {
            // Filters polled until now go live: what the last poll did not
            // reach is caught up with them.
            if let Some(from) = conn.poll_from {
                conn.live_gap_since = Some(conn.live_gap_since.map_or(from, |gap| gap.min(from)));
            }
        }
        let mut started_polling = None;
        if uncovered.is_empty() {
            conn.poll_from = None;
            self.timers.clear(RelayTimer::Poll);
        } else {
            if conn.uncovered.is_empty() {
                started_polling = Some(uncovered.len());
            }
            conn.poll_from.get_or_insert(now.unix);
            self.timers.set_unless_set(
                RelayTimer::Poll,
                now.instant + config.uncovered_poll_interval,
            );
        }
        conn.uncovered = uncovered;
        // Slots free now (historic work keeps its own); the rest of the
        // covered REQs wait for a slot.
        let available = limit.saturating_sub(conn.subs.len()).min(live_slots);
        let mut covered = covered.into_iter();
        let opened: Vec<Vec<Filter>> = covered.by_ref().take(available).collect();
        let waiting = conn.waiting_live.len();
        conn.waiting_live.extend(covered);
        if conn.waiting_live.len() > waiting {
            conn.live_gap_since.get_or_insert(now.unix);
        }
        (closing, opened, started_polling)
    }

    /// The historic REQs the relay dropped by now
    /// ([`RelayConn::req_stalls_at`]).
    pub(crate) fn stalled_reqs(&self, now: Instant, config: &EngineConfig) -> Vec<SubscriptionId> {
        let Some(conn) = &self.conn else {
            return Vec::new();
        };
        conn.subs
            .iter()
            .filter(|(_, sub)| {
                sub.watch()
                    .and_then(|watch| conn.req_stalls_at(watch, config))
                    .is_some_and(|at| at <= now)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The batches with a running job that stalled by now
    /// ([`RelaySession::batch_stalls_at`]).
    pub(crate) fn stalled_batches(&self, now: Instant, config: &EngineConfig) -> Vec<BatchId> {
        self.batches
            .iter()
            .filter(|(_, info)| self.batch_stalls_at(info, config) <= now)
            .filter(|(batch, _)| self.has_running_job(**batch))
            .map(|(batch, _)| *batch)
            .collect()
    }

    /// `true` if the relay sent nothing at all (no frame, no pong) for the
    /// batch timeout.
    pub(crate) fn is_silent(&self, now: Instant, config: &EngineConfig) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|conn| conn.last_heard + config.batch_timeout <= now)
    }

    /// `true` if the relay is silent ([`RelaySession::is_silent`]) while a
    /// live subscription opened a batch timeout ago has not been answered: a
    /// half-open socket. A driver that pings keeps a relay that answers from
    /// ever getting here, EOSE or not.
    pub(crate) fn live_unanswered(&self, now: Instant, config: &EngineConfig) -> bool {
        let timeout = config.batch_timeout;
        self.is_silent(now, config)
            && self.conn.as_ref().is_some_and(|conn| {
                conn.subs.values().any(|sub| {
                    matches!(sub, Sub::Live { answered: false, opened_at, .. }
                        if *opened_at + timeout <= now)
                })
            })
    }

    /// The NIP-77 sessions whose NEG-OPEN the relay has not answered within
    /// [`EngineConfig::negentropy_timeout`].
    pub(crate) fn negentropy_unanswered(
        &self,
        now: Instant,
        config: &EngineConfig,
    ) -> Vec<SubscriptionId> {
        let Some(conn) = &self.conn else {
            return Vec::new();
        };
        conn.subs
            .iter()
            .filter(|(_, sub)| {
                matches!(sub, Sub::Negentropy {
                    session: Some(_),
                    answered: false,
                    opened_at,
                    ..
                } if *opened_at + config.negentropy_timeout <= now)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// When the session next has work for `SyncEngine::handle_timeout`:
    /// the earliest of its timers, its negentropy and batch timeouts, its
    /// stalled REQs, its unanswered live subscriptions, its rate window and
    /// its health (`health`: when its `RelayHealth`'s answer
    /// changes next).
    pub(crate) fn next_deadline(
        &self,
        config: &EngineConfig,
        health: Option<Instant>,
        now: Instant,
        rate_window: std::time::Duration,
    ) -> Option<Instant> {
        let mut deadlines = vec![self.timers.earliest(), health];
        if let Some(conn) = &self.conn {
            let timeout = config.batch_timeout;
            deadlines.push(conn.next_deadline(config));
            if !conn.is_quiet() && self.learned_rate.is_some() {
                deadlines.push(conn.rate_window_frees_at(now, rate_window));
            }
            for sub in conn.subs.values() {
                if let Some(watch) = sub.watch() {
                    deadlines.push(conn.req_stalls_at(watch, config));
                }
                deadlines.push(match sub {
                    Sub::Live {
                        answered: false,
                        opened_at,
                        ..
                    } => Some((*opened_at).max(conn.last_heard) + timeout),
                    sub => sub
                        .batch()
                        .and_then(|batch| self.batches.get(&batch))
                        .map(|info| self.batch_stalls_at(info, config)),
                });
            }
        }
        deadlines.into_iter().flatten().min()
    }
}

/// A learned rate raised above this many REQs per window is forgotten.
pub(super) const RATE_FORGOTTEN_ABOVE: usize = 256;
/// Rate windows without a refusal before a learned rate is doubled (slower
/// than the halving, so a relay at its limit is probed rarely).
pub(super) const RECOVERY_WINDOWS: u32 = 4;

/// Closed live subscriptions whose late events are still accepted.
const CLOSED_LIVE_KEPT: usize = 64;

/// What a refusal taught ([`RelaySession::learn_from_refusal`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lesson {
    /// The subscription limit was lowered to this.
    pub(crate) subscription_limit: Option<usize>,
    /// The rate-limit cooldown started or was extended.
    pub(crate) cooldown: bool,
    /// A `rate-limited:` refusal (the rate is halved the first time in its
    /// episode).
    pub(crate) rate_refused: bool,
}

impl Lesson {
    /// `true` when the refused subscription should simply be retried later.
    pub(crate) fn retry(&self) -> bool {
        self.cooldown
    }
}

/// What a relay's live subscriptions cover ([`RelaySession::live_plan`]).
#[derive(Debug)]
pub(crate) struct LivePlan {
    /// The live REQs, each a list of filters, within the live slots.
    pub(crate) covered: Vec<Vec<nostr::prelude::Filter>>,
    /// The filters that did not fit: polled with `since` instead.
    pub(crate) polled: indexmap::IndexSet<nostr::prelude::Filter>,
}

/// Every relay's session, by URL, in the order they were first met (so
/// every walk over them is deterministic).
#[derive(Debug, Default)]
pub(crate) struct Relays {
    sessions: IndexMap<RelayUrl, RelaySession>,
    /// How many sessions have a state (tracked relays).
    tracked: usize,
}

/// The session of a relay the engine does not know: nothing learned.
static UNKNOWN: std::sync::LazyLock<RelaySession> = std::sync::LazyLock::new(RelaySession::default);

impl Relays {
    /// Starts tracking `relay` (its session is created if needed);
    /// registering a tracked relay as bootstrap marks it bootstrap, it never
    /// unmarks.
    pub(crate) fn register(&mut self, relay: RelayUrl, is_bootstrap: bool) {
        let session = self.sessions.entry(relay).or_default();
        match &mut session.state {
            Some(state) => state.is_bootstrap |= is_bootstrap,
            None => {
                session.state = Some(RelayState::new(is_bootstrap));
                self.tracked += 1;
            }
        }
    }

    /// `relay`'s confirmed state and lifecycle, if it is tracked.
    pub(crate) fn state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.sessions.get(relay)?.state.as_ref()
    }

    /// [`Relays::state`], to change.
    pub(crate) fn state_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelayState> {
        self.sessions.get_mut(relay)?.state.as_mut()
    }

    /// Every tracked relay with its state, in the order first met.
    pub(crate) fn tracked(&self) -> impl Iterator<Item = (&RelayUrl, &RelayState)> {
        self.sessions
            .iter()
            .filter_map(|(relay, session)| Some((relay, session.state.as_ref()?)))
    }

    /// How many relays are tracked.
    pub(crate) fn tracked_count(&self) -> usize {
        self.tracked
    }

    /// How many batches are in flight over every relay.
    pub(crate) fn batch_count(&self) -> usize {
        self.sessions
            .values()
            .map(|session| session.pending.len())
            .sum()
    }

    /// The session of `relay`, or an empty one (nothing learned) if the
    /// engine does not know it: for questions whose answer for an unknown
    /// relay is the configured default.
    pub(crate) fn view(&self, relay: &RelayUrl) -> &RelaySession {
        self.sessions.get(relay).unwrap_or(&UNKNOWN)
    }

    /// The session of `relay`, if the engine knows it.
    pub(crate) fn get(&self, relay: &RelayUrl) -> Option<&RelaySession> {
        self.sessions.get(relay)
    }

    /// [`Relays::get`], to change.
    pub(crate) fn get_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelaySession> {
        self.sessions.get_mut(relay)
    }

    /// The session of `relay`, created empty on first use.
    pub(crate) fn entry(&mut self, relay: RelayUrl) -> &mut RelaySession {
        self.sessions.entry(relay).or_default()
    }

    /// Forgets `relay` and everything about it.
    pub(crate) fn remove(&mut self, relay: &RelayUrl) -> Option<RelaySession> {
        let session = self.sessions.shift_remove(relay)?;
        if session.state.is_some() {
            self.tracked -= 1;
        }
        Some(session)
    }

    /// Every session, with its relay.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&RelayUrl, &RelaySession)> {
        self.sessions.iter()
    }

    /// Every relay the engine knows.
    pub(crate) fn urls(&self) -> impl Iterator<Item = &RelayUrl> {
        self.sessions.keys()
    }

    /// `relay`'s open connection.
    pub(crate) fn conn(&self, relay: &RelayUrl) -> Option<&RelayConn> {
        self.sessions.get(relay)?.conn.as_ref()
    }

    /// [`Relays::conn`], to change.
    pub(crate) fn conn_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelayConn> {
        self.sessions.get_mut(relay)?.conn.as_mut()
    }

    /// `true` while `relay`'s connection is open.
    pub(crate) fn is_connected(&self, relay: &RelayUrl) -> bool {
        self.conn(relay).is_some()
    }

    /// Every open connection, with its relay.
    pub(crate) fn connections(&self) -> impl Iterator<Item = (&RelayUrl, &RelayConn)> {
        self.sessions
            .iter()
            .filter_map(|(relay, session)| Some((relay, session.conn.as_ref()?)))
    }

    /// Every relay with an open connection.
    pub(crate) fn connected(&self) -> impl Iterator<Item = &RelayUrl> {
        self.connections().map(|(relay, _)| relay)
    }

    /// [`RelaySession::rate_allows`] on `relay`; `false` for a relay the
    /// engine does not know.
    pub(crate) fn rate_allows(
        &mut self,
        relay: &RelayUrl,
        now: Instant,
        config: &EngineConfig,
    ) -> bool {
        self.sessions
            .get_mut(relay)
            .is_some_and(|session| session.rate_allows(now, config))
    }

    /// [`RelaySession::may_open`] on `relay`; `false` for a relay the engine
    /// does not know.
    pub(crate) fn may_open(
        &mut self,
        relay: &RelayUrl,
        now: Instant,
        config: &EngineConfig,
    ) -> bool {
        self.sessions
            .get_mut(relay)
            .is_some_and(|session| session.may_open(now, config))
    }

    /// Remembers `error` as the last thing that went wrong with `relay`
    /// (reported by `SyncEngine::relay_reports`).
    pub(crate) fn note_error(&mut self, relay: &RelayUrl, error: impl Into<String>) {
        if let Some(session) = self.sessions.get_mut(relay) {
            session.last_error = Some(error.into());
        }
    }

    /// The batch `batch` of `relay`.
    pub(crate) fn batch_mut(&mut self, relay: &RelayUrl, batch: BatchId) -> Option<&mut BatchInfo> {
        self.sessions.get_mut(relay)?.batches.get_mut(&batch)
    }

    /// The session of `relay` while its connection is open.
    pub(crate) fn connected_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelaySession> {
        self.sessions
            .get_mut(relay)
            .filter(|session| session.conn.is_some())
    }

    /// Closes `relay`'s connection state and the timers that belong to the
    /// connection; what was learned stays.
    pub(crate) fn close_connection(&mut self, relay: &RelayUrl) -> Option<RelayConn> {
        let session = self.sessions.get_mut(relay)?;
        session.timers.clear(RelayTimer::Poll);
        session.conn.take()
    }
}

impl RelayProgress for Relays {
    fn connected_state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.state(relay).filter(|state| state.is_connected())
    }

    fn pending(&self, relay: &RelayUrl) -> Option<&RelayPending> {
        self.sessions.get(relay).map(|session| &session.pending)
    }
}
