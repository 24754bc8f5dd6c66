//! What a relay answers when it does not serve NIP-77, the ways real relays
//! refuse it: one behaviour for the simulation's in-memory relay
//! (`grasp-sync-core/tests/sim/relay.rs`) and the tokio tests' WebSocket
//! proxy in front of a real relay (`grasp-sync-test-harness/src/relays/proxy.rs`).

use std::borrow::Cow;

use nostr::prelude::{RelayMessage, SubscriptionId};

/// `NOTICE` text of a relay that cannot parse `NEG-*` at all
/// ([`Nip77Refusal::Notice`], nostr-rs-relay).
pub const COULD_NOT_PARSE: &str = "could not parse command";
/// `NEG-ERR` text of [`Nip77Refusal::NegErr`].
pub const NEG_DISABLED: &str = "closed: negentropy disabled";
/// `NEG-ERR` text of [`Nip77Refusal::Blocked`].
pub const NEG_BLOCKED: &str = "blocked: negentropy disabled";
/// `CLOSED` text of [`Nip77Refusal::Closed`].
pub const NEG_NOT_SUPPORTED: &str = "error: negentropy not supported";

/// Bytes of [`hostile_refusal_text`].
pub const HOSTILE_TEXT_LEN: usize = 10_000;

/// `NEG-ERR` text of [`Nip77Refusal::Hostile`]: a `closed:` reason of
/// [`HOSTILE_TEXT_LEN`] bytes full of control characters (terminal escapes, bell,
/// newlines that forge log lines, a right-to-left override).
pub fn hostile_refusal_text() -> String {
    let mut text = String::from("closed: ");
    let junk = "\u{1b}[31mred\u{7}\r\nINFO forged log line \u{202e}txet\0 ";
    while text.len() + junk.len() <= HOSTILE_TEXT_LEN {
        text.push_str(junk);
    }
    while text.len() < HOSTILE_TEXT_LEN {
        text.push('x');
    }
    text
}

/// Whether and how a relay refuses NIP-77 (negentropy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Nip77Refusal {
    /// Serves NIP-77.
    #[default]
    Served,
    /// Answers `NEG-OPEN`/`NEG-MSG` with `["NEG-ERR", id, "closed: negentropy disabled"]`.
    NegErr,
    /// Answers `NEG-OPEN`/`NEG-MSG` with `["NEG-ERR", id, "blocked: negentropy disabled"]`.
    Blocked,
    /// Answers every `NEG-*` (`NEG-CLOSE` too) with
    /// `["NOTICE", "could not parse command"]`, like nostr-rs-relay.
    Notice,
    /// Answers `NEG-OPEN`/`NEG-MSG` with `["CLOSED", id, "error: negentropy not supported"]`.
    Closed,
    /// Ignores `NEG-*` entirely: no reply, no session.
    Silence,
    /// Answers `NEG-OPEN`/`NEG-MSG` with `["NEG-ERR", id, <hostile_refusal_text()>]`.
    Hostile,
}

/// The three NIP-77 client messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegVerb {
    /// `NEG-OPEN`.
    Open,
    /// `NEG-MSG`.
    Msg,
    /// `NEG-CLOSE`.
    Close,
}

impl NegVerb {
    /// The verb of a client message type (`"NEG-OPEN"`, ...), if it is one.
    pub fn parse(message_type: &str) -> Option<NegVerb> {
        match message_type {
            "NEG-OPEN" => Some(NegVerb::Open),
            "NEG-MSG" => Some(NegVerb::Msg),
            "NEG-CLOSE" => Some(NegVerb::Close),
            _ => None,
        }
    }
}

impl Nip77Refusal {
    /// The relay's whole answer to `verb` on subscription `id`, in order;
    /// `None` when NIP-77 is served (the relay handles the message itself).
    /// A refusing relay keeps no session, so a refused message gets nothing
    /// else.
    pub fn answer(self, verb: NegVerb, id: &SubscriptionId) -> Option<Vec<RelayMessage<'static>>> {
        let neg_err = |text: &str| RelayMessage::NegErr {
            subscription_id: Cow::Owned(id.clone()),
            message: Cow::Owned(text.to_owned()),
        };
        let refused = match (self, verb) {
            (Nip77Refusal::Served, _) => return None,
            (Nip77Refusal::Notice, _) => vec![RelayMessage::notice(COULD_NOT_PARSE)],
            (_, NegVerb::Close) | (Nip77Refusal::Silence, _) => Vec::new(),
            (Nip77Refusal::NegErr, _) => vec![neg_err(NEG_DISABLED)],
            (Nip77Refusal::Blocked, _) => vec![neg_err(NEG_BLOCKED)],
            (Nip77Refusal::Hostile, _) => vec![neg_err(&hostile_refusal_text())],
            (Nip77Refusal::Closed, _) => {
                vec![RelayMessage::closed(id.clone(), NEG_NOT_SUPPORTED)]
            }
        };
        Some(refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_answers_as_its_relay_does() {
        let id = SubscriptionId::new("n");
        let err = |text: &str| RelayMessage::NegErr {
            subscription_id: Cow::Owned(id.clone()),
            message: Cow::Owned(text.to_owned()),
        };
        let notice = RelayMessage::notice(COULD_NOT_PARSE);
        let cases = [
            (Nip77Refusal::NegErr, vec![err(NEG_DISABLED)], vec![]),
            (Nip77Refusal::Blocked, vec![err(NEG_BLOCKED)], vec![]),
            (Nip77Refusal::Notice, vec![notice.clone()], vec![notice]),
            (
                Nip77Refusal::Closed,
                vec![RelayMessage::closed(id.clone(), NEG_NOT_SUPPORTED)],
                vec![],
            ),
            (Nip77Refusal::Silence, vec![], vec![]),
            (
                Nip77Refusal::Hostile,
                vec![err(&hostile_refusal_text())],
                vec![],
            ),
        ];
        for (refusal, open, close) in cases {
            assert_eq!(refusal.answer(NegVerb::Open, &id), Some(open.clone()));
            assert_eq!(refusal.answer(NegVerb::Msg, &id), Some(open));
            assert_eq!(refusal.answer(NegVerb::Close, &id), Some(close));
        }
        assert_eq!(Nip77Refusal::Served.answer(NegVerb::Open, &id), None);
        assert_eq!(NegVerb::parse("NEG-MSG"), Some(NegVerb::Msg));
        assert_eq!(NegVerb::parse("REQ"), None);
    }
}
