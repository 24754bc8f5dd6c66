//! The spec's `purgatory_*` Prometheus metrics, plus held, released and expired events.
//!
//! They always exist (the status reads its totals from them) and are registered only
//! when the embedder gives a registry.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

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
                    "Git fetches in flight per clone-URL domain",
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
        Ok(())
    }
}
