//! Signed NIP-34 test events and the engine settings every loopback test
//! shares.

use std::time::Duration;

use grasp_sync_core::engine::EngineConfig;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use nostr::prelude::*;

/// An event of `kind` by `keys` with `content`, `tags` and `created_at`.
pub fn sign(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>, at: u64) -> Event {
    EventBuilder::new(Kind::Custom(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .expect("sign event")
}

/// A tag from its values.
pub fn tag(values: &[&str]) -> Tag {
    Tag::parse(values.iter().copied()).expect("valid tag")
}

/// A repository announcement (30617) with `d` = `id` listing `relays`.
pub fn announcement(keys: &Keys, id: &str, relays: &[&RelayUrl], at: u64) -> Event {
    let mut relays_tag = vec!["relays".to_owned()];
    relays_tag.extend(relays.iter().map(|relay| relay.to_string()));
    let tags = vec![
        Tag::identifier(id),
        Tag::parse(relays_tag).expect("relays tag"),
    ];
    sign(keys, 30617, "", tags, at)
}

/// The engine on loopback: local addresses allowed, a 200 ms
/// self-subscriber window, reconnects and retries within seconds (the
/// connect timeout is the base backoff: 2 s stays above a loaded machine's
/// handshake time).
pub fn loopback_engine_config() -> EngineConfig {
    let mut config = EngineConfig {
        relay_policy: RelayUrlPolicy::new().allow_local_addresses(true),
        batch_window: Duration::from_millis(200),
        ..EngineConfig::default()
    };
    config.health.backoff.base = Duration::from_secs(2);
    config.health.backoff.max = Duration::from_secs(4);
    config.health.work_backoff.base = Duration::from_millis(500);
    config
}
