//! The engine settings every loopback test shares, the manager most tests
//! run, and the signed NIP-34 test events of `grasp-sync-test-support` under
//! the names the tests use.

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::EngineConfig;
use grasp_sync_core::url_policy::RelayUrlPolicy;
pub use grasp_sync_test_support::nip34::{announcement, notes as sign_notes, sign, tag};
use grasp_sync_tokio::{RelayStore, SyncManager};
use nostr::prelude::RelayUrl;

/// The engine on loopback: local addresses allowed, a 200 ms
/// self-subscriber window, reconnects and retries within seconds (the
/// connect timeout is the base backoff: 2 s stays above a loaded machine's
/// handshake time).
pub fn loopback_engine_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.identity.relay_policy = RelayUrlPolicy::new().allow_local_addresses(true);
    config.timeouts.batch_window = Duration::from_millis(200);
    config.health.backoff.base = Duration::from_secs(2);
    config.health.backoff.max = Duration::from_secs(4);
    config.health.work_backoff.base = Duration::from_millis(500);
    config
}

/// A manager whose own relay and store are `own` (10 s store timeout),
/// running `config`, with its metrics in `registry`.
pub fn manager_into(
    own: &RelayUrl,
    config: EngineConfig,
    registry: prometheus::Registry,
) -> SyncManager {
    SyncManager::builder()
        .own_relay(own.clone())
        .store(Arc::new(RelayStore::new(
            own.clone(),
            Duration::from_secs(10),
        )))
        .engine_config(config)
        .registry(registry)
        .build()
        .expect("a manager of the loopback configuration")
}
