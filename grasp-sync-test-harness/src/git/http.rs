//! Smart-HTTP git server: hyper (HTTP/1.1) in front of `git http-backend` run as CGI,
//! recording every request.
//!
//! CGI details that matter: every request header is passed as `HTTP_*` (without
//! `HTTP_GIT_PROTOCOL` the backend silently falls back to protocol v0, which refuses
//! unadvertised object ids), `CONTENT_LENGTH` is the length of the body as received
//! (still gzip-compressed if git sent `Content-Encoding: gzip`; the backend inflates it
//! because `HTTP_CONTENT_ENCODING` is passed too). Chunked bodies are collected first.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::cli::{isolated_env, isolated_git_home};
use super::process::GroupKillGuard;

/// The response body type.
type Body = Full<Bytes>;

/// Pause after a failed `accept` (e.g. out of file descriptors) before retrying.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// One HTTP request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The URL path, e.g. `/repo.git/info/refs`.
    pub path: String,
    /// The query string, if any (`service=git-upload-pack`).
    pub query: Option<String>,
    /// The `Git-Protocol` header, if sent (`version=2` for protocol v2).
    pub git_protocol: Option<String>,
    /// When the request head arrived.
    pub started: Instant,
    /// When the response was ready (`None` while in flight or if it was abandoned).
    pub finished: Option<Instant>,
    /// The response status (`None` while in flight or if abandoned).
    pub status: Option<u16>,
}

impl RequestRecord {
    /// A `GET .../info/refs`: the first request of every smart-HTTP fetch.
    pub fn is_fetch_start(&self) -> bool {
        self.method == "GET" && self.path.ends_with("/info/refs")
    }

    /// A `POST .../git-upload-pack` (ls-refs or fetch command).
    pub fn is_upload_pack_post(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/git-upload-pack")
    }

    /// The client asked for protocol v2 (`Git-Protocol: version=2`).
    pub fn is_v2(&self) -> bool {
        self.git_protocol
            .as_deref()
            .is_some_and(|value| value.split(':').any(|part| part == "version=2"))
    }
}

/// A snapshot of what a [`GitHttpServer`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Requests received (finished or not).
    pub requests: usize,
    /// Maximum number of requests in flight at once (from request head to response
    /// ready). This is the harness's measure of FETCH concurrency: a git fetch keeps at
    /// most one request in flight, so N fetches overlapping in time show up as up to N
    /// concurrent requests. Use a response delay to make overlaps observable.
    pub max_concurrent: usize,
    /// Maximum number of TCP connections open at once (a git process keeps one
    /// keep-alive connection for its whole fetch; an upper-bound-ish view of fetch
    /// concurrency that includes idle time between requests).
    pub max_concurrent_connections: usize,
    /// Start of every fetch (one per `GET .../info/refs`), in arrival order.
    pub fetch_starts: Vec<Instant>,
    /// Number of `POST .../git-upload-pack` requests.
    pub upload_pack_posts: usize,
    /// Requests that carried `Git-Protocol: version=2`.
    pub v2_requests: usize,
    /// Every request, in arrival order.
    pub records: Vec<RequestRecord>,
}

impl HttpStats {
    /// Number of fetches started (`fetch_starts.len()`).
    pub fn fetches(&self) -> usize {
        self.fetch_starts.len()
    }

    /// The largest number of fetch starts falling within any closed time window of
    /// length `window` (a rate-limit check: "no more than N fetches per second").
    pub fn max_fetches_in_any_window(&self, window: Duration) -> usize {
        max_in_any_window(&self.fetch_starts, window)
    }

    /// Builds the snapshot from the raw records and counters.
    fn from_records(records: Vec<RequestRecord>, max_concurrent: usize, max_conns: usize) -> Self {
        HttpStats {
            requests: records.len(),
            max_concurrent,
            max_concurrent_connections: max_conns,
            fetch_starts: records
                .iter()
                .filter(|record| record.is_fetch_start())
                .map(|record| record.started)
                .collect(),
            upload_pack_posts: records.iter().filter(|r| r.is_upload_pack_post()).count(),
            v2_requests: records.iter().filter(|record| record.is_v2()).count(),
            records,
        }
    }
}

/// Largest count of `instants` within `[t, t + window]` over all `t`.
fn max_in_any_window(instants: &[Instant], window: Duration) -> usize {
    let mut sorted = instants.to_vec();
    sorted.sort();
    let mut best = 0;
    let mut first = 0;
    for (last, instant) in sorted.iter().enumerate() {
        while instant.duration_since(sorted[first]) > window {
            first += 1;
        }
        best = best.max(last + 1 - first);
    }
    best
}

