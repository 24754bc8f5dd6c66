//! Repository announcements (kind 30617).

use indexmap::IndexSet;
use nostr::event::Event;
use nostr::key::PublicKey;
use nostr::types::RelayUrl;

use super::{
    clip, expect_kind, named_tags, parse_hex_public_key, read_identifier, repo_ref_of, Nip34Error,
    RepoRef, SkipLog, SkipReason, SkippedTag, KIND_REPO_ANNOUNCEMENT,
};
use crate::url_policy::MAX_URL_LEN;

/// The most clone URLs read from one announcement: purgatory normalises and checks
/// every one of them on each attempt of the repository (and of every repository whose
/// maintainer set lists the author), so a stranger's announcement of ten thousand
/// `clone` values must not multiply that work. The rest are recorded as skipped
/// ([`SkipReason::TooMany`]). An honest announcement lists a handful.
pub const MAX_ANNOUNCEMENT_CLONE_URLS: usize = 32;

/// What a repository announcement (kind 30617) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoAnnouncement {
    /// `30617:<author>:<d tag>`.
    pub repo: RepoRef,
    /// Relays from every `relays` tag, normalised by [`RelayUrl::parse`], de-duplicated,
    /// in order of appearance. Not yet checked against a relay URL policy.
    pub relays: Vec<RelayUrl>,
    /// Clone URLs from every `clone` tag, trimmed, de-duplicated, in order of appearance,
    /// at most [`MAX_ANNOUNCEMENT_CLONE_URLS`]. Not yet checked: apply a clone URL policy
    /// before use.
    pub clone_urls: Vec<String>,
    /// Public keys from every `maintainers` tag, de-duplicated, in order of appearance
    /// (the author is not added).
    pub maintainers: Vec<PublicKey>,
    /// Malformed tags and values that were skipped.
    pub skipped: Vec<SkippedTag>,
}

/// Parses a repository announcement.
///
/// `relays`, `clone` and `maintainers` tags may carry several values each
/// (`["relays", "wss://a", "wss://b"]`) and may be repeated; all values are read. A bad
/// value is skipped with a reason; the rest of its tag is still read.
///
/// Fails when the event is not of kind 30617, has no `d` tag, or its identifier is empty
/// or too long.
pub fn parse_announcement(event: &Event) -> Result<RepoAnnouncement, Nip34Error> {
    expect_kind(event, KIND_REPO_ANNOUNCEMENT)?;
    let mut log = SkipLog::default();
    let identifier = read_identifier(event, &mut log)?;
    let repo = repo_ref_of(event.pubkey, &identifier)?;
    let mut lists = AnnouncementLists::default();
    for (index, name, values) in named_tags(event) {
        lists.read_tag(index, name, values, &mut log);
    }
    Ok(RepoAnnouncement {
        repo,
        relays: lists.relays.into_iter().collect(),
        clone_urls: lists.clone_urls.into_iter().collect(),
        maintainers: lists.maintainers.into_iter().collect(),
        skipped: log.into_sorted(),
    })
}

/// The multi-value lists of an announcement, de-duplicated in order of appearance.
#[derive(Default)]
struct AnnouncementLists {
    relays: IndexSet<RelayUrl>,
    clone_urls: IndexSet<String>,
    maintainers: IndexSet<PublicKey>,
}

impl AnnouncementLists {
    fn read_tag(&mut self, index: usize, name: &str, values: &[String], log: &mut SkipLog) {
        let read_value: fn(&mut Self, &str) -> Result<(), SkipReason> = match name {
            "relays" => Self::read_relay,
            "clone" => Self::read_clone_url,
            "maintainers" => Self::read_maintainer,
            _ => return,
        };
        if values.is_empty() {
            log.skip(index, SkipReason::MissingValue);
        }
        for value in values {
            if let Err(reason) = read_value(self, value) {
                log.skip(index, reason);
            }
        }
    }

    fn read_relay(&mut self, value: &str) -> Result<(), SkipReason> {
        let url = check_url_text(value)?;
        let relay = RelayUrl::parse(url).map_err(|_| SkipReason::InvalidRelayUrl(clip(url)))?;
        self.relays.insert(relay);
        Ok(())
    }

    fn read_clone_url(&mut self, value: &str) -> Result<(), SkipReason> {
        let url = check_url_text(value)?;
        if self.clone_urls.contains(url) {
            return Ok(());
        }
        if self.clone_urls.len() >= MAX_ANNOUNCEMENT_CLONE_URLS {
            return Err(SkipReason::TooMany {
                max: MAX_ANNOUNCEMENT_CLONE_URLS,
            });
        }
        self.clone_urls.insert(url.to_owned());
        Ok(())
    }

