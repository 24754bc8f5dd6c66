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
//! in that batch). When the batch's jobs end, when another relay's batch
//! waits for the same event, when the store falls behind (the parked count
//! toward its backpressure, and the batch's next page waits for them), or
//! at the latest after the wait limit (the store timeout: a need the store
//! keeps refusing for now, a relay that keeps its batch open), the event
//! goes to the store anyway: the store decides.
//!
//! The rules are pure functions ([`provides`], [`needs`]); [`StoreOrder`]
//! keeps what is on its way and what waits for it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use nostr::prelude::{Event, EventId, Kind, RelayUrl};

use crate::clock::Instant;
use crate::model::BatchId;
use crate::nip34::{KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE, MAX_IDENTIFIER_LEN};

/// At most this many needs are read from one event: a stranger's event
/// with thousands of tags must not make each of its moves cost thousands.
pub(crate) const MAX_NEEDS: usize = 8;

/// At most this many answered needs are remembered (the oldest are
/// forgotten: an event needing one of them waits for its batch's end).
const MAX_ANSWERED: usize = 100_000;

/// At most this many bytes of answered needs are remembered (an
/// identifier may be up to [`MAX_IDENTIFIER_LEN`] bytes: strangers'
/// announcements must not make the count cost 100 MB).
const MAX_ANSWERED_BYTES: usize = 8 * 1024 * 1024;

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
/// At most [`MAX_NEEDS`], in the order of its tags; an identifier longer
/// than [`MAX_IDENTIFIER_LEN`] names no repository. Read from the tags'
/// text only (no key is parsed): a need that names nothing real is never
/// on its way to the store, and waits at most for its batch.
pub(crate) fn needs(event: &Event) -> Vec<Need> {
    match event.kind.as_u16() {
        KIND_REPO_ANNOUNCEMENT => Vec::new(),
        KIND_REPO_STATE => event
            .tags
            .identifier()
            .and_then(|identifier| repository_identifier(AsRef::<str>::as_ref(&identifier)))
            .map(|identifier| vec![Need::Announcement(identifier)])
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
    repository_identifier(identifier).map(Need::Announcement)
}

/// `identifier` as a repository's, if it is not too long to be one.
fn repository_identifier(identifier: &str) -> Option<String> {
    (identifier.len() <= MAX_IDENTIFIER_LEN).then(|| identifier.to_owned())
}

/// The identifier of `event` if it is an announcement.
fn announced_identifier(event: &Event) -> Option<String> {
    (event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT))
        .then(|| event.tags.identifier())
        .flatten()
        .and_then(|identifier| repository_identifier(AsRef::<str>::as_ref(&identifier)))
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

/// Needs the store answered lately (or the own relay serves), the oldest
/// forgotten past [`MAX_ANSWERED`] or [`MAX_ANSWERED_BYTES`].
#[derive(Debug, Default)]
struct Answered {
    needs: HashSet<Need>,
    order: VecDeque<Need>,
    /// The size of `needs` ([`Need::size`]).
    bytes: usize,
}

impl Need {
    /// What remembering the need costs, in bytes (its text and the id).
    fn size(&self) -> usize {
        std::mem::size_of::<Need>()
            + match self {
                Need::Announcement(identifier) => identifier.len(),
                Need::Event(_) => 0,
            }
    }
}

impl Answered {
    fn contains(&self, need: &Need) -> bool {
        self.needs.contains(need)
    }

    /// Remembers `need`; `true` if it is new.
    fn insert(&mut self, need: Need) -> bool {
        if !self.needs.insert(need.clone()) {
            return false;
        }
        self.bytes += need.size();
        self.order.push_back(need);
        while self.order.len() > MAX_ANSWERED || self.bytes > MAX_ANSWERED_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(oldest.size());
            self.needs.remove(&oldest);
        }
        true
    }
}

/// What is on its way to the store and what waits for it.
#[derive(Debug, Default)]
pub(crate) struct StoreOrder {
    /// Events handed over (parked or sent) and not answered, counted by
    /// what they provide.
    providing: HashMap<Need, u32>,
    /// Needs answered lately: nothing waits for their batch any more.
    answered: Answered,
    /// Parked events.
    parked: HashMap<EventId, Parked>,
    /// Parked events by the need that held them back when last looked at
    /// (an id may be stale: released since; compacted when stale ones
    /// outnumber the parked).
    by_need: HashMap<Need, Vec<EventId>>,
    /// Entries in `by_need`, stale ones included.
    filed: usize,
    /// Parked events by the batch that may still bring what they need.
    by_batch: HashMap<BatchOf, Vec<EventId>>,
    /// Parked events in the order they came, with when (stale entries of
    /// released ones are skipped): the wait limit's clock.
    arrivals: VecDeque<(Instant, EventId)>,
    /// Parked events to look at again: what held them back changed.
    woken: Vec<EventId>,
    next_seq: u64,
}

