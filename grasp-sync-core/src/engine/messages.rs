//! Relay messages: EVENT (verified and matched before it is stored), EOSE,
//! CLOSED, NOTICE, OK and the NIP-77 replies.

use nostr::filter::MatchEventOptions;
use nostr::prelude::{Event, RelayMessage, RelayUrl, SubscriptionId};
use tracing::{debug, info, warn};

use super::classify::{classify, Classified};
use super::runtime::{Job, Sub};
use super::session::Step;
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::pagination::PageOutcome;

/// Below this many events a page that repeats one second is taken for the
/// end of the results, not for a relay's page limit (no relay caps pages
/// that low), unless the relay told us its limit.
const PLAUSIBLE_PAGE_LEN: usize = 50;

impl SyncEngine {
    pub(super) fn on_relay_message(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        message: RelayMessage<'_>,
    ) {
        let Some(conn) = self.conns.get_mut(relay) else {
            return self.ignored(relay, "message from a relay not connected");
        };
        let answered = match &message {
            RelayMessage::Event {
                subscription_id, ..
            }
            | RelayMessage::Closed {
                subscription_id, ..
            }
            | RelayMessage::NegMsg {
                subscription_id, ..
            }
            | RelayMessage::NegErr {
                subscription_id, ..
            } => Some(subscription_id.as_ref()),
            RelayMessage::EndOfStoredEvents(id) => Some(id.as_ref()),
            _ => None,
        };
        conn.last_heard = now.instant;
        if let Some(id) = answered {
            conn.unanswered.retain(|waiting| waiting != id);
            conn.frame_answered(id);
        }
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => self.on_event(now, relay, &subscription_id, event.into_owned()),
            RelayMessage::EndOfStoredEvents(id) => self.on_eose(now, relay, &id),
            RelayMessage::Closed {
                subscription_id,
                message,
            } => self.on_closed(now, relay, &subscription_id, &message),
            RelayMessage::Notice(message) => self.on_notice(now, relay, &message),
            RelayMessage::Ok {
                status: false,
                message,
                ..
            } if classify(&message).rate_limited => self.rate_limited(now, relay),
            RelayMessage::NegMsg {
                subscription_id,
                message,
            } => self.on_neg_msg(now, relay, &subscription_id, &message),
            RelayMessage::NegErr {
                subscription_id,
                message,
            } => self.on_neg_err(now, relay, &subscription_id, &message),
            _ => {}
        }
    }

    /// Trust: store an event only if it matches a filter of its subscription
    /// and its id and signature verify.
    fn on_event(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId, event: Event) {
        let Some(conn) = self.conns.get_mut(relay) else {
            return;
        };
        if !conn.subs.contains_key(id) {
            // Sent before the relay saw our CLOSE of a consolidated live
            // subscription: still something we asked for.
            let matches = conn.closed_live.get(id).map(|filters| {
                filters
                    .iter()
                    .any(|filter| filter.match_event(&event, MatchEventOptions::new()))
            });
            return match matches {
                Some(true) => self.store_verified(now, relay, event),
                Some(false) => self.stats.dropped_off_filter += 1,
                None => self.stats.dropped_unknown_subscription += 1,
            };
        }
        let Some(sub) = conn.subs.get_mut(id) else {
            return;
        };
        let options = MatchEventOptions::new();
        let matches = match &*sub {
            Sub::Live { filters, .. } => filters
                .iter()
                .any(|filter| filter.match_event(&event, options)),
            Sub::Req { paging, .. } => paging.matches(&event),
            Sub::Fetch { filter, .. } => filter.match_event(&event, options),
            Sub::Poll { filters, .. } => filters
                .iter()
                .any(|filter| filter.match_event(&event, options)),
            Sub::Negentropy { .. } => false,
        };
        if !matches {
            self.stats.dropped_off_filter += 1;
            debug!(%relay, id = %event.id, "dropped event outside the subscription's filters");
            return;
        }
        if !self.verifies(relay, &event) {
            return;
        }
        let Some(sub) = self
            .conns
            .get_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        let batch = match sub {
            Sub::Req { batch, paging } => {
                paging.on_event(event.id, event.created_at);
                Some(*batch)
            }
            Sub::Fetch { batch, missing, .. } => {
                missing.remove(&event.id);
                Some(*batch)
            }
            Sub::Poll { batch, pages, .. } => {
                for page in pages.iter_mut().filter(|page| page.matches(&event)) {
                    page.on_event(event.id, event.created_at);
                }
                Some(*batch)
            }
            _ => None,
        };
        if let Some(batch) = batch {
            self.progress(now, batch);
        }
        self.store(now, relay, event, batch);
    }

    /// `true` if the event's id and signature verify; counts it otherwise.
    fn verifies(&mut self, relay: &RelayUrl, event: &Event) -> bool {
        let valid = event.verify().is_ok();
        if !valid {
            self.stats.dropped_forged += 1;
            warn!(%relay, id = %event.id, "dropped event with a bad id or signature");
        }
        valid
    }

    /// Stores an event that matched: only if its id and signature verify.
    fn store_verified(&mut self, now: Now, relay: &RelayUrl, event: Event) {
        if self.verifies(relay, &event) {
            self.store(now, relay, event, None);
        }
    }

    fn on_eose(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(conn) = self.conns.get_mut(relay) else {
            return;
        };
        let known = self.known.get(relay);
        let Some(sub) = conn.subs.get_mut(id) else {
            return;
        };
        match sub {
            Sub::Req { batch, paging } => {
                let batch = *batch;
                let page_limit =
                    known.and_then(|known| known.known_page_limit(&paging.original_filter));
                let crowded_before = paging.crowded_seconds.len();
                let outcome = paging.on_eose(page_limit);
                let plausible = page_limit.unwrap_or(PLAUSIBLE_PAGE_LEN);
                let crowded = paging.crowded_seconds[crowded_before..]
                    .iter()
                    .filter(|second| second.page_len >= plausible)
                    .count();
                if crowded > 0 {
                    self.stats.crowded_seconds += crowded as u64;
                    warn!(%relay, "a full page of events shares one second; events beyond the page may be missing");
                }
                self.progress(now, batch);
                match outcome {
                    PageOutcome::NextPage(filter) if self.rate_allows(now, relay) => {
                        self.emit(Command::Subscribe {
                            relay: relay.clone(),
                            id: id.clone(),
                            filters: vec![filter],
                        })
                    }
                    PageOutcome::NextPage(_) => {
                        // Over the learned rate: free the slot, resume later.
                        self.emit(Command::Unsubscribe {
                            relay: relay.clone(),
                            id: id.clone(),
                        });
                        self.pause_page(now, relay, id);
                    }
                    PageOutcome::Complete => {
                        self.emit(Command::Unsubscribe {
                            relay: relay.clone(),
                            id: id.clone(),
                        });
                        self.finish_job(now, relay, id);
                    }
                }
            }
            Sub::Fetch {
                batch,
                filter,
                missing,
                fruitless,
            } => {
                let batch = *batch;
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
                let retry = !missing.is_empty() && fruitless < self.config.fetch_attempts;
                let filter = filter.clone();
                if !missing.is_empty() && !retry {
                    self.stats.fetch_missing += missing.len() as u64;
                    warn!(%relay, missing = missing.len(), "relay did not return ids its negentropy set holds");
                }
                if retry && fruitless > 0 {
                    self.stats.fetch_retries += 1;
                }
                self.emit(Command::Unsubscribe {
                    relay: relay.clone(),
                    id: id.clone(),
                });
                if retry {
                    let jobs = self.fetch_jobs(relay, &filter, &missing, fruitless);
                    self.add_jobs(relay, batch, jobs);
                }
                self.finish_job(now, relay, id);
            }
            Sub::Poll { batch, pages, .. } => {
                let batch = *batch;
                // A filter whose page may have been cut (relays clamp
                // silently) continues paginated from where its page ended.
                let full: Vec<Job> = pages
                    .iter_mut()
                    .filter_map(|page| {
                        let limit =
                            known.and_then(|known| known.known_page_limit(&page.original_filter));
                        match page.on_eose(limit) {
                            PageOutcome::NextPage(_) => Some(Job::Page(Box::new(page.clone()))),
                            PageOutcome::Complete => None,
                        }
                    })
                    .collect();
                self.emit(Command::Unsubscribe {
                    relay: relay.clone(),
                    id: id.clone(),
                });
                if !full.is_empty() {
                    self.add_jobs(relay, batch, full);
                }
                self.finish_job(now, relay, id);
            }
            Sub::Live { answered, .. } => *answered = true,
            Sub::Negentropy { .. } => {}
        }
    }

    fn on_closed(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId, message: &str) {
        let classified = classify(message);
        if !self
            .conns
            .get(relay)
            .is_some_and(|conn| conn.subs.contains_key(id))
        {
            return;
        }
        info!(%relay, %id, message, "subscription closed by relay");
        let slot_refused = self.note_limits(now, relay, &classified);
        let Some(sub) = self.conns.get(relay).and_then(|conn| conn.subs.get(id)) else {
            return;
        };
        match sub {
            Sub::Live { .. } => {
                if slot_refused {
                    self.requeue_live(now, relay, id);
                } else {
                    if let Some(conn) = self.conns.get_mut(relay) {
                        conn.subs.shift_remove(id);
                        conn.forget_live(id);
                        // Live coverage is gone until the rebuild: the rebuilt
                        // REQs fetch what was published meanwhile.
                        conn.live_gap_since.get_or_insert(now.unix);
                    }
                    let delay = self.retry_delay(relay);
                    self.knowledge(relay).rebuild_live_at = Some(now.instant + delay);
                }
            }
            Sub::Negentropy { filter, .. } => {
                let filter = filter.clone();
                if slot_refused {
                    self.replace_job(now, relay, id, Job::Negentropy(filter));
                } else {
                    self.negentropy_refused(now, relay, id, message, false);
                }
            }
            Sub::Req { paging, batch } => {
                let (paging, batch) = (paging.clone(), *batch);
                if slot_refused {
                    self.replace_job(now, relay, id, Job::Page(Box::new(paging)));
                } else {
                    self.fail_batch(now, relay, batch, message);
                }
            }
            Sub::Fetch {
                filter,
                batch,
                fruitless,
                ..
            } => {
                let (filter, batch, fruitless) = (filter.clone(), *batch, *fruitless);
                if slot_refused {
                    self.replace_job(now, relay, id, Job::Fetch { filter, fruitless });
                } else {
                    self.fail_batch(now, relay, batch, message);
                }
            }
            Sub::Poll { filters, batch, .. } => {
                let (filters, batch) = (filters.clone(), *batch);
                if slot_refused {
                    self.replace_job(now, relay, id, Job::Poll(filters));
                } else {
                    self.fail_batch(now, relay, batch, message);
                }
            }
        }
    }

    /// Learns from a refusal: rate limits start the cooldown, a refused
    /// subscription lowers the relay's known limit. Returns `true` when the
    /// refused subscription should simply be retried later.
    fn note_limits(&mut self, now: Now, relay: &RelayUrl, classified: &Classified) -> bool {
        if classified.too_many_subscriptions {
            let open = self.conns.get(relay).map_or(1, |conn| conn.subs.len());
            // Never below two: one live and one historic slot.
            let limit = open.saturating_sub(1).max(2);
            let known = self.knowledge(relay);
            known.learned_sub_limit =
                Some(known.learned_sub_limit.map_or(limit, |old| old.min(limit)));
            self.stats.subscription_refusals += 1;
            warn!(%relay, limit, "relay refused a subscription; lowering its subscription limit");
        }
        if classified.too_many_subscriptions {
            // The cooldown, without halving the learned rate: the limit
            // learned above is what prevents the next refusal.
            self.stats.rate_limits += 1;
            self.health.on_rate_limited(relay, now.instant);
        } else if classified.rate_limited {
            self.rate_limited(now, relay);
        }
        classified.too_many_subscriptions || classified.rate_limited
    }

    pub(super) fn rate_limited(&mut self, now: Now, relay: &RelayUrl) {
        self.stats.rate_limits += 1;
        let already = self
            .health
            .get(relay)
            .is_some_and(|health| health.is_rate_limited(now.instant));
        self.health.on_rate_limited(relay, now.instant);
        if !already {
            // Once per episode: halve the REQs we send per window.
            let window = self.rate_window();
            let opened = self
                .conns
                .get_mut(relay)
                .map_or(1, |conn| conn.opens_within(now.instant, window));
            let known = self.knowledge(relay);
            let rate = (known.learned_rate.unwrap_or(opened).min(opened) / 2).max(1);
            known.learned_rate = Some(rate);
        }
        warn!(%relay, "rate-limited by relay; pausing new subscriptions for the cooldown");
    }

    fn on_notice(&mut self, now: Now, relay: &RelayUrl, message: &str) {
        let classified = classify(message);
        info!(%relay, message, "notice");
        if classified.too_many_subscriptions {
            self.note_limits(now, relay, &classified);
            // A NOTICE names no subscription: relays answer in order, so it
            // refuses the oldest subscription not answered yet.
            if let Some(id) = self.oldest_unanswered(relay) {
                self.retry_refused_slot(now, relay, &id);
            }
            return;
        }
        if classified.rate_limited {
            self.rate_limited(now, relay);
            if let Some(id) = self.oldest_unanswered(relay) {
                self.retry_refused_slot(now, relay, &id);
            }
            return;
        }
        let waiting: Vec<SubscriptionId> = self
            .conns
            .get(relay)
            .map(|conn| {
                conn.subs
                    .iter()
                    .filter(|(_, sub)| {
                        matches!(
                            sub,
                            Sub::Negentropy {
                                session: Some(_),
                                answered: false,
                                ..
                            }
                        )
                    })
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in waiting {
            self.negentropy_refused(now, relay, &id, message, true);
        }
    }

    /// The oldest open subscription the relay has not answered at all: the
    /// one a NOTICE refusal is about, since relays answer in order.
    fn oldest_unanswered(&mut self, relay: &RelayUrl) -> Option<SubscriptionId> {
        let conn = self.conns.get_mut(relay)?;
        while let Some(id) = conn.unanswered.pop_front() {
            if conn.subs.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Retries the slot `id` later after the relay refused it.
    fn retry_refused_slot(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(sub) = self.conns.get(relay).and_then(|conn| conn.subs.get(id)) else {
            return;
        };
        let job = match sub {
            Sub::Live { .. } => None,
            Sub::Req { paging, .. } => Some(Job::Page(Box::new(paging.clone()))),
            Sub::Negentropy { filter, .. } => Some(Job::Negentropy(filter.clone())),
            Sub::Fetch {
                filter, fruitless, ..
            } => Some(Job::Fetch {
                filter: filter.clone(),
                fruitless: *fruitless,
            }),
            Sub::Poll { filters, .. } => Some(Job::Poll(filters.clone())),
        };
        // The guess may be wrong: tell the relay too (a CLOSE of an unknown
        // id is harmless), so it never holds more than we count.
        self.emit(Command::Unsubscribe {
            relay: relay.clone(),
            id: id.clone(),
        });
        match job {
            Some(job) => self.replace_job(now, relay, id, job),
            None => self.requeue_live(now, relay, id),
        }
    }

    /// Moves a paginated subscription back to the queue, keeping its paging.
    fn pause_page(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let paging = match self.conns.get(relay).and_then(|conn| conn.subs.get(id)) {
            Some(Sub::Req { paging, .. }) => paging.clone(),
            _ => return,
        };
        self.replace_job(now, relay, id, Job::Page(Box::new(paging)));
    }

    /// A refused live REQ is sent again, unchanged, when the relay allows.
    fn requeue_live(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(conn) = self.conns.get_mut(relay) else {
            return;
        };
        if let Some(Sub::Live { filters, .. }) = conn.subs.shift_remove(id) {
            conn.forget_live(id);
            conn.refused_live.push(filters);
            conn.live_gap_since.get_or_insert(now.unix);
        }
    }

    fn on_neg_msg(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId, message: &str) {
        let Some(Sub::Negentropy {
            batch,
            filter,
            session: Some(session),
            answered,
            ..
        }) = self
            .conns
            .get_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        *answered = true;
        let batch = *batch;
        let step = session.step(message);
        match step {
            Ok(Step::Continue(next)) => {
                self.progress(now, batch);
                self.emit(Command::NegMsg {
                    relay: relay.clone(),
                    id: id.clone(),
                    message: next,
                });
            }
            Ok(Step::Done) => {
                let need = std::mem::take(&mut session.need);
                let filter = filter.clone();
                debug!(%relay, missing = need.len(), "negentropy round finished");
                self.stats.negentropy_rounds += 1;
                self.emit(Command::NegClose {
                    relay: relay.clone(),
                    id: id.clone(),
                });
                // Another filter of the batch may have found the same ids
                // missing (a reply tagging its root with both `e` and `E`):
                // each id is fetched once per batch.
                let need: Vec<_> = match self.batches.get_mut(&batch) {
                    Some(info) => need
                        .into_iter()
                        .filter(|id| info.fetching.insert(*id))
                        .collect(),
                    None => need,
                };
                let jobs = self.fetch_jobs(relay, &filter, &need, 0);
                self.add_jobs(relay, batch, jobs);
                self.finish_job(now, relay, id);
            }
            Err(error) => {
                let filter = filter.clone();
                warn!(%relay, %error, "bad negentropy message; using REQ for this filter");
                self.emit(Command::NegClose {
                    relay: relay.clone(),
                    id: id.clone(),
                });
                self.replace_job(now, relay, id, Job::Req(filter));
            }
        }
    }

    fn on_neg_err(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId, message: &str) {
        let classified = classify(message);
        let Some(Sub::Negentropy { filter, .. }) =
            self.conns.get(relay).and_then(|conn| conn.subs.get(id))
        else {
            return;
        };
        let filter = filter.clone();
        if self.note_limits(now, relay, &classified) {
            self.replace_job(now, relay, id, Job::Negentropy(filter));
        } else {
            self.negentropy_refused(now, relay, id, message, false);
        }
    }
}
