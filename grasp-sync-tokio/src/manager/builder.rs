//! Building a [`SyncManager`]: the engine's settings from defaults, a whole
//! [`EngineConfig`], the spec's environment variables and individual
//! setters, in that order of precedence whatever the order of the calls.

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::clock::{Instant, Now};
use grasp_sync_core::engine::{EngineConfig, SyncEngine};
use grasp_sync_core::metric_families::{MetricFamilies, MetricFamiliesError};
use grasp_sync_core::store::EventStore;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use nostr::prelude::{Event, RelayUrl};
use tokio::sync::{mpsc, watch};

use super::{OwnAnnouncementObserver, SyncManager};
use crate::budget::SharedBudget;
use crate::connection::{ConnectionConfig, Dialer};
use crate::metrics::Metrics;
use crate::resolve::{AddressCheck, Resolver, SystemResolver};
use crate::status::SyncStatus;
use crate::tls::tls_config;
use crate::transport::RelayTransport;
use crate::websocket::WebSocketTransport;

/// Why the manager could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No store was given.
    #[error("a store is required")]
    MissingStore,
    /// TLS could not be configured.
    #[error("tls configuration failed: {0}")]
    Tls(#[from] rustls::Error),
    /// Metrics could not be registered.
    #[error("metrics registration failed: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The per-family metric settings name a family we do not export, give
    /// one a name Prometheus refuses, or give two families one name
    /// ([`SyncManagerBuilder::metric_name`]).
    #[error("metric families: {0}")]
    MetricFamilies(#[from] MetricFamiliesError),
    /// The engine configuration is invalid.
    #[error("invalid engine configuration: {0}")]
    Config(#[from] grasp_sync_core::engine::ConfigError),
    /// An environment variable holds a value that is not a number.
    #[error("environment variable {name} is not a valid number: {value:?}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// A switch's environment variable holds neither `1` / `0` (any whole
    /// number: not 0 is on) nor `true` / `false`.
    #[error("environment variable {name} is not a switch (1, 0, true or false): {value:?}")]
    EnvSwitch {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// A relay list's environment variable holds something that is not a
    /// relay URL.
    #[error("environment variable {name}: {value:?} is not a relay URL: {reason}")]
    EnvRelayUrl {
        /// The variable.
        name: &'static str,
        /// The entry of the comma-separated list that is not a relay URL.
        value: String,
        /// Why it is not one.
        reason: String,
    },
}

/// The spec's environment variables, as read by
/// [`SyncManagerBuilder::from_env`].
#[derive(Clone, Debug, Default)]
struct EnvSettings {
    batch_window: Option<Duration>,
    base_backoff: Option<Duration>,
    max_backoff: Option<Duration>,
    batch_timeout: Option<Duration>,
    max_event_bytes: Option<u64>,
    max_event_tags: Option<u64>,
    max_bad_events: Option<u64>,
    max_message_bytes: Option<u64>,
    max_relays: Option<u64>,
    max_relays_per_author: Option<u64>,
    max_relays_per_network: Option<u64>,
    relay_trial_period: Option<Duration>,
    relay_earn_window: Option<Duration>,
    /// `NGIT_SYNC_DISABLE_NEGENTROPY`: `Some(true)` turns NIP-77 off.
    disable_negentropy: Option<bool>,
    sync_plus: SyncPlusSettings,
}

/// The GRASP-03 Sync+ settings given by the environment or by the setters
/// ([`SyncPlusConfig`](grasp_sync_core::engine::SyncPlusConfig)); each one
/// given replaces the one under it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SyncPlusSettings {
    enabled: Option<bool>,
    index_relays: Option<Vec<RelayUrl>>,
    participants_per_pass: Option<usize>,
    relays_per_pass: Option<usize>,
    max_relays: Option<usize>,
    pass_interval: Option<Duration>,
}

impl SyncPlusSettings {
    /// Reads `NGIT_SYNC_PLUS_ENABLED`, `NGIT_USER_INDEX_RELAYS`,
    /// `NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS`, `NGIT_SYNC_PLUS_RELAYS_PER_PASS`,
    /// `NGIT_SYNC_PLUS_MAX_RELAYS` and `NGIT_SYNC_PLUS_PASS_SECS`.
    fn read(env: &Lookup<'_>) -> Result<Self, BuildError> {
        let count = |name| env_number(env, name).map(|n| n.map(saturating_usize));
        Ok(SyncPlusSettings {
            enabled: env_switch(env, "NGIT_SYNC_PLUS_ENABLED")?,
            index_relays: env_relay_urls(env, "NGIT_USER_INDEX_RELAYS")?,
            participants_per_pass: count("NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS")?,
            relays_per_pass: count("NGIT_SYNC_PLUS_RELAYS_PER_PASS")?,
            max_relays: count("NGIT_SYNC_PLUS_MAX_RELAYS")?,
            pass_interval: env_number(env, "NGIT_SYNC_PLUS_PASS_SECS")?.map(Duration::from_secs),
        })
    }

    fn apply(&self, config: &mut EngineConfig) {
        let plus = &mut config.sync_plus;
        if let Some(enabled) = self.enabled {
            plus.enabled = enabled;
        }
        if let Some(relays) = &self.index_relays {
            plus.index_relays = relays.clone();
        }
        if let Some(n) = self.participants_per_pass {
            plus.participants_per_pass = n;
        }
        if let Some(n) = self.relays_per_pass {
            plus.relays_per_pass = n;
        }
        if let Some(n) = self.max_relays {
            plus.max_relays = n;
        }
        if let Some(interval) = self.pass_interval {
            plus.pass_interval = interval;
        }
    }
}

/// Where variables are read from: the process environment, or a test's
/// list. `None`: not set (or not Unicode).
type Lookup<'a> = dyn Fn(&str) -> Option<String> + 'a;

impl EnvSettings {
    fn read() -> Result<Self, BuildError> {
        Self::read_from(&|name| std::env::var(name).ok())
    }

    fn read_from(env: &Lookup<'_>) -> Result<Self, BuildError> {
        let env_number = |name| env_number(env, name);
        Ok(EnvSettings {
            batch_window: env_number("NGIT_SYNC_BATCH_WINDOW_MS")?.map(Duration::from_millis),
            base_backoff: env_number("NGIT_SYNC_BASE_BACKOFF_SECS")?.map(Duration::from_secs),
            max_backoff: env_number("NGIT_SYNC_MAX_BACKOFF_SECS")?.map(Duration::from_secs),
            batch_timeout: env_number("NGIT_SYNC_BATCH_TIMEOUT_SECS")?.map(Duration::from_secs),
            max_event_bytes: env_number("NGIT_SYNC_MAX_EVENT_BYTES")?,
            max_event_tags: env_number("NGIT_SYNC_MAX_EVENT_TAGS")?,
            max_bad_events: env_number("NGIT_SYNC_MAX_BAD_EVENTS")?,
            max_message_bytes: env_number("NGIT_SYNC_MAX_MESSAGE_BYTES")?,
            max_relays: env_number("NGIT_SYNC_MAX_RELAYS")?,
            max_relays_per_author: env_number("NGIT_SYNC_MAX_RELAYS_PER_AUTHOR")?,
            max_relays_per_network: env_number("NGIT_SYNC_MAX_RELAYS_PER_DOMAIN")?,
            relay_trial_period: env_number("NGIT_SYNC_RELAY_TRIAL_SECS")?.map(Duration::from_secs),
            relay_earn_window: env_number("NGIT_SYNC_RELAY_EARN_WINDOW_SECS")?
                .map(Duration::from_secs),
            disable_negentropy: env_switch(env, "NGIT_SYNC_DISABLE_NEGENTROPY")?,
            sync_plus: SyncPlusSettings::read(env)?,
        })
    }

    fn apply(&self, config: &mut EngineConfig) {
        if let Some(window) = self.batch_window {
            config.timeouts.batch_window = window;
        }
        if let Some(base) = self.base_backoff {
            config.health.backoff.base = base;
        }
        if let Some(max) = self.max_backoff {
            config.health.backoff.max = max;
        }
        if let Some(timeout) = self.batch_timeout {
            config.timeouts.batch_timeout = timeout;
        }
        if let Some(bytes) = self.max_event_bytes {
            config.limits.max_event_size = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(tags) = self.max_event_tags {
            config.limits.max_event_tags = usize::try_from(tags).unwrap_or(usize::MAX);
        }
        if let Some(bad) = self.max_bad_events {
            config.caps.max_bad_events = bad;
        }
        if let Some(relays) = self.max_relays {
            config.caps.max_relays = usize::try_from(relays).unwrap_or(usize::MAX);
        }
        if let Some(relays) = self.max_relays_per_author {
            config.caps.max_relays_per_author = usize::try_from(relays).unwrap_or(usize::MAX);
        }
        if let Some(relays) = self.max_relays_per_network {
            config.caps.max_relays_per_network = usize::try_from(relays).unwrap_or(usize::MAX);
        }
        if let Some(period) = self.relay_trial_period {
            config.caps.relay_trial_period = period;
        }
        if let Some(window) = self.relay_earn_window {
            config.caps.relay_earn_window = window;
        }
        if let Some(disable) = self.disable_negentropy {
            config.negentropy = !disable;
        }
        self.sync_plus.apply(config);
    }

    /// The connection limits the environment sets over `config`.
    fn apply_connection(&self, config: &mut ConnectionConfig) {
        if let Some(bytes) = self.max_message_bytes {
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            config.max_message_size = bytes;
            config.max_frame_size = bytes;
        }
    }
}

/// Settings given one by one; they win over the environment and over a
/// whole [`EngineConfig`].
#[derive(Clone, Debug, Default)]
struct Explicit {
    batch_window: Option<Duration>,
    relay_policy: Option<RelayUrlPolicy>,
    allow_local_addresses: Option<bool>,
    negentropy: Option<bool>,
    sync_plus: SyncPlusSettings,
}

impl Explicit {
    fn apply(&self, config: &mut EngineConfig) {
        if let Some(window) = self.batch_window {
            config.timeouts.batch_window = window;
        }
        if let Some(policy) = &self.relay_policy {
            config.identity.relay_policy = policy.clone();
        }
        if let Some(allow) = self.allow_local_addresses {
            config.identity.relay_policy = config
                .identity
                .relay_policy
                .clone()
                .allow_local_addresses(allow);
        }
        if let Some(negentropy) = self.negentropy {
            config.negentropy = negentropy;
        }
        self.sync_plus.apply(config);
    }
}

/// Builds a [`SyncManager`].
///
/// Precedence, whatever the order of the calls: individual setters
/// ([`SyncManagerBuilder::batch_window`], [`SyncManagerBuilder::relay_policy`],
/// [`SyncManagerBuilder::allow_local_addresses`], [`SyncManagerBuilder::negentropy`],
/// the Sync+ setters such as
/// [`SyncManagerBuilder::sync_plus`]) over the environment
/// ([`SyncManagerBuilder::from_env`]) over a whole
/// [`SyncManagerBuilder::engine_config`] over the spec's defaults.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use grasp_sync_tokio::nostr::prelude::RelayUrl;
/// use grasp_sync_tokio::{RelayStore, SyncManager};
///
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let own = RelayUrl::parse("ws://127.0.0.1:7777")?;
/// let manager = SyncManager::builder()
///     .own_relay(own.clone())
///     .service_relay(RelayUrl::parse("wss://relay.example.com")?)
///     .allow_local_addresses(true) // a test on loopback
///     .store(Arc::new(RelayStore::new(own, Duration::from_secs(10))))
///     .from_env()?
///     .build()?;
/// # drop(manager);
/// # Ok(())
/// # }
/// ```
pub struct SyncManagerBuilder {
    base: EngineConfig,
    env: EnvSettings,
    explicit: Explicit,
    service_relays: Vec<RelayUrl>,
    bootstrap_relays: Vec<RelayUrl>,
    own_relay: Option<RelayUrl>,
    connection: ConnectionConfig,
    store: Option<Arc<dyn EventStore>>,
    registry: Option<prometheus::Registry>,
    metrics_prefix: String,
    metric_families: MetricFamilies,
    resolver: Arc<dyn Resolver>,
    /// The transport plugged in; WebSocket when `None`.
    transport: Option<Arc<dyn RelayTransport>>,
    own_announcements: Option<OwnAnnouncementObserver>,
}

impl std::fmt::Debug for SyncManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncManagerBuilder")
            .field("engine", &self.engine_config_in_effect())
            .field("own_relay", &self.own_relay)
            .finish_non_exhaustive()
    }
}

impl Default for SyncManagerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SyncManagerBuilder {
    /// Defaults of the spec.
    pub fn new() -> Self {
        SyncManagerBuilder {
            base: EngineConfig::default(),
            env: EnvSettings::default(),
            explicit: Explicit::default(),
            service_relays: Vec::new(),
            bootstrap_relays: Vec::new(),
            own_relay: None,
            connection: ConnectionConfig::default(),
            store: None,
            registry: None,
            metrics_prefix: crate::metrics::DEFAULT_PREFIX.to_owned(),
            metric_families: MetricFamilies::new(),
            resolver: Arc::new(SystemResolver),
            transport: None,
            own_announcements: None,
        }
    }

    /// The own relay: the self-subscriber reads accepted announcements and
    /// root events from it over WebSocket. It is also our service relay.
    pub fn own_relay(mut self, url: RelayUrl) -> Self {
        if !self.service_relays.contains(&url) {
            self.service_relays.push(url.clone());
        }
        self.own_relay = Some(url);
        self
    }

    /// Called with every announcement (30617) the own relay serves, as the
    /// self-subscriber reads it (its history at start, then each one stored, by
    /// whatever path: a sync, a push to the GRASP server, a user), and with those
    /// handed in process ([`SyncManager::own_events_sender`]). It runs on the
    /// manager's loop: keep it short (the sidecar hands the announcement to its
    /// purgatory, which then serves that repository without listing every
    /// announcement again).
    pub fn on_own_announcement(
        mut self,
        observer: impl Fn(&Event) + Send + Sync + 'static,
    ) -> Self {
        self.own_announcements = Some(OwnAnnouncementObserver::new(observer));
        self
    }

    /// A URL under which announcements list our service, when it differs
    /// from the URL the self-subscriber connects to (a sidecar reaching its
    /// relay at `ws://127.0.0.1:…` while announcements say `wss://…`).
    pub fn service_relay(mut self, url: RelayUrl) -> Self {
        if !self.service_relays.contains(&url) {
            self.service_relays.push(url);
        }
        self
    }

    /// A relay connected from the start and never dropped.
    pub fn bootstrap_relay(mut self, url: RelayUrl) -> Self {
        self.bootstrap_relays.push(url);
        self
    }

    /// Where verified events go (and what negentropy compares with).
    pub fn store(mut self, store: Arc<dyn EventStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Every constant of the engine, as the base the environment and the
    /// individual setters apply to (its service and bootstrap relays are
    /// added to those given to the builder).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.base = config;
        self
    }

    /// Which relay URLs from announcements may be connected to.
    pub fn relay_policy(mut self, policy: RelayUrlPolicy) -> Self {
        self.explicit.relay_policy = Some(policy);
        self
    }

    /// Allows relays on loopback and private addresses (tests, a sidecar
    /// next to relays on one machine). Off by default.
    pub fn allow_local_addresses(mut self, allow: bool) -> Self {
        self.explicit.allow_local_addresses = Some(allow);
        self
    }

    /// The self-subscriber's batch window (spec: 5 s).
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.explicit.batch_window = Some(window);
        self
    }

    /// NIP-77 on or off
    /// ([`EngineConfig::negentropy`](grasp_sync_core::engine::EngineConfig::negentropy);
    /// on by default; `NGIT_SYNC_DISABLE_NEGENTROPY`): off, relays are
    /// synced by REQ only, never `NEG-OPEN`, even those that do NIP-77.
    pub fn negentropy(mut self, enabled: bool) -> Self {
        self.explicit.negentropy = Some(enabled);
        self
    }

    /// GRASP-03 "Sync+" on or off: a repository's conversation is also
    /// synced from its participants' own write relays
    /// ([`SyncPlusConfig::enabled`](grasp_sync_core::engine::SyncPlusConfig::enabled);
    /// on by default, like the reference GRASP server;
    /// `NGIT_SYNC_PLUS_ENABLED`).
    pub fn sync_plus(mut self, enabled: bool) -> Self {
        self.explicit.sync_plus.enabled = Some(enabled);
        self
    }

    /// An index relay Sync+ reads participants' relay lists (kinds 10002
    /// and 10317) from, besides each repository's relays (repeatable).
    /// Given here, these replace the environment's
    /// (`NGIT_USER_INDEX_RELAYS`) and the engine configuration's
    /// ([`SyncPlusConfig::index_relays`](grasp_sync_core::engine::SyncPlusConfig::index_relays)).
    pub fn index_relay(mut self, url: RelayUrl) -> Self {
        let relays = self.explicit.sync_plus.index_relays.get_or_insert_default();
        if !relays.contains(&url) {
            relays.push(url);
        }
        self
    }

    /// Participants of one repository whose relay lists are read and whose
    /// outbox relays are synced from, per Sync+ pass
    /// ([`SyncPlusConfig::participants_per_pass`](grasp_sync_core::engine::SyncPlusConfig::participants_per_pass);
    /// `NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS`).
    pub fn sync_plus_participants_per_pass(mut self, participants: usize) -> Self {
        self.explicit.sync_plus.participants_per_pass = Some(participants);
        self
    }

    /// Outbox relays one repository is synced from, per Sync+ pass
    /// ([`SyncPlusConfig::relays_per_pass`](grasp_sync_core::engine::SyncPlusConfig::relays_per_pass);
    /// `NGIT_SYNC_PLUS_RELAYS_PER_PASS`).
    pub fn sync_plus_relays_per_pass(mut self, relays: usize) -> Self {
        self.explicit.sync_plus.relays_per_pass = Some(relays);
        self
    }

    /// Relays Sync+ may add in total, over every repository
    /// ([`SyncPlusConfig::max_relays`](grasp_sync_core::engine::SyncPlusConfig::max_relays);
    /// `NGIT_SYNC_PLUS_MAX_RELAYS`).
    pub fn sync_plus_max_relays(mut self, relays: usize) -> Self {
        self.explicit.sync_plus.max_relays = Some(relays);
        self
    }

    /// How often Sync+ moves on to the participants and relays over its
    /// per-pass caps
    /// ([`SyncPlusConfig::pass_interval`](grasp_sync_core::engine::SyncPlusConfig::pass_interval);
    /// `NGIT_SYNC_PLUS_PASS_SECS`).
    pub fn sync_plus_pass_interval(mut self, interval: Duration) -> Self {
        self.explicit.sync_plus.pass_interval = Some(interval);
        self
    }

    /// Connection limits and timers.
    pub fn connection_config(mut self, config: ConnectionConfig) -> Self {
        self.connection = config;
        self
    }

    /// How relay host names are resolved (the system resolver by default).
    /// Every address a relay from an announcement resolves to is checked
    /// with the relay policy and the connection (WebSocket and NIP-11) goes
    /// to a checked address; the name is never resolved a second time. The
    /// own and bootstrap relays are resolved the same way, not checked.
    pub fn resolver(mut self, resolver: impl Resolver + 'static) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// How the manager reaches relays: every relay connection, the own
    /// relay's self-subscription included, is opened through `transport`
    /// (a pool of connections the host already runs, a proxy, an
    /// in-process relay, a test double) instead of the default
    /// [`WebSocketTransport`](crate::WebSocketTransport). What stays with
    /// the manager and what is the transport's is said on
    /// [`RelayTransport`]. With a transport plugged in, the
    /// [`resolver`](SyncManagerBuilder::resolver) is not used (name
    /// resolution and which addresses may be reached are the transport's);
    /// the relay policy still decides which relay URLs from announcements
    /// the engine connects to. An `Arc` of a transport is a transport too,
    /// to share one.
    pub fn transport(mut self, transport: impl RelayTransport) -> Self {
        self.transport = Some(Arc::new(transport));
        self
    }

    /// Registers the metrics in `registry` (the host's) as well as in a
    /// private one.
    ///
    /// `registry` is a **prometheus 0.14** `Registry` (the version
    /// re-exported as [`crate::prometheus`]). prometheus's `Collector` trait
    /// is bound to its crate version: a 0.13 registry cannot take a 0.14
    /// collector. A host on another prometheus version leaves this unset
    /// and appends [`SyncManager::metrics_handle`]'s
    /// [`MetricsHandle::text`](crate::MetricsHandle::text) to its own
    /// `/metrics` output.
    ///
    /// A family of ours whose name the host's registry holds already is a
    /// [`BuildError::Metrics`]: leave ours out
    /// ([`SyncManagerBuilder::leave_out_metric`]) or rename it
    /// ([`SyncManagerBuilder::metric_name`]).
    pub fn registry(mut self, registry: prometheus::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The prefix of every metric name: `grasp_sync` by default
    /// (`grasp_sync_relay_connected`, `grasp_sync_relays_connected_total`,
    /// `grasp_sync_plus_events_total` …). The reference GRASP server uses
    /// the spec's `ngit_sync_*` names with other meanings (its
    /// `ngit_sync_relay_connected` is a 0–4 state), so ours differ unless a
    /// host where nothing clashes asks for `ngit_sync`. A trailing `_` is
    /// ignored; a prefix Prometheus does not accept as a metric name is a
    /// [`BuildError::Metrics`]. One family at a time:
    /// [`SyncManagerBuilder::metric_name`] and
    /// [`SyncManagerBuilder::leave_out_metric`].
    pub fn metrics_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.metrics_prefix = prefix.into();
        self
    }

    /// Exports the metric family `family` as `name`, the whole name (the
    /// [prefix](SyncManagerBuilder::metrics_prefix) is not added): for a host
    /// that exports a family of our name already, or wants another. `family`
    /// is one of [`METRIC_FAMILIES`](crate::METRIC_FAMILIES), the family's
    /// name without the prefix (`relay_connected`). It holds for the host's
    /// [registry](SyncManagerBuilder::registry) and for
    /// [`SyncManager::metrics_handle`] alike. An unknown family, a name
    /// Prometheus does not accept, or two families under one name is a
    /// [`BuildError::MetricFamilies`]. Of two settings of one family, the
    /// later holds.
    pub fn metric_name(mut self, family: impl Into<String>, name: impl Into<String>) -> Self {
        self.metric_families = self.metric_families.name(family, name);
        self
    }

    /// Leaves the metric family `family` out (one of
    /// [`METRIC_FAMILIES`](crate::METRIC_FAMILIES)): it is registered in
    /// neither registry and [`SyncManager::metrics_handle`]'s text does not
    /// hold it, so a host keeps its own family of that name beside ours. An
    /// unknown family is a [`BuildError::MetricFamilies`].
    pub fn leave_out_metric(mut self, family: impl Into<String>) -> Self {
        self.metric_families = self.metric_families.leave_out(family);
        self
    }

    /// Applies every setting of `families` ([`MetricFamilies`], keyed as in
    /// [`METRIC_FAMILIES`](crate::METRIC_FAMILIES)) over those given before,
    /// as [`SyncManagerBuilder::metric_name`] and
    /// [`SyncManagerBuilder::leave_out_metric`] do one by one.
    pub fn metric_families(mut self, families: MetricFamilies) -> Self {
        self.metric_families = self.metric_families.with(families);
        self
    }

    /// Names the families the reference GRASP server (ngit-grasp 1.0) also
    /// exports with its names and meanings
    /// ([`REFERENCE_SERVER_FAMILIES`](crate::REFERENCE_SERVER_FAMILIES)), so
    /// its dashboards and alerts keep working once this manager syncs in its
    /// place: `ngit_sync_relay_connected` (0 disconnected, 1 connecting,
    /// 2 syncing, 3 connected, 4 connected with historic sync failures),
    /// `ngit_sync_connection_attempts_total` (`success`, `failure`),
    /// `ngit_sync_relay_status`, `ngit_sync_relay_failures`,
    /// `ngit_sync_events_synced_total`, `ngit_sync_relays_tracked_total`,
    /// `ngit_sync_relays_connected_total` and `ngit_sync_relays_dead_total`.
    /// Our other families keep their names under the prefix. Settings given
    /// after this one hold over it.
    pub fn reference_server_metrics(mut self) -> Self {
        for (family, name) in crate::REFERENCE_SERVER_FAMILIES {
            self.metric_families = self.metric_families.name(*family, *name);
        }
        self
    }

    /// Reads the spec's environment variables: `NGIT_SYNC_BATCH_WINDOW_MS`,
    /// `NGIT_SYNC_BASE_BACKOFF_SECS`, `NGIT_SYNC_MAX_BACKOFF_SECS`, and
    /// `NGIT_SYNC_BATCH_TIMEOUT_SECS` (`Timeouts::batch_timeout`), and the
    /// size and refusal limits: `NGIT_SYNC_MAX_EVENT_BYTES`
    /// (`Limits::max_event_size`), `NGIT_SYNC_MAX_EVENT_TAGS`
    /// (`Limits::max_event_tags`), `NGIT_SYNC_MAX_BAD_EVENTS`
    /// (`Caps::max_bad_events`) and `NGIT_SYNC_MAX_MESSAGE_BYTES`
    /// ([`ConnectionConfig::max_message_size`] and `max_frame_size`), and the
    /// relay slots: `NGIT_SYNC_MAX_RELAYS` (`Caps::max_relays`),
    /// `NGIT_SYNC_MAX_RELAYS_PER_AUTHOR` (`Caps::max_relays_per_author`),
    /// `NGIT_SYNC_MAX_RELAYS_PER_DOMAIN` (`Caps::max_relays_per_network`),
    /// `NGIT_SYNC_RELAY_TRIAL_SECS` (`Caps::relay_trial_period`) and
    /// `NGIT_SYNC_RELAY_EARN_WINDOW_SECS` (`Caps::relay_earn_window`),
    /// `NGIT_SYNC_DISABLE_NEGENTROPY` (a switch like the next: on turns
    /// NIP-77 off, `EngineConfig::negentropy`), and GRASP-03 Sync+ (`SyncPlusConfig`): `NGIT_SYNC_PLUS_ENABLED` (a
    /// switch: `1` / `0`, or `true` / `false` like the reference GRASP
    /// server; on by default), `NGIT_USER_INDEX_RELAYS` (comma-separated
    /// relay URLs), `NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS`,
    /// `NGIT_SYNC_PLUS_RELAYS_PER_PASS`, `NGIT_SYNC_PLUS_MAX_RELAYS` and
    /// `NGIT_SYNC_PLUS_PASS_SECS`. A value that cannot be read is a
    /// [`BuildError`]. They apply over [`SyncManagerBuilder::engine_config`] (and
    /// [`SyncManagerBuilder::connection_config`]) and under the individual
    /// setters, whatever the order of the calls.
    pub fn from_env(mut self) -> Result<Self, BuildError> {
        self.env = EnvSettings::read()?;
        Ok(self)
    }

    /// The engine configuration the manager will run with: the base, then
    /// the environment, then the individual setters.
    pub fn engine_config_in_effect(&self) -> EngineConfig {
        let mut config = self.base.clone();
        self.env.apply(&mut config);
        self.explicit.apply(&mut config);
        if let Some(own) = &self.own_relay {
            config.identity.own_relay = Some(own.clone());
        }
        // The own relay is also our service relay.
        for relay in self
            .service_relays
            .iter()
            .chain(config.identity.own_relay.clone().iter())
        {
            if !config.identity.service_relays.contains(relay) {
                config.identity.service_relays.push(relay.clone());
            }
        }
        config
            .identity
            .bootstrap_relays
            .extend(self.bootstrap_relays.iter().cloned());
        config
    }

    /// Builds the manager; call [`SyncManager::run`] inside a tokio runtime.
    pub fn build(self) -> Result<SyncManager, BuildError> {
        let engine_config = self.engine_config_in_effect();
        // The engine is built (and its configuration validated) here; its
        // time starts at the origin of the clock `SyncManager::run` starts.
        let engine = SyncEngine::new(
            engine_config.clone(),
            Now::new(Instant::ZERO, nostr::prelude::Timestamp::now()),
        )?;
        let store = self.store.ok_or(BuildError::MissingStore)?;
        let own_registry = prometheus::Registry::new();
        let names = crate::metrics::family_names(&self.metrics_prefix, &self.metric_families)?;
        let metrics = Metrics::register(
            &own_registry,
            self.registry.as_ref(),
            &self.metrics_prefix,
            &names,
        )?;
        let metrics_handle = Metrics::handle(&own_registry);
        let registry = self.registry.unwrap_or(own_registry);
        let (inbound_tx, inbound_rx) = mpsc::channel(4096);
        let (own_events_tx, own_events_rx) = mpsc::channel(4096);
        let (held_tx, held_rx) = mpsc::channel(1024);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (status_tx, _) = watch::channel(SyncStatus::default());
        let address = AddressCheck {
            resolver: self.resolver,
            identity: Arc::new(engine_config.identity.clone()),
        };
        let mut connection = self.connection;
        self.env.apply_connection(&mut connection);
        let seen = crate::decode::Remembered::new(connection.verified_signatures);
        // Pings often enough that an idle relay answering them is heard
        // within every batch timeout.
        let ping_interval = connection
            .ping_interval
            .min(engine_config.liveness_probe_interval());
        let transport: Arc<dyn RelayTransport> = match self.transport {
            Some(transport) => transport,
            None => Arc::new(WebSocketTransport::with_address(tls_config()?, address)),
        };
        let dialer = Dialer {
            seen: Some(Arc::new(seen)),
            limits: engine_config.limits.size_limits(),
            config: ConnectionConfig {
                ping_interval,
                ..connection
            },
            shared_budget: SharedBudget::new(connection.inbound_bytes_total),
            transport,
            own_relay: false,
            inbound: inbound_tx,
            shutdown: shutdown_rx,
        };
        Ok(SyncManager {
            engine,
            store,
            registry,
            metrics,
            metrics_handle,
            dialer,
            inbound: inbound_rx,
            own_events_tx,
            own_events: own_events_rx,
            held_tx,
            held: held_rx,
            shutdown_tx,
            status_tx,
            own_announcements: self.own_announcements,
        })
    }
}

/// `n` as a count, the largest one when it does not fit.
fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A switch's value, as the sidecar's command line reads it: `true` /
/// `false`, or a whole number (not 0 is on). Empty is not given.
fn parse_switch(value: &str) -> Option<Option<bool>> {
    match value.trim() {
        "" => Some(None),
        text if text.eq_ignore_ascii_case("true") => Some(Some(true)),
        text if text.eq_ignore_ascii_case("false") => Some(Some(false)),
        number => number.parse::<u64>().ok().map(|n| Some(n != 0)),
    }
}

fn env_switch(env: &Lookup<'_>, name: &'static str) -> Result<Option<bool>, BuildError> {
    match env(name) {
        Some(value) => parse_switch(&value).ok_or(BuildError::EnvSwitch { name, value }),
        None => Ok(None),
    }
}

/// A comma-separated list of relay URLs (empty entries skipped; an empty
/// list is not given).
fn parse_relay_urls(name: &'static str, value: &str) -> Result<Option<Vec<RelayUrl>>, BuildError> {
    let mut relays = Vec::new();
    for entry in value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let url = RelayUrl::parse(entry).map_err(|error| BuildError::EnvRelayUrl {
            name,
            value: entry.to_owned(),
            reason: error.to_string(),
        })?;
        if !relays.contains(&url) {
            relays.push(url);
        }
    }
    Ok((!relays.is_empty()).then_some(relays))
}

