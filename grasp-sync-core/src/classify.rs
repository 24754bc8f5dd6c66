//! What a relay's human-readable answer means: a rate limit, a subscription
//! limit, or one of NIP-01's machine-readable refusals.
//!
//! Relays are not consistent: nostr-relay-builder answers
//! `CLOSED "rate-limited: too many REQs"`, strfry prefixes everything with
//! `ERROR: ` and sends `NOTICE "ERROR: too many concurrent REQs"`,
//! nostr-rs-relay `NOTICE "Subscription error: Maximum concurrent subscription
//! count reached"`, khatru `rate-limited: slow down, please`. So the prefix is
//! read first and the text second.

/// The NIP-01 machine-readable prefix of a `CLOSED`/`OK` message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Prefix {
    /// `rate-limited:`
    RateLimited,
    /// `blocked:`
    Blocked,
    /// `auth-required:`
    AuthRequired,
    /// `restricted:`
    Restricted,
    /// `invalid:`
    Invalid,
    /// `error:`
    Error,
    /// `duplicate:`
    Duplicate,
    /// `pow:`
    Pow,
    /// `mute:`
    Mute,
    /// `closed:` (used by strfry's NEG-ERR)
    Closed,
    /// No known prefix.
    None,
}

/// What a relay message tells us about the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    /// The machine-readable prefix, after any `ERROR: ` decoration.
    pub prefix: Prefix,
    /// The relay asks us to slow down (prefix or wording).
    pub rate_limited: bool,
    /// The relay refuses more concurrent subscriptions.
    pub too_many_subscriptions: bool,
}

/// Classifies the text of a `NOTICE`, `CLOSED`, `OK` or `NEG-ERR` message.
pub fn classify(message: &str) -> Classified {
    let text = message.trim();
    // strfry decorates every message with an upper-case `ERROR: `; the
    // NIP-01 prefix is the lower-case `error:`.
    let undecorated = text.strip_prefix("ERROR: ").unwrap_or(text);
    let lower = undecorated.to_ascii_lowercase();
    let body = lower.as_str();
    let prefix = prefix_of(body);
    // A refusal with another machine-readable prefix (`blocked: too many
    // query results`) is that refusal, whatever its wording.
    let wording_counts = matches!(prefix, Prefix::RateLimited | Prefix::None);
    let too_many_subscriptions = wording_counts && is_subscription_limit(body);
    let rate_limited =
        prefix == Prefix::RateLimited || (wording_counts && is_rate_limit_wording(body));
    Classified {
        prefix,
        rate_limited,
        too_many_subscriptions,
    }
}

fn prefix_of(body: &str) -> Prefix {
    const PREFIXES: [(&str, Prefix); 10] = [
        ("rate-limited:", Prefix::RateLimited),
        ("blocked:", Prefix::Blocked),
        ("auth-required:", Prefix::AuthRequired),
        ("restricted:", Prefix::Restricted),
        ("invalid:", Prefix::Invalid),
        ("error:", Prefix::Error),
        ("duplicate:", Prefix::Duplicate),
        ("pow:", Prefix::Pow),
        ("mute:", Prefix::Mute),
        ("closed:", Prefix::Closed),
    ];
    PREFIXES
        .iter()
        .find(|(text, _)| body.starts_with(text))
        .map_or(Prefix::None, |(_, prefix)| *prefix)
}

/// Wording of a rate limit without the machine-readable prefix.
fn is_rate_limit_wording(body: &str) -> bool {
    const WORDS: [&str; 6] = [
        "rate limit",
        "rate-limit",
        "ratelimit",
        "too many",
        "slow down",
        "throttl",
    ];
    WORDS.iter().any(|word| body.contains(word))
}

/// Wording of a refusal to open one more subscription.
fn is_subscription_limit(body: &str) -> bool {
    let words: Vec<&str> = body
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    let about_subscriptions = words.iter().any(|word| {
        matches!(
            *word,
            "req" | "reqs" | "subscription" | "subscriptions" | "concurrent"
        )
    });
    let over_limit = ["too many", "maximum", "max "]
        .iter()
        .any(|word| body.contains(word));
    about_subscriptions && over_limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_relays_limit_messages_are_understood() {
        let builder = classify("rate-limited: too many REQs");
        assert_eq!(builder.prefix, Prefix::RateLimited);
        assert!(builder.rate_limited && builder.too_many_subscriptions);

        let strfry = classify("ERROR: too many concurrent REQs");
        assert!(strfry.too_many_subscriptions);
        assert_eq!(strfry.prefix, Prefix::None);

        let rs = classify("Subscription error: Maximum concurrent subscription count reached");
        assert!(rs.too_many_subscriptions);

        let requests = classify("too many requests, maximum 10 per second");
        assert!(
            requests.rate_limited && !requests.too_many_subscriptions,
            "requests are not REQs"
        );

        let khatru = classify("rate-limited: slow down, please");
        assert!(khatru.rate_limited && !khatru.too_many_subscriptions);
    }

    #[test]
    fn notice_wording_counts_as_rate_limit() {
        for text in [
            "slow down!",
            "You are being throttled",
            "Rate limit exceeded",
            "too many requests",
        ] {
            assert!(classify(text).rate_limited, "{text}");
        }
    }

    #[test]
    fn other_prefixes_are_not_rate_limits() {
        for (text, prefix) in [
            ("blocked: you are banned", Prefix::Blocked),
            ("auth-required: log in", Prefix::AuthRequired),
            ("restricted: members only", Prefix::Restricted),
            ("invalid: bad filter", Prefix::Invalid),
            ("error: internal", Prefix::Error),
            ("ERROR: bad req: unknown field", Prefix::None),
            ("closed: negentropy disabled", Prefix::Closed),
        ] {
            let classified = classify(text);
            assert_eq!(classified.prefix, prefix, "{text}");
            assert!(!classified.rate_limited, "{text}");
            assert!(!classified.too_many_subscriptions, "{text}");
        }
        let strfry_neg = classify("ERROR: blocked: too many query results");
        assert_eq!(strfry_neg.prefix, Prefix::Blocked);
        assert!(!strfry_neg.rate_limited && !strfry_neg.too_many_subscriptions);
    }
}
