//! Which Layer 1 events from remote relays are ours to store. Layer 1 reads
//! every announcement (30617) and state (30618) to discover repositories;
//! GRASP-01 has a relay store an announcement only if it lists the service,
//! or if it is by a maintainer that an accepted announcement of the same
//! identifier lists, and a state only for such a repository. With
//! [`EngineConfig::service_relays`](super::EngineConfig::service_relays)
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

use nostr::prelude::{Event, Kind, PublicKey, RelayUrl};
use tracing::debug;

use super::SyncEngine;
use crate::clock::Now;
use crate::nip34::{parse_announcement, KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE};
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
    authors: HashMap<String, HashSet<PublicKey>>,
    /// Events waiting for an announcement of ours naming their author,
    /// oldest first, with the relay that sent them.
    candidates: VecDeque<(RelayUrl, VerifiedEvent)>,
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
fn identifier(event: &Event) -> Option<String> {
    event.tags.identifier().map(|id| id.to_string())
}

impl Ours {
    /// Records that an announcement of ours (`event`, listing our service)
    /// exists: its author and maintainers may announce its identifier and
    /// publish its state. Returns the identifier.
    fn accept(&mut self, event: &Event) -> Option<String> {
        let announcement = parse_announcement(event).ok()?;
        let id = identifier(event)?;
        let authors = self.authors.entry(id.clone()).or_default();
        authors.insert(event.pubkey);
        authors.extend(announcement.maintainers);
        Some(id)
    }
}

