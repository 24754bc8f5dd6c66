//! Starting work within a relay's limits: live subscriptions within the
//! live slots, historic jobs in the rest, each job's first frame.

use super::live::LiveList;
use super::timer_table::RelayTimer;
use std::collections::HashSet;

use nostr::prelude::{EventId, RelayUrl};

use super::runtime::{Job, QueuedJob, ReqWatch, Sub};
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::model::SyncMethod;
use crate::pagination::PaginationState;

impl SyncEngine {
    /// Starts waiting live subscriptions and queued jobs while the relay is
    /// not rate-limited and has free subscription slots.
    pub(super) fn pump(&mut self, now: Now, relay: &RelayUrl) {
        self.send_waiting_live(now, relay);
        let live_slots = self.relays.view(relay).live_slots(&self.config);
        let (waiting_live, no_live, over, polling) = match self.relays.conn_mut(relay) {
            Some(conn) => (
                std::mem::take(&mut conn.deferred_live),
                conn.live_count() == 0 && conn.waiting_live.is_empty(),
                conn.live_count() + conn.waiting_live.len() > live_slots,
                !conn.uncovered.is_empty(),
            ),
            None => return,
        };
        // Layer 1 live went with a consolidation that found no slot, or the
        // live slots shrank (limits told or learned after connecting): cover
        // everything again within them.
        let rebuild = (no_live && !polling) || over;
        let can = self.relays.rate_allows(relay, now.instant, &self.config)
            && (live_slots == 0 || self.relays.may_open(relay, now.instant, &self.config));
        if rebuild && can {
            self.rebuild_live(now, relay, &waiting_live);
        } else if !waiting_live.is_empty() {
            self.add_live(now, relay, &waiting_live);
        }
        let rebuild_waiting = self
            .relays
            .get(relay)
            .is_some_and(|known| known.timers.is_set(RelayTimer::RebuildLive));
        if let Some(conn) = self.relays.conn_mut(relay) {
            if conn.deferred_live.is_empty() && conn.waiting_live.is_empty() && !rebuild_waiting {
                conn.live_gap_since = None;
            }
        }
        while self.may_open_historic(now, relay) {
            let Some(queued) = self
                .relays
                .conn_mut(relay)
                .and_then(|conn| conn.queue.pop_front())
            else {
                return;
            };
            self.start_job(now, relay, queued);
        }
    }

    /// [`RelaySession::may_open_historic`](super::relay_session::RelaySession::may_open_historic)
    /// on `relay`, with the store's backpressure.
    fn may_open_historic(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let store_keeps_up = self.store_keeps_up();
        self.relays.get_mut(relay).is_some_and(|session| {
            session.may_open_historic(now.instant, store_keeps_up, &self.config)
        })
    }

    /// `false` while more than `max_unconfirmed_stores` events wait for the
    /// store: new historic jobs and next pages wait (backpressure).
    pub(super) fn store_keeps_up(&self) -> bool {
        self.stores.in_flight() < self.config.max_unconfirmed_stores
    }

    /// [`RelaySession::may_open_live`](super::relay_session::RelaySession::may_open_live) on `relay`.
    pub(super) fn may_open_live(&mut self, now: Now, relay: &RelayUrl) -> bool {
        self.relays
            .get_mut(relay)
            .is_some_and(|session| session.may_open_live(now.instant, &self.config))
    }

    /// Sends waiting live REQs (refused, or not sent for want of a slot), as
    /// far as the relay allows.
    pub(super) fn send_waiting_live(&mut self, now: Now, relay: &RelayUrl) {
        while self.may_open_live(now, relay) {
            let Some(filters) = self
                .relays
                .conn_mut(relay)
                .and_then(|conn| conn.waiting_live.pop())
            else {
                return;
            };
            self.open_live(now, relay, filters, LiveList::Base);
        }
    }

    pub(super) fn start_job(&mut self, now: Now, relay: &RelayUrl, queued: QueuedJob) {
        let QueuedJob { batch, job } = queued;
        let budget = self.relays.view(relay).frame_budget(&self.config);
        // What was learned since the job was planned may change how its
        // filter is synced.
        let job = match job {
            Job::Negentropy(filter) | Job::NegentropySent(filter)
                if self.relays.view(relay).sync_method(&filter, &self.config)
                    == SyncMethod::ReqEose =>
            {
                Job::Req(filter)
            }
            job => job,
        };
        let mut sent_items = None;
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
                    filter.limit = Some(self.relays.view(relay).page_limit(&self.config));
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
                        watch: self.watch_request(now, relay),
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
                        watch: self.watch_request(now, relay),
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
                    sent: false,
                };
                (id, sub)
            }
            Job::NegentropySent(filter) => {
                let id = self.next_sub_id("neg");
                sent_items = Some(self.sent_items(now, relay, batch, &filter));
                let sub = Sub::Negentropy {
                    batch,
                    filter,
                    session: None,
                    answered: false,
                    opened_at: now.instant,
                    sent: true,
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
                let pages: Vec<PaginationState> =
                    filters.iter().cloned().map(PaginationState::new).collect();
                let received = vec![Vec::new(); pages.len()];
                (
                    id,
                    Sub::Poll {
                        batch,
                        filters,
                        pages,
                        received,
                        watch: self.watch_request(now, relay),
                    },
                )
            }
        };
        if let Some(conn) = self.relays.conn_mut(relay) {
            conn.subs.insert(id.clone(), sub);
            conn.last_opened = Some(id.clone());
        }
        self.progress(now, relay, batch);
        if let Some(items) = sent_items {
            // No store query: the local side is known already.
            self.open_negentropy(now, relay, &id, &items);
        }
    }

    /// Numbers a historic REQ frame sent to `relay` at `now`.
    pub(super) fn watch_request(&mut self, now: Now, relay: &RelayUrl) -> ReqWatch {
        match self.relays.conn_mut(relay) {
            Some(conn) => conn.watch_request(now.instant),
            None => ReqWatch {
                sent: 0,
                heard_at: now.instant,
            },
        }
    }
}
