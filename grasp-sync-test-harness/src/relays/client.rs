//! [`Client`]: a tiny raw NIP-01 test client over tokio-tungstenite (nostr 0.45 types).

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use nostr::prelude::*;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::proxy::ws_config;

/// Timeout of every single wait of the client (connect, send, each received message).
pub const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// Why [`Client::try_recv`] returned no message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecvError {
    /// Nothing arrived in time.
    Timeout,
    /// The connection ended (close frame, EOF, reset); the text describes how.
    Closed(String),
    /// A text frame nostr 0.45 cannot parse as a relay message.
    BadMessage {
        /// The frame.
        text: String,
        /// The parse error.
        error: String,
    },
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Timeout => write!(f, "timed out"),
            RecvError::Closed(how) => write!(f, "connection closed: {how}"),
            RecvError::BadMessage { text, error } => write!(f, "bad relay message {text}: {error}"),
        }
    }
}

/// Raw NIP-01 client. Every wait is bounded by [`RECV_TIMEOUT`] (or the given timeout);
/// the panicking methods are for tests.
///
/// Subscriptions that [`Client::req_all`] finished (or [`Client::close_sub`] closed) are
/// remembered: late `EVENT`/`EOSE`/`CLOSED` messages for them (e.g. the `CLOSED ""` that
/// LocalRelay sends after EOSE of a fully served ids filter) are dropped by the parsed
/// receive methods. Messages that arrive while a helper waits for something else are queued
/// and returned first by [`Client::recv`] / [`Client::try_recv`].
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pending: VecDeque<RelayMessage<'static>>,
    finished: HashSet<SubscriptionId>,
    next_sub: u64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// Connect to `url` (panics on failure or after [`RECV_TIMEOUT`]).
