//! The operator's per-host fetch limits: [`HostLimits`], parsed from
//! `git.example.org=120/10,git.mine.example=unlimited`.
//!
//! By default every clone URL host is throttled by [`throttle_key`]: a host name by its
//! registrable domain *and* by the address block it resolves to, an IP literal by its
//! block, each key with the same [`ThrottleConfig`] (5 in flight, 30 a minute). An
//! operator who runs a git server, or has an agreement with one, can give that host
//! other limits. How an override combines with the shared keys:
//!
//! - **Its own key.** A clone URL whose host is exactly an override's host (compared
//!   as [`CloneUrl::domain`](crate::url_policy::CloneUrl::domain) gives it: lowercase, no
//!   port, IPv6 without brackets; every port of the host) is throttled under the key
//!   `host` itself, with the override's limits, instead of its registrable domain's or
//!   its address block's key. `git.example.org=120/10` leaves the other hosts of
//!   `example.org` on `example.org`'s default throttle, and `git.example.org` takes
//!   nothing of it.
//! - **No address block charge.** A fetch under an overridden key is not also charged to
//!   the address block its host name resolves to ([`HostLimits::charges_address_block`]):
//!   otherwise the block's default 30 a minute would still cap a host given 120. The
//!   block's default throttle still holds every other name pointing there, so a stranger
//!   whose name resolves to the overridden server gets the defaults, never the override.
//! - **A registrable domain.** An override whose host is itself a registrable domain
//!   (`example.org=120/10`) is the key `example.org`, which its subdomains without an
//!   override of their own share by [`throttle_key`]: they share the override's throttle
//!   and limits (120 a minute for all of them together, not each) and are not charged to
//!   their address block either. Only the owner of `example.org` controls its names.
//! - **An IP literal.** `203.0.113.7=unlimited` matches URLs naming `203.0.113.7`
//!   only; the rest of `203.0.113.0/24`, and names resolving to `203.0.113.7`, keep the
//!   block's default throttle.
//! - **`unlimited`** ([`HostLimit::Unlimited`]) is no cap of its own: `u32::MAX` in
//!   flight and per window. Fetches of that host are still bounded by what bounds every
//!   fetch (the git processes shared by all hosts, the per-attempt URL cap, the fetch
//!   timeout).
//!
//! Only the operator sets overrides (a setting, never anything read from an event), and
//! a host matches exactly: no wildcard, no suffix match, so nobody can put a name under
//! an override by registering one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use indexmap::IndexMap;

use super::throttle_key::throttle_key;
use crate::url_policy::extract_domain;

/// The longest host name a DNS name may be (RFC 1035): 253 characters.
const MAX_HOST_LEN: usize = 253;

/// The most characters of a malformed entry an error message repeats.
const MAX_QUOTED: usize = 80;

/// Limits applied to each domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottleConfig {
    /// Requests in flight at once (5).
    pub max_concurrent: u32,
    /// Requests started within one [`ThrottleConfig::window`] (30).
    pub max_per_minute: u32,
    /// The sliding window of the per-minute limit (60 s).
    pub window: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            max_concurrent: 5,
            max_per_minute: 30,
            window: Duration::from_secs(60),
        }
    }
}

/// The limits one host gets instead of the default [`ThrottleConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostLimit {
    /// At most `max_per_minute` fetches started within the window (60 s) and
    /// `max_concurrent` in flight; both at least 1. Written `PER_MINUTE/CONCURRENT`.
    Limited {
        /// Fetches started within the window.
        max_per_minute: u32,
        /// Fetches in flight at once.
        max_concurrent: u32,
    },
    /// No cap of its own (`u32::MAX` in flight and per window). Written `unlimited`.
    Unlimited,
}

impl HostLimit {
    /// The throttle config of a key with this limit: `default`'s window, this limit's
    /// rate and concurrency.
    pub fn config(self, default: ThrottleConfig) -> ThrottleConfig {
        let (max_per_minute, max_concurrent) = match self {
            HostLimit::Limited {
                max_per_minute,
                max_concurrent,
            } => (max_per_minute, max_concurrent),
            HostLimit::Unlimited => (u32::MAX, u32::MAX),
        };
        ThrottleConfig {
            max_per_minute,
            max_concurrent,
            ..default
        }
    }
}

impl fmt::Display for HostLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostLimit::Limited {
                max_per_minute,
                max_concurrent,
            } => write!(f, "{max_per_minute}/{max_concurrent}"),
            HostLimit::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// Why a host limit could not be read. Every message is one line and quotes at most 80
