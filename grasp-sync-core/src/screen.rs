//! What is checked of an event from a relay before its signature, and in
//! which order: the cheap checks first, so a relay sending forged,
//! unrequested or oversized events costs little.
//!
//! 1. its size: an `EVENT` frame longer than the event size limit is
//!    refused by its length, before it is parsed ([`SizeLimits::frame_too_large`]);
//!    a parsed event by its size and tag count ([`SizeLimits::event_too_large`]);
//! 2. its id: the hash of its content (≈ 1 µs);
//! 3. its subscription and filters: an event on a subscription we did not
//!    open, or outside the filters we sent, is not ours to check
//!    ([`Requested::screen`]);
//! 4. only then its Schnorr signature (≈ 40 µs,
//!    [`VerifiedEvent`](crate::verified::VerifiedEvent)).
//!
//! [`screen`] runs the parsed event's part of step 1, and steps 2 and 3,
//! and hands on an [`IdChecked`] event whose id is not hashed again; a
//! driver that verifies off the engine's thread calls it before the
//! signature check, and the engine checks the size, subscription and filter
//! again itself (its own view is authoritative).
//! Every refusal is a [`Refused`], counted by the engine and toward the
//! relay's [`Caps::max_bad_events`](crate::engine::Caps::max_bad_events).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use nostr::prelude::{Event, EventId, Filter, SubscriptionId};

use crate::filters::matches;
use crate::verified::{Forged, IdChecked};

/// Why an event from a relay was refused before it could be stored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Its id or signature does not verify.
    #[error(transparent)]
    Forged(#[from] Forged),
    /// It arrived on a subscription that is not open.
    #[error("event {id}: on a subscription that is not open")]
    UnknownSubscription {
        /// The id the event claims.
        id: EventId,
    },
    /// It matches none of its subscription's filters.
    #[error("event {id}: outside the subscription's filters")]
    OffFilter {
        /// The id the event claims.
        id: EventId,
    },
    /// It is over the size limits: `bytes` long (on the wire where the
    /// driver measured it, else as estimated by [`event_size`]) with
    /// `tags` tags (0 when refused unparsed).
    #[error("event of {bytes} bytes and {tags} tags: over the size limits")]
    Oversized {
        /// Its size in bytes.
        bytes: usize,
        /// Its tag count (0 when it was refused before parsing).
        tags: usize,
    },
    /// A frame that is not a relay message at all (not NIP-01 or NIP-77
    /// JSON): bad input like a forged event, so a relay flooding garbage
    /// is cut off like one flooding forgeries.
    #[error("frame of {bytes} bytes: not a relay message")]
    Malformed {
        /// The frame's size in bytes.
        bytes: usize,
    },
}

/// Bytes of an `EVENT` frame around the event: `["EVENT","`, a
/// subscription id (at most 64 characters in NIP-01), `",` and `]`.
pub const EVENT_ENVELOPE: usize = 100;

/// The size of `event` as JSON, without escapes (a lower bound of its size
/// on the wire): its fixed fields, content and tag values.
pub fn event_size(event: &Event) -> usize {
    // id, pubkey, sig in hex, created_at, kind and the field names.
    const FIXED: usize = 64 + 64 + 128 + 100;
    let tags: usize = event
        .tags
        .iter()
        .map(|tag| {
            tag.as_slice()
                .iter()
                .map(|value| value.len() + 3)
                .sum::<usize>()
                + 2
        })
        .sum();
    FIXED + event.content.len() + tags
}

/// The size limits of one event from a relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLimits {
    /// Largest event in bytes of JSON.
    pub max_event_size: usize,
    /// Most tags on one event.
    pub max_event_tags: usize,
}

impl SizeLimits {
    /// Is an `EVENT` frame of `frame_len` bytes too long to hold an event
    /// within the limit, whatever it contains? (checked before parsing)
    pub fn frame_too_large(&self, frame_len: usize) -> bool {
        frame_len > self.max_event_size.saturating_add(EVENT_ENVELOPE)
    }

