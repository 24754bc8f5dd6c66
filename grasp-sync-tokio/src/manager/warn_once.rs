//! Warnings given once per relay.

use std::collections::HashSet;

use nostr::prelude::RelayUrl;

/// Remembers which relays were warned about (at most
/// [`WarnOnce::REMEMBERED`]; past that, every refusal is logged at `debug`).
#[derive(Debug, Default)]
pub(super) struct WarnOnce(HashSet<RelayUrl>);

impl WarnOnce {
    const REMEMBERED: usize = 10_000;

    /// `true` the first time `relay` is seen.
    pub(super) fn warn_once(&mut self, relay: &RelayUrl) -> bool {
        self.0.len() < Self::REMEMBERED && self.0.insert(relay.clone())
    }
}
