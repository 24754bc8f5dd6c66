//! Parsing of NIP-34 git-collaboration events.
//!
//! Kinds: 30617 repository announcement, 30618 repository state, 1617 patch, 1618 pull
//! request, 1619 pull request update, 1621 issue.
//!
//! Events come from strangers, so every function here takes any tag shape without
//! panicking: empty values, tags with only a name, huge values, wrong encodings. A
//! malformed tag (or one malformed value of a multi-value tag) is never dropped silently:
//! it is recorded as a [`SkippedTag`] with a [`SkipReason`], and the caller decides
//! whether to log it. Tags this module does not read are ignored without a record.
//!
//! Hex-encoded public keys and event ids must be 64 *lowercase* hex characters (as
//! NIP-01 requires), so that a [`RepoRef`] formats back to exactly the string other
//! events carry in their `a` tags. Git object ids ([`GitOid`]) are lowercased instead.

mod announcement;
mod git_oid;
mod references;
mod relay_list;
mod repo_ref;
mod state;

#[cfg(test)]
pub(crate) mod test_support;

use nostr::event::{Event, EventId, Kind, Tag};
use nostr::key::PublicKey;
use nostr::types::Timestamp;

pub use announcement::{parse_announcement, RepoAnnouncement, MAX_ANNOUNCEMENT_CLONE_URLS};
pub use git_oid::{GitOid, GitOidError};
pub use references::{
    pull_request_clone_urls, pull_request_tip, referenced_root_ids, root_event_repo_refs,
    MAX_PULL_REQUEST_CLONE_URLS,
};
pub use relay_list::{
    conversation_refs, is_conversation_kind, is_relay_list_kind, write_relays, ConversationRefs,
    KIND_COMMENT, KIND_GRASP_LIST, KIND_RELAY_LIST, KIND_STATUSES,
};
pub use repo_ref::{RepoRef, RepoRefError, MAX_IDENTIFIER_LEN};
pub use state::{parse_repo_state, RepoState, MAX_REF_NAME_LEN};

/// Kind of a repository announcement (addressable; `d` = repository identifier).
pub const KIND_REPO_ANNOUNCEMENT: u16 = 30617;
/// Kind of a repository state event (branch and tag tips).
pub const KIND_REPO_STATE: u16 = 30618;
/// Kind of a patch (a root event of a repository).
pub const KIND_PATCH: u16 = 1617;
/// Kind of a pull request (a root event of a repository).
pub const KIND_PULL_REQUEST: u16 = 1618;
/// Kind of a pull request update (refers to its pull request; not a root event).
pub const KIND_PULL_REQUEST_UPDATE: u16 = 1619;
/// Kind of an issue (a root event of a repository).
pub const KIND_ISSUE: u16 = 1621;

/// The longest piece of hostile text copied into a [`SkipReason`], in bytes.
const MAX_SKIP_TEXT_LEN: usize = 128;

/// Whether `kind` is a root event of a repository: patch (1617), pull request (1618) or
/// issue (1621). A pull request update (1619) is not a root.
pub fn is_root_kind(kind: Kind) -> bool {
    matches!(kind.as_u16(), KIND_PATCH | KIND_PULL_REQUEST | KIND_ISSUE)
}

/// `true` if the version `offered` (`created_at`, id) of a replaceable or
/// addressable event replaces the version `kept`: it is newer, or as new
/// with a lower id (NIP-01). The same version offered again does not.
pub fn replaces(offered: (Timestamp, EventId), kept: (Timestamp, EventId)) -> bool {
    offered.0 > kept.0 || (offered.0 == kept.0 && offered.1 < kept.1)
}

/// A value read from an event together with the tags that were skipped while reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed<T> {
    /// What was read.
    pub value: T,
    /// Tags (or values of multi-value tags) that were malformed and skipped.
    pub skipped: Vec<SkippedTag>,
}

/// A tag, or one value of a multi-value tag, that was skipped because it was malformed.
///
/// A tag with several bad values appears once per bad value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedTag {
    /// Position of the tag in the event's tag list.
    pub index: usize,
    /// Why it was skipped.
    pub reason: SkipReason,
}

