//! The spec's `purgatory_*` Prometheus metrics, plus held, released, expired and refused
//! events, refused and skipped clone URLs, created repositories and removed stale refs.
//!
//! They always exist (the status reads its totals from them) and are registered only
//! when the embedder gives a registry. Every label set is bounded: `reason` and `result`
//! take a few fixed values, and the `domain` series (labelled by throttle key, see
//! `grasp_sync_core::purgatory::throttle_key`) of a domain are removed when the
//! domain goes idle (nothing in flight, in its window or queued).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::store::Cap;

/// Every purgatory metric, registered once in the caller's registry (if any).
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    pub(crate) queue_size: IntGauge,
    pub(crate) sync_attempts: IntCounterVec,
    pub(crate) oids_fetched: IntCounter,
    pub(crate) domain_in_flight: IntGaugeVec,
    pub(crate) domain_requests: IntCounterVec,
    pub(crate) events_held: IntGauge,
    pub(crate) events_released: IntCounter,
    pub(crate) events_expired: IntCounter,
    pub(crate) events_refused: IntCounterVec,
    pub(crate) events_evicted: IntCounterVec,
    pub(crate) events_refused_by_store: IntCounter,
    pub(crate) url_refusals: IntCounterVec,
    pub(crate) stale_refs_removed: IntCounter,
    pub(crate) repositories_pruned: IntCounter,
    pub(crate) disk_quota_refusals: IntCounterVec,
    pub(crate) git_objects_bytes: IntGauge,
    pub(crate) clone_urls_skipped: IntCounterVec,
    pub(crate) repositories_created: IntCounter,
    pub(crate) reconciliations: IntCounter,
    pub(crate) refs_updated: IntCounter,
    pub(crate) repositories_behind: IntGauge,
}

