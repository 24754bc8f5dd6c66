//! Policies for URLs taken from strangers' events.
//!
//! Relay URLs (from `relays` tags) and git clone URLs (from `clone` tags) are written by
//! anyone who publishes an event. Before anything connects to such a URL or hands it to
//! `git`, it goes through one of the two policies here:
//!
//! - [`RelayUrlPolicy`] normalises a relay URL with [`RelayUrl::parse`] (only
//!   `ws`/`wss`) and refuses embedded credentials and local, private or metadata addresses.
//! - [`CloneUrlPolicy`] accepts only `https` (and, when switched on, `http` or `git://`),
//!   refuses every form git would read as an option, a local path, an ssh address or a
//!   transport helper (`ext::`, `fd::`, ...), and applies the same address rules. The
//!   accepted [`CloneUrl`] holds the `url` crate's serialization, which is what git is given.
//!
//! # The checks are syntactic
//!
//! Hosts are judged by what the URL says: an IP address literal (in any of the numeric
//! forms the URL standard accepts, such as `2130706433` or `0x7f.1` for special schemes,
//! and IPv4-mapped IPv6 such as `::ffff:127.0.0.1`) or a host name. A domain name that
//! *resolves* to a private address is not caught here: the adapter that connects must check
//! the resolved address (with [`is_forbidden_address`]) at connect time.
//!
//! Both policies are strict by default; [`RelayUrlPolicy::allow_local_addresses`] and
//! [`CloneUrlPolicy::allow_local_addresses`] open loopback and private addresses for tests
//! and demos, and `allow_host` lets one exact host through the address checks.

use std::net::IpAddr;

use nostr::types::url::{Host, Url};
use nostr::types::RelayUrl;

mod address;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use address::is_forbidden_address;
use address::AddressRules;

/// The longest URL, in bytes, that either policy accepts.
pub const MAX_URL_LEN: usize = 2048;

/// The longest piece of hostile input (a scheme, a host) copied into an error.
const MAX_ERROR_TEXT_LEN: usize = 128;

/// Why a URL was refused by [`RelayUrlPolicy`] or [`CloneUrlPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlPolicyError {
    /// The URL is longer than [`MAX_URL_LEN`] bytes.
    #[error("url is {len} bytes long, more than the {max} allowed")]
    TooLong {
        /// Length of the URL in bytes.
        len: usize,
        /// The limit that was exceeded.
        max: usize,
    },
    /// The URL starts with `-`, which git would read as a command-line option.
    #[error("url starts with '-', which git would read as an option")]
    LeadingDash,
    /// The URL contains ASCII whitespace or a control character.
    #[error("url contains whitespace or a control character at byte {index}")]
    ControlOrWhitespace {
        /// Byte offset of the first offending character.
        index: usize,
    },
    /// The URL has git's `<transport>::<address>` form, which runs a transport helper.
    #[error("url uses git's transport-helper form '{transport}::<address>'")]
    TransportHelper {
        /// The part before `::` (shortened if long).
        transport: String,
    },
    /// The URL is an scp-like ssh address (`user@host:path`), which git runs ssh for.
    #[error("url is an scp-like ssh address ('user@host:path')")]
    ScpLike,
    /// The URL has no `<scheme>://` prefix (git would take it as a local path).
    #[error("url has no '<scheme>://' prefix")]
    MissingScheme,
    /// The URL could not be parsed.
    #[error("url is malformed: {reason}")]
    Malformed {
        /// What the parser said.
        reason: String,
    },
    /// The URL's scheme is not one the policy allows.
    #[error("url scheme '{scheme}' is not allowed")]
    UnsupportedScheme {
        /// The scheme found (lowercase, shortened if long).
        scheme: String,
    },
    /// The URL embeds a user name or a password.
    #[error("url embeds credentials")]
    EmbeddedCredentials,
    /// The URL has no host.
    #[error("url has no host")]
    MissingHost,
    /// The URL's host is not a valid host name or address.
    #[error("url host '{host}' is not a valid host")]
    InvalidHost {
        /// The host found (shortened if long).
        host: String,
    },
    /// The URL's host starts with `-`, which ssh or other tools could read as an option.
    #[error("url host '{host}' starts with '-'")]
    HostStartsWithDash {
        /// The host found (shortened if long).
        host: String,
    },
    /// The URL's host is a loopback, private, link-local, multicast, metadata or otherwise
    /// non-public IP address.
    #[error("url host is the forbidden address {address}")]
    ForbiddenAddress {
        /// The address the URL names.
        address: IpAddr,
    },
    /// The URL's host name is reserved for local or cloud-metadata services
    /// (`localhost`, `*.localhost`, `*.local`, `*.internal`, `metadata`, single-label names).
    #[error("url host '{host}' names a local or metadata service")]
    ForbiddenHostName {
        /// The host found (lowercase, shortened if long).
        host: String,
    },
}

