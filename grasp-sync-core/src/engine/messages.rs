//! Relay messages routed to what handles them (EVENT to [`trust`](super::trust),
//! NOTICE/OK to [`refusals`](super::refusals), NEG-* to [`nip77`](super::nip77)),
//! and what an EOSE or a CLOSED means for the subscription it ends: the
//! next page, a finished job, a fetch asked again, a refused slot put back.

use nostr::prelude::{RelayMessage, RelayUrl, SubscriptionId};
use tracing::{info, warn};

use super::classify::classify;
use super::runtime::{Job, Sub};
use super::trust::Arrived;
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::pagination::PageOutcome;
use crate::verified::{Forged, VerifiedEvent};

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
        if !self.heard(now, relay, answered) {
            return;
        }
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => self.on_event(
                now,
                relay,
                &subscription_id,
                Arrived::Unchecked(event.into_owned()),
            ),
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

    /// An EVENT the driver verified already (or found forged).
    pub(super) fn on_checked_event(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Forged>,
    ) {
        if !self.heard(now, relay, Some(subscription_id)) {
            return;
        }
        match checked {
            Ok(event) => self.on_event(now, relay, subscription_id, Arrived::Verified(event)),
            Err(forged) => self.forged(relay, &forged),
        }
    }

    /// Notes that `relay` spoke (and answered `answered`,
    /// [`RelaySession::heard`](super::relay_session::RelaySession::heard));
    /// `false` (counted as ignored) if it is not connected.
    fn heard(&mut self, now: Now, relay: &RelayUrl, answered: Option<&SubscriptionId>) -> bool {
        match self.relays.connected_mut(relay) {
            Some(session) => {
                session.heard(now.instant, answered);
                true
            }
            None => {
                self.ignored(relay, "message from a relay not connected");
                false
            }
        }
    }

    pub(super) fn on_eose(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let group_limit = self.relays.view(relay).group_page_limit(&self.config);
        let page_limit = self.relays.view(relay).page_limit(&self.config);
        let Some(session) = self.relays.get_mut(relay) else {
            return;
        };
        let limits = session.limits;
        let Some(sub) = session.conn.as_mut().and_then(|conn| conn.subs.get_mut(id)) else {
            return;
        };
        match sub {
            Sub::Req { batch, paging, .. } => {
                let batch = *batch;
                let page_limit_ours = page_limit;
                let page_limit = limits.page_limit_of(&paging.original_filter);
                let crowded_before = paging.crowded_seconds.len();
                let page_len = paging.event_count;
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
                self.progress(now, relay, batch);
                self.knowledge(relay)
                    .note_page_len(page_len, page_limit_ours);
                match outcome {
                    PageOutcome::NextPage(filter)
                        if self.store_keeps_up()
                            && self.relays.rate_allows(relay, now.instant, &self.config) =>
                    {
                        let next = self.watch_request(now, relay);
                        if let Some(Sub::Req { watch, .. }) = self
                            .relays
                            .conn_mut(relay)
                            .and_then(|conn| conn.subs.get_mut(id))
                        {
                            *watch = next;
                        }
                        self.emit(Command::Subscribe {
                            relay: relay.clone(),
                            id: id.clone(),
                            filters: vec![filter],
                        })
                    }
                    PageOutcome::NextPage(_) => {
                        // Over the learned rate, or the store is behind:
                        // free the slot, resume later.
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
            Sub::Poll {
                batch,
                pages,
                received,
                ..
            } => {
                let batch = *batch;
                // A filter whose page may have been cut (relays clamp
                // silently) continues paginated from where its page ended:
                // on a relay whose page size we know, from its page-th
                // newest event (others' events may match it too).
                let full: Vec<Job> = pages
                    .iter_mut()
                    .zip(received.iter())
                    .filter_map(|(page, seen)| {
                        if let Some(group) = group_limit {
                            return page
                                .continue_alone(seen, group)
                                .map(|next| Job::Page(Box::new(next)));
                        }
                        let limit = limits.page_limit_of(&page.original_filter);
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

    pub(super) fn on_closed(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        message: &str,
    ) {
        let classified = classify(message);
        if !self
            .relays
            .conn(relay)
            .is_some_and(|conn| conn.subs.contains_key(id))
        {
            return;
        }
        info!(%relay, %id, message, "subscription closed by relay");
        let slot_refused = self.learn_from_refusal(now, relay, &classified);
        let Some(sub) = self.relays.conn(relay).and_then(|conn| conn.subs.get(id)) else {
            return;
        };
        match sub {
            Sub::Live { .. } => {
                if slot_refused {
                    self.requeue_live(now, relay, id);
                } else if let Some(session) = self.relays.get_mut(relay) {
                    session.live_closed(id, now, &self.config);
                }
            }
            Sub::Negentropy { filter, sent, .. } => {
                let (filter, sent) = (filter.clone(), *sent);
                if slot_refused {
                    self.replace_job(now, relay, id, Sub::negentropy_job(filter, sent));
                } else {
                    let failure = super::nip77::NegFailure::Refused {
                        reason: message,
                        close: false,
                    };
                    self.negentropy_failed(now, relay, id, failure);
                }
            }
            Sub::Req { paging, batch, .. } => {
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
}