/// characters of the input, escaped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostLimitError {
    /// The entry has no `=` between host and limit.
    #[error("host limit {entry:?}: expected HOST=PER_MINUTE/CONCURRENT or HOST=unlimited")]
    NoEquals {
        /// The entry (clipped).
        entry: String,
    },
    /// The host is not a host name or IP address (a port, a path, a wildcard, a
    /// non-ASCII name: write its `xn--` form).
    #[error("host limit: {host:?} is not a host name or IP address (no port, path or wildcard; an internationalised name in its xn-- form)")]
    BadHost {
        /// The host as written (clipped).
        host: String,
    },
    /// The limit is not `PER_MINUTE/CONCURRENT` with two whole numbers, nor
    /// `unlimited`.
    #[error("host limit for {host}: {limit:?} is not PER_MINUTE/CONCURRENT (two whole numbers, e.g. 120/10) or unlimited")]
    BadLimit {
        /// The host.
        host: String,
        /// The limit as written (clipped).
        limit: String,
    },
    /// A limit of 0 would never let a fetch start.
    #[error("host limit for {host}: {limit:?} has a 0, which would never fetch from it; both numbers must be at least 1")]
    Zero {
        /// The host.
        host: String,
        /// The limit as written (clipped).
        limit: String,
    },
    /// The same host is given twice.
    #[error("host limit for {host} is given twice")]
    Duplicate {
        /// The host.
        host: String,
    },
}

/// `text` cut to at most [`MAX_QUOTED`] characters, for an error message.
fn clipped(text: &str) -> String {
    text.chars().take(MAX_QUOTED).collect()
}

/// One override: a host and its limit, written `HOST=PER_MINUTE/CONCURRENT` or
/// `HOST=unlimited`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostOverride {
    host: String,
    limit: HostLimit,
}

impl HostOverride {
    /// `host` (normalised: lowercase, no trailing dot, IPv6 without brackets) limited
    /// to `limit`.
    pub fn new(host: &str, limit: HostLimit) -> Result<Self, HostLimitError> {
        let host = normalized_host(host)?;
        check_limit(&host, limit, &limit.to_string())?;
        Ok(HostOverride { host, limit })
    }

    /// The host, normalised.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Its limit.
    pub fn limit(&self) -> HostLimit {
        self.limit
    }
}

impl fmt::Display for HostOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.host, self.limit)
    }
}

impl FromStr for HostOverride {
    type Err = HostLimitError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let Some((host, limit)) = entry.trim().split_once('=') else {
            return Err(HostLimitError::NoEquals {
                entry: clipped(entry.trim()),
            });
        };
        let host = normalized_host(host)?;
        let limit_text = limit.trim();
        let limit = parse_limit(&host, limit_text)?;
        check_limit(&host, limit, limit_text)?;
        Ok(HostOverride { host, limit })
    }
}

/// The host of an override as [`CloneUrl::domain`](crate::url_policy::CloneUrl::domain)
/// writes a URL's host, or why `text` is none.
fn normalized_host(text: &str) -> Result<String, HostLimitError> {
    let trimmed = text.trim();
    let bad = || HostLimitError::BadHost {
        host: clipped(trimmed),
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '[' | ']');
    if trimmed.is_empty() || trimmed.len() > MAX_HOST_LEN + 2 || !trimmed.chars().all(allowed) {
        return Err(bad());
    }
    let bare = trimmed
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(trimmed);
    let is_address = bare.parse::<std::net::IpAddr>().is_ok();
    if !is_address && (trimmed.contains([':', '[', ']']) || !is_dns_name(trimmed)) {
        return Err(bad());
    }
    let url_form = match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(_)) => format!("https://[{bare}]/"),
        _ => format!("https://{bare}/"),
    };
    extract_domain(&url_form).ok_or_else(bad)
}

/// Whether `host` is a DNS name: labels of ASCII letters, digits and inner hyphens,
/// 1 to 63 long, at most [`MAX_HOST_LEN`] in all, one trailing dot allowed.
fn is_dns_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= MAX_HOST_LEN
        && host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The limit written `text` (`PER_MINUTE/CONCURRENT` or `unlimited`) for `host`.
fn parse_limit(host: &str, text: &str) -> Result<HostLimit, HostLimitError> {
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(HostLimit::Unlimited);
    }
    let bad = || HostLimitError::BadLimit {
        host: host.to_owned(),
        limit: clipped(text),
    };
    let (per_minute, concurrent) = text.split_once('/').ok_or_else(bad)?;
    let number = |part: &str| {
        let part = part.trim();
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse::<u32>().map_err(|_| bad())
    };
    Ok(HostLimit::Limited {
        max_per_minute: number(per_minute)?,
        max_concurrent: number(concurrent)?,
    })
}

