//! What GRASP-03 ("Sync+") reads of an event: a participant's write relays
//! (NIP-65 kind 10002, the user's GRASP servers kind 10317), and which
//! repositories and root events a conversation event belongs to.

use indexmap::IndexSet;
use nostr::event::{Event, EventId};
use nostr::prelude::{Kind, RelayUrl};

use super::announcement::check_url_text;
use super::{
    clip, is_lower_hex_64, named_tags, Parsed, RepoRef, SkipLog, SkipReason, KIND_ISSUE,
    KIND_PATCH, KIND_PULL_REQUEST, KIND_PULL_REQUEST_UPDATE,
};

/// Kind of a NIP-65 relay list (replaceable; `r` tags, optionally marked
/// `read` or `write`).
pub const KIND_RELAY_LIST: u16 = 10002;
/// Kind of a user's GRASP server list (replaceable; `g` tags).
pub const KIND_GRASP_LIST: u16 = 10317;
/// Kind of a NIP-22 comment.
pub const KIND_COMMENT: u16 = 1111;
/// Kinds of NIP-34 statuses (open, applied/merged, closed, draft).
pub const KIND_STATUSES: std::ops::RangeInclusive<u16> = 1630..=1633;

/// `true` for the kinds a relay list is read from (10002, 10317).
pub fn is_relay_list_kind(kind: Kind) -> bool {
    matches!(kind.as_u16(), KIND_RELAY_LIST | KIND_GRASP_LIST)
}

/// `true` for the kinds whose author joins a repository's participants once
/// the event is admitted to its conversation: patches, pull requests and
/// their updates, issues, NIP-22 comments and statuses.
pub fn is_conversation_kind(kind: Kind) -> bool {
    let kind = kind.as_u16();
    matches!(
        kind,
        KIND_PATCH | KIND_PULL_REQUEST | KIND_PULL_REQUEST_UPDATE | KIND_ISSUE | KIND_COMMENT
    ) || KIND_STATUSES.contains(&kind)
}

/// The relays a participant writes to, from a relay list: a 10002's `r` tags
/// not marked `read`, a 10317's `g` tags; normalised by [`RelayUrl::parse`],
/// de-duplicated, in order of appearance. An event of another kind has none.
/// Not yet checked against a relay URL policy.
pub fn write_relays(event: &Event) -> Parsed<Vec<RelayUrl>> {
    let tag = match event.kind.as_u16() {
        KIND_RELAY_LIST => "r",
        KIND_GRASP_LIST => "g",
        _ => {
            return Parsed {
                value: Vec::new(),
                skipped: Vec::new(),
            }
        }
    };
    let mut log = SkipLog::default();
    let mut relays = IndexSet::new();
    for (index, _, values) in named_tags(event).filter(|(_, name, _)| *name == tag) {
        if tag == "r" && values.get(1).is_some_and(|marker| marker == "read") {
            continue;
        }
        match read_relay(values) {
            Ok(relay) => {
                relays.insert(relay);
            }
            Err(reason) => log.skip(index, reason),
        }
    }
    Parsed {
        value: relays.into_iter().collect(),
        skipped: log.into_sorted(),
    }
}

/// What a conversation event points at: the repositories of its `a` and `A`
/// tags and the events of its `e` and `E` tags (first values; malformed ones
/// skipped), de-duplicated, in order of appearance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConversationRefs {
    /// Repositories (`a`, `A`: coordinates of kind 30617).
    pub repos: Vec<RepoRef>,
    /// Events (`e`, `E`).
    pub events: Vec<EventId>,
}

/// The repositories and events `event` points at ([`ConversationRefs`]).
pub fn conversation_refs(event: &Event) -> ConversationRefs {
    let mut repos = IndexSet::new();
    let mut events = IndexSet::new();
    for (_, name, values) in named_tags(event) {
        let Some(value) = values.first() else {
            continue;
        };
        match name {
            "a" | "A" => {
                if let Ok(repo) = RepoRef::parse(value) {
                    repos.insert(repo);
                }
            }
            "e" | "E" if is_lower_hex_64(value) => {
                if let Ok(id) = EventId::from_hex(value) {
                    events.insert(id);
                }
            }
            _ => {}
        }
    }
    ConversationRefs {
        repos: repos.into_iter().collect(),
        events: events.into_iter().collect(),
    }
}

fn read_relay(values: &[String]) -> Result<RelayUrl, SkipReason> {
    let value = values.first().ok_or(SkipReason::MissingValue)?;
    let url = check_url_text(value)?;
    RelayUrl::parse(url).map_err(|_| SkipReason::InvalidRelayUrl(clip(url)))
}

#[cfg(test)]
mod tests {
    use nostr::prelude::Keys;

    use super::*;
    use crate::nip34::test_support::{signed_event, signed_event_by};

    fn url(text: &str) -> RelayUrl {
        RelayUrl::parse(text).unwrap()
    }

    #[test]
    fn a_relay_list_gives_its_relays_not_marked_read() {
        let event = signed_event(
            KIND_RELAY_LIST,
            &[
                &["r", "wss://both.example"],
                &["r", "wss://write.example", "write"],
                &["r", "wss://read.example", "read"],
                &["r", "not a url"],
                &["r"],
                &["r", "wss://both.example/"],
            ],
        );
        let parsed = write_relays(&event);
        assert_eq!(
            parsed.value,
            vec![url("wss://both.example"), url("wss://write.example")]
        );
        assert_eq!(parsed.skipped.len(), 2, "{:?}", parsed.skipped);
    }

    #[test]
    fn a_grasp_list_gives_its_g_tags() {
        let event = signed_event(
            KIND_GRASP_LIST,
            &[&["g", "wss://grasp.example"], &["r", "wss://other.example"]],
        );
        assert_eq!(write_relays(&event).value, vec![url("wss://grasp.example")]);
    }

    #[test]
    fn another_kind_has_no_write_relays() {
        let event = signed_event(1, &[&["r", "wss://a.example"]]);
        assert!(write_relays(&event).value.is_empty());
    }

    #[test]
    fn conversation_refs_read_both_cases_and_skip_malformed_tags() {
        let keys = Keys::generate();
        let repo = format!("30617:{}:demo", keys.public_key().to_hex());
        let id = EventId::from_byte_array([0; 32]).to_hex();
        let event = signed_event_by(
            &keys,
            KIND_COMMENT,
            &[
                &["A", &repo],
                &["a", &repo],
                &["a", "30023:nonsense"],
                &["E", &id],
                &["e", "xyz"],
                &["e"],
            ],
        );
        let refs = conversation_refs(&event);
        assert_eq!(refs.repos.len(), 1);
        assert_eq!(refs.events, vec![EventId::from_byte_array([0; 32])]);
    }

    #[test]
    fn conversation_kinds() {
        for kind in [1617, 1618, 1619, 1621, 1111, 1630, 1633] {
            assert!(is_conversation_kind(Kind::from(kind)), "{kind}");
        }
        for kind in [1, 30617, 30618, 10002, 1634] {
            assert!(!is_conversation_kind(Kind::from(kind)), "{kind}");
        }
    }
}