/// Checks that a relay URL from a stranger's event may be connected to.
///
/// Strict by default: only `ws`/`wss` (as [`RelayUrl`] enforces), no credentials, no
/// loopback, private, link-local, shared (CGNAT), multicast, broadcast or metadata
/// addresses, no local host names. The checks are syntactic (see the module docs).
/// `check("wss://relay.example.com")` passes, `check("ws://127.0.0.1:7777")` does not
/// unless [`Self::allow_local_addresses`] is on.
#[derive(Clone, Debug, Default)]
pub struct RelayUrlPolicy {
    address_rules: AddressRules,
}

impl RelayUrlPolicy {
    /// A strict policy: public `ws`/`wss` hosts only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets loopback, private, link-local and other local addresses and names through
    /// (for tests and demos on one machine).
    pub fn allow_local_addresses(mut self, allow: bool) -> Self {
        self.address_rules.allow_local_addresses = allow;
        self
    }

    /// Lets this exact host (compared case-insensitively, trailing dot ignored, IPv6 with
    /// or without brackets) through the address checks.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.address_rules.allow(host.into());
        self
    }

    /// Parses and normalises `url` with [`RelayUrl::parse`], then checks it.
    pub fn check(&self, url: &str) -> Result<RelayUrl, UrlPolicyError> {
        check_length(url)?;
        let relay_url = parse_relay_url(url)?;
        self.check_relay_url(&relay_url)?;
        Ok(relay_url)
    }

    /// Checks an already parsed relay URL.
    pub fn check_relay_url(&self, url: &RelayUrl) -> Result<(), UrlPolicyError> {
        let url: &Url = url.into();
        check_length(url.as_str())?;
        check_relay_scheme(url.scheme())?;
        check_no_credentials(url)?;
        let host = effective_host(url)?;
        self.address_rules.check(&host)
    }
}

/// Checks that a git clone URL from a stranger's event may be handed to git.
///
/// Strict by default: `https` only, no local addresses. Refuses option-like URLs (a leading
/// `-`), whitespace and control characters, transport helpers (`ext::`, `fd::`, any
/// `<transport>::<address>`), `file:`, `ssh://`, scp-like `user@host:path`, embedded
/// credentials, URLs longer than [`MAX_URL_LEN`] bytes, hosts starting with `-`, and the
/// same addresses as [`RelayUrlPolicy`]. The checks are syntactic (see the module docs).
/// `check("HTTPS://Example.COM/r.git")` gives `https://example.com/r.git`;
/// `ext::sh -c ...` and `git@github.com:a/b.git` are refused.
#[derive(Clone, Debug, Default)]
pub struct CloneUrlPolicy {
    allow_http: bool,
    allow_git_protocol: bool,
    address_rules: AddressRules,
}

impl CloneUrlPolicy {
    /// A strict policy: `https` to public hosts only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also accepts plain `http://` URLs.
    pub fn allow_http(mut self, allow: bool) -> Self {
        self.allow_http = allow;
        self
    }

    /// Also accepts `git://` URLs (unauthenticated, unencrypted: for tests only).
    pub fn allow_git_protocol(mut self, allow: bool) -> Self {
        self.allow_git_protocol = allow;
        self
    }

    /// Lets loopback, private, link-local and other local addresses and names through
    /// (for tests and demos on one machine).
    pub fn allow_local_addresses(mut self, allow: bool) -> Self {
        self.address_rules.allow_local_addresses = allow;
        self
    }

