//! The [`PurgatoryStatus`] of a purgatory: computed from the store, the sync queue, the
//! throttles and the metrics' counters, and published on a watch channel by the run
//! loop at most every [`STATUS_INTERVAL`] while something changes.

use std::collections::BTreeMap;
use std::time::Duration;

use grasp_sync_core::nip34::RepoRef;
use grasp_sync_core::purgatory::{all_accounted, held_progress, HeldProgress, RepoActivity};
use tokio::sync::watch;

use super::api::{lock_plain, Purgatory};
use crate::context::lock;
use crate::serve::ServedRepository;
use crate::status::{HeldRepository, HeldState, PurgatoryStatus, MAX_LISTED_REPOSITORIES};
use crate::sync::SyncOutcome;

/// The shortest interval between two snapshots published by the run loop.
const STATUS_INTERVAL: Duration = Duration::from_millis(100);

/// When the run loop last published the status, and whether it skipped a refresh since
/// (to publish it once the interval has passed).
#[derive(Debug, Default)]
pub(super) struct StatusRefresh {
    last: Option<tokio::time::Instant>,
    skipped: bool,
}

impl StatusRefresh {
    /// When to publish the refresh that was skipped, if one was.
    pub(super) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.last
            .filter(|_| self.skipped)
            .map(|last| last + STATUS_INTERVAL)
    }
}

