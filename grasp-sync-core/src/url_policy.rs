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

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nostr::types::url::{Host, Url};
use nostr::types::RelayUrl;

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
pub fn is_own_domain(url: &str, own_domain: &str) -> bool {
    let Some(own) = normalize_host_input(own_domain) else {
        return false;
    };
    extract_domain(url).is_some_and(|host| host == own)
}

/// Whether `ip` is an address no URL from a stranger may point at.
///
/// IPv4: `0.0.0.0/8` (incl. unspecified), loopback `127/8`, private `10/8`, `172.16/12`,
/// `192.168/16`, link-local `169.254/16` (incl. the `169.254.169.254` metadata service),
/// shared/CGNAT `100.64/10` (incl. `100.100.100.200`), multicast `224/4`, reserved `240/4`
/// (incl. broadcast `255.255.255.255`).
///
/// IPv6: unspecified `::`, loopback `::1`, link-local `fe80::/10`, site-local `fec0::/10`,
/// unique-local `fc00::/7` (incl. the `fd00:ec2::254` metadata service), multicast
/// `ff00::/8`, and IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`) and NAT64
/// (`64:ff9b::a.b.c.d`) forms of any forbidden IPv4 address.
///
/// Adapters should also apply this to the addresses a host name resolves to.
pub fn is_forbidden_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_ipv4(v4),
        IpAddr::V6(v6) => is_forbidden_ipv6(v6),
    }
}

fn is_forbidden_ipv4(ip: Ipv4Addr) -> bool {
    let [first, second, ..] = ip.octets();
    let this_network = first == 0;
    let shared_cgnat = first == 100 && (64..=127).contains(&second);
    let reserved_class_e = first >= 240;
    this_network
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || shared_cgnat
        || ip.is_multicast()
        || reserved_class_e
}

fn is_forbidden_ipv6(ip: Ipv6Addr) -> bool {
    if let Some(embedded) = embedded_ipv4(ip) {
        return is_forbidden_ipv4(embedded);
    }
    let first_segment = ip.segments()[0];
    let link_local = first_segment & 0xffc0 == 0xfe80;
    let site_local = first_segment & 0xffc0 == 0xfec0;
    let unique_local = first_segment & 0xfe00 == 0xfc00;
    ip.is_unspecified()
        || ip.is_loopback()
        || link_local
        || site_local
        || unique_local
        || ip.is_multicast()
}

/// The IPv4 address carried by an IPv4-mapped, IPv4-compatible or NAT64 IPv6 address.
///
/// `::` and `::1` are left to the IPv6 rules (they are forbidden there too).
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if ip.is_unspecified() || ip.is_loopback() {
        return None;
    }
    let segments = ip.segments();
    let low = Ipv4Addr::new(
        (segments[6] >> 8) as u8,
        segments[6] as u8,
        (segments[7] >> 8) as u8,
        segments[7] as u8,
    );
    let mapped_or_compatible = segments[..5] == [0; 5] && matches!(segments[5], 0 | 0xffff);
    let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (mapped_or_compatible || nat64).then_some(low)
}

/// The address rules shared by both policies.
#[derive(Clone, Debug, Default)]
struct AddressRules {
    allow_local_addresses: bool,
    allowed_hosts: BTreeSet<String>,
}

impl AddressRules {
    fn allow(&mut self, host: String) {
        if let Some(key) = normalize_host_input(&host) {
            self.allowed_hosts.insert(key);
        }
    }

    fn check(&self, host: &Host<String>) -> Result<(), UrlPolicyError> {
        if self.allow_local_addresses || self.allowed_hosts.contains(&host_key(host)) {
            return Ok(());
        }
        match host {
            Host::Ipv4(ip) => check_address(IpAddr::V4(*ip)),
            Host::Ipv6(ip) => check_address(IpAddr::V6(*ip)),
            Host::Domain(name) => check_host_name(&normalize_domain(name)),
        }
    }
}

fn check_address(address: IpAddr) -> Result<(), UrlPolicyError> {
    if is_forbidden_address(address) {
        Err(UrlPolicyError::ForbiddenAddress { address })
    } else {
        Ok(())
    }
}

