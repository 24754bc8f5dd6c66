//! Why a relay connection could not take a command's message.
//!
//! The engine emits [`Command`](crate::engine::Command)s and whoever drives
//! it executes them: sending a message only hands it to the connection (the
//! tokio adapter queues it for the connection's driver task), it never waits
//! for the relay. What the relay answers comes back to the engine as inputs;
//! a connection that cannot take a message is reported with
//! [`SyncEngine::handle_send_failed`](crate::engine::SyncEngine::handle_send_failed).

use nostr::prelude::RelayUrl;

/// Why a relay connection could not take a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The connection is not open.
    #[error("not connected to {0}")]
    NotConnected(RelayUrl),
    /// The connection's outgoing queue is full or closed.
    #[error("outgoing queue of {relay} is unavailable: {reason}")]
    QueueUnavailable {
        /// The relay.
        relay: RelayUrl,
        /// What went wrong.
        reason: String,
    },
}
