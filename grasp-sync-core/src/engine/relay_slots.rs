//! Fair relay slots: relays taken from announcements hold a slot under
//! [`Caps::max_relays`](super::Caps::max_relays), charged to the author of
//! the announcement that brought them in. An author gets a bounded share
//! ([`Caps::max_relays_per_author`](super::Caps::max_relays_per_author)),
//! and a relay that serves nothing of ours within its trial period
//! ([`Caps::relay_trial_period`](super::Caps::relay_trial_period)) yields its
//! slot to one waiting: relays are admitted by what they serve, not by who
//! listed them first. This module decides; the engine carries out
//! (registering, forgetting and re-listing relays).

use std::collections::HashMap;
use std::time::Duration;

use indexmap::IndexMap;
use nostr::prelude::{PublicKey, RelayUrl};

use crate::clock::Instant;

/// The rules a slot is granted under, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotRules {
    /// Relays tracked in total ([`Caps::max_relays`](super::Caps::max_relays)).
    pub(crate) max_relays: usize,
    /// Slots one author's announcements may hold
    /// ([`Caps::max_relays_per_author`](super::Caps::max_relays_per_author)).
    pub(crate) per_author: usize,
    /// How long a relay may hold its slot without serving before it yields
    /// it to one waiting, and how long a relay that yielded waits before it
    /// may take a slot again
    /// ([`Caps::relay_trial_period`](super::Caps::relay_trial_period)).
    pub(crate) trial: Duration,
}

/// Whether a relay not tracked yet may take a slot now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It may: a slot is free, its author has room, it is not benched.
    Granted,
    /// Every slot is taken ([`SlotRules::max_relays`]).
    TotalFull,
    /// Its author holds [`SlotRules::per_author`] slots already.
    AuthorFull,
    /// It yielded its slot less than a trial period ago: the relays waiting
    /// behind it get their turn first.
    Benched,
}

/// What the engine knows about a tracked relay's service besides what its
/// slot records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Service {
    /// Connected, with Layer 1 and every item it is targeted for confirmed:
    /// its repositories are ours and it holds them.
    pub(crate) confirmed: bool,
    /// Failing to connect for long enough to count as dead.
    pub(crate) dead: bool,
}

/// One relay's slot.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Slot {
    /// The author of the announcement that brought the relay in.
    author: PublicKey,
    /// When the slot was granted: its trial period starts here.
    granted: Instant,
    /// The relay delivered an event of ours (one the engine stored).
    delivered: bool,
}

impl Slot {
    /// Does the relay serve what is ours: its historic sync is confirmed,
    /// or it delivered events of ours and is not dead.
    fn serves(&self, service: Service) -> bool {
        service.confirmed || (self.delivered && !service.dead)
    }

    /// Is the slot's trial period over at `now`?
    fn trial_over(&self, now: Instant, trial: Duration) -> bool {
        now.saturating_duration_since(self.granted) >= trial
    }
}

/// The slots of the relays taken from announcements (bootstrap relays hold
/// none), each charged to an author, and the relays that yielded theirs
/// lately.
#[derive(Debug, Default)]
pub(crate) struct RelaySlots {
    /// Each relay holding a slot, in the order granted.
    slots: IndexMap<RelayUrl, Slot>,
    /// How many slots each author holds.
    per_author: HashMap<PublicKey, usize>,
    /// Relays that yielded their slot, with when: benched for a trial period.
    benched: IndexMap<RelayUrl, Instant>,
}

impl RelaySlots {
    /// How many slots `author` holds.
    pub(crate) fn held_by(&self, author: &PublicKey) -> usize {
        self.per_author.get(author).copied().unwrap_or(0)
    }

    /// Does `author` have room for another relay under `rules`?
    pub(crate) fn author_has_room(&self, author: &PublicKey, rules: SlotRules) -> bool {
        self.held_by(author) < rules.per_author
    }

