//! The order events reach the store in. A store may check what an event
//! depends on: a GRASP host refuses a state, a pull request or an update
//! whose repository it has no announcement for, and a relay may refuse a
//! reply to an event it does not have. So a repository's announcement goes
//! to the store before its states, pull requests and their updates, and an
//! event before the replies to it, whenever both are in hand.
//!
//! Relays send newest first: a state often comes before its announcement,
//! even in one batch. An event waits (is *parked*) while something it needs
//! is on its way to the store (handed over, not answered yet), and, when it
//! needs an announcement or an event the engine does not know stored, while
//! the batch that brought it is still running (what it needs may come later
//! in that batch). When the batch's jobs end, or the store falls behind (the
//! parked count toward its backpressure, and the batch's next page waits
//! for them), the event goes to the store anyway: the store decides.
//!
//! The rules are pure functions ([`provides`], [`needs`]); [`StoreOrder`]
//! keeps what is on its way and what waits for it.

use std::collections::{HashMap, HashSet};

use indexmap::IndexSet;
use nostr::prelude::{Event, EventId, Kind, RelayUrl};

use crate::model::BatchId;
use crate::nip34::{KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE};

/// At most this many needs are read from one event: a stranger's event
/// with thousands of tags must not make each of its moves cost thousands.
pub(crate) const MAX_NEEDS: usize = 8;

/// At most this many announced identifiers are remembered (the oldest are
/// forgotten: an event needing one of them waits for its batch's end).
const MAX_ANNOUNCED: usize = 100_000;

/// Something an event needs stored before it, or provides once stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Need {
    /// An announcement (30617) of the repository identifier (any author:
    /// a maintainer's state needs its owner's announcement).
    Announcement(String),
    /// The event with this id (a root event, the event replied to).
    Event(EventId),
}

/// What `event` provides once stored: itself, and for an announcement its
/// repository identifier.
pub(crate) fn provides(event: &Event) -> impl Iterator<Item = Need> {
    let announcement = announced_identifier(event).map(Need::Announcement);
    std::iter::once(Need::Event(event.id)).chain(announcement)
}

/// What `event` needs stored before it: a state its repository's
/// announcement; any other event (an announcement needs nothing) the
/// announcements its `a` tags name and the events its `e`/`E` tags name.
/// At most [`MAX_NEEDS`], in the order of its tags. Read from the tags'
/// text only (no key is parsed): a need that names nothing real is never
/// on its way to the store, and waits at most for its batch.
pub(crate) fn needs(event: &Event) -> Vec<Need> {
    match event.kind.as_u16() {
        KIND_REPO_ANNOUNCEMENT => Vec::new(),
        KIND_REPO_STATE => event
            .tags
            .identifier()
            .map(|identifier| vec![Need::Announcement(identifier.to_owned())])
            .unwrap_or_default(),
        _ => {
            let mut needs: Vec<Need> = Vec::new();
            for tag in event.tags.iter() {
                if needs.len() == MAX_NEEDS {
                    break;
                }
                let need = match tag.as_slice() {
                    [name, value, ..] if name == "a" => announcement_named(value),
                    [name, value, ..] if name == "e" || name == "E" => EventId::from_hex(value)
                        .ok()
                        .filter(|id| *id != event.id)
                        .map(Need::Event),
                    _ => None,
                };
                if let Some(need) = need.filter(|need| !needs.contains(need)) {
                    needs.push(need);
                }
            }
            needs
        }
    }
}

/// The announcement an `a` tag's coordinate names (`30617:<pubkey>:<d>`).
fn announcement_named(coordinate: &str) -> Option<Need> {
    let (_pubkey, identifier) = coordinate.strip_prefix("30617:")?.split_once(':')?;
    Some(Need::Announcement(identifier.to_owned()))
}

/// A batch of a relay (the one that brought a parked event).
type BatchOf = (RelayUrl, BatchId);

/// A parked event: what it needs, and the batch that may still bring it.
#[derive(Debug)]
struct Parked {
    needs: Vec<Need>,
    /// `None` once the batch ended (or never had one).
    batch: Option<BatchOf>,
    /// Arrival order: released events go in the order they came.
    seq: u64,
}

