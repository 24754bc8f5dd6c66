//! Loopback ports for tests that start servers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};

/// A port of 127.0.0.1 that was free a moment ago (bound to port 0, read,
/// released). Another process may take it before the caller binds: retry on
/// failure, or use it for a port where nothing must listen.
pub fn free_port() -> u16 {
    free_port_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// [`free_port`] on `ip`.
pub fn free_port_on(ip: IpAddr) -> u16 {
    TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|e| panic!("binding {ip}:0: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound() {
        let port = free_port();
        assert_ne!(port, 0);
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}