impl Metrics {
    /// Creates the metrics, not registered anywhere yet.
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        Ok(Metrics {
            queue_size: IntGauge::new(
                "purgatory_sync_queue_size",
                "Identifiers waiting in the purgatory sync queue",
            )?,
            sync_attempts: IntCounterVec::new(
                Opts::new(
                    "purgatory_sync_attempts_total",
                    "Sync attempts of identifiers, by result (done or retry)",
                ),
                &["result"],
            )?,
            oids_fetched: IntCounter::new(
                "purgatory_sync_oids_fetched_total",
                "Git objects fetched into local repositories",
            )?,
            domain_in_flight: IntGaugeVec::new(
                Opts::new(
                    "purgatory_domain_in_flight",
                    "Git fetches in flight per clone-URL domain (its throttle key: the registrable \
                     domain, an IPv4 address or an IPv6 /64)",
                ),
                &["domain"],
            )?,
            domain_requests: IntCounterVec::new(
                Opts::new(
                    "purgatory_domain_requests_total",
                    "Git fetches started per clone-URL domain",
                ),
                &["domain"],
            )?,
            events_held: IntGauge::new("purgatory_events_held", "Events waiting in purgatory")?,
            events_released: IntCounter::new(
                "purgatory_events_released_total",
                "Events released from purgatory once their git data was present",
            )?,
            events_expired: IntCounter::new(
                "purgatory_events_expired_total",
                "Events dropped from purgatory because their git data never arrived",
            )?,
            events_refused: IntCounterVec::new(
                Opts::new(
                    "purgatory_events_refused_total",
                    "Events refused by purgatory, by reason (repository_full, author_full, \
                     total_full, repository_bytes_full, author_bytes_full, total_bytes_full, \
                     journal)",
                ),
                &["reason"],
            )?,
            events_evicted: IntCounterVec::new(
                Opts::new(
                    "purgatory_events_evicted_total",
                    "Events dropped from a full purgatory to make room for another author's \
                     event, their author holding the most, by the limit reached (the reasons \
                     of purgatory_events_refused_total)",
                ),
                &["reason"],
            )?,
            events_refused_by_store: IntCounter::new(
                "purgatory_events_refused_by_store_total",
                "Events whose git data arrived but that the store they are released to (the \
                 own relay) refused for good (over its limits, against its policy): dropped \
                 from purgatory, not offered again",
            )?,
            url_refusals: IntCounterVec::new(
                Opts::new(
                    "purgatory_clone_url_refusals_total",
                    "Clone URLs refused before any process ran, once per URL, by reason \
                     (policy, forbidden_address, unresolvable)",
                ),
                &["reason"],
            )?,
            disk_quota_refusals: IntCounterVec::new(
                Opts::new(
                    "purgatory_disk_quota_refusals_total",
                    "Fetches into (or creations of) local repositories refused because the \
                     git root or the owner's repositories hold their quota of objects, by \
                     quota (total, author)",
                ),
                &["quota"],
            )?,
            git_objects_bytes: IntGauge::new(
                "purgatory_git_objects_bytes",
                "Bytes of objects of the local repositories purgatory used, as last measured",
            )?,
            repositories_pruned: IntCounter::new(
                "purgatory_repositories_pruned_total",
                "Times a local repository's unreachable objects were deleted (git gc \
                 --prune=now) after events of it left purgatory unreleased",
            )?,
            stale_refs_removed: IntCounter::new(
                "purgatory_stale_refs_removed_total",
                "refs/purgatory/* deleted because no held event needs them any more",
            )?,
            clone_urls_skipped: IntCounterVec::new(
                Opts::new(
                    "purgatory_clone_urls_skipped_total",
                    "Clone URLs skipped when choosing where to fetch from, per sync attempt, \
                     by reason (own_service: on our own service, the destination; over_cap: \
                     past the clone URLs one attempt tries)",
                ),
                &["reason"],
            )?,
            repositories_created: IntCounter::new(
                "purgatory_repositories_created_total",
                "Local bare repositories created by purgatory (git init --bare)",
            )?,
            reconciliations: IntCounter::new(
                "purgatory_reconciliations_total",
                "Reconciliations of a served repository's refs with its newest state and pull \
                 requests",
            )?,
            refs_updated: IntCounter::new(
                "purgatory_refs_updated_total",
                "Served refs (branches, tags, refs/nostr/*) created, moved or deleted by \
                 reconciliations",
            )?,
            repositories_behind: IntGauge::new(
                "purgatory_repositories_behind",
                "Served repositories that do not serve their newest state or a pull request \
                 tip yet",
            )?,
        })
    }

    /// Registers every metric in `registry`.
    pub(crate) fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.queue_size.clone()))?;
        registry.register(Box::new(self.sync_attempts.clone()))?;
        registry.register(Box::new(self.oids_fetched.clone()))?;
        registry.register(Box::new(self.domain_in_flight.clone()))?;
        registry.register(Box::new(self.domain_requests.clone()))?;
        registry.register(Box::new(self.events_held.clone()))?;
        registry.register(Box::new(self.events_released.clone()))?;
        registry.register(Box::new(self.events_expired.clone()))?;
        registry.register(Box::new(self.events_refused.clone()))?;
        registry.register(Box::new(self.events_evicted.clone()))?;
        registry.register(Box::new(self.events_refused_by_store.clone()))?;
        registry.register(Box::new(self.url_refusals.clone()))?;
        registry.register(Box::new(self.stale_refs_removed.clone()))?;
        registry.register(Box::new(self.repositories_pruned.clone()))?;
        registry.register(Box::new(self.disk_quota_refusals.clone()))?;
        registry.register(Box::new(self.git_objects_bytes.clone()))?;
        registry.register(Box::new(self.clone_urls_skipped.clone()))?;
        registry.register(Box::new(self.repositories_created.clone()))?;
        registry.register(Box::new(self.reconciliations.clone()))?;
        registry.register(Box::new(self.refs_updated.clone()))?;
        registry.register(Box::new(self.repositories_behind.clone()))?;
        Ok(())
    }

    /// Drops the `domain` series of `domain` (it went idle), so the label set follows
    /// the active domains only.
    pub(crate) fn forget_domain(&self, domain: &str) {
        // An error only means the series did not exist.
        let _ = self.domain_in_flight.remove_label_values(&[domain]);
        let _ = self.domain_requests.remove_label_values(&[domain]);
    }

    /// How many events were evicted, over every reason.
    pub(crate) fn events_evicted_total(&self) -> u64 {
        Cap::ALL
            .iter()
            .map(|cap| self.events_evicted.with_label_values(&[cap.label()]).get())
            .sum()
    }

    /// How many events were refused, over every reason.
    pub(crate) fn events_refused_total(&self) -> u64 {
        Cap::ALL
            .iter()
            .map(|cap| cap.label())
            .chain(["journal"])
            .map(|reason| self.events_refused.with_label_values(&[reason]).get())
            .sum()
    }
}