    /// Is `event` over the size or tag limit? `Some` with the refusal if so.
    pub fn event_too_large(&self, event: &Event) -> Option<Refused> {
        let bytes = event_size(event);
        let tags = event.tags.len();
        (bytes > self.max_event_size || tags > self.max_event_tags)
            .then_some(Refused::Oversized { bytes, tags })
    }
}

/// Subscriptions closed lately whose filters are still remembered: a relay
/// may send events for a subscription until it has read our `CLOSE`.
const RECENTLY_CLOSED: usize = 256;

/// Subscriptions open (or opened) on one connection, at most this many:
/// past it the oldest is forgotten (a relay that never answers our
/// `CLOSE`s cannot grow it).
const MAX_REQUESTED: usize = 4_096;

/// The subscriptions we opened on one connection with the filters we sent,
/// and those closed lately: what a relay may send us events for. Kept by a
/// driver from the `REQ`s and `CLOSE`s it sends.
#[derive(Clone, Debug, Default)]
pub struct Requested {
    filters: HashMap<SubscriptionId, Arc<[Filter]>>,
    /// Subscriptions in the order opened, oldest first.
    order: VecDeque<SubscriptionId>,
    /// Subscriptions closed lately, oldest first (still in `filters`).
    closed: VecDeque<SubscriptionId>,
}

impl Requested {
    /// An empty table (a new connection).
    pub fn new() -> Self {
        Requested::default()
    }

    /// We sent `REQ` `id` with `filters` (replacing an open one of the
    /// same id).
    pub fn opened(&mut self, id: SubscriptionId, filters: Vec<Filter>) {
        self.closed.retain(|closed| closed != &id);
        if self.filters.insert(id.clone(), filters.into()).is_none() {
            self.order.push_back(id);
        }
        while self.filters.len() > MAX_REQUESTED {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.forget(&oldest);
        }
    }

    /// We sent `CLOSE` for `id` (or the relay closed it): its events are
    /// still accepted until 256 later closes.
    pub fn closed(&mut self, id: &SubscriptionId) {
        if !self.filters.contains_key(id) || self.closed.contains(id) {
            return;
        }
        self.closed.push_back(id.clone());
        while self.closed.len() > RECENTLY_CLOSED {
            let Some(oldest) = self.closed.pop_front() else {
                break;
            };
            self.forget(&oldest);
        }
    }

    fn forget(&mut self, id: &SubscriptionId) {
        self.filters.remove(id);
        self.order.retain(|open| open != id);
        self.closed.retain(|closed| closed != id);
    }

    /// May `event` arrive on subscription `id`: is it open (or closed
    /// lately) and does the event match one of its filters?
    pub fn screen(&self, id: &SubscriptionId, event: &Event) -> Result<(), Refused> {
        let Some(filters) = self.filters.get(id) else {
            return Err(Refused::UnknownSubscription { id: event.id });
        };
        if filters.iter().any(|filter| matches(filter, event)) {
            Ok(())
        } else {
            Err(Refused::OffFilter { id: event.id })
        }
    }

    /// Subscriptions remembered (open or closed lately).
    pub fn len(&self) -> usize {
        self.filters.len()
    }

    /// `true` when no subscription is remembered.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

/// The checks of `event` on subscription `subscription` that come before
/// its signature, cheapest first: its size and tags, its id (the hash of
/// its content), then its subscription and filter. The event that passes
/// comes back id-checked: only its signature remains.
pub fn screen(
    event: Event,
    subscription: &SubscriptionId,
    requested: &Requested,
    limits: &SizeLimits,
) -> Result<IdChecked, Refused> {
    if let Some(refused) = limits.event_too_large(&event) {
        return Err(refused);
    }
    let checked = IdChecked::check(Arc::new(event))?;
    requested.screen(subscription, checked.event())?;
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag};

    const LIMITS: SizeLimits = SizeLimits {
        max_event_size: 1_000,
        max_event_tags: 3,
    };

    fn note(content: &str) -> Event {
        EventBuilder::new(Kind::TextNote, content)
            .finalize(&Keys::generate())
            .expect("signs")
    }

