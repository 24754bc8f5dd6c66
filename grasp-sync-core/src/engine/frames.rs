//! Frame sizes: every `REQ`, `NEG-OPEN`, `NEG-MSG` and `{ids}` fetch the
//! engine sends fits the relay's message budget.
//!
//! strfry drops the TCP connection (no CLOSE, no NOTICE) on any frame over
//! its 131 072-byte `max_message_length`; a client that sends the same frame
//! after reconnecting never gets through. So filters are packed into REQs by
//! bytes as well as by count, a single filter too large for the budget is
//! split by its values, and negentropy frames are sized to leave room for
//! their filter.

use nostr::prelude::{Event, Filter};

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

/// The JSON length of `filter`, as serde_json writes it (what the transport
/// sends), counted without writing it: packing measures every live filter
/// each time the live plan is rebuilt, and serializing them all was 3 % of a
/// sidecar's CPU.
pub(crate) fn filter_len(filter: &Filter) -> usize {
    /// `"<64 hex>"`: an id or a public key.
    const HEX_STRING: usize = 66;
    // `{…}`, and each field as `"<name>":<value>`.
    let (mut bytes, mut fields) = (2usize, 0usize);
    let mut field = |name: &str, value: usize| {
        bytes += name.len() + 3 + value;
        fields += 1;
    };
    if let Some(ids) = &filter.ids {
        field("ids", array_len(ids.iter().map(|_| HEX_STRING)));
    }
    if let Some(authors) = &filter.authors {
        field("authors", array_len(authors.iter().map(|_| HEX_STRING)));
    }
    if let Some(kinds) = &filter.kinds {
        field(
            "kinds",
            array_len(kinds.iter().map(|kind| digits(u64::from(kind.as_u16())))),
        );
    }
    if let Some(search) = &filter.search {
        field("search", string_len(search));
    }
    if let Some(since) = filter.since {
        field("since", digits(since.as_secs()));
    }
    if let Some(until) = filter.until {
        field("until", digits(until.as_secs()));
    }
    if let Some(limit) = filter.limit {
        field("limit", digits(u64::try_from(limit).unwrap_or(u64::MAX)));
    }
    for values in filter.generic_tags.values() {
        // `"#x":[…]`
        field(
            "#x",
            array_len(values.iter().map(|value| string_len(value))),
        );
    }
    // And the commas between the fields.
    bytes + fields.saturating_sub(1)
}

/// `[…]` of items of these lengths.
fn array_len(items: impl Iterator<Item = usize>) -> usize {
    let (count, bytes) = items.fold((0usize, 0usize), |(count, bytes), len| {
        (count + 1, bytes + len)
    });
    2 + bytes + count.saturating_sub(1)
}

/// A JSON string of `text`, quotes and serde_json's escapes included.
fn string_len(text: &str) -> usize {
    // Most values (hex ids, coordinates) have nothing to escape: one pass
    // the compiler vectorizes tells.
    if !text.bytes().any(is_escaped) {
        return text.len() + 2;
    }
    let escaped: usize = text
        .bytes()
        .map(|byte| match (is_escaped(byte), short_escape(byte)) {
            (false, _) => 1,
            (true, Some(_)) => 2,
            (true, None) => 6,
        })
        .sum();
    escaped + 2
}

/// `true` if serde_json escapes `byte` in a JSON string.
fn is_escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// serde_json's two-character escape of `byte`, if it has one; the other
/// control characters are written `\u00xx`.
fn short_escape(byte: u8) -> Option<&'static str> {
    match byte {
        b'"' => Some("\\\""),
        b'\\' => Some("\\\\"),
        0x08 => Some("\\b"),
        0x09 => Some("\\t"),
        0x0A => Some("\\n"),
        0x0C => Some("\\f"),
        0x0D => Some("\\r"),
        _ => None,
    }
}

