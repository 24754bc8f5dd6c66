//! Text a relay wrote (a `NOTICE`, a `CLOSED` or `NEG-ERR` reason, an `OK` message),
//! made safe to keep and show: [`RelayText`] holds at most [`MAX_RELAY_TEXT_LEN`] bytes,
//! cut at a character boundary (and marked `…` when cut), with every control character
//! (newlines, escapes, `DEL`, C1 controls) and every bidirectional override replaced by
//! `�`. The last error kept per relay is one, so `/status`, the status page, logs and
//! `--once` summaries all get the clipped text, however long and strange the original.

use std::fmt;

/// The most bytes of a relay's text kept (the `…` of a cut text comes on top).
pub const MAX_RELAY_TEXT_LEN: usize = 512;

/// What a text that was cut ends with.
const CUT_MARK: char = '…';

/// What a control character or bidirectional override becomes.
const REPLACEMENT: char = '\u{FFFD}';

/// Text from (or about) a relay, clipped and cleaned (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayText(String);

impl RelayText {
    /// `text`, clipped to [`MAX_RELAY_TEXT_LEN`] bytes with its control characters and
    /// bidirectional overrides replaced.
    pub fn new(text: &str) -> Self {
        let mut kept = String::with_capacity(text.len().min(MAX_RELAY_TEXT_LEN));
        for character in text.chars() {
            let character = if is_unsafe(character) {
                REPLACEMENT
            } else {
                character
            };
            if kept.len() + character.len_utf8() > MAX_RELAY_TEXT_LEN {
                kept.push(CUT_MARK);
                break;
            }
            kept.push(character);
        }
        RelayText(kept)
    }

    /// The clipped text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for RelayText {
    fn from(text: &str) -> Self {
        RelayText::new(text)
    }
}

impl From<String> for RelayText {
    fn from(text: String) -> Self {
        RelayText::new(&text)
    }
}

impl fmt::Display for RelayText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `character` must not be shown as it is: a control character, or one that
/// reorders the text around it (bidirectional embeddings, overrides and isolates).
fn is_unsafe(character: char) -> bool {
    character.is_control() || matches!(character, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_plain_text_is_kept_as_it_is() {
        let text = "blocked: you are banned from posting here";
        assert_eq!(RelayText::new(text).as_str(), text);
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary_and_marked() {
        let text = "é".repeat(10_000);
        let clipped = RelayText::new(&text);
        let body = clipped.as_str().strip_suffix(CUT_MARK).unwrap();
        assert!(body.len() <= MAX_RELAY_TEXT_LEN && body.len() > MAX_RELAY_TEXT_LEN - 2);
        assert!(body.chars().all(|c| c == 'é'));
        let exact = "a".repeat(MAX_RELAY_TEXT_LEN);
        assert_eq!(
            RelayText::new(&exact).as_str(),
            exact,
            "not cut at the bound"
        );
    }

    #[test]
    fn control_characters_and_bidi_overrides_are_replaced() {
        let clipped = RelayText::new("a\nb\r\u{1b}[31mc\u{7f}d\u{85}e\u{202e}f\u{2066}g\0");
        assert_eq!(
            clipped.as_str(),
            "a\u{FFFD}b\u{FFFD}\u{FFFD}[31mc\u{FFFD}d\u{FFFD}e\u{FFFD}f\u{FFFD}g\u{FFFD}"
        );
    }
}
