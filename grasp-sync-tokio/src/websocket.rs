//! The default [`RelayTransport`]: a WebSocket per connection (rustls for
//! `wss://`), opened to an address checked with the relay policy, with ping
//! keep-alive and frame and message size limits; NIP-11 fetched over HTTP
//! from the same checked addresses.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{Sink, Stream, StreamExt};
use grasp_sync_core::engine::{Identity, RelayLimits};
use nostr::prelude::RelayUrl;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::error::CapacityError;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};
use tracing::debug;

use crate::resolve::{AddressCheck, DialError, Resolver};
use crate::transport::{ConnectError, ConnectRequest, Incoming, RelayConnection, SendError};

/// Connects to relays over WebSocket: the transport the manager uses unless
/// [`SyncManagerBuilder::transport`](crate::SyncManagerBuilder::transport)
/// plugs another.
///
/// Each connection resolves the relay's host once (with the resolver),
/// checks every address it resolves to with the relay policy (the
/// identity's own and bootstrap relays are not checked), opens TCP to a
/// checked one and runs the WebSocket handshake over it (rustls with the
/// webpki roots for `wss://`). It takes messages and frames up to the
/// request's limits, pings every [`ConnectRequest::ping_interval`]
/// (yielding [`Incoming::Alive`] on each pong) and ends the connection when
/// a pong does not come back within the interval. NIP-11 limits are
/// fetched from the relay's HTTP endpoint at a checked address.
///
/// The builder makes one from its resolver and the engine's identity; make
/// one yourself to wrap it (a transport that reaches some relays another
/// way and hands the rest to this one).
#[derive(Clone)]
pub struct WebSocketTransport {
    tls: Arc<rustls::ClientConfig>,
    address: AddressCheck,
}

impl std::fmt::Debug for WebSocketTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketTransport").finish_non_exhaustive()
    }
}

impl WebSocketTransport {
    /// A transport that checks relays' addresses with `identity`'s relay
    /// policy (its own and bootstrap relays unchecked) and resolves names
    /// with `resolver` (e.g. [`SystemResolver`](crate::SystemResolver)).
    /// Fails only if TLS cannot be configured.
    pub fn new(identity: Identity, resolver: Arc<dyn Resolver>) -> Result<Self, rustls::Error> {
        Ok(Self::with_address(
            crate::tls::tls_config()?,
            AddressCheck {
                resolver,
                identity: Arc::new(identity),
            },
        ))
    }

    /// A transport over `tls`, connecting to addresses `address` allows.
    pub(crate) fn with_address(tls: Arc<rustls::ClientConfig>, address: AddressCheck) -> Self {
        WebSocketTransport { tls, address }
    }
}

impl crate::transport::RelayTransport for WebSocketTransport {
    fn connect(
        &self,
        request: ConnectRequest,
    ) -> BoxFuture<'static, Result<RelayConnection, ConnectError>> {
        let transport = self.clone();
        Box::pin(async move {
            let relay = request.relay();
            // One resolution, every address checked, the socket opened to a
            // checked one; the handshake runs over that socket.
            let stream = transport
                .address
                .connect(relay, request.timeout())
                .await
                .map_err(|error| match error {
                    DialError::Refused(error) => ConnectError::AddressRefused(error.to_string()),
                    error => ConnectError::Dial(error),
                })?;
            let config = WebSocketConfig::default()
                .max_message_size(Some(request.max_message_size()))
                .max_frame_size(Some(request.max_frame_size()));
            let (ws, _) = tokio_tungstenite::client_async_tls_with_config(
                relay.as_str(),
                stream,
                Some(config),
                Some(Connector::Rustls(transport.tls.clone())),
            )
            .await
            .map_err(|error| ConnectError::Handshake(error.to_string()))?;
            let (sink, stream) = WsLink::new(ws, request.ping_interval()).split();
            Ok(RelayConnection::new(sink, stream))
        })
    }

    fn relay_limits(
        &self,
        relay: RelayUrl,
        timeout: Duration,
    ) -> BoxFuture<'static, Option<RelayLimits>> {
        let transport = self.clone();
        Box::pin(async move {
            match crate::nip11::fetch_limits(&relay, &transport.address, transport.tls, timeout)
                .await
            {
                Ok(limits) => Some(limits),
                Err(error) => {
                    debug!(%relay, %error, "no NIP-11 limits");
                    None
                }
            }
        })
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// An open WebSocket as the manager sees a connection: text frames both
/// ways, pongs as [`Incoming::Alive`], pings sent on a timer while the
/// manager reads.
struct WsLink {
    ws: Ws,
    ping: tokio::time::Interval,
    /// A ping went out and no pong came back yet.
    awaiting_pong: bool,
    /// A ping is due and not handed to the socket yet.
    ping_due: bool,
    /// A ping was handed to the socket and not flushed yet.
    flush_due: bool,
    /// The connection ended: nothing more is read.
    ended: bool,
}

