//! Historic work: starting queued jobs within the relay's subscription limit,
//! finishing them, confirming or failing their batches, and the timers that
//! re-plan failed work.

use std::collections::HashSet;

use nostr::prelude::{EventId, Filter, RelayUrl, SubscriptionId, Timestamp};
use tracing::{debug, warn};

use super::planning::LiveList;
use super::runtime::{Job, Purpose, QueuedJob, Sub};
use super::session::NegSession;
use super::{Command, SyncEngine};
use crate::clock::{Instant, Now};
use crate::model::BatchId;
use crate::pagination::PaginationState;

impl SyncEngine {
    /// Starts waiting live subscriptions and queued jobs while the relay is
    /// not rate-limited and has free subscription slots.
    pub(super) fn pump(&mut self, now: Now, relay: &RelayUrl) {
        self.resend_refused_live(now, relay);
        let live_slots = self.live_slots(relay);
        let (waiting_live, no_live, over, polling) = match self.conns.get_mut(relay) {
            Some(conn) => (
                std::mem::take(&mut conn.deferred_live),
                conn.live_count() == 0 && conn.refused_live.is_empty(),
                conn.live_count() + conn.refused_live.len() > live_slots,
                !conn.uncovered.is_empty(),
            ),
            None => return,
        };
        // Layer 1 live went with a consolidation that found no slot, or the
        // live slots shrank (limits told or learned after connecting): cover
        // everything again within them.
        let rebuild = (no_live && !polling) || over;
        let can = self.rate_allows(now, relay) && (live_slots == 0 || self.may_open(now, relay));
        if rebuild && can {
            self.rebuild_live(now, relay, &waiting_live);
        } else if !waiting_live.is_empty() {
            self.add_live(now, relay, &waiting_live);
        }
        let rebuild_waiting = self
            .known
            .get(relay)
            .is_some_and(|known| known.rebuild_live_at.is_some());
        if let Some(conn) = self.conns.get_mut(relay) {
            if conn.deferred_live.is_empty() && conn.refused_live.is_empty() && !rebuild_waiting {
                conn.live_gap_since = None;
            }
        }
        while self.may_open_historic(now, relay) {
            let Some(queued) = self
                .conns
                .get_mut(relay)
                .and_then(|conn| conn.queue.pop_front())
            else {
                return;
            };
            self.start_job(now, relay, queued);
        }
    }

    /// `true` if one more historic job may start on `relay`: it leaves room
    /// for the live REQs that are open or waiting (up to the live slots) and
    /// the rate allows.
    fn may_open_historic(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let limit = self.sub_limit(relay);
        let live_slots = self.live_slots(relay);
        let Some(conn) = self.conns.get(relay) else {
            return false;
        };
        let live = conn.live_count();
        let live_reserved = live_slots.min(live + conn.refused_live.len());
        let historic = conn.subs.len().saturating_sub(live);
        // Backpressure: a store that falls behind holds new historic work.
        let store_keeps_up = self.stores.in_flight() < self.config.max_unconfirmed_stores;
        historic + live_reserved < limit && store_keeps_up && self.may_open(now, relay)
    }

    /// Live filters that open late: what was published since the coverage
    /// started waiting (minus the quick-reconnect window) is fetched by a
    /// paginated `since` catch-up, so nothing published in the gap is missed.
    pub(super) fn catch_up_gap(&mut self, now: Now, relay: &RelayUrl, filters: &[Filter]) {
        let window = self.config.quick_reconnect_window.as_secs();
        let Some(gap_since) = self.conns.get(relay).and_then(|conn| conn.live_gap_since) else {
            return;
        };
        let since = Timestamp::from_secs(
            gap_since
                .as_secs()
                .saturating_sub(window)
                .min(now.unix.as_secs()),
        );
        let jobs = self.poll_jobs(relay, filters, since);
        let batch = self.start_batch(
            now,
            relay,
            Purpose::Gap,
            Default::default(),
            crate::model::SyncMethod::ReqEose,
            jobs,
        );
        if let Some(info) = batch.and_then(|batch| self.batches.get_mut(&batch)) {
            info.covers_from = Some(gap_since);
        }
    }

