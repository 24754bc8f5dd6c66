//! `/` (a status page for a person, [`crate::page`]), `/metrics` (Prometheus text)
//! and `/status` (JSON of the sync's status, with purgatory's under `purgatory`) over
//! HTTP/1.1.
//!
//! The server is bounded: at most [`MAX_CONNECTIONS`] connections are served at once
//! (a further one waits in the listen backlog until one closes), a request's headers
//! must arrive within [`HEADER_TIMEOUT_SECS`] and a connection lives at most
//! [`CONNECTION_TIMEOUT_SECS`] (a slow client cannot hold one open), and a failing
//! `accept` (out of file descriptors: `EMFILE`, `ENFILE`) is retried after a growing
//! pause, warned about once per episode, instead of spinning.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::PurgatoryStatus;
use grasp_sync_tokio::SyncStatus;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};

use crate::page;
use crate::status_json::status_document;

/// The statuses `/status` reports.
#[derive(Clone)]
pub struct Statuses {
    /// Proactive sync's.
    pub sync: watch::Receiver<SyncStatus>,
    /// Purgatory's, with `--git-root`.
    pub purgatory: Option<watch::Receiver<PurgatoryStatus>>,
}

impl Statuses {
    /// The `/status` document: the sync's status, purgatory's under `purgatory`
    /// ([`status_document`]).
    fn json(&self) -> serde_json::Value {
        let purgatory = self.purgatory.as_ref().map(watch::Receiver::borrow);
        status_document(&self.sync.borrow(), purgatory.as_deref())
    }
}

/// The most connections served at once; a further one waits (in the listen backlog)
/// until one closes.
pub const MAX_CONNECTIONS: usize = 64;

/// Seconds a client has to send a request's headers before its connection is closed
/// (slowloris).
pub const HEADER_TIMEOUT_SECS: u64 = 10;

/// Seconds a connection lives at most, whatever it does (a client reading its answer
/// slowly, an idle keep-alive); it is closed then.
pub const CONNECTION_TIMEOUT_SECS: u64 = 60;

/// The first pause after a failed `accept`, doubled on each failure in a row...
const ACCEPT_PAUSE_FIRST_MS: u64 = 10;

/// ...up to this.
const ACCEPT_PAUSE_MAX_MS: u64 = 1_000;

/// The bounds of the server: [`MAX_CONNECTIONS`], [`HEADER_TIMEOUT_SECS`] and
/// [`CONNECTION_TIMEOUT_SECS`] (tests shorten them).
#[derive(Clone, Copy, Debug)]
struct ServerLimits {
    max_connections: usize,
    header_timeout: Duration,
    connection_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(HEADER_TIMEOUT_SECS),
            connection_timeout: Duration::from_secs(CONNECTION_TIMEOUT_SECS),
        }
    }
}

/// Serves until `shutdown` flips; returns the bound address at once.
pub async fn serve(
    addr: SocketAddr,
    registry: prometheus::Registry,
    status: Statuses,
    shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, std::io::Error> {
    serve_within(addr, registry, status, shutdown, ServerLimits::default()).await
}

/// [`serve`] within `limits`.
async fn serve_within(
    addr: SocketAddr,
    registry: prometheus::Registry,
    status: Statuses,
    mut shutdown: watch::Receiver<bool>,
    limits: ServerLimits,
) -> Result<SocketAddr, std::io::Error> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    info!(%bound, "serving the status page on /, /metrics and /status");
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        let mut failures = AcceptFailures::default();
        loop {
            let accepted = tokio::select! {
                accepted = accept(&listener, &connections) => accepted,
                _ = shutdown.changed() => return,
            };
            let (stream, permit) = match accepted {
                Ok(accepted) => {
                    failures.succeeded();
                    accepted
                }
                Err(error) => {
                    let pause = failures.failed(&error);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => continue,
                        _ = shutdown.changed() => return,
                    }
                }
            };
            let registry = registry.clone();
            let status = status.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer(&request, &registry, &status);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .serve_connection(io, service);
                match tokio::time::timeout(limits.connection_timeout, connection).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => debug!(%error, "status connection failed"),
                    Err(_) => debug!("status connection closed at its time limit"),
                }
            });
        }
    });
    Ok(bound)
}

/// Waits for a free connection slot, then for a connection.
async fn accept(
    listener: &TcpListener,
    connections: &Arc<Semaphore>,
) -> std::io::Result<(tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit)> {
    let permit = connections
        .clone()
        .acquire_owned()
        .await
        .map_err(std::io::Error::other)?;
    let (stream, _) = listener.accept().await?;
    Ok((stream, permit))
}

/// Failed `accept`s in a row: how long to pause before the next, and when to warn.
#[derive(Debug, Default)]
struct AcceptFailures {
    /// Failures since the last connection accepted.
    in_a_row: u32,
}

impl AcceptFailures {
    /// An `accept` failed with `error`: warns on the first failure of an episode (debug
    /// after), and returns the pause before the next attempt (doubling from
    /// [`ACCEPT_PAUSE_FIRST_MS`] to [`ACCEPT_PAUSE_MAX_MS`]).
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        if self.in_a_row == 0 {
            warn!(%error, "the status server cannot accept connections (out of file descriptors?); pausing");
        } else {
            debug!(%error, failures = self.in_a_row + 1, "accepting a status connection failed again");
        }
        let pause = accept_pause(self.in_a_row);
        self.in_a_row = self.in_a_row.saturating_add(1);
        pause
    }

    /// A connection was accepted: ends an episode of failures (logged with its count).
    fn succeeded(&mut self) {
        if self.in_a_row > 0 {
            info!(
                failures = self.in_a_row,
                "the status server accepts connections again"
            );
            self.in_a_row = 0;
        }
    }
}

