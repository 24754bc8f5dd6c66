//! The main loop: starts every repository whose debounce or backoff ended, applies the
//! backoff or removes it when its sync ends, serves the domain queues, expires events,
//! sweeps stale refs, keeps the journal compact and synced, publishes the status, and
//! stops every task at shutdown.

use std::time::Duration;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::nip34::RepoRef;
use tokio::sync::watch;

use super::api::Purgatory;
use super::domain_queues::DomainWakes;
use super::persistence::JournalSync;
use super::status::StatusRefresh;
use crate::context::lock;
use crate::sync::{sync_identifier, SyncOutcome};

impl Purgatory {
    /// Runs the main sync loop until [`Purgatory::shutdown`]: starts every ready
    /// identifier in parallel, applies backoff or removes it when its sync ends, serves
    /// the queues of throttled domains when they have capacity, and expires events that
    /// waited too long, publishing the [`Purgatory::status`] as things change. Deletes
    /// the `refs/purgatory/*` no held event needs (after expiry, replacement and
    /// restart), compacts the journal when it grows and `fsync`s it at most every second.
    /// On shutdown, stops every task, then compacts and `fsync`s the journal.
    ///
    /// Wakes on a new event, a finished sync, the next queue or domain deadline, and at
    /// least every loop interval; serves the domain queues whenever the
    /// [`ThrottleManager`](crate::ThrottleManager) has steps.
    pub async fn run(&self) -> Result<(), std::io::Error> {
        let mut shutdown = self.shared.shutdown.subscribe();
        let mut wakes = DomainWakes::default();
        let mut refresh = StatusRefresh::default();
        let mut journal = JournalSync::default();
        while !*shutdown.borrow_and_update() {
            self.expire().await;
            self.forget_released();
            self.shared.manager.forget_idle_domains();
            if !self.shared.fetch_pause.is_paused(self.shared.clock.now()) {
                self.start_ready();
            }
            self.list_repositories_if_due();
            self.reconcile_released();
            self.start_reconciliations();
            self.start_sweeps();
            self.serve_domain_queues(&mut wakes);
            self.maintain_journal(&mut journal).await;
            self.refresh_status(&mut refresh);
            self.wait(&mut shutdown, &mut wakes, &mut refresh).await;
        }
        let aborted = self.shared.tasks.shutdown().await;
        tracing::debug!(aborted, "purgatory stopped");
        self.publish_status();
        self.save().await
    }

    /// Sleeps until the loop has work (shutdown, a new event, a finished sync, the next
    /// deadline, a status refresh that was skipped), serving the domain queues (and
    /// refreshing the status: fetches start and end) whenever the throttle manager has
    /// steps.
    async fn wait(
        &self,
        shutdown: &mut watch::Receiver<bool>,
        wakes: &mut DomainWakes,
        refresh: &mut StatusRefresh,
    ) {
        let latest = self.next_wake(wakes);
        loop {
            let domain_wake = wakes
                .poll_timeout()
                .map(|at| tokio_deadline(self.shared.clock.now(), at));
            let deadline = [domain_wake, refresh.deadline()]
                .into_iter()
                .flatten()
                .fold(latest, tokio::time::Instant::min);
            tokio::select! {
                _ = shutdown.changed() => return,
                () = self.shared.wake.notified() => return,
                () = tokio::time::sleep_until(deadline) => return,
                () = self.shared.manager.step_ready() => {
                    self.serve_domain_queues(wakes);
                    self.refresh_status(refresh);
                }
            }
        }
    }

    /// When the loop wakes next: the next queue or domain deadline, and at least every
    /// loop interval.
    fn next_wake(&self, wakes: &DomainWakes) -> tokio::time::Instant {
        let now = self.shared.clock.now();
        let latest = tokio_deadline(now, now + self.shared.config.loop_interval);
        // While fetches are paused, the ready queue waits for the pause's end.
        let pause = self.shared.fetch_pause.deadline();
        let queue = match pause {
            Some(_) => None,
            None => self.queue().poll_timeout(),
        };
        let reconcile = super::api::lock_plain(&self.shared.schedule).poll_timeout();
        match [queue, wakes.poll_timeout(), reconcile, pause]
            .into_iter()
            .flatten()
            .min()
        {
            Some(at) => tokio_deadline(now, at).min(latest),
            None => latest,
        }
    }

