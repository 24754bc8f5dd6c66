//! Which per-domain throttle a clone URL's host shares: [`throttle_key`].
//!
//! Anyone can register one domain and point every name under it (`*.evil.example`) at
//! one server. If each host name had its own throttle, 500 clone URLs on 500 subdomains
//! would get 500 × [`ThrottleConfig::max_concurrent`](super::ThrottleConfig) slots. So
//! hosts are throttled by what their owner pays for once:
//!
//! - a host name by its *registrable domain*, found by a heuristic (no public suffix
//!   list is compiled in): the last two labels (`a.b.example.com` → `example.com`),
//!   or the last three when the top-level label is a two-letter country code and the
//!   label before it is one of the common second-level categories of
//!   [`SHARED_SECOND_LEVEL`] (`x.example.co.uk` → `example.co.uk`). Where the
//!   heuristic is wrong it errs on the side of sharing: unrelated sites under a
//!   private suffix (`*.github.io`) share one throttle, never the reverse;
//! - an IPv4 literal by its /24 block ([`IPV4_BLOCK_BITS`]): one server rents a few
//!   addresses of one block far more easily than addresses in many blocks;
//! - an IPv6 literal by its /48 prefix ([`IPV6_BLOCK_BITS`]): a site is commonly given
//!   a whole /48, which holds 65 536 /64s, so keying by /64 would hand one customer
//!   65 536 throttles.
//!
//! [`address_block_key`] gives the key of a resolved address, for throttling a host
//! name by where it points as well as by its name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The prefix length of the IPv4 block one throttle covers: /24.
pub const IPV4_BLOCK_BITS: u8 = 24;

/// The prefix length of the IPv6 block one throttle covers: /48.
pub const IPV6_BLOCK_BITS: u8 = 48;

/// Second-level labels under which country-code domains are registered (`co.uk`,
/// `com.au`, `ac.jp`…): under a two-letter top-level label they count as part of the
/// suffix, so `example.co.uk` is one registrable domain rather than all of `co.uk`.
pub const SHARED_SECOND_LEVEL: &[&str] = &[
    "ac", "co", "com", "edu", "go", "gob", "gov", "gv", "ltd", "mil", "ne", "net", "nic", "or",
    "org", "plc", "sch",
];

/// The key of the per-domain throttle that `host` (a clone URL's host as
/// [`CloneUrl::domain`](crate::url_policy::CloneUrl::domain) gives it: lowercase, no
/// port, IPv6 without brackets) shares with every other host of the same owner: its
/// registrable domain, or the address block of an IP literal ([`address_block_key`]; see
/// the module doc).
pub fn throttle_key(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(address) => address_block_key(address),
        Err(_) => registrable_domain(&host).to_owned(),
    }
}

/// The throttle key of the address block `address` lies in: `a.b.c.0/24` for IPv4,
/// `<prefix>::/48` for IPv6 (an IPv4-mapped IPv6 address counts as its IPv4 address).
pub fn address_block_key(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => ipv4_block_key(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => ipv4_block_key(v4),
            None => ipv6_block_key(v6),
        },
    }
}

/// `a.b.c.0/24` of an IPv4 address.
fn ipv4_block_key(address: Ipv4Addr) -> String {
    let [a, b, c, _] = address.octets();
    format!("{}/{IPV4_BLOCK_BITS}", Ipv4Addr::new(a, b, c, 0))
}

/// `<prefix>::/48` of an IPv6 address.
fn ipv6_block_key(address: Ipv6Addr) -> String {
    let [a, b, c, ..] = address.segments();
    let prefix = Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0);
    format!("{prefix}/{IPV6_BLOCK_BITS}")
}

/// The registrable domain of the host name `host`, by the heuristic of the module doc;
/// a name of one or two labels is its own.
fn registrable_domain(host: &str) -> &str {
    let labels: Vec<&str> = host.split('.').collect();
    let kept = match labels.as_slice() {
        [.., second, top] if is_country_code(top) && SHARED_SECOND_LEVEL.contains(second) => 3,
        _ => 2,
    };
    if labels.len() <= kept {
        return host;
    }
    let skipped: usize = labels[..labels.len() - kept]
        .iter()
        .map(|label| label.len() + 1)
        .sum();
    &host[skipped..]
}

/// Whether `label` looks like a country-code top-level label: two ASCII letters.
fn is_country_code(label: &str) -> bool {
    label.len() == 2 && label.bytes().all(|b| b.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_of_one_registrable_domain_share_a_key() {
        for host in [
            "evil.example",
            "a.evil.example",
            "x1.y2.z3.evil.example",
            "A.Evil.Example.",
        ] {
            assert_eq!(throttle_key(host), "evil.example", "{host}");
        }
        assert_eq!(throttle_key("git.example.co.uk"), "example.co.uk");
        assert_eq!(throttle_key("a.b.example.com.au"), "example.com.au");
        assert_eq!(throttle_key("example.co.uk"), "example.co.uk");
        // Not a shared second level: the last two labels.
        assert_eq!(throttle_key("git.example.de"), "example.de");
        assert_eq!(throttle_key("a.github.io"), "github.io");
        assert_eq!(throttle_key("codeberg.org"), "codeberg.org");
        assert_eq!(throttle_key("localhost"), "localhost");
        assert_ne!(throttle_key("a.one.example"), throttle_key("a.two.example"));
    }

    #[test]
    fn addresses_share_by_ipv4_slash_24_and_ipv6_slash_48() {
        assert_eq!(throttle_key("93.184.215.14"), "93.184.215.0/24");
        assert_eq!(
            throttle_key("93.184.215.14"),
            throttle_key("93.184.215.200")
        );
        assert_ne!(throttle_key("93.184.215.14"), throttle_key("93.184.216.14"));
        let a = throttle_key("2001:db8:1:2::1");
        assert_eq!(a, "2001:db8:1::/48");
        assert_eq!(a, throttle_key("2001:db8:1:ffff:ffff:ffff:ffff:ffff"));
        assert_eq!(a, throttle_key("[2001:db8:1:3::abcd]"));
        assert_ne!(a, throttle_key("2001:db8:2::1"));
        assert_eq!(throttle_key("::ffff:93.184.215.14"), "93.184.215.0/24");
    }

    /// The exploit of a free /48: 100 repositories × 32 IPv6 literals, each in a /64 of
    /// its own inside `2001:db8:1::/48`, were 3 200 throttles (3 200 × 5 fetches in
    /// flight); they are one.
    #[test]
    fn a_slash_48_of_literals_is_one_throttle() {
        let keys: std::collections::BTreeSet<String> = (0..100u16)
            .flat_map(|repo| {
                (0..32u16).map(move |url| format!("[2001:db8:1:{:x}::1]", repo * 32 + url))
            })
            .map(|host| throttle_key(&host))
            .collect();
        assert_eq!(keys.len(), 1, "{keys:?}");
        let v4: std::collections::BTreeSet<String> = (1..=254u8)
            .map(|last| throttle_key(&format!("203.0.113.{last}")))
            .collect();
        assert_eq!(v4.len(), 1, "{v4:?}");
    }

    #[test]
    fn odd_hosts_never_panic() {
        for host in ["", ".", "..", "a..b", "[", "[]", "::", "co.uk", "x.co.uk."] {
            let _ = throttle_key(host);
        }
        assert_eq!(throttle_key("co.uk"), "co.uk");
    }
}
