//! Crossing the version line between the relay builder's nostr (0.44, as
//! crates.io's nostr-relay-builder 0.44.1 pulls it) and ours (0.45), for a
//! host that holds [`r44`](crate::r44) values: events, filters and URLs go
//! through their NIP-01 JSON ([`grasp_sync_core::crossing`], which works for
//! any nostr version; a host on a git fork of 0.44 calls it directly with
//! its own types), ids and timestamps through their bytes and seconds.
//!
//! Nothing is verified on the way: a signature valid on one side is valid on
//! the other (the signed bytes cross unchanged).
//!
//! ```
//! use grasp_sync_relay_builder::convert;
//! use grasp_sync_relay_builder::r44;
//! use nostr::prelude::*;
//!
//! let ours = Filter::new().kind(Kind::GitRepoAnnouncement).limit(10);
//! let theirs: r44::Filter = convert::filter_to_r44(&ours).unwrap();
//! assert_eq!(convert::filter_from_r44(&theirs).unwrap(), ours);
//! ```

use grasp_sync_core::crossing::{self, CrossingError};
use nostr::prelude::{Event, EventId, Filter, RelayUrl, Timestamp};
use nostr_relay_builder::prelude as r44;

/// A value that did not cross (the crossing's error; never expected between
/// two rust-nostr versions: both speak NIP-01 JSON).
pub type ConvertError = CrossingError;

/// Our event as the relay builder's.
pub fn event_to_r44(event: &Event) -> Result<r44::Event, ConvertError> {
    crossing::event_into(event)
}

/// The relay builder's event as ours.
pub fn event_from_r44(event: &r44::Event) -> Result<Event, ConvertError> {
    crossing::event_from(event)
}

/// Our filter as the relay builder's (generic tags such as `#a` included).
pub fn filter_to_r44(filter: &Filter) -> Result<r44::Filter, ConvertError> {
    crossing::filter_into(filter)
}

/// The relay builder's filter as ours.
pub fn filter_from_r44(filter: &r44::Filter) -> Result<Filter, ConvertError> {
    crossing::filter_from(filter)
}

/// Our id as the relay builder's (by its 32 bytes: cannot fail).
pub fn id_to_r44(id: &EventId) -> r44::EventId {
    r44::EventId::from_byte_array(id.to_bytes())
}

/// The relay builder's id as ours (by its 32 bytes: cannot fail).
pub fn id_from_r44(id: &r44::EventId) -> EventId {
    crossing::event_id_from_bytes(id.to_bytes())
}

/// Our relay URL as the relay builder's.
pub fn relay_url_to_r44(url: &RelayUrl) -> Result<r44::RelayUrl, ConvertError> {
    crossing::relay_url_into(url)
}

/// The relay builder's relay URL as ours.
pub fn relay_url_from_r44(url: &r44::RelayUrl) -> Result<RelayUrl, ConvertError> {
    crossing::relay_url_from(url)
}

/// The relay builder's negentropy item (an id and its `created_at`) as ours.
pub fn item_from_r44((id, at): (r44::EventId, r44::Timestamp)) -> (EventId, Timestamp) {
    (id_from_r44(&id), Timestamp::from_secs(at.as_secs()))
}