    fn read_maintainer(&mut self, value: &str) -> Result<(), SkipReason> {
        let maintainer =
            parse_hex_public_key(value).ok_or_else(|| SkipReason::InvalidPublicKey(clip(value)))?;
        self.maintainers.insert(maintainer);
        Ok(())
    }
}

/// Trims a URL value and refuses it when empty or longer than any policy accepts.
pub(super) fn check_url_text(value: &str) -> Result<&str, SkipReason> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(SkipReason::EmptyValue);
    }
    if trimmed.len() > MAX_URL_LEN {
        return Err(SkipReason::ValueTooLong {
            len: trimmed.len(),
            max: MAX_URL_LEN,
        });
    }
    Ok(trimmed)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{signed_event, signed_event_by};
    use super::super::{RepoRefError, KIND_REPO_STATE};
    use super::*;
    use nostr::key::Keys;

    fn relay(url: &str) -> RelayUrl {
        RelayUrl::parse(url).unwrap()
    }

    #[test]
    fn reads_identifier_and_author_into_the_repo_ref() {
        let keys = Keys::generate();
        let event = signed_event_by(&keys, KIND_REPO_ANNOUNCEMENT, &[&["d", "my-repo"]]);
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.repo,
            RepoRef::new(keys.public_key(), "my-repo").unwrap()
        );
        assert!(announcement.relays.is_empty());
        assert!(announcement.skipped.is_empty());
    }

    #[test]
    fn reads_every_value_of_a_multi_value_relays_tag() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[
                &["d", "r"],
                &["relays", "wss://a.example.com", "wss://b.example.com"],
            ],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.relays,
            vec![relay("wss://a.example.com"), relay("wss://b.example.com")]
        );
    }

    #[test]
    fn reads_one_relay_per_tag_and_deduplicates_in_order() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[
                &["d", "r"],
                &["relays", "wss://b.example.com"],
                &["relays", "wss://a.example.com"],
                &["relays", "wss://b.example.com/"],
                &["relays", "WSS://A.example.com"],
            ],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.relays,
            vec![relay("wss://b.example.com"), relay("wss://a.example.com")]
        );
        assert!(announcement.skipped.is_empty());
    }

    #[test]
    fn skips_bad_relay_urls_with_a_reason_and_keeps_the_rest() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[
                &["d", "r"],
                &[
                    "relays",
                    "https://not-a-relay.com",
                    "wss://ok.example.com",
                    "",
                ],
                &["relays"],
            ],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(announcement.relays, vec![relay("wss://ok.example.com")]);
        assert_eq!(
            announcement.skipped,
            vec![
                SkippedTag {
                    index: 1,
                    reason: SkipReason::InvalidRelayUrl("https://not-a-relay.com".into())
                },
                SkippedTag {
                    index: 1,
                    reason: SkipReason::EmptyValue
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::MissingValue
                },
            ]
        );
    }

    #[test]
    fn reads_clone_urls_trimmed_and_deduplicated() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[
                &["d", "r"],
                &[
                    "clone",
                    " https://a.example.com/r.git ",
                    "https://b.example.com/r.git",
                ],
                &["clone", "https://a.example.com/r.git", "   "],
            ],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.clone_urls,
            vec![
                "https://a.example.com/r.git".to_owned(),
                "https://b.example.com/r.git".to_owned()
            ]
        );
        assert_eq!(
            announcement.skipped,
            vec![SkippedTag {
                index: 2,
                reason: SkipReason::EmptyValue
            }]
        );
    }

    #[test]
    fn keeps_hostile_clone_urls_for_the_policy_to_judge() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[&["d", "r"], &["clone", "ext::sh -c touch% /tmp/pwned"]],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.clone_urls,
            vec!["ext::sh -c touch% /tmp/pwned"]
        );
    }

    /// A stranger's announcement of 10 000 clone values keeps the first
    /// [`MAX_ANNOUNCEMENT_CLONE_URLS`]; each value past the cap is recorded as skipped.
    #[test]
    fn clone_urls_past_the_cap_are_skipped_and_counted() {
        let urls: Vec<String> = (0..10_000)
            .map(|n| format!("https://s{n}.evil.example/r.git"))
            .collect();
        let mut tag = vec!["clone"];
        tag.extend(urls.iter().map(String::as_str));
        // A repetition of a kept URL is no new URL: not skipped.
        let again = ["clone", urls[0].as_str()];
        let event = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["d", "r"], &tag, &again]);
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.clone_urls,
            urls[..MAX_ANNOUNCEMENT_CLONE_URLS].to_vec()
        );
        assert_eq!(
            announcement.skipped.len(),
            10_000 - MAX_ANNOUNCEMENT_CLONE_URLS
        );
        assert!(announcement.skipped.iter().all(|s| s.index == 1
            && s.reason
                == SkipReason::TooMany {
                    max: MAX_ANNOUNCEMENT_CLONE_URLS
                }));
    }

    #[test]
    fn skips_overlong_url_values() {
        let long = format!("wss://relay.example.com/{}", "a".repeat(MAX_URL_LEN));
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[&["d", "r"], &["relays", &long], &["clone", &long]],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert!(announcement.relays.is_empty());
        assert!(announcement.clone_urls.is_empty());
        assert_eq!(announcement.skipped.len(), 2);
        assert!(announcement
            .skipped
            .iter()
            .all(|s| matches!(s.reason, SkipReason::ValueTooLong { .. })));
    }

    #[test]
    fn reads_maintainers_from_several_values_and_tags() {
        let (one, two, three) = (Keys::generate(), Keys::generate(), Keys::generate());
        let (one_hex, two_hex, three_hex) = (
            one.public_key().to_hex(),
            two.public_key().to_hex(),
            three.public_key().to_hex(),
        );
        let upper = three_hex.to_uppercase();
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[
                &["d", "r"],
                &["maintainers", &one_hex, &two_hex],
                &["maintainers", &three_hex, &one_hex, "npub1xyz", &upper],
            ],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(
            announcement.maintainers,
            vec![one.public_key(), two.public_key(), three.public_key()]
        );
        assert_eq!(
            announcement.skipped,
            vec![
                SkippedTag {
                    index: 2,
                    reason: SkipReason::InvalidPublicKey("npub1xyz".into())
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::InvalidPublicKey(upper.clone())
                },
            ]
        );
    }

    #[test]
    fn records_duplicate_identifier_tags() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[&["relays"], &["d", "first"], &["d", "second"]],
        );
        let announcement = parse_announcement(&event).unwrap();
        assert_eq!(announcement.repo.identifier(), "first");
        assert_eq!(
            announcement.skipped,
            vec![
                SkippedTag {
                    index: 0,
                    reason: SkipReason::MissingValue
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::DuplicateIdentifier
                },
            ]
        );
    }

    #[test]
    fn fails_without_identifier() {
        let event = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["relays", "wss://a.com"]]);
        assert_eq!(
            parse_announcement(&event),
            Err(Nip34Error::MissingIdentifier)
        );
        let only_name = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["d"]]);
        assert_eq!(
            parse_announcement(&only_name),
            Err(Nip34Error::MissingIdentifier)
        );
    }

    #[test]
    fn fails_on_empty_or_overlong_identifier() {
        let empty = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["d", ""]]);
        assert_eq!(
            parse_announcement(&empty),
            Err(Nip34Error::InvalidRepoRef(RepoRefError::EmptyIdentifier))
        );
        let long = "x".repeat(2000);
        let overlong = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["d", &long]]);
        assert!(matches!(
            parse_announcement(&overlong),
            Err(Nip34Error::InvalidRepoRef(
                RepoRefError::IdentifierTooLong { .. }
            ))
        ));
    }

    #[test]
    fn fails_on_other_kinds() {
        let event = signed_event(KIND_REPO_STATE, &[&["d", "r"]]);
        assert_eq!(
            parse_announcement(&event),
            Err(Nip34Error::WrongKind {
                expected: KIND_REPO_ANNOUNCEMENT,
                found: KIND_REPO_STATE
            })
        );
    }

    #[test]
    fn ignores_tags_it_does_not_read() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[
                &["d", "r"],
                &["name", "My repo"],
                &["web", "https://example.com"],
                &["r", "abc", "euc"],
                &["t", "rust"],
            ],
        );
        assert!(parse_announcement(&event).unwrap().skipped.is_empty());
    }
}

#[cfg(test)]
mod proptests {
    use super::super::test_support::{arb_kind, arb_tags, unsigned_event};
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_tags(kind in arb_kind(), tags in arb_tags()) {
            let _ = parse_announcement(&unsigned_event(kind, tags));
        }

        #[test]
        fn results_are_consistent(tags in arb_tags()) {
            let event = unsigned_event(KIND_REPO_ANNOUNCEMENT, tags);
            if let Ok(announcement) = parse_announcement(&event) {
                let relays: IndexSet<_> = announcement.relays.iter().collect();
                prop_assert_eq!(relays.len(), announcement.relays.len());
                let clones: IndexSet<_> = announcement.clone_urls.iter().collect();
                prop_assert_eq!(clones.len(), announcement.clone_urls.len());
                let clean = |url: &String| {
                    !url.is_empty() && url.trim() == url && url.len() <= MAX_URL_LEN
                };
                prop_assert!(announcement.clone_urls.iter().all(clean));
                prop_assert!(announcement.skipped.iter().all(|s| s.index < event.tags.len()));
                prop_assert!(announcement.skipped.windows(2).all(|w| w[0].index <= w[1].index));
                prop_assert_eq!(announcement.repo.pubkey(), &event.pubkey);
            }
        }
    }
}
