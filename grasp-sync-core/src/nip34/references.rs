//! What root events, pull requests and their updates point at: repositories (`a`), root
//! events (`e`/`E`) and commit tips (`c`).

use indexmap::IndexSet;
use nostr::event::{Event, EventId};

use super::announcement::check_url_text;
use super::{
    clip, is_lower_hex_64, named_tags, GitOid, Parsed, RepoRef, RepoRefError, SkipLog, SkipReason,
};

/// The repositories an event refers to, from its `a` tags.
///
/// Only coordinates of kind 30617 are repository references; `a` tags of other kinds are
/// recorded as [`SkipReason::NotARepoRef`]. De-duplicated, in order of appearance.
pub fn root_event_repo_refs(event: &Event) -> Parsed<Vec<RepoRef>> {
    let mut log = SkipLog::default();
    let mut repos = IndexSet::new();
    for (index, _, values) in named_tags(event).filter(|(_, name, _)| *name == "a") {
        match read_repo_ref(values) {
            Ok(repo) => {
                repos.insert(repo);
            }
            Err(reason) => log.skip(index, reason),
        }
    }
    Parsed {
        value: repos.into_iter().collect(),
        skipped: log.into_sorted(),
    }
}

/// The event ids an event refers to, from its `e` and `E` tags (first value of each).
///
/// De-duplicated, in order of appearance.
pub fn referenced_root_ids(event: &Event) -> Parsed<Vec<EventId>> {
    let mut log = SkipLog::default();
    let mut ids = IndexSet::new();
    for (index, _, values) in named_tags(event).filter(|(_, name, _)| matches!(*name, "e" | "E")) {
        match read_event_id(values) {
            Ok(id) => {
                ids.insert(id);
            }
            Err(reason) => log.skip(index, reason),
        }
    }
    Parsed {
        value: ids.into_iter().collect(),
        skipped: log.into_sorted(),
    }
}

/// The commit a pull request (1618) or pull request update (1619) proposes: its `c` tag.
///
/// The first valid `c` tag gives the tip; invalid ones are skipped with a reason, and valid
/// ones after the first are recorded as [`SkipReason::DuplicateTip`]. The event's kind is
/// not checked.
pub fn pull_request_tip(event: &Event) -> Parsed<Option<GitOid>> {
    let mut log = SkipLog::default();
    let mut tip = None;
    for (index, _, values) in named_tags(event).filter(|(_, name, _)| *name == "c") {
        match (read_oid(values), &tip) {
            (Ok(oid), None) => tip = Some(oid),
            (Ok(_), Some(_)) => log.skip(index, SkipReason::DuplicateTip),
            (Err(reason), _) => log.skip(index, reason),
        }
    }
    Parsed {
        value: tip,
        skipped: log.into_sorted(),
    }
}

/// The most clone URLs read from one pull request or update: a stranger's event must
/// not make one fetch try hundreds of servers.
pub const MAX_PULL_REQUEST_CLONE_URLS: usize = 8;

/// The clone URLs a pull request (1618) or update (1619) names for its commits (every
/// value of every `clone` tag), trimmed, de-duplicated, in order of appearance, at most
/// [`MAX_PULL_REQUEST_CLONE_URLS`] (the rest are recorded as skipped). Often the
/// contributor's fork, not one of the repository's servers. Not yet checked: apply a
/// clone URL policy before use.
pub fn pull_request_clone_urls(event: &Event) -> Parsed<Vec<String>> {
    let mut log = SkipLog::default();
    let mut urls: IndexSet<String> = IndexSet::new();
    for (index, _, values) in named_tags(event).filter(|(_, name, _)| *name == "clone") {
        for value in values {
            match check_url_text(value) {
                Ok(_) if urls.len() >= MAX_PULL_REQUEST_CLONE_URLS => {
                    log.skip(
                        index,
                        SkipReason::TooMany {
                            max: MAX_PULL_REQUEST_CLONE_URLS,
                        },
                    );
                }
                Ok(url) => {
                    urls.insert(url.to_owned());
                }
                Err(reason) => log.skip(index, reason),
            }
        }
    }
    Parsed {
        value: urls.into_iter().collect(),
        skipped: log.into_sorted(),
    }
}

fn first_value(values: &[String]) -> Result<&str, SkipReason> {
    values
        .first()
        .map(String::as_str)
        .ok_or(SkipReason::MissingValue)
}

fn read_repo_ref(values: &[String]) -> Result<RepoRef, SkipReason> {
    RepoRef::parse(first_value(values)?).map_err(|error| match error {
        RepoRefError::WrongKind { .. } => SkipReason::NotARepoRef,
        other => SkipReason::InvalidRepoRef(other),
    })
}

fn read_event_id(values: &[String]) -> Result<EventId, SkipReason> {
    let text = first_value(values)?;
    let invalid = || SkipReason::InvalidEventId(clip(text));
    if !is_lower_hex_64(text) {
        return Err(invalid());
    }
    EventId::from_hex(text).map_err(|_| invalid())
}