fn env_relay_urls(
    env: &Lookup<'_>,
    name: &'static str,
) -> Result<Option<Vec<RelayUrl>>, BuildError> {
    match env(name) {
        Some(value) => parse_relay_urls(name, &value),
        None => Ok(None),
    }
}

fn env_number(env: &Lookup<'_>, name: &'static str) -> Result<Option<u64>, BuildError> {
    match env(name) {
        Some(value) => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| BuildError::Env { name, value }),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> SyncManagerBuilder {
        SyncManagerBuilder::new()
    }

    #[test]
    fn individual_settings_win_over_the_environment_and_a_whole_config_in_any_order() {
        let mut base = EngineConfig::default();
        base.timeouts.batch_window = Duration::from_secs(9);
        let env = EnvSettings {
            batch_window: Some(Duration::from_millis(700)),
            base_backoff: Some(Duration::from_secs(3)),
            max_backoff: None,
            batch_timeout: Some(Duration::from_secs(7)),
            max_event_bytes: Some(1_000),
            max_event_tags: Some(10),
            max_bad_events: Some(5),
            max_message_bytes: Some(4_000),
            max_relays: Some(300),
            max_relays_per_author: Some(12),
            max_relays_per_network: Some(7),
            relay_trial_period: Some(Duration::from_secs(90)),
            relay_earn_window: Some(Duration::from_secs(3_600)),
            disable_negentropy: None,
            sync_plus: SyncPlusSettings::default(),
        };
        // engine_config after the environment: the environment still applies.
        let mut late_config = builder().batch_window(Duration::from_millis(50));
        late_config.env = env.clone();
        let late_config = late_config.engine_config(base.clone());
        let config = late_config.engine_config_in_effect();
        assert_eq!(
            config.timeouts.batch_window,
            Duration::from_millis(50),
            "explicit wins"
        );
        assert_eq!(
            config.health.backoff.base,
            Duration::from_secs(3),
            "env applies over the base"
        );
        assert_eq!(config.timeouts.batch_timeout, Duration::from_secs(7));
        assert_eq!(
            (
                config.limits.max_event_size,
                config.limits.max_event_tags,
                config.caps.max_bad_events
            ),
            (1_000, 10, 5)
        );
        assert_eq!(
            (
                config.caps.max_relays,
                config.caps.max_relays_per_author,
                config.caps.max_relays_per_network,
                config.caps.relay_trial_period,
                config.caps.relay_earn_window
            ),
            (
                300,
                12,
                7,
                Duration::from_secs(90),
                Duration::from_secs(3_600)
            )
        );
        let mut connection = ConnectionConfig::default();
        env.apply_connection(&mut connection);
        assert_eq!(
            (connection.max_message_size, connection.max_frame_size),
            (4_000, 4_000)
        );

        let mut env_only = builder().engine_config(base);
        env_only.env = env;
        assert_eq!(
            env_only.engine_config_in_effect().timeouts.batch_window,
            Duration::from_millis(700)
        );
    }

    /// The environment of a test: `pairs`, nothing else.
    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        }
    }

    /// The engine configuration `builder` runs with under the environment
    /// `pairs`.
    fn under(
        pairs: &[(&str, &str)],
        builder: SyncManagerBuilder,
    ) -> Result<EngineConfig, BuildError> {
        let mut builder = builder;
        builder.env = EnvSettings::read_from(&lookup(pairs))?;
        Ok(builder.engine_config_in_effect())
    }

    fn relay(url: &str) -> RelayUrl {
        RelayUrl::parse(url).expect("a relay url")
    }

    #[test]
    fn sync_plus_is_on_by_default_and_each_variable_reaches_its_field() {
        let defaults = under(&[], builder()).unwrap().sync_plus;
        assert_eq!(defaults, EngineConfig::default().sync_plus);
        assert!(defaults.enabled, "on by default, like the reference server");

        let plus = under(
            &[
                ("NGIT_SYNC_PLUS_ENABLED", "0"),
                (
                    "NGIT_USER_INDEX_RELAYS",
                    "wss://index.example.com, wss://purplepag.es,,wss://index.example.com",
                ),
                ("NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS", "8"),
                ("NGIT_SYNC_PLUS_RELAYS_PER_PASS", " 6 "),
                ("NGIT_SYNC_PLUS_MAX_RELAYS", "40"),
                ("NGIT_SYNC_PLUS_PASS_SECS", "120"),
            ],
            builder(),
        )
        .unwrap()
        .sync_plus;
        assert!(!plus.enabled);
        assert_eq!(
            plus.index_relays,
            vec![
                relay("wss://index.example.com"),
                relay("wss://purplepag.es")
            ],
            "split on commas, empty entries and repeats left out"
        );
        assert_eq!(
            (
                plus.participants_per_pass,
                plus.relays_per_pass,
                plus.max_relays,
                plus.pass_interval
            ),
            (8, 6, 40, Duration::from_secs(120))
        );
    }

    #[test]
    fn nip77_is_on_by_default_and_the_environment_or_the_setter_turns_it_off() {
        assert!(under(&[], builder()).unwrap().negentropy, "on by default");
        let negentropy = |value: &str, builder: SyncManagerBuilder| {
            under(&[("NGIT_SYNC_DISABLE_NEGENTROPY", value)], builder)
                .map(|config| config.negentropy)
        };
        for (value, on) in [
            ("1", false),
            ("true", false),
            (" TRUE ", false),
            ("0", true),
            ("false", true),
            ("", true), // empty: not given, the default holds
        ] {
            assert_eq!(negentropy(value, builder()).unwrap(), on, "{value:?}");
        }
        assert!(
            negentropy("1", builder().negentropy(true)).unwrap(),
            "the setter wins over the environment"
        );
        assert!(!negentropy("0", builder().negentropy(false)).unwrap());
        assert!(!under(&[], builder().negentropy(false)).unwrap().negentropy);
        match negentropy("please", builder()) {
            Err(BuildError::EnvSwitch { name, value }) => {
                assert_eq!(
                    (name, value.as_str()),
                    ("NGIT_SYNC_DISABLE_NEGENTROPY", "please")
                );
            }
            other => panic!("expected EnvSwitch, got {other:?}"),
        }
    }

    #[test]
    fn the_sync_plus_switch_reads_numbers_and_true_or_false() {
        let enabled = |value: &str| {
            under(&[("NGIT_SYNC_PLUS_ENABLED", value)], builder())
                .map(|config| config.sync_plus.enabled)
        };
        for (value, on) in [
            ("1", true),
            ("7", true),
            ("0", false),
            ("true", true),
            ("false", false),
            (" FALSE ", false),
            ("True", true),
            ("", true), // empty: not given, the default holds
        ] {
            assert_eq!(enabled(value).unwrap(), on, "{value:?}");
        }
        match enabled("off please") {
            Err(BuildError::EnvSwitch { name, value }) => {
                assert_eq!(
                    (name, value.as_str()),
                    ("NGIT_SYNC_PLUS_ENABLED", "off please")
                );
            }
            other => panic!("expected EnvSwitch, got {other:?}"),
        }
    }

    #[test]
    fn a_bad_sync_plus_variable_is_a_build_error_naming_it() {
        match under(
            &[(
                "NGIT_USER_INDEX_RELAYS",
                "wss://index.example.com,not a url",
            )],
            builder(),
        ) {
            Err(error @ BuildError::EnvRelayUrl { .. }) => {
                let text = error.to_string();
                assert!(text.contains("NGIT_USER_INDEX_RELAYS"), "{text}");
                assert!(text.contains("not a url"), "{text}");
            }
            other => panic!("expected EnvRelayUrl, got {other:?}"),
        }
        for name in [
            "NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS",
            "NGIT_SYNC_PLUS_RELAYS_PER_PASS",
            "NGIT_SYNC_PLUS_MAX_RELAYS",
            "NGIT_SYNC_PLUS_PASS_SECS",
        ] {
            match under(&[(name, "many")], builder()) {
                Err(BuildError::Env { name: named, .. }) => assert_eq!(named, name),
                other => panic!("{name}: expected Env, got {other:?}"),
            }
        }
        // Read, but refused by the engine's validation when the manager is built.
        let zero_pass = under(&[("NGIT_SYNC_PLUS_PASS_SECS", "0")], builder()).unwrap();
        assert_eq!(
            zero_pass.validate(),
            Err(grasp_sync_core::engine::ConfigError::ZeroSyncPlusPass)
        );
    }

    #[test]
    fn sync_plus_setters_win_over_the_environment_over_a_whole_config() {
        let mut base = EngineConfig::default()
            .with_sync_plus(false)
            .with_index_relays(vec![relay("wss://base.example.com")]);
        base.sync_plus.max_relays = 10;
        base.sync_plus.relays_per_pass = 3;
        let env = [
            ("NGIT_SYNC_PLUS_ENABLED", "true"),
            ("NGIT_USER_INDEX_RELAYS", "wss://env.example.com"),
            ("NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS", "16"),
            ("NGIT_SYNC_PLUS_MAX_RELAYS", "20"),
        ];

        // The environment over the base: what it names, and only that.
        let plus = under(&env, builder().engine_config(base.clone()))
            .unwrap()
            .sync_plus;
        assert!(plus.enabled);
        assert_eq!(plus.index_relays, vec![relay("wss://env.example.com")]);
        assert_eq!(
            (
                plus.participants_per_pass,
                plus.max_relays,
                plus.relays_per_pass
            ),
            (16, 20, 3),
            "relays_per_pass from the base"
        );

        // The setters over both, whatever the order of the calls.
        let explicit = builder()
            .sync_plus(false)
            .index_relay(relay("wss://one.example.com"))
            .index_relay(relay("wss://two.example.com"))
            .index_relay(relay("wss://one.example.com"))
            .sync_plus_participants_per_pass(4)
            .sync_plus_relays_per_pass(2)
            .sync_plus_max_relays(5)
            .sync_plus_pass_interval(Duration::from_secs(30))
            .engine_config(base);
        let plus = under(&env, explicit).unwrap().sync_plus;
        assert!(!plus.enabled);
        assert_eq!(
            plus.index_relays,
            vec![
                relay("wss://one.example.com"),
                relay("wss://two.example.com")
            ]
        );
        assert_eq!(
            (
                plus.participants_per_pass,
                plus.relays_per_pass,
                plus.max_relays,
                plus.pass_interval
            ),
            (4, 2, 5, Duration::from_secs(30))
        );
    }

    #[test]
    fn every_existing_variable_is_read_through_the_lookup_too() {
        let config = under(
            &[
                ("NGIT_SYNC_BATCH_WINDOW_MS", "250"),
                ("NGIT_SYNC_MAX_RELAYS", "77"),
            ],
            builder(),
        )
        .unwrap();
        assert_eq!(config.timeouts.batch_window, Duration::from_millis(250));
        assert_eq!(config.caps.max_relays, 77);
    }

    #[test]
    fn allow_local_addresses_and_relay_policy_reach_the_engine() {
        let local = RelayUrl::parse("ws://127.0.0.1:7777").unwrap();
        let refused = builder().engine_config_in_effect();
        assert!(refused
            .identity
            .relay_policy
            .check_relay_url(&local)
            .is_err());
        let allowed = builder()
            .allow_local_addresses(true)
            .engine_config_in_effect();
        assert!(allowed
            .identity
            .relay_policy
            .check_relay_url(&local)
            .is_ok());
        let own = builder()
            .own_relay(local.clone())
            .engine_config(EngineConfig::default())
            .engine_config_in_effect();
        assert_eq!(
            own.identity.service_relays,
            vec![local],
            "kept after engine_config"
        );
    }
}
