//! How the manager reaches a relay: a [`RelayTransport`] opens one
//! [`RelayConnection`] per connection the engine asks for, and the
//! connection carries NIP-01 / NIP-77 text frames both ways.
//!
//! The default is [`WebSocketTransport`](crate::WebSocketTransport);
//! [`SyncManagerBuilder::transport`](crate::SyncManagerBuilder::transport)
//! plugs another (a pool of connections the host already runs, a proxy, an
//! in-process relay, a test double). Every relay connection of the manager
//! goes through it, the own relay's self-subscription included.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{Sink, Stream};
use grasp_sync_core::engine::RelayLimits;
use nostr::prelude::RelayUrl;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::resolve::DialError;

/// Opens connections to relays for the [`SyncManager`](crate::SyncManager).
///
/// The manager calls [`RelayTransport::connect`] each time the engine asks
/// for a connection to a relay (a reconnect after a drop or a backoff is a
/// new call) and drives the [`RelayConnection`] it returns from a task of
/// its own until the engine closes it, the connection ends, or the manager
/// shuts down. It never opens two connections to one relay at a time: the
/// previous one is closed first.
///
/// # What an implementation must do
///
/// - **Open** the connection in the future [`connect`](RelayTransport::connect)
///   returns, and resolve it only once frames can be sent; fail with a
///   [`ConnectError`] saying why (the engine then backs off and retries;
///   [`ConnectError::AddressRefused`] is counted and warned about as a
///   relay the policy refused). The manager gives up on an attempt after
///   [`ConnectRequest::timeout`] by dropping the future, so the future must
///   be cancel-safe (drop what it opened).
/// - **Send** each `String` handed to the connection's sink as one text
///   frame, in the order given (the engine's commands, one JSON message
///   each: `REQ`, `CLOSE`, `NEG-OPEN`, `NEG-MSG`, `NEG-CLOSE`, `EVENT`).
/// - **Receive**: yield each text frame from the relay as one
///   [`Incoming::Text`], in the order the relay sent them, and end the
///   connection with [`Incoming::Closed`] (or by ending the stream) when
///   it is lost. Nothing is read after that: frames a stream still yields
///   are dropped. A closed connection is reported to the engine, which
///   reconnects after its backoff.
/// - **Close** it when the sink is closed (`poll_close`) or both halves are
///   dropped.
/// - Keep the **transport's own duties**: TLS, name resolution and which
///   addresses may be connected to, the size of a message
///   ([`ConnectRequest::max_message_size`]: a larger one ends the
///   connection with [`Incoming::TooLarge`]), and liveness below the
///   protocol: a transport that can probe (WebSocket ping) does so every
///   [`ConnectRequest::ping_interval`], yields [`Incoming::Alive`] on each
///   answer and ends the connection when an answer does not come within
///   the interval. A transport without such probes (an in-process channel)
///   yields no [`Incoming::Alive`]; the engine still drops a relay that
///   leaves its requests unanswered.
/// - Be cheap to call from many tasks at once (`Send + Sync`): one manager
///   connects to many relays concurrently.
///
/// # What stays with the manager, whatever the transport
///
/// What it sends and when (the engine's decisions); the table of
/// subscriptions each connection asked for; the inbound byte budgets (a
/// connection's stream is not polled while the relay's or the shared budget
/// is full, so a transport that buffers nothing itself pushes back on the
/// relay); decoding, screening (event size, subscription and filters) and
/// verifying each event's id and signature (except the own relay's, which
/// it trusts); handing frames to the engine in the order they arrived;
/// connect timeouts; telling a stale connection's frames from the current
/// one's; the metrics.
///
/// # Object safety
///
/// The trait is object-safe (the builder keeps an `Arc<dyn RelayTransport>`)
/// and needs no `async-trait`: each method returns a boxed `'static` future,
/// so an implementation clones what it needs out of `self`.
///
/// ```
/// use grasp_sync_tokio::{ConnectError, ConnectRequest, RelayConnection, RelayTransport};
/// use grasp_sync_tokio::futures_util::future::BoxFuture;
///
/// /// A transport that reaches no relay (every attempt fails).
/// struct Offline;
///
/// impl RelayTransport for Offline {
///     fn connect(
///         &self,
///         request: ConnectRequest,
///     ) -> BoxFuture<'static, Result<RelayConnection, ConnectError>> {
///         let reason = format!("{} is out of reach", request.relay());
///         Box::pin(async move { Err(ConnectError::Unreachable(reason)) })
///     }
/// }
/// ```
pub trait RelayTransport: Send + Sync + 'static {
    /// Opens a connection to [`ConnectRequest::relay`]. The future is
    /// dropped if it takes longer than [`ConnectRequest::timeout`] or the
    /// manager shuts down.
    fn connect(
        &self,
        request: ConnectRequest,
    ) -> BoxFuture<'static, Result<RelayConnection, ConnectError>>;

    /// The relay's NIP-11 limits, if the transport can fetch them (the
    /// WebSocket transport asks the relay's HTTP endpoint). Called with
    /// each connection attempt, alongside it: the engine uses safe sizes
    /// until the limits come, and works without them. `None` (the default)
    /// when they cannot be had; give up after `timeout`.
    fn relay_limits(
        &self,
        relay: RelayUrl,
        timeout: Duration,
    ) -> BoxFuture<'static, Option<RelayLimits>> {
        let _ = (relay, timeout);
        Box::pin(std::future::ready(None))
    }
}

