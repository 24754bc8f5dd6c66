//! What each author holds in purgatory, ordered so that the heaviest author is found at
//! once, with each author's held events oldest first: whom purgatory evicts when it is
//! full (see [`super::PurgatoryStore::insert`]).
//!
//! Every operation is logarithmic in the number of authors and events held, so a full
//! purgatory costs the same per event whatever strangers hold.

use std::collections::{BTreeSet, HashMap};

use nostr::prelude::{EventId, PublicKey};

use super::Usage;

/// Which amount of an author's share a cap weighs: events or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Weight {
    Events,
    Bytes,
}

impl Usage {
    /// How heavy this usage is by `weight`.
    pub(super) fn weighed(self, weight: Weight) -> usize {
        match weight {
            Weight::Events => self.events,
            Weight::Bytes => self.bytes,
        }
    }
}

/// Per author: the usage, the authors ordered by events and by bytes, and each author's
/// events in arrival order.
#[derive(Debug, Default)]
pub(super) struct Shares {
    usage: HashMap<PublicKey, Usage>,
    by_events: BTreeSet<(usize, PublicKey)>,
    by_bytes: BTreeSet<(usize, PublicKey)>,
    /// Each author's held events by arrival sequence, oldest first.
    arrivals: HashMap<PublicKey, BTreeSet<(u64, EventId)>>,
}

impl Shares {
    /// What `author` holds (nothing when absent).
    pub(super) fn usage(&self, author: &PublicKey) -> Usage {
        self.usage.get(author).copied().unwrap_or_default()
    }

    /// `author` holds one more event, `id` of `bytes`, that arrived `seq`-th.
    pub(super) fn add(&mut self, author: PublicKey, seq: u64, id: EventId, bytes: usize) {
        let mut usage = self.unindex(&author);
        usage.add(bytes);
        self.index(author, usage);
        self.arrivals.entry(author).or_default().insert((seq, id));
    }

    /// `author` no longer holds the event `id` of `bytes` that arrived `seq`-th.
    pub(super) fn remove(&mut self, author: PublicKey, seq: u64, id: EventId, bytes: usize) {
        let mut usage = self.unindex(&author);
        usage.remove(bytes);
        if let Some(arrivals) = self.arrivals.get_mut(&author) {
            arrivals.remove(&(seq, id));
            if arrivals.is_empty() {
                self.arrivals.remove(&author);
            }
        }
        if usage.events > 0 {
            self.index(author, usage);
        }
    }

    /// The authors from the heaviest by `weight` down, each with their weight.
    pub(super) fn heaviest(&self, weight: Weight) -> impl Iterator<Item = (PublicKey, usize)> + '_ {
        let order = match weight {
            Weight::Events => &self.by_events,
            Weight::Bytes => &self.by_bytes,
        };
        order
            .iter()
            .rev()
            .map(|(weight, author)| (*author, *weight))
    }

    /// The events `author` holds, oldest first.
    pub(super) fn oldest_of(&self, author: &PublicKey) -> impl Iterator<Item = EventId> + '_ {
        self.arrivals
            .get(author)
            .into_iter()
            .flatten()
            .map(|(_, id)| *id)
    }

    /// Takes `author` out of the orderings; returns what they held.
    fn unindex(&mut self, author: &PublicKey) -> Usage {
        let usage = self.usage.remove(author).unwrap_or_default();
        self.by_events.remove(&(usage.events, *author));
        self.by_bytes.remove(&(usage.bytes, *author));
        usage
    }

    /// Puts `author`, now holding `usage`, back into the orderings.
    fn index(&mut self, author: PublicKey, usage: Usage) {
        self.by_events.insert((usage.events, author));
        self.by_bytes.insert((usage.bytes, author));
        self.usage.insert(author, usage);
    }
}
