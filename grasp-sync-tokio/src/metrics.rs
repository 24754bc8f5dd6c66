//! The spec's sync metrics under a prefix of our own (`grasp_sync_*` by
//! default: the reference GRASP server's `ngit_sync_*` names mean other
//! things there, e.g. its `ngit_sync_relay_connected` is a 0–4 state), plus
//! bytes per relay, dropped events by reason, GRASP-03 Sync+'s
//! `<prefix>_plus_*`, and the reference server's connection state
//! (`<prefix>_relay_connection_state`).
//!
//! Each family can be renamed or left out ([`MetricFamilies`], keyed as in
//! [`METRIC_FAMILIES`]); [`REFERENCE_SERVER_FAMILIES`] names those the
//! reference server exports with the same meaning.
//!
//! The connection gauges (`relay_connected`, `relay_connection_state`,
//! `relay_status`, `relay_failures`, `relays_connected_total`) follow each
//! connect, disconnect and connect failure as the run loop handles it
//! ([`Metrics::connection_changed`]); the rest are refreshed on the run
//! loop's tick ([`Metrics::update`]).

use std::cell::RefCell;
use std::collections::HashMap;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::engine::{EngineStats, SyncEngine, SyncPlusCounts};
use grasp_sync_core::health::HealthState;
use grasp_sync_core::metric_families::{FamilyNames, KnownFamily, MetricFamilies};
use nostr::prelude::RelayUrl;
use prometheus::core::Collector;
use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The prefix of every metric name when the host names none.
pub(crate) const DEFAULT_PREFIX: &str = "grasp_sync";

/// The key of every metric family of the sync, as
/// [`SyncManagerBuilder::metric_name`](crate::SyncManagerBuilder::metric_name)
/// and [`SyncManagerBuilder::leave_out_metric`](crate::SyncManagerBuilder::leave_out_metric)
/// take it: the family's name without the prefix (`relay_connected` is
/// `grasp_sync_relay_connected` by default). All are exported by default
/// but `connection_results_total`, which repeats `connection_attempts_total`
/// without its `started` series and is exported once named.
pub const METRIC_FAMILIES: &[&str] = &[
    "relay_connected",
    "relay_connection_state",
    "connection_attempts_total",
    CONNECTION_RESULTS,
    "relay_status",
    "relay_failures",
    "events_synced_total",
    "relays_tracked_total",
    "relays_connected_total",
    "relays_dead_total",
    "bytes_received_total",
    "bytes_sent_total",
    "events_dropped_total",
    "refused_total",
    "plus_events_total",
    "plus_passes_total",
    "plus_participants",
    "plus_relay_lists",
    "plus_outbox_relays",
];

/// The family exported only once named: connection attempts by result,
/// `success` and `failure` only.
const CONNECTION_RESULTS: &str = "connection_results_total";

/// The families the reference GRASP server (ngit-grasp 1.0, its
/// `src/sync/metrics.rs` and `docs/explanation/monitoring.md`) exports with
/// a meaning ours have too, by our key and its name, as
/// [`SyncManagerBuilder::reference_server_metrics`](crate::SyncManagerBuilder::reference_server_metrics)
/// names them. Its `ngit_sync_relay_connected` is our
/// `relay_connection_state` (0 disconnected, 1 connecting, 2 syncing,
/// 3 connected, 4 connected with historic sync failures), not our 0/1
/// `relay_connected`; its `ngit_sync_connection_attempts_total` counts
/// `success` and `failure` only, as our `connection_results_total` does.
/// Its rejected-events index (`ngit_sync_rejected_*`) and naughty list
/// (`ngit_sync_naughty_*`) have no counterpart here and are not in the set.
pub const REFERENCE_SERVER_FAMILIES: &[(&str, &str)] = &[
    ("relay_connection_state", "ngit_sync_relay_connected"),
    (CONNECTION_RESULTS, "ngit_sync_connection_attempts_total"),
    ("relay_status", "ngit_sync_relay_status"),
    ("relay_failures", "ngit_sync_relay_failures"),
    ("events_synced_total", "ngit_sync_events_synced_total"),
    ("relays_tracked_total", "ngit_sync_relays_tracked_total"),
    ("relays_connected_total", "ngit_sync_relays_connected_total"),
    ("relays_dead_total", "ngit_sync_relays_dead_total"),
];

