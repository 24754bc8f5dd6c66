//! Our own service: where the git data must arrive, never a place to fetch it from.
//!
//! A GRASP server lists itself among a repository's clone URLs; a sidecar next to a
//! plain relay does too (the announcement names the service's URL). Fetching from
//! there asks ourselves for what we lack: a GRASP server has nothing yet, and a plain
//! relay answers `200` to any HTTP path, so git falls back to the dumb protocol,
//! fails after a round trip and the repository backs off. [`OwnService`] names our
//! hosts; [`candidate_urls`](super::candidate_urls) drops every clone URL on them.

use nostr::types::url::Url;

use crate::url_policy::{extract_domain, is_own_domain, CloneUrl};

/// One host of our own service.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    /// Any port of this host (as the user wrote it; compared by [`is_own_domain`]).
    Host(String),
    /// Only this port of this host (normalised as [`extract_domain`] gives it).
    HostPort {
        /// The host.
        host: String,
        /// The port.
        port: u16,
    },
}

/// Why a URL could not name one of our hosts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OwnServiceError {
    /// The URL does not parse or has no host.
    #[error("{0:?} names no host")]
    NoHost(String),
}

/// The hosts of our own service (the GRASP server, or the sidecar's own relay and
/// service URLs): clone URLs there are the destination of purgatory's fetches, never a
/// source.
///
/// - [`OwnService::with_host`]: every port of a host (`git.example.com`).
/// - [`OwnService::with_url`]: the host of a URL; with an explicit port
///   (`ws://127.0.0.1:7000`), only that port, so that another service on the same host
///   (a git server on `127.0.0.1:8000`) is still a source; without one
///   (`wss://relay.example.com`), every port of the host.
///
/// Hosts compare exactly (case-insensitive, trailing dot ignored): a subdomain or a
/// host that merely contains ours is not ours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnService {
    origins: Vec<Origin>,
}

impl OwnService {
    /// No hosts: every clone URL may be a source.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every port of `host`. An empty host is ignored.
    pub fn with_host(mut self, host: &str) -> Self {
        if !host.trim().is_empty() {
            self.origins.push(Origin::Host(host.to_owned()));
        }
        self
    }

    /// Adds the host of `url` (any scheme: `wss://`, `https://`), with its port when
    /// the URL names one.
    pub fn with_url(mut self, url: &str) -> Result<Self, OwnServiceError> {
        let no_host = || OwnServiceError::NoHost(url.to_owned());
        let parsed = Url::parse(url).map_err(|_| no_host())?;
        let host = extract_domain(url).ok_or_else(no_host)?;
        let origin = match parsed.port() {
            Some(port) => Origin::HostPort { host, port },
            None => Origin::Host(host),
        };
        self.origins.push(origin);
        Ok(self)
    }

    /// Whether no host is ours.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// Whether `url` is on our own service (then it is never fetched from).
    pub(crate) fn is_own_service(&self, url: &CloneUrl) -> bool {
        self.origins.iter().any(|origin| match origin {
            Origin::Host(host) => is_own_domain(url.as_str(), host),
            Origin::HostPort { host, port } => {
                url.domain() == host && effective_port(url.as_str()) == Some(*port)
            }
        })
    }
}

/// The port `url` connects to: the explicit one, or its scheme's default.
fn effective_port(url: &str) -> Option<u16> {
    let parsed = Url::parse(url).ok()?;
    parsed.port().or(match parsed.scheme() {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        "git" => Some(9418),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::url_policy::CloneUrlPolicy;

    fn clone_url(raw: &str) -> CloneUrl {
        CloneUrlPolicy::new()
            .allow_http(true)
            .allow_git_protocol(true)
            .allow_local_addresses(true)
            .check(raw)
            .expect("test URL passes the lenient policy")
    }

    #[test]
    fn a_url_with_a_port_names_that_port_only() {
        let own = OwnService::new()
            .with_url("ws://127.0.0.1:7000")
            .expect("has a host");
        assert!(own.is_own_service(&clone_url("http://127.0.0.1:7000/npub1x/r.git")));
        assert!(own.is_own_service(&clone_url("git://127.0.0.1:7000/r.git")));
        assert!(!own.is_own_service(&clone_url("http://127.0.0.1:8000/r.git")));
        assert!(!own.is_own_service(&clone_url("http://127.0.0.1/r.git")));
        assert!(!own.is_own_service(&clone_url("http://127.0.0.2:7000/r.git")));
    }

    #[test]
    fn a_url_without_a_port_names_every_port_of_its_host() {
        let own = OwnService::new()
            .with_url("wss://Relay.Example.com./")
            .expect("has a host");
        assert!(own.is_own_service(&clone_url("https://relay.example.com/npub1x/r.git")));
        assert!(own.is_own_service(&clone_url("http://relay.example.com:8080/r.git")));
        assert!(!own.is_own_service(&clone_url("https://git.relay.example.com/r.git")));
        assert!(!own.is_own_service(&clone_url("https://relay.example.com.evil.org/r.git")));
        // A default port written out is no explicit port.
        let own = OwnService::new()
            .with_url("https://git.example.com:443")
            .expect("has a host");
        assert!(own.is_own_service(&clone_url("https://git.example.com:8443/r.git")));
    }

    #[test]
    fn a_host_names_every_port_and_nothing_names_nothing() {
        let own = OwnService::new()
            .with_host("git.example.com")
            .with_host(" ");
        assert!(own.is_own_service(&clone_url("https://git.example.com:9/r.git")));
        assert!(!own.is_own_service(&clone_url("https://example.com/r.git")));
        assert!(!OwnService::new().is_own_service(&clone_url("https://git.example.com/r.git")));
        assert!(OwnService::new().with_host("").is_empty());
        assert_eq!(
            OwnService::new().with_url("not a url"),
            Err(OwnServiceError::NoHost("not a url".to_owned()))
        );
    }
}