impl StoreOrder {
    /// Events parked.
    pub(crate) fn parked(&self) -> usize {
        self.parked.len()
    }

    /// When the longest-parked event reaches the wait limit `max_wait`.
    pub(crate) fn next_deadline(&self, max_wait: Duration) -> Option<Instant> {
        let (since, _) = self
            .arrivals
            .iter()
            .find(|(_, id)| self.parked.contains_key(id))?;
        Some(*since + max_wait)
    }

    /// `event` is handed over at `now`, brought by `batch` (with whether its
    /// jobs still run): from now on it provides what it provides until
    /// [`StoreOrder::settled`]. `known` says whether an event is known to
    /// be in the store. Answers whether it must wait (it is then parked
    /// until [`StoreOrder::release`] lets it go).
    pub(crate) fn arrive(
        &mut self,
        now: Instant,
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
        self.file(need, event.id);
        if let Some(batch) = &parked.batch {
            self.by_batch
                .entry(batch.clone())
                .or_default()
                .push(event.id);
        }
        self.arrivals.push_back((now, event.id));
        self.parked.insert(event.id, parked);
        true
    }

    /// Another relay's batch waits for the parked event `id` too (it
    /// delivered or is owed it): `id` no longer waits for the batch that
    /// brought it, so that batch cannot hold the other relay's back.
    pub(crate) fn awaited_elsewhere(&mut self, id: &EventId) {
        if let Some(parked) = self.parked.get_mut(id) {
            if parked.batch.take().is_some() {
                self.woken.push(*id);
            }
        }
    }

