//! The self-subscriber's connection to the own relay. The engine decides
//! everything about it — when to connect, what to subscribe, each history
//! page, when to reconnect
//! ([`Identity::own_relay`](grasp_sync_core::engine::Identity::own_relay));
//! the manager executes its commands on this connection like on any relay's
//! and reports what the connection tells it, routed by the own relay's URL.

use nostr::prelude::RelayUrl;
use tracing::{debug, info};

use super::runner::Connections;
use super::Runner;
use crate::connection::{Dialer, WsTransport};
use crate::inbound::Report;

/// Largest WebSocket message or frame taken from the own relay. Its events
/// passed your relay's own size limit when it accepted them, and one it
/// holds over the limit for strangers' relays
/// (`ConnectionConfig::max_message_size`) would end the self-subscription
/// each time it is sent again, so that no later event of the own relay's
/// could be read.
pub(crate) const OWN_RELAY_MAX_MESSAGE: usize = 16 * 1024 * 1024;

impl Connections {
    /// The own relay's connection: its events were accepted by it and are
    /// not verified again, its messages may be as large as
    /// [`OWN_RELAY_MAX_MESSAGE`], and its attempts are not relay sync's.
    pub(super) fn own_transport(&self, url: RelayUrl) -> WsTransport {
        let sent = crate::connection::SentCounter {
            connects: None,
            ..self.sent_counter(&url)
        };
        let mut config = self.dialer.config.clone();
        config.max_message_size = config.max_message_size.max(OWN_RELAY_MAX_MESSAGE);
        config.max_frame_size = config.max_frame_size.max(OWN_RELAY_MAX_MESSAGE);
        let dialer = Dialer {
            seen: None,
            config,
            ..self.dialer.clone()
        };
        WsTransport::new(url, dialer, sent)
    }
}

impl Runner {
    /// A report from the own relay's connection task, for the engine. Its
    /// bytes, attempts and NIP-11 limits are not relay sync's.
    pub(super) fn on_own(&mut self, relay: &RelayUrl, generation: u64, report: Report) {
        let current = self.connections.own.as_ref().map(WsTransport::generation);
        if current != Some(generation) {
            return;
        }
        let now = self.clock_now();
        match report {
            Report::Connected => self.engine.handle_connected(now, relay),
            Report::Message(message, _) => self.engine.handle_relay_message(now, relay, *message),
            Report::Event {
                subscription_id,
                checked,
                ..
            } => self
                .engine
                .handle_checked_event(now, relay, &subscription_id, checked),
            Report::ConnectFailed(reason) | Report::AddressRefused(reason) => {
                info!(%relay, reason, "own relay connection failed");
                self.engine.handle_connect_failed(now, relay);
            }
            Report::Disconnected(reason) => {
                info!(%relay, reason, "own relay connection lost");
                self.engine.handle_disconnected(now, relay);
            }
            Report::MessageTooLarge(size) => self.engine.handle_message_too_large(now, relay, size),
            Report::Alive | Report::Limits(_) | Report::Refused(_) => {}
            Report::Malformed(size) => debug!(%relay, size, "malformed frame from the own relay"),
        }
    }
}
