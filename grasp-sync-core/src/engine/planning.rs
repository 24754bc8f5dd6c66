//! Planning: the self-subscriber batch (announcements and root events into
//! the repository index), new Layer 1 and Layer 2+3 work for a relay as
//! batches of jobs (`compute_actions` decides what is new).

use std::collections::HashSet;

use nostr::prelude::{Event, EventId, Kind, RelayUrl, Timestamp};
use tracing::{debug, warn};

use super::live::LiveList;
use super::runtime::{Job, Purpose};
use super::timer_table::EngineTimer;
use super::SyncEngine;
use crate::clock::Now;
use crate::filters::{announcement_filter, layer2_and_layer3_filters, FilterMode};
use crate::model::{BatchId, PendingItems, SyncMethod};
use crate::nip34::{
    is_root_kind, parse_announcement, root_event_repo_refs, KIND_REPO_ANNOUNCEMENT,
};
use crate::planner::{compute_actions_for_changes, compute_actions_for_relay};

impl SyncEngine {
    /// The self-subscriber batch: update the repository index from the
    /// accepted events, register newly listed relays, and plan what changed.
    pub(super) fn process_own_batch(&mut self, now: Now) {
        self.timers.clear(EngineTimer::OwnBatch);
        let events = std::mem::take(&mut self.own.queued);
        debug!(events = events.len(), "processing self-subscriber batch");
        for event in &events {
            if event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
                self.apply_announcement(event);
                if !self.config.service_relays.is_empty() {
                    self.accept_ours(now, event);
                }
            } else if is_root_kind(event.kind) {
                for repo in root_event_repo_refs(event).value {
                    if self.root_repo_allowed(&repo) {
                        self.repos.add_root_event(&repo, event.id);
                    }
                }
            }
        }
        let changes = self.repos.take_changes();
        for action in compute_actions_for_changes(&changes, &self.relays) {
            self.add_filters(now, &action.relay, action.items);
        }
    }

    /// A repository announcement from the own relay: its relays (after the
    /// policy, without our own service relays) become the repository's.
    pub(super) fn apply_announcement(&mut self, event: &Event) {
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
        let this = (event.created_at, event.id);
        // The applied one stands if it is newer, or as new with an id no
        // higher (the same event coming back included).
        let stands =
            |&(at, id): &(Timestamp, EventId)| at > this.0 || (at == this.0 && id <= this.1);
        if self
            .own
            .announced_at
            .get(&announcement.repo)
            .is_some_and(stands)
        {
            return;
        }
        self.own
            .announced_at
            .insert(announcement.repo.clone(), this);
        let listed: Vec<RelayUrl> = announcement
            .relays
            .into_iter()
            .filter(|relay| !service.contains(relay) && !self.own.is_for(relay))
            .collect();
        let allowed: Vec<RelayUrl> = listed
            .into_iter()
            .filter(|relay| self.relay_allowed(relay))
            .collect();
        let relays = self.relays_within_caps(&announcement.repo, allowed);
        self.set_repo_relays(&announcement.repo, relays);
    }

    /// `true` if the relay policy allows `relay`. A refusal is counted and
    /// warned about once per URL (a sidecar tested on loopback without
    /// `allow_local_addresses` would otherwise sync nothing and look done).
    pub(super) fn relay_allowed(&mut self, relay: &RelayUrl) -> bool {
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
        let action =
            compute_actions_for_relay(relay, &target.repos, &target.root_events, &self.relays);
        if let Some(action) = action {
            self.add_filters(now, &action.relay, action.items);
        }
    }

    /// New items for a connected relay: live subscription and a historic
    /// batch.
    pub(super) fn add_filters(&mut self, now: Now, relay: &RelayUrl, items: PendingItems) {
        if !self.relays.is_connected(relay) || items.is_empty() {
            return;
        }
        self.add_live(now, relay, &items);
        // Replies to root events the store took as new just now are new to
        // the store too: asking it for them costs a scan per session and
        // finds only what this sync brought. On a NIP-77 relay they are
        // reconciled against what the relay sent this sync (a status that
        // came with its repository's reconciliation is not fetched again);
        // elsewhere a REQ brings them in one go. Once: the next relay
        // planned for the root, and every later pass, reconcile with the
        // store.
        let (fresh, held): (HashSet<EventId>, HashSet<EventId>) = items
            .root_events
            .iter()
            .partition(|id| self.stores.fresh_roots.take(id).is_some());
        let sent = self.reconciles_fresh_roots(relay);
        if sent {
            self.stats.fresh_roots_reconciled += fresh.len() as u64;
        } else {
            self.stats.fresh_roots_by_req += fresh.len() as u64;
        }
        let reconciled = PendingItems {
            repos: items.repos.clone(),
            root_events: held,
        };
        let fresh = PendingItems {
            repos: HashSet::new(),
            root_events: fresh,
        };
        let chunk = self.config.chunk_size;
        let filters = layer2_and_layer3_filters(&reconciled, chunk, FilterMode::FULL_HISTORY);
        let session = self.relays.view(relay);
        let (reconcile, req): (Vec<_>, Vec<_>) = filters.into_iter().partition(|filter| {
            session.sync_method(filter, &self.config) == SyncMethod::Negentropy
        });
        let mut jobs: Vec<Job> = reconcile.into_iter().map(Job::Negentropy).collect();
        jobs.extend(self.relays.view(relay).req_jobs(req, &self.config));
        let fresh_filters = layer2_and_layer3_filters(&fresh, chunk, FilterMode::FULL_HISTORY);
        if sent {
            jobs.extend(fresh_filters.into_iter().map(Job::NegentropySent));
        } else {
            jobs.extend(
                self.relays
                    .view(relay)
                    .req_jobs(fresh_filters, &self.config),
            );
        }
        let reconciles = jobs
            .iter()
            .any(|job| matches!(job, Job::Negentropy(_) | Job::NegentropySent(_)));
        let method = if reconciles {
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
            .relays
            .conn(relay)
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
        let method = self.relays.view(relay).sync_method(&filter, &self.config);
        let job = match method {
            SyncMethod::Negentropy => Job::Negentropy(filter),
            SyncMethod::ReqEose => Job::Req(filter),
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
        self.relays
            .entry(relay.clone())
            .start_batch(batch, now, purpose, items, method, jobs);
        Some(batch)
    }
}

/// Relay URLs refused by the policy that are warned about once each.
const REFUSED_RELAYS_REMEMBERED: usize = 10_000;
