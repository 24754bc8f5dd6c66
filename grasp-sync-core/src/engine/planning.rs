//! Planning: the self-subscriber batch, new Layer 2+3 work for a relay, and
//! live subscriptions with their consolidation.

use nostr::prelude::{Event, Filter, Kind, RelayUrl, Timestamp};
use tracing::{debug, info, warn};

use super::runtime::{BatchInfo, Job, Purpose, QueuedJob, Sub};
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::filters::{announcement_filter, layer2_and_layer3_filters, FilterMode};
use crate::model::{BatchId, PendingBatch, PendingItems, SyncMethod};
use crate::nip34::{
    is_root_kind, parse_announcement, root_event_repo_refs, KIND_REPO_ANNOUNCEMENT,
};
use crate::planner::{compute_actions_for_changes, compute_actions_for_relay};

use super::frames::pack_filters;

impl SyncEngine {
    /// The self-subscriber batch: update the repository index from the
    /// accepted events, register newly listed relays, and plan what changed.
    pub(super) fn process_own_batch(&mut self, now: Now) {
        self.own.batch_deadline = None;
        let events = std::mem::take(&mut self.own.queued);
        debug!(events = events.len(), "processing self-subscriber batch");
        for event in &events {
            if event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
                self.apply_announcement(event);
            } else if is_root_kind(event.kind) {
                for repo in root_event_repo_refs(event).value {
                    self.repos.add_root_event(&repo, event.id);
                }
            }
        }
        let changes = self.repos.take_changes();
        for action in compute_actions_for_changes(&changes, &self.pending, &self.confirmed) {
            self.add_filters(now, &action.relay, action.items);
        }
    }

    /// A repository announcement from the own relay: its relays (after the
    /// policy, without our own service relays) become the repository's.
    fn apply_announcement(&mut self, event: &Event) {
        let announcement = match parse_announcement(event) {
            Ok(announcement) => announcement,
            Err(error) => {
                debug!(id = %event.id, %error, "ignoring malformed announcement");
                return;
            }
        };
        let service = &self.config.service_relays;
        if !service.is_empty()
            && !announcement
                .relays
                .iter()
                .any(|relay| service.contains(relay))
        {
            debug!(repo = %announcement.repo, "announcement does not list our service");
            return;
        }
        if self
            .own
            .announced_at
            .get(&announcement.repo)
            .is_some_and(|at| *at > event.created_at)
        {
            return;
        }
        self.own
            .announced_at
            .insert(announcement.repo.clone(), event.created_at);
        let listed: Vec<RelayUrl> = announcement
            .relays
            .into_iter()
            .filter(|relay| !service.contains(relay))
            .collect();
        let relays: Vec<RelayUrl> = listed
            .into_iter()
            .filter(|relay| self.relay_allowed(relay))
            .collect();
        let change = self.repos.set_repo_relays(&announcement.repo, relays);
        for relay in change.added {
            if self.confirmed.get(&relay).is_none() {
                info!(%relay, "discovered relay");
                self.register_relay(relay, false);
            }
        }
    }

    /// `true` if the relay policy allows `relay`. A refusal is counted and
    /// warned about once per URL (a sidecar tested on loopback without
    /// `allow_local_addresses` would otherwise sync nothing and look done).
    fn relay_allowed(&mut self, relay: &RelayUrl) -> bool {
        let Err(error) = self.config.relay_policy.check_relay_url(relay) else {
            return true;
        };
        self.stats.relays_refused += 1;
        let first = self.refused_relays.len() < REFUSED_RELAYS_REMEMBERED
            && self.refused_relays.insert(relay.clone());
        if first {
            warn!(%relay, %error, "relay refused by the relay policy; not syncing from it");
        } else {
            debug!(%relay, %error, "relay refused by the relay policy");
        }
        false
    }

    /// Plans everything `relay` should sync that is neither pending nor
    /// confirmed (`compute_actions` for one relay).
    pub(super) fn plan_relay(&mut self, now: Now, relay: &RelayUrl) {
        let Some(target) = self.repos.target(relay) else {
            return;
        };
        let action = compute_actions_for_relay(
            relay,
            &target.repos,
            &target.root_events,
            &self.pending,
            &self.confirmed,
        );
        if let Some(action) = action {
            self.add_filters(now, &action.relay, action.items);
        }
    }

    /// New items for a connected relay: live subscription and a historic
    /// batch.
    pub(super) fn add_filters(&mut self, now: Now, relay: &RelayUrl, items: PendingItems) {
        if !self.conns.contains_key(relay) || items.is_empty() {
            return;
        }
        self.add_live(now, relay, &items);
        let filters =
            layer2_and_layer3_filters(&items, self.config.chunk_size, FilterMode::FULL_HISTORY);
        let negentropy = !self.knowledge(relay).negentropy_refused;
        let jobs = filters
            .into_iter()
            .map(|filter| {
                if negentropy {
                    Job::Negentropy(filter)
                } else {
                    Job::Req(filter)
                }
            })
            .collect();
        let method = if negentropy {
            SyncMethod::Negentropy
        } else {
            SyncMethod::ReqEose
        };
        self.start_batch(now, relay, Purpose::Items, items, method, jobs);
    }

    /// Layer 1: the live announcement subscription and its history
    /// (negentropy when the relay allows and there is no `since`).
    pub(super) fn start_layer1(&mut self, now: Now, relay: &RelayUrl, since: Option<Timestamp>) {
        let needs_live = self
            .conns
            .get(relay)
            .is_some_and(|conn| conn.live_count() == 0);
        // Otherwise `pump` rebuilds live coverage, Layer 1 included, once the
        // relay allows.
        if needs_live && self.may_open_live(now, relay) {
            self.open_live(
                now,
                relay,
                vec![announcement_filter(FilterMode::Live)],
                LiveList::Layer1,
            );
        }
        let filter = announcement_filter(FilterMode::Historic { since });
        let negentropy = since.is_none() && !self.knowledge(relay).negentropy_refused;
        let (job, method) = if negentropy {
            (Job::Negentropy(filter), SyncMethod::Negentropy)
        } else {
            (Job::Req(filter), SyncMethod::ReqEose)
        };
        self.start_batch(
            now,
            relay,
            Purpose::Layer1,
            PendingItems::default(),
            method,
            vec![job],
        );
    }

    /// Quick reconnect: catch up the confirmed items from `since`.
    pub(super) fn start_catch_up(&mut self, now: Now, relay: &RelayUrl, since: Timestamp) {
        let Some(state) = self.confirmed.get(relay) else {
            return;
        };
        let items = PendingItems {
            repos: state.repos.clone(),
            root_events: state.root_events.clone(),
        };
        let mode = FilterMode::Historic { since: Some(since) };
        let jobs: Vec<Job> = layer2_and_layer3_filters(&items, self.config.chunk_size, mode)
            .into_iter()
            .map(Job::Req)
            .collect();
        if !jobs.is_empty() {
            self.start_batch(
                now,
                relay,
                Purpose::CatchUp,
                PendingItems::default(),
                SyncMethod::ReqEose,
                jobs,
            );
        }
    }

    /// Registers a batch and queues its jobs (catch-ups of live coverage,
    /// gaps and polls, ahead of other historic work: they are small and
    /// time-critical). Returns the batch, if it has work.
    pub(super) fn start_batch(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        purpose: Purpose,
        items: PendingItems,
        method: SyncMethod,
        jobs: Vec<Job>,
    ) -> Option<BatchId> {
        if jobs.is_empty() {
            return None;
        }
        let batch = self.next_batch_id();
        self.pending.insert(
            relay.clone(),
            PendingBatch::new(batch, items, method, now.instant),
        );
        self.batches.insert(
            batch,
            BatchInfo {
                relay: relay.clone(),
                purpose,
                jobs: jobs.len(),
                stores: 0,
                last_progress: now.instant,
                started_unix: now.unix,
                fetching: Default::default(),
                covers_from: None,
            },
        );
        if let Some(conn) = self.conns.get_mut(relay) {
            let queued = jobs.into_iter().map(|job| QueuedJob { batch, job });
            if matches!(purpose, Purpose::Gap | Purpose::Poll) {
                for job in queued.rev() {
                    conn.queue.push_front(job);
                }
            } else {
                conn.queue.extend(queued);
            }
        }
        Some(batch)
    }

    /// Adds live subscriptions for `items`, consolidating when the relay
    /// would get too many live filters or subscriptions. A relay already
    /// polled for what does not fit gets the new filters polled too.
    pub(super) fn add_live(&mut self, now: Now, relay: &RelayUrl, items: &PendingItems) {
        let filters = layer2_and_layer3_filters(items, self.config.chunk_size, FilterMode::Live);
        let polling = self
            .conns
            .get(relay)
            .is_some_and(|conn| !conn.uncovered.is_empty());
        // (A filter already polled is not added twice.)
        if polling {
            if let Some(conn) = self.conns.get_mut(relay) {
                conn.uncovered.extend(filters);
            }
            return;
        }
        if !self.rate_allows(now, relay) {
            if let Some(conn) = self.conns.get_mut(relay) {
                conn.deferred_live.extend(items);
                conn.live_gap_since.get_or_insert(now.unix);
            }
            return;
        }
        let filter_count = filters.len();
        let reqs = pack_filters(
            filters,
            self.filters_per_req(relay),
            self.frame_budget(relay),
        );
        let limit = self.sub_limit(relay);
        let live_slots = self.live_slots(relay);
        let Some(conn) = self.conns.get(relay) else {
            return;
        };
        let over_threshold =
            conn.incremental_filters + filter_count > self.config.consolidation_threshold;
        let live_wanted = conn.live_count() + conn.refused_live.len() + reqs.len();
        let over_budget = live_wanted > live_slots || conn.subs.len() + reqs.len() > limit;
        if over_threshold || over_budget {
            return self.rebuild_live(now, relay, items);
        }
        for filters in reqs {
            self.open_live(now, relay, filters, LiveList::Incremental);
        }
    }

    /// Opens one live REQ with `filters` and files it in `list`. When live
    /// coverage had been waiting, what was published meanwhile is caught up.
    pub(super) fn open_live(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        filters: Vec<Filter>,
        list: LiveList,
    ) {
        let id = self.next_sub_id("live");
        let Some(conn) = self.conns.get_mut(relay) else {
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
                filters: filters.clone(),
                opened_at: now.instant,
                answered: false,
            },
        );
        conn.last_opened = Some(id.clone());
        self.catch_up_gap(now, relay, &filters);
        self.emit(Command::Subscribe {
            relay: relay.clone(),
            id,
            filters,
        });
    }

    /// Consolidation: closes the live subscriptions and covers Layer 1 and
    /// the confirmed ∪ pending ∪ waiting ∪ `extra` items of Layers 2+3 with
    /// as few REQs as the relay's filter and frame limits allow (pending
    /// batches keep running). REQs beyond the live slots are not sent: their
    /// filters are polled with a `since` catch-up instead, so historic work
    /// always keeps its slots. During a rate-limit cooldown nothing is sent
    /// and `extra` waits.
    pub(super) fn rebuild_live(&mut self, now: Now, relay: &RelayUrl, extra: &PendingItems) {
        if !self.rate_allows(now, relay) {
            if let Some(conn) = self.conns.get_mut(relay) {
                conn.deferred_live.extend(extra);
                conn.live_gap_since.get_or_insert(now.unix);
            }
            return;
        }
        let mut items = self.pending.items(relay);
        if let Some(state) = self.confirmed.get(relay) {
            items.repos.extend(state.repos.iter().cloned());
            items.root_events.extend(state.root_events.iter().copied());
        }
        items.extend(extra);
        let per_req = self.filters_per_req(relay);
        let budget = self.frame_budget(relay);
        let limit = self.sub_limit(relay);
        let live_slots = self.live_slots(relay);
        let interval = self.config.uncovered_poll_interval;
        let Some(conn) = self.conns.get_mut(relay) else {
            return;
        };
        items.extend(&std::mem::take(&mut conn.deferred_live));
        // Their filters are part of the rebuilt set.
        conn.refused_live.clear();
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
        let mut filters = vec![announcement_filter(FilterMode::Live)];
        filters.extend(layer2_and_layer3_filters(
            &items,
            self.config.chunk_size,
            FilterMode::Live,
        ));
        let mut reqs = pack_filters(filters, per_req, budget).into_iter();
        let covered: Vec<Vec<Filter>> = reqs.by_ref().take(live_slots).collect();
        let uncovered: indexmap::IndexSet<Filter> = reqs.flatten().collect();
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
        if uncovered.is_empty() {
            conn.poll_from = None;
            conn.next_poll_at = None;
        } else {
            if conn.uncovered.is_empty() {
                info!(%relay, uncovered = uncovered.len(), "live filters do not fit the relay's limits; polling the rest");
            }
            conn.poll_from.get_or_insert(now.unix);
            conn.next_poll_at.get_or_insert(now.instant + interval);
        }
        conn.uncovered = uncovered;
        // Slots free now (historic work keeps its own); the rest of the
        // covered REQs wait for a slot.
        let available = limit.saturating_sub(conn.subs.len()).min(live_slots);
        let mut covered = covered.into_iter();
        let opened: Vec<Vec<Filter>> = covered.by_ref().take(available).collect();
        let waiting = conn.refused_live.len();
        conn.refused_live.extend(covered);
        if conn.refused_live.len() > waiting {
            conn.live_gap_since.get_or_insert(now.unix);
        }
        self.stats.consolidations += 1;
        for id in closing {
            self.emit(Command::Unsubscribe {
                relay: relay.clone(),
                id,
            });
        }
        for filters in opened {
            self.open_live(now, relay, filters, LiveList::Base);
        }
    }

    /// Starts the `since` poll of every relay whose uncovered live filters
    /// are due.
    pub(super) fn run_polls(&mut self, now: Now) {
        let due: Vec<RelayUrl> = self
            .conns
            .iter()
            .filter(|(_, conn)| conn.next_poll_at.is_some_and(|at| at <= now.instant))
            .map(|(relay, _)| relay.clone())
            .collect();
        let window = self.config.quick_reconnect_window.as_secs();
        for relay in due {
            let Some(conn) = self.conns.get_mut(&relay) else {
                continue;
            };
            conn.next_poll_at = None;
            if conn.uncovered.is_empty() {
                continue;
            }
            let from = conn.poll_from.unwrap_or(now.unix);
            let since = Timestamp::from_secs(from.as_secs().saturating_sub(window));
            let filters: Vec<Filter> = conn.uncovered.iter().cloned().collect();
            debug!(%relay, filters = filters.len(), "polling live filters that do not fit");
            self.stats.uncovered_polls += 1;
            let jobs = self.poll_jobs(&relay, &filters, since);
            let batch = self.start_batch(
                now,
                &relay,
                Purpose::Poll,
                PendingItems::default(),
                SyncMethod::ReqEose,
                jobs,
            );
            if let Some(info) = batch.and_then(|batch| self.batches.get_mut(&batch)) {
                info.covers_from = Some(from);
            }
        }
    }
}

/// Relay URLs refused by the policy that are warned about once each.
const REFUSED_RELAYS_REMEMBERED: usize = 10_000;

/// Closed live subscriptions whose late events are still accepted.
const CLOSED_LIVE_KEPT: usize = 64;

/// Which list of live subscriptions a new one belongs to.
#[derive(Clone, Copy, Debug)]
pub(super) enum LiveList {
    /// The Layer 1 subscription opened at connect.
    Layer1,
    /// Opened by a consolidation (or re-sent after a refusal).
    Base,
    /// Added for new items since the last consolidation.
    Incremental,
}
