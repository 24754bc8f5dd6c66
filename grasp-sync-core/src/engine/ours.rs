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
//! (at most [`MAX_CANDIDATES`], oldest dropped first) and are stored when an
//! announcement of ours naming their author comes.

use std::collections::{HashMap, HashSet, VecDeque};

use nostr::prelude::{Event, PublicKey, RelayUrl};

use crate::nip34::parse_announcement;
use crate::verified::VerifiedEvent;

/// Layer 1 events held back until an announcement of ours names their
/// author (≈ 1 KB each: about 2 MB at most).
pub const MAX_CANDIDATES: usize = 2_000;

/// What is ours, and what waits to be.
#[derive(Debug, Default)]
pub(super) struct Ours {
    /// Per identifier of an announcement of ours: who may announce it and
    /// publish its state (each such announcement's author and the
    /// maintainers it lists).
    pub(super) authors: HashMap<String, HashSet<PublicKey>>,
    /// Events waiting for an announcement of ours naming their author,
    /// oldest first, with the relay that sent them.
    pub(super) candidates: VecDeque<(RelayUrl, VerifiedEvent)>,
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
