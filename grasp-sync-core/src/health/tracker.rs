//! The health of every tracked relay, and the counts the metrics report.

use indexmap::IndexMap;
use nostr::types::RelayUrl;

use std::time::Duration;

use super::{HealthConfig, HealthState, RelayHealth, Retry};
use crate::clock::Instant;

/// How many tracked relays are in each state, for the summary metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthCounts {
    /// All tracked relays (`ngit_sync_relays_tracked_total`).
    pub tracked: usize,
    /// Connected relays, whatever their state
    /// (`ngit_sync_relays_connected_total`).
    pub connected: usize,
    /// Relays in [`HealthState::Healthy`].
    pub healthy: usize,
    /// Relays in [`HealthState::Disconnected`].
    pub disconnected: usize,
    /// Relays in [`HealthState::Degraded`].
    pub degraded: usize,
    /// Relays in [`HealthState::Dead`] (`ngit_sync_relays_dead_total`).
    pub dead: usize,
    /// Relays in [`HealthState::RateLimited`].
    pub rate_limited: usize,
}

impl HealthCounts {
    /// The number of relays in `state`.
    pub fn in_state(&self, state: HealthState) -> usize {
        match state {
            HealthState::Healthy => self.healthy,
            HealthState::Disconnected => self.disconnected,
            HealthState::Degraded => self.degraded,
            HealthState::Dead => self.dead,
            HealthState::RateLimited => self.rate_limited,
        }
    }

    fn slot_mut(&mut self, state: HealthState) -> &mut usize {
        match state {
            HealthState::Healthy => &mut self.healthy,
            HealthState::Disconnected => &mut self.disconnected,
            HealthState::Degraded => &mut self.degraded,
            HealthState::Dead => &mut self.dead,
            HealthState::RateLimited => &mut self.rate_limited,
        }
    }

    fn add(&mut self, state: HealthState, connected: bool) {
        self.tracked = self.tracked.saturating_add(1);
        if connected {
            self.connected = self.connected.saturating_add(1);
        }
        let slot = self.slot_mut(state);
        *slot = slot.saturating_add(1);
    }
}

/// The health of every tracked relay, in registration order.
///
/// The `on_*` forwarding methods register an unknown relay first; the read-only
/// queries treat an unknown relay as a new one (disconnected, ready).
#[derive(Clone, Debug, Default)]
pub struct HealthTracker {
    config: HealthConfig,
    relays: IndexMap<RelayUrl, RelayHealth>,
    /// Failed historic work per relay.
    work: std::collections::HashMap<RelayUrl, Retry>,
    /// The store's refusals for now.
    store: Option<Retry>,
    /// The own relay's lost connections.
    own_relay: Option<Retry>,
}

impl HealthTracker {
    /// An empty tracker using `config`.
    pub fn new(config: HealthConfig) -> Self {
        HealthTracker {
            config,
            relays: IndexMap::new(),
            work: std::collections::HashMap::new(),
            store: None,
            own_relay: None,
        }
    }

    /// Historic work on `relay` failed (a batch closed or timed out, a live
    /// subscription refused): the delay before it is planned again.
    pub fn on_work_failed(&mut self, relay: &RelayUrl) -> Duration {
        let backoff = self.config.work_backoff;
        self.work
            .entry(relay.clone())
            .or_insert_with(|| Retry::new(backoff))
            .fail()
    }

    /// Historic work on `relay` was confirmed: its next failure starts over.
    pub fn on_work_confirmed(&mut self, relay: &RelayUrl) {
        self.work.remove(relay);
    }

    /// The store refused events for now: the delay before they are offered
    /// again.
    pub fn on_store_refused(&mut self) -> Duration {
        let backoff = self.config.store_backoff;
        self.store.get_or_insert_with(|| Retry::new(backoff)).fail()
    }

    /// The store took or settled an event: its next refusal starts over.
    pub fn on_store_answered(&mut self) {
        self.store = None;
    }

    /// The own relay connection was lost (or could not be opened): the
    /// delay before the self-subscriber reconnects.
    pub fn on_own_relay_lost(&mut self) -> Duration {
        let backoff = self.config.own_relay_backoff;
        self.own_relay
            .get_or_insert_with(|| Retry::new(backoff))
            .fail()
    }

    /// The own relay connection opened.
    pub fn on_own_relay_connected(&mut self) {
        self.own_relay = None;
    }

    /// The timing constants in use.
    pub fn config(&self) -> &HealthConfig {
        &self.config
    }

    /// Starts tracking `relay` (as never connected, never failed); keeps the
    /// existing state if it is already tracked.
    pub fn register(&mut self, relay: RelayUrl) {
        self.relays.entry(relay).or_default();
    }

