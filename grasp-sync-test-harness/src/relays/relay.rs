//! [`TestRelay`]: nostr-relay-builder 0.44 `LocalRelay` behind our own listener and proxy.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nostr::prelude::{Event, EventId, RelayUrl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use super::config::{r44, TestRelayConfig};
use super::faults::FaultCounts;
use super::proxy::{self, Shared};

struct Server {
    stop_tx: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A nostr-relay-builder 0.44.1 `LocalRelay` served on `127.0.0.1:<port>` by our own
/// listener, with a counting / NIP-77-refusing / hostile-injecting / fault-injecting proxy
/// on every connection.
///
/// Dropping it stops the listener and every connection (in the background; call
/// [`TestRelay::stop`] to wait for it).
pub struct TestRelay {
    port: u16,
    relay: r44::LocalRelay,
    db: Arc<r44::MemoryDatabase>,
    shared: Arc<Shared>,
    server: Option<Server>,
}

impl std::fmt::Debug for TestRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRelay")
            .field("port", &self.port)
            .field("running", &self.server.is_some())
            .finish_non_exhaustive()
    }
}

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Bound on every internal wait (handshake read, stop, rebind, database calls).
const WAIT: Duration = Duration::from_secs(10);

impl TestRelay {
    /// Start on a random free port of 127.0.0.1.
    pub async fn start(config: TestRelayConfig) -> TestRelay {
        // TRAP: `MemoryDatabase::new()`/`default()` in 0.44 only tracks ids (REQ returns
        // nothing, NEG-OPEN sees no items): enable `events` explicitly.
        let db = Arc::new(r44::MemoryDatabase::with_opts(r44::MemoryDatabaseOptions {
            events: true,
            max_events: None,
        }));
        let mut builder = r44::RelayBuilder::default()
            .addr(LOCALHOST)
            .database(db.clone())
            .rate_limit(r44::RateLimit {
                max_reqs: config.max_reqs.unwrap_or(500),
                notes_per_minute: config.notes_per_minute.unwrap_or(u32::MAX),
            });
        if let Some(limit) = config.default_filter_limit {
            builder = builder.default_filter_limit(limit);
        }
        if let Some(limit) = config.max_filter_limit {
            builder = builder.max_filter_limit(limit);
        }
        // Never `run()`: connections reach it only through `take_connection`.
        let relay = r44::LocalRelay::new(builder);
        let shared = Arc::new(Shared::new(&config));
        let listener = tokio::time::timeout(WAIT, TcpListener::bind((LOCALHOST, 0)))
            .await
            .expect("bind timed out")
            .expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        let server = spawn_server(listener, relay.clone(), shared.clone());
        TestRelay {
            port,
            relay,
            db,
            shared,
            server: Some(server),
        }
    }

    /// `ws://127.0.0.1:PORT` (stays the same across [`TestRelay::restart`]).
    pub fn url(&self) -> RelayUrl {
        RelayUrl::parse(&format!("ws://127.0.0.1:{}", self.port)).expect("valid relay url")
    }

    /// `http://127.0.0.1:PORT` (where the NIP-11 document is served).
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the listener is up (between `start`/`restart` and `stop`).
    pub fn is_running(&self) -> bool {
        self.server.is_some()
    }

    /// Store `event` directly in the relay database (no rate limit, no signature check, not
    /// delivered to open subscriptions). Duplicates are ignored.
    pub async fn add_event(&self, event: &Event) {
        self.save(event).await;
    }

    /// [`TestRelay::add_event`] for each event.
    pub async fn add_events(&self, events: &[Event]) {
        for event in events {
            self.save(event).await;
        }
    }

    /// Store `event` and deliver it live to matching open subscriptions on every connection
    /// (as the relay does for a client's EVENT). A duplicate (already stored) is not
    /// delivered again, like a real relay.
    pub async fn publish(&self, event: &Event) {
        if let Some(e44) = self.save(event).await {
            // `false` only means no connection is listening right now.
            let _ = self.relay.notify_event(e44);
        }
    }

