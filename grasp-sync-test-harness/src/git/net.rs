//! Loopback ports: free ones, closed ones, and bounded waits on them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Pause between two connection attempts while polling.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Bound of one connection attempt while polling.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

/// A port on an address that was free a moment ago (the test support's).
pub use grasp_sync_test_support::net::free_port_on as free_port;

/// `<scheme>://127.0.0.1:<port>/<name>` for a port where nothing listens, so
/// connections are refused at once.
pub fn closed_port_url(scheme: &str, name: &str) -> String {
    let port = free_port(IpAddr::V4(Ipv4Addr::LOCALHOST));
    format!("{scheme}://127.0.0.1:{port}/{name}")
}

/// Polls until a TCP connection to `addr` succeeds; `false` if `timeout` elapses.
pub fn wait_for_tcp(addr: SocketAddr, timeout: Duration) -> bool {
    poll_until(timeout, || accepts_connections(addr))
}

/// Polls until TCP connections to `addr` fail; `false` if `timeout` elapses.
pub fn wait_for_tcp_refused(addr: SocketAddr, timeout: Duration) -> bool {
    poll_until(timeout, || !accepts_connections(addr))
}

/// Whether a TCP connection to `addr` succeeds now.
fn accepts_connections(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok()
}

/// Calls `done` every [`POLL_INTERVAL`] until it holds (`true`) or `timeout` elapses.
pub(crate) fn poll_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}
