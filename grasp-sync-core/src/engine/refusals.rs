//! What a relay's refusals teach: rate limits and subscription limits
//! learned from CLOSED, NOTICE and OK, and the refused work put back.

use super::classify::{classify, Classified};

use nostr::prelude::{RelayUrl, SubscriptionId};
use tracing::{info, warn};

use super::relay_session::Lesson;
use super::runtime::{Job, Sub};
use super::{Command, SyncEngine};
use crate::clock::Now;

impl SyncEngine {
    /// Learns from a refusal on `relay` ([`RelaySession::learn_from_refusal`]
    /// holds the decision) and counts and logs what it taught. Returns
    /// `true` when the refused subscription should simply be retried later.
    pub(super) fn learn_from_refusal(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        classified: &Classified,
    ) -> bool {
        let lesson = self.relays.entry(relay.clone()).learn_from_refusal(
            now.instant,
            classified,
            &self.config,
        );
        self.note_lesson(relay, lesson);
        lesson.retry()
    }

    /// A `rate-limited:` refusal on `relay`
    /// ([`RelaySession::rate_limited`]), counted and logged.
    pub(super) fn rate_limited(&mut self, now: Now, relay: &RelayUrl) {
        let lesson = self
            .relays
            .entry(relay.clone())
            .rate_limited(now.instant, &self.config);
        self.note_lesson(relay, lesson);
    }

    /// Counts and logs what a refusal taught.
    fn note_lesson(&mut self, relay: &RelayUrl, lesson: Lesson) {
        if let Some(limit) = lesson.subscription_limit {
            self.stats.subscription_refusals += 1;
            warn!(%relay, limit, "relay refused a subscription; lowering its subscription limit");
        }
        if lesson.cooldown {
            self.stats.rate_limits += 1;
            info!(%relay, cooldown = ?self.config.health.rate_limit_cooldown, "relay rate limited");
        }
        if lesson.rate_refused {
            warn!(%relay, "rate-limited by relay; pausing new subscriptions for the cooldown");
        }
    }

    pub(super) fn on_notice(&mut self, now: Now, relay: &RelayUrl, message: &str) {
        let classified = classify(message);
        info!(%relay, message, "notice");
        if classified.too_many_subscriptions {
            self.learn_from_refusal(now, relay, &classified);
            // A NOTICE names no subscription: relays answer in order, so it
            // refuses the oldest subscription not answered yet.
            if let Some(id) = self
                .relays
                .conn_mut(relay)
                .and_then(|conn| conn.oldest_unanswered())
            {
                self.retry_refused_slot(now, relay, &id);
            }
            return;
        }
        if classified.rate_limited {
            self.rate_limited(now, relay);
            if let Some(id) = self
                .relays
                .conn_mut(relay)
                .and_then(|conn| conn.oldest_unanswered())
            {
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
