//! Name resolution for clone URLs, behind a trait the caller can replace.
//!
//! A clone URL's host is resolved once, by a [`Resolver`]; the addresses are checked and
//! git is made to connect to the checked address (see [`super::pin`]), so a name that
//! resolves to something else a moment later (DNS rebinding) changes nothing.
//! [`SystemResolver`] asks the operating system; [`StaticResolver`] answers from a fixed
//! table (tests, or names pinned by configuration).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;

/// How long [`SystemResolver`] may take for one name.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves host names to addresses (the same shape as `grasp-sync-tokio`'s resolver
/// for relays).
#[async_trait]
pub trait Resolver: Send + Sync + std::fmt::Debug {
    /// The addresses of `host` (a name, never an IP literal) at `port`, in preference
    /// order.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver (`getaddrinfo` through tokio), bounded by
/// [`RESOLVE_TIMEOUT`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let lookup = tokio::net::lookup_host((host, port));
        let addresses = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        Ok(addresses.collect())
    }
}

/// A resolver answering from a fixed table of names (compared case-insensitively,
/// without a trailing dot); names not in it do not resolve.
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    names: BTreeMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// A resolver that resolves nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolves `name` to `addresses` (replacing what it resolved to).
    pub fn with(mut self, name: &str, addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        self.names
            .insert(normalize(name), addresses.into_iter().collect());
        self
    }
}

#[async_trait]
impl Resolver for StaticResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let addresses = self.names.get(&normalize(host)).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{host} is not in the table"),
            )
        })?;
        Ok(addresses
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect())
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}