/// What is on its way to the store and what waits for it.
#[derive(Debug, Default)]
pub(crate) struct StoreOrder {
    /// Events handed over (parked or sent) and not answered, counted by
    /// what they provide.
    providing: HashMap<Need, u32>,
    /// Identifiers whose announcement the store answered for or the own
    /// relay serves, oldest first.
    announced: IndexSet<String>,
    /// Parked events.
    parked: HashMap<EventId, Parked>,
    /// Parked events by the need that held them back when last looked at
    /// (an id may be stale: released since).
    by_need: HashMap<Need, Vec<EventId>>,
    /// Parked events by the batch that may still bring what they need.
    by_batch: HashMap<BatchOf, Vec<EventId>>,
    /// Parked events to look at again: what held them back changed.
    woken: Vec<EventId>,
    next_seq: u64,
}

impl StoreOrder {
    /// Events parked.
    pub(crate) fn parked(&self) -> usize {
        self.parked.len()
    }

    /// `event` is handed over, brought by `batch` (with whether its jobs
    /// still run): from now on it provides what it provides until
    /// [`StoreOrder::settled`]. `known` says whether an event is known to
    /// be in the store. Answers whether it must wait (it is then parked
    /// until [`StoreOrder::release`] lets it go).
    pub(crate) fn arrive(
        &mut self,
        event: &Event,
        batch: Option<(&RelayUrl, BatchId)>,
        batch_running: bool,
        known: impl Fn(&EventId) -> bool,
    ) -> bool {
        for need in provides(event) {
            *self.providing.entry(need).or_default() += 1;
        }
        let needs = needs(event);
        if needs.is_empty() {
            return false;
        }
        let batch = batch
            .filter(|_| batch_running)
            .map(|(relay, batch)| (relay.clone(), batch));
        let parked = Parked {
            needs,
            batch,
            seq: self.next_seq,
        };
        let Some(need) = self.held_back_by(&parked, &known) else {
            return false;
        };
        self.next_seq += 1;
        self.by_need.entry(need).or_default().push(event.id);
        if let Some(batch) = &parked.batch {
            self.by_batch
                .entry(batch.clone())
                .or_default()
                .push(event.id);
        }
        self.parked.insert(event.id, parked);
        true
    }