/// `["EVENT",<event>]`, the frame that publishes `event` to a relay, as
/// `ClientMessage::Event(event).as_json()` writes it, written directly into
/// one buffer of the right size: without serde's per-value dispatch, its
/// byte-by-byte escaping of strings that need none (hex ids, most contents)
/// and the regrowth of its buffer. Serializing each event with serde was
/// 5.8 % of a sidecar's CPU.
pub fn event_frame(event: &Event) -> String {
    let mut out = String::with_capacity(event_frame_capacity(event));
    out.push_str("[\"EVENT\",{\"id\":\"");
    push_hex(&mut out, event.id.as_bytes());
    out.push_str("\",\"pubkey\":\"");
    push_hex(&mut out, event.pubkey.as_bytes());
    out.push_str("\",\"created_at\":");
    out.push_str(&event.created_at.as_secs().to_string());
    out.push_str(",\"kind\":");
    out.push_str(&event.kind.as_u16().to_string());
    out.push_str(",\"tags\":[");
    for (n, tag) in event.tags.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('[');
        for (m, value) in tag.as_slice().iter().enumerate() {
            if m > 0 {
                out.push(',');
            }
            push_string(&mut out, value);
        }
        out.push(']');
    }
    out.push_str("],\"content\":");
    push_string(&mut out, &event.content);
    out.push_str(",\"sig\":\"");
    push_hex(&mut out, event.sig.as_bytes());
    out.push_str("\"}]");
    out
}

/// The `EVENT` frame's length when no string needs an escape: an upper
/// bound but for escapes, so the buffer is allocated once for most events.
fn event_frame_capacity(event: &Event) -> usize {
    // Keys, quotes, brackets and separators: 96 bytes; the hex of the id,
    // key and signature: 256; the time and kind: at most 25.
    let tags: usize = event
        .tags
        .iter()
        .map(|tag| array_len(tag.as_slice().iter().map(|value| value.len() + 2)))
        .sum::<usize>()
        + event.tags.len();
    96 + 256 + 25 + tags + event.content.len() + 2
}

/// Lowercase hex digits, as serde_json writes them.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` in lowercase hex.
fn push_hex(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0F)]));
    }
}

