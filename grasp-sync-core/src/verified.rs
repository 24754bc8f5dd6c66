//! Events whose id and signature were checked, as a type: only a
//! [`VerifiedEvent`] can reach [`Command::Store`](crate::engine::Command::Store),
//! so the guarantee "every stored event verified" holds wherever the
//! check runs — on the engine's thread or, in parallel, on a driver's.
//!
//! [`SeenSignatures`] remembers the `(id, signature)` pairs verified lately,
//! shared across relays: the same event from a second relay is accepted by
//! an id-hash check and a signature comparison (≈ 1 µs) instead of a second
//! Schnorr verification (≈ 40 µs).

use std::ops::Deref;
use std::sync::Arc;

use nostr::event::Signature;
use nostr::prelude::{Event, EventId};

use crate::recent::RecentIds;

/// An event whose id (the hash of its content) and signature were checked.
///
/// Built only by [`VerifiedEvent::verify`] or by [`SeenSignatures::recall`]
/// (the same event verified before); derefs to the [`Event`]. The event is
/// shared: a clone (the engine keeps one until the store answered, the store
/// job holds another) costs a reference count, not a copy of its tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedEvent(Arc<Event>);

/// An event whose id or signature does not verify.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event {id}: the id or the signature does not verify")]
pub struct Forged {
    /// The id the event claims.
    pub id: EventId,
}

impl VerifiedEvent {
    /// Checks the event's id and Schnorr signature.
    pub fn verify(event: Event) -> Result<Self, Forged> {
        Self::verify_shared(Arc::new(event))
    }

    /// [`VerifiedEvent::verify`] for an event already shared (one
    /// allocation per event from the decoder to the store).
    pub fn verify_shared(event: Arc<Event>) -> Result<Self, Forged> {
        match event.verify() {
            Ok(()) => Ok(VerifiedEvent(event)),
            Err(_) => Err(Forged { id: event.id }),
        }
    }

    /// Checks the event, skipping the signature check when `seen` holds the
    /// same id with the same signature; remembers it in `seen` otherwise.
    pub fn verify_remembering(event: Event, seen: &mut SeenSignatures) -> Result<Self, Forged> {
        match seen.recall(Arc::new(event)) {
            Ok(verified) => Ok(verified),
            Err(event) => {
                let verified = VerifiedEvent::verify_shared(event)?;
                seen.remember(&verified);
                Ok(verified)
            }
        }
    }

    /// The event.
    pub fn event(&self) -> &Event {
        &self.0
    }

    /// The event, for a store: moved out when this is its last holder,
    /// copied otherwise.
    pub fn into_event(self) -> Event {
        Arc::unwrap_or_clone(self.0)
    }

    /// The event, shared with this one (no copy).
    pub fn shared(&self) -> Arc<Event> {
        Arc::clone(&self.0)
    }
}

impl Deref for VerifiedEvent {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.0
    }
}

/// The `(id, signature)` of the events verified lately, bounded: the oldest
/// is forgotten first.
///
/// Holding the whole signature (not a short hash of it) matters: an event
/// with a known id but another signature is verified in full, so a relay
/// cannot pass a forged signature off on a known id.
#[derive(Clone, Debug)]
pub struct SeenSignatures {
    signatures: RecentIds<Signature>,
}

impl SeenSignatures {
    /// Remembers at most `capacity` events (0 remembers none).
    pub fn new(capacity: usize) -> Self {
        SeenSignatures {
            signatures: RecentIds::new(capacity),
        }
    }

    /// How many events are remembered.
    pub fn len(&self) -> usize {
        self.signatures.len()
    }

    /// `true` when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.signatures.len() == 0
    }

    /// The event as verified if the same id with the same signature was
    /// verified before and its content still hashes to that id; the event
    /// back otherwise (to verify in full).
    pub fn recall(&self, event: Arc<Event>) -> Result<VerifiedEvent, Arc<Event>> {
        let known = self
            .signatures
            .get(&event.id)
            .is_some_and(|signature| *signature == event.sig);
        if known && event.verify_id() {
            Ok(VerifiedEvent(event))
        } else {
            Err(event)
        }
    }

    /// Remembers a verified event, forgetting the oldest past the capacity.
    pub fn remember(&mut self, event: &VerifiedEvent) {
        self.signatures.insert(event.id, event.sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind};

    fn note(keys: &Keys, content: &str) -> Event {
        EventBuilder::new(Kind::TextNote, content)
            .finalize(keys)
            .expect("signs")
    }

    #[test]
    fn a_forged_signature_is_refused() {
        let keys = Keys::generate();
        let mut event = note(&keys, "a");
        event.sig = note(&keys, "b").sig;
        assert_eq!(
            VerifiedEvent::verify(event.clone()),
            Err(Forged { id: event.id })
        );
    }

    #[test]
    fn a_known_id_with_another_signature_is_verified_in_full() {
        let keys = Keys::generate();
        let event = note(&keys, "a");
        let mut seen = SeenSignatures::new(8);
        VerifiedEvent::verify_remembering(event.clone(), &mut seen).expect("valid");
        let mut forged = event.clone();
        forged.sig = note(&keys, "b").sig;
        assert!(seen.recall(Arc::new(forged.clone())).is_err());
        assert!(VerifiedEvent::verify_remembering(forged, &mut seen).is_err());
        assert!(
            seen.recall(Arc::new(event)).is_ok(),
            "the real one is recalled"
        );
    }

    #[test]
    fn a_known_signature_on_changed_content_is_refused() {
        let keys = Keys::generate();
        let event = note(&keys, "a");
        let mut seen = SeenSignatures::new(8);
        VerifiedEvent::verify_remembering(event.clone(), &mut seen).expect("valid");
        let mut changed = event;
        changed.content = "b".into();
        assert!(seen.recall(Arc::new(changed.clone())).is_err());
        assert!(VerifiedEvent::verify_remembering(changed, &mut seen).is_err());
    }

    #[test]
    fn the_oldest_is_forgotten_past_the_capacity() {
        let keys = Keys::generate();
        let mut seen = SeenSignatures::new(2);
        let events: Vec<Event> = (0..3).map(|n| note(&keys, &n.to_string())).collect();
        for event in &events {
            VerifiedEvent::verify_remembering(event.clone(), &mut seen).expect("valid");
        }
        assert_eq!(seen.len(), 2);
        assert!(seen.recall(Arc::new(events[0].clone())).is_err());
        assert!(seen.recall(Arc::new(events[2].clone())).is_ok());
        assert!(SeenSignatures::new(0)
            .recall(Arc::new(events[2].clone()))
            .is_err());
    }
}