    /// Stops tracking `relay`; the others keep their order.
    pub fn remove(&mut self, relay: &RelayUrl) {
        self.relays.shift_remove(relay);
        self.work.remove(relay);
    }

    /// The state machine of `relay`, if tracked.
    pub fn get(&self, relay: &RelayUrl) -> Option<&RelayHealth> {
        self.relays.get(relay)
    }

    /// The state machine of `relay`, mutably, if tracked.
    pub fn get_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelayHealth> {
        self.relays.get_mut(relay)
    }

    /// Every tracked relay with its health, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (&RelayUrl, &RelayHealth)> {
        self.relays.iter()
    }

    /// The number of tracked relays.
    pub fn len(&self) -> usize {
        self.relays.len()
    }

    /// Whether no relay is tracked.
    pub fn is_empty(&self) -> bool {
        self.relays.is_empty()
    }

    /// See [`RelayHealth::on_connect_attempt`].
    pub fn on_connect_attempt(&mut self, relay: &RelayUrl, now: Instant) {
        tracing::trace!(relay = %relay, "relay connection attempt");
        self.health_mut(relay).on_connect_attempt(now);
    }

    /// See [`RelayHealth::on_connected`].
    pub fn on_connected(&mut self, relay: &RelayUrl, now: Instant) {
        tracing::debug!(relay = %relay, "relay connected");
        self.health_mut(relay).on_connected(now);
    }

    /// See [`RelayHealth::on_connect_failed`].
    pub fn on_connect_failed(&mut self, relay: &RelayUrl, now: Instant) {
        let Self { config, relays, .. } = self;
        let health = relays.entry(relay.clone()).or_default();
        health.on_connect_failed(now);
        tracing::debug!(
            relay = %relay,
            failures = health.consecutive_failures(),
            next_attempt_at = ?health.next_attempt_at(config),
            "relay connection failed"
        );
    }

    /// See [`RelayHealth::on_disconnected`].
    pub fn on_disconnected(&mut self, relay: &RelayUrl, now: Instant) {
        let Self { config, relays, .. } = self;
        let health = relays.entry(relay.clone()).or_default();
        health.on_disconnected(now, config);
        tracing::debug!(
            relay = %relay,
            failures = health.consecutive_failures(),
            "relay disconnected"
        );
    }

    /// See [`RelayHealth::on_rate_limited`].
    pub fn on_rate_limited(&mut self, relay: &RelayUrl, now: Instant) {
        tracing::info!(
            relay = %relay,
            cooldown = ?self.config.rate_limit_cooldown,
            "relay rate limited"
        );
        let Self { config, relays, .. } = self;
        relays
            .entry(relay.clone())
            .or_default()
            .on_rate_limited(now, config);
    }

    /// See [`RelayHealth::state`]; an unknown relay is
    /// [`HealthState::Disconnected`].
    pub fn state(&self, relay: &RelayUrl, now: Instant) -> HealthState {
        self.relays
            .get(relay)
            .map_or(HealthState::Disconnected, |health| {
                health.state(now, &self.config)
            })
    }

    /// See [`RelayHealth::should_attempt_connection`]; an unknown relay may be
    /// connected.
    pub fn should_attempt_connection(&self, relay: &RelayUrl, now: Instant) -> bool {
        self.relays
            .get(relay)
            .is_none_or(|health| health.should_attempt_connection(now, &self.config))
    }

    /// The relays that may be connected at `now`, in registration order.
    pub fn relays_ready_to_connect(&self, now: Instant) -> Vec<RelayUrl> {
        self.relays
            .iter()
            .filter(|(_, health)| health.should_attempt_connection(now, &self.config))
            .map(|(relay, _)| relay.clone())
            .collect()
    }

    /// The earliest [`RelayHealth::poll_timeout`] over all relays.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.relays
            .values()
            .filter_map(|health| health.poll_timeout(now, &self.config))
            .min()
    }

    /// When the answers about `relay` change next (its part of
    /// [`HealthTracker::poll_timeout`]).
    pub fn poll_timeout_of(&self, relay: &RelayUrl, now: Instant) -> Option<Instant> {
        self.relays
            .get(relay)
            .and_then(|health| health.poll_timeout(now, &self.config))
    }

    /// Every relay the tracker knows.
    pub fn relays(&self) -> impl Iterator<Item = &RelayUrl> {
        self.relays.keys()
    }

    /// How many relays are in each state at `now`.
    pub fn counts(&self, now: Instant) -> HealthCounts {
        let mut counts = HealthCounts::default();
        for health in self.relays.values() {
            counts.add(health.state(now, &self.config), health.is_connected());
        }
        counts
    }

    fn health_mut(&mut self, relay: &RelayUrl) -> &mut RelayHealth {
        self.relays.entry(relay.clone()).or_default()
    }
}
