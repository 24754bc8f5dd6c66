//! Repository state (kind 30618): branch and tag tips.

use std::collections::HashSet;

use nostr::event::Event;

use super::{
    clip, expect_kind, named_tags, read_identifier, repo_ref_of, GitOid, Nip34Error, SkipLog,
    SkipReason, SkippedTag, KIND_REPO_STATE,
};

/// The longest ref name accepted, in bytes.
pub const MAX_REF_NAME_LEN: usize = 1024;

/// The prefix every ref name in a state event starts with.
const REFS_PREFIX: &str = "refs/";
/// The prefix of a symbolic `HEAD` value.
const SYMBOLIC_REF_PREFIX: &str = "ref: ";
/// Bytes git never allows in a ref name (besides control characters).
const FORBIDDEN_REF_BYTES: &[u8] = b" ~^:?*[\\";

/// What a repository state event (kind 30618) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoState {
    /// The repository identifier (`d` tag); with the author it names `30617:<author>:<d>`.
    pub identifier: String,
    /// Refs and the objects they point at, in order of appearance, one entry per ref name.
    pub refs: Vec<(String, GitOid)>,
    /// The ref `HEAD` points at (`refs/heads/main` for `["HEAD", "ref: refs/heads/main"]`).
    pub head: Option<String>,
    /// Malformed tags that were skipped.
    pub skipped: Vec<SkippedTag>,
}

/// Parses a repository state event.
///
/// Tags named `refs/...` give a ref and its object id (`["refs/heads/main", "<oid>"]`;
/// further values are ignored); `["HEAD", "ref: refs/heads/main"]` gives `HEAD`. Ref names
/// must pass git's ref-name rules; the first tag for a name counts. A state with no refs
/// is valid (the author stopped tracking state). Other tags are ignored.
///
/// Fails when the event is not of kind 30618, has no `d` tag, or its identifier is empty
/// or too long.
pub fn parse_repo_state(event: &Event) -> Result<RepoState, Nip34Error> {
    expect_kind(event, KIND_REPO_STATE)?;
    let mut log = SkipLog::default();
    let identifier = read_identifier(event, &mut log)?;
    repo_ref_of(event.pubkey, &identifier)?;
    let mut reader = StateReader::default();
    for (index, name, values) in named_tags(event) {
        if let Err(reason) = reader.read_tag(name, values) {
            log.skip(index, reason);
        }
    }
    Ok(RepoState {
        identifier,
        refs: reader.refs,
        head: reader.head,
        skipped: log.into_sorted(),
    })
}

/// Accumulates refs and `HEAD` while walking the tags.
#[derive(Default)]
struct StateReader {
    refs: Vec<(String, GitOid)>,
    seen_ref_names: HashSet<String>,
    head: Option<String>,
}

impl StateReader {
    fn read_tag(&mut self, name: &str, values: &[String]) -> Result<(), SkipReason> {
        if name == "HEAD" {
            self.read_head(values)
        } else if name.starts_with(REFS_PREFIX) {
            self.read_ref(name, values)
        } else {
            Ok(())
        }
    }

    fn read_ref(&mut self, name: &str, values: &[String]) -> Result<(), SkipReason> {
        if !is_valid_ref_name(name) {
            return Err(SkipReason::InvalidRefName(clip(name)));
        }
        let value = values.first().ok_or(SkipReason::MissingValue)?;
        let oid = GitOid::parse(value).map_err(SkipReason::InvalidOid)?;
        if !self.seen_ref_names.insert(name.to_owned()) {
            return Err(SkipReason::DuplicateRef(clip(name)));
        }
        self.refs.push((name.to_owned(), oid));
        Ok(())
    }

    fn read_head(&mut self, values: &[String]) -> Result<(), SkipReason> {
        let value = values.first().ok_or(SkipReason::MissingValue)?;
        let target = value
            .strip_prefix(SYMBOLIC_REF_PREFIX)
            .filter(|target| is_valid_ref_name(target))
            .ok_or_else(|| SkipReason::InvalidHead(clip(value)))?;
        if self.head.is_some() {
            return Err(SkipReason::DuplicateHead);
        }
        self.head = Some(target.to_owned());
        Ok(())
    }
}

