//! One connection to one relay, opened through the manager's
//! [`RelayTransport`] (WebSocket by default): a driver task per connection
//! that selects over the next frame, handing decoded reports to the manager
//! ([`Delivery`]), outgoing messages and shutdown, and a
//! [`ConnectionHandle`] the manager executes the engine's commands on
//! (connect, close, send a message).

use std::sync::Arc;
use std::time::Duration;

use futures_util::SinkExt;
use grasp_sync_core::transport::TransportError;
use nostr::prelude::{ClientMessage, RelayUrl};
use tokio::sync::{mpsc, watch};

use crate::budget::{InboundBudget, SharedBudget};
use tokio::task::JoinSet;
use tracing::debug;

use crate::decode::{gather_texts, next_frame, spawn_decode, Pending, Screen, SharedSeen};
use crate::delivery::Delivery;
use crate::inbound::{Inbound, Report};
use crate::transport::{
    ConnectError, ConnectRequest, Incoming, RelayConnection, RelayTransport, TextFrame,
};
use grasp_sync_core::screen::{Requested, SizeLimits};

/// Reports of one connection decoding or waiting to be handed to the
/// manager, at most (each also holds its share of the relay's byte
/// budget): past it the connection stops reading.
const DECODE_QUEUE: usize = 1024;

/// The largest WebSocket message accepted from a relay by default (4 MiB):
/// above the largest NIP-77 answer a peer sends (strfry about 1 MB, khatru
/// about 2.1 MB: [`PEER_NEG_MSG_BYTES`](grasp_sync_core::engine::PEER_NEG_MSG_BYTES))
/// and an `EVENT` frame at the default event size limit (1 MiB, escaped),
/// so an event over that limit is refused and counted with the connection
/// kept, not lost.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Limits and timers of every connection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnectionConfig {
    /// Largest WebSocket message accepted from a relay
    /// ([`DEFAULT_MAX_MESSAGE_BYTES`]): what peers send, measured, with
    /// room: strfry's NIP-77 answers (up to
    /// [`PEER_NEG_MSG_BYTES`](grasp_sync_core::engine::PEER_NEG_MSG_BYTES))
    /// and an `EVENT` frame at the event size limit, escaped. A larger
    /// message ends the connection (WebSocket cannot skip it): a NIP-77
    /// answer that large makes the relay synced by REQ; any other is
    /// counted and the relay connected again after a growing backoff
    /// (`SyncEngine::handle_message_too_large`) (`NGIT_SYNC_MAX_MESSAGE_BYTES`).
    /// Memory stays bounded by the inbound byte budgets below, not by this.
    pub max_message_size: usize,
    /// Largest WebSocket frame accepted from a relay, checked from the
    /// frame's header before it is read (`NGIT_SYNC_MAX_MESSAGE_BYTES`
    /// too).
    pub max_frame_size: usize,
    /// Interval between pings; a connection whose pong does not come back
    /// within one interval is closed. Each pong tells the engine the relay
    /// is alive; the manager pings at most every
    /// `EngineConfig::liveness_probe_interval` (a third of the batch
    /// timeout), whatever is set here, so an idle relay that answers is never
    /// taken for silent.
    pub ping_interval: Duration,
    /// Messages queued for one relay before sends fail.
    pub outgoing_queue: usize,
    /// Bytes of one relay's messages received and not yet handled by the
    /// engine: past it the connection stops reading until the engine
    /// catches up (a message larger than this waits until nothing else of
    /// the relay is buffered).
    pub inbound_bytes_per_relay: usize,
    /// Bytes of all relays' messages received and not yet handled, together:
    /// past it every connection stops reading until the engine catches up
    /// (each relay's share is still bounded by `inbound_bytes_per_relay`).
    pub inbound_bytes_total: usize,
    /// Events whose signature was verified lately, remembered across
    /// relays (id and signature, ≈ 100 B each): the same event from another
    /// relay is not verified again. 0 remembers none.
    pub verified_signatures: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_BYTES,
            max_frame_size: DEFAULT_MAX_MESSAGE_BYTES,
            ping_interval: Duration::from_secs(30),
            outgoing_queue: 4096,
            inbound_bytes_per_relay: 8 * 1024 * 1024,
            inbound_bytes_total: 256 * 1024 * 1024,
            verified_signatures: 65_536,
        }
    }
}

