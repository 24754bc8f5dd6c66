//! The events purgatory holds, by identifier, and which of their objects are known to be
//! present locally.
//!
//! [`PurgatoryStore`] is plain data with no locking and no I/O; the service keeps it behind
//! a mutex. A repository state is addressable: a newer state of the same author and
//! identifier replaces the held one, an older one is ignored.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use grasp_sync_core::nip34::GitOid;
use nostr::prelude::{EventId, Timestamp};

use crate::held::{HeldEvent, HeldKind};

/// What [`PurgatoryStore::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The event is now held.
    New,
    /// The event was already held.
    Duplicate,
    /// The event replaced an older state of the same author and identifier, which was
    /// dropped from purgatory (it is superseded, not lost: the newer state wins anyway).
    Replaced {
        /// The id of the dropped older state.
        old: EventId,
    },
    /// A newer state of the same author and identifier is already held; this one is
    /// superseded and not held.
    Superseded,
}

/// Events waiting for git data, by identifier.
#[derive(Debug, Default)]
pub struct PurgatoryStore {
    by_identifier: BTreeMap<String, Vec<HeldEvent>>,
    ids: HashSet<EventId>,
    /// Events being handed to the sink: still held (and saved at shutdown) until the
    /// sink confirms, but not offered again meanwhile.
    releasing: HashSet<EventId>,
    /// Per identifier, objects known to exist in the target repository.
    present: BTreeMap<String, BTreeSet<GitOid>>,
}

impl PurgatoryStore {
    /// An empty purgatory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `held`, replacing an older state of the same author and identifier.
    pub fn insert(&mut self, held: HeldEvent) -> Inserted {
        if self.ids.contains(&held.event.id) {
            return Inserted::Duplicate;
        }
        let events = self
            .by_identifier
            .entry(held.identifier.clone())
            .or_default();
        let mut outcome = Inserted::New;
        if matches!(held.kind, HeldKind::State { .. }) {
            if let Some(index) = older_state_index(events, &held) {
                let old = events.remove(index).event.id;
                self.ids.remove(&old);
                outcome = Inserted::Replaced { old };
            } else if has_newer_state(events, &held) {
                return Inserted::Superseded;
            }
        }
        self.ids.insert(held.event.id);
        events.push(held);
        outcome
    }

    /// Whether the event with this id is held.
    pub fn contains(&self, id: &EventId) -> bool {
        self.ids.contains(id)
    }

    /// Whether any event of `identifier` is held.
    pub fn has_pending(&self, identifier: &str) -> bool {
        self.by_identifier
            .get(identifier)
            .is_some_and(|events| !events.is_empty())
    }

    /// The held events of `identifier`, in arrival order.
    pub fn events(&self, identifier: &str) -> &[HeldEvent] {
        self.by_identifier
            .get(identifier)
            .map_or(&[], Vec::as_slice)
    }

    /// Every held event, by identifier.
    pub fn iter(&self) -> impl Iterator<Item = &HeldEvent> {
        self.by_identifier.values().flatten()
    }

    /// The identifiers with held events.
    pub fn identifiers(&self) -> impl Iterator<Item = &str> {
        self.by_identifier.keys().map(String::as_str)
    }

