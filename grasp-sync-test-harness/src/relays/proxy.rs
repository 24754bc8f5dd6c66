//! The per-connection WebSocket proxy between a test client and the relay.
//!
//! The client's WebSocket ends here; the relay gets the other end of an in-memory
//! `tokio::io::duplex` pipe through `LocalRelay::take_connection` (no second socket). Frames
//! are forwarded both ways; only the first two JSON array elements (message type and
//! subscription id) are looked at, so large event streams stay cheap. A [`FaultPlan`]
//! (decided in [`super::inject`]) injects faults, relay -> client mainly.

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt as _, SinkExt as _, StreamExt as _};
use grasp_sync_test_support::relay::NegVerb;
use nostr::prelude::SubscriptionId;
use tokio::io::{AsyncReadExt as _, DuplexStream};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::config::{r44, Nip77Refusal, TestRelayConfig};
use super::faults::{FaultPlan, FaultStats};
use super::inject::{ClientVerdict, ConnFaults, Out};

/// In-memory pipe capacity between the proxy and the relay session.
const DUPLEX_CAPACITY: usize = 256 * 1024;
/// Relay messages forwarded before one flush towards the client.
const BATCH: usize = 256;

/// State shared by the [`super::TestRelay`] handle and every connection.
pub(crate) struct Shared {
    /// [`TestRelayConfig::nip77`].
    pub(crate) nip77: Nip77Refusal,
    /// [`TestRelayConfig::hostile`].
    pub(crate) hostile: Vec<String>,
    /// [`TestRelayConfig::nip11`].
    pub(crate) nip11: Option<String>,
    /// [`TestRelayConfig::nip11_stall`].
    pub(crate) nip11_stall: bool,
    /// [`TestRelayConfig::max_frame_bytes`].
    pub(crate) max_frame_bytes: Option<usize>,
    /// Counters.
    pub(crate) stats: Stats,
    /// [`TestRelayConfig::faults`].
    pub(crate) faults: Option<FaultPlan>,
    /// Faults are injected (with a plan) while this is set.
    pub(crate) faults_on: AtomicBool,
    /// What the faults did.
    pub(crate) fault_stats: FaultStats,
}

impl Shared {
    /// The proxy's and the HTTP side's part of `config`, with zeroed counters.
    pub(crate) fn new(config: &TestRelayConfig) -> Self {
        Shared {
            nip77: config.nip77,
            hostile: config.hostile.clone(),
            nip11: config.nip11.clone(),
            nip11_stall: config.nip11_stall,
            max_frame_bytes: config.max_frame_bytes,
            stats: Stats::default(),
            faults: config.faults.clone(),
            faults_on: AtomicBool::new(config.faults.is_some()),
            fault_stats: FaultStats::default(),
        }
    }

    /// Whether faults are injected now (a plan, and not stopped).
    pub(crate) fn faults_active(&self) -> bool {
        self.faults.is_some() && self.faults_on.load(Ordering::SeqCst)
    }
}

/// Counters, kept across restarts.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) max_concurrent_reqs: AtomicUsize,
    pub(crate) reqs: AtomicUsize,
    pub(crate) neg_opens: AtomicUsize,
    pub(crate) events_sent: AtomicUsize,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) connections: AtomicUsize,
    pub(crate) connections_open: AtomicUsize,
    pub(crate) nip11_requests: AtomicUsize,
    /// Client frames over [`Shared::max_frame_bytes`] (each one dropped its connection).
    pub(crate) frames_too_large: AtomicUsize,
    /// Largest client text/binary frame payload seen, in bytes.
    pub(crate) largest_client_frame: AtomicUsize,
}

impl Stats {
    pub(crate) fn reset(&self) {
        for counter in [
            &self.max_concurrent_reqs,
            &self.reqs,
            &self.neg_opens,
            &self.events_sent,
            &self.connections,
            &self.nip11_requests,
            &self.frames_too_large,
            &self.largest_client_frame,
        ] {
            counter.store(0, Ordering::SeqCst);
        }
        self.bytes_sent.store(0, Ordering::SeqCst);
    }
}

pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20))
}

