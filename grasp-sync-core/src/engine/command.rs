//! What the engine asks its driver to do: the one vocabulary between the
//! engine and whoever drives it. A driver executes each [`Command`]
//! itself (there is no transport trait beside it); what a command sends to
//! a relay is [`Command::client_message`].

use std::borrow::Cow;
use std::time::Duration;

use nostr::prelude::{ClientMessage, Filter, RelayUrl, SubscriptionId};

use crate::verified::VerifiedEvent;

/// A command for the driver: open or close a relay connection, a message
/// for a relay ([`Command::client_message`]), a question for the store, or a
/// verified event to store. A command the driver cannot carry out for its
/// relay (the connection is not open, its queue is full) is reported with
/// [`SyncEngine::handle_send_failed`](super::SyncEngine::handle_send_failed)
/// ([`SyncEngine::execute_commands`](super::SyncEngine::execute_commands)
/// does it).
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

    /// The NIP-01 / NIP-77 message this command sends to its relay
    /// (`REQ`, `CLOSE`, `NEG-OPEN`, `NEG-MSG`, `NEG-CLOSE`), borrowing its
    /// filters (a Layer 3 filter can hold thousands of ids); `None` for the
    /// commands that send nothing (connect, disconnect, forget, and the
    /// store's).
    pub fn client_message(&self) -> Option<ClientMessage<'_>> {
        let message = match self {
            Command::Subscribe { id, filters, .. } => ClientMessage::Req {
                subscription_id: Cow::Borrowed(id),
                filters: filters.iter().map(Cow::Borrowed).collect(),
            },
            Command::Unsubscribe { id, .. } => ClientMessage::Close(Cow::Borrowed(id)),
            Command::NegOpen {
                id,
                filter,
                initial_message,
                ..
            } => ClientMessage::NegOpen {
                subscription_id: Cow::Borrowed(id),
                filter: Cow::Borrowed(filter),
                initial_message: Cow::Borrowed(initial_message),
            },
            Command::NegMsg { id, message, .. } => ClientMessage::NegMsg {
                subscription_id: Cow::Borrowed(id),
                message: Cow::Borrowed(message),
            },
            Command::NegClose { id, .. } => ClientMessage::NegClose {
                subscription_id: Cow::Borrowed(id),
            },
            Command::Connect { .. }
            | Command::Disconnect { .. }
            | Command::Forget { .. }
            | Command::QueryLocalItems { .. }
            | Command::Store { .. } => return None,
        };
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> RelayUrl {
        RelayUrl::parse("wss://relay.example.com").expect("url")
    }

    #[test]
    fn each_sending_command_is_its_nip01_or_nip77_message() {
        let relay = relay();
        let id = SubscriptionId::new("s1");
        let json = |command: Command| command.client_message().map(|message| message.as_json());
        let subscribe = Command::Subscribe {
            relay: relay.clone(),
            id: id.clone(),
            filters: vec![Filter::new().limit(0)],
        };
        assert_eq!(
            json(subscribe).as_deref(),
            Some(r#"["REQ","s1",{"limit":0}]"#)
        );
        let open = Command::NegOpen {
            relay: relay.clone(),
            id: id.clone(),
            filter: Filter::new(),
            initial_message: "6100".into(),
        };
        assert_eq!(
            json(open).as_deref(),
            Some(r#"["NEG-OPEN","s1",{},"6100"]"#)
        );
        let msg = Command::NegMsg {
            relay: relay.clone(),
            id: id.clone(),
            message: "6101".into(),
        };
        assert_eq!(json(msg).as_deref(), Some(r#"["NEG-MSG","s1","6101"]"#));
        let close = Command::NegClose {
            relay: relay.clone(),
            id: id.clone(),
        };
        assert_eq!(json(close).as_deref(), Some(r#"["NEG-CLOSE","s1"]"#));
        let unsubscribe = Command::Unsubscribe {
            relay: relay.clone(),
            id,
        };
        assert_eq!(json(unsubscribe).as_deref(), Some(r#"["CLOSE","s1"]"#));
    }

    #[test]
    fn connection_and_store_commands_send_nothing() {
        let relay = relay();
        let silent = [
            Command::Connect {
                relay: relay.clone(),
                timeout: Duration::from_secs(5),
            },
            Command::Disconnect {
                relay: relay.clone(),
            },
            Command::Forget {
                relay: relay.clone(),
            },
            Command::QueryLocalItems {
                relay,
                id: SubscriptionId::new("s1"),
                filter: Filter::new(),
            },
        ];
        for command in silent {
            assert_eq!(command.client_message(), None, "{command:?}");
        }
    }
}