    /// The store answered for `event` for good (stored, held, a duplicate
    /// or refused): it no longer provides anything, and what waited for it
    /// is looked at again. Whatever the answer, nothing waits for its batch
    /// because of it any more: the store has decided on it, and decides on
    /// what needs it.
    pub(crate) fn settled(&mut self, event: &Event) {
        for need in provides(event) {
            if let Some(count) = self.providing.get_mut(&need) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.providing.remove(&need);
                }
            }
            self.answered.insert(need.clone());
            self.wake(&need);
        }
    }

    /// `event` is in the store (served by the own relay, or held by the
    /// host): what needs it no longer waits for its batch.
    pub(crate) fn in_store(&mut self, event: &Event) {
        for need in provides(event) {
            if self.answered.insert(need.clone()) {
                self.wake(&need);
            }
        }
    }

    /// The parked events held back by `need` are looked at again.
    fn wake(&mut self, need: &Need) {
        if let Some(ids) = self.by_need.remove(need) {
            self.filed = self.filed.saturating_sub(ids.len());
            self.woken.extend(ids);
        }
    }

    /// Files the parked `id` under the `need` that holds it back.
    fn file(&mut self, need: Need, id: EventId) {
        self.by_need.entry(need).or_default().push(id);
        self.filed += 1;
    }

    /// The parked events free to go at `now`, in the order they came:
    /// nothing they need is on its way, and what they need is known stored
    /// (`known`, for events) or their batch ended (`running` says whether a
    /// batch's jobs still run); or they waited `max_wait` already. When
    /// `store_behind` (the store does not keep up), no event waits for its
    /// batch any more: the batch's next page waits for the store.
    pub(crate) fn release(
        &mut self,
        now: Instant,
        max_wait: Duration,
        running: impl Fn(&RelayUrl, BatchId) -> bool,
        store_behind: bool,
        known: impl Fn(&EventId) -> bool,
    ) -> Vec<EventId> {
        if self.parked.is_empty() {
            self.woken.clear();
            self.by_need.clear();
            self.filed = 0;
            self.arrivals.clear();
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
        let mut released: Vec<(u64, EventId)> = self.waited_too_long(now, max_wait);
        let mut seen = HashSet::new();
        for id in std::mem::take(&mut self.woken) {
            if !seen.insert(id) {
                continue;
            }
            let Some(parked) = self.parked.get(&id) else {
                continue;
            };
            match self.held_back_by(parked, &known) {
                Some(need) => self.file(need, id),
                None => {
                    if let Some(parked) = self.parked.remove(&id) {
                        released.push((parked.seq, id));
                    }
                }
            }
        }
        self.compact();
        released.sort_unstable();
        released.into_iter().map(|(_, id)| id).collect()
    }

    /// Takes the parked events that waited `max_wait` by `now`.
    fn waited_too_long(&mut self, now: Instant, max_wait: Duration) -> Vec<(u64, EventId)> {
        let mut released = Vec::new();
        while let Some((since, id)) = self.arrivals.front().copied() {
            if !self.parked.contains_key(&id) {
                self.arrivals.pop_front();
                continue;
            }
            if since + max_wait > now {
                break;
            }
            self.arrivals.pop_front();
            if let Some(parked) = self.parked.remove(&id) {
                tracing::debug!(%id, "waited the limit for what it needs; to the store anyway");
                released.push((parked.seq, id));
            }
        }
        released
    }

    /// Drops the stale entries of `by_need` and `arrivals` once they
    /// outnumber the parked: released events leave no trace for long.
    fn compact(&mut self) {
        let parked = &self.parked;
        if self.filed > 2 * parked.len() + 1_024 {
            self.by_need.retain(|_, ids| {
                ids.retain(|id| parked.contains_key(id));
                !ids.is_empty()
            });
            self.filed = self.by_need.values().map(Vec::len).sum();
        }
        if self.arrivals.len() > 2 * parked.len() + 1_024 {
            self.arrivals.retain(|(_, id)| parked.contains_key(id));
        }
    }

    /// What holds `parked` back: a need on its way to the store, or, while
    /// its batch runs, a need not known stored (answered lately, or, an
    /// event, by `known`).
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
            .find(|need| {
                !self.answered.contains(need)
                    && match need {
                        Need::Announcement(_) => true,
                        Need::Event(id) => !known(id),
                    }
            })
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nip34::test_support::signed_event_by;
    use nostr::prelude::Keys;

    const T0: Instant = Instant::ZERO;
    const WAIT: Duration = Duration::from_secs(60);

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
        assert!(!order.arrive(T0, &announcement, None, false, |_| false));
        assert!(
            order.arrive(T0, &state, None, false, |_| false),
            "its announcement is on its way"
        );
        assert!(order
            .release(T0, WAIT, |_, _| false, false, |_| false)
            .is_empty());
        order.settled(&announcement);
        assert_eq!(
            order.release(T0, WAIT, |_, _| false, false, |_| false),
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
        assert!(order.arrive(T0, &state, Some((&relay, batch)), true, |_| false));
        assert!(
            order
                .release(T0, WAIT, |_, _| true, false, |_| false)
                .is_empty(),
            "the batch runs"
        );
        // The announcement comes later in the batch: the state now waits
        // for its answer, not for the batch.
        assert!(!order.arrive(T0, &announcement, Some((&relay, batch)), true, |_| false));
        assert!(
            order
                .release(T0, WAIT, |_, _| false, false, |_| false)
                .is_empty(),
            "on its way"
        );
        order.settled(&announcement);
        assert_eq!(
            order.release(T0, WAIT, |_, _| true, false, |_| false),
            vec![state.id]
        );
    }

    #[test]
    fn a_state_whose_announcement_never_comes_goes_when_its_batch_ends_or_the_store_falls_behind() {
        let owner = Keys::generate();
        let relay = relay();
        let mut order = StoreOrder::default();
        let first = state(&owner, "alpha");
        let second = state(&owner, "beta");
        assert!(order.arrive(T0, &first, Some((&relay, BatchId(1))), true, |_| false));
        assert!(order.arrive(T0, &second, Some((&relay, BatchId(2))), true, |_| false));
        let ended = order.release(T0, WAIT, |_, batch| batch != BatchId(1), false, |_| false);
        assert_eq!(ended, vec![first.id]);
        assert_eq!(
            order.release(T0, WAIT, |_, _| true, true, |_| false),
            vec![second.id]
        );
        // A batch already over does not hold anything back.
        let third = state(&owner, "gamma");
        assert!(!order.arrive(T0, &third, Some((&relay, BatchId(3))), false, |_| false));
    }

    #[test]
    fn a_state_of_an_announcement_served_or_answered_before_goes_at_once() {
        let owner = Keys::generate();
        let relay = relay();
        let mut order = StoreOrder::default();
        order.in_store(&announcement(&owner, "alpha"));
        assert!(!order.arrive(
            T0,
            &state(&owner, "alpha"),
            Some((&relay, BatchId(1))),
            true,
            |_| false
        ));
        let beta = announcement(&owner, "beta");
        assert!(!order.arrive(T0, &beta, None, false, |_| false));
        order.settled(&beta);
        assert!(!order.arrive(
            T0,
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
        assert!(!order.arrive(T0, &announcement, None, false, |_| false));
        assert!(order.arrive(T0, &pr, None, false, |_| false));
        assert!(order.arrive(T0, &update, None, false, |_| false));
        assert!(order.arrive(T0, &reply, None, false, |_| false));
        order.settled(&announcement);
        assert_eq!(
            order.release(T0, WAIT, |_, _| false, false, |_| false),
            vec![pr.id]
        );
        order.settled(&pr);
        assert_eq!(
            order.release(T0, WAIT, |_, _| false, false, |_| false),
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

    #[test]
    fn an_event_waits_at_most_the_limit_for_a_need_the_store_keeps_refusing_for_now() {
        let owner = Keys::generate();
        let announcement = announcement(&owner, "alpha");
        let state = state(&owner, "alpha");
        let mut order = StoreOrder::default();
        assert!(!order.arrive(T0, &announcement, None, false, |_| false));
        // The announcement is retried for now, again and again: never settled.
        assert!(order.arrive(T0, &state, None, false, |_| false));
        assert_eq!(order.next_deadline(WAIT), Some(T0 + WAIT));
        let almost = T0 + (WAIT - Duration::from_millis(1));
        assert!(order
            .release(almost, WAIT, |_, _| false, false, |_| false)
            .is_empty());
        assert_eq!(
            order.release(T0 + WAIT, WAIT, |_, _| false, false, |_| false),
            vec![state.id]
        );
        assert_eq!(order.next_deadline(WAIT), None);
    }

    #[test]
    fn another_relays_batch_waiting_for_a_parked_event_ends_its_wait_for_its_batch() {
        let owner = Keys::generate();
        let relay = relay();
        let state = state(&owner, "alpha");
        let mut order = StoreOrder::default();
        assert!(order.arrive(T0, &state, Some((&relay, BatchId(1))), true, |_| false));
        order.awaited_elsewhere(&state.id);
        assert_eq!(
            order.release(T0, WAIT, |_, _| true, false, |_| false),
            vec![state.id],
            "the slow relay's batch still runs, the event goes"
        );
    }

    #[test]
    fn a_held_or_refused_root_ends_its_replies_wait_for_their_batch() {
        let user = Keys::generate();
        let relay = relay();
        let root = signed_event_by(&user, 1621, &[&["subject", "x"]]);
        let root_id = root.id.to_hex();
        let reply = signed_event_by(&user, 1111, &[&["E", &root_id]]);
        let mut order = StoreOrder::default();
        assert!(!order.arrive(T0, &root, None, false, |_| false));
        assert!(order.arrive(T0, &reply, Some((&relay, BatchId(1))), true, |_| false));
        // Answered held (not stored lately, not a root the index knows).
        order.settled(&root);
        assert_eq!(
            order.release(T0, WAIT, |_, _| true, false, |_| false),
            vec![reply.id]
        );
    }

    #[test]
    fn released_events_leave_no_trace_in_the_indexes_for_long() {
        let user = Keys::generate();
        let relay = relay();
        let mut order = StoreOrder::default();
        for n in 0..5_000u32 {
            // Each answers an event nobody has: parked for its batch, then
            // released when the batch ends.
            let parent = format!("{n:064x}");
            let reply = signed_event_by(&user, 1111, &[&["e", &parent]]);
            assert!(order.arrive(T0, &reply, Some((&relay, BatchId(1))), true, |_| false));
            assert_eq!(
                order
                    .release(T0, WAIT, |_, _| false, false, |_| false)
                    .len(),
                1
            );
            order.settled(&reply);
        }
        assert_eq!(order.parked(), 0);
        assert!(
            order.filed <= 1_024 && order.by_need.len() <= 1_024,
            "{}",
            order.filed
        );
        assert!(order.arrivals.len() <= 1_024);
    }

    #[test]
    fn an_identifier_too_long_to_be_a_repositorys_names_no_need() {
        let user = Keys::generate();
        let long = "x".repeat(MAX_IDENTIFIER_LEN + 1);
        let coordinate = format!("30617:{}:{long}", user.public_key().to_hex());
        let issue = signed_event_by(&user, 1621, &[&["a", &coordinate]]);
        assert!(needs(&issue).is_empty());
        assert!(needs(&state(&user, &long)).is_empty());
        assert_eq!(
            provides(&announcement(&user, &long)).count(),
            1,
            "only itself"
        );
    }

    #[test]
    fn answered_needs_are_bounded_in_bytes_not_only_in_count() {
        let mut answered = Answered::default();
        for n in 0..20_000 {
            let identifier = format!("{n:0>1000}");
            answered.insert(Need::Announcement(identifier));
        }
        assert!(answered.bytes <= MAX_ANSWERED_BYTES, "{}", answered.bytes);
        assert!(answered.order.len() < 20_000, "the oldest were forgotten");
        assert_eq!(answered.order.len(), answered.needs.len());
        assert!(answered.contains(&Need::Announcement(format!("{:0>1000}", 19_999))));
    }
}