/// Decrements `connections_open` however the connection task ends (also when aborted).
struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.stats.connections_open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serve one upgraded WebSocket connection (101 already written; `rest` = bytes read past
/// the request head).
pub(crate) async fn run(
    stream: TcpStream,
    rest: Vec<u8>,
    addr: SocketAddr,
    relay: r44::LocalRelay,
    shared: Arc<Shared>,
) {
    shared.stats.connections.fetch_add(1, Ordering::SeqCst);
    shared.stats.connections_open.fetch_add(1, Ordering::SeqCst);
    let _guard = OpenGuard(shared.clone());

    let client =
        WebSocketStream::from_partially_read(stream, rest, Role::Server, Some(ws_config())).await;
    let (relay_io, proxy_io) = tokio::io::duplex(DUPLEX_CAPACITY);
    let upstream =
        WebSocketStream::from_raw_socket(proxy_io, Role::Client, Some(ws_config())).await;
    let relay_side = async move {
        // Ends when the pump drops its end of the pipe (EOF), or on a relay-side error
        // (e.g. a client message nostr 0.44 cannot parse kills the session, as in the real
        // LocalRelay); the pump then forwards what is buffered and closes the client.
        let _ = relay.take_connection(relay_io, addr).await;
    };
    tokio::join!(relay_side, pump(client, upstream, &shared));
}

enum Verdict {
    Forward,
    /// Answer these frames, forward nothing.
    Reply(Vec<String>),
    Swallow,
}

/// How the relay → client side of the pump goes on.
enum Flow {
    Continue,
    /// The client is gone (a send failed, or the relay closed).
    End,
    /// Drop the TCP connection now.
    Drop,
    /// Stall the connection now.
    Stall,
}

async fn pump(
    mut client: WebSocketStream<TcpStream>,
    mut upstream: WebSocketStream<DuplexStream>,
    shared: &Shared,
) {
    // Sub ids of the REQs open on this connection.
    let mut open: HashSet<String> = HashSet::new();
    let mut faults = ConnFaults::new(shared.faults.as_ref(), &shared.fault_stats);
    loop {
        tokio::select! {
            msg = client.next() => {
                let Some(Ok(msg)) = msg else { break };
                if let Message::Text(_) | Message::Binary(_) = &msg {
                    if client_frame_too_large(msg.len(), shared) {
                        // strfry (uWebSockets `maxPayloadLength`): no close frame, no NOTICE,
                        // the frame is not processed; the TCP connection just ends (1006).
                        drop_connection(client);
                        return;
                    }
                }
                match msg {
                    Message::Text(text) => {
                        match from_client(text.as_str(), &mut open, &mut faults, shared) {
                            Verdict::Forward => {
                                if upstream.send(Message::Text(text)).await.is_err() {
                                    break;
                                }
                            }
                            Verdict::Reply(replies) => {
                                for reply in replies {
                                    if to_client(&mut client, reply.into(), false, shared).await.is_err() {
                                        break;
                                    }
                                }
                                if client.flush().await.is_err() {
                                    break;
                                }
                            }
                            Verdict::Swallow => {}
                        }
                    }
                    Message::Binary(bytes) => {
                        if upstream.send(Message::Binary(bytes)).await.is_err() {
                            break;
                        }
                    }
                    Message::Close(frame) => {
                        // flush tungstenite's queued close reply, tell the relay, done
                        let _ = tokio::time::timeout(Duration::from_secs(1), client.flush()).await;
                        let _ = upstream.send(Message::Close(frame)).await;
                        break;
                    }
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                }
            }
            msg = upstream.next() => {
                let Some(Ok(first)) = msg else { break };
                let mut next = Some(first);
                let mut forwarded = 0;
                while let Some(msg) = next.take() {
                    let flow = match msg {
                        Message::Text(text) => {
                            from_relay(&mut client, &mut upstream, text, &mut open, &mut faults, shared)
                                .await
                        }
                        Message::Binary(bytes) => {
                            let len = bytes.len() as u64;
                            shared.stats.bytes_sent.fetch_add(len, Ordering::SeqCst);
                            ended(client.feed(Message::Binary(bytes)).await)
                        }
                        Message::Close(frame) => {
                            let _ = client.send(Message::Close(frame)).await;
                            return;
                        }
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Flow::Continue,
                    };
                    match flow {
                        Flow::Continue => {}
                        Flow::End => return,
                        Flow::Drop => return drop_connection(client),
                        Flow::Stall => return stall(client, upstream).await,
                    }
                    forwarded += 1;
                    if forwarded < BATCH {
                        if let Some(Some(Ok(msg))) = upstream.next().now_or_never() {
                            next = Some(msg);
                        }
                    }
                }
                // End of a burst: a frame held back for reordering goes out now.
                if let Some(Out::Text(text, is_event)) = faults.release() {
                    if to_client(&mut client, text.into(), is_event, shared).await.is_err() {
                        break;
                    }
                }
                if client.flush().await.is_err() {
                    break;
                }
            }
        }
    }
    // Dropping both streams: the client sees the TCP connection end, the relay sees EOF.
}

fn ended(sent: Result<(), WsError>) -> Flow {
    match sent {
        Ok(()) => Flow::Continue,
        Err(_) => Flow::End,
    }
}

/// Record a client frame of `len` payload bytes in the stats; `true` (and counted in
/// `frames_too_large`) if it is over [`Shared::max_frame_bytes`].
fn client_frame_too_large(len: usize, shared: &Shared) -> bool {
    let stats = &shared.stats;
    stats.largest_client_frame.fetch_max(len, Ordering::SeqCst);
    let too_large = shared.max_frame_bytes.is_some_and(|max| len > max);
    if too_large {
        stats.frames_too_large.fetch_add(1, Ordering::SeqCst);
    }
    too_large
}

/// End the client's TCP connection at once: no close frame, nothing flushed. Dropping the
/// socket closes it (FIN; RST if unread client data is still buffered), so the client sees
/// the connection end without a closing handshake, like strfry's 1006.
fn drop_connection(client: WebSocketStream<TcpStream>) {
    drop(client);
}

/// A half-open connection: the relay session ends, nothing more reaches the client (not
/// even a pong: the client's bytes are read raw and discarded, below the WebSocket layer),
/// and the socket stays open until the client closes it (or the relay stops).
async fn stall(mut client: WebSocketStream<TcpStream>, upstream: WebSocketStream<DuplexStream>) {
    drop(upstream);
    let socket = client.get_mut();
    let mut sink = [0u8; 4096];
    loop {
        match socket.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Client -> relay: count, apply the fault plan's NIP-77 faults and the NIP-77 mode.
fn from_client(
    text: &str,
    open: &mut HashSet<String>,
    faults: &mut ConnFaults,
    shared: &Shared,
) -> Verdict {
    let Some((kind, sub)) = head(text) else {
        return Verdict::Forward;
    };
    match faults.on_client(
        &kind,
        sub.as_deref(),
        shared.faults_active(),
        &shared.fault_stats,
    ) {
        ClientVerdict::Pass => {}
        ClientVerdict::Reply(reply) => {
            if kind == "NEG-OPEN" {
                shared.stats.neg_opens.fetch_add(1, Ordering::SeqCst);
            }
            return Verdict::Reply(vec![reply]);
        }
        ClientVerdict::Swallow => return Verdict::Swallow,
    }
    let stats = &shared.stats;
    match kind.as_ref() {
        "REQ" => {
            stats.reqs.fetch_add(1, Ordering::SeqCst);
            if let Some(sub) = sub {
                open.insert(sub.into_owned());
                stats
                    .max_concurrent_reqs
                    .fetch_max(open.len(), Ordering::SeqCst);
            }
            Verdict::Forward
        }
        "CLOSE" => {
            if let Some(sub) = sub {
                open.remove(sub.as_ref());
            }
            Verdict::Forward
        }
        verb => match NegVerb::parse(verb) {
            Some(verb) => {
                if verb == NegVerb::Open {
                    stats.neg_opens.fetch_add(1, Ordering::SeqCst);
                }
                let id = SubscriptionId::new(sub.as_deref().unwrap_or_default());
                match shared.nip77.answer(verb, &id) {
                    None => Verdict::Forward,
                    Some(replies) if replies.is_empty() => Verdict::Swallow,
                    Some(replies) => {
                        Verdict::Reply(replies.iter().map(|reply| reply.as_json()).collect())
                    }
                }
            }
            None => Verdict::Forward,
        },
    }
}

/// Relay -> client: count, inject hostile events before EOSE, apply the fault plan, forward
/// (fed, not flushed, except before a pause).
async fn from_relay(
    client: &mut WebSocketStream<TcpStream>,
    upstream: &mut WebSocketStream<DuplexStream>,
    text: Utf8Bytes,
    open: &mut HashSet<String>,
    faults: &mut ConnFaults,
    shared: &Shared,
) -> Flow {
    let Some((kind, sub)) = head(text.as_str()) else {
        return ended(to_client(client, text, false, shared).await);
    };
    let (kind, sub) = (kind.into_owned(), sub.map(Cow::into_owned));
    if let Some(sub) = &sub {
        if matches!(kind.as_str(), "EVENT" | "EOSE" | "CLOSED") && faults.is_killed(sub) {
            // Closed by an injected CLOSED: the relay had not seen our CLOSE yet.
            return Flow::Continue;
        }
    }
    match kind.as_str() {
        "EOSE" if !shared.hostile.is_empty() => {
            let sub =
                serde_json::to_string(sub.as_deref().unwrap_or_default()).expect("string to JSON");
            for event in &shared.hostile {
                let injected = format!(r#"["EVENT",{sub},{event}]"#);
                if to_client(client, injected.into(), true, shared)
                    .await
                    .is_err()
                {
                    return Flow::End;
                }
            }
        }
        "CLOSED" => {
            if let Some(sub) = &sub {
                open.remove(sub);
            }
        }
        _ => {}
    }
    let text = text.as_str().to_owned();
    let active = shared.faults_active();
    let stats = &shared.fault_stats;
    for out in faults.on_relay(text, &kind, sub.as_deref(), open, active, stats) {
        let sent = match out {
            Out::Text(text, is_event) => to_client(client, text.into(), is_event, shared).await,
            Out::Binary(bytes) => {
                let len = bytes.len() as u64;
                shared.stats.bytes_sent.fetch_add(len, Ordering::SeqCst);
                client.feed(Message::Binary(bytes.into())).await
            }
            Out::Upstream(text) => {
                // The relay gone is seen on its side of the select.
                let _ = upstream.send(Message::text(text)).await;
                Ok(())
            }
            Out::Pause(pause) => {
                let flushed = client.flush().await;
                tokio::time::sleep(pause).await;
                flushed
            }
            Out::Drop => return Flow::Drop,
            Out::Stall => return Flow::Stall,
        };
        if sent.is_err() {
            return Flow::End;
        }
    }
    Flow::Continue
}

async fn to_client(
    client: &mut WebSocketStream<TcpStream>,
    text: Utf8Bytes,
    is_event: bool,
    shared: &Shared,
) -> Result<(), WsError> {
    shared
        .stats
        .bytes_sent
        .fetch_add(text.len() as u64, Ordering::SeqCst);
    if is_event {
        shared.stats.events_sent.fetch_add(1, Ordering::SeqCst);
    }
    client.feed(Message::Text(text)).await
}

/// Message type and, when the second element is a string, the subscription id.
/// `None` if `text` does not start like a JSON array of a string.
fn head(text: &str) -> Option<(Cow<'_, str>, Option<Cow<'_, str>>)> {
    let bytes = text.as_bytes();
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'[') {
        return None;
    }
    i = skip_ws(bytes, i + 1);
    let (kind, end) = json_string(text, i)?;
    i = skip_ws(bytes, end);
    if bytes.get(i) != Some(&b',') {
        return Some((kind, None));
    }
    i = skip_ws(bytes, i + 1);
    let sub = json_string(text, i).map(|(sub, _)| sub);
    Some((kind, sub))
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The JSON string starting at `start` (a `"`) and the index just past it.
fn json_string(text: &str, start: usize) -> Option<(Cow<'_, str>, usize)> {
    let bytes = text.as_bytes();
    if bytes.get(start) != Some(&b'"') {
        return None;
    }
    let mut i = start + 1;
    let mut escaped = false;
    loop {
        match bytes.get(i)? {
            b'\\' => {
                escaped = true;
                i += 2;
            }
            b'"' => break,
            _ => i += 1,
        }
    }
    let value = if escaped {
        Cow::Owned(serde_json::from_str::<String>(text.get(start..=i)?).ok()?)
    } else {
        Cow::Borrowed(text.get(start + 1..i)?)
    };
    Some((value, i + 1))
}
