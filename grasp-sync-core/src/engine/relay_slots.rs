//! Fair relay slots, earned and shared: relays taken from announcements
//! hold a slot under [`Caps::max_relays`](super::Caps::max_relays), charged
//! to the author of the announcement that brought them in and to the
//! network the relay is on (its registrable domain, or the address block of
//! an address literal: [`network_of`]). An author gets a bounded share
//! ([`Caps::max_relays_per_author`](super::Caps::max_relays_per_author)), and
//! so does a network
//! ([`Caps::max_relays_per_network`](super::Caps::max_relays_per_network)):
//! one server behind `*.evil.example` cannot take every slot however many
//! keys list it.
//!
//! A slot is kept by what the relay *earns*: an event of ours that no other
//! relay delivered first (a unique delivery), within the last
//! [`Caps::relay_earn_window`](super::Caps::relay_earn_window). A relay that
//! answers everything with an EOSE but delivers nothing new earns nothing:
//! once its trial period
//! ([`Caps::relay_trial_period`](super::Caps::relay_trial_period)) is over,
//! it yields its slot to one waiting. Relays are admitted by what they bring,
//! not by who listed them first. This module decides; the engine carries
//! out (registering, forgetting and re-listing relays).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use indexmap::IndexMap;
use nostr::prelude::{PublicKey, RelayUrl};

use crate::clock::Instant;
use crate::purgatory::throttle_key;

/// The rules a slot is granted under, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotRules {
    /// Relays tracked in total ([`Caps::max_relays`](super::Caps::max_relays)).
    pub(crate) max_relays: usize,
    /// Slots one author's announcements may hold
    /// ([`Caps::max_relays_per_author`](super::Caps::max_relays_per_author)).
    pub(crate) per_author: usize,
    /// Slots the relays of one network may hold
    /// ([`Caps::max_relays_per_network`](super::Caps::max_relays_per_network)).
    pub(crate) per_network: usize,
    /// How long a relay may hold its slot without earning it before it
    /// yields it to one waiting, and how long a relay that yielded waits
    /// before it may take a slot again
    /// ([`Caps::relay_trial_period`](super::Caps::relay_trial_period)).
    pub(crate) trial: Duration,
    /// How long a unique delivery keeps a relay's slot
    /// ([`Caps::relay_earn_window`](super::Caps::relay_earn_window)).
    pub(crate) earn_window: Duration,
}

/// Whether a relay not tracked yet may take a slot now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It may: a slot is free, its author and its network have room, it is
    /// not benched.
    Granted,
    /// Every slot is taken ([`SlotRules::max_relays`]).
    TotalFull,
    /// Its author holds [`SlotRules::per_author`] slots already.
    AuthorFull,
    /// Its network holds [`SlotRules::per_network`] slots already.
    NetworkFull,
    /// It yielded its slot less than a trial period ago: the relays waiting
    /// behind it get their turn first.
    Benched,
}

/// The network a relay is on, which shares one
/// [`SlotRules::per_network`] share: for a host name its registrable domain
/// (the heuristic of [`throttle_key`]: one owner pays for
/// `*.evil.example` once), for an IPv4 literal its /24, for an IPv6 literal
/// its /48 (what one customer is given). The core resolves no name: a name
/// is charged to its domain, not to the address it resolves to.
pub(crate) fn network_of(relay: &RelayUrl) -> String {
    let Some(host) = host_of(relay.as_str()) else {
        return relay.as_str().to_owned();
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        Ok(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
        Err(_) => throttle_key(host),
    }
}

/// The host of a relay URL as written (`ws://host:port/path` → `host`,
/// an IPv6 literal with its brackets).
fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next()?
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then_some(host)
}

/// One relay's slot.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Slot {
    /// The author of the announcement that brought the relay in.
    author: PublicKey,
    /// The relay's network ([`network_of`]).
    network: String,
    /// When the slot was granted: its trial period starts here.
    granted: Instant,
    /// When the relay last delivered an event of ours that no other relay
    /// had delivered.
    last_unique: Option<Instant>,
}

impl Slot {
    /// Has the relay earned its slot at `now`: a unique delivery within the
    /// earn window, and not dead since.
    fn earned(&self, now: Instant, rules: SlotRules, dead: bool) -> bool {
        !dead
            && self
                .last_unique
                .is_some_and(|at| now.saturating_duration_since(at) < rules.earn_window)
    }

    /// Is the slot's trial period over at `now`?
    fn trial_over(&self, now: Instant, trial: Duration) -> bool {
        now.saturating_duration_since(self.granted) >= trial
    }
}