    /// Stop: drop the listener and every connection (clients see the TCP connection end
    /// without a close handshake) and wait until all of it is gone. No-op when stopped.
    pub async fn stop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        let _ = server.stop_tx.send(());
        let abort = server.task.abort_handle();
        if tokio::time::timeout(WAIT, server.task).await.is_err() {
            abort.abort();
            panic!("TestRelay::stop: server task did not finish within {WAIT:?}");
        }
    }

    /// Listen again on the same port, with the same relay and database (stopping first if
    /// running). Counters are kept.
    pub async fn restart(&mut self) {
        self.stop().await;
        let deadline = tokio::time::Instant::now() + WAIT;
        let listener = loop {
            match TcpListener::bind((LOCALHOST, self.port)).await {
                Ok(listener) => break listener,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("TestRelay::restart: cannot rebind port {}: {e}", self.port),
            }
        };
        self.server = Some(spawn_server(
            listener,
            self.relay.clone(),
            self.shared.clone(),
        ));
    }

    /// Ids of every event stored in the relay database.
    pub async fn event_ids(&self) -> BTreeSet<EventId> {
        self.query_all()
            .await
            .into_iter()
            .map(|e| EventId::from_byte_array(e.id.to_bytes()))
            .collect()
    }

    /// Every event stored in the relay database (converted back to nostr 0.45).
    pub async fn stored_events(&self) -> Vec<Event> {
        use r44::JsonUtil as _;
        self.query_all()
            .await
            .into_iter()
            .map(|e| Event::from_json(e.as_json()).expect("0.44 -> 0.45 event"))
            .collect()
    }

    /// Max over time and over connections of the number of REQs open on one connection, as
    /// counted by the proxy: a REQ with a new sub id opens one (re-using an open id does not),
    /// a client CLOSE, a relay CLOSED or the end of the connection closes it. A REQ counts
    /// from the moment the client sends it, even if the relay then refuses it with CLOSED.
    pub fn max_concurrent_reqs_seen(&self) -> usize {
        self.shared.stats.max_concurrent_reqs.load(Ordering::SeqCst)
    }

    /// REQ messages sent by clients (all connections).
    pub fn reqs_seen(&self) -> usize {
        self.shared.stats.reqs.load(Ordering::SeqCst)
    }

    /// NEG-OPEN messages sent by clients (whatever the [`Nip77Refusal`](super::Nip77Refusal)).
    pub fn neg_opens_seen(&self) -> usize {
        self.shared.stats.neg_opens.load(Ordering::SeqCst)
    }

    /// EVENT messages sent to clients (relay's and injected hostile ones).
    pub fn events_sent(&self) -> usize {
        self.shared.stats.events_sent.load(Ordering::SeqCst)
    }

    /// Payload bytes of every frame the proxy sent to clients (relay's, injected, refusals).
    pub fn bytes_sent(&self) -> u64 {
        self.shared.stats.bytes_sent.load(Ordering::SeqCst)
    }

    /// WebSocket connections accepted so far.
    pub fn connections_seen(&self) -> usize {
        self.shared.stats.connections.load(Ordering::SeqCst)
    }

    /// WebSocket connections open right now.
    pub fn connections_open(&self) -> usize {
        self.shared.stats.connections_open.load(Ordering::SeqCst)
    }

    /// NIP-11 requests (GET with `Accept: application/nostr+json`) received.
    pub fn nip11_requests_seen(&self) -> usize {
        self.shared.stats.nip11_requests.load(Ordering::SeqCst)
    }

    /// Client frames over [`TestRelayConfig::max_frame_bytes`] (each one made the proxy drop
    /// its connection without a close frame).
    pub fn frames_too_large(&self) -> usize {
        self.shared.stats.frames_too_large.load(Ordering::SeqCst)
    }

    /// Largest text/binary frame (payload bytes) any client sent, also one over
    /// [`TestRelayConfig::max_frame_bytes`].
    pub fn largest_client_frame(&self) -> usize {
        self.shared
            .stats
            .largest_client_frame
            .load(Ordering::SeqCst)
    }

    /// Stop injecting faults: from now on every frame is forwarded as it comes (a connection
    /// stalled before stays stalled; an endless negentropy session gets `NEG-ERR` at its
    /// next message). The relay's frames for a subscription closed by an injected CLOSED
    /// are still not forwarded until the client opens it again.
    pub fn stop_faults(&self) {
        self.shared.faults_on.store(false, Ordering::SeqCst);
    }

    /// Inject faults again (after [`TestRelay::stop_faults`]); no-op without a plan.
    pub fn start_faults(&self) {
        self.shared.faults_on.store(true, Ordering::SeqCst);
    }

    /// Whether faults are being injected now.
    pub fn faults_active(&self) -> bool {
        self.shared.faults_active()
    }

    /// How many faults of each kind were injected so far (never reset).
    pub fn fault_counts(&self) -> FaultCounts {
        self.shared.fault_stats.snapshot()
    }

    /// Endless negentropy messages sent so far ([`FaultPlan::endless_negentropy`]).
    ///
    /// [`FaultPlan::endless_negentropy`]: super::FaultPlan::endless_negentropy
    pub fn endless_rounds_served(&self) -> u64 {
        self.fault_counts().endless_rounds
    }

    /// Ids of the forged and off-filter events injected so far (the first 100 000).
    pub fn injected_event_ids(&self) -> Vec<EventId> {
        self.shared.fault_stats.injected_ids()
    }

    /// Reset every counter above to 0 (except `connections_open` and the fault counters).
    pub fn reset_counters(&self) {
        self.shared.stats.reset();
    }

    async fn query_all(&self) -> Vec<r44::Event> {
        use r44::NostrDatabase as _;
        tokio::time::timeout(WAIT, self.db.query(r44::Filter::new()))
            .await
            .expect("database query timed out")
            .expect("database query")
            .into_iter()
            .collect()
    }

    /// Save into the database; `Some(event)` if it was newly stored.
    async fn save(&self, event: &Event) -> Option<r44::Event> {
        use r44::{JsonUtil as _, NostrDatabase as _};
        let e44 = r44::Event::from_json(event.as_json()).expect("0.45 -> 0.44 event");
        let status = tokio::time::timeout(WAIT, self.db.save_event(&e44))
            .await
            .expect("database save timed out")
            .expect("database save");
        status.is_success().then_some(e44)
    }
}