impl SyncEngine {
    /// Is this Layer 1 event from a remote relay ours to store? The one
    /// place the rule is decided (see the [module documentation](self)).
    pub(super) fn is_ours(&self, event: &Event) -> Layer1Verdict {
        let service = &self.config.service_relays;
        let layer1 = [KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE]
            .iter()
            .any(|kind| event.kind == Kind::Custom(*kind));
        if service.is_empty() || !layer1 {
            return Layer1Verdict::Store;
        }
        if event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
            let lists_us = parse_announcement(event)
                .is_ok_and(|announcement| announcement.relays.iter().any(|r| service.contains(r)));
            if lists_us {
                return Layer1Verdict::Store;
            }
        }
        let by_an_author = identifier(event)
            .and_then(|id| self.ours.authors.get(&id))
            .is_some_and(|authors| authors.contains(&event.pubkey));
        if by_an_author {
            Layer1Verdict::Store
        } else {
            Layer1Verdict::Hold
        }
    }

    /// A verified event from `relay` on its way to the store: `false` if it
    /// is a Layer 1 event that is not ours (held as a candidate, counted in
    /// [`EngineStats::not_ours`](super::EngineStats::not_ours)). An
    /// announcement of ours lets the candidates it names through.
    pub(super) fn admit_ours(&mut self, now: Now, relay: &RelayUrl, event: &VerifiedEvent) -> bool {
        match self.is_ours(event) {
            Layer1Verdict::Store => {
                if event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT)
                    && !self.config.service_relays.is_empty()
                {
                    self.accept_ours(now, event);
                }
                true
            }
            Layer1Verdict::Hold => {
                self.hold_candidate(relay, event);
                false
            }
        }
    }

    /// An announcement of ours (from a remote relay, or accepted by the own
    /// relay): its authors become ours, and their candidates are stored.
    pub(super) fn accept_ours(&mut self, now: Now, event: &Event) {
        let service = &self.config.service_relays;
        let lists_us = parse_announcement(event)
            .is_ok_and(|announcement| announcement.relays.iter().any(|r| service.contains(r)));
        let by_an_author = identifier(event)
            .and_then(|id| self.ours.authors.get(&id))
            .is_some_and(|authors| authors.contains(&event.pubkey));
        if !(lists_us || by_an_author) {
            return;
        }
        let Some(id) = self.ours.accept(event) else {
            return;
        };
        let Some(authors) = self.ours.authors.get(&id).cloned() else {
            return;
        };
        let (ready, waiting): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.ours.candidates)
                .into_iter()
                .partition(|(_, candidate)| {
                    identifier(candidate).as_deref() == Some(id.as_str())
                        && authors.contains(&candidate.pubkey)
                });
        self.ours.candidates = waiting;
        // Those no longer held: the next sync brings them.
        self.forget_refused(|refused| {
            identifier(refused).as_deref() == Some(id.as_str()) && authors.contains(&refused.pubkey)
        });
        for (relay, candidate) in ready {
            debug!(id = %candidate.id, "candidate is ours now: storing it");
            self.stats.candidates_stored += 1;
            if candidate.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
                // A maintainer's announcement lists maintainers too.
                self.accept_ours(now, &candidate);
            }
            self.store(now, &relay, candidate, None);
        }
    }

    /// Holds a Layer 1 event that is not ours (yet), the oldest candidate
    /// dropped past [`MAX_CANDIDATES`].
    fn hold_candidate(&mut self, relay: &RelayUrl, event: &VerifiedEvent) {
        if self
            .ours
            .candidates
            .iter()
            .any(|(_, held)| held.id == event.id)
        {
            return;
        }
        self.stats.not_ours += 1;
        debug!(id = %event.id, kind = %event.kind, "layer 1 event not ours: not stored");
        // Counted as held by reconciliation: not downloaded again at every
        // Layer 1 sync (forgotten if it becomes ours).
        self.remember_refused(event);
        self.ours
            .candidates
            .push_back((relay.clone(), event.clone()));
        while self.ours.candidates.len() > MAX_CANDIDATES {
            self.ours.candidates.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Instant;
    use crate::engine::{Command, EngineConfig};
    use crate::nip34::test_support::signed_event_by;
    use nostr::prelude::{Keys, Timestamp};

    fn own() -> RelayUrl {
        RelayUrl::parse("wss://own.example.com").expect("url")
    }

    fn remote() -> RelayUrl {
        RelayUrl::parse("wss://remote.example.com").expect("url")
    }

    fn now() -> Now {
        Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000))
    }

    fn engine(service: Vec<RelayUrl>) -> SyncEngine {
        let config = EngineConfig {
            service_relays: service,
            ..EngineConfig::default()
        };
        SyncEngine::new(config, now())
    }

    fn verified(event: Event) -> VerifiedEvent {
        VerifiedEvent::verify(event).expect("signed")
    }

    fn announcement(keys: &Keys, id: &str, relays: &[&RelayUrl], maintainers: &[&Keys]) -> Event {
        let relays: Vec<String> = relays.iter().map(|r| r.to_string()).collect();
        let maintainers: Vec<String> = maintainers
            .iter()
            .map(|k| k.public_key().to_hex())
            .collect();
        let mut relays_tag = vec!["relays"];
        relays_tag.extend(relays.iter().map(String::as_str));
        let mut maintainers_tag = vec!["maintainers"];
        maintainers_tag.extend(maintainers.iter().map(String::as_str));
        let d = ["d", id];
        let mut tags: Vec<&[&str]> = vec![&d, &relays_tag];
        if !maintainers.is_empty() {
            tags.push(&maintainers_tag);
        }
        signed_event_by(keys, KIND_REPO_ANNOUNCEMENT, &tags)
    }

    fn state(keys: &Keys, id: &str) -> Event {
        signed_event_by(keys, KIND_REPO_STATE, &[&["d", id]])
    }

    fn stored(engine: &mut SyncEngine) -> Vec<nostr::prelude::EventId> {
        std::iter::from_fn(|| engine.poll_command())
            .filter_map(|command| match command {
                Command::Store { event, .. } => Some(event.id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn without_service_relays_everything_is_ours() {
        let engine = engine(Vec::new());
        let keys = Keys::generate();
        let foreign = announcement(&keys, "x", &[&remote()], &[]);
        assert_eq!(engine.is_ours(&foreign), Layer1Verdict::Store);
        assert_eq!(engine.is_ours(&state(&keys, "x")), Layer1Verdict::Store);
    }

    #[test]
    fn an_announcement_is_ours_only_if_it_lists_our_service() {
        let mut engine = engine(vec![own()]);
        let keys = Keys::generate();
        let ours = announcement(&keys, "a", &[&own(), &remote()], &[]);
        let foreign = announcement(&keys, "b", &[&remote()], &[]);
        assert_eq!(engine.is_ours(&ours), Layer1Verdict::Store);
        assert_eq!(engine.is_ours(&foreign), Layer1Verdict::Hold);
        assert!(!engine.admit_ours(now(), &remote(), &verified(foreign)));
        assert_eq!(engine.stats().not_ours, 1);
        // Other kinds are not Layer 1's to judge.
        let issue = signed_event_by(&keys, 1621, &[&["a", "30617:x:y"]]);
        assert_eq!(engine.is_ours(&issue), Layer1Verdict::Store);
    }

    #[test]
    fn a_state_is_ours_only_for_a_repository_of_ours() {
        let mut engine = engine(vec![own()]);
        let (owner, stranger) = (Keys::generate(), Keys::generate());
        assert!(engine.admit_ours(
            now(),
            &remote(),
            &verified(announcement(&owner, "a", &[&own()], &[]))
        ));
        assert_eq!(engine.is_ours(&state(&owner, "a")), Layer1Verdict::Store);
        assert_eq!(engine.is_ours(&state(&stranger, "a")), Layer1Verdict::Hold);
        assert_eq!(engine.is_ours(&state(&owner, "other")), Layer1Verdict::Hold);
    }

    #[test]
    fn a_maintainers_announcement_and_state_before_the_owners_are_stored_with_it() {
        let mut engine = engine(vec![own()]);
        let (owner, maintainer) = (Keys::generate(), Keys::generate());
        // The maintainer's announcement does not list us; it came first.
        let theirs = announcement(&maintainer, "a", &[&remote()], &[]);
        let their_state = state(&maintainer, "a");
        assert!(!engine.admit_ours(now(), &remote(), &verified(theirs.clone())));
        assert!(!engine.admit_ours(now(), &remote(), &verified(their_state.clone())));
        assert!(stored(&mut engine).is_empty());
        // The owner's announcement, listing us and the maintainer.
        let owners = announcement(&owner, "a", &[&own()], &[&maintainer]);
        engine.accept_ours(now(), &owners);
        let stored = stored(&mut engine);
        assert!(
            stored.contains(&theirs.id) && stored.contains(&their_state.id),
            "{stored:?}"
        );
        assert_eq!(engine.stats().candidates_stored, 2);
        // A stranger's candidate stays held.
        let stranger = Keys::generate();
        assert!(!engine.admit_ours(now(), &remote(), &verified(state(&stranger, "a"))));
    }

    #[test]
    fn candidates_are_bounded() {
        let mut engine = engine(vec![own()]);
        let keys = Keys::generate();
        for n in 0..MAX_CANDIDATES + 10 {
            let event = announcement(&keys, &format!("r{n}"), &[&remote()], &[]);
            engine.admit_ours(now(), &remote(), &verified(event));
        }
        assert_eq!(engine.ours.candidates.len(), MAX_CANDIDATES);
    }
}