    fn sub(id: &str) -> SubscriptionId {
        SubscriptionId::new(id)
    }

    #[test]
    fn the_size_estimate_is_at_most_the_json() {
        let event = EventBuilder::new(Kind::TextNote, "hello")
            .tags([Tag::hashtag("x"), Tag::identifier("repo")])
            .finalize(&Keys::generate())
            .expect("signs");
        let json = nostr::prelude::ClientMessage::Event(std::borrow::Cow::Borrowed(&event))
            .as_json()
            .len();
        let estimate = event_size(&event);
        assert!(
            estimate <= json + 200 && estimate + 200 >= json,
            "{estimate} {json}"
        );
    }

    #[test]
    fn an_event_over_the_size_or_tag_limit_is_refused() {
        assert_eq!(LIMITS.event_too_large(&note("small")), None);
        let big = note(&"x".repeat(1_000));
        assert!(matches!(
            LIMITS.event_too_large(&big),
            Some(Refused::Oversized { bytes, tags: 0 }) if bytes > 1_000
        ));
        let tagged = EventBuilder::new(Kind::TextNote, "")
            .tags((0..4).map(|n| Tag::hashtag(n.to_string())))
            .finalize(&Keys::generate())
            .expect("signs");
        assert!(matches!(
            LIMITS.event_too_large(&tagged),
            Some(Refused::Oversized { tags: 4, .. })
        ));
    }

    #[test]
    fn a_frame_is_too_large_only_past_the_limit_and_its_envelope() {
        assert!(!LIMITS.frame_too_large(1_000 + EVENT_ENVELOPE));
        assert!(LIMITS.frame_too_large(1_001 + EVENT_ENVELOPE));
    }

    #[test]
    fn screening_checks_the_id_then_the_subscription_then_the_filter() {
        let mut requested = Requested::new();
        requested.opened(sub("s"), vec![Filter::new().kind(Kind::TextNote)]);
        let event = note("hi");
        assert_eq!(
            screen(event.clone(), &sub("s"), &requested, &LIMITS).map(|e| e.event().id),
            Ok(event.id)
        );
        // A changed content with the id kept: forged, whatever the
        // subscription (the id is checked first).
        let mut forged = event.clone();
        forged.content = "changed".into();
        assert_eq!(
            screen(forged, &sub("other"), &requested, &LIMITS),
            Err(Refused::Forged(Forged { id: event.id }))
        );
        assert_eq!(
            screen(event.clone(), &sub("other"), &requested, &LIMITS),
            Err(Refused::UnknownSubscription { id: event.id })
        );
        let reaction = EventBuilder::new(Kind::Reaction, "+")
            .finalize(&Keys::generate())
            .expect("signs");
        assert_eq!(
            screen(reaction.clone(), &sub("s"), &requested, &LIMITS),
            Err(Refused::OffFilter { id: reaction.id })
        );
    }

    #[test]
    fn a_closed_subscription_is_screened_until_later_closes_push_it_out() {
        let mut requested = Requested::new();
        let filters = vec![Filter::new().kind(Kind::TextNote)];
        requested.opened(sub("first"), filters.clone());
        requested.closed(&sub("first"));
        let event = note("late");
        assert_eq!(requested.screen(&sub("first"), &event), Ok(()));
        for n in 0..RECENTLY_CLOSED {
            let id = sub(&format!("s{n}"));
            requested.opened(id.clone(), filters.clone());
            requested.closed(&id);
        }
        assert_eq!(
            requested.screen(&sub("first"), &event),
            Err(Refused::UnknownSubscription { id: event.id })
        );
        assert_eq!(requested.len(), RECENTLY_CLOSED);
    }

    #[test]
    fn subscriptions_never_closed_are_bounded() {
        let mut requested = Requested::new();
        for n in 0..MAX_REQUESTED + 10 {
            requested.opened(sub(&format!("s{n}")), vec![Filter::new()]);
        }
        assert_eq!(requested.len(), MAX_REQUESTED);
        assert_eq!(
            requested.screen(&sub("s0"), &note("x")).map_err(|_| ()),
            Err(())
        );
    }
}
