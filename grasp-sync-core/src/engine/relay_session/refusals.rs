//! What a relay refuses and what its refusals teach: events refused
//! before they are stored (counted, and a relay past
//! `Caps::max_bad_events` cut off), CLOSED, NOTICE and NEG-ERR read as
//! subscription or rate limits (`RelaySession::learn_from_refusal`), the
//! frame budget learned from drops, and the limits probed upward again.

use super::*;

impl RelaySession {
    // --- Refusals -------------------------------------------------------

    /// Learns from a refusal ([`RelaySession::learn_from_refusal`] holds
    /// the decision) and counts and logs what it taught: `true` when the
    /// refused subscription should simply be retried later.
    pub(super) fn heed_refusal(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        classified: &Classified,
    ) -> bool {
        let lesson = self.learn_from_refusal(now.instant, classified, cx.config);
        note_lesson(cx, lesson);
        lesson.retry()
    }

    /// A `rate-limited:` refusal ([`RelaySession::rate_limited`]), counted
    /// and logged: an `OK` refusing an event we published, which says
    /// nothing about subscriptions whatever its wording (so not
    /// [`RelaySession::heed_refusal`], which would read "too many
    /// subscriptions" into it).
    pub(super) fn heed_rate_limit(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let lesson = self.rate_limited(now.instant, cx.config);
        note_lesson(cx, lesson);
    }

    /// A NOTICE: a subscription or rate refusal (relays answer in order, so
    /// it refuses the oldest subscription not answered yet), or else, for
    /// every NIP-77 session waiting for its first answer, a refusal of
    /// NIP-77.
    pub(super) fn on_notice(&mut self, cx: &mut Ctx<'_>, now: Now, message: &str) {
        let classified = classify(message);
        info!(relay = %cx.relay, message, "notice");
        if classified.too_many_subscriptions || classified.rate_limited {
            self.heed_refusal(cx, now, &classified);
            if let Some(id) = self
                .link
                .conn_mut()
                .and_then(|conn| conn.oldest_unanswered())
            {
                self.retry_refused_slot(cx, now, &id);
            }
            return;
        }
        let waiting: Vec<SubscriptionId> = self
            .link
            .conn()
            .map(|conn| {
                conn.negentropy_unanswered()
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in waiting {
            let failure = NegFailure::Refused {
                reason: message,
                close: true,
            };
            self.negentropy_failed(cx, now, &id, failure);
        }
    }

    /// Retries the slot `id` later after the relay refused it.
    pub(super) fn retry_refused_slot(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        if !self.link.conn().is_some_and(|conn| conn.is_open(id)) {
            return;
        }
        // The guess may be wrong: tell the relay too (a CLOSE of an unknown
        // id is harmless), so it never holds more than we count.
        self.unsubscribe(cx, id);
        self.retry_later(now, id);
    }

    /// The refused slot `id` is asked for again when the relay allows: its
    /// job from where it was, back in the queue, or a live REQ unchanged.
    pub(super) fn retry_later(&mut self, now: Now, id: &SubscriptionId) {
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        match sub.job() {
            Some(job) => self.replace_job(id, job, now.instant),
            None => self.requeue_live(now, id),
        }
    }

    /// Moves a paginated subscription back to the queue, keeping its paging.
    pub(super) fn pause_page(&mut self, now: Now, id: &SubscriptionId) {
        let Some(job) = self
            .link
            .conn()
            .and_then(|conn| conn.sub(id))
            .and_then(Sub::job)
        else {
            return;
        };
        self.replace_job(id, job, now.instant);
    }

    /// A refused live REQ is sent again, unchanged, when the relay allows.
    pub(super) fn requeue_live(&mut self, now: Now, id: &SubscriptionId) {
        if let Some(conn) = self.link.conn_mut() {
            conn.requeue_live(id, now.unix);
        }
    }

    // --- Lessons from refusals and drops -------------------------------------

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
            let open = self.link.conn().map_or(1, RelayConn::open_count);
            let limit = self.learned.refused_subscription(open, now);
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
                .link
                .conn_mut()
                .map_or(1, |conn| conn.opens_within(now, window));
            self.learned.halve_rate(opened, now);
        }
        Lesson {
            subscription_limit: None,
            cooldown: true,
            rate_refused: true,
        }
    }

    /// A relay that drops the connection right after a large frame (strfry
    /// closes the socket on any frame over its limit, without a word) gets
    /// half that frame as its budget, so the next attempt fits (counted and
    /// logged when it was lowered).
    pub(crate) fn learn_frame_budget(&mut self, cx: &mut Ctx<'_>, now: Instant) {
        let Some(len) = self
            .link
            .conn()
            .and_then(|conn| conn.large_frame_before(now))
        else {
            return;
        };
        let Some(budget) = self.learned.dropped_after_frame(len, now) else {
            return;
        };
        cx.events.push(Noted::FrameBudgetLowered);
        warn!(relay = %cx.relay, frame = len, budget, "relay dropped the connection after a large frame; sending smaller frames");
    }

    /// Raises the relay's lowered subscription limit and frame budget a
    /// step once a quiet period passed without a new lesson
    /// ([`Learned::recover_limits`]), counted and logged.
    pub(super) fn recover_limits(&mut self, cx: &mut Ctx<'_>, now: Instant) {
        if !self.learned.recover_limits(now, cx.config) {
            return;
        }
        cx.events.push(Noted::LimitsRaised);
        debug!(
            relay = %cx.relay,
            subscriptions = self.learned.subscription_limit(cx.config),
            frame_budget = self.learned.frame_budget(cx.config),
            "no refusal or drop for a while; probing the relay's limits upward"
        );
    }

    /// If `id` is on its way to the store, `batch` confirms only once it is
    /// stored (`true`); `false` if it is not waiting for the store.
    pub(crate) fn wait_for_store(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        batch: BatchId,
        id: &EventId,
    ) -> bool {
        match cx.stores.add_waiter(id, cx.relay, batch) {
            None => false,
            Some(newly) => {
                if newly {
                    self.count_store(cx, now, batch, 1);
                }
                true
            }
        }
    }
}