/// The name of every family under `prefix` and `families`' settings
/// (`None`: left out), checked.
pub(crate) fn family_names(
    prefix: &str,
    families: &MetricFamilies,
) -> Result<FamilyNames, grasp_sync_core::metric_families::MetricFamiliesError> {
    let prefix = prefix.trim_end_matches('_');
    let known: Vec<KnownFamily> = METRIC_FAMILIES
        .iter()
        .map(|&family| {
            let name = format!("{prefix}_{family}");
            if family == CONNECTION_RESULTS {
                KnownFamily::on_request(family, name)
            } else {
                KnownFamily::new(family, name)
            }
        })
        .collect();
    families.resolve(&known)
}

/// Every metric, registered once.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    relay_connected: IntGaugeVec,
    /// The reference server's 0–4 connection state; `None` when left out
    /// (each value asks the engine whether the relay's history is confirmed:
    /// not asked when nobody reads the answer).
    relay_connection_state: Option<IntGaugeVec>,
    pub(crate) connection_attempts: IntCounterVec,
    /// Attempts by result, `success` and `failure` only.
    connection_results: IntCounterVec,
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
    /// Events newly stored that came only through Sync+.
    sync_plus_events: IntCounter,
    /// Sync+ passes.
    sync_plus_passes: IntCounter,
    /// Participants remembered (Sync+).
    sync_plus_participants: IntGauge,
    /// Participants whose relay list is known (Sync+).
    sync_plus_relay_lists: IntGauge,
    /// Outbox relays synced from this pass (Sync+).
    sync_plus_outbox_relays: IntGauge,
    /// Engine counters already added to the counters above, by label (the
    /// reason, or the counter's own name).
    reported: RefCell<HashMap<&'static str, u64>>,
}

/// A metric that can be registered in more than one registry (each
/// registration takes its own box; the clones share the values).
trait CloneCollector {
    /// A boxed clone, for `Registry::register`.
    fn boxed(&self) -> Box<dyn Collector>;
}

impl<T: Collector + Clone + 'static> CloneCollector for T {
    fn boxed(&self) -> Box<dyn Collector> {
        Box::new(self.clone())
    }
}

/// Registers every one of `collectors` in `registry`, or none: when the
/// registry refuses one (a family of that name is the host's), those
/// registered already are unregistered again, so the host can build again
/// with that family left out.
fn register_all(
    registry: &Registry,
    collectors: &[&dyn CloneCollector],
) -> Result<(), prometheus::Error> {
    for (done, collector) in collectors.iter().enumerate() {
        if let Err(error) = registry.register(collector.boxed()) {
            for registered in &collectors[..done] {
                // Unregistering what this call registered cannot fail.
                let _ = registry.unregister(registered.boxed());
            }
            return Err(error);
        }
    }
    Ok(())
}

/// Our metrics as Prometheus text, for a host whose `/metrics` is served
/// from a registry of another prometheus version.
///
/// [`SyncManagerBuilder::registry`](crate::SyncManagerBuilder::registry)
/// takes a `prometheus` 0.14 `Registry`; prometheus's `Collector` trait is
/// bound to its crate version, so a host on prometheus 0.13 (or another
/// library) cannot register our collectors. Such a host appends
/// [`MetricsHandle::text`] to its own text output instead. The handle is
/// cheap to clone, `Send` and `Sync`, and reads the values live while
/// [`SyncManager::run`](crate::SyncManager::run) goes on. It holds the
/// families as the builder named them, without those left out
/// ([`SyncManagerBuilder::leave_out_metric`](crate::SyncManagerBuilder::leave_out_metric)):
/// a family of the host's with one of our names must be left out or
/// renamed here, or the host's `/metrics` would hold the name twice.
///
/// ```no_run
/// # fn demo(manager: &grasp_sync_tokio::SyncManager, hosts_own_text: String) {
/// // A host on another prometheus version: its own families, then ours.
/// let handle = manager.metrics_handle();
/// let body = format!("{hosts_own_text}{}", handle.text());
/// # drop(body);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MetricsHandle {
    /// A registry holding only our families.
    own: Registry,
}