    /// May `relay`, not tracked yet, brought in by `author`'s announcement,
    /// take a slot now, with `tracked` relays tracked in total?
    pub(crate) fn admission(
        &self,
        relay: &RelayUrl,
        author: &PublicKey,
        tracked: usize,
        rules: SlotRules,
        now: Instant,
    ) -> Admission {
        if self.is_benched(relay, rules, now) {
            Admission::Benched
        } else if !self.author_has_room(author, rules) {
            Admission::AuthorFull
        } else if tracked >= rules.max_relays {
            Admission::TotalFull
        } else {
            Admission::Granted
        }
    }

    /// Did `relay` yield its slot less than a trial period before `now`?
    fn is_benched(&self, relay: &RelayUrl, rules: SlotRules, now: Instant) -> bool {
        self.benched
            .get(relay)
            .is_some_and(|&at| now.saturating_duration_since(at) < rules.trial)
    }

    /// Grants `relay` a slot charged to `author` from `now` (a relay holding
    /// one keeps it as it is).
    pub(crate) fn grant(&mut self, relay: RelayUrl, author: PublicKey, now: Instant) {
        self.benched.shift_remove(&relay);
        if self.slots.contains_key(&relay) {
            return;
        }
        *self.per_author.entry(author).or_default() += 1;
        self.slots.insert(
            relay,
            Slot {
                author,
                granted: now,
                delivered: false,
            },
        );
    }

    /// Frees `relay`'s slot (the relay is no longer tracked); returns the
    /// author it was charged to.
    pub(crate) fn release(&mut self, relay: &RelayUrl) -> Option<PublicKey> {
        let slot = self.slots.shift_remove(relay)?;
        if let Some(held) = self.per_author.get_mut(&slot.author) {
            *held -= 1;
            if *held == 0 {
                self.per_author.remove(&slot.author);
            }
        }
        Some(slot.author)
    }

    /// Frees `relay`'s slot because it yielded it at `now`: it may not take
    /// one again for a trial period. Returns the author it was charged to.
    pub(crate) fn bench(&mut self, relay: &RelayUrl, now: Instant) -> Option<PublicKey> {
        let author = self.release(relay)?;
        self.benched.insert(relay.clone(), now);
        Some(author)
    }

    /// Forgets benches older than a trial period (they no longer hold a
    /// relay back), so the record stays as small as the relays that
    /// yielded within one.
    pub(crate) fn forget_old_benches(&mut self, rules: SlotRules, now: Instant) {
        self.benched
            .retain(|_, &mut at| now.saturating_duration_since(at) < rules.trial);
    }

    /// Notes that `relay` delivered an event of ours.
    pub(crate) fn note_delivered(&mut self, relay: &RelayUrl) {
        if let Some(slot) = self.slots.get_mut(relay) {
            slot.delivered = true;
        }
    }