impl Purgatory {
    /// A receiver of the purgatory's [`PurgatoryStatus`], obtainable before
    /// [`Purgatory::run`]. It starts with the status at build (restored events
    /// included); the run loop refreshes it at most every 100 ms while something
    /// changes and at least every loop interval, and adding an event (or
    /// [`Purgatory::trigger_immediate_sync`]) to a purgatory whose published status
    /// says [`nothing_ready`](PurgatoryStatus::nothing_ready) or
    /// [`all_accounted`](PurgatoryStatus::all_accounted) publishes at once, so those
    /// flags are never stale after an add returned.
    ///
    /// ```no_run
    /// use grasp_purgatory::nostr::prelude::Event;
    /// use grasp_purgatory::{Origin, Purgatory};
    ///
    /// # async fn demo(purgatory: Purgatory, pull_request: Event) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut status = purgatory.status(); // before run()
    /// tokio::spawn({
    ///     let purgatory = purgatory.clone();
    ///     async move { purgatory.run().await }
    /// });
    /// purgatory.add(pull_request, Origin::Synced)?;
    /// // Done: released, expired, or reported as not fetchable with a reason (a
    /// // backoff after a failed fetch is not done).
    /// let settled = status
    ///     .wait_for(|status| status.all_accounted)
    ///     .await?
    ///     .clone();
    /// println!(
    ///     "released {}, expired {}, still held {}, objects fetched {}",
    ///     settled.events_released, settled.events_expired, settled.events_held, settled.oids_fetched,
    /// );
    /// for repository in &settled.not_fetchable {
    ///     println!("held: {repository}"); // "30617:<owner>:<d> (not fetchable: ...)"
    /// }
    /// // What is being fetched, on demand rather than from the last snapshot.
    /// for (domain, fetches) in &purgatory.status_now().fetches_by_domain {
    ///     println!("{domain}: {fetches} fetches in flight");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn status(&self) -> watch::Receiver<PurgatoryStatus> {
        self.shared.status.subscribe()
    }

    /// The status now, computed on demand (it locks the store, the sync queue and the
    /// throttles briefly, one after the other).
    ///
    /// Over a host's purgatory ([`PurgatoryBuilder::host_purgatory`]) it reports what
    /// the scheduler knows: the repositories scheduled whose events the host still
    /// holds (each listed with `events` 0: the host counts its events), the queue,
    /// fetches in flight, objects fetched, events the host released, backoff and
    /// reasons; `events_held`, `bytes_held` and the journal are the host's and read 0.
    ///
    /// [`PurgatoryBuilder::host_purgatory`]: super::PurgatoryBuilder::host_purgatory
    pub fn status_now(&self) -> PurgatoryStatus {
        let shared = &self.shared;
        let now = shared.clock.now();
        let soon = now + shared.config.queue.immediate_delay;
        let waiting_keys = shared.manager.queued_identifiers();
        let fetches_by_domain = shared.manager.in_flight_by_domain();
        let fetches_in_flight: u32 = fetches_by_domain.values().sum();
        let (throttled_hosts, throttled_hosts_total) = shared.manager.throttled_hosts();
        let attempts = self.last_attempts();
        let mut held = HeldTally::default();
        let (bytes_held, journal_bytes);
        let (events_held, events_releasing, identifiers_queued, repositories_sweeping) = {
            let store = lock(&shared.store);
            let queue = self.queue();
            let repositories: Vec<(RepoRef, usize)> = match shared.host {
                Some(_) => lock_plain(&shared.scheduled)
                    .iter()
                    .map(|repo| (repo.clone(), 0))
                    .collect(),
                None => store
                    .repositories()
                    .map(|repo| (repo.clone(), store.events(repo).len()))
                    .collect(),
            };
            for (repo, events) in &repositories {
                let key = repo.to_string();
                let entry = queue.get(&key);
                let activity = RepoActivity {
                    syncing: entry.is_some_and(|entry| entry.in_progress),
                    due: entry
                        .is_some_and(|entry| !entry.in_progress && entry.next_attempt <= soon),
                    waiting_for_domain: waiting_keys.contains(&key),
                    releasing: false,
                    not_fetchable: match attempts.get(repo) {
                        Some(SyncOutcome::NotFetchable(reason)) => Some(*reason),
                        _ => None,
                    },
                };
                held.add(key, *events, &activity, attempts.get(repo));
            }
            let sweeping = store.sweeps_outstanding();
            bytes_held = store.bytes();
            journal_bytes = store.journal_bytes();
            (store.len(), store.releasing(), queue.len(), sweeping)
        };
        let journal_records_rejected = shared
            .restore_rejected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let metrics = &shared.metrics;
        let served = self.served_now();
        let all_accounted = events_releasing == 0
            && repositories_sweeping == 0
            && all_accounted(held.progress.iter().copied())
            && served.settled;
        PurgatoryStatus {
            events_held,
            events_releasing,
            bytes_held,
            journal_bytes,
            journal_records_rejected,
            events_released: metrics.events_released.get(),
            events_expired: metrics.events_expired.get(),
            events_refused: metrics.events_refused_total(),
            events_evicted: metrics.events_evicted_total(),
            events_refused_by_store: metrics.events_refused_by_store.get(),
            last_store_refusal: shared.ctx.last_store_refusal(),
            identifiers_queued,
            identifiers_ready: held.ready,
            identifiers_syncing: held.syncing,
            identifiers_waiting_for_domain: waiting_keys.len(),
            fetches_in_flight,
            fetches_by_domain,
            throttled_hosts,
            throttled_hosts_total,
            oids_fetched: metrics.oids_fetched.get(),
            nothing_ready: held.ready == 0
                && held.syncing == 0
                && waiting_keys.is_empty()
                && fetches_in_flight == 0
                && events_releasing == 0,
            all_accounted,
            repositories_sweeping,
            events_not_fetchable: held.events_not_fetchable,
            not_fetchable_by_reason: held.by_reason,
            not_fetchable: held.not_fetchable,
            still_waiting: held.still_waiting,
            repositories_waiting: held.repositories_waiting,
            repositories_served: served.total,
            repositories_serving_newest: served.newest,
            repositories_behind: served.behind,
            repositories_reconciling: served.reconciling,
            served: served.listed,
            reconciliations: metrics.reconciliations.get(),
            refs_updated: metrics.refs_updated.get(),
            clone_urls_skipped_own_service: metrics
                .clone_urls_skipped
                .with_label_values(&["own_service"])
                .get(),
            repositories_created: metrics.repositories_created.get(),
        }
    }

    /// Publishes the status unless the last one was published less than
    /// [`STATUS_INTERVAL`] ago (then [`StatusRefresh::deadline`] says when to).
    pub(super) fn refresh_status(&self, refresh: &mut StatusRefresh) {
        let now = tokio::time::Instant::now();
        if refresh
            .last
            .is_some_and(|last| now < last + STATUS_INTERVAL)
        {
            refresh.skipped = true;
            return;
        }
        refresh.last = Some(now);
        refresh.skipped = false;
        self.publish_status();
    }

    /// Publishes the status now if the published one says nothing is ready or all is
    /// accounted for: an event just added may change that, and nobody should read the
    /// stale flag meanwhile.
    pub(super) fn publish_if_settled(&self) {
        let settled = {
            let status = self.shared.status.borrow();
            status.nothing_ready || status.all_accounted
        };
        if settled {
            self.publish_status();
        }
    }

    /// Publishes the status now, waking receivers only if it changed. Computed under
    /// the channel's lock, so concurrent publishers never replace a newer snapshot with
    /// an older one (callers must not hold the store or queue lock).
    pub(super) fn publish_status(&self) {
        self.shared.status.send_if_modified(|current| {
            let status = self.status_now();
            let changed = *current != status;
            if changed {
                *current = status;
            }
            changed
        });
    }
}