enum Outgoing {
    Text(String),
    Close,
}

/// Bytes sent (the run's total and the relay's metric) and connection
/// attempts started.
#[derive(Clone, Debug)]
pub(crate) struct SentCounter {
    pub(crate) total: Arc<std::sync::atomic::AtomicU64>,
    pub(crate) relay: prometheus::IntCounter,
    pub(crate) connects: Option<prometheus::IntCounter>,
}

/// What every connection needs: limits, the transport, where to report,
/// shutdown.
#[derive(Clone)]
pub(crate) struct Dialer {
    pub(crate) config: ConnectionConfig,
    /// Opens the connections (the own relay's too).
    pub(crate) transport: Arc<dyn RelayTransport>,
    /// Whether the connections are the own relay's (told to the transport).
    pub(crate) own_relay: bool,
    pub(crate) inbound: mpsc::Sender<Inbound>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Signatures verified lately, shared by the relay connections; `None`
    /// for a connection whose events are not verified (the own relay's).
    pub(crate) seen: SharedSeen,
    /// The size limits of one event (the engine's), checked before a
    /// frame is parsed.
    pub(crate) limits: SizeLimits,
    /// The inbound byte budget all connections share.
    pub(crate) shared_budget: SharedBudget,
}

/// A handle to one relay's connection: opens it (a driver task per
/// connection), closes it, queues messages for it.
pub(crate) struct ConnectionHandle {
    relay: RelayUrl,
    connector: Dialer,
    generation: u64,
    outgoing: Option<mpsc::Sender<Outgoing>>,
    sent: SentCounter,
    tasks: Option<JoinSet<()>>,
    /// The relay's inbound byte budget, shared by its connections (and
    /// drawing on the one all relays share).
    budget: InboundBudget,
    /// The subscriptions the current connection asked for (a new table
    /// per connection), read by its decoding tasks.
    requested: Arc<std::sync::Mutex<Requested>>,
}

impl std::fmt::Debug for ConnectionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionHandle")
            .field("relay", &self.relay)
            .field("generation", &self.generation)
            .field("open", &self.outgoing.is_some())
            .finish()
    }
}

impl ConnectionHandle {
    /// A connection to `relay`, not opened yet.
    pub(crate) fn new(relay: RelayUrl, connector: Dialer, sent: SentCounter) -> Self {
        let budget = InboundBudget::new(
            connector.config.inbound_bytes_per_relay,
            connector.shared_budget.clone(),
        );
        ConnectionHandle {
            relay,
            connector,
            generation: 0,
            outgoing: None,
            budget,
            sent,
            tasks: Some(JoinSet::new()),
            requested: Arc::default(),
        }
    }

    /// The generation of the current connection.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Takes the driver tasks, to wait for them on shutdown.
    pub(crate) fn take_tasks(&mut self) -> Option<JoinSet<()>> {
        self.tasks.take()
    }

    /// Queues `message` for the connection's driver task; never waits.
    pub(crate) fn send(&mut self, message: ClientMessage<'_>) -> Result<(), TransportError> {
        let Some(outgoing) = &self.outgoing else {
            return Err(TransportError::NotConnected(self.relay.clone()));
        };
        self.note_requested(&message);
        let text = message.as_json();
        let size = text.len() as u64;
        outgoing.try_send(Outgoing::Text(text)).map_err(|error| {
            TransportError::QueueUnavailable {
                relay: self.relay.clone(),
                reason: error.to_string(),
            }
        })?;
        self.sent
            .total
            .fetch_add(size, std::sync::atomic::Ordering::Relaxed);
        self.sent.relay.inc_by(size);
        Ok(())
    }

