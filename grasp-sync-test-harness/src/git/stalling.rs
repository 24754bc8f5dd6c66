//! A TCP proxy on 127.0.0.1 that passes a server's first bytes on and then stalls.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Forwards what a client sends to `upstream`, and the first `passed` bytes of each
/// answer back; then stops reading the answer and holds both sockets open until
/// dropped. A transfer through it starts and never finishes: what a server that stalls
/// mid-pack looks like. Counts the answer bytes passed on.
#[derive(Debug)]
pub struct StallingProxy {
    addr: SocketAddr,
    forwarded: Arc<AtomicU64>,
    /// The accept loop and its connections: held, never read, so that dropping the
    /// proxy aborts them.
    _tasks: JoinSet<()>,
}

impl StallingProxy {
    /// Listens on a free port of 127.0.0.1, proxying to `upstream`.
    pub async fn start(upstream: SocketAddr, passed: u64) -> StallingProxy {
        let listener = TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
            .await
            .expect("binding 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address of the proxy");
        let forwarded = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        let counter = Arc::clone(&forwarded);
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let counter = Arc::clone(&counter);
                connections.spawn(proxy(client, upstream, passed, counter));
            }
        });
        StallingProxy {
            addr,
            forwarded,
            _tasks: tasks,
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answer bytes passed on so far, over all connections.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::SeqCst)
    }

    /// Waits (bounded by `timeout`) until at least `bytes` answer bytes were passed on;
    /// returns whether that happened.
    pub async fn wait_for_forwarded(&self, bytes: u64, timeout: Duration) -> bool {
        let reached = async {
            while self.forwarded() < bytes {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(timeout, reached).await.is_ok()
    }
}

/// One proxied connection.
async fn proxy(client: TcpStream, upstream: SocketAddr, passed: u64, counter: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut left = passed;
    let mut buffer = vec![0u8; 64 * 1024];
    while left > 0 {
        let want = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        let read = match server_read.read(&mut buffer[..want]).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if client_write.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        left -= read as u64;
        counter.fetch_add(read as u64, Ordering::SeqCst);
    }
    // Stall: hold every socket open, read nothing more.
    std::future::pending::<()>().await;
    drop((requests, server_read, client_write));
}
