//! How many tracked relays are in each health state: the counts the metrics
//! report ([`SyncEngine::health_counts`](crate::engine::SyncEngine::health_counts)).

use super::HealthState;

/// How many tracked relays are in each state, for the summary metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthCounts {
    /// All tracked relays (`grasp_sync_relays_tracked_total`).
    pub tracked: usize,
    /// Connected relays, whatever their state
    /// (`grasp_sync_relays_connected_total`).
    pub connected: usize,
    /// Relays in [`HealthState::Healthy`].
    pub healthy: usize,
    /// Relays in [`HealthState::Disconnected`].
    pub disconnected: usize,
    /// Relays in [`HealthState::Degraded`].
    pub degraded: usize,
    /// Relays in [`HealthState::Dead`] (`grasp_sync_relays_dead_total`).
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

    /// Counts one more relay, in `state`, connected or not.
    pub(crate) fn add(&mut self, state: HealthState, connected: bool) {
        self.tracked = self.tracked.saturating_add(1);
        if connected {
            self.connected = self.connected.saturating_add(1);
        }
        let slot = self.slot_mut(state);
        *slot = slot.saturating_add(1);
    }
}
