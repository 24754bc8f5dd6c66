use proptest::prelude::*;

use super::*;

fn limited(max_per_minute: u32, max_concurrent: u32) -> HostLimit {
    HostLimit::Limited {
        max_per_minute,
        max_concurrent,
    }
}

#[test]
fn the_two_forms_parse_and_print_back() {
    let entry: HostOverride = "git.example.org=120/10".parse().unwrap();
    assert_eq!(entry.host(), "git.example.org");
    assert_eq!(entry.limit(), limited(120, 10));
    assert_eq!(entry.to_string(), "git.example.org=120/10");
    let entry: HostOverride = " Git.Mine.Example. = UNLIMITED ".parse().unwrap();
    assert_eq!(entry.host(), "git.mine.example");
    assert_eq!(entry.limit(), HostLimit::Unlimited);
    assert_eq!(entry.to_string(), "git.mine.example=unlimited");

    let limits: HostLimits = "git.example.org=120/10,git.mine.example=unlimited\n203.0.113.7=60/2"
        .parse()
        .unwrap();
    assert_eq!(limits.len(), 3);
    assert_eq!(
        limits.to_string(),
        "git.example.org=120/10,git.mine.example=unlimited,203.0.113.7=60/2"
    );
    assert_eq!(limits.to_string().parse::<HostLimits>().unwrap(), limits);
    assert!("".parse::<HostLimits>().unwrap().is_empty());
    assert!(" , ,".parse::<HostLimits>().unwrap().is_empty());
}

#[test]
fn hosts_are_written_the_way_a_clone_url_s_domain_is() {
    let host = |text: &str| text.parse::<HostOverride>().map(|e| e.host().to_owned());
    assert_eq!(host("[2001:db8::1]=1/1").unwrap(), "2001:db8::1");
    assert_eq!(host("2001:DB8::1=1/1").unwrap(), "2001:db8::1");
    assert_eq!(host("127.0.0.1=1/1").unwrap(), "127.0.0.1");
    // The numeric IPv4 forms a URL reads as a dotted quad.
    assert_eq!(host("2130706433=1/1").unwrap(), "127.0.0.1");
    assert_eq!(host("localhost=1/1").unwrap(), "localhost");
    assert_eq!(
        host("xn--bcher-kva.example=1/1").unwrap(),
        "xn--bcher-kva.example"
    );
}

#[test]
fn malformed_entries_are_one_line_errors_naming_what_is_wrong() {
    let error = |text: &str| text.parse::<HostOverride>().unwrap_err();
    assert!(matches!(
        error("git.example.org"),
        HostLimitError::NoEquals { .. }
    ));
    assert!(matches!(error(""), HostLimitError::NoEquals { .. }));
    for host in [
        "",
        "*.example.org",
        "example.org:8080",
        "https://example.org",
        "example.org/x",
        "a..b",
        "-a.example",
        "a-.example",
        "bücher.example",
        "[example.org]",
        "[[::1]]",
        "user@example.org",
        "exa mple.org",
        &"a".repeat(64),
        &format!("{}.example", "a.".repeat(130)),
    ] {
        assert!(
            matches!(
                error(&format!("{host}=1/1")),
                HostLimitError::BadHost { .. }
            ),
            "{host:?}"
        );
    }
    for limit in [
        "",
        "120",
        "/",
        "120/",
        "/10",
        "1/2/3",
        "-1/2",
        "+1/2",
        "1.5/2",
        "lots/2",
        "1/ten",
        "4294967296/1",
        "unlimitedd",
        "1 2/3",
    ] {
        assert!(
            matches!(
                error(&format!("git.example.org={limit}")),
                HostLimitError::BadLimit { .. }
            ),
            "{limit:?}"
        );
    }
    assert!(matches!(
        error("git.example.org=0/5"),
        HostLimitError::Zero { .. }
    ));
    assert!(matches!(
        error("git.example.org=30/0"),
        HostLimitError::Zero { .. }
    ));
    assert_eq!(
        error("git.example.org=0/5").to_string(),
        "host limit for git.example.org: \"0/5\" has a 0, which would never fetch from it; both numbers must be at least 1"
    );
    assert_eq!(
        "a.example=1/1,A.EXAMPLE.=2/2".parse::<HostLimits>(),
        Err(HostLimitError::Duplicate {
            host: "a.example".to_owned()
        })
    );
    assert!(HostOverride::new("a.example", limited(0, 1)).is_err());
    assert!(HostOverride::new("a.example:1", HostLimit::Unlimited).is_err());
}