pub async fn connect_client(url: &RelayUrl) -> Client {
    match try_connect_client(url).await {
        Ok(client) => client,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

/// Connect to `url`; `Err` describes the failure (refused, handshake error, timeout).
pub async fn try_connect_client(url: &RelayUrl) -> Result<Client, String> {
    let connect =
        tokio_tungstenite::connect_async_with_config(url.as_str(), Some(ws_config()), true);
    match tokio::time::timeout(RECV_TIMEOUT, connect).await {
        Err(_) => Err("connect timed out".to_owned()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok((ws, _response))) => Ok(Client {
            ws,
            pending: VecDeque::new(),
            finished: HashSet::new(),
            next_sub: 0,
        }),
    }
}

impl Client {
    /// Send a raw text frame (panics on failure).
    pub async fn send(&mut self, json: impl Into<String>) {
        if let Err(e) = self.try_send(json).await {
            panic!("send: {e}");
        }
    }

    /// Send a raw text frame.
    pub async fn try_send(&mut self, json: impl Into<String>) -> Result<(), String> {
        match tokio::time::timeout(RECV_TIMEOUT, self.ws.send(Message::text(json.into()))).await {
            Err(_) => Err("send timed out".to_owned()),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Send a nostr 0.45 client message.
    pub async fn send_msg(&mut self, msg: &ClientMessage<'_>) {
        self.send(msg.as_json()).await;
    }

    /// Next relay message (queued ones first); panics on timeout ([`RECV_TIMEOUT`]), close
    /// or an unparsable frame.
    pub async fn recv(&mut self) -> RelayMessage<'static> {
        match self.try_recv(RECV_TIMEOUT).await {
            Ok(msg) => msg,
            Err(e) => panic!("recv: {e}"),
        }
    }

    /// Next relay message (queued ones first) within `timeout`.
    pub async fn try_recv(
        &mut self,
        timeout: Duration,
    ) -> Result<RelayMessage<'static>, RecvError> {
        if let Some(msg) = self.pending.pop_front() {
            return Ok(msg);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let msg = self.read_msg(left).await?;
            if !self.is_stale(&msg) {
                return Ok(msg);
            }
        }
    }

    /// Next raw text frame within `timeout` (skips ping/pong; bypasses the queue and the
    /// finished-subscription filter). For frames nostr cannot parse, e.g. hostile junk.
    pub async fn recv_text(&mut self, timeout: Duration) -> Result<String, RecvError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.ws.next()).await {
                Err(_) => return Err(RecvError::Timeout),
                Ok(None) => return Err(RecvError::Closed("stream ended".to_owned())),
                Ok(Some(Err(e))) => return Err(RecvError::Closed(e.to_string())),
                Ok(Some(Ok(Message::Text(text)))) => return Ok(text.as_str().to_owned()),
                Ok(Some(Ok(Message::Close(frame)))) => {
                    return Err(RecvError::Closed(format!("close frame {frame:?}")))
                }
                Ok(Some(Ok(Message::Binary(bytes)))) => {
                    return Ok(String::from_utf8_lossy(&bytes).into_owned())
                }
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// Send a WebSocket ping and wait up to `timeout` for the pong. Text frames arriving
    /// meanwhile are parsed and queued (unparsable ones are an error).
    pub async fn ping(&mut self, timeout: Duration) -> Result<(), RecvError> {
        let sent = tokio::time::timeout(timeout, self.ws.send(Message::Ping(Vec::new().into())));
        match sent.await {
            Err(_) => return Err(RecvError::Timeout),
            Ok(Err(e)) => return Err(RecvError::Closed(e.to_string())),
            Ok(Ok(())) => {}
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.ws.next()).await {
                Err(_) => return Err(RecvError::Timeout),
                Ok(None) => return Err(RecvError::Closed("stream ended".to_owned())),
                Ok(Some(Err(e))) => return Err(RecvError::Closed(e.to_string())),
                Ok(Some(Ok(Message::Pong(_)))) => return Ok(()),
                Ok(Some(Ok(Message::Text(text)))) => {
                    let msg = RelayMessage::from_json(text.as_bytes()).map_err(|e| {
                        RecvError::BadMessage {
                            text: text.as_str().to_owned(),
                            error: e.to_string(),
                        }
                    })?;
                    if !self.is_stale(&msg) {
                        self.pending.push_back(msg);
                    }
                }
                Ok(Some(Ok(Message::Close(frame)))) => {
                    return Err(RecvError::Closed(format!("close frame {frame:?}")))
                }
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// Panics if any message arrives (or is queued) within `duration`.
    pub async fn assert_silent(&mut self, duration: Duration) {
        match self.try_recv(duration).await {
            Err(RecvError::Timeout) => {}
            other => panic!("expected silence for {duration:?}, got {other:?}"),
        }
    }

    /// Wait until the connection ends (close frame, EOF or reset), discarding messages;
    /// panics if it is still open after [`RECV_TIMEOUT`]. Returns how it ended.
    pub async fn expect_closed(&mut self) -> String {
        let deadline = tokio::time::Instant::now() + RECV_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.recv_text(left).await {
                Ok(_) => continue,
                Err(RecvError::Closed(how)) => return how,
                Err(e) => panic!("expected the connection to close: {e}"),
            }
        }
    }

    /// REQ with one filter under a fresh sub id; collect events until EOSE, then CLOSE.
    /// Panics if the relay answers CLOSED first.
    pub async fn req_all(&mut self, filter: Filter) -> Vec<Event> {
        self.req_all_filters(vec![filter]).await
    }

    /// [`Client::req_all`] with several filters.
    pub async fn req_all_filters(&mut self, filters: Vec<Filter>) -> Vec<Event> {
        match self.try_req_all(filters).await {
            Ok(events) => events,
            Err(e) => panic!("req_all: {e}"),
        }
    }

    /// [`Client::req_all_filters`]; `Err(message)` if the relay answers `CLOSED` before EOSE.
    pub async fn try_req_all(&mut self, filters: Vec<Filter>) -> Result<Vec<Event>, String> {
        self.next_sub += 1;
        let sub = SubscriptionId::new(format!("req-all-{}", self.next_sub));
        let result = self.stored_until_eose(&sub, filters).await;
        if result.is_ok() {
            self.send_msg(&ClientMessage::close(sub.clone())).await;
        }
        self.finished.insert(sub);
        result
    }

    /// REQ under `sub`; return the stored events (until EOSE). The subscription stays open:
    /// live events follow ([`Client::next_event`]). Panics on CLOSED before EOSE.
    pub async fn subscribe(&mut self, sub: &str, filters: Vec<Filter>) -> Vec<Event> {
        let sub = SubscriptionId::new(sub);
        self.finished.remove(&sub);
        match self.stored_until_eose(&sub, filters).await {
            Ok(events) => events,
            Err(e) => panic!("subscribe {sub}: {e}"),
        }
    }

    /// Send CLOSE for `sub` and ignore anything that still arrives for it.
    pub async fn close_sub(&mut self, sub: &str) {
        let sub = SubscriptionId::new(sub);
        self.send_msg(&ClientMessage::close(sub.clone())).await;
        self.pending.retain(|m| sub_of(m) != Some(&sub));
        self.finished.insert(sub);
    }

    /// Next EVENT on `sub` (queued first). Other messages are queued; panics on `CLOSED` for
    /// `sub`, a close, or after [`RECV_TIMEOUT`].
    pub async fn next_event(&mut self, sub: &str) -> Event {
        let sub = SubscriptionId::new(sub);
        if let Some(pos) = self.pending.iter().position(|m| sub_of(m) == Some(&sub)) {
            if let Some(msg) = self.pending.remove(pos) {
                return expect_event(msg, &sub);
            }
        }
        loop {
            let msg = match self.read_msg(RECV_TIMEOUT).await {
                Ok(msg) => msg,
                Err(e) => panic!("next_event on {sub}: {e}"),
            };
            if sub_of(&msg) == Some(&sub) {
                return expect_event(msg, &sub);
            }
            if !self.is_stale(&msg) {
                self.pending.push_back(msg);
            }
        }
    }

    /// Send EVENT and wait for its OK: `(accepted, message)`.
    pub async fn publish(&mut self, event: &Event) -> (bool, String) {
        self.send_msg(&ClientMessage::event(event.clone())).await;
        loop {
            let msg = match self.read_msg(RECV_TIMEOUT).await {
                Ok(msg) => msg,
                Err(e) => panic!("publish {}: waiting for OK: {e}", event.id),
            };
            match msg {
                RelayMessage::Ok {
                    event_id,
                    status,
                    message,
                } if event_id == event.id => return (status, message.into_owned()),
                other if !self.is_stale(&other) => self.pending.push_back(other),
                _ => {}
            }
        }
    }

    /// Publishes `events` with up to `window` EVENTs waiting for their `OK`, and waits
    /// for every `OK` (each wait bounded by [`RECV_TIMEOUT`]). Returns how many the relay
    /// accepted; panics listing the first refusals (a `duplicate:` answer counts as
    /// accepted: the relay holds the event).
    pub async fn publish_all(&mut self, events: &[Event], window: usize) -> usize {
        let window = window.max(1);
        let mut waiting: HashSet<EventId> = HashSet::new();
        let mut sent = 0;
        let mut accepted = 0;
        let mut refused: Vec<String> = Vec::new();
        while sent < events.len() || !waiting.is_empty() {
            while sent < events.len() && waiting.len() < window {
                let event = &events[sent];
                self.send_msg(&ClientMessage::event(event.clone())).await;
                waiting.insert(event.id);
                sent += 1;
            }
            let msg = match self.read_msg(RECV_TIMEOUT).await {
                Ok(msg) => msg,
                Err(e) => panic!(
                    "publish_all: waiting for {} OKs ({sent} of {} sent): {e}",
                    waiting.len(),
                    events.len()
                ),
            };
            match msg {
                RelayMessage::Ok {
                    event_id,
                    status,
                    message,
                } if waiting.remove(&event_id) => {
                    if status || message.starts_with("duplicate") {
                        accepted += 1;
                    } else if refused.len() < 5 {
                        refused.push(format!("{event_id}: {message}"));
                    }
                }
                other if !self.is_stale(&other) => self.pending.push_back(other),
                _ => {}
            }
        }
        assert!(
            refused.is_empty(),
            "publish_all: {} of {} refused, first: {refused:?}",
            events.len() - accepted,
            events.len()
        );
        accepted
    }

    /// Send a close frame and wait (bounded) for the relay's answer.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(RECV_TIMEOUT, self.ws.close(None)).await;
        let _ = tokio::time::timeout(RECV_TIMEOUT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }

    async fn stored_until_eose(
        &mut self,
        sub: &SubscriptionId,
        filters: Vec<Filter>,
    ) -> Result<Vec<Event>, String> {
        self.send_msg(&ClientMessage::req(sub.clone(), filters))
            .await;
        let mut events = Vec::new();
        loop {
            let msg = self
                .read_msg(RECV_TIMEOUT)
                .await
                .map_err(|e| format!("waiting for EOSE on {sub}: {e}"))?;
            match msg {
                RelayMessage::Event {
                    subscription_id,
                    event,
                } if *subscription_id == *sub => events.push(event.into_owned()),
                RelayMessage::EndOfStoredEvents(id) if *id == *sub => return Ok(events),
                RelayMessage::Closed {
                    subscription_id,
                    message,
                } if *subscription_id == *sub => return Err(message.into_owned()),
                other if !self.is_stale(&other) => self.pending.push_back(other),
                _ => {}
            }
        }
    }

    /// Next parsed message straight from the socket (no queue, no filter).
    async fn read_msg(&mut self, timeout: Duration) -> Result<RelayMessage<'static>, RecvError> {
        let text = self.recv_text(timeout).await?;
        RelayMessage::from_json(text.as_bytes()).map_err(|e| RecvError::BadMessage {
            text,
            error: e.to_string(),
        })
    }

    fn is_stale(&self, msg: &RelayMessage<'_>) -> bool {
        sub_of(msg).is_some_and(|sub| self.finished.contains(sub))
    }
}

/// Sub id of EVENT / EOSE / CLOSED.
fn sub_of<'a>(msg: &'a RelayMessage<'_>) -> Option<&'a SubscriptionId> {
    match msg {
        RelayMessage::Event {
            subscription_id, ..
        }
        | RelayMessage::Closed {
            subscription_id, ..
        } => Some(subscription_id),
        RelayMessage::EndOfStoredEvents(subscription_id) => Some(subscription_id),
        _ => None,
    }
}

fn expect_event(msg: RelayMessage<'static>, sub: &SubscriptionId) -> Event {
    match msg {
        RelayMessage::Event { event, .. } => event.into_owned(),
        other => panic!("expected an EVENT on {sub}, got {other:?}"),
    }
}