fn read_oid(values: &[String]) -> Result<GitOid, SkipReason> {
    GitOid::parse(first_value(values)?).map_err(SkipReason::InvalidOid)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::signed_event;
    use super::super::{
        GitOidError, SkippedTag, KIND_ISSUE, KIND_PATCH, KIND_PULL_REQUEST,
        KIND_PULL_REQUEST_UPDATE,
    };
    use super::*;
    use nostr::key::Keys;

    #[test]
    fn pull_request_clone_urls_are_read_trimmed_once_each_and_bounded() {
        let many: Vec<String> = (0..MAX_PULL_REQUEST_CLONE_URLS + 3)
            .map(|n| format!("https://fork{n}.example/r.git"))
            .collect();
        let mut tags: Vec<Vec<&str>> = vec![
            vec![
                "clone",
                " https://fork0.example/r.git ",
                "https://fork1.example/r.git",
            ],
            vec!["clone", "https://fork0.example/r.git", ""],
        ];
        tags.push(
            std::iter::once("clone")
                .chain(many.iter().map(String::as_str))
                .collect(),
        );
        let tags: Vec<&[&str]> = tags.iter().map(Vec::as_slice).collect();
        let parsed = pull_request_clone_urls(&signed_event(KIND_PULL_REQUEST, &tags));
        assert_eq!(parsed.value, many[..MAX_PULL_REQUEST_CLONE_URLS].to_vec());
        let too_many = parsed
            .skipped
            .iter()
            .filter(|skipped| matches!(skipped.reason, SkipReason::TooMany { .. }))
            .count();
        assert_eq!(too_many, 3, "the URLs past the bound are reported");
        assert!(parsed
            .skipped
            .iter()
            .any(|skipped| skipped.reason == SkipReason::EmptyValue));
    }

    fn repo_text(keys: &Keys, identifier: &str) -> String {
        format!("30617:{}:{identifier}", keys.public_key().to_hex())
    }

    #[test]
    fn reads_repo_refs_from_a_tags_in_order_without_duplicates() {
        let (alice, bob) = (Keys::generate(), Keys::generate());
        let first = repo_text(&alice, "one");
        let second = repo_text(&bob, "two:with:colons");
        let event = signed_event(
            KIND_PATCH,
            &[
                &["a", &first, "wss://relay.example.com"],
                &["a", &second],
                &["a", &first],
            ],
        );
        let parsed = root_event_repo_refs(&event);
        assert_eq!(
            parsed.value,
            vec![
                RepoRef::parse(&first).unwrap(),
                RepoRef::parse(&second).unwrap()
            ]
        );
        assert!(parsed.skipped.is_empty());
    }

    #[test]
    fn ignores_other_coordinates_with_a_reason() {
        let keys = Keys::generate();
        let repo = repo_text(&keys, "r");
        let state = format!("30618:{}:r", keys.public_key().to_hex());
        let profile = format!("0:{}:", keys.public_key().to_hex());
        let event = signed_event(
            KIND_ISSUE,
            &[&["a", &state], &["a", &repo], &["a", &profile]],
        );
        let parsed = root_event_repo_refs(&event);
        assert_eq!(parsed.value, vec![RepoRef::parse(&repo).unwrap()]);
        assert_eq!(
            parsed.skipped,
            vec![
                SkippedTag {
                    index: 0,
                    reason: SkipReason::NotARepoRef
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::NotARepoRef
                },
            ]
        );
    }

    #[test]
    fn records_malformed_repo_refs() {
        let hex = Keys::generate().public_key().to_hex();
        let no_identifier = format!("30617:{hex}:");
        let event = signed_event(
            KIND_PULL_REQUEST,
            &[
                &["a"],
                &["a", "30617:nothex:r"],
                &["a", &no_identifier],
                &["A", "x"],
            ],
        );
        let parsed = root_event_repo_refs(&event);
        assert!(parsed.value.is_empty());
        assert_eq!(parsed.skipped.len(), 3);
        assert_eq!(parsed.skipped[0].reason, SkipReason::MissingValue);
        assert!(matches!(
            parsed.skipped[1].reason,
            SkipReason::InvalidRepoRef(RepoRefError::InvalidPublicKey { .. })
        ));
        assert_eq!(
            parsed.skipped[2].reason,
            SkipReason::InvalidRepoRef(RepoRefError::EmptyIdentifier)
        );
    }

    #[test]
    fn reads_event_ids_from_e_and_upper_e_tags() {
        let root = signed_event(KIND_PULL_REQUEST, &[]);
        let other = signed_event(KIND_ISSUE, &[]);
        let (root_hex, other_hex) = (root.id.to_hex(), other.id.to_hex());
        let update = signed_event(
            KIND_PULL_REQUEST_UPDATE,
            &[
                &["E", &root_hex],
                &["e", &other_hex, "", "reply"],
                &["e", &root_hex],
                &["p", &other_hex],
            ],
        );
        let parsed = referenced_root_ids(&update);
        assert_eq!(parsed.value, vec![root.id, other.id]);
        assert!(parsed.skipped.is_empty());
    }

    #[test]
    fn records_malformed_event_ids() {
        let hex = signed_event(KIND_ISSUE, &[]).id.to_hex();
        let upper = hex.to_uppercase();
        let longer = format!("{hex}00");
        let event = signed_event(
            KIND_PATCH,
            &[
                &["e"],
                &["e", "xyz"],
                &["E", &upper],
                &["e", &longer],
                &["e", &hex],
            ],
        );
        let parsed = referenced_root_ids(&event);
        assert_eq!(parsed.value.len(), 1);
        assert_eq!(
            parsed.skipped,
            vec![
                SkippedTag {
                    index: 0,
                    reason: SkipReason::MissingValue
                },
                SkippedTag {
                    index: 1,
                    reason: SkipReason::InvalidEventId("xyz".into())
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::InvalidEventId(upper.clone())
                },
                SkippedTag {
                    index: 3,
                    reason: SkipReason::InvalidEventId(longer.clone())
                },
            ]
        );
    }

    #[test]
    fn reads_the_pull_request_tip() {
        let tip = "0123456789abcdef0123456789abcdef01234567";
        for kind in [KIND_PULL_REQUEST, KIND_PULL_REQUEST_UPDATE] {
            let event = signed_event(kind, &[&["subject", "x"], &["c", tip]]);
            let parsed = pull_request_tip(&event);
            assert_eq!(parsed.value, Some(GitOid::parse(tip).unwrap()));
            assert!(parsed.skipped.is_empty());
        }
    }

    #[test]
    fn tip_is_none_without_c_tag() {
        let event = signed_event(KIND_PULL_REQUEST, &[&["subject", "x"]]);
        assert_eq!(pull_request_tip(&event).value, None);
    }

    #[test]
    fn first_valid_tip_wins_and_the_rest_is_recorded() {
        let first = "a".repeat(40);
        let second = "b".repeat(64);
        let event = signed_event(
            KIND_PULL_REQUEST,
            &[&["c", "nope"], &["c"], &["c", &first], &["c", &second]],
        );
        let parsed = pull_request_tip(&event);
        assert_eq!(parsed.value, Some(GitOid::parse(&first).unwrap()));
        assert_eq!(
            parsed.skipped,
            vec![
                SkippedTag {
                    index: 0,
                    reason: SkipReason::InvalidOid(GitOidError::WrongLength { len: 4 })
                },
                SkippedTag {
                    index: 1,
                    reason: SkipReason::MissingValue
                },
                SkippedTag {
                    index: 3,
                    reason: SkipReason::DuplicateTip
                },
            ]
        );
    }

    #[test]
    fn tip_is_lowercased() {
        let event = signed_event(KIND_PULL_REQUEST, &[&["c", &"ABCDEF0123".repeat(4)]]);
        assert_eq!(
            pull_request_tip(&event).value.unwrap().as_str(),
            "abcdef0123".repeat(4)
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::super::test_support::{arb_kind, arb_tags, unsigned_event};
    use super::super::KIND_PATCH;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn repo_refs_never_panic_and_are_unique(kind in arb_kind(), tags in arb_tags()) {
            let event = unsigned_event(kind, tags);
            let parsed = root_event_repo_refs(&event);
            let unique: IndexSet<_> = parsed.value.iter().collect();
            prop_assert_eq!(unique.len(), parsed.value.len());
            prop_assert!(parsed.skipped.iter().all(|s| s.index < event.tags.len()));
        }

        #[test]
        fn root_ids_never_panic_and_are_unique(kind in arb_kind(), tags in arb_tags()) {
            let event = unsigned_event(kind, tags);
            let parsed = referenced_root_ids(&event);
            let unique: IndexSet<_> = parsed.value.iter().collect();
            prop_assert_eq!(unique.len(), parsed.value.len());
            prop_assert!(parsed.skipped.iter().all(|s| s.index < event.tags.len()));
        }

        #[test]
        fn tip_never_panics(kind in arb_kind(), tags in arb_tags()) {
            let event = unsigned_event(kind, tags);
            let parsed = pull_request_tip(&event);
            prop_assert!(parsed.skipped.iter().all(|s| s.index < event.tags.len()));
        }

        #[test]
        fn every_a_tag_is_read_or_recorded(tags in arb_tags()) {
            let event = unsigned_event(KIND_PATCH, tags);
            let parsed = root_event_repo_refs(&event);
            let a_tags = event
                .tags
                .iter()
                .filter(|tag| tag.as_slice().first().is_some_and(|name| name == "a"))
                .count();
            let read: usize = event
                .tags
                .iter()
                .filter(|tag| tag.as_slice().first().is_some_and(|name| name == "a"))
                .filter(|tag| tag.as_slice().get(1).is_some_and(|v| RepoRef::parse(v).is_ok()))
                .count();
            prop_assert_eq!(read + parsed.skipped.len(), a_tags);
        }
    }
}