#[test]
fn an_error_quotes_a_long_hostile_entry_clipped_and_on_one_line() {
    let hostile = format!("{}\n\u{1b}[31m=1/1", "x".repeat(10_000));
    let message = hostile.parse::<HostOverride>().unwrap_err().to_string();
    assert!(!message.contains('\n'), "{message}");
    assert!(!message.contains('\u{1b}'), "{message}");
    assert!(message.len() < 400, "{}", message.len());
    let message = format!("h.example={}", "9".repeat(10_000))
        .parse::<HostOverride>()
        .unwrap_err()
        .to_string();
    assert!(message.len() < 400, "{}", message.len());
}

#[test]
fn an_overridden_host_is_its_own_key_and_skips_its_address_block() {
    let limits: HostLimits = "git.example.org=120/10,203.0.113.7=unlimited"
        .parse()
        .unwrap();
    let default = ThrottleConfig::default();
    assert_eq!(limits.throttle_key("git.example.org"), "git.example.org");
    assert_eq!(limits.throttle_key("ci.example.org"), "example.org");
    assert_eq!(limits.throttle_key("203.0.113.7"), "203.0.113.7");
    assert_eq!(limits.throttle_key("203.0.113.8"), "203.0.113.0/24");
    let config = limits.config_for_key("git.example.org", default);
    assert_eq!((config.max_per_minute, config.max_concurrent), (120, 10));
    assert_eq!(config.window, default.window);
    assert_eq!(limits.config_for_key("example.org", default), default);
    assert_eq!(limits.config_for_key("203.0.113.0/24", default), default);
    let unlimited = limits.config_for_key("203.0.113.7", default);
    assert_eq!(
        (unlimited.max_per_minute, unlimited.max_concurrent),
        (u32::MAX, u32::MAX)
    );
    assert!(!limits.charges_address_block("git.example.org"));
    assert!(limits.charges_address_block("example.org"));
    assert_eq!(
        limits.limit_for_host("git.example.org"),
        Some(limited(120, 10))
    );
    assert_eq!(limits.limit_for_host("ci.example.org"), None);
}

#[test]
fn an_override_of_a_registrable_domain_covers_its_subdomains_together() {
    let limits: HostLimits = "example.org=120/10".parse().unwrap();
    assert_eq!(limits.throttle_key("example.org"), "example.org");
    assert_eq!(limits.throttle_key("git.example.org"), "example.org");
    assert_eq!(
        limits.limit_for_key(&limits.throttle_key("git.example.org")),
        Some(limited(120, 10))
    );
    // A look-alike is no subdomain.
    assert_eq!(limits.throttle_key("evil-example.org"), "evil-example.org");
    assert_eq!(limits.limit_for_key("evil-example.org"), None);
}

#[test]
fn no_override_keeps_every_key_and_the_defaults_of_five_and_thirty() {
    let limits = HostLimits::new();
    assert!(limits.is_empty());
    for host in ["git.example.org", "203.0.113.7", "2001:db8::1"] {
        assert_eq!(limits.throttle_key(host), throttle_key(host));
        assert!(limits.charges_address_block(&limits.throttle_key(host)));
    }
    let config = limits.config_for_key("example.org", ThrottleConfig::default());
    assert_eq!(config.max_concurrent, 5);
    assert_eq!(config.max_per_minute, 30);
    assert_eq!(config.window, std::time::Duration::from_secs(60));
}

proptest! {
    #[test]
    fn any_text_parses_or_errs_without_panicking(text in any::<String>()) {
        match text.parse::<HostLimits>() {
            Ok(limits) => {
                // What parsed prints back to the same overrides.
                prop_assert_eq!(limits.to_string().parse::<HostLimits>(), Ok(limits));
            }
            Err(error) => prop_assert!(!error.to_string().contains('\n')),
        }
    }

    #[test]
    fn near_valid_entries_parse_or_err_without_panicking(
        host in "[a-zA-Z0-9.:\\[\\]*_-]{0,20}",
        sep in "[=/ ]{0,2}",
        limit in "[0-9/a-z ]{0,12}",
    ) {
        let entry = format!("{host}{sep}{limit}");
        if let Ok(parsed) = entry.parse::<HostOverride>() {
            prop_assert_eq!(parsed.to_string().parse::<HostOverride>(), Ok(parsed.clone()));
            if let HostLimit::Limited { max_per_minute, max_concurrent } = parsed.limit() {
                prop_assert!(max_per_minute >= 1 && max_concurrent >= 1);
            }
        }
    }
}
