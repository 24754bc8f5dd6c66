//! Whether a clone URL may be fetched from, and where git is to connect: the clone-URL
//! policy, then the host resolved once (through the caller's [`Resolver`]), every
//! address checked, and the URL pinned to the checked address. Spawns nothing.
//!
//! Pinning: for `http`/`https` git gets `-c http.curloptResolve=<host>:<port>:<address>`,
//! so curl connects to the checked address (and still sends the host name, for TLS and
//! virtual hosts); for `git://` the URL's host is replaced by the address. git never
//! resolves the name itself, so a name that resolves elsewhere a moment later (DNS
//! rebinding) reaches nothing. (With an `http_proxy` set, the proxy connects, and
//! guarding it is the proxy's job.)

use std::net::IpAddr;

use grasp_sync_core::url_policy::{is_forbidden_address, CloneUrl, CloneUrlPolicy};
use nostr::types::url::Url;

use super::error::GitError;
use super::resolve::Resolver;

/// A clone URL that passed the policy, with the one address git will connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedUrl {
    url: CloneUrl,
    address: IpAddr,
    git_url: String,
    curl_resolve: Option<String>,
}

impl PinnedUrl {
    /// The clone URL, normalised by the policy.
    pub fn url(&self) -> &CloneUrl {
        &self.url
    }

    /// The checked address git connects to.
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The URL as git is given it (for `git://`, the address in place of the name).
    pub fn git_url(&self) -> &str {
        &self.git_url
    }

    /// The `http.curloptResolve` entry (`<host>:<port>:<address>`) pinning an `http(s)`
    /// host name to its checked address, if the host is a name.
    pub fn curl_resolve(&self) -> Option<&str> {
        self.curl_resolve.as_deref()
    }
}

/// Checks `url` against `policy`, resolves its host once with `resolver` (IP literals
/// are not resolved) and, unless the policy allows local addresses, refuses it when any
/// address is forbidden ([`is_forbidden_address`]). Pins the URL to the first address.
pub(super) async fn check_url(
    policy: &CloneUrlPolicy,
    resolver: &dyn Resolver,
    url: &str,
) -> Result<PinnedUrl, GitError> {
    let checked = policy.check(url).map_err(|source| GitError::Policy {
        url: url.to_owned(),
        source,
    })?;
    let resolve_error = |source| GitError::Resolve {
        url: checked.as_str().to_owned(),
        source,
    };
    let (address, named) = match checked.domain().parse::<IpAddr>() {
        Ok(literal) => (literal, false),
        Err(_) => {
            let port = default_port(&checked);
            let addresses: Vec<IpAddr> = resolver
                .resolve(checked.domain(), port)
                .await
                .map_err(resolve_error)?
                .into_iter()
                .map(|address| address.ip())
                .collect();
            if !policy.allows_local_addresses() {
                if let Some(forbidden) = addresses.iter().find(|a| is_forbidden_address(**a)) {
                    return Err(GitError::ForbiddenAddress {
                        url: checked.as_str().to_owned(),
                        address: *forbidden,
                    });
                }
            }
            let first = addresses.first().copied().ok_or_else(|| {
                resolve_error(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the name has no address",
                ))
            })?;
            (first, true)
        }
    };
    pin(checked, address, named)
}

/// Points git at `address` for `url`.
fn pin(url: CloneUrl, address: IpAddr, named: bool) -> Result<PinnedUrl, GitError> {
    let malformed = |reason: &str| GitError::Resolve {
        url: url.as_str().to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, reason.to_owned()),
    };
    let mut parsed = Url::parse(url.as_str()).map_err(|_| malformed("unparsable url"))?;
    let mut curl_resolve = None;
    if parsed.scheme() == "git" {
        parsed
            .set_ip_host(address)
            .map_err(|()| malformed("cannot pin the host"))?;
    } else if named {
        let host = parsed.host_str().ok_or_else(|| malformed("no host"))?;
        let port = parsed
            .port_or_known_default()
            .ok_or_else(|| malformed("no port"))?;
        curl_resolve = Some(format!("{host}:{port}:{}", bracketed(address)));
    }
    Ok(PinnedUrl {
        git_url: parsed.to_string(),
        url,
        address,
        curl_resolve,
    })
}

/// The port `url` connects to (its own, or its scheme's default; 9418 for `git://`).
fn default_port(url: &CloneUrl) -> u16 {
    Url::parse(url.as_str())
        .ok()
        .and_then(|parsed| parsed.port_or_known_default())
        .unwrap_or(9418)
}

/// An address as curl reads it in a resolve entry (IPv6 in brackets).
fn bracketed(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::git::StaticResolver;

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14));

    fn resolver() -> StaticResolver {
        StaticResolver::new()
            .with("public.example", [PUBLIC])
            .with("rebinding.example", [PUBLIC, LOOPBACK])
            .with("six.example", [IpAddr::V6(Ipv6Addr::LOCALHOST)])
    }

    #[tokio::test]
    async fn names_resolving_to_forbidden_addresses_are_refused_unless_local_is_allowed() {
        let strict = CloneUrlPolicy::new().allow_git_protocol(true);
        for url in [
            "https://rebinding.example/r.git",
            "git://rebinding.example/r.git",
            "https://six.example/r.git",
        ] {
            let refused = check_url(&strict, &resolver(), url).await;
            assert!(
                matches!(refused, Err(GitError::ForbiddenAddress { .. })),
                "{url}: {refused:?}"
            );
        }
        let unknown = check_url(&strict, &resolver(), "https://unknown.example/r.git").await;
        assert!(
            matches!(unknown, Err(GitError::Resolve { .. })),
            "{unknown:?}"
        );
        let local = strict.allow_local_addresses(true);
        let pinned = check_url(&local, &resolver(), "https://six.example/r.git").await;
        let pinned = pinned.unwrap();
        assert_eq!(pinned.curl_resolve(), Some("six.example:443:[::1]"));
        assert_eq!(pinned.git_url(), "https://six.example/r.git");
    }

    #[tokio::test]
    async fn git_connects_to_the_checked_address() {
        let policy = CloneUrlPolicy::new()
            .allow_http(true)
            .allow_git_protocol(true);
        let https = check_url(&policy, &resolver(), "https://Public.Example/r.git").await;
        let https = https.unwrap();
        assert_eq!(https.address(), PUBLIC);
        assert_eq!(
            https.curl_resolve(),
            Some("public.example:443:93.184.215.14")
        );
        let http = check_url(&policy, &resolver(), "http://public.example:8080/r.git").await;
        assert_eq!(
            http.unwrap().curl_resolve(),
            Some("public.example:8080:93.184.215.14")
        );
        let git = check_url(&policy, &resolver(), "git://public.example/r.git").await;
        let git = git.unwrap();
        assert_eq!(git.git_url(), "git://93.184.215.14/r.git");
        assert_eq!(git.curl_resolve(), None);
        // IP literals are not resolved (the policy judged them).
        let literal = check_url(
            &policy,
            &StaticResolver::new(),
            "https://93.184.215.14/r.git",
        )
        .await;
        let literal = literal.unwrap();
        assert_eq!(literal.curl_resolve(), None);
        assert_eq!(literal.git_url(), "https://93.184.215.14/r.git");
    }
}