impl<T: RelayTransport + ?Sized> RelayTransport for Arc<T> {
    fn connect(
        &self,
        request: ConnectRequest,
    ) -> BoxFuture<'static, Result<RelayConnection, ConnectError>> {
        (**self).connect(request)
    }

    fn relay_limits(
        &self,
        relay: RelayUrl,
        timeout: Duration,
    ) -> BoxFuture<'static, Option<RelayLimits>> {
        (**self).relay_limits(relay, timeout)
    }
}

/// What the manager asks of one connection: the relay, how long opening it
/// may take, and the limits and liveness probes that are the transport's
/// to apply.
#[derive(Clone, Debug)]
pub struct ConnectRequest {
    relay: RelayUrl,
    timeout: Duration,
    max_message_size: usize,
    max_frame_size: usize,
    ping_interval: Duration,
    own_relay: bool,
}

impl ConnectRequest {
    /// A request; the manager makes them from its
    /// [`ConnectionConfig`](crate::ConnectionConfig).
    pub(crate) fn new(
        relay: RelayUrl,
        timeout: Duration,
        max_message_size: usize,
        max_frame_size: usize,
        ping_interval: Duration,
        own_relay: bool,
    ) -> Self {
        ConnectRequest {
            relay,
            timeout,
            max_message_size,
            max_frame_size,
            ping_interval,
            own_relay,
        }
    }

    /// The relay to connect to.
    pub fn relay(&self) -> &RelayUrl {
        &self.relay
    }

    /// How long the attempt may take; the manager drops it after that.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The largest message to take from the relay
    /// ([`ConnectionConfig::max_message_size`](crate::ConnectionConfig::max_message_size),
    /// larger for the own relay): a larger one ends the connection with
    /// [`Incoming::TooLarge`].
    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// The largest frame to take from the relay, for transports that frame
    /// messages (WebSocket): checked before the frame is read.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// How often to probe the relay below the protocol (WebSocket ping), for
    /// transports that can; an answer is yielded as [`Incoming::Alive`], and
    /// a probe unanswered within one interval ends the connection.
    pub fn ping_interval(&self) -> Duration {
        self.ping_interval
    }

    /// Whether this is the own relay's connection (the self-subscription),
    /// for a host that reaches its own relay another way than strangers'.
    pub fn is_own_relay(&self) -> bool {
        self.own_relay
    }
}

