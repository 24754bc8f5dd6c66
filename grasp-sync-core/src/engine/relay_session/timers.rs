//! The session's clock: batches without progress, the health and work
//! retries, the timeouts it fires itself (`RelaySession::handle_timeout`),
//! REQs the relay stopped answering, silence, and the session's next
//! deadline (`RelaySession::next_deadline`).

use super::*;

impl RelaySession {
    // --- When a batch stalls -------------------------------------------------

    /// When a batch of the relay with a running job counts as stalled: once
    /// it has had no progress of its own (a job started, an event, an EOSE,
    /// a NEG-MSG) for the batch timeout **and** the relay has sent nothing
    /// for any of our historic subscriptions for the batch timeout either —
    /// a relay answering our REQs one after another, or slowed by a loaded
    /// machine, is still working on this one. Whatever the relay sends, a
    /// batch with no progress of its own for
    /// [`Timeouts::batch_stall_limit`] stalls (a subscription the relay
    /// dropped silently while it streams the others).
    pub(crate) fn batch_stalls_at(&self, info: &Batch, config: &EngineConfig) -> Instant {
        let timeout = config.timeouts.batch_timeout;
        let last_progress = info.last_progress();
        let own = last_progress + timeout;
        let hard = last_progress + config.timeouts.batch_stall_limit.max(timeout);
        let relay_idle = self
            .link
            .conn()
            .map_or(own, |conn| conn.last_historic_data() + timeout);
        own.max(relay_idle.min(hard))
    }

    /// `true` while a job of `batch` holds a subscription slot (queued jobs
    /// wait for a slot and do not time out).
    pub(crate) fn has_running_job(&self, batch: BatchId) -> bool {
        self.link
            .conn()
            .is_some_and(|conn| conn.has_running_job(batch))
    }

    // --- Health and work retries ---------------------------------------------

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

    /// `true` when work on the relay failed since its last confirmed batch
    /// (its retry is waiting).
    pub(crate) fn work_failing(&self) -> bool {
        self.work_retry.is_some()
    }

    /// The relay's health at `now`.
    pub(crate) fn health_state(&self, now: Instant, health: &HealthConfig) -> HealthState {
        self.health.state(now, self.link.connected_since(), health)
    }

    /// When the relay's health answers differently next (a retry allowed,
    /// a rate limit over, a connection stable, a failing relay dead), after
    /// `now` (`RelayHealth::poll_timeout`).
    pub(crate) fn health_changes_at(&self, now: Instant, health: &HealthConfig) -> Option<Instant> {
        self.health.poll_timeout(
            now,
            self.link.connected_since(),
            &self.health_config(health),
        )
    }

    /// When the next connection attempt is allowed, while the relay is idle
    /// (not connected, no attempt in flight).
    pub(crate) fn retry_at(&self, health: &HealthConfig) -> Option<Instant> {
        self.is_idle()
            .then(|| self.health.next_attempt_at(&self.health_config(health)))
    }

    // --- Timeouts -----------------------------------------------------------

    /// Fires everything of the session due at `now`
    /// ([`RelaySession::next_deadline`] names each kind), in this order:
    /// the due `since` poll of live filters that do not fit
    /// ([`RelaySession::poll_uncovered`]), what is overdue
    /// ([`RelaySession::expire`]), the retries whose delay is over
    /// ([`RelaySession::run_retries`]), then a connection attempt past its
    /// timeout is given up ([`RelaySession::connect_timed_out`]). What only
    /// the engine can do is returned: `true` when the relay's items are due
    /// to be planned again (the engine holds the targets). Firing early or
    /// twice is harmless: each step checks the state again.
    pub(crate) fn handle_timeout(&mut self, cx: &mut Ctx<'_>, now: Now) -> bool {
        if self.poll_due(now.instant) {
            self.poll_uncovered(cx, now);
        }
        let connect_timed_out = self.connect_timed_out(now.instant);
        self.expire(cx, now);
        let replan = self.run_retries(cx, now);
        if connect_timed_out {
            self.abandon_connect_attempt(cx, now);
        }
        replan
    }