    /// The store answered for `event` for good (stored, held, a duplicate
    /// or refused): it no longer provides anything, and what waited for it
    /// is looked at again. Once an announcement is answered, whatever the
    /// answer, nothing waits for its identifier's batch: the store has
    /// decided on it, and decides on what needs it.
    pub(crate) fn settled(&mut self, event: &Event) {
        for need in provides(event) {
            let Some(count) = self.providing.get_mut(&need) else {
                continue;
            };
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.providing.remove(&need);
                self.wake(&need);
            }
        }
        if let Some(identifier) = announced_identifier(event) {
            self.note_announced(&identifier);
        }
    }

    /// `event` is in the store (served by the own relay, or held by the
    /// host): an announcement's identifier is known there.
    pub(crate) fn in_store(&mut self, event: &Event) {
        if let Some(identifier) = announced_identifier(event) {
            self.note_announced(&identifier);
        }
    }

    /// An announcement of `identifier` is in the store: what needs one no
    /// longer waits for its batch.
    fn note_announced(&mut self, identifier: &str) {
        if self.announced.contains(identifier) {
            return;
        }
        self.announced.insert(identifier.to_owned());
        if self.announced.len() > MAX_ANNOUNCED {
            self.announced.shift_remove_index(0);
        }
        self.wake(&Need::Announcement(identifier.to_owned()));
    }

    /// The parked events held back by `need` are looked at again.
    fn wake(&mut self, need: &Need) {
        if let Some(ids) = self.by_need.remove(need) {
            self.woken.extend(ids);
        }
    }

    /// The parked events free to go now, in the order they came: nothing
    /// they need is on its way, and what they need is known stored (`known`,
    /// for events) or their batch ended (`running` says whether a batch's
    /// jobs still run). When `store_behind` (the store does not keep up),
    /// no event waits for its batch any more: the batch's next page waits
    /// for the store.
    pub(crate) fn release(
        &mut self,
        running: impl Fn(&RelayUrl, BatchId) -> bool,
        store_behind: bool,
        known: impl Fn(&EventId) -> bool,
    ) -> Vec<EventId> {
        if self.parked.is_empty() {
            self.woken.clear();
            return Vec::new();
        }
        let ended: Vec<BatchOf> = self
            .by_batch
            .keys()
            .filter(|(relay, batch)| store_behind || !running(relay, *batch))
            .cloned()
            .collect();
        for batch in ended {
            let Some(ids) = self.by_batch.remove(&batch) else {
                continue;
            };
            for id in &ids {
                if let Some(parked) = self.parked.get_mut(id) {
                    parked.batch = None;
                }
            }
            self.woken.extend(ids);
        }
        let mut released: Vec<(u64, EventId)> = Vec::new();
        let mut seen = HashSet::new();
        for id in std::mem::take(&mut self.woken) {
            if !seen.insert(id) {
                continue;
            }
            let Some(parked) = self.parked.get(&id) else {
                continue;
            };
            match self.held_back_by(parked, &known) {
                Some(need) => self.by_need.entry(need).or_default().push(id),
                None => {
                    if let Some(parked) = self.parked.remove(&id) {
                        released.push((parked.seq, id));
                    }
                }
            }
        }
        released.sort_unstable();
        released.into_iter().map(|(_, id)| id).collect()
    }

    /// What holds `parked` back: a need on its way to the store, or, while
    /// its batch runs, a need not known stored (an event: by `known`).
    fn held_back_by(&self, parked: &Parked, known: impl Fn(&EventId) -> bool) -> Option<Need> {
        let on_its_way = parked
            .needs
            .iter()
            .find(|need| self.providing.contains_key(need));
        if let Some(need) = on_its_way {
            return Some(need.clone());
        }
        parked.batch.as_ref()?;
        parked
            .needs
            .iter()
            .find(|need| match need {
                Need::Announcement(identifier) => !self.announced.contains(identifier.as_str()),
                Need::Event(id) => !known(id),
            })
            .cloned()
    }
}

