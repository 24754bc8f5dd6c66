//! Frames from a relay decoded and verified in parallel, reported in order.
//!
//! An `EVENT` frame is screened before its signature is checked, cheapest
//! first ([`grasp_sync_core::screen`]): a frame longer than the event size
//! limit is refused unparsed; then the event's id (a hash), then its
//! subscription and filters against what this connection asked for
//! ([`Requested`], kept by the connection as it sends `REQ`s and
//! `CLOSE`s); only an event that passes costs a signature check. A relay
//! sending forged or unrequested events thus costs a parse and a hash per
//! event, and the engine cuts it off past its threshold.
//!
//! Text frames are parsed (and each `EVENT`'s id and signature checked) in
//! tasks of their own (the frames already received together, up to 32, in
//! one task), so one relay's events are verified on every core of
//! the runtime instead of on the engine's thread. The connection's driver
//! hands the results on in the order the frames arrived
//! ([`Delivery`](crate::delivery::Delivery)). Events verified
//! lately are recalled from a cache shared by every connection
//! ([`SeenSignatures`]): the same event from a second relay costs a hash,
//! not a second signature check. Authors' keys parsed lately are reused
//! ([`AuthorKeys`]): an author's second event skips the key's parse.

use std::sync::{Arc, Mutex};

use futures_util::{FutureExt, StreamExt};
use grasp_sync_core::screen::{Refused, Requested, SizeLimits};
use grasp_sync_core::verified::{AuthorKeys, Forged, IdChecked, SeenSignatures, VerifiedEvent};
use nostr::prelude::RelayMessage;
use tokio::task::JoinHandle;

use crate::inbound::Report;
use crate::transport::{Incoming, TextFrame};

/// What verification remembers, shared by a manager's connections; `None`
/// on a connection whose events are trusted (the own relay's).
pub(crate) type SharedSeen = Option<Arc<Remembered>>;

/// Authors whose parsed keys are remembered (a key and its point: ~100
/// bytes each).
const AUTHOR_KEYS: usize = 4_096;

/// The signatures verified lately and the authors' keys parsed lately, each
/// behind its own lock, held for a lookup or an insert, never during a
/// check.
#[derive(Debug)]
pub(crate) struct Remembered {
    signatures: Mutex<SeenSignatures>,
    keys: Mutex<AuthorKeys>,
}

impl Remembered {
    /// Remembers at most `signatures` verified signatures, and
    /// [`AUTHOR_KEYS`] authors' keys.
    pub(crate) fn new(signatures: usize) -> Self {
        Remembered {
            signatures: Mutex::new(SeenSignatures::new(signatures)),
            keys: Mutex::new(AuthorKeys::new(AUTHOR_KEYS)),
        }
    }
}

/// `mutex` locked; a panic of another holder left it whole (every update is
/// one call).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A report on its way to the manager: ready, or still being decoded.
pub(crate) enum Pending {
    Ready(Report),
    Decoding(JoinHandle<Vec<Report>>),
}

/// What screens and verifies one connection's events: the signatures and
/// keys remembered across connections, the subscriptions this connection
/// asked for, the size limits.
#[derive(Clone, Debug)]
pub(crate) struct Screen {
    pub(crate) seen: Arc<Remembered>,
    pub(crate) requested: Arc<Mutex<Requested>>,
    pub(crate) limits: SizeLimits,
}

/// Starts decoding `texts` (frames received together) in a task of its
/// own; `screen` is `None` on a connection whose events are trusted.
pub(crate) fn spawn_decode(texts: Vec<TextFrame>, screen: Option<Screen>) -> Pending {
    Pending::Decoding(tokio::spawn(async move {
        texts
            .iter()
            .map(|text| decode(text.as_str(), screen.as_ref()))
            .collect()
    }))
}