impl MetricsHandle {
    /// Every family of ours but those left out (and nothing of the host's),
    /// encoded in the Prometheus text exposition format 0.0.4, with
    /// `# HELP` and `# TYPE` lines.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.own.gather(), &mut out) {
            // Encoding into a `Vec` fails only on a family that breaks the
            // format, which ours never are; say so rather than panic.
            tracing::warn!(%error, "encoding the sync metrics failed");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Metrics {
    /// Every metric, named as `names` says, registered in `own` (the
    /// families [`MetricsHandle::text`] encodes) and in the host's
    /// `registry`, if one was given; a family left out is registered in
    /// neither (its values are kept all the same).
    pub(crate) fn register(
        own: &Registry,
        host: Option<&Registry>,
        prefix: &str,
        names: &FamilyNames,
    ) -> Result<Self, prometheus::Error> {
        let prefix = prefix.trim_end_matches('_');
        // A family left out keeps its default name: it is never registered.
        let name = |family: &str| {
            names
                .name(family)
                .map_or_else(|| format!("{prefix}_{family}"), str::to_owned)
        };
        let connection_state = IntGaugeVec::new(
            Opts::new(
                name("relay_connection_state"),
                "Per-relay connection state, as the reference GRASP server reports it \
                 (0 disconnected, 1 connecting, 2 syncing, 3 connected and historic sync \
                 confirmed, 4 connected and historic sync failed, waiting for its retry)",
            ),
            &["relay"],
        )?;
        let metrics = Metrics {
            relay_connected: IntGaugeVec::new(
                Opts::new(
                    name("relay_connected"),
                    "Per-relay connection status (1 connected, 0 not)",
                ),
                &["relay"],
            )?,
            relay_connection_state: names
                .name("relay_connection_state")
                .map(|_| connection_state.clone()),
            connection_attempts: IntCounterVec::new(
                Opts::new(
                    name("connection_attempts_total"),
                    "Connection attempts by relay and result",
                ),
                &["relay", "result"],
            )?,
            connection_results: IntCounterVec::new(
                Opts::new(
                    name(CONNECTION_RESULTS),
                    "Connection attempts by relay and result (success or failure)",
                ),
                &["relay", "result"],
            )?,
            relay_status: IntGaugeVec::new(
                Opts::new(
                    name("relay_status"),
                    "Relay health (1 healthy, 2 disconnected, 3 degraded, 4 dead, 5 rate_limited)",
                ),
                &["relay"],
            )?,
            relay_failures: IntGaugeVec::new(
                Opts::new(
                    name("relay_failures"),
                    "Consecutive connection failures per relay",
                ),
                &["relay"],
            )?,
            events_synced: IntCounter::new(
                name("events_synced_total"),
                "Events newly saved by sync",
            )?,
            relays_tracked: IntGauge::new(
                name("relays_tracked_total"),
                "Relays discovered and tracked",
            )?,
            relays_connected: IntGauge::new(
                name("relays_connected_total"),
                "Relays connected now",
            )?,
            relays_dead: IntGauge::new(name("relays_dead_total"), "Relays marked dead")?,
            bytes_received: IntCounterVec::new(
                Opts::new(name("bytes_received_total"), "Bytes received per relay"),
                &["relay"],
            )?,
            bytes_sent: IntCounterVec::new(
                Opts::new(name("bytes_sent_total"), "Bytes sent per relay"),
                &["relay"],
            )?,
            dropped: IntCounterVec::new(
                Opts::new(
                    name("events_dropped_total"),
                    "Events dropped, by reason: forged, off_filter, unknown_subscription, rejected_by_store, store_error, malformed",
                ),
                &["reason"],
            )?,
            refused: IntCounterVec::new(
                Opts::new(
                    name("refused_total"),
                    "Work refused by a policy or a cap, by reason: relay_policy, resolved_address, relays_over_cap, relays_evicted (a relay that delivered nothing of ours no other relay did, past its trial period, yielded its slot), negentropy_session_cut, root_events_over_cap, not_ours (Layer 1 events not stored: not ours), sync_plus_participants_over_cap, sync_plus_list_relays_left_out (write relays of a relay list over the cap or refused by the policy), sync_plus_relays_over_cap (outbox relays over the global Sync+ cap)",
                ),
                &["reason"],
            )?,
            sync_plus_events: IntCounter::new(
                name("plus_events_total"),
                "Events newly stored that came from a relay only Sync+ (GRASP-03) brought in: the conversation from participants' own relays",
            )?,
            sync_plus_passes: IntCounter::new(
                name("plus_passes_total"),
                "Sync+ (GRASP-03) passes: each moves the selection of participants and outbox relays on",
            )?,
            sync_plus_participants: IntGauge::new(
                name("plus_participants"),
                "Sync+ (GRASP-03) participants remembered over every repository (a key in two repositories counts twice)",
            )?,
            sync_plus_relay_lists: IntGauge::new(
                name("plus_relay_lists"),
                "Sync+ (GRASP-03) participants whose relay list (kind 10002 or 10317) is known",
            )?,
            sync_plus_outbox_relays: IntGauge::new(
                name("plus_outbox_relays"),
                "Sync+ (GRASP-03) outbox relays synced from this pass",
            )?,
            reported: RefCell::default(),
        };
        let registries: Vec<&Registry> = std::iter::once(own).chain(host).collect();
        let families: [(&str, &dyn CloneCollector); 19] = [
            ("relay_connected", &metrics.relay_connected),
            ("relay_connection_state", &connection_state),
            ("connection_attempts_total", &metrics.connection_attempts),
            (CONNECTION_RESULTS, &metrics.connection_results),
            ("relay_status", &metrics.relay_status),
            ("relay_failures", &metrics.relay_failures),
            ("events_synced_total", &metrics.events_synced),
            ("relays_tracked_total", &metrics.relays_tracked),
            ("relays_connected_total", &metrics.relays_connected),
            ("relays_dead_total", &metrics.relays_dead),
            ("bytes_received_total", &metrics.bytes_received),
            ("bytes_sent_total", &metrics.bytes_sent),
            ("events_dropped_total", &metrics.dropped),
            ("refused_total", &metrics.refused),
            ("plus_events_total", &metrics.sync_plus_events),
            ("plus_passes_total", &metrics.sync_plus_passes),
            ("plus_participants", &metrics.sync_plus_participants),
            ("plus_relay_lists", &metrics.sync_plus_relay_lists),
            ("plus_outbox_relays", &metrics.sync_plus_outbox_relays),
        ];
        let exported: Vec<&dyn CloneCollector> = families
            .into_iter()
            .filter(|(family, _)| names.name(family).is_some())
            .map(|(_, collector)| collector)
            .collect();
        for registry in registries {
            register_all(registry, &exported)?;
        }
        Ok(metrics)
    }

    /// A connection attempt of `relay` ended in `outcome` (`success` or
    /// `failure`).
    pub(crate) fn attempt_ended(&self, relay: &RelayUrl, outcome: &str) {
        let labels = [relay.as_str(), outcome];
        self.connection_attempts.with_label_values(&labels).inc();
        self.connection_results.with_label_values(&labels).inc();
    }

    /// The handle that encodes the families registered in `own`.
    pub(crate) fn handle(own: &Registry) -> MetricsHandle {
        MetricsHandle { own: own.clone() }
    }

    /// `relay`'s connection changed (connected, disconnected, a connect
    /// failed or was refused): its connection gauges and the count of
    /// connected relays are set now, not on the next tick.
    pub(crate) fn connection_changed(&self, engine: &SyncEngine, relay: &RelayUrl, now: Instant) {
        self.relay_gauges(engine, relay, now);
        self.relays_connected
            .set(i64::try_from(engine.health_counts(now).connected).unwrap_or(i64::MAX));
    }

    /// The gauges of one relay: connected, connection state, health state,
    /// failures in a row.
    fn relay_gauges(&self, engine: &SyncEngine, relay: &RelayUrl, now: Instant) {
        let url = relay.as_str();
        self.relay_connected
            .with_label_values(&[url])
            .set(i64::from(engine.is_connected(relay)));
        if let Some(state) = &self.relay_connection_state {
            state
                .with_label_values(&[url])
                .set(engine.relay_phase(relay).metric_value());
        }
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

    /// The 2-second health and metrics tick: every gauge (the connection
    /// gauges too, for health states that change with time alone, such as
    /// a backoff running out).
    pub(crate) fn update(&self, engine: &SyncEngine, now: Instant) {
        for (relay, _) in engine.relay_states() {
            self.relay_gauges(engine, relay, now);
        }
        let counts = engine.health_counts(now);
        self.relays_tracked.set(counts.tracked as i64);
        self.relays_connected.set(counts.connected as i64);
        self.relays_dead
            .set(counts.in_state(HealthState::Dead) as i64);
        self.count_stats(engine.stats());
        self.sync_plus_gauges(engine.sync_plus_counts());
    }

    /// What Sync+ holds now, as gauges.
    fn sync_plus_gauges(&self, counts: SyncPlusCounts) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.sync_plus_participants.set(gauge(counts.participants));
        self.sync_plus_relay_lists.set(gauge(counts.relay_lists));
        self.sync_plus_outbox_relays
            .set(gauge(counts.outbox_relays));
    }

    /// Adds what the engine's counters grew by since the last tick.
    fn count_stats(&self, stats: &EngineStats) {
        let mut reported = self.reported.borrow_mut();
        let mut grown = |key: &'static str, total: u64| {
            let before = reported.entry(key).or_default();
            let grown = total.saturating_sub(*before);
            *before = total;
            grown
        };
        for (counter, key, total) in [
            (
                &self.sync_plus_events,
                "sync_plus_events",
                stats.sync_plus_events,
            ),
            (
                &self.sync_plus_passes,
                "sync_plus_passes",
                stats.sync_plus_passes,
            ),
        ] {
            counter.inc_by(grown(key, total));
        }
        for (vec, reason, total) in [
            (&self.dropped, "forged", stats.dropped_forged),
            (&self.dropped, "off_filter", stats.dropped_off_filter),
            (
                &self.dropped,
                "unknown_subscription",
                stats.dropped_unknown_subscription,
            ),
            (&self.dropped, "oversized", stats.dropped_oversized),
            (&self.dropped, "malformed", stats.dropped_malformed),
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
            (
                &self.refused,
                "sync_plus_participants_over_cap",
                stats.sync_plus_participants_over_cap,
            ),
            (
                &self.refused,
                "sync_plus_list_relays_left_out",
                stats.sync_plus_list_relays_left_out,
            ),
            (
                &self.refused,
                "sync_plus_relays_over_cap",
                stats.sync_plus_relays_over_cap,
            ),
        ] {
            vec.with_label_values(&[reason])
                .inc_by(grown(reason, total));
        }
    }

