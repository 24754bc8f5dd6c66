//! The spec's `ngit_sync_*` Prometheus metrics, plus bytes per relay and
//! dropped events by reason.

use grasp_sync_core::clock::Instant;
use grasp_sync_core::engine::SyncEngine;
use grasp_sync_core::health::HealthState;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Every metric, registered once.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    relay_connected: IntGaugeVec,
    pub(crate) connection_attempts: IntCounterVec,
    relay_status: IntGaugeVec,
    relay_failures: IntGaugeVec,
    pub(crate) events_synced: IntCounter,
    relays_tracked: IntGauge,
    relays_connected: IntGauge,
    relays_dead: IntGauge,
    pub(crate) bytes_received: IntCounterVec,
    pub(crate) bytes_sent: IntCounterVec,
    pub(crate) dropped: IntCounterVec,
    /// Engine drop counts already added to `dropped`.
    reported: Reported,
}

/// Engine counters already turned into metric increments.
#[derive(Clone, Debug, Default)]
struct Reported {
    dropped_forged: std::cell::Cell<u64>,
    dropped_off_filter: std::cell::Cell<u64>,
    dropped_unknown_subscription: std::cell::Cell<u64>,
}

impl Metrics {
    pub(crate) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Metrics {
            relay_connected: IntGaugeVec::new(
                Opts::new(
                    "ngit_sync_relay_connected",
                    "Per-relay connection status (1 connected, 0 not)",
                ),
                &["relay"],
            )?,
            connection_attempts: IntCounterVec::new(
                Opts::new(
                    "ngit_sync_connection_attempts_total",
                    "Connection attempts by relay and result",
                ),
                &["relay", "result"],
            )?,
            relay_status: IntGaugeVec::new(
                Opts::new(
                    "ngit_sync_relay_status",
                    "Relay health (1 healthy, 2 disconnected, 3 degraded, 4 dead, 5 rate_limited)",
                ),
                &["relay"],
            )?,
            relay_failures: IntGaugeVec::new(
                Opts::new(
                    "ngit_sync_relay_failures",
                    "Consecutive connection failures per relay",
                ),
                &["relay"],
            )?,
            events_synced: IntCounter::new(
                "ngit_sync_events_synced_total",
                "Events newly saved by sync",
            )?,
            relays_tracked: IntGauge::new(
                "ngit_sync_relays_tracked_total",
                "Relays discovered and tracked",
            )?,
            relays_connected: IntGauge::new(
                "ngit_sync_relays_connected_total",
                "Relays connected now",
            )?,
            relays_dead: IntGauge::new("ngit_sync_relays_dead_total", "Relays marked dead")?,
            bytes_received: IntCounterVec::new(
                Opts::new("ngit_sync_bytes_received_total", "Bytes received per relay"),
                &["relay"],
            )?,
            bytes_sent: IntCounterVec::new(
                Opts::new("ngit_sync_bytes_sent_total", "Bytes sent per relay"),
                &["relay"],
            )?,
            dropped: IntCounterVec::new(
                Opts::new(
                    "ngit_sync_events_dropped_total",
                    "Events dropped, by reason: forged, off_filter, unknown_subscription, rejected_by_store, store_error, malformed",
                ),
                &["reason"],
            )?,
            reported: Reported::default(),
        };
        registry.register(Box::new(metrics.relay_connected.clone()))?;
        registry.register(Box::new(metrics.connection_attempts.clone()))?;
        registry.register(Box::new(metrics.relay_status.clone()))?;
        registry.register(Box::new(metrics.relay_failures.clone()))?;
        registry.register(Box::new(metrics.events_synced.clone()))?;
        registry.register(Box::new(metrics.relays_tracked.clone()))?;
        registry.register(Box::new(metrics.relays_connected.clone()))?;
        registry.register(Box::new(metrics.relays_dead.clone()))?;
        registry.register(Box::new(metrics.bytes_received.clone()))?;
        registry.register(Box::new(metrics.bytes_sent.clone()))?;
        registry.register(Box::new(metrics.dropped.clone()))?;
        Ok(metrics)
    }

    /// The 2-second health and metrics tick.
    pub(crate) fn update(&self, engine: &SyncEngine, now: Instant) {
        let health = engine.health();
        for (relay, state) in engine.relay_index().iter() {
            let url = relay.as_str();
            self.relay_connected
                .with_label_values(&[url])
                .set(i64::from(state.is_connected()));
            let status = health.state(relay, now);
            self.relay_status
                .with_label_values(&[url])
                .set(status.metric_value());
            let failures = health
                .get(relay)
                .map_or(0, |relay| relay.consecutive_failures());
            self.relay_failures
                .with_label_values(&[url])
                .set(i64::from(failures));
        }
        let counts = health.counts(now);
        self.relays_tracked.set(counts.tracked as i64);
        self.relays_connected.set(counts.connected as i64);
        self.relays_dead
            .set(counts.in_state(HealthState::Dead) as i64);
        let stats = engine.stats();
        for (reason, now_total, before) in [
            (
                "forged",
                stats.dropped_forged,
                self.reported.dropped_forged.get(),
            ),
            (
                "off_filter",
                stats.dropped_off_filter,
                self.reported.dropped_off_filter.get(),
            ),
            (
                "unknown_subscription",
                stats.dropped_unknown_subscription,
                self.reported.dropped_unknown_subscription.get(),
            ),
        ] {
            self.dropped
                .with_label_values(&[reason])
                .inc_by(now_total.saturating_sub(before));
        }
        self.reported.dropped_forged.set(stats.dropped_forged);
        self.reported
            .dropped_off_filter
            .set(stats.dropped_off_filter);
        self.reported
            .dropped_unknown_subscription
            .set(stats.dropped_unknown_subscription);
    }
}