    /// What `filters` (live ones) match from `since` on, packed into as few
    /// REQs as the relay's limits allow, each filter with the page limit (so
    /// a clamp is seen and paged).
    pub(super) fn poll_jobs(
        &self,
        relay: &RelayUrl,
        filters: &[Filter],
        since: Timestamp,
    ) -> Vec<Job> {
        let limit = self.page_limit(relay);
        let filters = filters
            .iter()
            .cloned()
            .map(|mut filter| {
                filter.limit = Some(limit);
                filter.since = Some(since);
                filter
            })
            .collect();
        super::frames::pack_filters(
            filters,
            self.filters_per_req(relay),
            self.frame_budget(relay),
        )
        .into_iter()
        .map(Job::Poll)
        .collect()
    }

    /// `true` if one more live subscription may be opened on `relay`: a
    /// free live slot (the historic ones stay free) and the rate allows.
    pub(super) fn may_open_live(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let live_slots = self.live_slots(relay);
        let free = self
            .conns
            .get(relay)
            .is_some_and(|conn| conn.live_count() < live_slots);
        free && self.may_open(now, relay)
    }

    /// Sends live REQs the relay refused again, as far as it allows.
    fn resend_refused_live(&mut self, now: Now, relay: &RelayUrl) {
        while self.may_open_live(now, relay) {
            let Some(filters) = self
                .conns
                .get_mut(relay)
                .and_then(|conn| conn.refused_live.pop())
            else {
                return;
            };
            self.open_live(now, relay, filters, LiveList::Base);
        }
    }

    fn start_job(&mut self, now: Now, relay: &RelayUrl, queued: QueuedJob) {
        let QueuedJob { batch, job } = queued;
        let budget = self.frame_budget(relay);
        let frame_limit = self.config.negentropy_frame_size_limit;
        let job = match job {
            Job::Negentropy(filter) if self.knowledge(relay).negentropy_refused => Job::Req(filter),
            Job::Negentropy(filter)
                if super::frames::negentropy_frame_limit(budget, &filter, frame_limit)
                    .is_none() =>
            {
                Job::Req(filter)
            }
            job => job,
        };
        let (id, sub) = match job {
            Job::Req(filter) => {
                // A filter too large for the relay's frames (a long list of
                // repositories) is split; the parts join the batch.
                let mut parts =
                    super::frames::split_to_fit(filter, super::frames::req_room(budget));
                let mut filter = parts.remove(0);
                if !parts.is_empty() {
                    self.add_jobs(relay, batch, parts.into_iter().map(Job::Req).collect());
                }
                if filter.limit.is_none() {
                    filter.limit = Some(self.page_limit(relay));
                }
                let id = self.next_sub_id("req");
                self.emit(Command::Subscribe {
                    relay: relay.clone(),
                    id: id.clone(),
                    filters: vec![filter.clone()],
                });
                (
                    id,
                    Sub::Req {
                        batch,
                        paging: PaginationState::new(filter),
                    },
                )
            }
            Job::Page(paging) => {
                let id = self.next_sub_id("req");
                self.emit(Command::Subscribe {
                    relay: relay.clone(),
                    id: id.clone(),
                    filters: vec![paging.current_filter()],
                });
                (
                    id,
                    Sub::Req {
                        batch,
                        paging: *paging,
                    },
                )
            }
            Job::Negentropy(filter) => {
                let id = self.next_sub_id("neg");
                self.emit(Command::QueryLocalItems {
                    relay: relay.clone(),
                    id: id.clone(),
                    filter: filter.clone(),
                });
                let sub = Sub::Negentropy {
                    batch,
                    filter,
                    session: None,
                    answered: false,
                    opened_at: now.instant,
                };
                (id, sub)
            }
            Job::Fetch { filter, fruitless } => {
                let id = self.next_sub_id("fetch");
                let missing: HashSet<EventId> =
                    filter.ids.clone().unwrap_or_default().into_iter().collect();
                self.emit(Command::Subscribe {
                    relay: relay.clone(),
                    id: id.clone(),
                    filters: vec![filter.clone()],
                });
                (
                    id,
                    Sub::Fetch {
                        batch,
                        filter,
                        missing,
                        fruitless,
                    },
                )
            }
            Job::Poll(filters) => {
                let id = self.next_sub_id("poll");
                self.emit(Command::Subscribe {
                    relay: relay.clone(),
                    id: id.clone(),
                    filters: filters.clone(),
                });
                let pages = filters.iter().cloned().map(PaginationState::new).collect();
                (
                    id,
                    Sub::Poll {
                        batch,
                        filters,
                        pages,
                    },
                )
            }
        };
        if let Some(conn) = self.conns.get_mut(relay) {
            conn.subs.insert(id.clone(), sub);
            conn.last_opened = Some(id.clone());
        }
        self.progress(now, batch);
    }

