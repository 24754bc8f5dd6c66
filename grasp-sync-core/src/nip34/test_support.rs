//! Helpers for the NIP-34 tests: real signed events, unsigned events with arbitrary tags,
//! and proptest strategies for hostile tag lists.

use nostr::event::{Event, EventBuilder, EventId, FinalizeEvent, Kind, Signature, Tag};
use nostr::key::{Keys, PublicKey};
use nostr::types::Timestamp;
use proptest::prelude::*;

use super::{
    KIND_ISSUE, KIND_PATCH, KIND_PULL_REQUEST, KIND_PULL_REQUEST_UPDATE, KIND_REPO_ANNOUNCEMENT,
    KIND_REPO_STATE,
};

/// A real event of `kind` with `tags`, signed by fresh keys.
pub(crate) fn signed_event(kind: u16, tags: &[&[&str]]) -> Event {
    signed_event_by(&Keys::generate(), kind, tags)
}

/// A real event of `kind` with `tags`, signed by `keys`.
pub(crate) fn signed_event_by(keys: &Keys, kind: u16, tags: &[&[&str]]) -> Event {
    let tags: Vec<Tag> = tags
        .iter()
        .map(|tag| Tag::parse(tag.iter().copied()).expect("test tags are not empty"))
        .collect();
    EventBuilder::new(Kind::from(kind), "")
        .tags(tags)
        .finalize(keys)
        .expect("signing a test event")
}

/// An event with an all-zero id and signature (not verifiable) carrying any tags.
///
/// Empty tag vectors are dropped, since [`Tag::parse`] refuses them.
pub(crate) fn unsigned_event(kind: u16, tags: Vec<Vec<String>>) -> Event {
    let tags: Vec<Tag> = tags
        .into_iter()
        .filter_map(|tag| Tag::parse(tag).ok())
        .collect();
    Event::new(
        EventId::from_byte_array([0; 32]),
        PublicKey::from_byte_array([2; 32]),
        Timestamp::from_secs(0),
        Kind::from(kind),
        tags,
        "",
        Signature::from_byte_array([0; 64]),
    )
}

/// The NIP-34 kinds, plus any other kind.
pub(crate) fn arb_kind() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(KIND_REPO_ANNOUNCEMENT),
        Just(KIND_REPO_STATE),
        Just(KIND_PATCH),
        Just(KIND_PULL_REQUEST),
        Just(KIND_PULL_REQUEST_UPDATE),
        Just(KIND_ISSUE),
        any::<u16>(),
    ]
}

fn arb_tag_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "d",
            "relays",
            "clone",
            "maintainers",
            "a",
            "e",
            "E",
            "c",
            "HEAD",
            "refs/heads/main",
            "refs/tags/v1",
            "",
        ])
        .prop_map(str::to_owned),
        "refs/[ -~]{0,20}",
        any::<String>(),
    ]
}

fn arb_tag_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "(wss?|https?)://[ -~]{0,30}",
        "30617:[0-9a-f]{64}:[ -~]{0,20}",
        "[0-9]{0,6}:[0-9a-fA-F]{0,66}(:[ -~]{0,10})?",
        "[0-9a-fA-F]{38,66}",
        "ref: [ -~]{0,30}",
        Just(String::new()),
    ]
}

/// Arbitrary tag lists (some tags empty), with names and values biased towards NIP-34.
pub(crate) fn arb_tags() -> impl Strategy<Value = Vec<Vec<String>>> {
    let tag = (
        arb_tag_name(),
        prop::collection::vec(arb_tag_value(), 0..5),
        any::<bool>(),
    )
        .prop_map(|(name, mut values, empty)| {
            if empty {
                Vec::new()
            } else {
                values.insert(0, name);
                values
            }
        });
    prop::collection::vec(tag, 0..12)
}
