//! Crossing the version line: events and filters go through JSON, ids and
//! timestamps through their bytes and seconds.

use nostr::prelude::{Event, EventId, Filter, Timestamp};
use nostr_relay_builder::prelude as r44;

/// A value that did not survive the crossing (never expected: both sides
/// speak NIP-01 JSON).
#[derive(Debug, thiserror::Error)]
#[error("cannot convert between nostr 0.44 and 0.45: {0}")]
pub struct ConvertError(String);

/// Our event as the relay builder's.
pub(crate) fn event_to_r44(event: &Event) -> Result<r44::Event, ConvertError> {
    let json = event
        .try_as_json()
        .map_err(|error| ConvertError(error.to_string()))?;
    <r44::Event as r44::JsonUtil>::from_json(json).map_err(|error| ConvertError(error.to_string()))
}

/// The relay builder's event as ours.
pub(crate) fn event_from_r44(event: &r44::Event) -> Result<Event, ConvertError> {
    let json = <r44::Event as r44::JsonUtil>::try_as_json(event)
        .map_err(|error| ConvertError(error.to_string()))?;
    Event::from_json(json).map_err(|error| ConvertError(error.to_string()))
}

/// Our filter as the relay builder's.
pub(crate) fn filter_to_r44(filter: &Filter) -> Result<r44::Filter, ConvertError> {
    let json = filter
        .try_as_json()
        .map_err(|error| ConvertError(error.to_string()))?;
    <r44::Filter as r44::JsonUtil>::from_json(json).map_err(|error| ConvertError(error.to_string()))
}

/// The relay builder's negentropy item as ours.
pub(crate) fn item_from_r44((id, at): (r44::EventId, r44::Timestamp)) -> (EventId, Timestamp) {
    (
        EventId::from_byte_array(id.to_bytes()),
        Timestamp::from_secs(at.as_secs()),
    )
}

/// Our id as the relay builder's.
pub(crate) fn id_to_r44(id: &EventId) -> r44::EventId {
    r44::EventId::from_byte_array(id.to_bytes())
}
