//! Which Layer 1 events from remote relays are ours to store. Layer 1 reads
//! every announcement (30617) and state (30618) to discover repositories;
//! GRASP-01 has a relay store an announcement only if it lists the service,
//! or if it is by a maintainer that an accepted announcement of the same
//! identifier lists, and a state only for such a repository. With
//! [`Identity::service_relays`](super::Identity::service_relays)
//! set (a sidecar next to a relay that accepts everything) the engine
//! applies that rule itself; without it the own relay's policy decides and
//! everything is handed on.
//!
//! An event by a maintainer (an announcement, a state) can arrive before the
//! owner's announcement that lists them — a relay sends newest first, the
//! owner's announcement is often older. Such events wait as candidates
//! (at most [`MAX_CANDIDATES`] and [`MAX_CANDIDATE_BYTES`], oldest dropped
//! first: [`Candidates`]) and are stored when an announcement of ours naming
//! their author comes.

use std::collections::{HashMap, HashSet, VecDeque};

use nostr::prelude::{Event, PublicKey, RelayUrl};

use crate::nip34::parse_announcement;
use crate::verified::VerifiedEvent;

/// Layer 1 events held back until an announcement of ours names their
/// author (≈ 1 KB each as announcements are written; bounded in bytes by
/// [`MAX_CANDIDATE_BYTES`] whatever their size).
pub const MAX_CANDIDATES: usize = 2_000;

/// Bytes of the Layer 1 events held back (their size as JSON,
/// [`crate::screen::event_size`]), at most: 8 MiB, room for 2 000 events
/// of 4 KiB, or 128 at the largest event size.
pub const MAX_CANDIDATE_BYTES: usize = 8 * 1024 * 1024;

/// Layer 1 events waiting for an announcement of ours naming their author,
/// oldest first, with the relay that sent them: at most [`MAX_CANDIDATES`]
/// of them and [`MAX_CANDIDATE_BYTES`] in all, the oldest dropped first.
#[derive(Debug, Default)]
pub(super) struct Candidates {
    held: VecDeque<(RelayUrl, VerifiedEvent)>,
    bytes: usize,
}

/// Must the oldest candidate go, with `count` candidates of `bytes` held?
pub(super) fn candidates_over_budget(count: usize, bytes: usize) -> bool {
    count > MAX_CANDIDATES || bytes > MAX_CANDIDATE_BYTES
}

impl Candidates {
    /// Whether the event `id` is held.
    pub(super) fn holds(&self, id: &nostr::prelude::EventId) -> bool {
        self.held.iter().any(|(_, held)| held.id == *id)
    }

    /// Holds `event` from `relay`; returns how many of the oldest were
    /// dropped to stay within the budget ([`candidates_over_budget`]).
    pub(super) fn hold(&mut self, relay: &RelayUrl, event: &VerifiedEvent) -> usize {
        self.bytes += crate::screen::event_size(event);
        self.held.push_back((relay.clone(), event.clone()));
        let mut dropped = 0;
        while candidates_over_budget(self.held.len(), self.bytes) {
            let Some((_, oldest)) = self.held.pop_front() else {
                break;
            };
            self.bytes -= crate::screen::event_size(&oldest);
            dropped += 1;
        }
        dropped
    }

    /// Takes the candidates `ready` picks, in the order held.
    pub(super) fn take(
        &mut self,
        ready: impl Fn(&VerifiedEvent) -> bool,
    ) -> Vec<(RelayUrl, VerifiedEvent)> {
        let (taken, waiting): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(_, candidate)| ready(candidate));
        self.held = waiting;
        self.bytes = self
            .held
            .iter()
            .map(|(_, held)| crate::screen::event_size(held))
            .sum();
        taken.into()
    }

    /// Candidates held.
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    /// Bytes held ([`crate::screen::event_size`] of each).
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What is ours, and what waits to be.
#[derive(Debug, Default)]
pub(super) struct Ours {
    /// Per identifier of an announcement of ours: who may announce it and
    /// publish its state (each such announcement's author and the
    /// maintainers it lists).
    authors: HashMap<String, HashSet<PublicKey>>,
    /// Events waiting for an announcement of ours naming their author.
    candidates: Candidates,
}

/// What to do with a Layer 1 event from a remote relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layer1Verdict {
    /// Store it (an announcement listing our service, or an event by an
    /// author of one of our repositories; anything when no service relays
    /// are configured, and every event that is not an announcement or state).
    Store,
    /// Not ours (yet): held as a candidate.
    Hold,
}

/// The identifier (`d` tag) of an announcement or state.
pub(super) fn identifier(event: &Event) -> Option<String> {
    event.tags.identifier().map(|id| id.to_string())
}

impl Ours {
    /// Who may announce the identifier `id` and publish its state, if an
    /// announcement of ours names it.
    pub(super) fn authors(&self, id: &str) -> Option<&HashSet<PublicKey>> {
        self.authors.get(id)
    }

    /// The events waiting for an announcement of ours naming their author.
    pub(super) fn candidates(&self) -> &Candidates {
        &self.candidates
    }

    /// [`Ours::candidates`], to hold or take some.
    pub(super) fn candidates_mut(&mut self) -> &mut Candidates {
        &mut self.candidates
    }

    /// Records that an announcement of ours (`event`, listing our service)
    /// exists: its author and maintainers may announce its identifier and
    /// publish its state. Returns the identifier.
    pub(super) fn accept(&mut self, event: &Event) -> Option<String> {
        let announcement = parse_announcement(event).ok()?;
        let id = identifier(event)?;
        let authors = self.authors.entry(id.clone()).or_default();
        authors.insert(event.pubkey);
        authors.extend(announcement.maintainers);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind};

    fn candidate(content_bytes: usize) -> VerifiedEvent {
        let event = EventBuilder::new(Kind::Custom(30617), "x".repeat(content_bytes))
            .finalize(&Keys::generate())
            .expect("signs");
        VerifiedEvent::verify(event).expect("verifies")
    }

    #[test]
    fn the_oldest_candidate_goes_past_the_count_or_the_bytes() {
        assert!(!candidates_over_budget(MAX_CANDIDATES, MAX_CANDIDATE_BYTES));
        assert!(candidates_over_budget(MAX_CANDIDATES + 1, 0));
        assert!(candidates_over_budget(1, MAX_CANDIDATE_BYTES + 1));
    }

    #[test]
    fn large_candidates_are_held_within_the_byte_budget_oldest_dropped() {
        let relay = RelayUrl::parse("wss://relay.example").expect("url");
        let mut candidates = Candidates::default();
        let big = MAX_CANDIDATE_BYTES / 4;
        let first = candidate(big);
        assert_eq!(candidates.hold(&relay, &first), 0);
        let mut dropped = 0;
        for _ in 0..4 {
            dropped += candidates.hold(&relay, &candidate(big));
        }
        assert_eq!(dropped, 2, "the two oldest went");
        assert!(!candidates.holds(&first.id));
        assert!(candidates.bytes() <= MAX_CANDIDATE_BYTES);
        assert_eq!(candidates.len(), 3);
        let taken = candidates.take(|_| true);
        assert_eq!(
            (taken.len(), candidates.len(), candidates.bytes()),
            (3, 0, 0)
        );
    }
}