/// Why a connection could not be opened. The engine backs off and
/// retries in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The relay's address was refused by the relay policy: nothing was
    /// connected (counted as `resolved_address` in the refused metric and
    /// warned about once per relay).
    #[error("relay address refused: {0}")]
    AddressRefused(String),
    /// No checked address could be connected to (WebSocket transport).
    #[error(transparent)]
    Dial(DialError),
    /// The connection opened but its handshake failed (TLS, WebSocket
    /// upgrade).
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The relay cannot be reached, for a reason of the transport's.
    #[error("relay unreachable: {0}")]
    Unreachable(String),
}

/// Why a frame could not be sent: the connection is lost (the manager
/// reports it closed with this reason).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The connection is closed.
    #[error("connection closed")]
    Closed,
    /// Writing failed.
    #[error("{0}")]
    Failed(String),
}

/// What a connection yields to the manager.
#[derive(Debug)]
#[non_exhaustive]
pub enum Incoming {
    /// One text frame from the relay: a NIP-01 / NIP-77 relay message
    /// (`EVENT`, `EOSE`, `OK`, `NOTICE`, `CLOSED`, `NEG-MSG`, `NEG-ERR` …).
    Text(TextFrame),
    /// The relay answered a liveness probe (a WebSocket pong): it is
    /// alive, though it may have sent nothing else.
    Alive,
    /// The connection ended, and why. Nothing is read after it.
    Closed(String),
    /// The relay sent a message of this many bytes, over
    /// [`ConnectRequest::max_message_size`]; the connection cannot read
    /// past it and has ended (the engine counts it and reconnects after a
    /// growing backoff). Nothing is read after it.
    TooLarge(usize),
}

/// One text frame received from a relay.
#[derive(Clone, Debug)]
pub struct TextFrame(Text);

#[derive(Clone, Debug)]
enum Text {
    Owned(String),
    /// A WebSocket frame, kept as received (no copy).
    WebSocket(Utf8Bytes),
}

impl TextFrame {
    /// The frame's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Text::Owned(text) => text,
            Text::WebSocket(text) => text.as_str(),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.as_str().len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl AsRef<str> for TextFrame {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for TextFrame {
    fn from(text: String) -> Self {
        TextFrame(Text::Owned(text))
    }
}

impl From<&str> for TextFrame {
    fn from(text: &str) -> Self {
        TextFrame(Text::Owned(text.to_owned()))
    }
}

impl From<Utf8Bytes> for TextFrame {
    fn from(text: Utf8Bytes) -> Self {
        TextFrame(Text::WebSocket(text))
    }
}

/// The frames to a relay (a sink of JSON texts).
type Outgoing = Pin<Box<dyn Sink<String, Error = SendError> + Send>>;
/// What comes from a relay.
type Received = Pin<Box<dyn Stream<Item = Incoming> + Send>>;

/// One open connection to a relay: a sink the manager sends text frames
/// into and a stream of what the relay sends, which the manager polls
/// concurrently from the connection's task (so they are two halves, as
/// `StreamExt::split` makes of a type that is both).
pub struct RelayConnection {
    outgoing: Outgoing,
    incoming: Received,
}

impl RelayConnection {
    /// A connection sending into `outgoing` (each `String` one text frame,
    /// in order; closed with `poll_close` when the manager closes the
    /// connection) and receiving from `incoming` (its end, or
    /// [`Incoming::Closed`], is the connection's).
    pub fn new<O, I>(outgoing: O, incoming: I) -> Self
    where
        O: Sink<String, Error = SendError> + Send + 'static,
        I: Stream<Item = Incoming> + Send + 'static,
    {
        RelayConnection {
            outgoing: Box::pin(outgoing),
            incoming: Box::pin(incoming),
        }
    }

    /// Its two halves, for the connection's driver.
    pub(crate) fn into_parts(self) -> (Outgoing, Received) {
        (self.outgoing, self.incoming)
    }
}

impl std::fmt::Debug for RelayConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayConnection").finish_non_exhaustive()
    }
}