    /// The `limit` of a historic page on `relay`.
    pub(super) fn page_limit(&self, relay: &RelayUrl) -> usize {
        let told = self
            .known
            .get(relay)
            .and_then(|known| known.limits.max_limit);
        told.map_or(self.config.page_limit, |max| {
            max.min(self.config.page_limit)
        })
        .max(1)
    }

    /// The store answered with our items for a negentropy session: open it.
    pub(super) fn open_negentropy(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        items: &[(EventId, Timestamp)],
    ) {
        let budget = self.frame_budget(relay);
        let configured = self.config.negentropy_frame_size_limit;
        let Some(Sub::Negentropy {
            filter, session, ..
        }) = self.conns.get(relay).and_then(|conn| conn.subs.get(id))
        else {
            return;
        };
        if session.is_some() {
            return;
        }
        let filter = filter.clone();
        if !self.rate_allows(now, relay) {
            // The store answered during a rate-limit cooldown: wait for it.
            self.replace_job(now, relay, id, Job::Negentropy(filter));
            return;
        }
        let Some(Sub::Negentropy {
            filter,
            session,
            opened_at,
            ..
        }) = self
            .conns
            .get_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        // `None` cannot happen (checked when the job started), but the
        // budget may have shrunk since: fall back to REQ then.
        let Some(frame_size_limit) =
            super::frames::negentropy_frame_limit(budget, filter, configured)
        else {
            let filter = filter.clone();
            self.replace_job(now, relay, id, Job::Req(filter));
            return;
        };
        match NegSession::start(items, frame_size_limit) {
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
            Err(error) => {
                warn!(%relay, %error, "cannot start negentropy; using REQ");
                let filter = filter.clone();
                self.replace_job(now, relay, id, Job::Req(filter));
            }
        }
    }

