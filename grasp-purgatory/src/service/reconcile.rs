//! The loop's reconciliations: which repositories are served (every announcement of the
//! source, listed at start and every few minutes, and those the gate sees arrive), when
//! each is reconciled and how many at once (the core's [`ReconcileSchedule`]: a pool of
//! `reconcile_concurrency` places, owners in turn), which repositories a release makes
//! due (the core's [`MaintainerIndex`], recorded by each reconciliation), and what a
//! reconciliation's outcome changes (events held for their objects, the status, the
//! metrics).
//!
//! [`ReconcileSchedule`]: grasp_sync_core::purgatory::ReconcileSchedule
//! [`MaintainerIndex`]: grasp_sync_core::purgatory::MaintainerIndex

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::nip34::RepoRef;
use nostr::prelude::{Event, PublicKey};

use super::api::{lock_plain, Purgatory};
use crate::held::Origin;
use crate::serve::{ServedRepository, Serving};

/// How often every announcement of the source is listed again (at most the
/// reconciliation interval): repositories announced by another path than the gate.
const LIST_INTERVAL: Duration = Duration::from_secs(300);

impl Purgatory {
    /// Lists the served repositories when due (at start, then every
    /// [`LIST_INTERVAL`] unless the host reports every announcement it serves), on a
    /// task of its own.
    pub(super) fn list_repositories_if_due(&self) {
        let now = self.shared.clock.now();
        {
            let mut listed_at = lock_plain(&self.shared.listed_at);
            if !self.listing_due(*listed_at, now) {
                return;
            }
            *listed_at = Some(now);
        }
        let purgatory = self.clone();
        self.shared.tasks.spawn(async move {
            match purgatory.shared.reconciler.served_repositories().await {
                Ok(repos) => {
                    for repo in &repos {
                        purgatory.track_repository(repo);
                    }
                    *lock_plain(&purgatory.shared.listed) = true;
                    purgatory.shared.wake.notify_one();
                }
                Err(error) => {
                    tracing::warn!(%error, "listing the served repositories failed");
                    *lock_plain(&purgatory.shared.listed_at) = None;
                }
            }
        });
    }

    /// Whether the served repositories are to be listed at `now`, last listed at
    /// `listed_at` (`None`: never, or the last listing failed): at start; then every
    /// [`LIST_INTERVAL`] (at most the reconciliation interval), or, when the host
    /// reports every announcement it serves, once per reconciliation interval only: a
    /// live subscription shows what is stored from now on, and this finds an
    /// announcement stored with an old `created_at`, which a subscription's `since`
    /// hides.
    fn listing_due(&self, listed_at: Option<Instant>, now: Instant) -> bool {
        let Some(at) = listed_at else {
            return true;
        };
        let interval = self.shared.config.reconcile.interval;
        let every = if self.shared.announcements_followed {
            interval
        } else {
            LIST_INTERVAL.min(interval)
        };
        now.saturating_duration_since(at) >= every
    }

    /// Repositories that released events are reconciled at once, with the repositories
    /// whose maintainer set lists an author of the events released (a co-maintainer's
    /// state counts for each of them); no other: a release by anyone of an identifier
    /// shared by thousands of announcements starts a handful of reconciliations. A
    /// release whose authors are not known (a host's) counts as one by each of the
    /// repository's maintainers.
    pub(super) fn reconcile_released(&self) {
        let released = self.shared.ctx.take_released();
        if released.is_empty() {
            return;
        }
        let due = self.concerned_by(&released);
        let now = self.shared.clock.now();
        lock_plain(&self.shared.schedule).released(&due, now);
    }

    /// The repositories whose served refs `released` (repositories, with the authors
    /// of their released events) can change.
    fn concerned_by(&self, released: &BTreeMap<RepoRef, BTreeSet<PublicKey>>) -> BTreeSet<RepoRef> {
        let index = lock_plain(&self.shared.maintainers);
        let mut due = BTreeSet::new();
        for (repo, authors) in released {
            due.insert(repo.clone());
            let keys: Vec<PublicKey> = if authors.is_empty() {
                index.maintainers_of(repo).to_vec()
            } else {
                authors.iter().copied().collect()
            };
            for key in &keys {
                due.extend(index.listing(repo.identifier(), key).cloned());
            }
        }
        due
    }

