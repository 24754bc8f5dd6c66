//! What a host lists in its NIP-11 document's `supported_grasps`.
//!
//! nostr-relay-builder 0.44 serves no NIP-11 document: the host answers
//! `Accept: application/nostr+json` itself (or a proxy in front of the relay
//! does), and GRASP-01 asks that document to carry `supported_grasps`. The
//! list depends on the sync's configuration: GRASP-03 "Sync+" is listed only
//! while it is on, and only together with GRASP-02 (which embedding the sync
//! provides).

use grasp_sync_core::engine::EngineConfig;

/// The GRASP specifications a host that embeds this sync (and serves the
/// repositories' git data, GRASP-01) lists in its NIP-11 document's
/// `supported_grasps`: `"GRASP-01"` and `"GRASP-02"` always, and
/// `"GRASP-03"` when Sync+ is on in `config`
/// ([`SyncPlusConfig::enabled`](grasp_sync_core::engine::SyncPlusConfig::enabled)).
/// Give it the configuration the manager runs with,
/// [`SyncManagerBuilder::engine_config_in_effect`](grasp_sync_tokio::SyncManagerBuilder::engine_config_in_effect),
/// so the environment (`NGIT_SYNC_PLUS_ENABLED`) and the setters count.
///
/// ```
/// use grasp_sync_relay_builder::supported_grasps;
/// use grasp_sync_tokio::SyncManager;
///
/// let builder = SyncManager::builder().sync_plus(true);
/// let grasps = supported_grasps(&builder.engine_config_in_effect());
/// assert_eq!(grasps, ["GRASP-01", "GRASP-02", "GRASP-03"]);
/// // In the host's NIP-11 document:
/// let nip11 = serde_json::json!({ "name": "my relay", "supported_grasps": grasps });
/// assert_eq!(nip11["supported_grasps"][2], "GRASP-03");
///
/// let off = SyncManager::builder().sync_plus(false).engine_config_in_effect();
/// assert_eq!(supported_grasps(&off), ["GRASP-01", "GRASP-02"]);
/// ```
pub fn supported_grasps(config: &EngineConfig) -> Vec<&'static str> {
    let mut grasps = vec!["GRASP-01", "GRASP-02"];
    if config.sync_plus.enabled {
        grasps.push("GRASP-03");
    }
    grasps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grasp_03_only_with_sync_plus_on_and_always_after_grasp_02() {
        let on = supported_grasps(&EngineConfig::default());
        assert_eq!(on, ["GRASP-01", "GRASP-02", "GRASP-03"], "on by default");
        let off = supported_grasps(&EngineConfig::default().with_sync_plus(false));
        assert_eq!(off, ["GRASP-01", "GRASP-02"]);
    }
}
