//! Name resolution behind a trait the caller can replace, shared by the
//! relay connections (`grasp-sync-tokio`) and the git fetches
//! (`grasp-purgatory`): a host from a stranger's URL is resolved once, every
//! address is checked (see [`crate::url_policy`]), and the connection goes to
//! a checked address, so a name that resolves elsewhere a moment later (DNS
//! rebinding) changes nothing.
//!
//! The adapters provide the operating system's resolver; [`StaticResolver`]
//! answers from a fixed table (tests, or names pinned by configuration).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use async_trait::async_trait;

/// Resolves host names to addresses.
#[async_trait]
pub trait Resolver: Send + Sync + std::fmt::Debug {
    /// The addresses of `host` (a name, never an IP literal) at `port`, in
    /// preference order.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// A resolver answering from a fixed table of names (compared
/// case-insensitively, without a trailing dot); names not in it do not
/// resolve.
///
/// ```
/// use grasp_sync_core::resolve::{Resolver, StaticResolver};
///
/// let resolver = StaticResolver::new().with("relay.example.com", ["127.0.0.1".parse().unwrap()]);
/// let addresses = futures::executor::block_on(resolver.resolve("Relay.Example.com.", 443)).unwrap();
/// assert_eq!(addresses, vec!["127.0.0.1:443".parse().unwrap()]);
/// assert!(futures::executor::block_on(resolver.resolve("other.example.com", 443)).is_err());
/// ```
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