/// Refuses names reserved for the local machine, the local network or cloud metadata.
///
/// Single-label names (no dot) are refused too: they resolve through the local search
/// domains (`metadata`, `intranet`, docker service names), never to a public host.
fn check_host_name(name: &str) -> Result<(), UrlPolicyError> {
    const LOCAL_SUFFIXES: [&str; 4] = [".localhost", ".local", ".internal", ".home.arpa"];
    let single_label = !name.contains('.');
    let local_suffix = LOCAL_SUFFIXES.iter().any(|suffix| name.ends_with(suffix));
    if single_label || local_suffix || name == "home.arpa" {
        Err(UrlPolicyError::ForbiddenHostName { host: clip(name) })
    } else {
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strict_clone() -> CloneUrlPolicy {
        CloneUrlPolicy::new()
    }

    fn clone_err(url: &str) -> UrlPolicyError {
        match strict_clone().check(url) {
            Ok(accepted) => panic!("{url} was accepted as {accepted}"),
            Err(error) => error,
        }
    }

    fn relay_err(url: &str) -> UrlPolicyError {
        match RelayUrlPolicy::new().check(url) {
            Ok(accepted) => panic!("{url} was accepted as {accepted}"),
            Err(error) => error,
        }
    }

    fn is_forbidden_address_error(error: &UrlPolicyError) -> bool {
        matches!(error, UrlPolicyError::ForbiddenAddress { .. })
    }

    // ---- clone URLs: accepted forms -------------------------------------------------

    #[test]
    fn clone_accepts_public_https_and_normalises_case() {
        let url = strict_clone().check("HTTPS://Example.COM/r.git").unwrap();
        assert_eq!(url.as_str(), "https://example.com/r.git");
        assert_eq!(url.domain(), "example.com");
    }

    #[test]
    fn clone_accepts_port_and_keeps_it_out_of_the_domain() {
        let url = strict_clone()
            .check("https://git.example.org:8443/a/b.git")
            .unwrap();
        assert_eq!(url.as_str(), "https://git.example.org:8443/a/b.git");
        assert_eq!(url.domain(), "git.example.org");
    }

    #[test]
    fn clone_accepts_public_ip_addresses() {
        assert!(strict_clone().check("https://8.8.8.8/r.git").is_ok());
        let v6 = strict_clone().check("https://[2001:db8::1]/r.git").unwrap();
        assert_eq!(v6.domain(), "2001:db8::1");
    }

    #[test]
    fn clone_domain_drops_trailing_dot() {
        let url = strict_clone().check("https://example.com./r.git").unwrap();
        assert_eq!(url.domain(), "example.com");
    }

    // ---- clone URLs: schemes ----------------------------------------------------------

    #[test]
    fn clone_refuses_http_unless_allowed() {
        assert_eq!(
            clone_err("http://example.com/r.git"),
            UrlPolicyError::UnsupportedScheme {
                scheme: "http".into()
            }
        );
        let policy = CloneUrlPolicy::new().allow_http(true);
        assert!(policy.check("http://example.com/r.git").is_ok());
    }

    #[test]
    fn clone_refuses_git_protocol_unless_allowed() {
        assert!(matches!(
            clone_err("git://example.com/r.git"),
            UrlPolicyError::UnsupportedScheme { .. }
        ));
        let policy = CloneUrlPolicy::new().allow_git_protocol(true);
        let url = policy.check("git://Example.com/r.git").unwrap();
        assert_eq!(url.domain(), "example.com");
    }

    #[test]
    fn git_protocol_host_is_read_as_the_resolver_would() {
        let policy = CloneUrlPolicy::new().allow_git_protocol(true);
        for url in ["git://2130706433/r", "git://0x7f.1/r", "git://127.0.0.1/r"] {
            let error = policy.check(url).unwrap_err();
            assert!(is_forbidden_address_error(&error), "{url}: {error:?}");
        }
        assert!(policy.check("git://[::1]/r").is_err());
    }

    #[test]
    fn clone_refuses_file_urls() {
        assert_eq!(
            clone_err("file:///etc"),
            UrlPolicyError::UnsupportedScheme {
                scheme: "file".into()
            }
        );
        assert!(strict_clone().check("file:/etc/passwd").is_err());
    }

    #[test]
    fn clone_refuses_ssh_urls() {
        assert_eq!(
            clone_err("ssh://host/x"),
            UrlPolicyError::UnsupportedScheme {
                scheme: "ssh".into()
            }
        );
        assert!(strict_clone().check("git+ssh://host/x").is_err());
        assert!(strict_clone().check("ssh+git://host/x").is_err());
    }

    #[test]
    fn clone_refuses_scp_like_addresses() {
        assert_eq!(clone_err("git@github.com:a/b.git"), UrlPolicyError::ScpLike);
        assert_eq!(clone_err("github.com:a/b.git"), UrlPolicyError::ScpLike);
        assert_eq!(
            clone_err("https:example.com/r.git"),
            UrlPolicyError::ScpLike
        );
    }

    #[test]
    fn clone_refuses_local_paths() {
        assert_eq!(clone_err("/srv/git/r.git"), UrlPolicyError::MissingScheme);
        assert_eq!(clone_err("../r.git"), UrlPolicyError::MissingScheme);
    }

    // ---- clone URLs: injection forms --------------------------------------------------

    #[test]
    fn clone_refuses_ext_transport() {
        assert_eq!(
            clone_err("ext::sh -c touch% /tmp/pwned"),
            UrlPolicyError::TransportHelper {
                transport: "ext".into()
            }
        );
    }

    #[test]
    fn clone_refuses_fd_and_other_transport_helpers() {
        assert!(matches!(
            clone_err("fd::17"),
            UrlPolicyError::TransportHelper { .. }
        ));
        assert!(matches!(
            clone_err("https::example.com/r.git"),
            UrlPolicyError::TransportHelper { .. }
        ));
        assert!(matches!(
            clone_err("persistent-https::x"),
            UrlPolicyError::TransportHelper { .. }
        ));
    }

    #[test]
    fn ipv6_hosts_are_not_mistaken_for_transport_helpers() {
        let policy = CloneUrlPolicy::new();
        assert!(policy.check("https://[2001:db8::1]/r.git").is_ok());
    }

    #[test]
    fn clone_refuses_leading_dash() {
        assert_eq!(
            clone_err("--upload-pack=touch /tmp/x"),
            UrlPolicyError::LeadingDash
        );
        assert_eq!(clone_err("-uhttps://x"), UrlPolicyError::LeadingDash);
    }

    #[test]
    fn clone_refuses_host_starting_with_dash() {
        assert_eq!(
            clone_err("https://-oProxyCommand=x/"),
            UrlPolicyError::HostStartsWithDash {
                host: "-oproxycommand=x".into()
            }
        );
    }

    #[test]
    fn host_dash_rule_holds_even_for_allowed_hosts() {
        let policy = CloneUrlPolicy::new().allow_host("-evil.example.com");
        assert!(matches!(
            policy.check("https://-evil.example.com/r"),
            Err(UrlPolicyError::HostStartsWithDash { .. })
        ));
    }

    #[test]
    fn clone_refuses_whitespace_and_control_characters_anywhere() {
        for url in [
            "https://example.com/a b.git",
            "https://example.com/a\tb.git",
            "https://example.com/a\nb.git",
            "https://example.com/a\rb.git",
            "https://example.com/a\u{0}b.git",
            "https://example.com/a\u{7f}b.git",
            "https://example.com/a\u{85}b.git",
            " https://example.com/r.git",
            "https://example.com/r.git\n",
        ] {
            assert!(
                matches!(clone_err(url), UrlPolicyError::ControlOrWhitespace { .. }),
                "{url:?}"
            );
        }
    }

    #[test]
    fn control_character_error_names_its_position() {
        assert_eq!(
            clone_err("https://x.com/\u{1}"),
            UrlPolicyError::ControlOrWhitespace { index: 14 }
        );
    }

    #[test]
    fn clone_refuses_embedded_credentials() {
        assert_eq!(
            clone_err("https://user:pw@example.com/x"),
            UrlPolicyError::EmbeddedCredentials
        );
        assert_eq!(
            clone_err("https://user@example.com/x"),
            UrlPolicyError::EmbeddedCredentials
        );
        assert_eq!(
            clone_err("https://:pw@example.com/x"),
            UrlPolicyError::EmbeddedCredentials
        );
    }

    #[test]
    fn clone_refuses_urls_longer_than_the_limit() {
        let prefix = "https://example.com/";
        let at_limit = format!("{prefix}{}", "a".repeat(MAX_URL_LEN - prefix.len()));
        assert!(strict_clone().check(&at_limit).is_ok());
        let over = format!("{at_limit}a");
        assert_eq!(
            clone_err(&over),
            UrlPolicyError::TooLong {
                len: MAX_URL_LEN + 1,
                max: MAX_URL_LEN
            }
        );
    }

    #[test]
    fn clone_refuses_serialization_longer_than_the_limit() {
        // Each non-ASCII char is percent-encoded to 6 bytes by the serializer.
        let url = format!("https://example.com/{}", "é".repeat(500));
        assert!(url.len() <= MAX_URL_LEN);
        assert!(matches!(clone_err(&url), UrlPolicyError::TooLong { .. }));
    }

    #[test]
    fn clone_refuses_missing_host() {
        // Special schemes skip extra slashes: the host is `r.git`, and git gets that form.
        let normalised = strict_clone().check("https:///r.git").unwrap();
        assert_eq!(normalised.as_str(), "https://r.git/");
        let policy = CloneUrlPolicy::new().allow_git_protocol(true);
        assert_eq!(
            policy.check("git:///r.git"),
            Err(UrlPolicyError::MissingHost)
        );
    }

    #[test]
    fn clone_refuses_malformed_urls() {
        assert!(matches!(
            clone_err("https://exa mple.com"),
            UrlPolicyError::ControlOrWhitespace { .. }
        ));
        assert!(matches!(
            clone_err("https://[::1/r"),
            UrlPolicyError::Malformed { .. }
        ));
    }

    // ---- addresses ------------------------------------------------------------------

    #[test]
    fn clone_refuses_mapped_loopback() {
        let policy = CloneUrlPolicy::new().allow_http(true);
        assert!(is_forbidden_address_error(
            &policy.check("http://[::ffff:127.0.0.1]/").unwrap_err()
        ));
    }

    #[test]
    fn clone_refuses_numeric_loopback_forms() {
        let policy = CloneUrlPolicy::new().allow_http(true);
        for url in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://127.0.0.1./",
        ] {
            assert_eq!(
                policy.check(url),
                Err(UrlPolicyError::ForbiddenAddress {
                    address: IpAddr::V4(Ipv4Addr::LOCALHOST)
                }),
                "{url}"
            );
        }
    }

    #[test]
    fn clone_refuses_metadata_addresses() {
        assert!(is_forbidden_address_error(&clone_err(
            "https://169.254.169.254/"
        )));
        assert!(is_forbidden_address_error(&clone_err(
            "https://100.100.100.200/"
        )));
        assert!(is_forbidden_address_error(&clone_err(
            "https://[fd00:ec2::254]/"
        )));
    }

    #[test]
    fn clone_refuses_local_host_names() {
        for url in [
            "https://localhost/r",
            "https://LOCALHOST./r",
            "https://localhost../r",
            "https://.../r",
            "https://git.localhost/r",
            "https://metadata/r",
            "https://metadata.google.internal/r",
            "https://printer.local/r",
            "https://intranet/r",
        ] {
            assert!(
                matches!(clone_err(url), UrlPolicyError::ForbiddenHostName { .. }),
                "{url}"
            );
        }
    }

    #[test]
    fn allow_local_addresses_opens_every_address_rule() {
        let policy = CloneUrlPolicy::new()
            .allow_http(true)
            .allow_local_addresses(true);
        for url in [
            "http://127.0.0.1:8080/r.git",
            "http://localhost/r.git",
            "http://[::1]/r.git",
            "http://10.0.0.1/r.git",
            "http://169.254.169.254/",
        ] {
            assert!(policy.check(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn allow_local_addresses_keeps_the_other_rules() {
        let policy = CloneUrlPolicy::new().allow_local_addresses(true);
        assert!(policy.check("file:///etc").is_err());
        assert!(policy.check("https://u:p@127.0.0.1/").is_err());
        assert!(policy.check("ext::sh").is_err());
    }

    #[test]
    fn allow_host_lets_exactly_that_host_through() {
        let policy = CloneUrlPolicy::new()
            .allow_http(true)
            .allow_host("127.0.0.1")
            .allow_host("Git.Internal.")
            .allow_host("[::1]");
        assert!(policy.check("http://127.0.0.1:9418/r").is_ok());
        assert!(policy.check("http://2130706433/r").is_ok());
        assert!(policy.check("http://git.internal/r").is_ok());
        assert!(policy.check("http://[::1]/r").is_ok());
        assert!(policy.check("http://127.0.0.2/r").is_err());
        assert!(policy.check("http://other.internal/r").is_err());
        assert!(policy.check("http://localhost/r").is_err());
    }

    #[test]
    fn is_forbidden_address_covers_every_listed_range() {
        let forbidden = [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.100.100.200",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::192.168.0.1",
            "64:ff9b::a9fe:a9fe",
        ];
        for text in forbidden {
            let ip: IpAddr = text.parse().unwrap();
            assert!(is_forbidden_address(ip), "{text} should be forbidden");
        }
    }

    #[test]
    fn is_forbidden_address_allows_public_addresses() {
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "223.255.255.255",
            "2001:db8::1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "fe7f::1",
        ];
        for text in public {
            let ip: IpAddr = text.parse().unwrap();
            assert!(!is_forbidden_address(ip), "{text} should be allowed");
        }
    }

    // ---- relay URLs -------------------------------------------------------------------

    #[test]
    fn relay_accepts_public_ws_and_wss() {
        let policy = RelayUrlPolicy::new();
        assert_eq!(
            policy.check("wss://Relay.Example.com").unwrap().as_str(),
            "wss://relay.example.com"
        );
        assert!(policy.check("ws://relay.example.com:8080/path").is_ok());
    }

    #[test]
    fn relay_refuses_other_schemes() {
        assert_eq!(
            relay_err("https://relay.example.com"),
            UrlPolicyError::UnsupportedScheme {
                scheme: "https".into()
            }
        );
        assert!(matches!(
            relay_err("file:///etc"),
            UrlPolicyError::UnsupportedScheme { .. }
        ));
    }

    #[test]
    fn relay_refuses_malformed_urls() {
        assert!(matches!(
            relay_err("not a url"),
            UrlPolicyError::Malformed { .. }
        ));
        assert!(matches!(
            relay_err("wss://a.com/wss://b.com"),
            UrlPolicyError::Malformed { .. }
        ));
    }

    #[test]
    fn relay_refuses_credentials() {
        assert_eq!(
            relay_err("wss://user:pw@relay.example.com"),
            UrlPolicyError::EmbeddedCredentials
        );
    }

    #[test]
    fn relay_refuses_local_and_metadata_addresses() {
        for url in [
            "ws://127.0.0.1:7777",
            "ws://2130706433/",
            "ws://0x7f.1/",
            "ws://[::1]/",
            "ws://[::ffff:127.0.0.1]/",
            "ws://[::ffff:7f00:1]/",
            "ws://10.0.0.1/",
            "ws://172.16.5.4/",
            "ws://192.168.0.10/",
            "ws://169.254.169.254/",
            "ws://100.100.100.200/",
            "ws://0.0.0.0/",
            "ws://255.255.255.255/",
            "ws://224.0.0.1/",
            "ws://[fe80::1]/",
            "ws://[fc00::1]/",
            "ws://[fd00:ec2::254]/",
            "ws://[::]/",
        ] {
            assert!(is_forbidden_address_error(&relay_err(url)), "{url}");
        }
    }

    #[test]
    fn relay_refuses_local_names() {
        for url in [
            "ws://localhost:7777",
            "ws://relay.localhost",
            "ws://metadata.google.internal",
            "ws://metadata",
        ] {
            assert!(
                matches!(relay_err(url), UrlPolicyError::ForbiddenHostName { .. }),
                "{url}"
            );
        }
    }

    #[test]
    fn relay_refuses_overlong_urls() {
        let url = format!("wss://relay.example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(matches!(relay_err(&url), UrlPolicyError::TooLong { .. }));
    }

    #[test]
    fn relay_allow_switches() {
        let local = RelayUrlPolicy::new().allow_local_addresses(true);
        assert!(local.check("ws://127.0.0.1:7777").is_ok());
        assert!(local.check("ws://localhost:7777").is_ok());
        assert!(local.check("ws://u:p@127.0.0.1").is_err());

        let one_host = RelayUrlPolicy::new().allow_host("localhost");
        assert!(one_host.check("ws://localhost:7777").is_ok());
        assert!(one_host.check("ws://127.0.0.1:7777").is_err());
    }

    #[test]
    fn check_relay_url_checks_already_parsed_urls() {
        let policy = RelayUrlPolicy::new();
        let loopback = RelayUrl::parse("ws://127.0.0.1:7777").unwrap();
        assert!(policy.check_relay_url(&loopback).is_err());
        let public = RelayUrl::parse("wss://relay.example.com").unwrap();
        assert_eq!(policy.check_relay_url(&public), Ok(()));
    }

    #[test]
    fn default_policies_are_strict() {
        assert!(RelayUrlPolicy::default().check("ws://127.0.0.1").is_err());
        assert!(CloneUrlPolicy::default()
            .check("http://example.com/r")
            .is_err());
    }

    // ---- domains ----------------------------------------------------------------------

    #[test]
    fn extract_domain_normalises_hosts() {
        assert_eq!(
            extract_domain("https://Git.Example.COM.:443/r").as_deref(),
            Some("git.example.com")
        );
        assert_eq!(
            extract_domain("http://[2001:DB8::1]:80/").as_deref(),
            Some("2001:db8::1")
        );
        assert_eq!(
            extract_domain("http://2130706433/").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            extract_domain("wss://relay.example.com").as_deref(),
            Some("relay.example.com")
        );
    }

    #[test]
    fn extract_domain_gives_none_without_a_host() {
        assert_eq!(extract_domain("git@github.com:a/b.git"), None);
        assert_eq!(extract_domain("file:///etc"), None);
        assert_eq!(extract_domain("not a url"), None);
        assert_eq!(extract_domain(""), None);
    }

    #[test]
    fn is_own_domain_is_exact_host_equality() {
        assert!(is_own_domain("https://example.com/x", "example.com"));
        assert!(is_own_domain("https://EXAMPLE.com.:8443/x", "Example.COM."));
        assert!(!is_own_domain("https://evil-example.com/x", "example.com"));
        assert!(!is_own_domain(
            "https://example.com.evil.net/",
            "example.com"
        ));
        assert!(!is_own_domain(
            "https://evil.net/example.com",
            "example.com"
        ));
        assert!(!is_own_domain("https://sub.example.com/", "example.com"));
        assert!(!is_own_domain("https://example.com/", ""));
        assert!(is_own_domain("http://[::1]:8080/", "[::1]"));
        assert!(is_own_domain("http://[::1]:8080/", "::1"));
    }

    #[test]
    fn errors_clip_long_hostile_text() {
        let scheme = format!("a{}", "b".repeat(1000));
        let error = relay_err(&format!("{scheme}://relay.example.com"));
        match error {
            UrlPolicyError::UnsupportedScheme { scheme } => {
                assert_eq!(scheme.len(), MAX_ERROR_TEXT_LEN)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn clip_respects_character_boundaries() {
        let text = "é".repeat(100);
        let clipped = clip(&text);
        assert!(clipped.len() <= MAX_ERROR_TEXT_LEN);
        assert!(text.starts_with(&clipped));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn hostile_prefix() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("file://".to_owned()),
            Just("file:".to_owned()),
            Just("FILE://".to_owned()),
            Just("ext::".to_owned()),
            Just("ssh://".to_owned()),
            Just("SSH://".to_owned()),
            Just("fd::".to_owned()),
            Just("git+ssh://".to_owned()),
            Just("ssh+git://".to_owned()),
            "[a-zA-Z][a-zA-Z0-9+.-]{0,12}::",
            "[a-z0-9._-]{1,10}@[a-z0-9.-]{1,20}:",
            "-.{0,10}",
        ]
    }

    fn any_clone_policy() -> impl Strategy<Value = CloneUrlPolicy> {
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(http, git, local)| {
            CloneUrlPolicy::new()
                .allow_http(http)
                .allow_git_protocol(git)
                .allow_local_addresses(local)
        })
    }

    fn url_like() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "(https?|wss?|git|file|ssh)://[ -~]{0,40}",
            "(https?|wss?)://\\[[0-9a-fA-F:.]{0,30}\\][ -~]{0,10}",
            "(https?|wss?)://[0-9x.]{0,20}/",
        ]
    }

    fn domain() -> impl Strategy<Value = String> {
        "[a-z0-9]{1,10}(\\.[a-z0-9-]{1,10}){0,2}\\.[a-z]{2,6}"
    }

    proptest! {
        #[test]
        fn clone_policy_rejects_hostile_forms(
            prefix in hostile_prefix(),
            rest in ".{0,60}",
            policy in any_clone_policy(),
        ) {
            let url = format!("{prefix}{rest}");
            prop_assert!(policy.check(&url).is_err(), "accepted {:?}", url);
        }

        #[test]
        fn clone_policy_never_panics(url in url_like(), policy in any_clone_policy()) {
            let _ = policy.check(&url);
        }

        #[test]
        fn relay_policy_never_panics(url in url_like(), local in any::<bool>()) {
            let _ = RelayUrlPolicy::new().allow_local_addresses(local).check(&url);
        }

        #[test]
        fn extract_domain_never_panics(url in url_like()) {
            let _ = extract_domain(&url);
        }

        #[test]
        fn accepted_clone_urls_are_safe_for_git(url in url_like(), policy in any_clone_policy()) {
            if let Ok(accepted) = policy.check(&url) {
                let text = accepted.as_str();
                prop_assert!(!text.starts_with('-'));
                prop_assert!(!text.chars().any(|c| c.is_ascii_whitespace() || c.is_control()));
                prop_assert!(
                    text.starts_with("https://")
                        || text.starts_with("http://")
                        || text.starts_with("git://")
                );
                prop_assert!(text.len() <= MAX_URL_LEN);
            }
        }

        #[test]
        fn is_own_domain_is_false_for_any_other_host(
            own in domain(),
            extra in "[a-z0-9-]{0,8}[a-z0-9]",
        ) {
            let own_url = format!("https://{own}/x");
            prop_assert!(is_own_domain(&own_url, &own));
            let others = [
                format!("https://{extra}{own}/"),
                format!("https://{extra}-{own}/"),
                format!("https://{extra}.{own}/"),
                format!("https://{own}{extra}.com/"),
                format!("https://{own}.{extra}.net/"),
                format!("https://{extra}.net/{own}"),
                format!("https://{extra}.net/?u=https://{own}/"),
            ];
            for url in others {
                prop_assert!(!is_own_domain(&url, &own), "{} matched {}", url, own);
            }
        }

        #[test]
        fn every_numeric_loopback_form_is_refused(low in 0u32..(1 << 24)) {
            let address = (127u32 << 24) | low;
            let policy = RelayUrlPolicy::new();
            for url in [
                format!("ws://{address}/"),
                format!("ws://{address:#x}/"),
                format!("ws://{}/", Ipv4Addr::from(address)),
                format!("ws://[::ffff:{}]/", Ipv4Addr::from(address)),
            ] {
                prop_assert!(policy.check(&url).is_err(), "accepted {}", url);
            }
        }

        #[test]
        fn mapped_forms_follow_the_ipv4_rule(octets in any::<[u8; 4]>()) {
            let v4 = Ipv4Addr::from(octets);
            let mapped = IpAddr::V6(v4.to_ipv6_mapped());
            prop_assert_eq!(is_forbidden_address(mapped), is_forbidden_address(IpAddr::V4(v4)));
        }
    }
}
