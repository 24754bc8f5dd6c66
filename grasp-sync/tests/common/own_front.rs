//! A listener in front of the own relay, on the port the sidecar is told is the own
//! relay's (and our own service's): WebSocket upgrades and every other HTTP request go
//! through to the relay unchanged, but a request whose path looks like git
//! (`/info/refs`, `git-upload-pack`, `git-receive-pack`) is counted and answered `200`
//! with an empty body, the way strfry answers any HTTP path (ECOSYSTEM.md): a client
//! fetching git data from our own service would see the trap a plain relay sets.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Bound on reading a request head and on connecting to the relay.
const WAIT: Duration = Duration::from_secs(10);

/// The front; dropping it stops the listener and every connection through it.
pub struct OwnFront {
    addr: SocketAddr,
    git_requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OwnFront {
    /// Listens on a free port of 127.0.0.1, passing connections to `relay_port`.
    pub async fn start(relay_port: u16) -> OwnFront {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let git_requests = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(serve(listener, relay_port, Arc::clone(&git_requests)));
        OwnFront {
            addr,
            git_requests,
            task,
        }
    }

    /// `ws://127.0.0.1:PORT`: the own relay as the sidecar sees it.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.addr.port())
    }

    /// `http://127.0.0.1:PORT/<path>`: a clone URL on our own service.
    pub fn http_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.addr.port())
    }

    /// The request lines of every git request seen so far.
    pub fn git_requests(&self) -> Vec<String> {
        self.git_requests.lock().expect("lock").clone()
    }
}

impl Drop for OwnFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, relay_port: u16, git: Arc<Mutex<Vec<String>>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(handle(stream, relay_port, Arc::clone(&git)));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Reads the request head; counts and answers a git request, passes anything else on.
async fn handle(mut client: TcpStream, relay_port: u16, git: Arc<Mutex<Vec<String>>>) {
    let _ = client.set_nodelay(true);
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(WAIT, client.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 && head.len() < 64 * 1024 => head.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head);
    let request_line = text.lines().next().unwrap_or_default().to_owned();
    let path = request_line.split(' ').nth(1).unwrap_or_default();
    let looks_like_git = ["/info/refs", "git-upload-pack", "git-receive-pack"]
        .iter()
        .any(|marker| path.contains(marker));
    if looks_like_git {
        git.lock().expect("lock").push(request_line);
        let _ = client
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        let _ = client.shutdown().await;
        return;
    }
    let connecting = TcpStream::connect(("127.0.0.1", relay_port));
    let Ok(Ok(mut relay)) = tokio::time::timeout(WAIT, connecting).await else {
        return;
    };
    let _ = relay.set_nodelay(true);
    if relay.write_all(&head).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut relay).await;
}
