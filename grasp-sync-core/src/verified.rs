//! Events whose id and signature were checked, as a type: only a
//! [`VerifiedEvent`] can reach [`Command::Store`](crate::engine::Command::Store),
//! so the guarantee "every stored event verified" holds wherever the
//! check runs — on the engine's thread or, in parallel, on a driver's.
//!
//! [`SeenSignatures`] remembers the `(id, signature)` pairs verified lately,
//! shared across relays: the same event from a second relay is accepted by
//! an id-hash check and a signature comparison (≈ 1 µs) instead of a second
//! Schnorr verification (≈ 40 µs).
//!
//! [`AuthorKeys`] remembers the authors' public keys parsed lately: `nostr`
//! keeps a key as 32 bytes and [`Event::verify`] parses it into a curve
//! point (a field square root, ≈ 10 % of a verification) for every event.
//! NIP-34 events come from few authors (maintainers and contributors), so
//! [`VerifiedEvent::verify_with_key`] reuses the parsed key instead.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use nostr::event::Signature;
use nostr::prelude::{Event, EventId, PublicKey};
use secp256k1::{schnorr, Secp256k1, VerifyOnly, XOnlyPublicKey};

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

/// An event whose id was checked (it is the hash of the content): only its
/// signature remains to be checked ([`VerifiedEvent::verify_signature`],
/// [`SeenSignatures::recall_checked`]). Built by [`IdChecked::check`];
/// [`crate::screen::screen`] returns one, so the id of an event that
/// passes the screen is not hashed again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdChecked(Arc<Event>);

impl IdChecked {
    /// Checks that the event's id is the hash of its content.
    pub fn check(event: Arc<Event>) -> Result<IdChecked, Forged> {
        if event.verify_id() {
            Ok(IdChecked(event))
        } else {
            Err(Forged { id: event.id })
        }
    }

    /// The event.
    pub fn event(&self) -> &Event {
        &self.0
    }
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

    /// [`VerifiedEvent::verify_shared`] with the author's key already parsed:
    /// `key` when it is the event's author's (from [`AuthorKeys::get`]),
    /// else the event's own key, parsed here. Returns the key it used, for
    /// [`AuthorKeys::remember`]. The same checks as [`Event::verify`]: the
    /// id is the hash of the content, and the signature is the author's
    /// over that id.
    pub fn verify_with_key(
        event: Arc<Event>,
        key: Option<AuthorKey>,
    ) -> Result<(Self, AuthorKey), Forged> {
        let forged = Forged { id: event.id };
        let key = match key {
            Some(key) if key.public_key == event.pubkey => key,
            _ => AuthorKey::parse(&event.pubkey).ok_or(forged)?,
        };
        Self::verify_signature(IdChecked::check(event)?, Some(key))
    }

