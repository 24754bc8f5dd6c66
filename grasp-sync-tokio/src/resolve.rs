//! Resolving a relay's host once, checking every address it resolves to with
//! the relay policy, and connecting to a checked address: nothing resolves
//! the name a second time (no DNS rebinding between the check and the
//! connect), for the WebSocket and the NIP-11 request alike.
//!
//! Name resolution goes through a [`Resolver`] (the core's trait, shared
//! with purgatory's git fetches) the caller can replace
//! ([`SyncManagerBuilder::resolver`](crate::SyncManagerBuilder::resolver));
//! the system resolver is the default.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use grasp_sync_core::engine::Identity;
pub use grasp_sync_core::resolve::{Resolver, StaticResolver};
use grasp_sync_core::url_policy::UrlPolicyError;
use nostr::prelude::RelayUrl;
use nostr::types::url::{Host, Url};
use tokio::net::TcpStream;

/// The operating system's resolver (`getaddrinfo`, through tokio).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// Why no checked connection could be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The URL has no host or port we can connect to.
    #[error("relay url has no usable host")]
    NoHost,
    /// The name did not resolve.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// Every address the host resolved to was refused by the relay policy.
    #[error("refused: {0}")]
    Refused(UrlPolicyError),
    /// No checked address accepted a TCP connection.
    #[error("connect failed: {0}")]
    Connect(std::io::Error),
    /// No checked address answered within the timeout.
    #[error("connect timed out")]
    Timeout,
}

/// How a relay's address is found and checked: the resolver, and the
/// identity with the relay policy and the relays the operator configured
/// (own and bootstrap relays, [`Identity::is_configured_relay`]), which are
/// resolved the same way but not checked.
#[derive(Clone, Debug)]
pub(crate) struct AddressCheck {
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) identity: Arc<Identity>,
}

impl AddressCheck {
    /// The addresses of `relay` a connection may use, in the resolver's
    /// order.
    pub(crate) async fn addresses(&self, relay: &RelayUrl) -> Result<Vec<SocketAddr>, DialError> {
        let url: &Url = relay.into();
        let port = url.port_or_known_default().ok_or(DialError::NoHost)?;
        let resolved = match url.host().ok_or(DialError::NoHost)? {
            Host::Ipv4(ip) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
            Host::Ipv6(ip) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
            Host::Domain(name) => self
                .resolver
                .resolve(name.trim_end_matches('.'), port)
                .await
                .map_err(|source| DialError::Resolve {
                    host: name.to_owned(),
                    source,
                })?,
        };
        if self.identity.is_configured_relay(relay) {
            return Ok(resolved);
        }
        let policy = &self.identity.relay_policy;
        let mut refusal = None;
        let allowed: Vec<SocketAddr> = resolved
            .into_iter()
            .filter(
                |address| match policy.check_resolved_address(relay, address.ip()) {
                    Ok(()) => true,
                    Err(error) => {
                        refusal.get_or_insert(error);
                        false
                    }
                },
            )
            .collect();
        match (allowed.is_empty(), refusal) {
            (true, Some(error)) => Err(DialError::Refused(error)),
            (true, None) => Err(DialError::Resolve {
                host: url.host_str().unwrap_or_default().to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
            }),
            (false, _) => Ok(allowed),
        }
    }

    /// A TCP connection (Nagle off) to the first checked address of
    /// `relay` that answers within `timeout`.
    pub(crate) async fn connect(
        &self,
        relay: &RelayUrl,
        timeout: Duration,
    ) -> Result<TcpStream, DialError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let addresses = tokio::time::timeout_at(deadline, self.addresses(relay))
            .await
            .map_err(|_| DialError::Timeout)??;
        let mut last = DialError::Timeout;
        for address in addresses {
            match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
                Ok(Ok(stream)) => {
                    // Nagle off: a REQ written right after another would
                    // otherwise wait for the delayed ACK (~40 ms each).
                    stream.set_nodelay(true).map_err(DialError::Connect)?;
                    return Ok(stream);
                }
                Ok(Err(error)) => last = DialError::Connect(error),
                Err(_) => return Err(DialError::Timeout),
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_sync_core::url_policy::RelayUrlPolicy;

    fn check(policy: RelayUrlPolicy, trusted: &[&RelayUrl]) -> AddressCheck {
        let mut identity = Identity::default();
        identity.relay_policy = policy;
        identity.bootstrap_relays = trusted.iter().map(|relay| (*relay).clone()).collect();
        AddressCheck {
            resolver: Arc::new(
                StaticResolver::new()
                    .with("relay.example.com", [IpAddr::from([127, 0, 0, 1])])
                    .with(
                        "mixed.example.com",
                        [
                            IpAddr::from([10, 0, 0, 1]),
                            IpAddr::from([93, 184, 216, 34]),
                        ],
                    ),
            ),
            identity: Arc::new(identity),
        }
    }

    #[tokio::test]
    async fn a_public_name_resolving_to_loopback_is_refused() {
        let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
        let error = check(RelayUrlPolicy::new(), &[])
            .addresses(&relay)
            .await
            .unwrap_err();
        assert!(matches!(
            error,
            DialError::Refused(UrlPolicyError::ForbiddenAddress { .. })
        ));
        let local = check(RelayUrlPolicy::new().allow_local_addresses(true), &[]);
        assert_eq!(local.addresses(&relay).await.unwrap().len(), 1);
        let trusted = check(RelayUrlPolicy::new(), &[&relay]);
        assert_eq!(trusted.addresses(&relay).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn only_the_checked_addresses_of_a_name_are_used() {
        let relay = RelayUrl::parse("wss://mixed.example.com:7777").unwrap();
        let addresses = check(RelayUrlPolicy::new(), &[])
            .addresses(&relay)
            .await
            .unwrap();
        assert_eq!(
            addresses,
            vec![SocketAddr::from(([93, 184, 216, 34], 7777))]
        );
    }

    #[tokio::test]
    async fn unknown_names_and_ip_literals() {
        let unknown = RelayUrl::parse("wss://unknown.example.com").unwrap();
        let check = check(RelayUrlPolicy::new(), &[]);
        assert!(matches!(
            check.addresses(&unknown).await,
            Err(DialError::Resolve { .. })
        ));
        let literal = RelayUrl::parse("ws://127.0.0.1:7000").unwrap();
        assert!(matches!(
            check.addresses(&literal).await,
            Err(DialError::Refused(_))
        ));
    }
}
