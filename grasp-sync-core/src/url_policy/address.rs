//! Which addresses and host names a URL from a stranger may not point at.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nostr::types::url::Host;

use nostr::types::url::Url;
use nostr::types::RelayUrl;

use super::{
    clip, effective_host, host_key, normalize_domain, normalize_host_input, UrlPolicyError,
};

/// Whether `ip` is an address no URL from a stranger may point at.
///
/// IPv4: `0.0.0.0/8` (incl. unspecified), loopback `127/8`, private `10/8`, `172.16/12`,
/// `192.168/16`, link-local `169.254/16` (incl. the `169.254.169.254` metadata service),
/// shared/CGNAT `100.64/10` (incl. `100.100.100.200`), IETF protocol assignments
/// `192.0.0/24`, benchmarking `198.18/15`, multicast `224/4`, reserved `240/4` (incl. broadcast
/// `255.255.255.255`).
///
/// IPv6: unspecified `::`, loopback `::1`, link-local `fe80::/10`, site-local `fec0::/10`,
/// unique-local `fc00::/7` (incl. the `fd00:ec2::254` metadata service), multicast
/// `ff00::/8`, discard-only `100::/64`, and IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`) and NAT64 (`64:ff9b::a.b.c.d`) forms
/// of any forbidden IPv4 address. Transition prefixes whose IPv4 end is decided by
/// someone else's relay are refused whole: 6to4 `2002::/16`, Teredo `2001::/32` and the
/// local-use NAT64 prefix `64:ff9b:1::/48` (a stranger can route any of them to an
/// internal address through a relay router we do not see).
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
        || is_special_purpose_ipv4(ip)
        || ip.is_multicast()
        || reserved_class_e
}

/// Whether `ip` is in an IPv4 block reserved for protocol assignments (`192.0.0/24`)
/// or benchmarking (`198.18/15`): never a public service, often routed to test or
/// internal networks.
fn is_special_purpose_ipv4(ip: Ipv4Addr) -> bool {
    let [first, second, third, _] = ip.octets();
    let protocol_assignments = [first, second, third] == [192, 0, 0];
    let benchmarking = first == 198 && (second & 0xfe) == 18;
    protocol_assignments || benchmarking
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
        || is_special_purpose_ipv6(ip)
        || is_transition_prefix(ip)
        || ip.is_multicast()
}

/// Whether `ip` is in the discard-only prefix `100::/64`.
fn is_special_purpose_ipv6(ip: Ipv6Addr) -> bool {
    ip.segments()[..4] == [0x100, 0, 0, 0]
}

/// Whether `ip` is in a transition prefix that carries traffic to an IPv4 (or other)
/// network chosen by a relay router outside our view: 6to4 `2002::/16`, Teredo
/// `2001::/32`, local-use NAT64 `64:ff9b:1::/48`.
fn is_transition_prefix(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let six_to_four = segments[0] == 0x2002;
    let teredo = segments[..2] == [0x2001, 0];
    let local_nat64 = segments[..3] == [0x64, 0xff9b, 1];
    six_to_four || teredo || local_nat64
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
pub(super) struct AddressRules {
    pub(super) allow_local_addresses: bool,
    allowed_hosts: BTreeSet<String>,
}

impl AddressRules {
    pub(super) fn allow(&mut self, host: String) {
        if let Some(key) = normalize_host_input(&host) {
            self.allowed_hosts.insert(key);
        }
    }

    pub(super) fn check(&self, host: &Host<String>) -> Result<(), UrlPolicyError> {
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

impl super::RelayUrlPolicy {
    /// Checks an address `url`'s host resolved to: refused when it is one no
    /// URL from a stranger may point at ([`is_forbidden_address`]), unless
    /// local addresses or this host are allowed. Adapters call it for every
    /// resolved address and connect only to one that passed.
    pub fn check_resolved_address(
        &self,
        url: &RelayUrl,
        address: IpAddr,
    ) -> Result<(), UrlPolicyError> {
        let url: &Url = url.into();
        let host = effective_host(url)?;
        self.address_rules.check_resolved(&host, address)
    }
}

impl AddressRules {
    /// Checks an address `host` resolved to.
    pub(super) fn check_resolved(
        &self,
        host: &Host<String>,
        address: IpAddr,
    ) -> Result<(), UrlPolicyError> {
        if self.allow_local_addresses || self.allowed_hosts.contains(&host_key(host)) {
            return Ok(());
        }
        check_address(address)
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