/// Whether `name` is a full ref name git accepts (`git check-ref-format` rules):
/// starts with `refs/`, no empty component, no component starting with `.` or ending in
/// `.lock`, no `..`, no `@{`, no control character, space, `~ ^ : ? * [ \`, no trailing
/// `/` or `.`, at most [`MAX_REF_NAME_LEN`] bytes.
fn is_valid_ref_name(name: &str) -> bool {
    name.starts_with(REFS_PREFIX)
        && name.len() <= MAX_REF_NAME_LEN
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.contains("@{")
        && name.bytes().all(is_allowed_ref_byte)
        && name.split('/').all(is_valid_ref_component)
}

fn is_allowed_ref_byte(byte: u8) -> bool {
    !byte.is_ascii_control() && !FORBIDDEN_REF_BYTES.contains(&byte)
}

fn is_valid_ref_component(component: &str) -> bool {
    !component.is_empty() && !component.starts_with('.') && !component.ends_with(".lock")
}

#[cfg(test)]
mod tests {
    use super::super::test_support::signed_event;
    use super::super::{GitOidError, RepoRefError, KIND_REPO_ANNOUNCEMENT};
    use super::*;

    const MAIN: &str = "1111111111111111111111111111111111111111";
    const TAG: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    fn oid(text: &str) -> GitOid {
        GitOid::parse(text).unwrap()
    }

    #[test]
    fn reads_refs_and_head() {
        let event = signed_event(
            KIND_REPO_STATE,
            &[
                &["d", "repo"],
                &["refs/heads/main", MAIN, "abc1234"],
                &["refs/tags/v1", TAG],
                &["HEAD", "ref: refs/heads/main"],
            ],
        );
        let state = parse_repo_state(&event).unwrap();
        assert_eq!(state.identifier, "repo");
        assert_eq!(
            state.refs,
            vec![
                ("refs/heads/main".to_owned(), oid(MAIN)),
                ("refs/tags/v1".to_owned(), oid(TAG))
            ]
        );
        assert_eq!(state.head.as_deref(), Some("refs/heads/main"));
        assert!(state.skipped.is_empty());
    }

    #[test]
    fn state_without_refs_is_valid() {
        let event = signed_event(KIND_REPO_STATE, &[&["d", "repo"]]);
        let state = parse_repo_state(&event).unwrap();
        assert!(state.refs.is_empty());
        assert_eq!(state.head, None);
    }

    #[test]
    fn skips_bad_oids_and_missing_values() {
        let event = signed_event(
            KIND_REPO_STATE,
            &[
                &["d", "repo"],
                &["refs/heads/a", "not-an-oid"],
                &["refs/heads/b"],
                &["refs/heads/c", MAIN],
            ],
        );
        let state = parse_repo_state(&event).unwrap();
        assert_eq!(state.refs, vec![("refs/heads/c".to_owned(), oid(MAIN))]);
        assert_eq!(
            state.skipped,
            vec![
                SkippedTag {
                    index: 1,
                    reason: SkipReason::InvalidOid(GitOidError::WrongLength { len: 10 })
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::MissingValue
                },
            ]
        );
    }

    #[test]
    fn first_tag_for_a_ref_wins() {
        let event = signed_event(
            KIND_REPO_STATE,
            &[
                &["d", "repo"],
                &["refs/heads/main", MAIN],
                &["refs/heads/main", TAG],
            ],
        );
        let state = parse_repo_state(&event).unwrap();
        assert_eq!(state.refs, vec![("refs/heads/main".to_owned(), oid(MAIN))]);
        assert_eq!(
            state.skipped,
            vec![SkippedTag {
                index: 2,
                reason: SkipReason::DuplicateRef("refs/heads/main".into())
            }]
        );
    }

    #[test]
    fn skips_ref_names_git_would_refuse() {
        for name in [
            "refs/heads/a..b",
            "refs/heads/a b",
            "refs/heads/a~1",
            "refs/heads/a^{}",
            "refs/tags/v1^{}",
            "refs/heads/a:b",
            "refs/heads/a?",
            "refs/heads/a*",
            "refs/heads/a[",
            "refs/heads/a\\b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/",
            "refs//heads",
            "refs/heads/x.",
            "refs/heads/a@{1}",
            "refs/heads/a\u{1}",
            "refs/heads/a\u{7f}",
        ] {
            let event = signed_event(KIND_REPO_STATE, &[&["d", "r"], &[name, MAIN]]);
            let state = parse_repo_state(&event).unwrap();
            assert!(state.refs.is_empty(), "{name:?}");
            assert_eq!(
                state.skipped,
                vec![SkippedTag {
                    index: 1,
                    reason: SkipReason::InvalidRefName(name.into())
                }],
                "{name:?}"
            );
        }
    }

