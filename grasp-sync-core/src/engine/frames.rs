//! Frame sizes: every `REQ`, `NEG-OPEN`, `NEG-MSG` and `{ids}` fetch the
//! engine sends fits the relay's message budget.
//!
//! strfry drops the TCP connection (no CLOSE, no NOTICE) on any frame over
//! its 131 072-byte `max_message_length`; a client that sends the same frame
//! after reconnecting never gets through. So filters are packed into REQs by
//! bytes as well as by count, a single filter too large for the budget is
//! split by its values, and negentropy frames are sized to leave room for
//! their filter.

use nostr::prelude::Filter;

/// Bytes of a `["REQ","<id>",…]` envelope besides its filters, with room
/// for any subscription id the engine makes.
const REQ_OVERHEAD: usize = 64;
/// Bytes a filter adds to a REQ besides its own JSON (the comma).
const FILTER_SEPARATOR: usize = 1;
/// Bytes of a `["NEG-OPEN","<id>",<filter>,"<hex>"]` envelope besides the
/// filter and the message.
const NEG_OVERHEAD: usize = 64;
/// Bytes one event id adds to an `ids` list (`"<64 hex>",`).
const ID_BYTES: usize = 67;
/// negentropy's smallest frame size limit.
const NEG_MIN_FRAME: u64 = 4096;

/// The JSON length of `filter`.
pub(crate) fn filter_len(filter: &Filter) -> usize {
    // A filter always serializes; if one did not, the transport could not
    // send it either.
    filter.try_as_json().map_or(0, |json| json.len())
}

/// Packs `filters` into REQs of at most `per_req` filters and `budget`
/// bytes each, in order. A filter that alone exceeds the budget is split by
/// its values first (see [`split_to_fit`]).
pub(crate) fn pack_filters(
    filters: Vec<Filter>,
    per_req: usize,
    budget: usize,
) -> Vec<Vec<Filter>> {
    let per_req = per_req.max(1);
    let room = budget.saturating_sub(REQ_OVERHEAD);
    let mut reqs: Vec<Vec<Filter>> = Vec::new();
    let mut current: Vec<Filter> = Vec::new();
    let mut used = 0usize;
    for filter in filters
        .into_iter()
        .flat_map(|filter| split_to_fit(filter, room))
    {
        let len = filter_len(&filter) + FILTER_SEPARATOR;
        if !current.is_empty() && (current.len() >= per_req || used + len > room) {
            reqs.push(std::mem::take(&mut current));
            used = 0;
        }
        used += len;
        current.push(filter);
    }
    if !current.is_empty() {
        reqs.push(current);
    }
    reqs
}

/// Bytes a REQ's filters may take within `budget`.
pub(crate) fn req_room(budget: usize) -> usize {
    budget.saturating_sub(REQ_OVERHEAD)
}

/// Splits `filter` by its largest value list (ids or one tag's values) until
/// every part's JSON fits `room` bytes. A filter with nothing left to split
/// is returned as it is.
pub(crate) fn split_to_fit(filter: Filter, room: usize) -> Vec<Filter> {
    if filter_len(&filter) + FILTER_SEPARATOR <= room {
        return vec![filter];
    }
    let Some((first, second)) = halve(&filter) else {
        return vec![filter];
    };
    let mut parts = split_to_fit(first, room);
    parts.extend(split_to_fit(second, room));
    parts
}

/// Two filters that together match what `filter` matches, each with half of
/// its largest value list; `None` if no list has two values.
fn halve(filter: &Filter) -> Option<(Filter, Filter)> {
    let ids_len = filter.ids.as_ref().map_or(0, |ids| ids.len());
    let largest_tag = filter
        .generic_tags
        .iter()
        .max_by_key(|(_, values)| values.len())
        .map(|(tag, values)| (*tag, values.len()));
    let tag_len = largest_tag.map_or(0, |(_, len)| len);
    if ids_len.max(tag_len) < 2 {
        return None;
    }
    let (mut first, mut second) = (filter.clone(), filter.clone());
    if ids_len >= tag_len {
        let ids: Vec<_> = filter.ids.iter().flatten().copied().collect();
        let (left, right) = ids.split_at(ids.len() / 2);
        first.ids = Some(left.iter().copied().collect());
        second.ids = Some(right.iter().copied().collect());
    } else if let Some((tag, _)) = largest_tag {
        let values: Vec<String> = filter
            .generic_tags
            .get(&tag)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let (left, right) = values.split_at(values.len() / 2);
        first
            .generic_tags
            .insert(tag, left.iter().cloned().collect());
        second
            .generic_tags
            .insert(tag, right.iter().cloned().collect());
    }
    Some((first, second))
}