/// The slots of the relays taken from announcements (bootstrap relays hold
/// none), each charged to an author and a network, and the relays that
/// yielded theirs lately.
#[derive(Debug, Default)]
pub(crate) struct RelaySlots {
    /// Each relay holding a slot, in the order granted.
    slots: IndexMap<RelayUrl, Slot>,
    /// How many slots each author holds.
    per_author: HashMap<PublicKey, usize>,
    /// How many slots each network holds.
    per_network: HashMap<String, usize>,
    /// Relays that yielded their slot, with when: benched for a trial period.
    benched: IndexMap<RelayUrl, Instant>,
}

impl RelaySlots {
    /// How many slots `author` holds.
    pub(crate) fn held_by(&self, author: &PublicKey) -> usize {
        self.per_author.get(author).copied().unwrap_or(0)
    }

    /// How many slots the relays of `network` hold.
    fn held_on(&self, network: &str) -> usize {
        self.per_network.get(network).copied().unwrap_or(0)
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
        } else if self.held_on(&network_of(relay)) >= rules.per_network {
            Admission::NetworkFull
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

    /// Grants `relay` a slot charged to `author` and its network from `now`
    /// (a relay holding one keeps it as it is).
    pub(crate) fn grant(&mut self, relay: RelayUrl, author: PublicKey, now: Instant) {
        self.benched.shift_remove(&relay);
        if self.slots.contains_key(&relay) {
            return;
        }
        let network = network_of(&relay);
        *self.per_author.entry(author).or_default() += 1;
        *self.per_network.entry(network.clone()).or_default() += 1;
        self.slots.insert(
            relay,
            Slot {
                author,
                network,
                granted: now,
                last_unique: None,
            },
        );
    }

    /// Frees `relay`'s slot (the relay is no longer tracked); returns the
    /// author it was charged to.
    pub(crate) fn release(&mut self, relay: &RelayUrl) -> Option<PublicKey> {
        let slot = self.slots.shift_remove(relay)?;
        decrement(&mut self.per_author, &slot.author);
        decrement(&mut self.per_network, &slot.network);
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

    /// Notes that `relay` delivered, at `now`, an event of ours no other
    /// relay had delivered (the store took it as new, from this relay's
    /// copy): it earns its slot for an earn window.
    pub(crate) fn note_unique_delivery(&mut self, relay: &RelayUrl, now: Instant) {
        if let Some(slot) = self.slots.get_mut(relay) {
            slot.last_unique = Some(now);
        }
    }

    /// Which relay yields its slot to one waiting, at `now`: of the relays
    /// whose trial period is over and that have not earned their slot
    /// (`dead` tells which the engine counts as dead), the one whose author
    /// or network holds the most slots, then the one granted first. `None`
    /// when every relay earned its slot or is still on trial: answering
    /// EOSE keeps no slot, delivering what no other relay did does.
    pub(crate) fn yielding(
        &self,
        now: Instant,
        rules: SlotRules,
        dead: impl Fn(&RelayUrl) -> bool,
    ) -> Option<&RelayUrl> {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.trial_over(now, rules.trial))
            .filter(|(relay, slot)| !slot.earned(now, rules, dead(relay)))
            // The first of equals wins: `max_by_key` keeps the last, so
            // compare on the reversed grant order.
            .enumerate()
            .max_by_key(|(order, (_, slot))| {
                let heaviest = self.held_by(&slot.author).max(self.held_on(&slot.network));
                (heaviest, std::cmp::Reverse(*order))
            })
            .map(|(_, (relay, _))| relay)
    }
}

/// One slot fewer held under `key`; the entry goes at zero.
fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(held) = counts.get_mut(key) {
        *held = held.saturating_sub(1);
        if *held == 0 {
            counts.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    const TRIAL: Duration = Duration::from_secs(600);
    const EARN: Duration = Duration::from_secs(3_600);

    fn rules() -> SlotRules {
        SlotRules {
            max_relays: 10,
            per_author: 3,
            per_network: 4,
            trial: TRIAL,
            earn_window: EARN,
        }
    }

    fn url(name: &str) -> RelayUrl {
        RelayUrl::parse(&format!("wss://{name}.example.com")).expect("url")
    }

    /// A relay on its own registrable domain.
    fn own_domain(name: &str) -> RelayUrl {
        RelayUrl::parse(&format!("wss://relay.{name}.example")).expect("url")
    }

    fn author() -> PublicKey {
        Keys::generate().public_key()
    }

    fn at(secs: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(secs)
    }

    fn alive(_: &RelayUrl) -> bool {
        false
    }

    #[test]
    fn a_relay_s_network_is_its_registrable_domain_or_address_block() {
        let network = |url: &str| network_of(&RelayUrl::parse(url).expect("url"));
        assert_eq!(network("wss://a.evil.example"), "evil.example");
        assert_eq!(network("wss://x.y.evil.example:4433/path"), "evil.example");
        assert_eq!(network("wss://relay.example.co.uk"), "example.co.uk");
        assert_eq!(network("ws://10.1.2.3:7000"), "10.1.2.0/24");
        assert_eq!(network("ws://10.1.2.200"), "10.1.2.0/24");
        assert_ne!(network("ws://10.1.3.3"), "10.1.2.0/24");
        assert_eq!(network("ws://[2001:db8:1:2::1]:80"), "2001:db8:1::/48");
        assert_eq!(network("ws://[2001:db8:1:ffff::9]"), "2001:db8:1::/48");
        assert_ne!(network("ws://[2001:db8:2::1]"), "2001:db8:1::/48");
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
        let (alice, bob, carol) = (author(), author(), author());
        let mut slots = RelaySlots::default();
        for n in 0..3 {
            slots.grant(url(&format!("a{n}")), alice, at(0));
        }
        let admission = |slots: &RelaySlots, relay: &RelayUrl, who: &PublicKey, tracked, now| {
            slots.admission(relay, who, tracked, rules(), now)
        };
        assert_eq!(
            admission(&slots, &url("b"), &bob, 3, at(0)),
            Admission::Granted
        );
        assert_eq!(
            admission(&slots, &url("a3"), &alice, 3, at(0)),
            Admission::AuthorFull
        );
        assert_eq!(
            admission(&slots, &own_domain("b"), &bob, 10, at(0)),
            Admission::TotalFull
        );
        // example.com holds 3 of its 4: one more, then its network is full
        // whoever lists the next, while another domain has room.
        slots.grant(url("b0"), bob, at(0));
        assert_eq!(
            admission(&slots, &url("c"), &carol, 4, at(0)),
            Admission::NetworkFull
        );
        assert_eq!(
            admission(&slots, &own_domain("c"), &carol, 4, at(0)),
            Admission::Granted
        );
        // A relay that yielded waits a trial period, then may come back.
        assert_eq!(slots.bench(&url("a0"), at(100)), Some(alice));
        assert_eq!(
            admission(&slots, &url("a0"), &bob, 2, at(100)),
            Admission::Benched
        );
        assert_eq!(
            admission(&slots, &url("a0"), &bob, 2, at(100 + 599)),
            Admission::Benched
        );
        assert_eq!(
            admission(&slots, &url("a0"), &bob, 2, at(100 + 600)),
            Admission::Granted
        );
        slots.forget_old_benches(rules(), at(100 + 600));
        assert!(slots.benched.is_empty());
        // Releasing frees the network's share too.
        assert_eq!(slots.held_on("example.com"), 3);
    }

    #[test]
    fn no_relay_yields_while_on_trial() {
        let mut slots = RelaySlots::default();
        slots.grant(url("a"), author(), at(0));
        assert_eq!(slots.yielding(at(599), rules(), alive), None);
        assert_eq!(slots.yielding(at(600), rules(), alive), Some(&url("a")));
    }

    #[test]
    fn a_relay_keeps_its_slot_for_an_earn_window_after_a_unique_delivery() {
        let alice = author();
        let mut slots = RelaySlots::default();
        slots.grant(url("earning"), alice, at(0));
        slots.note_unique_delivery(&url("earning"), at(100));
        assert_eq!(slots.yielding(at(100 + 3_599), rules(), alive), None);
        // Nothing new for an earn window: it earned nothing since.
        assert_eq!(
            slots.yielding(at(100 + 3_600), rules(), alive),
            Some(&url("earning"))
        );
        // Delivering once does not keep a slot for a relay dead since.
        slots.note_unique_delivery(&url("earning"), at(5_000));
        assert_eq!(
            slots.yielding(at(5_001), rules(), |_| true),
            Some(&url("earning"))
        );
    }

    #[test]
    fn the_heaviest_author_or_network_yields_first_then_the_oldest_slot() {
        let (flood, honest, spread) = (author(), author(), author());
        let mut slots = RelaySlots::default();
        slots.grant(own_domain("honest"), honest, at(0));
        slots.grant(own_domain("flood-0"), flood, at(10));
        slots.grant(own_domain("flood-1"), flood, at(20));
        assert_eq!(
            slots.yielding(at(1_000), rules(), alive),
            Some(&own_domain("flood-0")),
            "the flooding author yields first, its first slot first"
        );
        // Three keys with one relay each on one domain: the domain is the
        // heaviest.
        for n in 0..3 {
            let key = if n == 0 { spread } else { author() };
            slots.grant(url(&format!("spread-{n}")), key, at(30));
        }
        assert_eq!(
            slots.yielding(at(1_000), rules(), alive),
            Some(&url("spread-0"))
        );
        for relay in ["flood-0", "flood-1"] {
            slots.release(&own_domain(relay));
        }
        for n in 0..3 {
            slots.release(&url(&format!("spread-{n}")));
        }
        assert_eq!(
            slots.yielding(at(1_000), rules(), alive),
            Some(&own_domain("honest"))
        );
    }
}
