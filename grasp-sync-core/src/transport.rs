//! What the sync engine needs from a relay connection, and an in-memory
//! implementation that records what was sent.
//!
//! The engine is a state machine: it emits commands, and whoever drives it
//! executes them through a [`RelayTransport`]. The methods only hand a
//! message to the connection (the tokio adapter queues it for the
//! connection's driver task); they never wait for the relay. What the relay
//! answers comes back to the engine as inputs.

use std::time::Duration;

use nostr::prelude::{ClientMessage, Event, Filter, RelayUrl, SubscriptionId};

/// Why a transport could not take a message.
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

/// One relay connection, as the engine drives it.
pub trait RelayTransport {
    /// The relay this connection talks to.
    fn relay_url(&self) -> &RelayUrl;

    /// Starts connecting; the outcome arrives later as an input. The attempt
    /// is abandoned after `timeout`.
    fn connect(&mut self, timeout: Duration) -> Result<(), TransportError>;

    /// Closes the connection.
    fn close(&mut self) -> Result<(), TransportError>;

    /// Sends `REQ` with `id` and `filters`.
    fn subscribe(&mut self, id: &SubscriptionId, filters: &[Filter]) -> Result<(), TransportError>;

    /// Sends `CLOSE` for `id`.
    fn unsubscribe(&mut self, id: &SubscriptionId) -> Result<(), TransportError>;

    /// Sends `NEG-OPEN` (NIP-77) with the hex-encoded initial message.
    fn neg_open(
        &mut self,
        id: &SubscriptionId,
        filter: &Filter,
        initial_message: &str,
    ) -> Result<(), TransportError>;

    /// Sends `NEG-MSG` (NIP-77) with a hex-encoded message.
    fn neg_msg(&mut self, id: &SubscriptionId, message: &str) -> Result<(), TransportError>;

    /// Sends `NEG-CLOSE` (NIP-77).
    fn neg_close(&mut self, id: &SubscriptionId) -> Result<(), TransportError>;

    /// Sends `EVENT` (publish).
    fn publish(&mut self, event: &Event) -> Result<(), TransportError>;
}

/// What a [`MemoryTransport`] was asked to do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Wire {
    /// `connect` with its timeout.
    Connect(Duration),
    /// `close`.
    Close,
    /// A message sent.
    Message(Box<ClientMessage<'static>>),
}

/// An in-memory [`RelayTransport`] that records everything it is asked to
/// do, in order (the simulation's transport).
///
/// `connect` marks it connected at once (tests decide when the engine hears
/// about it); sending while not connected fails like a real connection.
#[derive(Clone, Debug)]
pub struct MemoryTransport {
    relay: RelayUrl,
    connected: bool,
    connect_attempts: u32,
    last_connect_timeout: Option<Duration>,
    log: Vec<Wire>,
}

impl MemoryTransport {
    /// A disconnected transport for `relay`.
    pub fn new(relay: RelayUrl) -> Self {
        MemoryTransport {
            relay,
            connected: false,
            connect_attempts: 0,
            last_connect_timeout: None,
            log: Vec::new(),
        }
    }

    /// `true` between `connect` and `close`.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// How many times `connect` was called.
    pub fn connect_attempts(&self) -> u32 {
        self.connect_attempts
    }

    /// The timeout of the last `connect`.
    pub fn last_connect_timeout(&self) -> Option<Duration> {
        self.last_connect_timeout
    }

    /// The messages sent and not taken yet, oldest first.
    pub fn sent(&self) -> Vec<&ClientMessage<'static>> {
        self.log
            .iter()
            .filter_map(|wire| match wire {
                Wire::Message(message) => Some(message.as_ref()),
                _ => None,
            })
            .collect()
    }

    /// Returns and forgets everything recorded so far, in order.
    pub fn take_log(&mut self) -> Vec<Wire> {
        std::mem::take(&mut self.log)
    }

    fn send(&mut self, message: ClientMessage<'static>) -> Result<(), TransportError> {
        if !self.connected {
            return Err(TransportError::NotConnected(self.relay.clone()));
        }
        self.log.push(Wire::Message(Box::new(message)));
        Ok(())
    }
}

