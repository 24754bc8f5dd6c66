//! The host's own relay: a nostr-relay-builder 0.44 `LocalRelay` behind the host's
//! WebSocket front.
//!
//! nostr-relay-builder's write policy can only accept or refuse (`OK false
//! "blocked: …"`), while a GRASP server answers an event it holds with `OK true
//! "purgatory: …"`. So the front reads every client frame: an `EVENT` of a held kind
//! (30617, 30618, 1618, 1619) is verified and handed to the host's purgatory, which
//! answers for it unless its git data is already here; a frame that is not a client
//! message is answered with a `NOTICE`; every other frame goes to the relay over an
//! in-memory WebSocket, and the relay's answers come back unchanged.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::{SinkExt as _, StreamExt as _};
use grasp_purgatory::Origin;
use grasp_sync_relay_builder::r44;
use nostr::prelude::{ClientMessage, Event, RelayMessage};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, warn};

use crate::host_purgatory::{Admission, AdmitError, OwnPurgatory, HELD_KINDS};

/// The answer to an event the purgatory holds.
pub const PURGATORY_MESSAGE: &str = "purgatory: won't be served until git data arrives";
/// The in-memory pipe between the front and the relay, in bytes.
const PIPE_BYTES: usize = 256 * 1024;
/// The largest WebSocket message or frame taken from a client or the relay.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// What the front does with one client frame.
#[derive(Debug)]
enum Decision {
    /// Hand it to the relay.
    Forward,
    /// Answer the client with this, forward nothing.
    Answer(String),
}

/// Where a client's text frame goes, before the purgatory decides.
#[derive(Debug)]
enum Route {
    /// Hand it to the relay.
    Forward,
    /// A held kind's event: the purgatory decides.
    Purgatory(Event),
    /// Answer the client with this, forward nothing.
    Answer(String),
}

/// The host's relay: the front's listener, the relay behind it and the purgatory.
#[derive(Debug, Clone)]
pub struct Front {
    relay: r44::LocalRelay,
    purgatory: Arc<OwnPurgatory>,
}

impl Front {
    /// A front for `relay`, holding events in `purgatory`.
    pub fn new(relay: r44::LocalRelay, purgatory: Arc<OwnPurgatory>) -> Self {
        Front { relay, purgatory }
    }

    /// Serves connections from `listener` until `stop` turns `true`.
    pub async fn serve(self, listener: TcpListener, stop: watch::Receiver<bool>) {
        let mut stopped = stop.clone();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, addr)) => {
                        tokio::spawn(self.clone().connection(stream, addr, stop.clone()));
                    }
                    Err(error) => warn!(%error, "accepting a connection failed"),
                },
                _ = stopped.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// One client connection, until either side closes or the front stops.
    async fn connection(
        self,
        stream: TcpStream,
        addr: SocketAddr,
        mut stop: watch::Receiver<bool>,
    ) {
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_MESSAGE_BYTES));
        let client = match tokio_tungstenite::accept_async_with_config(stream, Some(config)).await {
            Ok(client) => client,
            Err(error) => {
                debug!(%error, %addr, "not a WebSocket client");
                return;
            }
        };
        let (relay_io, front_io) = tokio::io::duplex(PIPE_BYTES);
        let upstream = WebSocketStream::from_raw_socket(front_io, Role::Client, Some(config)).await;
        let relay = self.relay.clone();
        let relay_side = async move {
            if let Err(error) = relay.take_connection(relay_io, addr).await {
                debug!(%error, %addr, "the relay ended the session");
            }
        };
        let pump = async move {
            tokio::select! {
                () = self.pump(client, upstream) => {}
                _ = stop.wait_for(|stop| *stop) => {}
            }
        };
        tokio::join!(relay_side, pump);
    }

    /// Moves frames between the client and the relay, answering held events itself.
    async fn pump(
        &self,
        client: WebSocketStream<TcpStream>,
        upstream: WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (mut to_client, mut from_client) = client.split();
        let (mut to_relay, mut from_relay) = upstream.split();
        loop {
            tokio::select! {
                frame = from_client.next() => {
                    let Some(Ok(frame)) = frame else { break };
                    let reply = match frame {
                        Message::Text(text) => match self.decide(text.as_str()).await {
                            Decision::Forward => to_relay.send(Message::Text(text)).await,
                            Decision::Answer(answer) => to_client.send(Message::text(answer)).await,
                        },
                        Message::Close(_) => break,
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Ok(()),
                        binary @ Message::Binary(_) => to_relay.send(binary).await,
                    };
                    if reply.is_err() {
                        break;
                    }
                }
                frame = from_relay.next() => {
                    let Some(Ok(frame)) = frame else { break };
                    if matches!(frame, Message::Text(_) | Message::Binary(_))
                        && to_client.send(frame).await.is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = to_relay.send(Message::Close(None)).await;
        let _ = to_client.send(Message::Close(None)).await;
    }

    /// What to do with the text frame `text`; the purgatory's decision is taken here.
    async fn decide(&self, text: &str) -> Decision {
        match classify(text) {
            Route::Forward => Decision::Forward,
            Route::Answer(answer) => Decision::Answer(answer),
            Route::Purgatory(event) => self.admit(event).await,
        }
    }

    /// Hands a held kind's verified event to the purgatory: held (answered here) or
    /// ready (the relay stores it as usual).
    async fn admit(&self, event: Event) -> Decision {
        let id = event.id;
        match self.purgatory.admit(event, Origin::Submitted).await {
            Ok(Admission::Held) => Decision::Answer(ok(id, true, PURGATORY_MESSAGE)),
            Ok(Admission::Ready) => Decision::Forward,
            Err(AdmitError::Full) => Decision::Answer(ok(id, false, "blocked: purgatory full")),
            Err(error) => Decision::Answer(ok(id, false, &format!("invalid: {error}"))),
        }
    }
}

/// The route of a client's text frame, before the purgatory decides: a held kind's
/// `EVENT` goes to the purgatory (a forged one is answered `invalid`), a frame that is
/// not a NIP-01 client message is answered with a `NOTICE` (the relay would end the
/// session), anything else goes to the relay.
fn classify(text: &str) -> Route {
    let message = match ClientMessage::from_json(text) {
        Ok(message) => message,
        Err(error) => {
            return Route::Answer(RelayMessage::notice(format!("error: {error}")).as_json())
        }
    };
    let ClientMessage::Event(event) = message else {
        return Route::Forward;
    };
    if !HELD_KINDS.contains(&event.kind.as_u16()) {
        return Route::Forward;
    }
    match event.verify() {
        Ok(()) => Route::Purgatory(event.into_owned()),
        Err(error) => Route::Answer(ok(event.id, false, &format!("invalid: {error}"))),
    }
}

/// `["OK", id, accepted, message]`.
fn ok(id: nostr::prelude::EventId, accepted: bool, message: &str) -> String {
    RelayMessage::ok(id, accepted, message).as_json()
}
