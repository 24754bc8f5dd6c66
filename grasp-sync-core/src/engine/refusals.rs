//! What a relay's refusals teach: rate limits and subscription limits
//! learned from CLOSED, NOTICE and OK, and the refused work put back.

use super::classify::{classify, Classified};

use nostr::prelude::{RelayUrl, SubscriptionId};
use tracing::{info, warn};

use super::runtime::{Job, Sub};
use super::{Command, SyncEngine};
use crate::clock::Now;

impl SyncEngine {
    /// Learns from a refusal: rate limits start the cooldown, a refused
    /// subscription lowers the relay's known limit. Returns `true` when the
    /// refused subscription should simply be retried later.
    pub(super) fn learn_from_refusal(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        classified: &Classified,
    ) -> bool {
        if classified.too_many_subscriptions {
            let open = self.relays.conn(relay).map_or(1, |conn| conn.subs.len());
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
            self.note_rate_limited(now, relay);
        } else if classified.rate_limited {
            self.rate_limited(now, relay);
        }
        classified.too_many_subscriptions || classified.rate_limited
    }

    /// Starts (or extends) `relay`'s rate-limit cooldown.
    fn note_rate_limited(&mut self, now: Now, relay: &RelayUrl) {
        let cooldown = self.config.health.rate_limit_cooldown;
        tracing::info!(%relay, ?cooldown, "relay rate limited");
        let health = &self.config.health;
        self.relays
            .entry(relay.clone())
            .health
            .on_rate_limited(now.instant, health);
    }

    pub(super) fn rate_limited(&mut self, now: Now, relay: &RelayUrl) {
        self.stats.rate_limits += 1;
        let already = self
            .relays
            .get(relay)
            .is_some_and(|session| session.health.is_rate_limited(now.instant));
        self.note_rate_limited(now, relay);
        if !already {
            // Once per episode: halve the REQs we send per window.
            let window = self.config.rate_window();
            let opened = self
                .relays
                .conn_mut(relay)
                .map_or(1, |conn| conn.opens_within(now.instant, window));
            let known = self.knowledge(relay);
            let rate = (known.learned_rate.unwrap_or(opened).min(opened) / 2).max(1);
            known.learned_rate = Some(rate);
            known.learned_rate_at = Some(now.instant);
        }
        warn!(%relay, "rate-limited by relay; pausing new subscriptions for the cooldown");
    }

    pub(super) fn on_notice(&mut self, now: Now, relay: &RelayUrl, message: &str) {
        let classified = classify(message);
        info!(%relay, message, "notice");
        if classified.too_many_subscriptions {
            self.learn_from_refusal(now, relay, &classified);
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
            .relays
            .conn(relay)
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
            let failure = super::nip77::NegFailure::Refused {
                reason: message,
                close: true,
            };
            self.negentropy_failed(now, relay, &id, failure);
        }
    }

    /// The oldest open subscription the relay has not answered at all: the
    /// one a NOTICE refusal is about, since relays answer in order.
    pub(super) fn oldest_unanswered(&mut self, relay: &RelayUrl) -> Option<SubscriptionId> {
        let conn = self.relays.conn_mut(relay)?;
        while let Some(id) = conn.unanswered.pop_front() {
            if conn.subs.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Retries the slot `id` later after the relay refused it.
    pub(super) fn retry_refused_slot(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(sub) = self.relays.conn(relay).and_then(|conn| conn.subs.get(id)) else {
            return;
        };
        let job = match sub {
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
    pub(super) fn pause_page(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let paging = match self.relays.conn(relay).and_then(|conn| conn.subs.get(id)) {
            Some(Sub::Req { paging, .. }) => paging.clone(),
            _ => return,
        };
        self.replace_job(now, relay, id, Job::Page(Box::new(paging)));
    }

    /// A refused live REQ is sent again, unchanged, when the relay allows.
    pub(super) fn requeue_live(&mut self, now: Now, relay: &RelayUrl, id: &SubscriptionId) {
        let Some(conn) = self.relays.conn_mut(relay) else {
            return;
        };
        if let Some(Sub::Live { filters, .. }) = conn.subs.shift_remove(id) {
            conn.forget_live(id);
            conn.waiting_live.push(filters);
            conn.live_gap_since.get_or_insert(now.unix);
        }
    }
}