/// The negentropy frame size limit that keeps a `NEG-OPEN` of `filter` (and
/// every `NEG-MSG` of the session) within `budget` bytes: the message is
/// hex, twice its bytes. `None` when even negentropy's smallest frames do not
/// fit: the filter is then synced by REQ.
pub(crate) fn negentropy_frame_limit(
    budget: usize,
    filter: &Filter,
    configured: u64,
) -> Option<u64> {
    let room = budget.saturating_sub(NEG_OVERHEAD + filter_len(filter));
    let fits = (room / 2) as u64;
    if fits < NEG_MIN_FRAME {
        return None;
    }
    Some(match configured {
        0 => fits,
        configured => configured.min(fits).max(NEG_MIN_FRAME),
    })
}

/// How many event ids a `REQ` of `filter` plus `ids` may carry within
/// `budget` bytes (at least one).
pub(crate) fn ids_per_fetch(budget: usize, filter: &Filter) -> usize {
    let room = budget.saturating_sub(REQ_OVERHEAD + filter_len(filter) + "\"ids\":[],".len());
    (room / ID_BYTES).max(1)
}

/// The bytes of the frame a transport command puts on the wire, for the
/// frames that can be large (`REQ`, `NEG-OPEN`, `NEG-MSG`).
pub(crate) fn command_frame_len(command: &super::Command) -> Option<usize> {
    match command {
        super::Command::Subscribe { id, filters, .. } => {
            Some(req_frame_len(id.as_str().len(), filters))
        }
        super::Command::NegOpen {
            id,
            filter,
            initial_message,
            ..
        } => Some(NEG_OVERHEAD + id.as_str().len() + filter_len(filter) + initial_message.len()),
        super::Command::NegMsg { id, message, .. } => {
            Some(NEG_OVERHEAD + id.as_str().len() + message.len())
        }
        _ => None,
    }
}

/// The JSON length of a REQ with `filters` under a subscription id of
/// `id_len` bytes, as the engine would send it.
pub fn req_frame_len(id_len: usize, filters: &[Filter]) -> usize {
    // ["REQ","<id>",f1,f2]
    "[\"REQ\",\"\"".len()
        + id_len
        + filters
            .iter()
            .map(|filter| filter_len(filter) + FILTER_SEPARATOR)
            .sum::<usize>()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventId, Kind, SingleLetterTag};

    fn id(n: u32) -> EventId {
        let mut bytes = [0u8; 32];
        bytes[..4].copy_from_slice(&n.to_be_bytes());
        EventId::from_byte_array(bytes)
    }

    fn layer3(values: std::ops::Range<u32>) -> Filter {
        Filter::new().custom_tags(SingleLetterTag::LOWERCASE_E, values.map(|n| id(n).to_hex()))
    }

    #[test]
    fn packed_reqs_stay_under_the_budget_and_keep_every_filter() {
        let filters: Vec<Filter> = (0..300).map(|n| layer3(n * 100..n * 100 + 100)).collect();
        let budget = 131_072;
        let reqs = pack_filters(filters.clone(), 200, budget);
        assert!(reqs.len() > 1);
        for req in &reqs {
            assert!(
                req_frame_len(20, req) <= budget,
                "{}",
                req_frame_len(20, req)
            );
            assert!(req.len() <= 200);
        }
        let flat: Vec<Filter> = reqs.into_iter().flatten().collect();
        assert_eq!(flat, filters);
    }

    #[test]
    fn the_filter_count_limit_holds_too() {
        let filters: Vec<Filter> = (0..10)
            .map(|n| Filter::new().kind(Kind::Custom(n)))
            .collect();
        let reqs = pack_filters(filters, 3, 65_536);
        assert_eq!(
            reqs.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![3, 3, 3, 1]
        );
    }

    #[test]
    fn a_filter_larger_than_the_budget_is_split_by_its_values() {
        let big = Filter::new()
            .ids((0..2000).map(id))
            .kind(Kind::Custom(1621));
        let parts = split_to_fit(big.clone(), 16_000);
        assert!(parts.len() >= 8);
        let mut ids: Vec<EventId> = parts
            .iter()
            .inspect(|part| assert!(filter_len(part) < 16_000))
            .inspect(|part| assert_eq!(part.kinds, big.kinds))
            .flat_map(|part| part.ids.iter().flatten().copied())
            .collect();
        ids.sort();
        let mut expected: Vec<EventId> = (0..2000).map(id).collect();
        expected.sort();
        assert_eq!(ids, expected);
    }

    #[test]
    fn negentropy_frames_leave_room_for_the_filter() {
        let filter = layer3(0..100);
        let limit = negentropy_frame_limit(65_536, &filter, 30_000).unwrap();
        assert!(2 * limit as usize + filter_len(&filter) + NEG_OVERHEAD <= 65_536);
        assert_eq!(
            negentropy_frame_limit(1_000_000, &filter, 30_000),
            Some(30_000)
        );
        assert_eq!(negentropy_frame_limit(8_192, &filter, 30_000), None);
    }

    #[test]
    fn fetches_carry_as_many_ids_as_fit() {
        let filter = Filter::new().kind(Kind::Custom(1621));
        let per = ids_per_fetch(131_072, &filter);
        let fetch = filter.clone().ids((0..per as u32).map(id));
        assert!(req_frame_len(20, &[fetch]) <= 131_072);
        assert!(per > 1900);
    }
}