    /// Records progress of the batch a subscription belongs to.
    pub(super) fn progress(&mut self, now: Now, batch: BatchId) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.last_progress = now.instant;
        }
    }

    /// Removes a finished subscription slot; when its batch has no work
    /// left, the batch is confirmed.
    pub(super) fn finish_job(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(sub) = self
            .conns
            .get_mut(relay)
            .and_then(|conn| conn.subs.shift_remove(id))
        else {
            return;
        };
        let Some(batch) = sub.batch() else {
            return;
        };
        self.progress(now, batch);
        let interval = self.config.uncovered_poll_interval;
        let done = self.batches.get_mut(&batch).map(|info| {
            info.jobs = info.jobs.saturating_sub(1);
            (
                info.is_done(),
                info.jobs == 0 && info.purpose == Purpose::Poll,
            )
        });
        let (done, polled) = match done {
            Some((done, polled)) => (Some(done), polled),
            None => (None, false),
        };
        if polled {
            // The next poll does not wait for a slow store; it starts from
            // where the last confirmed poll did.
            if let Some(conn) = self.conns.get_mut(relay) {
                conn.next_poll_at.get_or_insert(now.instant + interval);
            }
        }
        if done == Some(true) {
            self.complete_batch(now, relay, batch);
        }
    }

    /// Counts events of `batch` handed to the store (`+1`) or answered
    /// (`-1`); a batch whose jobs are done confirms with its last store.
    pub(super) fn count_store(&mut self, now: Now, batch: BatchId, delta: i32) {
        let Some(info) = self.batches.get_mut(&batch) else {
            return;
        };
        info.stores = if delta >= 0 {
            info.stores.saturating_add(delta.unsigned_abs() as usize)
        } else {
            info.stores.saturating_sub(delta.unsigned_abs() as usize)
        };
        if info.is_done() {
            let relay = info.relay.clone();
            self.complete_batch(now, &relay, batch);
        }
    }

    /// Puts `job` back at the front of the queue in place of the slot `id`
    /// (a refused or rate-limited subscription, a negentropy fallback). The
    /// batch keeps the same amount of work.
    pub(super) fn replace_job(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        job: Job,
    ) {
        let Some(conn) = self.conns.get_mut(relay) else {
            return;
        };
        let Some(batch) = conn.subs.shift_remove(id).and_then(|sub| sub.batch()) else {
            return;
        };
        conn.queue.push_front(QueuedJob { batch, job });
        self.progress(now, batch);
    }

    /// Adds jobs to a running batch, ahead of other queued work.
    pub(super) fn add_jobs(&mut self, relay: &RelayUrl, batch: BatchId, jobs: Vec<Job>) {
        if let Some(info) = self.batches.get_mut(&batch) {
            info.jobs += jobs.len();
        }
        if let Some(conn) = self.conns.get_mut(relay) {
            for job in jobs.into_iter().rev() {
                conn.queue.push_front(QueuedJob { batch, job });
            }
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
        let fit = super::frames::ids_per_fetch(self.frame_budget(relay), &base);
        need.chunks(self.config.fetch_chunk.min(fit).max(1))
            .map(|chunk| Job::Fetch {
                filter: base.clone().ids(chunk.iter().copied()),
                fruitless,
            })
            .collect()
    }

    fn complete_batch(&mut self, now: Now, relay: &RelayUrl, batch: BatchId) {
        let Some(info) = self.batches.remove(&batch) else {
            return;
        };
        let Some(pending) = self.pending.remove_batch(relay, batch) else {
            return;
        };
        debug!(%relay, %batch, purpose = ?info.purpose, "batch confirmed");
        self.stats.batches_confirmed += 1;
        self.health.on_work_confirmed(relay);
        let Some(state) = self.confirmed.get_mut(relay) else {
            return;
        };
        match info.purpose {
            Purpose::Items => state.confirm(&pending.items),
            Purpose::Layer1 => state.announcements_synced = true,
            Purpose::CatchUp | Purpose::Gap => {}
            Purpose::Poll => {
                if let Some(conn) = self.conns.get_mut(relay) {
                    conn.poll_from = Some(info.started_unix);
                    conn.next_poll_at = Some(now.instant + self.config.uncovered_poll_interval);
                }
            }
        }
    }

    /// Fails a batch: closes its subscriptions, drops its queued jobs and
    /// schedules its work to be planned again.
    pub(super) fn fail_batch(&mut self, now: Now, relay: &RelayUrl, batch: BatchId, reason: &str) {
        let Some(info) = self.batches.remove(&batch) else {
            return;
        };
        warn!(%relay, %batch, reason, "batch failed; its items will be planned again");
        self.stats.batches_failed += 1;
        self.pending.remove_batch(relay, batch);
        if let Some(conn) = self.conns.get_mut(relay) {
            conn.queue.retain(|queued| queued.batch != batch);
            let ids: Vec<SubscriptionId> = conn
                .subs
                .iter()
                .filter(|(_, sub)| sub.batch() == Some(batch))
                .map(|(id, _)| id.clone())
                .collect();
            let closing: Vec<(SubscriptionId, Sub)> = ids
                .into_iter()
                .filter_map(|id| conn.subs.shift_remove(&id).map(|sub| (id, sub)))
                .collect();
            for (id, sub) in closing {
                self.send_close(relay, id, &sub);
            }
        }
        let retry_at = now.instant + self.retry_delay(relay);
        match info.purpose {
            Purpose::Items => self.knowledge(relay).replan_at = Some(retry_at),
            Purpose::Layer1 => self.knowledge(relay).layer1_retry_at = Some(retry_at),
            Purpose::CatchUp => {
                // The gap was not caught up: sync those items fully again.
                if let Some(state) = self.confirmed.get_mut(relay) {
                    state.repos.clear();
                    state.root_events.clear();
                }
                self.knowledge(relay).replan_at = Some(retry_at);
            }
            Purpose::Gap => {
                // Live coverage is rebuilt later, catching up again from
                // the same moment.
                if let (Some(conn), Some(from)) = (self.conns.get_mut(relay), info.covers_from) {
                    conn.live_gap_since =
                        Some(conn.live_gap_since.map_or(from, |gap| gap.min(from)));
                }
                self.knowledge(relay).rebuild_live_at = Some(retry_at);
            }
            Purpose::Poll => {
                // `poll_from` stays: the next poll covers this one's span.
                if let Some(conn) = self.conns.get_mut(relay) {
                    conn.next_poll_at = Some(retry_at);
                }
            }
        }
    }

    /// Tells the relay a slot is no longer wanted.
    pub(super) fn send_close(&mut self, relay: &RelayUrl, id: SubscriptionId, sub: &Sub) {
        match sub {
            Sub::Negentropy { session: None, .. } => {}
            Sub::Negentropy { .. } => self.emit(Command::NegClose {
                relay: relay.clone(),
                id,
            }),
            _ => self.emit(Command::Unsubscribe {
                relay: relay.clone(),
                id,
            }),
        }
    }

    /// Fails batches without progress and treats unanswered NEG-OPENs as
    /// refusals.
    pub(super) fn expire_batches(&mut self, now: Now) {
        let timeout = self.config.batch_timeout;
        let stalled: Vec<(RelayUrl, BatchId)> = self
            .batches
            .iter()
            .filter(|(_, info)| info.last_progress + timeout <= now.instant)
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

    /// `true` while a job of `batch` holds a subscription slot on `relay`
    /// (queued jobs wait for a slot and do not time out).
    fn has_running_job(&self, relay: &RelayUrl, batch: BatchId) -> bool {
        self.conns
            .get(relay)
            .is_some_and(|conn| conn.subs.values().any(|sub| sub.batch() == Some(batch)))
    }

    /// Deadlines of batch timeouts.
    pub(super) fn batch_deadlines(&self) -> Vec<Option<Instant>> {
        let timeout = self.config.batch_timeout;
        self.batches
            .iter()
            .filter(|(batch, info)| self.has_running_job(&info.relay, **batch))
            .map(|(_, info)| Some(info.last_progress + timeout))
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

    /// The relay refused NIP-77 (NEG-ERR, a NOTICE, CLOSED on the session id,
    /// or silence): remember it, warn once, and sync the filter by REQ.
    pub(super) fn negentropy_refused(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        reason: &str,
        send_close: bool,
    ) {
        let Some(Sub::Negentropy {
            filter, session, ..
        }) = self.conns.get(relay).and_then(|conn| conn.subs.get(id))
        else {
            return;
        };
        let filter = filter.clone();
        let opened = session.is_some();
        let known = self.knowledge(relay);
        if !known.negentropy_refused {
            known.negentropy_refused = true;
            self.stats.negentropy_refusals += 1;
            warn!(%relay, reason, "relay refused NIP-77; falling back to REQ+EOSE");
        }
        if send_close && opened {
            self.emit(Command::NegClose {
                relay: relay.clone(),
                id: id.clone(),
            });
        }
        self.replace_job(now, relay, id, Job::Req(filter));
    }
}