/// `limit` unless a number of it is 0.
fn check_limit(host: &str, limit: HostLimit, text: &str) -> Result<(), HostLimitError> {
    match limit {
        HostLimit::Limited {
            max_per_minute,
            max_concurrent,
        } if max_per_minute == 0 || max_concurrent == 0 => Err(HostLimitError::Zero {
            host: host.to_owned(),
            limit: clipped(text),
        }),
        _ => Ok(()),
    }
}

/// The operator's per-host overrides of the fetch throttle (see the module doc for how
/// they combine with the registrable-domain and address-block keys). Empty by default:
/// every host has the default [`ThrottleConfig`].
///
/// ```
/// use grasp_sync_core::purgatory::{HostLimit, HostLimits, ThrottleConfig};
///
/// let limits: HostLimits = "git.example.org=120/10, git.mine.example=unlimited".parse()?;
/// assert_eq!(limits.throttle_key("git.example.org"), "git.example.org");
/// assert_eq!(limits.throttle_key("other.example.org"), "example.org");
/// let config = limits.config_for_key("git.example.org", ThrottleConfig::default());
/// assert_eq!((config.max_per_minute, config.max_concurrent), (120, 10));
/// assert_eq!(limits.limit_for_key("git.mine.example"), Some(HostLimit::Unlimited));
/// # Ok::<(), grasp_sync_core::purgatory::HostLimitError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostLimits {
    /// Limit per normalised host, in the order given.
    hosts: IndexMap<String, HostLimit>,
}

impl HostLimits {
    /// No override.
    pub fn new() -> Self {
        HostLimits::default()
    }

    /// These overrides and `entry`; an error when its host already has one.
    pub fn with(mut self, entry: HostOverride) -> Result<Self, HostLimitError> {
        if self.hosts.contains_key(&entry.host) {
            return Err(HostLimitError::Duplicate { host: entry.host });
        }
        self.hosts.insert(entry.host, entry.limit);
        Ok(self)
    }

    /// The overrides of every entry of `entries` (each `HOST=PER_MINUTE/CONCURRENT`
    /// or `HOST=unlimited`; empty ones are skipped): the first error, if any.
    pub fn parse_entries<'a>(
        entries: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, HostLimitError> {
        entries
            .into_iter()
            .filter(|entry| !entry.trim().is_empty())
            .try_fold(HostLimits::new(), |limits, entry| {
                limits.with(entry.parse()?)
            })
    }

    /// The limit of `host` (as a clone URL's domain gives it), if it has an override.
    pub fn limit_for_host(&self, host: &str) -> Option<HostLimit> {
        self.hosts.get(host).copied()
    }

    /// The limit of the throttle key `key`, if an override sets it: `key` is an
    /// overridden host (see the module doc).
    pub fn limit_for_key(&self, key: &str) -> Option<HostLimit> {
        self.hosts.get(key).copied()
    }

    /// The throttle key of a clone URL's `host`: the host itself when it has an
    /// override, its [`throttle_key`] otherwise.
    pub fn throttle_key(&self, host: &str) -> String {
        match self.hosts.get_key_value(host) {
            Some((overridden, _)) => overridden.clone(),
            None => throttle_key(host),
        }
    }

    /// The limits of the throttle key `key`: its override's, or `default`.
    pub fn config_for_key(&self, key: &str, default: ThrottleConfig) -> ThrottleConfig {
        self.limit_for_key(key)
            .map_or(default, |limit| limit.config(default))
    }

    /// Whether a fetch under the throttle key `key` also takes a slot of the address
    /// block its host name resolves to: not when an override sets the key's limits.
    pub fn charges_address_block(&self, key: &str) -> bool {
        self.limit_for_key(key).is_none()
    }

    /// The overrides, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = HostOverride> + '_ {
        self.hosts.iter().map(|(host, limit)| HostOverride {
            host: host.clone(),
            limit: *limit,
        })
    }

    /// How many hosts have an override.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether no host has an override.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

impl FromStr for HostLimits {
    type Err = HostLimitError;

    /// Entries separated by commas or white space (an environment variable's form).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        HostLimits::parse_entries(text.split(|c: char| c == ',' || c.is_whitespace()))
    }
}

impl fmt::Display for HostLimits {
    /// Comma-separated `HOST=LIMIT` entries, which parse back to the same overrides.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, entry) in self.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{entry}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
