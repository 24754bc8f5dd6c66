//! Property tests of the URL policies.

use std::net::{IpAddr, Ipv4Addr};

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
    // A label starting `xn--` is an IDNA A-label: random text after it is
    // not valid punycode, and such a host is no URL at all (found by this
    // property: `0.xn--.aa`), so no operator's domain can have one.
    "[a-z0-9]{1,10}(\\.[a-z0-9-]{1,10}){0,2}\\.[a-z]{2,6}"
        .prop_filter("no IDNA A-label", |domain| {
            !domain.split('.').any(|label| label.starts_with("xn--"))
        })
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

#[test]
fn a_host_with_an_invalid_a_label_is_no_url_and_never_own() {
    // Why the domain strategy leaves A-labels out.
    assert!(!is_own_domain("https://0.xn--.aa/x", "0.xn--.aa"));
}
