//! Helpers shared by the core's integration and property tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::OnceLock;

use grasp_sync_core::RepoRef;
use nostr::prelude::{EventId, Keys, PublicKey, RelayUrl, SecretKey};

/// A fixed pool of public keys (deterministic secret keys 1..=8).
pub fn pubkeys() -> &'static [PublicKey] {
    static KEYS: OnceLock<Vec<PublicKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (1u8..=8)
            .map(|n| {
                let mut bytes = [0u8; 32];
                bytes[31] = n;
                let secret =
                    SecretKey::from_slice(&bytes).expect("a small non-zero scalar is a valid key");
                Keys::new(secret).public_key()
            })
            .collect()
    })
}

/// Repository number `n` (author chosen from the pool).
pub fn repo(n: usize) -> RepoRef {
    let keys = pubkeys();
    RepoRef::new(keys[n % keys.len()], format!("repo-{n}")).expect("a plain identifier is valid")
}

/// Relay number `n` on a public-looking host.
pub fn relay(n: usize) -> RelayUrl {
    RelayUrl::parse(&format!("wss://relay{n}.example.com")).expect("a well-formed relay URL")
}

/// Event id number `n`.
pub fn event_id(n: u64) -> EventId {
    let mut bytes = [0u8; 32];
    bytes[24..].copy_from_slice(&n.to_be_bytes());
    EventId::from_byte_array(bytes)
}