/// Whether `text` is an `EVENT` frame, by its first bytes.
fn is_event_frame(text: &str) -> bool {
    text.trim_start()
        .strip_prefix('[')
        .is_some_and(|rest| rest.trim_start().starts_with("\"EVENT\""))
}

/// A frame as a report: an `EVENT` screened and verified (unless `screen`
/// is `None`: the connection's events are trusted), any other message
/// parsed, or malformed.
pub(crate) fn decode(text: &str, screen: Option<&Screen>) -> Report {
    let size = text.len();
    if let Some(screen) = screen {
        if screen.limits.frame_too_large(size) && is_event_frame(text) {
            return Report::Refused(Refused::Oversized {
                bytes: size,
                tags: 0,
            });
        }
    }
    let message = match RelayMessage::from_json(text) {
        Ok(message) => message,
        Err(_) => return Report::Malformed(size),
    };
    match (message, screen) {
        (
            RelayMessage::Event {
                subscription_id,
                event,
            },
            Some(screen),
        ) => {
            let screened = {
                let requested = lock(&screen.requested);
                grasp_sync_core::screen::screen(
                    event.into_owned(),
                    &subscription_id,
                    &requested,
                    &screen.limits,
                )
            };
            let checked =
                screened.and_then(|event| check(event, &screen.seen).map_err(Refused::from));
            Report::Event {
                subscription_id: subscription_id.into_owned(),
                checked,
                size,
            }
        }
        (message, _) => Report::Message(Box::new(message), size),
    }
}

/// Verifies the signature of `event` (its id checked by the screen),
/// recalling it from `seen` when it was verified lately, with its author's
/// key as parsed before if it was.
fn check(event: IdChecked, seen: &Remembered) -> Result<VerifiedEvent, Forged> {
    let recalled = lock(&seen.signatures).recall_checked(event);
    match recalled {
        Ok(verified) => Ok(verified),
        Err(event) => {
            let known = lock(&seen.keys).get(&event.event().pubkey);
            let (verified, key) = VerifiedEvent::verify_signature(event, known)?;
            if known.is_none() {
                lock(&seen.keys).remember(key);
            }
            lock(&seen.signatures).remember(&verified);
            Ok(verified)
        }
    }
}

/// Text frames decoded by one task at most (those already received).
const FRAMES_PER_TASK: usize = 32;

/// A frame read while gathering text frames (handled next), if any.
pub(crate) type Held<S> = Option<Option<<S as futures_util::Stream>::Item>>;

/// The frame held back by the last gathering, else the stream's next.
pub(crate) async fn next_frame<S>(stream: &mut S, held: &mut Held<S>) -> Option<S::Item>
where
    S: futures_util::Stream + Unpin,
{
    match held.take() {
        Some(frame) => frame,
        None => stream.next().await,
    }
}

