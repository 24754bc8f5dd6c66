//! Crossing between nostr versions: a host on another rust-nostr line
//! (crates.io 0.44.x, a git fork of 0.44, an older or newer release) hands
//! its events, filters, ids and relay URLs to us (nostr 0.45) and takes ours
//! back, without a conversion written per version.
//!
//! Every rust-nostr `Event`, `Filter`, `EventId`, `PublicKey` and `RelayUrl`
//! implements serde's `Serialize` and `Deserialize` as the NIP-01 JSON the
//! protocol fixes (an event's `id`, `pubkey`, `created_at`, `kind`, `tags`,
//! `content`, `sig`; a filter's `ids`, `authors`, `kinds`, `#<letter>`,
//! `since`, `until`, `limit`; an id as 64 hex digits; a URL as its text), so
//! a value crosses by being written as that JSON on one side and read on the
//! other. The functions here are generic over the other side's type (`T`):
//! they name no nostr version but ours. Ids also cross by their 32 bytes
//! ([`event_id_from_bytes`]), and a host that holds raw JSON uses
//! [`event_from_json`] / [`event_to_json`].
//!
//! Nothing is verified on the way: an event's id and signature cross as they
//! are (the bytes the author signed are unchanged, so a signature valid on
//! one side is valid on the other). Whatever does not read as the type on the
//! receiving side is a [`CrossingError`] naming what failed to cross, never a
//! panic.
//!
//! ```
//! use grasp_sync_core::crossing;
//! use nostr::prelude::*;
//!
//! // A host's JSON (here written by hand; any nostr version's `Event` works
//! // through `event_from`).
//! let ours = EventBuilder::new(Kind::TextNote, "hello")
//!     .finalize(&Keys::generate())
//!     .unwrap();
//! let json = crossing::event_to_json(&ours);
//! let back = crossing::event_from_json(&json).unwrap();
//! assert_eq!(back, ours);
//! assert!(crossing::event_from_json("{\"id\":1}").is_err());
//! ```

use std::fmt;

use nostr::prelude::{Coordinate, Event, EventId, Filter, Kind, PublicKey, RelayUrl, Timestamp};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a crossing carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossed {
    /// An event.
    Event,
    /// A filter.
    Filter,
    /// An event id.
    EventId,
    /// A relay URL.
    RelayUrl,
    /// A public key.
    PublicKey,
    /// A timestamp.
    Timestamp,
    /// An event coordinate (`<kind>:<pubkey>:<d>`, an `a` tag's value).
    Coordinate,
}

impl fmt::Display for Crossed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Crossed::Event => "event",
            Crossed::Filter => "filter",
            Crossed::EventId => "event id",
            Crossed::RelayUrl => "relay URL",
            Crossed::PublicKey => "public key",
            Crossed::Timestamp => "timestamp",
            Crossed::Coordinate => "coordinate",
        })
    }
}