    /// Lets this exact host (compared case-insensitively, trailing dot ignored, IPv6 with
    /// or without brackets) through the address checks.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.address_rules.allow(host.into());
        self
    }

    /// Whether plain `http://` URLs are accepted.
    pub fn allows_http(&self) -> bool {
        self.allow_http
    }

    /// Whether local, loopback and private addresses are accepted.
    pub fn allows_local_addresses(&self) -> bool {
        self.address_rules.allow_local_addresses
    }

    /// Whether `git://` URLs are accepted.
    pub fn allows_git_protocol(&self) -> bool {
        self.allow_git_protocol
    }

    /// Checks `url` and returns the normalised URL git is to be given.
    pub fn check(&self, url: &str) -> Result<CloneUrl, UrlPolicyError> {
        check_length(url)?;
        check_no_leading_dash(url)?;
        check_not_transport_helper(url)?;
        check_no_control_or_whitespace(url)?;
        check_has_scheme_separator(url)?;
        let parsed = Url::parse(url).map_err(|error| malformed(&error))?;
        self.check_scheme(parsed.scheme())?;
        check_no_credentials(&parsed)?;
        let host = effective_host(&parsed)?;
        check_host_not_option_like(&host)?;
        self.address_rules.check(&host)?;
        check_length(parsed.as_str())?;
        Ok(CloneUrl {
            url: parsed.as_str().to_owned(),
            domain: host_key(&host),
        })
    }

    fn check_scheme(&self, scheme: &str) -> Result<(), UrlPolicyError> {
        let allowed = match scheme {
            "https" => true,
            "http" => self.allow_http,
            "git" => self.allow_git_protocol,
            _ => false,
        };
        if allowed {
            Ok(())
        } else {
            Err(unsupported_scheme(scheme))
        }
    }
}

/// A git clone URL that passed a [`CloneUrlPolicy`].
///
/// Holds the `url` crate's serialization of the parsed URL (scheme and host lowercased,
/// numeric IPv4 forms written as dotted quads), which is the string to give git.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CloneUrl {
    url: String,
    domain: String,
}

impl CloneUrl {
    /// The normalised URL, as git is to be given it.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The URL's host as [`extract_domain`] gives it (lowercase, no port, no trailing dot,
    /// IPv6 without brackets): the key for per-domain throttling.
    pub fn domain(&self) -> &str {
        &self.domain
    }
}

impl std::fmt::Display for CloneUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// The host of `url`: lowercase, without port or trailing dot, IPv6 without brackets,
/// numeric IPv4 forms written as dotted quads.
///
/// Returns `None` when the URL does not parse or has no host (scp-like `user@host:path`
/// addresses are not URLs and give `None`).
pub fn extract_domain(url: &str) -> Option<String> {
    let parsed = Url::parse(url).ok()?;
    let host = effective_host(&parsed).ok()?;
    Some(host_key(&host)).filter(|key| !key.is_empty())
}

/// Whether `url`'s host is exactly `own_domain` (case-insensitive, trailing dot ignored).
///
/// This is host equality, not substring matching: `https://evil-example.com/x`,
/// `https://example.com.evil.net/` and `https://evil.net/example.com` are not
/// `example.com`. The port is ignored.
pub(crate) fn is_own_domain(url: &str, own_domain: &str) -> bool {
    let Some(own) = normalize_host_input(own_domain) else {
        return false;
    };
    extract_domain(url).is_some_and(|host| host == own)
}

/// The host of `url` as a special-scheme host.
///
/// For special schemes (`http`, `https`, `ws`, `wss`) the `url` crate has already parsed
/// the host. For other schemes (`git`) the host is opaque, so it is parsed again the way
/// a special scheme (and the system resolver) would read it: `git://2130706433/` is
/// `127.0.0.1`.
fn effective_host(url: &Url) -> Result<Host<String>, UrlPolicyError> {
    match url.host() {
        None => Err(UrlPolicyError::MissingHost),
        Some(Host::Domain("")) => Err(UrlPolicyError::MissingHost),
        Some(Host::Domain(name)) => Host::parse(name).map_err(|_| invalid_host(name)),
        Some(Host::Ipv4(ip)) => Ok(Host::Ipv4(ip)),
        Some(Host::Ipv6(ip)) => Ok(Host::Ipv6(ip)),
    }
}

/// The comparable text of a host: lowercase, no trailing dot, IPv6 without brackets.
fn host_key(host: &Host<String>) -> String {
    match host {
        Host::Domain(name) => normalize_domain(name),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => ip.to_string(),
    }
}