    /// What is overdue on the relay at `now`, in order: REQs it dropped are
    /// resumed ([`RelaySession::stalled_reqs`]; a resumed REQ is progress of
    /// its batch), batches without progress fail
    /// ([`RelaySession::stalled_batches`]) — or the connection is dropped if
    /// the relay is not alive ([`RelaySession::is_alive`],
    /// [`RelaySession::live_unanswered`]) — and unanswered NEG-OPENs are
    /// refusals ([`RelaySession::negentropy_unanswered`]). Nothing without
    /// an open connection.
    pub(super) fn expire(&mut self, cx: &mut Ctx<'_>, now: Now) {
        for id in self.stalled_reqs(now.instant, cx.config) {
            self.resume_req(cx, now, &id);
        }
        for batch in self.stalled_batches(now.instant, cx.config) {
            if !self.is_alive(now.instant, cx.config) {
                self.drop_silent_connection(cx, now);
            } else {
                self.fail_batch(cx, now, batch, "no progress before the batch timeout");
            }
        }
        if self.live_unanswered(now.instant, cx.config) {
            self.drop_silent_connection(cx, now);
        }
        for id in self.negentropy_unanswered(now.instant, cx.config) {
            self.negentropy_failed(cx, now, &id, NegFailure::Unanswered);
        }
    }

    /// Resumes the stalled REQ `id` where it was
    /// ([`PaginationState::resume_interrupted`](crate::pagination::PaginationState::resume_interrupted);
    /// each filter of a packed
    /// REQ from its current page), counted in
    /// `EngineStats::reqs_resumed`; a batch whose REQs were resumed
    /// [`Timeouts::req_resume_attempts`] times without hearing anything
    /// since fails.
    pub(super) fn resume_req(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        let Some(batch) = sub.batch() else {
            return;
        };
        let Some(mut jobs) = sub.resume_jobs() else {
            return;
        };
        let attempts = cx.config.timeouts.req_resume_attempts;
        let Some(may_resume) = self.batches.resume(batch, attempts) else {
            // No batch to resume for (cannot happen: a batch ends with its
            // subscriptions): close it rather than wake for it forever.
            if let Some(sub) = self.link.conn_mut().and_then(|conn| conn.take_sub(id)) {
                self.send_close(cx, id.clone(), &sub);
            }
            return;
        };
        if !may_resume {
            self.fail_batch(cx, now, batch, "a REQ resumed without an answer");
            return;
        }
        cx.events.push(Noted::ReqResumed);
        debug!(relay = %cx.relay, %id, %batch, "REQ dropped by the relay without EOSE; resuming it where it was");
        self.unsubscribe(cx, id);
        let first = jobs.remove(0);
        self.replace_job(id, first, now.instant);
        if !jobs.is_empty() {
            self.add_jobs(batch, jobs);
        }
    }

    /// Runs the retries whose delay is over, while connected: Layer 1
    /// again, the live subscriptions rebuilt. `true` if the relay's items
    /// are due to be planned again (by the engine, which holds the targets).
    pub(super) fn run_retries(&mut self, cx: &mut Ctx<'_>, now: Now) -> bool {
        let replan = self.timers.fire(RelayTimer::Replan, now.instant);
        let layer1 = self.timers.fire(RelayTimer::Layer1Retry, now.instant);
        let live = self.timers.fire(RelayTimer::RebuildLive, now.instant);
        if !self.is_connected() {
            return false;
        }
        if layer1 {
            self.start_layer1(cx, now, None);
        }
        if live {
            self.rebuild_live(cx, now, &PendingItems::default());
        }
        replan
    }

    // --- Stalls and silence --------------------------------------------------

    /// The historic REQs the relay dropped by now
    /// ([`RelayConn::req_stalls_at`]).
    pub(crate) fn stalled_reqs(&self, now: Instant, config: &EngineConfig) -> Vec<SubscriptionId> {
        self.link
            .conn()
            .map(|conn| conn.stalled_reqs(now, config))
            .unwrap_or_default()
    }

    /// The batches with a running job that stalled by now
    /// ([`RelaySession::batch_stalls_at`]).
    pub(crate) fn stalled_batches(&self, now: Instant, config: &EngineConfig) -> Vec<BatchId> {
        self.batches
            .iter()
            .filter(|(_, info)| self.batch_stalls_at(info, config) <= now)
            .filter(|(batch, _)| self.has_running_job(*batch))
            .map(|(batch, _)| batch)
            .collect()
    }