fn spawn_server(listener: TcpListener, relay: r44::LocalRelay, shared: Arc<Shared>) -> Server {
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(serve(listener, relay, shared, stop_rx));
    Server { stop_tx, task }
}

/// Accept loop. Ends on a stop signal (or when the `TestRelay` is dropped): drops the
/// listener, then aborts every connection task and waits for them.
async fn serve(
    listener: TcpListener,
    relay: r44::LocalRelay,
    shared: Arc<Shared>,
    mut stop_rx: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop_rx => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    conns.spawn(handle_tcp(stream, addr, relay.clone(), shared.clone()));
                }
                // e.g. EMFILE: do not spin
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

/// One TCP connection: read the HTTP request head, then WebSocket (proxied to the relay),
/// NIP-11 document (or, with `nip11_stall`, silence until the relay stops), or 404.
async fn handle_tcp(
    mut stream: TcpStream,
    addr: SocketAddr,
    relay: r44::LocalRelay,
    shared: Arc<Shared>,
) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(1024);
    let mut tmp = [0u8; 2048];
    let head = loop {
        let n = match tokio::time::timeout(WAIT, stream.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(n)) => n,
        };
        buf.extend_from_slice(&tmp[..n]);
        match parse_head(&buf) {
            Ok(Some(head)) => break head,
            Ok(None) if buf.len() <= 64 * 1024 => continue,
            _ => {
                let _ = stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                return;
            }
        }
    };
    if let Some(key) = head.ws_key {
        let resp = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n",
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key)
        );
        if stream.write_all(resp.as_bytes()).await.is_err() {
            return;
        }
        let rest = buf.split_off(head.len);
        proxy::run(stream, rest, addr, relay, shared).await;
    } else if head.wants_nip11 && head.method == "GET" {
        shared.stats.nip11_requests.fetch_add(1, Ordering::SeqCst);
        if shared.nip11_stall {
            // Never answer; hold the socket until this task is aborted (stop / drop).
            let _held = stream;
            std::future::pending::<()>().await;
            return;
        }
        let resp = match &shared.nip11 {
            Some(doc) => format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/nostr+json\r\n\
                 Access-Control-Allow-Origin: *\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{doc}",
                doc.len()
            ),
            None => not_found(),
        };
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
    } else {
        let _ = stream.write_all(not_found().as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

fn not_found() -> String {
    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned()
}

struct Head {
    len: usize,
    method: String,
    ws_key: Option<Vec<u8>>,
    wants_nip11: bool,
}

/// `Ok(None)`: incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, httparse::Error> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(None),
    };
    let get = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.to_vec())
    };
    let upgrade = get("upgrade").is_some_and(|v| v.eq_ignore_ascii_case(b"websocket"));
    let ws_key = if upgrade {
        get("sec-websocket-key")
    } else {
        None
    };
    let wants_nip11 = get("accept").is_some_and(|v| {
        String::from_utf8_lossy(&v)
            .to_ascii_lowercase()
            .contains("application/nostr+json")
    });
    Ok(Some(Head {
        len,
        method: req.method.unwrap_or_default().to_owned(),
        ws_key,
        wants_nip11,
    }))
}