/// Configures a [`GitHttpServer`] before starting it.
#[derive(Debug, Clone)]
pub struct GitHttpServerBuilder {
    project_root: PathBuf,
    bind: IpAddr,
    response_delay: Duration,
}

impl GitHttpServerBuilder {
    /// Serves the repositories under `project_root` (`GIT_PROJECT_ROOT`), on 127.0.0.1,
    /// without delay.
    pub fn new(project_root: impl Into<PathBuf>) -> Self {
        GitHttpServerBuilder {
            project_root: project_root.into(),
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            response_delay: Duration::ZERO,
        }
    }

    /// The loopback address to listen on (`127.0.0.1` or `::1`).
    pub fn bind(mut self, ip: IpAddr) -> Self {
        self.bind = ip;
        self
    }

    /// Waits `delay` before answering each request (makes concurrency observable).
    pub fn response_delay(mut self, delay: Duration) -> Self {
        self.response_delay = delay;
        self
    }

    /// Binds a free port and starts serving on a tokio task of the current runtime.
    /// Panics if `bind` is not a loopback address or cannot be bound.
    pub async fn start(self) -> GitHttpServer {
        assert!(
            self.bind.is_loopback(),
            "tests only bind loopback, not {}",
            self.bind
        );
        let listener = TcpListener::bind(SocketAddr::new(self.bind, 0))
            .await
            .unwrap_or_else(|e| panic!("binding {}:0: {e}", self.bind));
        let addr = listener
            .local_addr()
            .expect("local address of the listener");
        let root = std::path::absolute(&self.project_root).expect("absolute project root");
        let state = Arc::new(ServerState::new(root, self.response_delay));
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        GitHttpServer { addr, state, task }
    }
}

/// A running smart-HTTP git server (see the module docs). On drop, the server task is
/// aborted, which drops every connection and kills in-flight `git http-backend`s.
#[derive(Debug)]
pub struct GitHttpServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    task: JoinHandle<()>,
}

impl GitHttpServer {
    /// A builder for a server on `project_root` (to set the address or a delay).
    pub fn builder(project_root: impl Into<PathBuf>) -> GitHttpServerBuilder {
        GitHttpServerBuilder::new(project_root)
    }

    /// Starts a server on `project_root`, listening on `bind`, without delay.
    pub async fn start(project_root: impl Into<PathBuf>, bind: IpAddr) -> GitHttpServer {
        Self::builder(project_root).bind(bind).start().await
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/<repo_name>` or `http://[::1]:<port>/<repo_name>`.
    pub fn url(&self, repo_name: &str) -> String {
        format!("http://{}/{repo_name}", self.addr)
    }

    /// A snapshot of the statistics so far.
    pub fn stats(&self) -> HttpStats {
        self.state.snapshot()
    }

    /// Shorthand for `self.stats().max_fetches_in_any_window(window)`.
    pub fn max_fetches_in_any_window(&self, window: Duration) -> usize {
        self.stats().max_fetches_in_any_window(window)
    }
}

impl Drop for GitHttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Shared by the accept loop, every connection and every request.
#[derive(Debug)]
struct ServerState {
    project_root: PathBuf,
    response_delay: Duration,
    counters: Mutex<Counters>,
}

/// Mutable bookkeeping behind [`ServerState::counters`].
#[derive(Debug, Default)]
struct Counters {
    records: Vec<RequestRecord>,
    in_flight: usize,
    max_in_flight: usize,
    open_connections: usize,
    max_open_connections: usize,
}

impl ServerState {
    /// Fresh state with no requests seen.
    fn new(project_root: PathBuf, response_delay: Duration) -> Self {
        ServerState {
            project_root,
            response_delay,
            counters: Mutex::new(Counters::default()),
        }
    }