/// Appends `text` as a JSON string with serde_json's escapes (see
/// [`string_len`]); everything else, non-ASCII included, as it is.
fn push_string(out: &mut String, text: &str) {
    out.push('"');
    if !text.bytes().any(is_escaped) {
        out.push_str(text);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (at, byte) in text.bytes().enumerate() {
        if !is_escaped(byte) {
            continue;
        }
        // `byte` is ASCII: `at` is a character boundary.
        out.push_str(&text[start..at]);
        match short_escape(byte) {
            Some(escape) => out.push_str(escape),
            None => {
                out.push_str("\\u00");
                push_hex(out, &[byte]);
            }
        }
        start = at + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
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
    use nostr::prelude::Timestamp;
    use nostr::prelude::{EventId, Kind, SingleLetterTag};
    use proptest::prelude::*;

    /// Strings of ASCII (control characters, quotes and backslashes
    /// included) and some multi-byte characters.
    fn a_string() -> impl Strategy<Value = String> {
        prop::string::string_regex("[\\x00-\\x7F\u{e9}\u{20ac}\u{1F600}]{0,12}")
            .expect("a valid pattern")
    }

    fn a_filter() -> impl Strategy<Value = Filter> {
        (
            prop::option::of(prop::collection::vec(any::<[u8; 32]>(), 0..4)),
            prop::option::of(prop::collection::vec(0u16..=u16::MAX, 0..4)),
            prop::option::of(a_string()),
            (
                prop::option::of(any::<u64>()),
                prop::option::of(any::<u64>()),
                prop::option::of(any::<usize>()),
            ),
            prop::collection::vec(
                (
                    prop::sample::select(vec!['a', 'A', 'e', 'E', 'q', 'z']),
                    prop::collection::vec(a_string(), 0..4),
                ),
                0..3,
            ),
            prop::option::of(any::<bool>()),
        )
            .prop_map(
                |(ids, kinds, search, (since, until, limit), tags, authors)| {
                    let mut filter = Filter::new();
                    filter.ids =
                        ids.map(|ids| ids.into_iter().map(EventId::from_byte_array).collect());
                    filter.kinds = kinds.map(|kinds| kinds.into_iter().map(Kind::from).collect());
                    filter.search = search;
                    filter.since = since.map(Timestamp::from_secs);
                    filter.until = until.map(Timestamp::from_secs);
                    filter.limit = limit;
                    if let Some(some) = authors {
                        let key = nostr::prelude::Keys::new(
                            nostr::prelude::SecretKey::from_slice(&[7; 32]).expect("a key"),
                        )
                        .public_key();
                        filter.authors = Some(if some {
                            [key].into()
                        } else {
                            Default::default()
                        });
                    }
                    for (letter, values) in tags {
                        let letter = SingleLetterTag::from_char(letter).expect("a letter");
                        filter
                            .generic_tags
                            .entry(letter)
                            .or_default()
                            .extend(values);
                    }
                    filter
                },
            )
    }

    fn serde_event_frame(event: &Event) -> String {
        nostr::prelude::ClientMessage::Event(std::borrow::Cow::Borrowed(event)).as_json()
    }

    fn signed(kind: u16, content: &str, tags: Vec<Vec<String>>, at: u64) -> Event {
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, SecretKey, Tag};
        let keys = Keys::new(SecretKey::from_slice(&[7; 32]).expect("a key"));
        let tags: Vec<Tag> = tags
            .into_iter()
            .filter(|values| !values.is_empty())
            .map(|values| Tag::parse(values).expect("a tag"))
            .collect();
        EventBuilder::new(Kind::Custom(kind), content)
            .tags(tags)
            .custom_created_at(Timestamp::from_secs(at))
            .finalize(&keys)
            .expect("signs")
    }

    #[test]
    fn a_patch_is_written_as_serde_writes_it() {
        let patch = signed(
            1617,
            "From 1234 Mon Sep 17 00:00:00 2001\n\tsubject: \"quoted\" \\ back\u{1}\u{7f} é 🦀",
            vec![
                vec!["a".into(), "30617:abc:repo".into()],
                vec!["t".into(), "root".into()],
                vec!["e".into(), "00".repeat(32), String::new(), "root".into()],
            ],
            1_700_000_000,
        );
        assert_eq!(event_frame(&patch), serde_event_frame(&patch));
        let bare = signed(1, "", Vec::new(), 0);
        assert_eq!(event_frame(&bare), serde_event_frame(&bare));
    }

    #[test]
    fn the_event_frame_buffer_is_allocated_once_when_nothing_is_escaped() {
        let issue = signed(
            1621,
            "a plain issue",
            vec![vec!["a".into(), "30617:abc:repo".into()], vec![]],
            u64::from(u32::MAX),
        );
        let frame = event_frame(&issue);
        assert!(frame.len() <= event_frame_capacity(&issue));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// The counted length is the length of the JSON the transport sends,
        /// escapes, empty lists and every field included.
        #[test]
        fn filter_len_is_the_length_of_the_json(filter in a_filter()) {
            prop_assert_eq!(filter_len(&filter), filter.as_json().len(), "{}", filter.as_json());
        }

        /// Any content, any tags (control characters, quotes, backslashes,
        /// multi-byte characters, empty values), any kind and time: the
        /// same text as serde_json's.
        #[test]
        fn every_event_frame_is_written_as_serde_writes_it(
            kind in any::<u16>(),
            at in any::<u32>(),
            content in a_string(),
            tags in prop::collection::vec(prop::collection::vec(a_string(), 1..4), 0..5),
        ) {
            let event = signed(kind, &content, tags, u64::from(at));
            prop_assert_eq!(event_frame(&event), serde_event_frame(&event));
        }
    }

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