impl RelayTransport for MemoryTransport {
    fn relay_url(&self) -> &RelayUrl {
        &self.relay
    }

    fn connect(&mut self, timeout: Duration) -> Result<(), TransportError> {
        self.connect_attempts = self.connect_attempts.saturating_add(1);
        self.last_connect_timeout = Some(timeout);
        self.connected = true;
        self.log.push(Wire::Connect(timeout));
        Ok(())
    }

    fn close(&mut self) -> Result<(), TransportError> {
        self.connected = false;
        self.log.push(Wire::Close);
        Ok(())
    }

    fn subscribe(&mut self, id: &SubscriptionId, filters: &[Filter]) -> Result<(), TransportError> {
        self.send(ClientMessage::req(id.clone(), filters.to_vec()))
    }

    fn unsubscribe(&mut self, id: &SubscriptionId) -> Result<(), TransportError> {
        self.send(ClientMessage::close(id.clone()))
    }

    fn neg_open(
        &mut self,
        id: &SubscriptionId,
        filter: &Filter,
        initial_message: &str,
    ) -> Result<(), TransportError> {
        self.send(ClientMessage::NegOpen {
            subscription_id: std::borrow::Cow::Owned(id.clone()),
            filter: std::borrow::Cow::Owned(filter.clone()),
            initial_message: std::borrow::Cow::Owned(initial_message.to_owned()),
        })
    }

    fn neg_msg(&mut self, id: &SubscriptionId, message: &str) -> Result<(), TransportError> {
        self.send(ClientMessage::NegMsg {
            subscription_id: std::borrow::Cow::Owned(id.clone()),
            message: std::borrow::Cow::Owned(message.to_owned()),
        })
    }

    fn neg_close(&mut self, id: &SubscriptionId) -> Result<(), TransportError> {
        self.send(ClientMessage::NegClose {
            subscription_id: std::borrow::Cow::Owned(id.clone()),
        })
    }

    fn publish(&mut self, event: &Event) -> Result<(), TransportError> {
        self.send(ClientMessage::event(event.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> RelayUrl {
        RelayUrl::parse("wss://relay.example.com").unwrap()
    }

    #[test]
    fn sending_before_connect_fails_like_a_real_connection() {
        let mut transport = MemoryTransport::new(relay());
        let id = SubscriptionId::new("s1");
        assert_eq!(
            transport.subscribe(&id, &[Filter::new()]),
            Err(TransportError::NotConnected(relay()))
        );
        assert!(transport.sent().is_empty());
    }

    #[test]
    fn records_every_message_in_order() {
        let mut transport = MemoryTransport::new(relay());
        transport.connect(Duration::from_secs(5)).unwrap();
        assert_eq!(
            transport.last_connect_timeout(),
            Some(Duration::from_secs(5))
        );
        let id = SubscriptionId::new("s1");
        transport.subscribe(&id, &[Filter::new().limit(0)]).unwrap();
        transport.neg_open(&id, &Filter::new(), "6100").unwrap();
        transport.neg_msg(&id, "6101").unwrap();
        transport.neg_close(&id).unwrap();
        transport.unsubscribe(&id).unwrap();
        let sent: Vec<String> = transport.sent().iter().map(|m| m.as_json()).collect();
        assert_eq!(sent[0], r#"["REQ","s1",{"limit":0}]"#);
        assert_eq!(sent[1], r#"["NEG-OPEN","s1",{},"6100"]"#);
        assert_eq!(sent[2], r#"["NEG-MSG","s1","6101"]"#);
        assert_eq!(sent[3], r#"["NEG-CLOSE","s1"]"#);
        assert_eq!(sent[4], r#"["CLOSE","s1"]"#);
        transport.close().unwrap();
        assert!(!transport.is_connected());
        let log = transport.take_log();
        assert_eq!(log.first(), Some(&Wire::Connect(Duration::from_secs(5))));
        assert_eq!(log.last(), Some(&Wire::Close));
        assert_eq!(log.len(), 7);
        assert!(transport.sent().is_empty());
    }
}