impl WsLink {
    fn new(ws: Ws, period: Duration) -> Self {
        WsLink {
            ws,
            ping: tokio::time::interval_at(tokio::time::Instant::now() + period, period),
            awaiting_pong: false,
            ping_due: false,
            flush_due: false,
            ended: false,
        }
    }

    /// Ends the connection with `reason`.
    fn end(&mut self, reason: String) -> Poll<Option<Incoming>> {
        self.ended = true;
        Poll::Ready(Some(Incoming::Closed(reason)))
    }

    /// Sends the ping that is due, as far as the socket takes it now.
    fn poll_ping(&mut self, cx: &mut Context<'_>) -> Result<(), WsError> {
        if self.ping_due {
            if let Poll::Ready(ready) = Pin::new(&mut self.ws).poll_ready(cx) {
                ready?;
                Pin::new(&mut self.ws).start_send(Message::Ping(Vec::new().into()))?;
                self.ping_due = false;
                self.flush_due = true;
            }
        }
        if self.flush_due {
            if let Poll::Ready(flushed) = Pin::new(&mut self.ws).poll_flush(cx) {
                flushed?;
                self.flush_due = false;
            }
        }
        Ok(())
    }
}

impl Stream for WsLink {
    type Item = Incoming;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Incoming>> {
        let link = self.get_mut();
        if link.ended {
            return Poll::Ready(None);
        }
        if link.ping.poll_tick(cx).is_ready() {
            if link.awaiting_pong {
                return link.end("no pong within the ping interval".into());
            }
            link.awaiting_pong = true;
            link.ping_due = true;
        }
        if let Err(error) = link.poll_ping(cx) {
            return link.end(error.to_string());
        }
        loop {
            let Poll::Ready(frame) = Pin::new(&mut link.ws).poll_next(cx) else {
                return Poll::Pending;
            };
            return match frame {
                Some(Ok(Message::Text(text))) => Poll::Ready(Some(Incoming::Text(text.into()))),
                Some(Ok(Message::Pong(_))) => {
                    link.awaiting_pong = false;
                    Poll::Ready(Some(Incoming::Alive))
                }
                Some(Ok(Message::Close(frame))) => link.end(format!("closed by relay: {frame:?}")),
                // Binary frames mean nothing in NIP-01; pings are answered
                // by tungstenite.
                Some(Ok(_)) => continue,
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, .. }))) => {
                    // WebSocket cannot skip it: the connection is lost.
                    link.ended = true;
                    Poll::Ready(Some(Incoming::TooLarge(size)))
                }
                Some(Err(error)) => link.end(error.to_string()),
                None => {
                    link.ended = true;
                    Poll::Ready(None)
                }
            };
        }
    }
}

fn send_failed(error: WsError) -> SendError {
    SendError::Failed(error.to_string())
}

impl Sink<String> for WsLink {
    type Error = SendError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_ready(cx)
            .map_err(send_failed)
    }

    fn start_send(self: Pin<&mut Self>, text: String) -> Result<(), SendError> {
        Pin::new(&mut self.get_mut().ws)
            .start_send(Message::Text(text.into()))
            .map_err(send_failed)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_flush(cx)
            .map_err(send_failed)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_close(cx)
            .map_err(send_failed)
    }
}