/// A value that did not cross.
#[derive(Debug, thiserror::Error)]
pub enum CrossingError {
    /// The sending side's value did not write as JSON (its `Serialize`
    /// failed).
    #[error("the {what} could not be written as NIP-01 JSON: {source}")]
    Write {
        /// What was crossing.
        what: Crossed,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// The JSON did not read as the receiving side's type (malformed, or a
    /// field out of range: an id not 64 hex digits, a URL not `ws(s)://` …).
    #[error("the {what} is not valid NIP-01 JSON for this side: {source}")]
    Read {
        /// What was crossing.
        what: Crossed,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// The text or bytes are not a valid value of this side (a coordinate
    /// not `<kind>:<pubkey>:<d>`, 32 bytes that are no public key).
    #[error("the {what} is not valid: {reason}")]
    Parse {
        /// What was crossing.
        what: Crossed,
        /// Why it is not valid, as the parser said it (clipped).
        reason: String,
    },
}

impl CrossingError {
    /// What failed to cross.
    pub fn crossed(&self) -> Crossed {
        match self {
            CrossingError::Write { what, .. }
            | CrossingError::Read { what, .. }
            | CrossingError::Parse { what, .. } => *what,
        }
    }
}

/// `value` written as JSON on its side and read as `U` on the other.
fn cross<T: Serialize + ?Sized, U: DeserializeOwned>(
    what: Crossed,
    value: &T,
) -> Result<U, CrossingError> {
    let json = serde_json::to_vec(value).map_err(|source| CrossingError::Write { what, source })?;
    serde_json::from_slice(&json).map_err(|source| CrossingError::Read { what, source })
}

/// Another nostr version's event as ours.
pub fn event_from<T: Serialize>(theirs: &T) -> Result<Event, CrossingError> {
    cross(Crossed::Event, theirs)
}

/// Our event as another nostr version's.
pub fn event_into<T: DeserializeOwned>(ours: &Event) -> Result<T, CrossingError> {
    cross(Crossed::Event, ours)
}

/// Another nostr version's filter as ours (generic tags such as `#a`
/// included).
pub fn filter_from<T: Serialize>(theirs: &T) -> Result<Filter, CrossingError> {
    cross(Crossed::Filter, theirs)
}

/// Our filter as another nostr version's.
pub fn filter_into<T: DeserializeOwned>(ours: &Filter) -> Result<T, CrossingError> {
    cross(Crossed::Filter, ours)
}

/// Another nostr version's event id as ours.
pub fn event_id_from<T: Serialize>(theirs: &T) -> Result<EventId, CrossingError> {
    cross(Crossed::EventId, theirs)
}

/// Our event id as another nostr version's.
pub fn event_id_into<T: DeserializeOwned>(ours: &EventId) -> Result<T, CrossingError> {
    cross(Crossed::EventId, ours)
}

/// An event id from its 32 bytes (every version's `EventId::to_bytes`):
/// the crossing that cannot fail.
pub fn event_id_from_bytes(bytes: [u8; 32]) -> EventId {
    EventId::from_byte_array(bytes)
}

/// Another nostr version's relay URL as ours.
pub fn relay_url_from<T: Serialize>(theirs: &T) -> Result<RelayUrl, CrossingError> {
    cross(Crossed::RelayUrl, theirs)
}

/// Our relay URL as another nostr version's.
pub fn relay_url_into<T: DeserializeOwned>(ours: &RelayUrl) -> Result<T, CrossingError> {
    cross(Crossed::RelayUrl, ours)
}

/// Another nostr version's public key as ours (every version writes it as
/// its 64 hex digits).
pub fn public_key_from<T: Serialize>(theirs: &T) -> Result<PublicKey, CrossingError> {
    cross(Crossed::PublicKey, theirs)
}

/// Our public key as another nostr version's.
pub fn public_key_into<T: DeserializeOwned>(ours: &PublicKey) -> Result<T, CrossingError> {
    cross(Crossed::PublicKey, ours)
}

/// A public key from its 32 bytes (every version's `PublicKey::to_bytes`):
/// the crossing that cannot fail (like an event's signature, whether the
/// bytes are a point on the curve is checked where the key is used).
pub fn public_key_from_bytes(bytes: [u8; 32]) -> PublicKey {
    PublicKey::from_byte_array(bytes)
}

/// Another nostr version's timestamp as ours (every version writes it as
/// its seconds since the epoch).
pub fn timestamp_from<T: Serialize>(theirs: &T) -> Result<Timestamp, CrossingError> {
    cross(Crossed::Timestamp, theirs)
}

/// Our timestamp as another nostr version's.
pub fn timestamp_into<T: DeserializeOwned>(ours: &Timestamp) -> Result<T, CrossingError> {
    cross(Crossed::Timestamp, ours)
}

/// Another nostr version's event coordinate as ours, by its NIP-01 text
/// `<kind>:<pubkey>:<d>` (every version's `Display`, the value of an `a`
/// tag): the form that does not depend on how a version lays the struct
/// out.
pub fn coordinate_from<T: fmt::Display + ?Sized>(theirs: &T) -> Result<Coordinate, CrossingError> {
    coordinate_from_text(&theirs.to_string())
}

/// Our event coordinate as another nostr version's, through its NIP-01
/// text (every version's `FromStr`; rust-nostr's parsers up to 0.45 keep a
/// `d` only up to its first `:`, ours keeps it whole).
pub fn coordinate_into<T>(ours: &Coordinate) -> Result<T, CrossingError>
where
    T: std::str::FromStr,
    T::Err: fmt::Display,
{
    coordinate_to_text(ours)
        .parse()
        .map_err(|error| parse_error(Crossed::Coordinate, error))
}

/// An event coordinate from its NIP-01 text `<kind>:<pubkey>:<d>`: the
/// kind a number, the key 64 hex digits, the `d` everything after the
/// second `:` (it may hold `:` itself; empty or absent for a replaceable
/// event).
pub fn coordinate_from_text(text: &str) -> Result<Coordinate, CrossingError> {
    let mut parts = text.splitn(3, ':');
    let kind = parts
        .next()
        .and_then(|kind| kind.parse::<u16>().ok())
        .ok_or_else(|| parse_error(Crossed::Coordinate, "the kind is not a number"))?;
    let key = parts
        .next()
        .ok_or_else(|| parse_error(Crossed::Coordinate, "no public key"))?;
    let key = PublicKey::from_hex(key).map_err(|error| parse_error(Crossed::Coordinate, error))?;
    let identifier = parts.next().unwrap_or_default();
    Ok(Coordinate::new(Kind::from(kind), key).identifier(identifier))
}

/// An event coordinate's NIP-01 text `<kind>:<pubkey>:<d>`.
pub fn coordinate_to_text(coordinate: &Coordinate) -> String {
    coordinate.to_string()
}

/// A [`CrossingError::Parse`] of `what`, its reason clipped to one line of
/// at most 200 characters (a reason may quote the input).
fn parse_error(what: Crossed, error: impl fmt::Display) -> CrossingError {
    let reason: String = error
        .to_string()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    CrossingError::Parse { what, reason }
}

/// An event from its NIP-01 JSON (for a host that holds events as text).
pub fn event_from_json(json: &str) -> Result<Event, CrossingError> {
    serde_json::from_str(json).map_err(|source| CrossingError::Read {
        what: Crossed::Event,
        source,
    })
}

/// An event's NIP-01 JSON.
pub fn event_to_json(event: &Event) -> String {
    event.as_json()
}

/// A filter from its NIP-01 JSON.
pub fn filter_from_json(json: &str) -> Result<Filter, CrossingError> {
    serde_json::from_str(json).map_err(|source| CrossingError::Read {
        what: Crossed::Filter,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, SingleLetterTag, Tag};

    fn signed() -> Event {
        let keys = Keys::generate();
        EventBuilder::new(Kind::from(1621), "an issue")
            .tag(Tag::parse(["a", "30617:abc:repo"]).expect("a tag"))
            .finalize(&keys)
            .expect("signed")
    }

    #[test]
    fn an_event_round_trips_through_its_json_and_still_verifies() {
        let event = signed();
        let back = event_from_json(&event_to_json(&event)).expect("reads");
        assert_eq!(back, event);
        assert!(back.verify().is_ok());
        // Through the generic crossing, as a host's type would go.
        let value: serde_json::Value = event_into(&event).expect("into");
        assert_eq!(event_from(&value).expect("from"), event);
    }

    #[test]
    fn a_filter_round_trips_with_tags_since_until_and_limit() {
        let filter = Filter::new()
            .kind(Kind::from(1621))
            .custom_tag(SingleLetterTag::LOWERCASE_A, "30617:abc:repo")
            .since(Timestamp::from_secs(10))
            .until(Timestamp::from_secs(20))
            .limit(5);
        let value: serde_json::Value = filter_into(&filter).expect("into");
        assert_eq!(value["#a"][0], "30617:abc:repo");
        assert_eq!(filter_from(&value).expect("from"), filter);
        let json = serde_json::to_string(&value).expect("text");
        assert_eq!(filter_from_json(&json).expect("from json"), filter);
    }

    #[test]
    fn ids_and_urls_round_trip() {
        let id = signed().id;
        let text: String = event_id_into(&id).expect("into");
        assert_eq!(text, id.to_hex());
        assert_eq!(event_id_from(&text).expect("from"), id);
        assert_eq!(event_id_from_bytes(id.to_bytes()), id);
        let url = RelayUrl::parse("wss://relay.example.com").expect("url");
        let text: String = relay_url_into(&url).expect("into");
        assert_eq!(relay_url_from(&text).expect("from"), url);
    }

    #[test]
    fn keys_timestamps_and_coordinates_round_trip() {
        let keys = Keys::generate();
        let key = keys.public_key();
        let text: String = public_key_into(&key).expect("into");
        assert_eq!(text, key.to_hex());
        assert_eq!(public_key_from(&text).expect("from"), key);
        assert_eq!(public_key_from_bytes(key.to_bytes()), key);
        let at = Timestamp::from_secs(1_700_000_000);
        let secs: u64 = timestamp_into(&at).expect("into");
        assert_eq!(secs, 1_700_000_000);
        assert_eq!(timestamp_from(&secs).expect("from"), at);
        let coordinate = Coordinate::new(Kind::from(30617), key).identifier("repo:with:colons");
        let text = coordinate_to_text(&coordinate);
        assert_eq!(text, format!("30617:{}:repo:with:colons", key.to_hex()));
        assert_eq!(coordinate_from_text(&text).expect("text"), coordinate);
        assert_eq!(coordinate_from(&text).expect("from"), coordinate);
        // Another version's parser (rust-nostr's own, here) reads the text.
        let simple = Coordinate::new(Kind::from(30618), key).identifier("repo");
        let back: Coordinate = coordinate_into(&simple).expect("into");
        assert_eq!(back, simple);
        let replaceable = coordinate_from_text(&format!("10002:{}:", key.to_hex())).expect("no d");
        assert_eq!(replaceable.identifier, "");
    }

    #[test]
    fn malformed_input_is_an_error_naming_what_failed_not_a_panic() {
        for json in ["", "{", "null", "[]", "{\"id\":\"zz\"}", "\u{0}"] {
            let error = event_from_json(json).expect_err(json);
            assert_eq!(error.crossed(), Crossed::Event);
            assert!(error.to_string().contains("event"), "{error}");
        }
        assert!(filter_from_json("{\"limit\":-1}").is_err());
        let error = event_id_from(&"not hex").expect_err("not an id");
        assert_eq!(error.crossed(), Crossed::EventId);
        let error = relay_url_from(&"http://example.com").expect_err("not a relay url");
        assert_eq!(error.crossed(), Crossed::RelayUrl);
        // A valid event of ours cannot read as a filter (`kind` is no
        // filter field … but unknown fields are accepted): an id field of
        // the wrong type is refused.
        assert!(filter_from(&serde_json::json!({"ids": 5})).is_err());
        let error = public_key_from(&"zz").expect_err("not a key");
        assert_eq!(error.crossed(), Crossed::PublicKey);
        let error = timestamp_from(&-1).expect_err("before the epoch");
        assert_eq!(error.crossed(), Crossed::Timestamp);
        for text in [
            "",
            "30617",
            "x:y:z",
            "30617:zz:repo",
            &format!("30617:{}\n:{}", "a".repeat(500), "b"),
        ] {
            let error = coordinate_from_text(text).expect_err(text);
            assert_eq!(error.crossed(), Crossed::Coordinate);
            let line = error.to_string();
            assert!(
                !line.contains('\n') && line.len() < 300,
                "one bounded line: {line}"
            );
        }
    }
}
