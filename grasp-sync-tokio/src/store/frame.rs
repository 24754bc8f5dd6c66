//! The `EVENT` frame that publishes an event to the store relay, written
//! directly into one buffer of the right size: the same text as serde_json's
//! serialization of nostr's `ClientMessage::Event` (a property test holds it
//! to that, escapes included), without serde's per-value dispatch, its
//! byte-by-byte escaping of strings that need none (hex ids, most contents)
//! and the regrowth of its buffer. Serializing each event that way was
//! 5.8 % of a sidecar's CPU.

use nostr::prelude::Event;

/// `["EVENT",<event>]`, as `ClientMessage::Event(event).as_json()` writes it.
pub(super) fn event_frame(event: &Event) -> String {
    let mut out = String::with_capacity(frame_capacity(event));
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

/// The frame's length when no string needs an escape: an upper bound but
/// for escapes, so the buffer is allocated once for most events.
fn frame_capacity(event: &Event) -> usize {
    // Keys, quotes, brackets and separators: 96 bytes; the hex of the id,
    // key and signature: 256; the time and kind: at most 25.
    let tags: usize = event
        .tags
        .iter()
        .map(|tag| {
            let values = tag.as_slice();
            values.iter().map(|value| value.len() + 3).sum::<usize>() + 3
        })
        .sum();
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

/// `true` if serde_json escapes `byte` in a string.
fn is_escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Appends `text` as a JSON string with serde_json's escapes: `\"`, `\\`,
/// `\b`, `\t`, `\n`, `\f`, `\r`, and `\u00xx` for the other control
/// characters; everything else (non-ASCII included) as it is.
fn push_string(out: &mut String, text: &str) {
    out.push('"');
    // One pass the compiler vectorizes finds most strings need nothing.
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
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x09 => out.push_str("\\t"),
            0x0A => out.push_str("\\n"),
            0x0C => out.push_str("\\f"),
            0x0D => out.push_str("\\r"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0x0F)]));
            }
        }
        start = at + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use nostr::prelude::{ClientMessage, EventBuilder, FinalizeEvent, Keys, Kind, Tag, Timestamp};
    use proptest::prelude::*;

    use super::*;

    fn serde_frame(event: &Event) -> String {
        ClientMessage::Event(Cow::Borrowed(event)).as_json()
    }

    fn event(kind: u16, content: &str, tags: Vec<Vec<String>>, at: u64) -> Event {
        let keys = Keys::new(nostr::prelude::SecretKey::from_slice(&[7; 32]).expect("a key"));
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
        let patch = event(
            1617,
            "From 1234 Mon Sep 17 00:00:00 2001\n\tsubject: \"quoted\" \\ back\u{1}\u{7f} é 🦀",
            vec![
                vec!["a".into(), "30617:abc:repo".into()],
                vec!["t".into(), "root".into()],
                vec!["e".into(), "00".repeat(32), String::new(), "root".into()],
            ],
            1_700_000_000,
        );
        assert_eq!(event_frame(&patch), serde_frame(&patch));
        let bare = event(1, "", Vec::new(), 0);
        assert_eq!(event_frame(&bare), serde_frame(&bare));
    }

    #[test]
    fn the_buffer_is_allocated_once_when_nothing_is_escaped() {
        let issue = event(
            1621,
            "a plain issue",
            vec![vec!["a".into(), "30617:abc:repo".into()]],
            u64::from(u32::MAX),
        );
        let frame = event_frame(&issue);
        assert!(frame.len() <= frame_capacity(&issue));
    }

    /// Strings rich in what JSON escapes: every control character, quotes
    /// and backslashes, next to plain, multi-byte and four-byte characters.
    fn tricky_text(most: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                (0_u8..0x20).prop_map(char::from),
                Just('"'),
                Just('\\'),
                Just('\u{7f}'),
                Just('é'),
                Just('🦀'),
                proptest::char::range('a', 'z'),
                any::<char>(),
            ],
            0..most,
        )
        .prop_map(String::from_iter)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any content, any tags (control characters, quotes, backslashes,
        /// multi-byte characters, empty values), any kind and time: the
        /// same text as serde_json's.
        #[test]
        fn every_event_is_written_as_serde_writes_it(
            kind in any::<u16>(),
            at in any::<u32>(),
            content in tricky_text(64),
            tags in proptest::collection::vec(
                proptest::collection::vec(tricky_text(12), 1..4),
                0..5,
            ),
        ) {
            let event = event(kind, &content, tags, u64::from(at));
            prop_assert_eq!(event_frame(&event), serde_frame(&event));
        }
    }
}