    /// Notes a `REQ` or `CLOSE` about to be sent in the connection's table
    /// of subscriptions, before the relay can answer it.
    fn note_requested(&self, message: &ClientMessage<'_>) {
        let mut requested = self
            .requested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match message {
            ClientMessage::Req {
                subscription_id,
                filters,
            } => requested.opened(
                subscription_id.clone().into_owned(),
                filters
                    .iter()
                    .map(|filter| filter.clone().into_owned())
                    .collect(),
            ),
            ClientMessage::Close(id) => requested.closed(id),
            _ => {}
        }
    }

    /// Starts connecting (a new driver task; the previous connection is
    /// closed); the outcome is reported later. The attempt is abandoned
    /// after `timeout`.
    pub(crate) fn connect(&mut self, timeout: Duration) {
        if let Some(connects) = &self.sent.connects {
            connects.inc();
        }
        self.close();
        if let Some(tasks) = &mut self.tasks {
            // Forget finished drivers of earlier connections.
            while tasks.try_join_next().is_some() {}
        }
        let (sender, receiver) = mpsc::channel(self.connector.config.outgoing_queue);
        self.outgoing = Some(sender);
        self.requested = Arc::default();
        let driver = Driver {
            relay: self.relay.clone(),
            generation: self.generation,
            connector: self.connector.clone(),
            outgoing: receiver,
            budget: self.budget.clone(),
            delivery: Delivery::new(
                self.relay.clone(),
                self.generation,
                self.connector.inbound.clone(),
            ),
            screen: self.connector.seen.clone().map(|seen| Screen {
                seen,
                requested: self.requested.clone(),
                limits: self.connector.limits,
            }),
        };
        if let Some(tasks) = &mut self.tasks {
            tasks.spawn(driver.run(timeout));
        }
    }

    /// Closes the connection; whatever it still reports is stale.
    pub(crate) fn close(&mut self) {
        if let Some(outgoing) = self.outgoing.take() {
            let _ = outgoing.try_send(Outgoing::Close);
        }
        self.generation += 1;
    }
}

/// The task of one connection: it reads the frames, starts their
/// decoding, hands the reports on in order, and writes what is sent.
struct Driver {
    relay: RelayUrl,
    generation: u64,
    connector: Dialer,
    outgoing: mpsc::Receiver<Outgoing>,
    budget: InboundBudget,
    /// Reports in arrival order, on their way to the manager.
    delivery: Delivery,
    /// What screens and verifies the connection's events; `None` when they
    /// are trusted (the own relay's).
    screen: Option<Screen>,
}

impl Driver {
    /// Queues `report` after what the connection reported before.
    fn report(&mut self, report: Report) {
        self.delivery.push(Pending::Ready(report), None);
    }

