//! The engine settings every loopback test shares, and the signed NIP-34
//! test events of `grasp-sync-test-support` under the names the tests use.

use std::time::Duration;

use grasp_sync_core::engine::EngineConfig;
use grasp_sync_core::url_policy::RelayUrlPolicy;
pub use grasp_sync_test_support::nip34::{announcement, notes as sign_notes, sign, tag};

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