/// `first` and the text frames already received after it (up to
/// [`FRAMES_PER_TASK`]), to decode in one task; a non-text frame met on the
/// way is held for the next turn.
pub(crate) fn gather_texts<S>(
    first: TextFrame,
    stream: &mut S,
    held: &mut Held<S>,
) -> Vec<TextFrame>
where
    S: futures_util::Stream<Item = Incoming> + Unpin,
{
    let mut texts = vec![first];
    while texts.len() < FRAMES_PER_TASK {
        match stream.next().now_or_never() {
            Some(Some(Incoming::Text(text))) => texts.push(text),
            Some(other) => {
                *held = Some(other);
                break;
            }
            None => break,
        }
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{
        ClientMessage, Event, EventBuilder, Filter, FinalizeEvent, Keys, Kind, SubscriptionId,
    };

    fn event_frame(event: &Event) -> String {
        RelayMessage::event(SubscriptionId::new("s"), event.clone()).as_json()
    }

    /// A screen that asked for text notes on subscription `s`.
    fn screen() -> Screen {
        let mut requested = Requested::new();
        requested.opened(
            SubscriptionId::new("s"),
            vec![Filter::new().kind(Kind::TextNote)],
        );
        Screen {
            seen: Arc::new(Remembered::new(16)),
            requested: Arc::new(Mutex::new(requested)),
            limits: SizeLimits {
                max_event_size: 1_000,
                max_event_tags: 10,
            },
        }
    }

    fn note(content: &str) -> Event {
        EventBuilder::new(Kind::TextNote, content)
            .finalize(&Keys::generate())
            .expect("signs")
    }

    #[test]
    fn an_event_is_verified_once_and_recalled_after() {
        let event = note("hi");
        let screen = screen();
        for _ in 0..2 {
            match decode(&event_frame(&event), Some(&screen)) {
                Report::Event { checked, .. } => {
                    assert_eq!(checked.expect("verifies").id, event.id)
                }
                other => panic!("not an event: {other:?}"),
            }
        }
        assert_eq!(lock(&screen.seen.signatures).len(), 1);
        assert_eq!(lock(&screen.seen.keys).len(), 1);
    }

    #[test]
    fn a_forged_event_is_reported_forged_and_not_remembered() {
        let mut event = note("hi");
        event.content = "changed".into();
        let screen = screen();
        match decode(&event_frame(&event), Some(&screen)) {
            Report::Event { checked, .. } => {
                assert!(matches!(checked, Err(Refused::Forged(_))))
            }
            other => panic!("not an event: {other:?}"),
        }
        assert!(lock(&screen.seen.signatures).is_empty());
    }

    #[test]
    fn an_unrequested_event_is_refused_before_its_signature_is_checked() {
        // A bad signature on an event outside the filters: refused as off
        // filter, so its signature was never checked.
        let reaction = EventBuilder::new(Kind::Reaction, "+")
            .finalize(&Keys::generate())
            .expect("signs");
        let mut bad_signature = reaction.clone();
        bad_signature.sig = note("other").sig;
        let screen = screen();
        match decode(&event_frame(&bad_signature), Some(&screen)) {
            Report::Event { checked, .. } => {
                assert_eq!(checked, Err(Refused::OffFilter { id: reaction.id }))
            }
            other => panic!("not an event: {other:?}"),
        }
        let elsewhere = RelayMessage::event(SubscriptionId::new("t"), note("x")).as_json();
        assert!(matches!(
            decode(&elsewhere, Some(&screen)),
            Report::Event {
                checked: Err(Refused::UnknownSubscription { .. }),
                ..
            }
        ));
        assert!(lock(&screen.seen.keys).is_empty(), "no key was parsed");
    }

    #[test]
    fn an_event_frame_over_the_size_limit_is_refused_unparsed() {
        let screen = screen();
        let big = event_frame(&note(&"x".repeat(2_000)));
        assert!(matches!(
            decode(&big, Some(&screen)),
            Report::Refused(Refused::Oversized { tags: 0, .. })
        ));
        // Not an event: passed on (the WebSocket limit bounds it).
        let notice = RelayMessage::notice("y".repeat(2_000)).as_json();
        assert!(matches!(
            decode(&notice, Some(&screen)),
            Report::Message(..)
        ));
        // Unparsed and too long: refused by its length all the same.
        let junk = format!("[\"EVENT\",{}", "z".repeat(2_000));
        assert!(matches!(decode(&junk, Some(&screen)), Report::Refused(_)));
    }

    #[test]
    fn trusted_connections_and_other_messages_are_passed_as_parsed() {
        let event = note("hi");
        assert!(matches!(
            decode(&event_frame(&event), None),
            Report::Message(..)
        ));
        let eose = RelayMessage::eose(SubscriptionId::new("s")).as_json();
        assert!(matches!(decode(&eose, None), Report::Message(..)));
        let request = ClientMessage::close(SubscriptionId::new("s")).as_json();
        assert!(matches!(decode(&request, None), Report::Malformed(_)));
        assert!(matches!(decode("[\"EVENT\",", None), Report::Malformed(_)));
    }
}