    /// `true` while the connection is open and the relay sent something (a
    /// frame, a pong) within the batch timeout before `now`
    /// ([`Liveness::is_alive`](super::liveness::Liveness::is_alive)); `false` for a relay silent that long — or
    /// not connected.
    pub(crate) fn is_alive(&self, now: Instant, config: &EngineConfig) -> bool {
        self.link
            .conn()
            .is_some_and(|conn| conn.is_alive(now, config))
    }

    /// `true` if the connected relay is not alive
    /// ([`RelaySession::is_alive`]) while a live subscription opened a batch
    /// timeout ago has not been answered: a half-open socket. A driver that
    /// pings keeps a relay that answers from ever getting here, EOSE or not.
    pub(crate) fn live_unanswered(&self, now: Instant, config: &EngineConfig) -> bool {
        self.live_unanswered_at(config).is_some_and(|at| at <= now)
    }

    /// When [`RelaySession::live_unanswered`] turns true if nothing comes:
    /// a batch timeout after the oldest unanswered live subscription opened,
    /// and not before the relay counts as silent
    /// ([`Liveness::silent_at`](super::liveness::Liveness::silent_at)).
    /// `None` without such a subscription.
    pub(super) fn live_unanswered_at(&self, config: &EngineConfig) -> Option<Instant> {
        self.link.conn()?.live_unanswered_at(config)
    }

    /// The NIP-77 sessions whose NEG-OPEN the relay has not answered within
    /// [`Timeouts::negentropy_timeout`].
    pub(crate) fn negentropy_unanswered(
        &self,
        now: Instant,
        config: &EngineConfig,
    ) -> Vec<SubscriptionId> {
        let Some(conn) = self.link.conn() else {
            return Vec::new();
        };
        conn.negentropy_unanswered()
            .filter(|(_, opened_at)| *opened_at + config.timeouts.negentropy_timeout <= now)
            .map(|(id, _)| id.clone())
            .collect()
    }

    // --- The session's next deadline -----------------------------------------

    /// When the session next has work for [`RelaySession::handle_timeout`]
    /// (or for the engine's `connect_ready_relays`, when its health
    /// changes), and which [`Deadline`] it is: the earliest of its timers,
    /// its health (when its `RelayHealth`'s answer changes next), its
    /// negentropy and batch timeouts, its stalled REQs, its unanswered live
    /// subscriptions and its rate window, as of `now`.
    pub(crate) fn next_deadline(
        &self,
        now: Instant,
        config: &EngineConfig,
    ) -> Option<(Deadline, Instant)> {
        // The earliest so far (asked after every input of the relay: no
        // list of them is built).
        let mut earliest = Earliest::default();
        if let Some((timer, at)) = self.timers.earliest_entry() {
            earliest.consider(timer.into(), Some(at));
        }
        earliest.consider(
            Deadline::Health,
            self.health_changes_at(now, &config.health),
        );
        earliest.consider(Deadline::ConnectTimeout, self.link.connect_deadline());
        earliest.consider(Deadline::LiveUnanswered, self.live_unanswered_at(config));
        if let Some(conn) = self.link.conn() {
            earliest.consider(Deadline::NegentropyUnanswered, conn.next_deadline(config));
            if !conn.is_quiet() && self.learned.rate().is_some() {
                earliest.consider(
                    Deadline::RateWindow,
                    conn.rate_window_frees_at(now, config.rate_window()),
                );
            }
            for sub in conn.subscriptions() {
                if let Some(watch) = sub.watch() {
                    earliest.consider(Deadline::ReqStall, conn.req_stalls_at(watch, config));
                }
                // An unanswered live subscription is not a batch's
                // (`live_unanswered_at` above).
                if sub.live_unanswered_since().is_none() {
                    earliest.consider(
                        Deadline::BatchStall,
                        sub.batch()
                            .and_then(|batch| self.batches.get(batch))
                            .map(|info| self.batch_stalls_at(info, config)),
                    );
                }
            }
        }
        earliest.get()
    }
}