    /// The counters; a poisoned lock is still usable for statistics.
    fn counters(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the counters into an [`HttpStats`].
    fn snapshot(&self) -> HttpStats {
        let counters = self.counters();
        HttpStats::from_records(
            counters.records.clone(),
            counters.max_in_flight,
            counters.max_open_connections,
        )
    }

    /// Records a new request; returns its index in `records`.
    fn request_started(&self, parts: &Parts) -> usize {
        let mut counters = self.counters();
        counters.records.push(RequestRecord {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            git_protocol: header_text(&parts.headers, "git-protocol"),
            started: Instant::now(),
            finished: None,
            status: None,
        });
        counters.in_flight += 1;
        counters.max_in_flight = counters.max_in_flight.max(counters.in_flight);
        counters.records.len() - 1
    }

    /// Marks request `index` as no longer in flight, answered with `status` if any.
    fn request_ended(&self, index: usize, status: Option<u16>) {
        let mut counters = self.counters();
        counters.in_flight = counters.in_flight.saturating_sub(1);
        if let Some(record) = counters.records.get_mut(index) {
            record.finished = status.map(|_| Instant::now());
            record.status = status;
        }
    }

    /// Counts a newly accepted connection.
    fn connection_opened(&self) {
        let mut counters = self.counters();
        counters.open_connections += 1;
        counters.max_open_connections =
            counters.max_open_connections.max(counters.open_connections);
    }

    /// Counts a closed connection.
    fn connection_closed(&self) {
        let mut counters = self.counters();
        counters.open_connections = counters.open_connections.saturating_sub(1);
    }
}

/// Ends a request's record even if its future is dropped mid-flight.
struct InFlightRequest {
    state: Arc<ServerState>,
    index: usize,
    status: Option<u16>,
}

impl Drop for InFlightRequest {
    fn drop(&mut self) {
        self.state.request_ended(self.index, self.status);
    }
}

/// Counts a connection as open for as long as it lives.
struct OpenConnection {
    state: Arc<ServerState>,
}

impl OpenConnection {
    /// Counts the connection as opened.
    fn new(state: Arc<ServerState>) -> Self {
        state.connection_opened();
        OpenConnection { state }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.state.connection_closed();
    }
}

/// Accepts connections forever; connections live in a `JoinSet` owned by this task, so
/// aborting the task drops them all.
async fn accept_loop(listener: TcpListener, state: Arc<ServerState>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    connections.spawn(serve_connection(stream, remote, Arc::clone(&state)));
                }
                Err(_) => tokio::time::sleep(ACCEPT_RETRY).await,
            },
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Serves HTTP/1.1 (keep-alive) on one connection until the client closes it.
async fn serve_connection(stream: TcpStream, remote: SocketAddr, state: Arc<ServerState>) {
    let _open = OpenConnection::new(Arc::clone(&state));
    let service = service_fn(move |request| handle(request, Arc::clone(&state), remote));
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Records the request, applies the delay, answers through `git http-backend`.
async fn handle(
    request: Request<Incoming>,
    state: Arc<ServerState>,
    remote: SocketAddr,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let index = state.request_started(&parts);
    let mut in_flight = InFlightRequest {
        state: Arc::clone(&state),
        index,
        status: None,
    };
    if !state.response_delay.is_zero() {
        tokio::time::sleep(state.response_delay).await;
    }
    let response = answer(&state.project_root, parts, body, remote).await;
    in_flight.status = Some(response.status().as_u16());
    Ok(response)
}

/// Collects the body and runs the CGI; failures become 4xx/5xx plain-text responses.
async fn answer(root: &Path, parts: Parts, body: Incoming, remote: SocketAddr) -> Response<Body> {
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return text_response(StatusCode::BAD_REQUEST, format!("reading body: {e}")),
    };
    let env = cgi_env(root, &parts, body.len(), remote);
    match run_http_backend(env, body).await {
        Ok(stdout) => parse_cgi_response(stdout),
        Err(e) => text_response(StatusCode::BAD_GATEWAY, e),
    }
}

/// The CGI environment for one request (see the module docs).
fn cgi_env(
    root: &Path,
    parts: &Parts,
    body_len: usize,
    remote: SocketAddr,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = header_env(&parts.headers);
    let mut set = |key: &str, value: String| {
        env.insert(key.to_owned(), value);
    };
    set("GATEWAY_INTERFACE", "CGI/1.1".to_owned());
    set("SERVER_PROTOCOL", "HTTP/1.1".to_owned());
    set("REQUEST_METHOD", parts.method.to_string());
    set("PATH_INFO", parts.uri.path().to_owned());
    set("QUERY_STRING", parts.uri.query().unwrap_or("").to_owned());
    set("REMOTE_ADDR", remote.ip().to_string());
    set("GIT_PROJECT_ROOT", root.display().to_string());
    set("GIT_HTTP_EXPORT_ALL", "1".to_owned());
    if let Some(content_type) = header_text(&parts.headers, "content-type") {
        set("CONTENT_TYPE", content_type);
    }
    if body_len > 0 || parts.method == hyper::Method::POST {
        set("CONTENT_LENGTH", body_len.to_string());
    }
    env
}

/// Every request header as `HTTP_<NAME>` (upper case, `-` → `_`); repeated headers are
/// joined with `, `. `Content-Type`/`Content-Length` go to their own CGI variables.
fn header_env(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        if name == hyper::header::CONTENT_TYPE || name == hyper::header::CONTENT_LENGTH {
            continue;
        }
        let key = format!(
            "HTTP_{}",
            name.as_str().to_ascii_uppercase().replace('-', "_")
        );
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        env.entry(key)
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert(value);
    }
    env
}

