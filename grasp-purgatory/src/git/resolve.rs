//! Name resolution for clone URLs, behind a trait the caller can replace.
//!
//! A clone URL's host is resolved once, by a [`Resolver`]; the addresses are checked and
//! git is made to connect to the checked address (see [`super::pin`]), so a name that
//! resolves to something else a moment later (DNS rebinding) changes nothing.
//! [`SystemResolver`] asks the operating system; [`StaticResolver`] (the core's, shared
//! with the relay connections) answers from a fixed table (tests, or names pinned by
//! configuration).

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
pub use grasp_sync_core::resolve::{Resolver, StaticResolver};

/// How long [`SystemResolver`] may take for one name.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

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