    /// The signature check of an event whose id was checked already, with
    /// the author's key as [`VerifiedEvent::verify_with_key`] takes it.
    pub fn verify_signature(
        event: IdChecked,
        key: Option<AuthorKey>,
    ) -> Result<(Self, AuthorKey), Forged> {
        let IdChecked(event) = event;
        let forged = Forged { id: event.id };
        let key = match key {
            Some(key) if key.public_key == event.pubkey => key,
            _ => AuthorKey::parse(&event.pubkey).ok_or(forged.clone())?,
        };
        let signature = schnorr::Signature::from_byte_array(*event.sig.as_bytes());
        match VERIFIER.verify_schnorr(&signature, event.id.as_bytes(), &key.point) {
            Ok(()) => Ok((VerifiedEvent(event), key)),
            Err(_) => Err(forged),
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

/// A context for verifying signatures (no tables to build: verification
/// uses the library's static ones).
static VERIFIER: LazyLock<Secp256k1<VerifyOnly>> = LazyLock::new(Secp256k1::verification_only);

/// An author's public key, parsed into the curve point a signature check
/// needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthorKey {
    public_key: PublicKey,
    point: XOnlyPublicKey,
}

impl AuthorKey {
    /// Parses `public_key`; `None` when its 32 bytes are not the x
    /// coordinate of a curve point (no signature by it can verify).
    pub fn parse(public_key: &PublicKey) -> Option<AuthorKey> {
        XOnlyPublicKey::from_byte_array(public_key.as_bytes())
            .ok()
            .map(|point| AuthorKey {
                public_key: *public_key,
                point,
            })
    }

    /// The public key it was parsed from.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }
}

/// The authors' keys parsed lately, at most a capacity of them: when full,
/// it starts again empty (a relay sending events of ever new authors costs
/// what it costs without the cache, a parse per event, never memory).
#[derive(Clone, Debug)]
pub struct AuthorKeys {
    keys: HashMap<PublicKey, AuthorKey>,
    capacity: usize,
}

impl AuthorKeys {
    /// Remembers at most `capacity` keys (0 remembers none).
    pub fn new(capacity: usize) -> Self {
        AuthorKeys {
            keys: HashMap::new(),
            capacity,
        }
    }

    /// The parsed key of `author`, if remembered.
    pub fn get(&self, author: &PublicKey) -> Option<AuthorKey> {
        self.keys.get(author).copied()
    }

    /// Remembers `key`; when the capacity is reached, everything remembered
    /// before is forgotten first.
    pub fn remember(&mut self, key: AuthorKey) {
        if self.capacity == 0 || self.keys.contains_key(&key.public_key) {
            return;
        }
        if self.keys.len() >= self.capacity {
            self.keys.clear();
        }
        self.keys.insert(key.public_key, key);
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// `true` when no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
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

    /// [`SeenSignatures::recall`] for an event whose id was checked already:
    /// a lookup, no hash.
    pub fn recall_checked(&self, event: IdChecked) -> Result<VerifiedEvent, IdChecked> {
        let known = self
            .signatures
            .get(&event.0.id)
            .is_some_and(|signature| *signature == event.0.sig);
        if known {
            Ok(VerifiedEvent(event.0))
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
    fn an_id_checked_event_still_needs_its_signature() {
        let keys = Keys::generate();
        let event = note(&keys, "hi");
        let mut bad_signature = event.clone();
        bad_signature.sig = note(&keys, "other").sig;
        // The id is the hash of the content: it passes the id check...
        let checked = IdChecked::check(Arc::new(bad_signature)).expect("the id matches");
        // ...but not the signature, and is not recalled for a known id.
        let mut seen = SeenSignatures::new(4);
        let verified = VerifiedEvent::verify(event.clone()).expect("verifies");
        seen.remember(&verified);
        let checked = seen.recall_checked(checked).expect_err("another signature");
        assert!(VerifiedEvent::verify_signature(checked, None).is_err());
        let genuine = IdChecked::check(Arc::new(event)).expect("the id matches");
        assert!(seen.recall_checked(genuine).is_ok());
        let mut changed = note(&keys, "x");
        changed.content = "y".into();
        assert!(IdChecked::check(Arc::new(changed)).is_err());
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

    fn shared(event: &Event) -> Arc<Event> {
        Arc::new(event.clone())
    }

    #[test]
    fn an_event_verifies_with_its_author_s_parsed_key_and_without() {
        let keys = Keys::generate();
        let event = note(&keys, "a");
        let (_, key) = VerifiedEvent::verify_with_key(shared(&event), None).expect("valid");
        assert_eq!(key.public_key(), &keys.public_key());
        let other = note(&keys, "b");
        let (verified, again) =
            VerifiedEvent::verify_with_key(shared(&other), Some(key)).expect("valid");
        assert_eq!(verified.id, other.id);
        assert_eq!(again, key);
    }

    #[test]
    fn another_author_s_key_is_never_used() {
        let (alice, mallory) = (Keys::generate(), Keys::generate());
        let by_alice = note(&alice, "a");
        let mallory_key = AuthorKey::parse(&mallory.public_key()).expect("a key");
        // Handed the wrong key, it checks with the author's own.
        let (_, used) = VerifiedEvent::verify_with_key(shared(&by_alice), Some(mallory_key))
            .expect("alice's event is valid");
        assert_eq!(used.public_key(), &alice.public_key());
        // Mallory's signature on an event claiming Alice as author fails,
        // whichever key is handed in.
        let mut claimed = note(&mallory, "a");
        claimed.pubkey = alice.public_key();
        for key in [None, Some(mallory_key), Some(used)] {
            assert!(VerifiedEvent::verify_with_key(shared(&claimed), key).is_err());
        }
    }

    #[test]
    fn forged_content_a_forged_signature_and_a_key_off_the_curve_are_refused() {
        let keys = Keys::generate();
        let event = note(&keys, "a");
        let key = AuthorKey::parse(&keys.public_key());
        let mut changed = event.clone();
        changed.content = "b".into();
        let mut resigned = event.clone();
        resigned.sig = note(&keys, "b").sig;
        // x = 5 is not the x coordinate of a point of secp256k1.
        let mut off_curve = [0_u8; 32];
        off_curve[31] = 5;
        let off_curve = PublicKey::from_byte_array(off_curve);
        assert!(AuthorKey::parse(&off_curve).is_none());
        let mut no_point = event.clone();
        no_point.pubkey = off_curve;
        for forged in [changed, resigned, no_point] {
            assert_eq!(
                VerifiedEvent::verify_with_key(shared(&forged), key),
                Err(Forged { id: forged.id })
            );
        }
    }

    #[test]
    fn author_keys_are_bounded() {
        let mut keys = AuthorKeys::new(2);
        let parsed: Vec<AuthorKey> = (0..3)
            .map(|_| AuthorKey::parse(&Keys::generate().public_key()).expect("a key"))
            .collect();
        for key in &parsed {
            keys.remember(*key);
            assert!(keys.len() <= 2);
        }
        assert_eq!(keys.get(parsed[2].public_key()), Some(parsed[2]));
        let mut none = AuthorKeys::new(0);
        none.remember(parsed[0]);
        assert!(none.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Whatever is tampered with and whichever key is handed in, the
        /// answer is `Event::verify`'s.
        #[test]
        fn verify_with_key_answers_as_event_verify(
            author in 0_usize..3,
            signer in 0_usize..3,
            handed in proptest::option::of(0_usize..3),
            content in ".{0,40}",
            tamper in 0_u8..4,
        ) {
            let keys: Vec<Keys> = (1..=3_u8)
                .map(|n| Keys::new(nostr::prelude::SecretKey::from_slice(&[n; 32]).expect("a key")))
                .collect();
            let mut event = note(&keys[signer], &content);
            event.pubkey = keys[author].public_key();
            match tamper {
                0 => {}
                1 => event.content.push('x'),
                2 => event.sig = note(&keys[signer], "other").sig,
                _ => event.created_at = event.created_at + 1,
            }
            let key = handed.and_then(|n| AuthorKey::parse(&keys[n].public_key()));
            let ours = VerifiedEvent::verify_with_key(shared(&event), key).is_ok();
            proptest::prop_assert_eq!(ours, event.verify().is_ok());
        }
    }
}