/// The held repositories, tallied for the status.
#[derive(Default)]
struct HeldTally {
    progress: Vec<HeldProgress>,
    ready: usize,
    syncing: usize,
    events_not_fetchable: usize,
    by_reason: BTreeMap<&'static str, usize>,
    not_fetchable: Vec<HeldRepository>,
    still_waiting: Vec<HeldRepository>,
    repositories_waiting: usize,
}

impl HeldTally {
    /// Adds one held repository (`key`, with `events` held events).
    fn add(
        &mut self,
        key: String,
        events: usize,
        activity: &RepoActivity,
        last: Option<&SyncOutcome>,
    ) {
        let progress = held_progress(activity);
        self.progress.push(progress);
        self.syncing += usize::from(activity.syncing);
        self.ready += usize::from(activity.due);
        let state = match progress {
            HeldProgress::NotFetchable(reason) => {
                self.events_not_fetchable += events;
                *self.by_reason.entry(reason.label()).or_default() += 1;
                let state = HeldState::NotFetchable(reason);
                return push_bounded(&mut self.not_fetchable, key, events, state);
            }
            HeldProgress::Moving => moving_state(activity),
            HeldProgress::BackingOff => HeldState::BackingOff {
                last_error: match last {
                    Some(SyncOutcome::Retry { last_error }) => last_error.clone(),
                    _ => None,
                },
            },
        };
        self.repositories_waiting += 1;
        push_bounded(&mut self.still_waiting, key, events, state);
    }
}

/// What a moving repository is doing, for the status.
fn moving_state(activity: &RepoActivity) -> HeldState {
    if activity.syncing {
        HeldState::Syncing
    } else if activity.waiting_for_domain {
        HeldState::WaitingForDomain
    } else if activity.due {
        HeldState::Due
    } else {
        HeldState::Releasing
    }
}

/// Appends to a status list unless it is full.
fn push_bounded(list: &mut Vec<HeldRepository>, repo: String, events: usize, state: HeldState) {
    if list.len() < MAX_LISTED_REPOSITORIES {
        list.push(HeldRepository {
            repo,
            events,
            state,
        });
    }
}

/// The served repositories as the status shows them.
struct ServedTally {
    total: usize,
    newest: usize,
    behind: usize,
    reconciling: usize,
    listed: Vec<ServedRepository>,
    /// Listed once, none due or running, no release waiting for its reconciliation.
    settled: bool,
}

impl Purgatory {
    fn served_now(&self) -> ServedTally {
        let shared = &self.shared;
        let now = shared.clock.now();
        let listed_once = *lock_plain(&shared.listed);
        let (total, reconciling) = {
            let schedule = lock_plain(&shared.schedule);
            (schedule.len(), schedule.due_or_running(now))
        };
        let served = lock_plain(&shared.served);
        let behind = served.values().filter(|r| r.serving.is_behind()).count();
        let mut listed: Vec<ServedRepository> = served.values().cloned().collect();
        listed.sort_by_key(|r| !r.serving.is_behind());
        listed.truncate(MAX_LISTED_REPOSITORIES);
        ServedTally {
            total,
            newest: served.len() - behind,
            behind,
            reconciling,
            listed,
            settled: listed_once && reconciling == 0 && !shared.ctx.has_unreported_releases(),
        }
    }
}