/// Lowercases a domain and drops its trailing dots (`LocalHost..` is `localhost`).
fn normalize_domain(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Turns a host given by the library's user (an allow-list entry, the own domain) into
/// the form [`host_key`] produces. `None` for an empty host.
fn normalize_host_input(host: &str) -> Option<String> {
    let trimmed = host.trim();
    let unbracketed = trimmed
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(trimmed);
    if unbracketed.is_empty() {
        return None;
    }
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    match Host::parse(unbracketed) {
        Ok(host) => Some(host_key(&host)),
        Err(_) => Some(normalize_domain(unbracketed)),
    }
}

fn check_length(url: &str) -> Result<(), UrlPolicyError> {
    if url.len() > MAX_URL_LEN {
        Err(UrlPolicyError::TooLong {
            len: url.len(),
            max: MAX_URL_LEN,
        })
    } else {
        Ok(())
    }
}

fn check_no_leading_dash(url: &str) -> Result<(), UrlPolicyError> {
    if url.starts_with('-') {
        Err(UrlPolicyError::LeadingDash)
    } else {
        Ok(())
    }
}

/// Refuses git's `<transport>::<address>` form (`ext::`, `fd::`, any helper).
///
/// Any `::` before the first `/` counts, so that IPv6 hosts (`https://[::1]/`) are not
/// mistaken for it while every helper prefix is.
fn check_not_transport_helper(url: &str) -> Result<(), UrlPolicyError> {
    let before_path = url.split('/').next().unwrap_or(url);
    match before_path.find("::") {
        Some(at) => Err(UrlPolicyError::TransportHelper {
            transport: clip(&before_path[..at]),
        }),
        None => Ok(()),
    }
}

fn check_no_control_or_whitespace(url: &str) -> Result<(), UrlPolicyError> {
    let offending = url
        .char_indices()
        .find(|(_, c)| c.is_ascii_whitespace() || c.is_control());
    match offending {
        Some((index, _)) => Err(UrlPolicyError::ControlOrWhitespace { index }),
        None => Ok(()),
    }
}

/// Refuses strings git would not read as a URL: scp-like `[user@]host:path` addresses
/// (a `:` before any `/`) and local paths.
fn check_has_scheme_separator(url: &str) -> Result<(), UrlPolicyError> {
    if url.contains("://") {
        return Ok(());
    }
    let before_path = url.split('/').next().unwrap_or(url);
    if before_path.contains(':') {
        Err(UrlPolicyError::ScpLike)
    } else {
        Err(UrlPolicyError::MissingScheme)
    }
}

fn check_relay_scheme(scheme: &str) -> Result<(), UrlPolicyError> {
    match scheme {
        "ws" | "wss" => Ok(()),
        other => Err(unsupported_scheme(other)),
    }
}

fn check_no_credentials(url: &Url) -> Result<(), UrlPolicyError> {
    if url.username().is_empty() && url.password().is_none() {
        Ok(())
    } else {
        Err(UrlPolicyError::EmbeddedCredentials)
    }
}

fn check_host_not_option_like(host: &Host<String>) -> Result<(), UrlPolicyError> {
    let key = host_key(host);
    if key.starts_with('-') {
        Err(UrlPolicyError::HostStartsWithDash { host: clip(&key) })
    } else {
        Ok(())
    }
}

/// Parses with [`RelayUrl::parse`]; on failure tells an unsupported scheme apart from a
/// malformed URL.
fn parse_relay_url(url: &str) -> Result<RelayUrl, UrlPolicyError> {
    RelayUrl::parse(url).map_err(|error| match Url::parse(url) {
        Ok(parsed) if !matches!(parsed.scheme(), "ws" | "wss") => {
            unsupported_scheme(parsed.scheme())
        }
        _ => malformed(&error),
    })
}

fn malformed(error: &dyn std::fmt::Display) -> UrlPolicyError {
    UrlPolicyError::Malformed {
        reason: clip(&error.to_string()),
    }
}

fn unsupported_scheme(scheme: &str) -> UrlPolicyError {
    UrlPolicyError::UnsupportedScheme {
        scheme: clip(scheme),
    }
}

fn invalid_host(host: &str) -> UrlPolicyError {
    UrlPolicyError::InvalidHost { host: clip(host) }
}

/// Shortens hostile text copied into an error to at most [`MAX_ERROR_TEXT_LEN`] bytes,
/// cut at a character boundary.
fn clip(text: &str) -> String {
    if text.len() <= MAX_ERROR_TEXT_LEN {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_TEXT_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