/// The identifier of `event` if it is an announcement.
fn announced_identifier(event: &Event) -> Option<String> {
    (event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT))
        .then(|| event.tags.identifier())
        .flatten()
        .map(|identifier| identifier.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nip34::test_support::signed_event_by;
    use nostr::prelude::Keys;

    fn relay() -> RelayUrl {
        RelayUrl::parse("wss://relay.example.com").expect("url")
    }

    fn announcement(keys: &Keys, d: &str) -> Event {
        signed_event_by(keys, KIND_REPO_ANNOUNCEMENT, &[&["d", d]])
    }

    fn state(keys: &Keys, d: &str) -> Event {
        signed_event_by(
            keys,
            KIND_REPO_STATE,
            &[&["d", d], &["HEAD", "ref: refs/heads/main"]],
        )
    }

    fn coordinate(keys: &Keys, d: &str) -> String {
        format!("30617:{}:{d}", keys.public_key().to_hex())
    }

    #[test]
    fn a_state_waits_for_its_announcement_on_its_way_and_goes_once_it_is_answered() {
        let owner = Keys::generate();
        let maintainer = Keys::generate();
        let announcement = announcement(&owner, "alpha");
        // A maintainer with no announcement of their own needs the owner's.
        let state = state(&maintainer, "alpha");
        let mut order = StoreOrder::default();
        assert!(!order.arrive(&announcement, None, false, |_| false));
        assert!(
            order.arrive(&state, None, false, |_| false),
            "its announcement is on its way"
        );
        assert!(order.release(|_, _| false, false, |_| false).is_empty());
        order.settled(&announcement);
        assert_eq!(
            order.release(|_, _| false, false, |_| false),
            vec![state.id]
        );
        assert_eq!(order.parked(), 0);
    }

    #[test]
    fn a_state_before_its_announcement_in_a_running_batch_waits_for_the_batch() {
        let owner = Keys::generate();
        let state = state(&owner, "alpha");
        let announcement = announcement(&owner, "alpha");
        let relay = relay();
        let batch = BatchId(7);
        let mut order = StoreOrder::default();
        assert!(order.arrive(&state, Some((&relay, batch)), true, |_| false));
        assert!(
            order.release(|_, _| true, false, |_| false).is_empty(),
            "the batch runs"
        );
        // The announcement comes later in the batch: the state now waits
        // for its answer, not for the batch.
        assert!(!order.arrive(&announcement, Some((&relay, batch)), true, |_| false));
        assert!(
            order.release(|_, _| false, false, |_| false).is_empty(),
            "on its way"
        );
        order.settled(&announcement);
        assert_eq!(order.release(|_, _| true, false, |_| false), vec![state.id]);
    }

    #[test]
    fn a_state_whose_announcement_never_comes_goes_when_its_batch_ends_or_the_store_falls_behind() {
        let owner = Keys::generate();
        let relay = relay();
        let mut order = StoreOrder::default();
        let first = state(&owner, "alpha");
        let second = state(&owner, "beta");
        assert!(order.arrive(&first, Some((&relay, BatchId(1))), true, |_| false));
        assert!(order.arrive(&second, Some((&relay, BatchId(2))), true, |_| false));
        let ended = order.release(|_, batch| batch != BatchId(1), false, |_| false);
        assert_eq!(ended, vec![first.id]);
        assert_eq!(order.release(|_, _| true, true, |_| false), vec![second.id]);
        // A batch already over does not hold anything back.
        let third = state(&owner, "gamma");
        assert!(!order.arrive(&third, Some((&relay, BatchId(3))), false, |_| false));
    }

    #[test]
    fn a_state_of_an_announcement_served_or_answered_before_goes_at_once() {
        let owner = Keys::generate();
        let relay = relay();
        let mut order = StoreOrder::default();
        order.in_store(&announcement(&owner, "alpha"));
        assert!(!order.arrive(
            &state(&owner, "alpha"),
            Some((&relay, BatchId(1))),
            true,
            |_| false
        ));
        let beta = announcement(&owner, "beta");
        assert!(!order.arrive(&beta, None, false, |_| false));
        order.settled(&beta);
        assert!(!order.arrive(
            &state(&owner, "beta"),
            Some((&relay, BatchId(1))),
            true,
            |_| false
        ));
    }

    #[test]
    fn a_reply_waits_for_the_event_it_replies_to_and_a_pull_request_for_its_announcement() {
        let owner = Keys::generate();
        let user = Keys::generate();
        let announcement = announcement(&owner, "alpha");
        let a = coordinate(&owner, "alpha");
        let pr = signed_event_by(&user, 1618, &[&["a", &a], &["c", &"a".repeat(40)]]);
        let pr_id = pr.id.to_hex();
        let update = signed_event_by(&user, 1619, &[&["a", &a], &["E", &pr_id]]);
        let reply = signed_event_by(&user, 1111, &[&["E", &pr_id], &["e", &pr_id]]);
        let mut order = StoreOrder::default();
        assert!(!order.arrive(&announcement, None, false, |_| false));
        assert!(order.arrive(&pr, None, false, |_| false));
        assert!(order.arrive(&update, None, false, |_| false));
        assert!(order.arrive(&reply, None, false, |_| false));
        order.settled(&announcement);
        assert_eq!(order.release(|_, _| false, false, |_| false), vec![pr.id]);
        order.settled(&pr);
        assert_eq!(
            order.release(|_, _| false, false, |_| false),
            vec![update.id, reply.id]
        );
    }

    #[test]
    fn needs_are_read_from_at_most_a_bounded_number_of_tags() {
        let user = Keys::generate();
        let ids: Vec<String> = (0..50u8).map(|n| format!("{n:064x}")).collect();
        let tags: Vec<[&str; 2]> = ids.iter().map(|id| ["e", id.as_str()]).collect();
        let tags: Vec<&[&str]> = tags.iter().map(|tag| tag.as_slice()).collect();
        let reply = signed_event_by(&user, 1111, &tags);
        assert_eq!(needs(&reply).len(), MAX_NEEDS);
        assert!(needs(&announcement(&user, "alpha")).is_empty());
    }
}
