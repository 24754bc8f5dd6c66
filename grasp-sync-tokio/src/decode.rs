//! Frames from a relay decoded and verified in parallel, reported in order.
//!
//! Each text frame is parsed (and an `EVENT`'s id and signature checked) in
//! a task of its own, so one relay's events are verified on every core of
//! the runtime instead of on the engine's thread. A forwarder task awaits
//! the results in the order the frames arrived (an `EOSE` never overtakes
//! the events before it) and hands them to the manager. Events verified
//! lately are recalled from a cache shared by every connection
//! ([`SeenSignatures`]): the same event from a second relay costs a hash,
//! not a second signature check.

use std::sync::{Arc, Mutex};

use grasp_sync_core::verified::{Forged, SeenSignatures, VerifiedEvent};
use nostr::prelude::{Event, RelayMessage};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::connection::{Inbound, Report};

/// The cache of signatures verified lately, shared by a manager's
/// connections; `None` on a connection whose events are trusted (the own
/// relay's).
pub(crate) type SharedSeen = Option<Arc<Mutex<SeenSignatures>>>;

/// A report on its way to the manager: ready, or still being decoded.
pub(crate) enum Pending {
    Ready(Report),
    Decoding(JoinHandle<Report>),
}

/// One entry of a connection's ordered queue: the report and its share of
/// the relay's inbound byte budget.
pub(crate) struct Queued {
    pub(crate) pending: Pending,
    pub(crate) budget: Option<OwnedSemaphorePermit>,
}

/// Starts decoding `text` in a task of its own.
pub(crate) fn spawn_decode(text: Utf8Bytes, seen: SharedSeen) -> Pending {
    Pending::Decoding(tokio::spawn(async move { decode(&text, seen.as_deref()) }))
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
        .recall(Box::new(event));
    match recalled {
        Ok(verified) => Ok(verified),
        Err(event) => {
            let verified = VerifiedEvent::verify_boxed(event)?;
            seen.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remember(&verified);
            Ok(verified)
        }
    }
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
            let report = match pending {
                Pending::Ready(report) => report,
                Pending::Decoding(task) => match task.await {
                    Ok(report) => report,
                    // The decoding task panicked or was aborted (runtime
                    // shutting down): the frame counts as malformed.
                    Err(_) => Report::Malformed(0),
                },
            };
            let inbound = Inbound {
                relay: self.relay.clone(),
                generation: self.generation,
                report,
                budget,
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
