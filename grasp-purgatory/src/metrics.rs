//! The spec's `purgatory_*` Prometheus metrics, plus held, released, expired and refused
//! events, refused and skipped clone URLs, created repositories and removed stale refs.
//!
//! They always exist (the status reads its totals from them). They are registered in a
//! registry of purgatory's own, which [`MetricsHandle::text`] encodes, and in the
//! embedder's when it gives one; each family can be renamed or left out (keyed by its
//! default name, [`METRIC_FAMILIES`]), and a family left out is registered in neither.
//! Every label set is bounded: `reason` and `result` take a few fixed values, and the
//! `domain` series (labelled by throttle key, see
//! `grasp_sync_core::purgatory::throttle_key`) of a domain are removed when the
//! domain goes idle (nothing in flight, in its window or queued).

use grasp_sync_core::metric_families::{
    FamilyNames, KnownFamily, MetricFamilies, MetricFamiliesError,
};
use prometheus::core::Collector;
use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::store::Cap;

/// The key of every metric family of purgatory, as
/// [`PurgatoryBuilder::metric_name`](crate::PurgatoryBuilder::metric_name) and
/// [`PurgatoryBuilder::leave_out_metric`](crate::PurgatoryBuilder::leave_out_metric) take
/// it: its default name (purgatory's families have no prefix).
pub const METRIC_FAMILIES: &[&str] = &[
    "purgatory_sync_queue_size",
    "purgatory_sync_attempts_total",
    "purgatory_sync_oids_fetched_total",
    "purgatory_domain_in_flight",
    "purgatory_domain_requests_total",
    "purgatory_events_held",
    "purgatory_events_released_total",
    "purgatory_events_expired_total",
    "purgatory_events_refused_total",
    "purgatory_events_evicted_total",
    "purgatory_events_refused_by_store_total",
    "purgatory_clone_url_refusals_total",
    "purgatory_stale_refs_removed_total",
    "purgatory_repositories_pruned_total",
    "purgatory_disk_quota_refusals_total",
    "purgatory_git_objects_bytes",
    "purgatory_clone_urls_skipped_total",
    "purgatory_repositories_created_total",
    "purgatory_reconciliations_total",
    "purgatory_refs_updated_total",
    "purgatory_repositories_behind",
];

/// The name of every family under `families`' settings (`None`: left out), checked.
pub(crate) fn family_names(families: &MetricFamilies) -> Result<FamilyNames, MetricFamiliesError> {
    let known: Vec<KnownFamily> = METRIC_FAMILIES
        .iter()
        .map(|&family| KnownFamily::new(family, family))
        .collect();
    families.resolve(&known)
}

/// Purgatory's metrics as Prometheus text ([`Purgatory::metrics_handle`]), for a host
/// whose `/metrics` is served from a registry of another prometheus version (the
/// `Collector` trait is bound to its crate version: a prometheus 0.13 registry cannot
/// take ours, 0.14): the host appends [`MetricsHandle::text`] to its own output. Cheap
/// to clone, `Send` and `Sync`; it reads the values live while purgatory runs, and holds
/// the families as the builder named them, without those left out.
///
/// [`Purgatory::metrics_handle`]: crate::Purgatory::metrics_handle
#[derive(Clone, Debug)]
pub struct MetricsHandle {
    /// A registry holding only purgatory's families.
    own: Registry,
}

impl MetricsHandle {
    /// Every family of purgatory's but those left out (and nothing of the host's),
    /// encoded in the Prometheus text exposition format 0.0.4, with `# HELP` and
    /// `# TYPE` lines.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.own.gather(), &mut out) {
            // Encoding into a `Vec` fails only on a family that breaks the format,
            // which ours never are; say so rather than panic.
            tracing::warn!(%error, "encoding the purgatory metrics failed");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// A metric that can be registered in more than one registry (each registration takes
/// its own box; the clones share the values).
trait CloneCollector {
    /// A boxed clone, for `Registry::register` and `Registry::unregister`.
    fn boxed(&self) -> Box<dyn Collector>;
}

impl<T: Collector + Clone + 'static> CloneCollector for T {
    fn boxed(&self) -> Box<dyn Collector> {
        Box::new(self.clone())
    }
}

