//! Frames from a relay decoded and verified in parallel, reported in order.
//!
//! Text frames are parsed (and each `EVENT`'s id and signature checked) in
//! tasks of their own (the frames already received together, up to 32, in
//! one task), so one relay's events are verified on every core of
//! the runtime instead of on the engine's thread. A forwarder task awaits
//! the results in the order the frames arrived (an `EOSE` never overtakes
//! the events before it) and hands them to the manager. Events verified
//! lately are recalled from a cache shared by every connection
//! ([`SeenSignatures`]): the same event from a second relay costs a hash,
//! not a second signature check.

use std::sync::{Arc, Mutex};

use futures_util::{FutureExt, StreamExt};
use grasp_sync_core::verified::{Forged, SeenSignatures, VerifiedEvent};
use nostr::prelude::{Event, RelayMessage};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use crate::inbound::{Inbound, Report};

/// The cache of signatures verified lately, shared by a manager's
/// connections; `None` on a connection whose events are trusted (the own
/// relay's).
pub(crate) type SharedSeen = Option<Arc<Mutex<SeenSignatures>>>;

/// A report on its way to the manager: ready, or still being decoded.
pub(crate) enum Pending {
    Ready(Report),
    Decoding(JoinHandle<Vec<Report>>),
}

/// One entry of a connection's ordered queue: the report and its share of
/// the relay's inbound byte budget.
pub(crate) struct Queued {
    pub(crate) pending: Pending,
    pub(crate) budget: Option<OwnedSemaphorePermit>,
}

/// Starts decoding `texts` (frames received together) in a task of its own.
pub(crate) fn spawn_decode(texts: Vec<Utf8Bytes>, seen: SharedSeen) -> Pending {
    Pending::Decoding(tokio::spawn(async move {
        texts
            .iter()
            .map(|text| decode(text, seen.as_deref()))
            .collect()
    }))
}

/// A frame as a report: an `EVENT` verified (unless `seen` is `None`: the
/// connection's events are trusted), any other message parsed, or
/// malformed.
pub(crate) fn decode(text: &str, seen: Option<&Mutex<SeenSignatures>>) -> Report {
    let size = text.len();
    let message = match RelayMessage::from_json(text) {
        Ok(message) => message,
        Err(_) => return Report::Malformed(size),
    };
    match (message, seen) {
        (
            RelayMessage::Event {
                subscription_id,
                event,
            },
            Some(seen),
        ) => Report::Event {
            subscription_id: subscription_id.into_owned(),
            checked: check(event.into_owned(), seen),
            size,
        },
        (message, _) => Report::Message(Box::new(message), size),
    }
}

/// Verifies `event`, recalling it from `seen` when it was verified lately.
fn check(event: Event, seen: &Mutex<SeenSignatures>) -> Result<VerifiedEvent, Forged> {
    let recalled = seen
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .recall(Arc::new(event));
    match recalled {
        Ok(verified) => Ok(verified),
        Err(event) => {
            let verified = VerifiedEvent::verify_shared(event)?;
            seen.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remember(&verified);
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
    first: Utf8Bytes,
    stream: &mut S,
    held: &mut Held<S>,
) -> Vec<Utf8Bytes>
where
    S: futures_util::Stream<Item = Result<Message, WsError>> + Unpin,
{
    let mut texts = vec![first];
    while texts.len() < FRAMES_PER_TASK {
        match stream.next().now_or_never() {
            Some(Some(Ok(Message::Text(text)))) => texts.push(text),
            Some(other) => {
                *held = Some(other);
                break;
            }
            None => break,
        }
    }
    texts
}

/// What the forwarder of one connection needs.
pub(crate) struct Forwarder {
    pub(crate) relay: nostr::prelude::RelayUrl,
    pub(crate) generation: u64,
    pub(crate) inbound: mpsc::Sender<Inbound>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Forwarder {
    /// Hands the queued reports to the manager in order, until the queue
    /// closes (the connection ended and everything before was handed on)
    /// or the manager shuts down.
    pub(crate) async fn run(mut self, mut queue: mpsc::Receiver<Queued>) {
        while let Some(Queued { pending, budget }) = queue.recv().await {
            let reports = match pending {
                Pending::Ready(report) => vec![report],
                Pending::Decoding(task) => match task.await {
                    Ok(reports) => reports,
                    // The decoding task panicked or was aborted (runtime
                    // shutting down): the frames count as malformed.
                    Err(_) => vec![Report::Malformed(0)],
                },
            };
            // The frames' share of the budget is given back with the last
            // of them (reports are handled in order).
            let last = reports.len().saturating_sub(1);
            let mut budget = budget;
            for (n, report) in reports.into_iter().enumerate() {
                let inbound = Inbound {
                    relay: self.relay.clone(),
                    generation: self.generation,
                    report,
                    budget: if n == last { budget.take() } else { None },
                };
                if *self.shutdown.borrow() {
                    return;
                }
                tokio::select! {
                    sent = self.inbound.send(inbound) => if sent.is_err() { return },
                    _ = self.shutdown.changed() => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{ClientMessage, EventBuilder, FinalizeEvent, Keys, Kind, SubscriptionId};

    fn event_frame(event: &Event) -> String {
        RelayMessage::event(SubscriptionId::new("s"), event.clone()).as_json()
    }

    #[test]
    fn an_event_is_verified_once_and_recalled_after() {
        let keys = Keys::generate();
        let event = EventBuilder::new(Kind::TextNote, "hi")
            .finalize(&keys)
            .expect("signs");
        let seen = Mutex::new(SeenSignatures::new(16));
        for _ in 0..2 {
            match decode(&event_frame(&event), Some(&seen)) {
                Report::Event { checked, .. } => {
                    assert_eq!(checked.expect("verifies").id, event.id)
                }
                other => panic!("not an event: {other:?}"),
            }
        }
        assert_eq!(seen.lock().expect("lock").len(), 1);
    }

    #[test]
    fn a_forged_event_is_reported_forged_and_not_remembered() {
        let keys = Keys::generate();
        let mut event = EventBuilder::new(Kind::TextNote, "hi")
            .finalize(&keys)
            .expect("signs");
        event.content = "changed".into();
        let seen = Mutex::new(SeenSignatures::new(16));
        match decode(&event_frame(&event), Some(&seen)) {
            Report::Event { checked, .. } => assert!(checked.is_err()),
            other => panic!("not an event: {other:?}"),
        }
        assert!(seen.lock().expect("lock").is_empty());
    }

    #[test]
    fn trusted_connections_and_other_messages_are_passed_as_parsed() {
        let keys = Keys::generate();
        let event = EventBuilder::new(Kind::TextNote, "hi")
            .finalize(&keys)
            .expect("signs");
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