/// Why a tag or a tag value was skipped.
///
/// Text copied from the event is shortened to at most 128 bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SkipReason {
    /// The tag has a name but no value.
    #[error("tag has no value")]
    MissingValue,
    /// A value is empty (or only whitespace).
    #[error("tag value is empty")]
    EmptyValue,
    /// A value is longer than allowed.
    #[error("tag value is {len} bytes long, more than the {max} allowed")]
    ValueTooLong {
        /// Length of the value in bytes.
        len: usize,
        /// The limit that was exceeded.
        max: usize,
    },
    /// A relay URL that [`nostr::types::RelayUrl::parse`] refused.
    #[error("invalid relay url '{0}'")]
    InvalidRelayUrl(String),
    /// A public key that is not 64 lowercase hex characters.
    #[error("invalid public key '{0}'")]
    InvalidPublicKey(String),
    /// An `a` coordinate of kind 30617 that is not a valid repository reference.
    #[error("invalid repository reference: {0}")]
    InvalidRepoRef(RepoRefError),
    /// An `a` coordinate of another kind than 30617.
    #[error("coordinate is not a repository announcement")]
    NotARepoRef,
    /// An event id that is not 64 lowercase hex characters.
    #[error("invalid event id '{0}'")]
    InvalidEventId(String),
    /// A git object id that is not 40 or 64 hex characters.
    #[error("invalid git object id: {0}")]
    InvalidOid(GitOidError),
    /// A ref name that git would not accept (see `git check-ref-format`).
    #[error("invalid ref name '{0}'")]
    InvalidRefName(String),
    /// A `HEAD` value that is not `ref: refs/...`.
    #[error("invalid HEAD value '{0}'")]
    InvalidHead(String),
    /// A second `d` tag; the first one gives the identifier.
    #[error("duplicate identifier tag")]
    DuplicateIdentifier,
    /// A second tag for a ref already given; the first one counts.
    #[error("duplicate ref '{0}'")]
    DuplicateRef(String),
    /// A second `HEAD` tag; the first one counts.
    #[error("duplicate HEAD tag")]
    DuplicateHead,
    /// A second valid `c` tag; the first one gives the tip.
    #[error("duplicate commit tip tag")]
    DuplicateTip,
    /// More values of this kind than are read; the first ones count.
    #[error("more than the {max} values read")]
    TooMany {
        /// How many are read.
        max: usize,
    },
}

/// Why an event could not be parsed at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Nip34Error {
    /// The event has another kind than the parser reads.
    #[error("expected an event of kind {expected}, found kind {found}")]
    WrongKind {
        /// The kind the parser reads.
        expected: u16,
        /// The event's kind.
        found: u16,
    },
    /// The event has no `d` tag, or its first `d` tag has no value.
    #[error("event has no identifier ('d' tag)")]
    MissingIdentifier,
    /// The identifier does not make a valid repository reference (empty or too long).
    #[error("invalid repository reference: {0}")]
    InvalidRepoRef(RepoRefError),
}

/// Collects skipped tags while a parser walks an event's tags.
#[derive(Debug, Default)]
struct SkipLog {
    skipped: Vec<SkippedTag>,
}

impl SkipLog {
    fn skip(&mut self, index: usize, reason: SkipReason) {
        self.skipped.push(SkippedTag { index, reason });
    }

    /// The records, ordered by tag position (values of one tag keep their order).
    fn into_sorted(mut self) -> Vec<SkippedTag> {
        self.skipped.sort_by_key(|skipped| skipped.index);
        self.skipped
    }
}

fn expect_kind(event: &Event, expected: u16) -> Result<(), Nip34Error> {
    let found = event.kind.as_u16();
    if found == expected {
        Ok(())
    } else {
        Err(Nip34Error::WrongKind { expected, found })
    }
}

/// The tags of `event` with their positions and names, skipping (impossible) nameless ones.
fn named_tags(event: &Event) -> impl Iterator<Item = (usize, &str, &[String])> {
    event
        .tags
        .iter()
        .enumerate()
        .filter_map(|(index, tag)| split_tag(tag).map(|(name, values)| (index, name, values)))
}

/// A tag's name and values, never panicking on an empty tag.
fn split_tag(tag: &Tag) -> Option<(&str, &[String])> {
    let (name, values) = tag.as_slice().split_first()?;
    Some((name.as_str(), values))
}

/// The identifier of an addressable event: the first `d` tag's first value.
///
/// Later `d` tags are recorded as [`SkipReason::DuplicateIdentifier`].
fn read_identifier(event: &Event, log: &mut SkipLog) -> Result<String, Nip34Error> {
    let mut first_value: Option<Option<&str>> = None;
    for (index, _, values) in named_tags(event).filter(|(_, name, _)| *name == "d") {
        match first_value {
            None => first_value = Some(values.first().map(String::as_str)),
            Some(_) => log.skip(index, SkipReason::DuplicateIdentifier),
        }
    }
    match first_value.flatten() {
        Some(identifier) => Ok(identifier.to_owned()),
        None => Err(Nip34Error::MissingIdentifier),
    }
}

/// The repository reference `30617:<author>:<identifier>` of an announcement or state.
fn repo_ref_of(author: PublicKey, identifier: &str) -> Result<RepoRef, Nip34Error> {
    RepoRef::new(author, identifier).map_err(Nip34Error::InvalidRepoRef)
}

