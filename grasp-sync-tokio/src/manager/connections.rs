//! The connections the engine's commands are executed on, in one map: one
//! per relay it syncs with (created on first use, dropped when the relay is
//! forgotten) and the self-subscriber's to the own relay (made at start with
//! its own configuration: its events were accepted by it and are not
//! verified again, its messages may be as large as
//! [`OWN_RELAY_MAX_MESSAGE`], and its attempts are not relay sync's). The
//! engine decides everything about each (when to connect,
//! what to send, when to close); a connection reports what happened with
//! its generation, and [`Connections::is_current`] tells a stale report
//! from a current one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use grasp_sync_core::engine::Command;
use grasp_sync_core::transport::TransportError;
use nostr::prelude::RelayUrl;
use tokio::task::JoinSet;

use crate::connection::{ConnectionHandle, Dialer, SentCounter};
use crate::metrics::Metrics;

/// Largest WebSocket message or frame taken from the own relay. Its events
/// passed your relay's own size limit when it accepted them, and one it
/// holds over the limit for strangers' relays
/// (`ConnectionConfig::max_message_size`) would end the self-subscription
/// each time it is sent again, so that no later event of the own relay's
/// could be read.
pub(crate) const OWN_RELAY_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Every connection of the run, and what counts their traffic.
pub(super) struct Connections {
    dialer: Dialer,
    /// Every relay's connection, the own relay's included.
    transports: HashMap<RelayUrl, ConnectionHandle>,
    /// The own relay's URL: its reports are the self-subscriber's.
    own: Option<RelayUrl>,
    /// Bytes sent on every connection.
    sent: Arc<AtomicU64>,
    /// Per relay: bytes sent, connection attempts; to remove a forgotten
    /// relay's series.
    metrics: Metrics,
}

impl Connections {
    /// No connection open yet; the own relay's (if any) is made now.
    pub(super) fn new(dialer: Dialer, metrics: Metrics, own_relay: Option<RelayUrl>) -> Self {
        let mut connections = Connections {
            dialer,
            transports: HashMap::new(),
            own: None,
            sent: Arc::new(AtomicU64::new(0)),
            metrics,
        };
        if let Some(url) = own_relay {
            let transport = connections.own_transport(url.clone());
            connections.transports.insert(url.clone(), transport);
            connections.own = Some(url);
        }
        connections
    }

    /// Executes one of the engine's commands for a connection (store work
    /// is not: see `StoreJob::of`): on the relay's connection, created on
    /// first use (the own relay's was made at start). An error means the
    /// connection could not take the message.
    pub(super) fn execute(&mut self, command: Command) -> Result<(), TransportError> {
        match command {
            Command::Connect { relay, timeout } => self.transport(&relay).connect(timeout),
            Command::Disconnect { relay } => self.transport(&relay).close(),
            Command::Forget { relay } => self.forget(&relay),
            command => {
                if let Some(message) = command.client_message() {
                    return self.transport(command.relay()).send(message);
                }
            }
        }
        Ok(())
    }

    /// Whether `relay` is the own relay.
    pub(super) fn is_own(&self, relay: &RelayUrl) -> bool {
        self.own.as_ref() == Some(relay)
    }

    /// Whether a report of connection `generation` to `relay` comes from
    /// its current connection (else it is stale).
    pub(super) fn is_current(&self, relay: &RelayUrl, generation: u64) -> bool {
        self.transports.get(relay).map(ConnectionHandle::generation) == Some(generation)
    }

    /// Bytes sent on every connection so far.
    pub(super) fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Every connection's driver tasks, to wait for them on shutdown.
    pub(super) fn take_tasks(&mut self) -> Vec<JoinSet<()>> {
        self.transports
            .values_mut()
            .filter_map(ConnectionHandle::take_tasks)
            .collect()
    }

    /// The connection of `relay`, created on first use.
    fn transport(&mut self, relay: &RelayUrl) -> &mut ConnectionHandle {
        let Connections {
            transports,
            dialer,
            sent,
            metrics,
            ..
        } = self;
        transports.entry(relay.clone()).or_insert_with(|| {
            let counter = sent_counter(sent, metrics, relay);
            ConnectionHandle::new(relay.clone(), dialer.clone(), counter)
        })
    }

    /// The own relay's connection: its events were accepted by it and are
    /// not verified again, its messages may be as large as
    /// [`OWN_RELAY_MAX_MESSAGE`], and its attempts are not relay sync's.
    fn own_transport(&self, url: RelayUrl) -> ConnectionHandle {
        let sent = SentCounter {
            connects: None,
            ..sent_counter(&self.sent, &self.metrics, &url)
        };
        let mut config = self.dialer.config.clone();
        config.max_message_size = config.max_message_size.max(OWN_RELAY_MAX_MESSAGE);
        config.max_frame_size = config.max_frame_size.max(OWN_RELAY_MAX_MESSAGE);
        let dialer = Dialer {
            seen: None,
            own_relay: true,
            config,
            ..self.dialer.clone()
        };
        ConnectionHandle::new(url, dialer, sent)
    }

    /// A relay no longer tracked: its connection closes, its driver tasks
    /// end (dropping their set aborts what is left), and its metric series
    /// go, so strangers' relays cannot grow either without bound.
    fn forget(&mut self, relay: &RelayUrl) {
        if let Some(mut transport) = self.transports.remove(relay) {
            transport.close();
        }
        self.metrics.forget_relay(relay);
    }
}

/// The bytes-sent counters of `relay`: the run's total, the relay's bytes,
/// its connection attempts.
fn sent_counter(total: &Arc<AtomicU64>, metrics: &Metrics, relay: &RelayUrl) -> SentCounter {
    SentCounter {
        total: total.clone(),
        relay: metrics.bytes_sent.with_label_values(&[relay.as_str()]),
        connects: Some(
            metrics
                .connection_attempts
                .with_label_values(&[relay.as_str(), "started"]),
        ),
    }
}