    /// Hands everything reported to the manager (unless it shuts down).
    async fn flush(&mut self) {
        let mut shutdown = self.connector.shutdown.clone();
        while !self.delivery.is_empty() {
            if *shutdown.borrow() {
                return;
            }
            tokio::select! {
                delivered = self.delivery.deliver_one() => if delivered.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Decodes frames in a task of their own once the inbound byte budgets
    /// (the relay's and the shared one) have room for them (relays cannot
    /// buffer more than the budgets in memory); meanwhile the reports
    /// decoded before are handed on, which gives their budget back once the
    /// manager handled them.
    async fn report_frames(&mut self, texts: Vec<TextFrame>) {
        let size: usize = texts.iter().map(|text| text.len()).sum();
        let mut shutdown = self.connector.shutdown.clone();
        let acquire = self.budget.reserve(size);
        tokio::pin!(acquire);
        let permit = loop {
            tokio::select! {
                share = &mut acquire => break share,
                delivered = self.delivery.deliver_one(), if !self.delivery.is_empty() => {
                    if delivered.is_err() {
                        return;
                    }
                }
                _ = shutdown.changed() => return,
            }
        };
        let pending = spawn_decode(texts, self.screen.clone());
        self.delivery.push(pending, permit);
    }

    async fn run(mut self, timeout: Duration) {
        let config = &self.connector.config;
        let request = ConnectRequest::new(
            self.relay.clone(),
            timeout,
            config.max_message_size,
            config.max_frame_size,
            config.ping_interval,
            self.connector.own_relay,
        );
        // NIP-11 is fetched alongside the connection and reported whenever
        // (if ever) it answers: a stalling endpoint never holds the
        // connection up; the engine uses safe sizes until it knows better.
        self.spawn_nip11(timeout);
        let connecting = self.connector.transport.connect(request);
        let mut shutdown = self.connector.shutdown.clone();
        let connection = tokio::select! {
            result = tokio::time::timeout(timeout, connecting) => result,
            _ = shutdown.changed() => return,
        };
        let connection = match connection {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(ConnectError::AddressRefused(reason))) => Err(Report::AddressRefused(reason)),
            Ok(Err(error)) => Err(Report::ConnectFailed(error.to_string())),
            Err(_) => Err(Report::ConnectFailed("connect timed out".into())),
        };
        match connection {
            Ok(connection) => {
                self.report(Report::Connected);
                let reason = self.pump(connection, shutdown).await;
                debug!(relay = %self.relay, reason, "connection closed");
                if let Some(reason) = reason {
                    self.report(Report::Disconnected(reason));
                }
            }
            Err(failure) => self.report(failure),
        }
        self.flush().await;
    }

    /// Fetches the relay's NIP-11 limits in a task of its own and reports
    /// them (tagged with this connection's generation) if they come.
    fn spawn_nip11(&self, timeout: Duration) {
        let relay = self.relay.clone();
        let generation = self.generation;
        let fetch = self
            .connector
            .transport
            .relay_limits(relay.clone(), timeout);
        let inbound = self.connector.inbound.clone();
        let mut shutdown = self.connector.shutdown.clone();
        tokio::spawn(async move {
            let limits = tokio::select! {
                limits = fetch => limits,
                _ = shutdown.changed() => return,
            };
            match limits {
                Some(limits) => {
                    let report = Inbound {
                        relay,
                        generation,
                        reports: vec![Report::Limits(limits)],
                        budget: None,
                    };
                    tokio::select! {
                        _ = inbound.send(report) => {}
                        _ = shutdown.changed() => {}
                    }
                }
                None => debug!(%relay, "no relay limits from the transport"),
            }
        });
    }

    /// Runs the open connection; returns why it ended, or `None` when we
    /// closed it (shutdown or a `Disconnect` command), the manager is gone
    /// or the message was too large (reported as such). Decoded reports are
    /// handed on between frames; past [`DECODE_QUEUE`] waiting, no frame is
    /// read until the manager took some. Nothing is read once the
    /// connection reported its end.
    async fn pump(
        &mut self,
        connection: RelayConnection,
        mut shutdown: watch::Receiver<bool>,
    ) -> Option<String> {
        let (mut sink, mut stream) = connection.into_parts();
        // A frame read while gathering text frames, handled next.
        let mut held = None;
        loop {
            tokio::select! {
                delivered = self.delivery.deliver_one(), if !self.delivery.is_empty() => {
                    if delivered.is_err() {
                        let _ = sink.close().await;
                        return None;
                    }
                }
                frame = next_frame(&mut stream, &mut held), if self.delivery.len() < DECODE_QUEUE => match frame {
                    Some(Incoming::Text(text)) => {
                        let texts = gather_texts(text, &mut stream, &mut held);
                        self.report_frames(texts).await
                    }
                    Some(Incoming::Alive) => self.report(Report::Alive),
                    Some(Incoming::Closed(reason)) => return Some(reason),
                    Some(Incoming::TooLarge(size)) => {
                        // The connection cannot read past it and is lost;
                        // the engine counts it and backs off.
                        self.report(Report::MessageTooLarge(size));
                        return None;
                    }
                    None => return Some("connection ended".into()),
                },
                out = self.outgoing.recv() => match out {
                    Some(Outgoing::Text(text)) => {
                        if let Err(error) = sink.send(text).await {
                            return Some(error.to_string());
                        }
                    }
                    Some(Outgoing::Close) | None => {
                        let _ = sink.close().await;
                        return None;
                    }
                },
                _ = shutdown.changed() => {
                    let _ = sink.close().await;
                    return None;
                }
            }
        }
    }
}