    /// How many events are held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// How many held events are being handed to the sink (between
    /// [`PurgatoryStore::begin_release`] and its finish or abort).
    pub fn releasing(&self) -> usize {
        self.releasing.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every object the held events of `identifier` need.
    pub fn needed_oids(&self, identifier: &str) -> BTreeSet<GitOid> {
        self.events(identifier)
            .iter()
            .flat_map(HeldEvent::needed_oids)
            .collect()
    }

    /// The objects the held events of `identifier` need that are not known to be present.
    pub fn missing_oids(&self, identifier: &str) -> BTreeSet<GitOid> {
        let present = self.present.get(identifier);
        self.needed_oids(identifier)
            .into_iter()
            .filter(|oid| !present.is_some_and(|present| present.contains(oid)))
            .collect()
    }

    /// Records that these objects exist in the target repository of `identifier`.
    pub fn mark_present(&mut self, identifier: &str, oids: impl IntoIterator<Item = GitOid>) {
        if !self.has_pending(identifier) {
            return;
        }
        self.present
            .entry(identifier.to_owned())
            .or_default()
            .extend(oids);
    }

    /// Whether `oid` was seen present in any identifier's repository at the last check.
    pub fn is_known_present(&self, oid: &GitOid) -> bool {
        self.present.values().any(|present| present.contains(oid))
    }

    /// The held events of `identifier` whose objects are all present and that are not
    /// being released already, now marked as being released. They stay held until
    /// [`PurgatoryStore::finish_release`] (so a crash or shutdown in between loses
    /// nothing) or [`PurgatoryStore::abort_release`].
    pub fn begin_release(&mut self, identifier: &str) -> Vec<HeldEvent> {
        let present = self.present.get(identifier).cloned().unwrap_or_default();
        let satisfied: Vec<HeldEvent> = self
            .events(identifier)
            .iter()
            .filter(|held| !self.releasing.contains(&held.event.id))
            .filter(|held| held.needed_oids().is_subset(&present))
            .cloned()
            .collect();
        self.releasing
            .extend(satisfied.iter().map(|held| held.event.id));
        satisfied
    }

    /// The sink took these events: they leave purgatory.
    pub fn finish_release(&mut self, identifier: &str, released: &[EventId]) {
        for id in released {
            self.releasing.remove(id);
        }
        self.take_where(identifier, |held| released.contains(&held.event.id));
        self.forget_if_empty(identifier);
    }

    /// The sink refused these events: they stay held and will be offered again.
    pub fn abort_release(&mut self, ids: &[EventId]) {
        for id in ids {
            self.releasing.remove(id);
        }
    }

    /// Removes and returns every held event that entered purgatory at or before `cutoff`.
    pub fn take_expired(&mut self, cutoff: Timestamp) -> Vec<HeldEvent> {
        let identifiers: Vec<String> = self.by_identifier.keys().cloned().collect();
        let mut expired = Vec::new();
        for identifier in identifiers {
            let releasing = &self.releasing;
            let events = self
                .by_identifier
                .get(&identifier)
                .map_or(&[][..], Vec::as_slice);
            let due: Vec<EventId> = events
                .iter()
                .filter(|held| held.held_since <= cutoff && !releasing.contains(&held.event.id))
                .map(|held| held.event.id)
                .collect();
            expired.extend(self.take_where(&identifier, |held| due.contains(&held.event.id)));
            self.forget_if_empty(&identifier);
        }
        expired
    }

    fn take_where(
        &mut self,
        identifier: &str,
        mut take: impl FnMut(&HeldEvent) -> bool,
    ) -> Vec<HeldEvent> {
        let Some(events) = self.by_identifier.get_mut(identifier) else {
            return Vec::new();
        };
        let (taken, kept): (Vec<HeldEvent>, Vec<HeldEvent>) = std::mem::take(events)
            .into_iter()
            .partition(|held| take(held));
        *events = kept;
        for held in &taken {
            self.ids.remove(&held.event.id);
        }
        taken
    }

    fn forget_if_empty(&mut self, identifier: &str) {
        if !self.has_pending(identifier) {
            self.by_identifier.remove(identifier);
            self.present.remove(identifier);
        }
    }
}

fn same_address(a: &HeldEvent, b: &HeldEvent) -> bool {
    matches!(a.kind, HeldKind::State { .. })
        && a.event.pubkey == b.event.pubkey
        && a.identifier == b.identifier
}

/// Whether `a` is a newer version than `b` of one addressable event (ties broken by the
/// lower id, as NIP-01 asks).
fn is_newer(a: &HeldEvent, b: &HeldEvent) -> bool {
    (a.event.created_at, std::cmp::Reverse(a.event.id))
        > (b.event.created_at, std::cmp::Reverse(b.event.id))
}

fn older_state_index(events: &[HeldEvent], new: &HeldEvent) -> Option<usize> {
    events
        .iter()
        .position(|held| same_address(held, new) && is_newer(new, held))
}

fn has_newer_state(events: &[HeldEvent], new: &HeldEvent) -> bool {
    events
        .iter()
        .any(|held| same_address(held, new) && is_newer(held, new))
}

#[cfg(test)]
mod tests {
    use nostr::prelude::Keys;

    use super::*;
    use crate::held::{hold_event, Origin};
    use crate::test_events::{hex, pull_request, state};