/// The pause after `earlier` failures in a row and one more.
fn accept_pause(earlier: u32) -> Duration {
    let factor = 1u64.checked_shl(earlier.min(16)).unwrap_or(u64::MAX);
    Duration::from_millis(
        ACCEPT_PAUSE_FIRST_MS
            .saturating_mul(factor)
            .min(ACCEPT_PAUSE_MAX_MS),
    )
}

fn answer(
    request: &Request<Incoming>,
    registry: &prometheus::Registry,
    status: &Statuses,
) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/metrics" => {
            let mut text = Vec::new();
            let encoder = TextEncoder::new();
            match encoder.encode(&registry.gather(), &mut text) {
                Ok(()) => reply(StatusCode::OK, encoder.format_type(), text),
                Err(error) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    error.to_string().into_bytes(),
                ),
            }
        }
        "/status" => {
            let body = status.json().to_string().into_bytes();
            reply(StatusCode::OK, "application/json", body)
        }
        "/" => {
            let body = page::render(&status.json()).into_bytes();
            let mut response = reply(StatusCode::OK, "text/html; charset=utf-8", body);
            let headers = response.headers_mut();
            headers.insert(
                hyper::header::CONTENT_SECURITY_POLICY,
                hyper::header::HeaderValue::from_static(page::CONTENT_SECURITY_POLICY),
            );
            headers.insert(
                hyper::header::X_CONTENT_TYPE_OPTIONS,
                hyper::header::HeaderValue::from_static("nosniff"),
            );
            headers.insert(
                hyper::header::CACHE_CONTROL,
                hyper::header::HeaderValue::from_static("no-store"),
            );
            response
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec()),
    }
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// Serves an empty status within `limits` on a free local port.
    async fn server(limits: ServerLimits) -> (SocketAddr, watch::Sender<bool>) {
        let (stop, stopped) = watch::channel(false);
        let (_sync, sync) = watch::channel(SyncStatus::default());
        let statuses = Statuses {
            sync,
            purgatory: None,
        };
        let addr = serve_within(
            "127.0.0.1:0".parse().unwrap(),
            prometheus::Registry::new(),
            statuses,
            stopped,
            limits,
        )
        .await
        .unwrap();
        (addr, stop)
    }

    /// Reads until the server closes the connection (or `within` passes: `None`).
    async fn read_to_close(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        let mut answer = Vec::new();
        match tokio::time::timeout(within, stream.read_to_end(&mut answer)).await {
            Ok(Ok(_)) => Some(answer),
            Ok(Err(error)) if error.kind() == ErrorKind::ConnectionReset => Some(answer),
            Ok(Err(error)) => panic!("reading failed: {error}"),
            Err(_) => None,
        }
    }

    const HALF_A_HEADER: &[u8] = b"GET /status HTTP/1.1\r\nHost: status.example\r\n";
    const A_REQUEST: &[u8] = b"GET /status HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n";

    #[tokio::test]
    async fn a_client_sending_half_a_header_is_closed_after_the_header_timeout() {
        let (addr, _stop) = server(ServerLimits {
            header_timeout: Duration::from_millis(200),
            ..ServerLimits::default()
        })
        .await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(HALF_A_HEADER).await.unwrap();
        // Generous: the timeout is 200 ms, a loaded machine may take far longer.
        let closed = read_to_close(&mut slow, Duration::from_secs(20)).await;
        assert!(closed.is_some(), "the connection was still open after 20 s");
        // The server still answers others.
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(A_REQUEST).await.unwrap();
        let answer = read_to_close(&mut client, Duration::from_secs(20)).await;
        assert!(answer.unwrap().starts_with(b"HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_connection_beyond_the_cap_waits_until_one_closes() {
        let (addr, _stop) = server(ServerLimits {
            max_connections: 2,
            ..ServerLimits::default()
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut slow = TcpStream::connect(addr).await.unwrap();
            slow.write_all(HALF_A_HEADER).await.unwrap();
            held.push(slow);
        }
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(A_REQUEST).await.unwrap();
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_secs(1), third.read(&mut byte)).await;
        assert!(early.is_err(), "the third connection was served: {early:?}");
        // One of the two closes: the third is served.
        drop(held.pop());
        let answer = read_to_close(&mut third, Duration::from_secs(20)).await;
        let mut answer = answer.expect("the third connection was not served within 20 s");
        answer.insert(0, byte[0]);
        assert!(
            String::from_utf8_lossy(&answer).contains("200 OK"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }

    #[test]
    fn failed_accepts_pause_longer_each_time_up_to_a_second_and_start_over_after_one_succeeds() {
        let mut failures = AcceptFailures::default();
        let error = std::io::Error::from_raw_os_error(24); // EMFILE
        let pauses: Vec<u64> = (0..9)
            .map(|_| failures.failed(&error).as_millis() as u64)
            .collect();
        assert_eq!(pauses, vec![10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        for _ in 0..100 {
            assert_eq!(failures.failed(&error), Duration::from_secs(1));
        }
        failures.succeeded();
        assert_eq!(failures.failed(&error), Duration::from_millis(10));
    }
}