    /// Which relay yields its slot to one waiting, at `now`: of the relays
    /// whose trial period is over and that do not serve (`service` tells
    /// what the engine knows of each), the one whose author holds the most
    /// slots, then the one granted first. `None` when every relay serves or
    /// is still on trial: a relay that serves never yields.
    pub(crate) fn yielding(
        &self,
        now: Instant,
        rules: SlotRules,
        service: impl Fn(&RelayUrl) -> Service,
    ) -> Option<&RelayUrl> {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.trial_over(now, rules.trial))
            .filter(|(relay, slot)| !slot.serves(service(relay)))
            // The first of equals wins: `max_by_key` keeps the last, so
            // compare on the reversed grant order.
            .enumerate()
            .max_by_key(|(order, (_, slot))| {
                (self.held_by(&slot.author), std::cmp::Reverse(*order))
            })
            .map(|(_, (relay, _))| relay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    const TRIAL: Duration = Duration::from_secs(600);

    fn rules() -> SlotRules {
        SlotRules {
            max_relays: 10,
            per_author: 3,
            trial: TRIAL,
        }
    }

    fn url(name: &str) -> RelayUrl {
        RelayUrl::parse(&format!("wss://{name}.example.com")).expect("url")
    }

    fn author() -> PublicKey {
        Keys::generate().public_key()
    }

    fn at(secs: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(secs)
    }

    fn nothing(_: &RelayUrl) -> Service {
        Service::default()
    }

    #[test]
    fn an_author_has_room_until_it_holds_its_share() {
        let (alice, bob) = (author(), author());
        let mut slots = RelaySlots::default();
        for n in 0..3 {
            assert!(slots.author_has_room(&alice, rules()));
            slots.grant(url(&format!("a{n}")), alice, at(0));
        }
        assert_eq!(slots.held_by(&alice), 3);
        assert!(!slots.author_has_room(&alice, rules()));
        assert!(
            slots.author_has_room(&bob, rules()),
            "a share is per author"
        );
        // Granting a relay that holds a slot charges nobody again.
        slots.grant(url("a0"), bob, at(1));
        assert_eq!((slots.held_by(&alice), slots.held_by(&bob)), (3, 0));
        assert_eq!(slots.release(&url("a1")), Some(alice));
        assert!(slots.author_has_room(&alice, rules()));
        assert_eq!(slots.release(&url("a1")), None, "released once");
    }

    #[test]
    fn admission_names_what_holds_a_relay_back() {
        let (alice, bob) = (author(), author());
        let mut slots = RelaySlots::default();
        for n in 0..3 {
            slots.grant(url(&format!("a{n}")), alice, at(0));
        }
        let admission = |slots: &RelaySlots, relay: &str, who: &PublicKey, tracked, now| {
            slots.admission(&url(relay), who, tracked, rules(), now)
        };
        assert_eq!(admission(&slots, "b", &bob, 3, at(0)), Admission::Granted);
        assert_eq!(
            admission(&slots, "a3", &alice, 3, at(0)),
            Admission::AuthorFull
        );
        assert_eq!(
            admission(&slots, "b", &bob, 10, at(0)),
            Admission::TotalFull
        );
        // A relay that yielded waits a trial period, then may come back.
        assert_eq!(slots.bench(&url("a0"), at(100)), Some(alice));
        assert_eq!(
            admission(&slots, "a0", &bob, 2, at(100)),
            Admission::Benched
        );
        assert_eq!(
            admission(&slots, "a0", &bob, 2, at(100 + 599)),
            Admission::Benched
        );
        assert_eq!(
            admission(&slots, "a0", &bob, 2, at(100 + 600)),
            Admission::Granted
        );
        slots.forget_old_benches(rules(), at(100 + 600));
        assert!(slots.benched.is_empty());
    }

    #[test]
    fn no_relay_yields_while_on_trial() {
        let mut slots = RelaySlots::default();
        slots.grant(url("a"), author(), at(0));
        assert_eq!(slots.yielding(at(599), rules(), nothing), None);
        assert_eq!(slots.yielding(at(600), rules(), nothing), Some(&url("a")));
    }

    #[test]
    fn a_relay_that_serves_never_yields() {
        let alice = author();
        let mut slots = RelaySlots::default();
        slots.grant(url("delivered"), alice, at(0));
        slots.grant(url("confirmed"), alice, at(0));
        slots.note_delivered(&url("delivered"));
        let confirmed = |relay: &RelayUrl| Service {
            confirmed: *relay == url("confirmed"),
            dead: false,
        };
        assert_eq!(slots.yielding(at(100_000), rules(), confirmed), None);
        // Delivering once does not keep a slot for a relay dead since.
        let dead = |_: &RelayUrl| Service {
            confirmed: false,
            dead: true,
        };
        assert_eq!(
            slots.yielding(at(100_000), rules(), dead),
            Some(&url("delivered"))
        );
    }

    #[test]
    fn the_author_holding_most_slots_yields_first_then_the_oldest_slot() {
        let (flood, honest) = (author(), author());
        let mut slots = RelaySlots::default();
        slots.grant(url("honest"), honest, at(0));
        slots.grant(url("flood-0"), flood, at(10));
        slots.grant(url("flood-1"), flood, at(20));
        assert_eq!(
            slots.yielding(at(1_000), rules(), nothing),
            Some(&url("flood-0")),
            "the flooding author yields first, its first slot first"
        );
        slots.release(&url("flood-0"));
        slots.release(&url("flood-1"));
        assert_eq!(
            slots.yielding(at(1_000), rules(), nothing),
            Some(&url("honest"))
        );
    }
}