    fn held(event: nostr::prelude::Event, since: u64) -> HeldEvent {
        hold_event(event, Origin::Synced, Timestamp::from_secs(since)).unwrap()
    }

    fn oid(n: u8) -> GitOid {
        GitOid::parse(&hex(n)).unwrap()
    }

    #[test]
    fn a_newer_state_replaces_the_older_and_an_older_one_is_ignored() {
        let keys = Keys::generate();
        let mut store = PurgatoryStore::new();
        let old = held(state(&keys, "r", &[&hex(1)], 10), 0);
        let new = held(state(&keys, "r", &[&hex(2)], 20), 0);
        let old_id = old.event.id;
        assert_eq!(store.insert(old.clone()), Inserted::New);
        assert_eq!(store.insert(old.clone()), Inserted::Duplicate);
        assert_eq!(store.insert(new), Inserted::Replaced { old: old_id });
        assert_eq!(store.insert(old), Inserted::Superseded);
        assert_eq!(store.len(), 1);
        assert_eq!(store.missing_oids("r"), BTreeSet::from([oid(2)]));
        // Another author's state of the same identifier is held beside it.
        let other = held(state(&Keys::generate(), "r", &[&hex(3)], 5), 0);
        assert_eq!(store.insert(other), Inserted::New);
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn events_are_released_once_all_their_objects_are_present() {
        let keys = Keys::generate();
        let mut store = PurgatoryStore::new();
        store.insert(held(state(&keys, "r", &[&hex(1), &hex(2)], 10), 0));
        store.insert(held(
            pull_request(&keys, &keys.public_key(), "r", &hex(2)),
            0,
        ));
        store.mark_present("r", [oid(2)]);
        assert_eq!(store.missing_oids("r"), BTreeSet::from([oid(1)]));
        let released = store.begin_release("r");
        assert_eq!(released.len(), 1);
        assert!(matches!(released[0].kind, HeldKind::PullRequest { .. }));
        store.finish_release("r", &[released[0].event.id]);
        assert!(store.has_pending("r"));
        store.mark_present("r", [oid(1)]);
        let released = store.begin_release("r");
        assert_eq!(released.len(), 1);
        store.finish_release("r", &[released[0].event.id]);
        assert!(!store.has_pending("r"));
        assert!(store.is_empty());
        // Presence is forgotten with the identifier.
        assert!(!store.is_known_present(&oid(1)));
    }

    #[test]
    fn events_being_released_stay_held_until_the_sink_confirms() {
        let keys = Keys::generate();
        let mut store = PurgatoryStore::new();
        let first = held(pull_request(&keys, &keys.public_key(), "r", &hex(1)), 0);
        let second = held(
            pull_request(&Keys::generate(), &keys.public_key(), "r", &hex(1)),
            0,
        );
        let (first_id, second_id) = (first.event.id, second.event.id);
        store.insert(first);
        store.insert(second);
        store.mark_present("r", [oid(1)]);
        let releasing = store.begin_release("r");
        assert_eq!(releasing.len(), 2);
        assert_eq!(store.releasing(), 2);
        assert!(store.begin_release("r").is_empty(), "not offered twice");
        assert_eq!(store.len(), 2, "still held while the sink works");
        assert!(store
            .take_expired(Timestamp::from_secs(u64::MAX))
            .is_empty());
        store.finish_release("r", &[first_id]);
        store.abort_release(&[second_id]);
        assert_eq!(store.releasing(), 0);
        assert!(!store.contains(&first_id));
        assert!(store.contains(&second_id));
        assert_eq!(
            store.begin_release("r").len(),
            1,
            "a refused event is offered again"
        );
    }

    #[test]
    fn expiry_takes_only_events_held_long_enough() {
        let keys = Keys::generate();
        let mut store = PurgatoryStore::new();
        store.insert(held(
            pull_request(&keys, &keys.public_key(), "a", &hex(1)),
            100,
        ));
        store.insert(held(
            pull_request(&keys, &keys.public_key(), "b", &hex(2)),
            200,
        ));
        let expired = store.take_expired(Timestamp::from_secs(150));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].identifier, "a");
        assert!(!store.has_pending("a"));
        assert!(store.has_pending("b"));
    }
}
