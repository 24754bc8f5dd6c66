//! What the engine asks its driver to do.

use std::time::Duration;

use nostr::prelude::{Filter, RelayUrl, SubscriptionId};

use crate::verified::VerifiedEvent;

/// A command for the driver: a message for a relay's transport, a question
/// for the store, or a verified event to store.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Command {
    /// Open a connection; report `handle_connected` or `handle_connect_failed`.
    Connect {
        /// The relay.
        relay: RelayUrl,
        /// Give up after this long (the engine also stops waiting then).
        timeout: Duration,
    },
    /// Close the connection (no `handle_disconnected` needed afterwards).
    Disconnect {
        /// The relay.
        relay: RelayUrl,
    },
    /// The relay is no longer tracked (nothing listed it for a while):
    /// close its connection if open and release what the driver keeps for
    /// it (transport, metric series). The engine expects no reports of it.
    Forget {
        /// The relay.
        relay: RelayUrl,
    },
    /// Send `REQ` (replacing any open subscription with the same id).
    Subscribe {
        /// The relay.
        relay: RelayUrl,
        /// Subscription id.
        id: SubscriptionId,
        /// The filters.
        filters: Vec<Filter>,
    },
    /// Send `CLOSE`.
    Unsubscribe {
        /// The relay.
        relay: RelayUrl,
        /// Subscription id.
        id: SubscriptionId,
    },
    /// Send `NEG-OPEN` (NIP-77).
    NegOpen {
        /// The relay.
        relay: RelayUrl,
        /// Session id.
        id: SubscriptionId,
        /// The filter reconciled.
        filter: Filter,
        /// Hex-encoded initial message.
        initial_message: String,
    },
    /// Send `NEG-MSG` (NIP-77).
    NegMsg {
        /// The relay.
        relay: RelayUrl,
        /// Session id.
        id: SubscriptionId,
        /// Hex-encoded message.
        message: String,
    },
    /// Send `NEG-CLOSE` (NIP-77).
    NegClose {
        /// The relay.
        relay: RelayUrl,
        /// Session id.
        id: SubscriptionId,
    },
    /// Ask the store for the `(id, created_at)` of its events matching
    /// `filter`; answer with `handle_local_items(relay, id, items)`.
    QueryLocalItems {
        /// The relay the negentropy session is for.
        relay: RelayUrl,
        /// The session id to answer with.
        id: SubscriptionId,
        /// The filter.
        filter: Filter,
    },
    /// Store this event: its id and signature verified (the type says so)
    /// and it matched the filter of the subscription it arrived on.
    Store {
        /// The relay it came from.
        relay: RelayUrl,
        /// The event.
        event: VerifiedEvent,
    },
}

impl Command {
    /// The relay the command concerns.
    pub fn relay(&self) -> &RelayUrl {
        match self {
            Command::Connect { relay, .. }
            | Command::Disconnect { relay }
            | Command::Forget { relay }
            | Command::Subscribe { relay, .. }
            | Command::Unsubscribe { relay, .. }
            | Command::NegOpen { relay, .. }
            | Command::NegMsg { relay, .. }
            | Command::NegClose { relay, .. }
            | Command::QueryLocalItems { relay, .. }
            | Command::Store { relay, .. } => relay,
        }
    }
}