    /// Ends the running sync of `repo` (removing it from the queue) if no event of it is
    /// held; checked and done under the store lock so no event added meanwhile is left
    /// unqueued (over a host's purgatory: under the queue lock, which
    /// [`Purgatory::schedule`] takes too). Returns whether it was ended.
    fn finish_if_nothing_held(&self, repo: &RepoRef, now: Instant) -> bool {
        if let Some(host) = &self.shared.host {
            let mut queue = self.queue();
            if host.has_pending(repo) {
                return false;
            }
            queue.complete(&repo.to_string(), now, true);
            super::api::lock_plain(&self.shared.scheduled).remove(repo);
            return true;
        }
        let store = lock(&self.shared.store);
        if store.has_pending(repo) {
            return false;
        }
        self.queue().complete(&repo.to_string(), now, true);
        true
    }

    /// Starts a sync task for every ready repository.
    fn start_ready(&self) {
        let now = self.shared.clock.now();
        let ready = self.queue().take_ready(now);
        for key in ready {
            let Ok(repo) = RepoRef::parse(&key) else {
                tracing::warn!(
                    key,
                    "the sync queue holds something that is not a repository"
                );
                self.queue().complete(&key, now, true);
                continue;
            };
            if self.finish_if_nothing_held(&repo, now) {
                continue;
            }
            let purgatory = self.clone();
            self.shared
                .tasks
                .spawn(async move { purgatory.sync_one(repo).await });
        }
        self.update_gauges();
    }

    /// Starts a task deleting the stale `refs/purgatory/*` of every repository that owes
    /// a sweep; each wakes the loop when it finishes, so the status sees it paid.
    fn start_sweeps(&self) {
        let repos = lock(&self.shared.store).claim_sweeps();
        for repo in repos {
            let shared = std::sync::Arc::clone(&self.shared);
            self.shared.tasks.spawn(async move {
                shared.ctx.sweep_refs(&repo).await;
                shared.wake.notify_one();
            });
        }
    }

    /// One attempt for `repo` (in its group's turn, when it is synced with the other
    /// owners of its identifier); then backoff or removal, and its outcome noted for the
    /// status.
    async fn sync_one(&self, repo: RepoRef) {
        let shared = &self.shared;
        // The owners of one identifier scheduled together sync in turn: each copies what
        // the one before fetched instead of fetching it too.
        let turn = shared.ctx.groups().turn(&repo).await;
        let report = sync_identifier(shared.ctx.as_ref(), &repo, &shared.manager).await;
        drop(turn);
        let complete = report.is_complete();
        if report.own_service_urls_skipped > 0 {
            tracing::debug!(%repo, skipped = report.own_service_urls_skipped, "clone urls on our own service skipped");
            shared
                .metrics
                .clone_urls_skipped
                .with_label_values(&["own_service"])
                .inc_by(report.own_service_urls_skipped as u64);
        }
        if report.urls_over_cap > 0 {
            tracing::info!(%repo, left_out = report.urls_over_cap, max = shared.manager.max_clone_urls(), "the repository lists more clone urls than one attempt tries; the rest are left out");
            shared
                .metrics
                .clone_urls_skipped
                .with_label_values(&["over_cap"])
                .inc_by(report.urls_over_cap as u64);
        }
        if let SyncOutcome::NotFetchable(reason) = &report.outcome {
            tracing::info!(%repo, %reason, "purgatory events not fetchable; waiting");
        }
        if let SyncOutcome::MovedTo(homes) = &report.outcome {
            let now = shared.clock.now();
            let mut queue = self.queue();
            for home in homes {
                queue.enqueue(&home.to_string(), now, Duration::ZERO);
            }
        }
        // Noted before the sync is marked finished, so no status sees it finished
        // without its verdict.
        self.note_attempt(&repo, (!complete).then_some(report.outcome));
        let now = shared.clock.now();
        let done = self.finish_if_nothing_held(&repo, now);
        if !done {
            // Events remain (or arrived during the sync): back off, or keep the new
            // event's shorter delay.
            self.queue().complete(&repo.to_string(), now, false);
            if complete {
                tracing::debug!(%repo, "new events arrived during the sync");
            }
        }
        let result = if done { "done" } else { "retry" };
        shared
            .metrics
            .sync_attempts
            .with_label_values(&[result])
            .inc();
        if !done {
            tracing::debug!(%repo, entry = ?self.queue_entry(&repo), "backing off");
        }
        self.update_gauges();
        shared.wake.notify_one();
    }
}

/// The tokio instant of the core instant `at`, the clock reading `now`: tokio's now plus
/// the time left, at most a year (the loop wakes at least every loop interval anyway).
fn tokio_deadline(now: Instant, at: Instant) -> tokio::time::Instant {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    tokio::time::Instant::now() + at.saturating_duration_since(now).min(YEAR)
}
