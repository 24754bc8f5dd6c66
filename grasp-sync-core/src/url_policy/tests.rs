//! Unit tests of the URL policies.

use std::net::{IpAddr, Ipv4Addr};

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
        "192.0.0.1",
        "192.0.0.255",
        "198.18.0.1",
        "198.19.255.255",
        "100::1",
        "2002:7f00:1::1",
        "2002:808:808::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "64:ff9b:1::808:808",
        "64:ff9b:1:ffff::1",
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
        "192.0.1.1",
        "198.17.255.255",
        "198.20.0.0",
        "2001:4860:4860::8888",
        "64:ff9b:2::1",
        "101::1",
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

#[test]
fn resolved_addresses_are_checked_unless_local_or_the_host_is_allowed() {
    let url = RelayUrl::parse("wss://relay.example.com").unwrap();
    let metadata = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
    let public = IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34));
    let strict = RelayUrlPolicy::new();
    assert!(is_forbidden_address_error(
        &strict.check_resolved_address(&url, metadata).unwrap_err()
    ));
    assert!(strict
        .check_resolved_address(&url, IpAddr::V4(Ipv4Addr::LOCALHOST))
        .is_err());
    assert_eq!(strict.check_resolved_address(&url, public), Ok(()));
    let local = RelayUrlPolicy::new().allow_local_addresses(true);
    assert_eq!(local.check_resolved_address(&url, metadata), Ok(()));
    let host = RelayUrlPolicy::new().allow_host("relay.example.com");
    assert_eq!(host.check_resolved_address(&url, metadata), Ok(()));
    let other = RelayUrl::parse("wss://other.example.com").unwrap();
    assert!(host.check_resolved_address(&other, metadata).is_err());
}