    /// Starts reconciliations of the repositories due, as many as the pool has
    /// places ([`ReconcileSchedule::take_due`]); the rest start as these end.
    ///
    /// [`ReconcileSchedule::take_due`]: grasp_sync_core::purgatory::ReconcileSchedule::take_due
    pub(super) fn start_reconciliations(&self) {
        let now = self.shared.clock.now();
        let due = lock_plain(&self.shared.schedule).take_due(now);
        for key in due {
            let Ok(repo) = RepoRef::parse(&key) else {
                let mut schedule = lock_plain(&self.shared.schedule);
                schedule.finished(&key, now, false);
                schedule.forget(&key);
                continue;
            };
            let purgatory = self.clone();
            let slot = PoolSlot {
                unfinished: Some(self.clone()),
                key,
            };
            self.shared.tasks.spawn(async move {
                purgatory.reconcile_one(repo).await;
                slot.finished();
            });
        }
    }

    /// Has the objects of `events` (which `repo` should serve and lacks) fetched: held
    /// for them, or, over a host's purgatory (whose held events say what is needed),
    /// `repo` scheduled at once.
    fn fetch_for_reconciliation(&self, repo: &RepoRef, events: Vec<Event>) {
        if self.shared.host.is_some() {
            if !events.is_empty() {
                self.schedule(repo, Origin::Synced);
            }
            return;
        }
        for event in events {
            if let Err(error) = self.hold_for(event, repo) {
                tracing::warn!(%repo, %error, "holding an event for its missing objects failed");
            }
        }
    }

    /// Records `repo`'s maintainer set as its reconciliation read it (`None`: nobody
    /// announces it any more).
    fn record_maintainers(&self, repo: &RepoRef, maintainers: Option<&[PublicKey]>) {
        let mut index = lock_plain(&self.shared.maintainers);
        match maintainers {
            Some(set) => index.record(repo, set),
            None => index.forget(repo),
        }
    }

    /// One reconciliation of `repo`; its outcome recorded, the events it needs held,
    /// its next one scheduled.
    async fn reconcile_one(&self, repo: RepoRef) {
        let shared = &self.shared;
        let outcome = shared.reconciler.reconcile(&repo).await;
        shared.metrics.reconciliations.inc();
        let serving = match outcome {
            Ok(reconciled) => {
                shared
                    .metrics
                    .refs_updated
                    .inc_by(reconciled.refs_updated as u64);
                if reconciled.created_repository {
                    shared.metrics.repositories_created.inc();
                }
                self.fetch_for_reconciliation(&repo, reconciled.to_fetch);
                self.record_maintainers(&repo, reconciled.maintainers.as_deref());
                reconciled.serving
            }
            Err(reason) => {
                tracing::warn!(%repo, %reason, "reconciling the served refs failed");
                Some(Serving::Behind {
                    state: None,
                    missing_objects: 0,
                    reason,
                })
            }
        };
        let now = shared.clock.now();
        let key = repo.to_string();
        {
            let mut served = lock_plain(&shared.served);
            match serving {
                Some(serving) => {
                    let behind = serving.is_behind();
                    served.insert(
                        repo.clone(),
                        ServedRepository {
                            repo: repo.clone(),
                            serving,
                            reconciled_at: shared.clock.unix_time(),
                        },
                    );
                    lock_plain(&shared.schedule).finished(&key, now, behind);
                }
                None => {
                    tracing::debug!(%repo, "no longer announced: not served");
                    served.remove(&repo);
                    let mut schedule = lock_plain(&shared.schedule);
                    schedule.finished(&key, now, false);
                    schedule.forget(&key);
                }
            }
            let behind = served.values().filter(|r| r.serving.is_behind()).count();
            shared.metrics.repositories_behind.set(behind as i64);
        }
        shared.wake.notify_one();
    }
}

/// A running reconciliation's place in the pool: given back (the repository retried
/// after the behind delay) if the reconciliation ends without finishing, a panic or an
/// abort, so no lost task shrinks the pool for good. A reconciliation that finishes
/// gives its place back itself.
struct PoolSlot {
    /// The purgatory, until the reconciliation finished (and gave its place back).
    unfinished: Option<Purgatory>,
    key: String,
}

impl PoolSlot {
    /// The reconciliation finished and gave its place back itself.
    fn finished(mut self) {
        self.unfinished.take();
    }
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        let Some(purgatory) = self.unfinished.take() else {
            return;
        };
        let shared = &purgatory.shared;
        let now = shared.clock.now();
        lock_plain(&shared.schedule).finished(&self.key, now, true);
        shared.wake.notify_one();
    }
}