/// Whether `text` is exactly 64 lowercase hex characters.
fn is_lower_hex_64(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// Parses a public key written as 64 lowercase hex characters.
fn parse_hex_public_key(text: &str) -> Option<PublicKey> {
    if !is_lower_hex_64(text) {
        return None;
    }
    PublicKey::from_hex(text).ok()
}

/// Shortens hostile text copied into a skip reason, cut at a character boundary.
fn clip(text: &str) -> String {
    if text.len() <= MAX_SKIP_TEXT_LEN {
        return text.to_owned();
    }
    let mut end = MAX_SKIP_TEXT_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::test_support::{signed_event, unsigned_event};
    use super::*;

    #[test]
    fn root_kinds_are_patch_pull_request_and_issue() {
        assert!(is_root_kind(Kind::from(KIND_PATCH)));
        assert!(is_root_kind(Kind::from(KIND_PULL_REQUEST)));
        assert!(is_root_kind(Kind::from(KIND_ISSUE)));
        assert!(!is_root_kind(Kind::from(KIND_PULL_REQUEST_UPDATE)));
        assert!(!is_root_kind(Kind::from(KIND_REPO_ANNOUNCEMENT)));
        assert!(!is_root_kind(Kind::from(KIND_REPO_STATE)));
        assert!(!is_root_kind(Kind::from(1)));
    }

    #[test]
    fn identifier_is_the_first_d_tag_and_later_ones_are_recorded() {
        let event = signed_event(
            KIND_REPO_ANNOUNCEMENT,
            &[&["d", "first"], &["t", "x"], &["d", "second"]],
        );
        let mut log = SkipLog::default();
        assert_eq!(read_identifier(&event, &mut log).unwrap(), "first");
        assert_eq!(
            log.into_sorted(),
            vec![SkippedTag {
                index: 2,
                reason: SkipReason::DuplicateIdentifier
            }]
        );
    }

    #[test]
    fn identifier_is_missing_when_the_first_d_tag_has_no_value() {
        let event = signed_event(KIND_REPO_ANNOUNCEMENT, &[&["d"], &["d", "later"]]);
        let mut log = SkipLog::default();
        assert_eq!(
            read_identifier(&event, &mut log),
            Err(Nip34Error::MissingIdentifier)
        );
    }

    #[test]
    fn tag_with_only_a_name_has_no_values() {
        let event = unsigned_event(KIND_ISSUE, vec![vec!["a".to_owned()]]);
        let tags: Vec<_> = named_tags(&event).collect();
        assert_eq!(tags.len(), 1);
        assert_eq!(tags[0].1, "a");
        assert!(tags[0].2.is_empty());
    }

    #[test]
    fn lower_hex_check_is_exact() {
        assert!(is_lower_hex_64(&"ab".repeat(32)));
        assert!(!is_lower_hex_64(&"AB".repeat(32)));
        assert!(!is_lower_hex_64(&"ab".repeat(33)));
        assert!(!is_lower_hex_64(&"ab".repeat(31)));
        assert!(!is_lower_hex_64(&"zz".repeat(32)));
        assert!(!is_lower_hex_64(""));
    }

    #[test]
    fn hex_public_key_refuses_longer_strings() {
        // faster-hex would decode a 66-char string into 32 bytes: length is checked here.
        let keys = nostr::key::Keys::generate();
        let hex = keys.public_key().to_hex();
        assert_eq!(parse_hex_public_key(&hex), Some(keys.public_key()));
        assert_eq!(parse_hex_public_key(&format!("{hex}00")), None);
        assert_eq!(parse_hex_public_key(&hex.to_uppercase()), None);
    }

    #[test]
    fn a_newer_version_or_an_as_new_one_with_a_lower_id_replaces_the_kept_one() {
        let (low, high) = (
            EventId::from_byte_array([1; 32]),
            EventId::from_byte_array([2; 32]),
        );
        let (t, later) = (Timestamp::from_secs(10), Timestamp::from_secs(11));
        assert!(replaces((later, high), (t, low)));
        assert!(replaces((t, low), (t, high)));
        assert!(!replaces((t, high), (t, low)));
        assert!(!replaces((t, low), (t, low)), "the same version again");
        assert!(!replaces((t, low), (later, high)));
    }

    #[test]
    fn clip_shortens_at_a_character_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "ü".repeat(200);
        let clipped = clip(&long);
        assert!(clipped.len() <= MAX_SKIP_TEXT_LEN);
        assert!(long.starts_with(&clipped));
    }

    #[test]
    fn wrong_kind_names_both_kinds() {
        let event = signed_event(KIND_ISSUE, &[]);
        assert_eq!(
            expect_kind(&event, KIND_REPO_STATE),
            Err(Nip34Error::WrongKind {
                expected: KIND_REPO_STATE,
                found: KIND_ISSUE
            })
        );
    }
}
