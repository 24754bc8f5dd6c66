//! The spec's `ngit_sync_*` Prometheus metrics, plus bytes per relay and
//! dropped events by reason.

use std::cell::RefCell;
use std::collections::HashMap;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::engine::SyncEngine;
use grasp_sync_core::health::HealthState;
use nostr::prelude::RelayUrl;
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
    pub(crate) refused: IntCounterVec,
    /// Engine counters already added to `dropped` and `refused`, by label.
    reported: RefCell<HashMap<&'static str, u64>>,
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
            refused: IntCounterVec::new(
                Opts::new(
                    "ngit_sync_refused_total",
                    "Work refused by a policy or a cap, by reason: relay_policy, resolved_address, relays_over_cap, relays_evicted (a relay that served nothing of ours in its trial period yielded its slot), negentropy_session_cut, root_events_over_cap, not_ours (Layer 1 events not stored: not ours)",
                ),
                &["reason"],
            )?,
            reported: RefCell::default(),
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
        registry.register(Box::new(metrics.refused.clone()))?;
        Ok(metrics)
    }

    /// The 2-second health and metrics tick.
    pub(crate) fn update(&self, engine: &SyncEngine, now: Instant) {
        for (relay, _) in engine.relay_states() {
            let url = relay.as_str();
            self.relay_connected
                .with_label_values(&[url])
                .set(i64::from(engine.is_connected(relay)));
            self.relay_status
                .with_label_values(&[url])
                .set(engine.health_state(relay, now).metric_value());
            let failures = engine
                .relay_health(relay)
                .map_or(0, |health| health.consecutive_failures());
            self.relay_failures
                .with_label_values(&[url])
                .set(i64::from(failures));
        }
        let counts = engine.health_counts(now);
        self.relays_tracked.set(counts.tracked as i64);
        self.relays_connected.set(counts.connected as i64);
        self.relays_dead
            .set(counts.in_state(HealthState::Dead) as i64);
        let stats = engine.stats();
        for (vec, reason, total) in [
            (&self.dropped, "forged", stats.dropped_forged),
            (&self.dropped, "off_filter", stats.dropped_off_filter),
            (
                &self.dropped,
                "unknown_subscription",
                stats.dropped_unknown_subscription,
            ),
            (&self.dropped, "oversized", stats.dropped_oversized),
            (
                &self.dropped,
                "candidate_over_cap",
                stats.candidates_dropped,
            ),
            (
                &self.refused,
                "bad_events_cut_off",
                stats.relays_cut_for_bad_events,
            ),
            (&self.refused, "relay_policy", stats.relays_refused),
            (&self.refused, "relays_over_cap", stats.relays_over_cap),
            (&self.refused, "relays_evicted", stats.relays_evicted),
            (
                &self.refused,
                "negentropy_session_cut",
                stats.negentropy_sessions_cut,
            ),
            (
                &self.refused,
                "root_events_over_cap",
                stats.root_events_over_cap,
            ),
            (&self.refused, "not_ours", stats.not_ours),
        ] {
            let mut reported = self.reported.borrow_mut();
            let before = reported.entry(reason).or_default();
            vec.with_label_values(&[reason])
                .inc_by(total.saturating_sub(*before));
            *before = total;
        }
    }

    /// Removes every series labelled with `relay` (a relay no longer
    /// tracked): the label sets stay bounded by the relays tracked.
    pub(crate) fn forget_relay(&self, relay: &RelayUrl) {
        let url = relay.as_str();
        for vec in [
            &self.relay_connected,
            &self.relay_status,
            &self.relay_failures,
        ] {
            let _ = vec.remove_label_values(&[url]);
        }
        for vec in [&self.bytes_received, &self.bytes_sent] {
            let _ = vec.remove_label_values(&[url]);
        }
        for result in ["started", "success", "failure"] {
            let _ = self.connection_attempts.remove_label_values(&[url, result]);
        }
    }
}
