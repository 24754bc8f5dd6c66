//! A TCP server on a loopback address (127.0.0.1 unless told) that accepts connections
//! and never answers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Pause after a failed `accept` before retrying.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// Pause between two checks in [`HangingServer::wait_for_accepted`].
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Accepts TCP connections, reads nothing, writes nothing, and holds every socket open
/// until dropped (the task is aborted, closing them). Counts accepted connections.
#[derive(Debug)]
pub struct HangingServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl HangingServer {
    /// Binds a free port on 127.0.0.1 and starts accepting on a tokio task.
    pub async fn start() -> HangingServer {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST)).await
    }

    /// Binds a free port on the loopback address `ip` (any of 127.0.0.0/8 on Linux) and
    /// starts accepting on a tokio task. Panics if `ip` is not loopback.
    pub async fn start_on(ip: IpAddr) -> HangingServer {
        assert!(ip.is_loopback(), "tests only bind loopback, not {ip}");
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .await
            .unwrap_or_else(|e| panic!("binding {ip}:0: {e}"));
        let addr = listener
            .local_addr()
            .expect("local address of the listener");
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(hold_connections(listener, Arc::clone(&accepted)));
        HangingServer {
            addr,
            accepted,
            task,
        }
    }

    /// The socket address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits (bounded by `timeout`) until at least `count` connections were accepted;
    /// returns whether that happened.
    pub async fn wait_for_accepted(&self, count: usize, timeout: Duration) -> bool {
        let reached = async {
            while self.accepted() < count {
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        };
        tokio::time::timeout(timeout, reached).await.is_ok()
    }

    /// `git://127.0.0.1:<port>/<name>`.
    pub fn git_url(&self, name: &str) -> String {
        format!("git://{}/{name}", self.addr)
    }

    /// `http://127.0.0.1:<port>/<name>`.
    pub fn http_url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.addr)
    }
}

impl Drop for HangingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts forever, keeping every accepted socket alive inside this task.
async fn hold_connections(listener: TcpListener, accepted: Arc<AtomicUsize>) {
    let mut held = Vec::new();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                accepted.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
            Err(_) => tokio::time::sleep(ACCEPT_RETRY).await,
        }
    }
}