/// The first value of header `name` as text, if present.
fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// Runs `git http-backend` with exactly `env` (plus `PATH` and the isolated git
/// environment), feeding `body` on stdin; returns its stdout. Runs in its own process
/// group, killed if this future is dropped before the backend finishes.
async fn run_http_backend(env: BTreeMap<String, String>, body: Bytes) -> Result<Vec<u8>, String> {
    let mut child = backend_command(env)
        .spawn()
        .map_err(|e| format!("spawning git http-backend: {e}"))?;
    let mut guard = GroupKillGuard::new(child.id());
    let stdin = child.stdin.take();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // The backend may not read the whole body (e.g. on errors): ignore EPIPE.
            let _ = stdin.write_all(&body).await;
        }
    };
    let ((), output) = tokio::join!(feed, child.wait_with_output());
    guard.disarm();
    let output = output.map_err(|e| format!("waiting for git http-backend: {e}"))?;
    if output.stdout.is_empty() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "git http-backend ({}) wrote nothing: {stderr}",
            output.status
        ));
    }
    Ok(output.stdout)
}

/// `git http-backend` with a cleared environment: `env`, `PATH`, the isolated git
/// variables (`HOME`, `GIT_CONFIG_NOSYSTEM`, `safe.directory=*`, ...), piped stdio.
fn backend_command(env: BTreeMap<String, String>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .current_dir(isolated_git_home())
        .env_clear()
        .envs(std::env::var_os("PATH").map(|path| ("PATH".to_owned(), path)))
        .envs(isolated_env())
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    cmd
}

/// Turns CGI output (headers, blank line, body) into a response; `Status:` sets the
/// status code (default 200). Malformed output becomes a 502.
fn parse_cgi_response(stdout: Vec<u8>) -> Response<Body> {
    let Some((head_len, body_start)) = find_header_end(&stdout) else {
        return text_response(
            StatusCode::BAD_GATEWAY,
            "CGI output without header end".to_owned(),
        );
    };
    let head = String::from_utf8_lossy(&stdout[..head_len]).into_owned();
    let body = Bytes::from(stdout).slice(body_start..);
    let mut response = Response::new(Full::new(body));
    for line in head.lines() {
        apply_cgi_header(&mut response, line);
    }
    response
}

/// `(length of the header block, start of the body)`: the first `\r\n\r\n` or `\n\n`.
fn find_header_end(output: &[u8]) -> Option<(usize, usize)> {
    let crlf = find(output, b"\r\n\r\n").map(|at| (at, at + 4));
    let lf = find(output, b"\n\n").map(|at| (at, at + 2));
    match (crlf, lf) {
        (Some(crlf), Some(lf)) => Some(if crlf.0 <= lf.0 { crlf } else { lf }),
        (found, None) | (None, found) => found,
    }
}

/// Position of the first occurrence of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Applies one `Name: value` CGI header line; invalid lines are skipped.
fn apply_cgi_header(response: &mut Response<Body>, line: &str) {
    let Some((name, value)) = line.trim_end_matches('\r').split_once(':') else {
        return;
    };
    let value = value.trim();
    if name.eq_ignore_ascii_case("status") {
        if let Some(status) = parse_status(value) {
            *response.status_mut() = status;
        }
        return;
    }
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        response.headers_mut().append(name, value);
    }
}

/// `404 Not Found` → 404.
fn parse_status(value: &str) -> Option<StatusCode> {
    let code = value.split_whitespace().next()?;
    StatusCode::from_bytes(code.as_bytes()).ok()
}

/// A plain-text response with `status`.
fn text_response(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}