/// Every purgatory metric, registered once in purgatory's own registry and the
/// caller's (if any), but those left out.
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
    /// Creates the metrics under their default names, not registered anywhere yet.
    #[cfg(test)]
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        Self::named(&FamilyNames::default())
    }

    /// Creates the metrics, named as `names` says (a family left out keeps its default
    /// name: it is never registered), not registered anywhere yet.
    pub(crate) fn named(names: &FamilyNames) -> Result<Self, prometheus::Error> {
        let name = |family: &'static str| names.name(family).unwrap_or(family).to_owned();
        Ok(Metrics {
            queue_size: IntGauge::new(
                name("purgatory_sync_queue_size"),
                "Identifiers waiting in the purgatory sync queue",
            )?,
            sync_attempts: IntCounterVec::new(
                Opts::new(
                    name("purgatory_sync_attempts_total"),
                    "Sync attempts of identifiers, by result (done or retry)",
                ),
                &["result"],
            )?,
            oids_fetched: IntCounter::new(
                name("purgatory_sync_oids_fetched_total"),
                "Git objects fetched into local repositories",
            )?,
            domain_in_flight: IntGaugeVec::new(
                Opts::new(
                    name("purgatory_domain_in_flight"),
                    "Git fetches in flight per clone-URL domain (its throttle key: the registrable \
                     domain, an IPv4 address or an IPv6 /64)",
                ),
                &["domain"],
            )?,
            domain_requests: IntCounterVec::new(
                Opts::new(
                    name("purgatory_domain_requests_total"),
                    "Git fetches started per clone-URL domain",
                ),
                &["domain"],
            )?,
            events_held: IntGauge::new(name("purgatory_events_held"), "Events waiting in purgatory")?,
            events_released: IntCounter::new(
                name("purgatory_events_released_total"),
                "Events released from purgatory once their git data was present",
            )?,
            events_expired: IntCounter::new(
                name("purgatory_events_expired_total"),
                "Events dropped from purgatory because their git data never arrived",
            )?,
            events_refused: IntCounterVec::new(
                Opts::new(
                    name("purgatory_events_refused_total"),
                    "Events refused by purgatory, by reason (repository_full, author_full, \
                     total_full, repository_bytes_full, author_bytes_full, total_bytes_full, \
                     journal)",
                ),
                &["reason"],
            )?,
            events_evicted: IntCounterVec::new(
                Opts::new(
                    name("purgatory_events_evicted_total"),
                    "Events dropped from a full purgatory to make room for another author's \
                     event, their author holding the most, by the limit reached (the reasons \
                     of purgatory_events_refused_total)",
                ),
                &["reason"],
            )?,
            events_refused_by_store: IntCounter::new(
                name("purgatory_events_refused_by_store_total"),
                "Events whose git data arrived but that the store they are released to (the \
                 own relay) refused for good (over its limits, against its policy): dropped \
                 from purgatory, not offered again",
            )?,
            url_refusals: IntCounterVec::new(
                Opts::new(
                    name("purgatory_clone_url_refusals_total"),
                    "Clone URLs refused before any process ran, once per URL, by reason \
                     (policy, forbidden_address, unresolvable)",
                ),
                &["reason"],
            )?,
            disk_quota_refusals: IntCounterVec::new(
                Opts::new(
                    name("purgatory_disk_quota_refusals_total"),
                    "Fetches into (or creations of) local repositories refused because the \
                     git root or the owner's repositories hold their quota of objects, by \
                     quota (total, author)",
                ),
                &["quota"],
            )?,
            git_objects_bytes: IntGauge::new(
                name("purgatory_git_objects_bytes"),
                "Bytes of objects of the local repositories purgatory used, as last measured",
            )?,
            repositories_pruned: IntCounter::new(
                name("purgatory_repositories_pruned_total"),
                "Times a local repository's unreachable objects were deleted (git gc \
                 --prune=now) after events of it left purgatory unreleased",
            )?,
            stale_refs_removed: IntCounter::new(
                name("purgatory_stale_refs_removed_total"),
                "refs/purgatory/* deleted because no held event needs them any more",
            )?,
            clone_urls_skipped: IntCounterVec::new(
                Opts::new(
                    name("purgatory_clone_urls_skipped_total"),
                    "Clone URLs skipped when choosing where to fetch from, per sync attempt, \
                     by reason (own_service: on our own service, the destination; over_cap: \
                     past the clone URLs one attempt tries)",
                ),
                &["reason"],
            )?,
            repositories_created: IntCounter::new(
                name("purgatory_repositories_created_total"),
                "Local bare repositories created by purgatory (git init --bare)",
            )?,
            reconciliations: IntCounter::new(
                name("purgatory_reconciliations_total"),
                "Reconciliations of a served repository's refs with its newest state and pull \
                 requests",
            )?,
            refs_updated: IntCounter::new(
                name("purgatory_refs_updated_total"),
                "Served refs (branches, tags, refs/nostr/*) created, moved or deleted by \
                 reconciliations",
            )?,
            repositories_behind: IntGauge::new(
                name("purgatory_repositories_behind"),
                "Served repositories that do not serve their newest state or a pull request \
                 tip yet",
            )?,
        })
    }

    /// Registers every metric in `registry` but those `names` leaves out.
    pub(crate) fn register(
        &self,
        registry: &Registry,
        names: &FamilyNames,
    ) -> Result<(), prometheus::Error> {
        let families: [(&str, &dyn CloneCollector); 21] = [
            ("purgatory_sync_queue_size", &self.queue_size),
            ("purgatory_sync_attempts_total", &self.sync_attempts),
            ("purgatory_sync_oids_fetched_total", &self.oids_fetched),
            ("purgatory_domain_in_flight", &self.domain_in_flight),
            ("purgatory_domain_requests_total", &self.domain_requests),
            ("purgatory_events_held", &self.events_held),
            ("purgatory_events_released_total", &self.events_released),
            ("purgatory_events_expired_total", &self.events_expired),
            ("purgatory_events_refused_total", &self.events_refused),
            ("purgatory_events_evicted_total", &self.events_evicted),
            (
                "purgatory_events_refused_by_store_total",
                &self.events_refused_by_store,
            ),
            ("purgatory_clone_url_refusals_total", &self.url_refusals),
            (
                "purgatory_stale_refs_removed_total",
                &self.stale_refs_removed,
            ),
            (
                "purgatory_repositories_pruned_total",
                &self.repositories_pruned,
            ),
            (
                "purgatory_disk_quota_refusals_total",
                &self.disk_quota_refusals,
            ),
            ("purgatory_git_objects_bytes", &self.git_objects_bytes),
            (
                "purgatory_clone_urls_skipped_total",
                &self.clone_urls_skipped,
            ),
            (
                "purgatory_repositories_created_total",
                &self.repositories_created,
            ),
            ("purgatory_reconciliations_total", &self.reconciliations),
            ("purgatory_refs_updated_total", &self.refs_updated),
            ("purgatory_repositories_behind", &self.repositories_behind),
        ];
        let exported: Vec<&dyn CloneCollector> = families
            .into_iter()
            .filter(|(family, _)| names.name(family).is_some())
            .map(|(_, collector)| collector)
            .collect();
        // Every one or none: when the registry refuses one (a family of that name is
        // the host's), those registered already are unregistered again, so the host can
        // build again with that family left out.
        for (done, collector) in exported.iter().enumerate() {
            if let Err(error) = registry.register(collector.boxed()) {
                for registered in &exported[..done] {
                    // Unregistering what this call registered cannot fail.
                    let _ = registry.unregister(registered.boxed());
                }
                return Err(error);
            }
        }
        Ok(())
    }

    /// Registers every metric `names` does not leave out in a registry of its own and
    /// in `host`'s (if given): the handle encodes the first.
    pub(crate) fn register_with_handle(
        &self,
        host: Option<&Registry>,
        names: &FamilyNames,
    ) -> Result<MetricsHandle, prometheus::Error> {
        let own = Registry::new();
        self.register(&own, names)?;
        if let Some(host) = host {
            self.register(host, names)?;
        }
        Ok(MetricsHandle { own })
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