    #[test]
    fn accepts_ordinary_ref_names() {
        for name in [
            "refs/heads/main",
            "refs/heads/feature/x-1",
            "refs/tags/v1.2.3",
            "refs/heads/ü",
            "refs/heads/a@b",
        ] {
            assert!(is_valid_ref_name(name), "{name}");
        }
        assert!(!is_valid_ref_name("HEAD"));
        assert!(!is_valid_ref_name(&format!(
            "refs/heads/{}",
            "a".repeat(MAX_REF_NAME_LEN)
        )));
    }

    #[test]
    fn skips_bad_and_duplicate_heads() {
        let event = signed_event(
            KIND_REPO_STATE,
            &[
                &["d", "repo"],
                &["HEAD"],
                &["HEAD", MAIN],
                &["HEAD", "ref: refs/heads/../x"],
                &["HEAD", "ref: refs/heads/dev"],
                &["HEAD", "ref: refs/heads/main"],
            ],
        );
        let state = parse_repo_state(&event).unwrap();
        assert_eq!(state.head.as_deref(), Some("refs/heads/dev"));
        assert_eq!(
            state.skipped,
            vec![
                SkippedTag {
                    index: 1,
                    reason: SkipReason::MissingValue
                },
                SkippedTag {
                    index: 2,
                    reason: SkipReason::InvalidHead(MAIN.into())
                },
                SkippedTag {
                    index: 3,
                    reason: SkipReason::InvalidHead("ref: refs/heads/../x".into())
                },
                SkippedTag {
                    index: 5,
                    reason: SkipReason::DuplicateHead
                },
            ]
        );
    }

    #[test]
    fn ignores_other_tags() {
        let event = signed_event(
            KIND_REPO_STATE,
            &[&["d", "repo"], &["alt", "x"], &["refs", MAIN], &["t"]],
        );
        let state = parse_repo_state(&event).unwrap();
        assert!(state.refs.is_empty());
        assert!(state.skipped.is_empty());
    }

    #[test]
    fn fails_without_valid_identifier_or_on_wrong_kind() {
        let no_d = signed_event(KIND_REPO_STATE, &[&["refs/heads/main", MAIN]]);
        assert_eq!(parse_repo_state(&no_d), Err(Nip34Error::MissingIdentifier));
        let empty_d = signed_event(KIND_REPO_STATE, &[&["d", ""]]);
        assert_eq!(
            parse_repo_state(&empty_d),
            Err(Nip34Error::InvalidRepoRef(RepoRefError::EmptyIdentifier))
        );
        let announcement = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["d", "repo"]]);
        assert_eq!(
            parse_repo_state(&announcement),
            Err(Nip34Error::WrongKind {
                expected: KIND_REPO_STATE,
                found: KIND_REPO_ANNOUNCEMENT
            })
        );
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
            let _ = parse_repo_state(&unsigned_event(kind, tags));
        }

        #[test]
        fn results_are_consistent(tags in arb_tags()) {
            let event = unsigned_event(KIND_REPO_STATE, tags);
            if let Ok(state) = parse_repo_state(&event) {
                let names: HashSet<_> = state.refs.iter().map(|(name, _)| name).collect();
                prop_assert_eq!(names.len(), state.refs.len());
                prop_assert!(state.refs.iter().all(|(name, _)| is_valid_ref_name(name)));
                prop_assert!(state.head.iter().all(|head| is_valid_ref_name(head)));
                prop_assert!(state.skipped.iter().all(|s| s.index < event.tags.len()));
            }
        }

        #[test]
        fn valid_ref_names_have_no_forbidden_sequences(name in "refs/[ -~]{0,30}") {
            if is_valid_ref_name(&name) {
                prop_assert!(!name.contains(".."));
                prop_assert!(!name.contains("//"));
                prop_assert!(!name.bytes().any(|b| FORBIDDEN_REF_BYTES.contains(&b)));
            }
        }
    }
}