    /// Removes every series labelled with `relay` (a relay no longer
    /// tracked): the label sets stay bounded by the relays tracked.
    pub(crate) fn forget_relay(&self, relay: &RelayUrl) {
        let url = relay.as_str();
        for vec in [
            Some(&self.relay_connected),
            self.relay_connection_state.as_ref(),
            Some(&self.relay_status),
            Some(&self.relay_failures),
        ]
        .into_iter()
        .flatten()
        {
            let _ = vec.remove_label_values(&[url]);
        }
        for vec in [&self.bytes_received, &self.bytes_sent] {
            let _ = vec.remove_label_values(&[url]);
        }
        for result in ["started", "success", "failure"] {
            let _ = self.connection_attempts.remove_label_values(&[url, result]);
            let _ = self.connection_results.remove_label_values(&[url, result]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family under its default name.
    fn default_names() -> FamilyNames {
        family_names(DEFAULT_PREFIX, &MetricFamilies::new()).unwrap()
    }

    /// The value of the sample of `name` (with `label` = `value`, if given)
    /// in `registry`.
    fn sample(registry: &Registry, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
        registry
            .gather()
            .iter()
            .filter(|family| family.name() == name)
            .flat_map(|family| family.get_metric())
            .find(|metric| {
                label.is_none_or(|(key, value)| {
                    metric
                        .get_label()
                        .iter()
                        .any(|pair| pair.name() == key && pair.value() == value)
                })
            })
            // A counter's or a gauge's: the other one reads 0.
            .map(|metric| metric.get_counter().get_value() + metric.get_gauge().get_value())
    }

    #[test]
    fn a_refused_registration_leaves_nothing_of_ours_in_the_hosts_registry() {
        let host = Registry::new();
        let hosts_own = IntGauge::new("grasp_sync_refused_total", "the host's").unwrap();
        host.register(Box::new(hosts_own)).unwrap();
        let refused = Metrics::register(
            &Registry::new(),
            Some(&host),
            DEFAULT_PREFIX,
            &default_names(),
        );
        assert!(refused.is_err());
        let names: Vec<String> = host
            .gather()
            .iter()
            .map(|family| family.name().to_owned())
            .collect();
        assert_eq!(names, ["grasp_sync_refused_total"], "the host's only");
        let left_out = family_names(
            DEFAULT_PREFIX,
            &MetricFamilies::new().leave_out("refused_total"),
        )
        .unwrap();
        assert!(
            Metrics::register(&Registry::new(), Some(&host), DEFAULT_PREFIX, &left_out).is_ok()
        );
    }

    #[test]
    fn sync_plus_counters_grow_by_what_the_engine_counted_and_caps_are_refusals() {
        let registry = Registry::new();
        let metrics = Metrics::register(&registry, None, DEFAULT_PREFIX, &default_names()).unwrap();
        let mut stats = EngineStats::default();
        stats.sync_plus_events = 5;
        stats.sync_plus_passes = 2;
        stats.sync_plus_participants_over_cap = 3;
        stats.sync_plus_list_relays_left_out = 4;
        stats.sync_plus_relays_over_cap = 1;
        metrics.count_stats(&stats);
        stats.sync_plus_events = 7;
        stats.sync_plus_relays_over_cap = 6;
        metrics.count_stats(&stats);
        let refused = |reason| {
            sample(
                &registry,
                "grasp_sync_refused_total",
                Some(("reason", reason)),
            )
        };
        assert_eq!(
            sample(&registry, "grasp_sync_plus_events_total", None),
            Some(7.0)
        );
        assert_eq!(
            sample(&registry, "grasp_sync_plus_passes_total", None),
            Some(2.0)
        );
        assert_eq!(refused("sync_plus_participants_over_cap"), Some(3.0));
        assert_eq!(refused("sync_plus_list_relays_left_out"), Some(4.0));
        assert_eq!(refused("sync_plus_relays_over_cap"), Some(6.0));
    }

    #[test]
    fn sync_plus_gauges_show_what_the_engine_holds_now() {
        let registry = Registry::new();
        let metrics = Metrics::register(&registry, None, DEFAULT_PREFIX, &default_names()).unwrap();
        let mut counts = SyncPlusCounts::default();
        counts.participants = 12;
        counts.relay_lists = 9;
        counts.outbox_relays = 4;
        metrics.sync_plus_gauges(counts);
        counts.outbox_relays = 2;
        metrics.sync_plus_gauges(counts);
        assert_eq!(
            sample(&registry, "grasp_sync_plus_participants", None),
            Some(12.0)
        );
        assert_eq!(
            sample(&registry, "grasp_sync_plus_relay_lists", None),
            Some(9.0)
        );
        assert_eq!(
            sample(&registry, "grasp_sync_plus_outbox_relays", None),
            Some(2.0)
        );
    }
}
