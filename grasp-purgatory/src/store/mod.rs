//! The events purgatory holds, by repository, and which of their objects are known to be
//! present locally.
//!
//! [`PurgatoryStore`] is plain data with no locking; the service keeps it behind a mutex.
//! Its only I/O is its journal, when one is attached: every event that enters is written
//! to it before it is held, every event that leaves is recorded as it leaves (see
//! [`crate::journal`]). A repository state is addressable: a newer state of the same
//! author and repository replaces the held one, an older one is ignored. Holding obeys
//! the [`HeldLimits`].
//!
//! One event may be held for several repositories at once, a copy in each: a
//! co-maintainer's state counts for every repository whose maintainer set lists them
//! ([`PurgatoryStore::spread_repository`]), and a reconciliation may hold a released
//! event again for a repository that lacks its objects. Each copy is fetched, released
//! or expired with its repository; the event counts once against its author and the
//! total, and its copies beyond the first have a budget of their own (the total's
//! bytes again), so neither the author nor anybody else loses room to them. The first
//! copy released releases the event: the others leave with it (each repository's
//! served refs then follow its own reconciliation).

mod limits;
mod shares;
mod sweeps;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::{EventSource, HeldFate};
use nostr::prelude::{EventId, PublicKey, Timestamp};

pub use limits::{AddError, Cap, HeldLimits};

use crate::held::{HeldEvent, HeldKind};
use crate::journal::{added_line, Journal, Removal, Snapshot, WrittenSnapshot};
use shares::{Shares, Weight};
use sweeps::RefSweeps;

/// What [`PurgatoryStore::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The event is now held.
    New,
    /// The event was already held.
    Duplicate,
    /// The event replaced an older state of the same author and repository, which was
    /// dropped from purgatory (it is superseded, not lost: the newer state wins anyway).
    Replaced {
        /// The id of the dropped older state.
        old: EventId,
    },
    /// A newer state of the same author and repository is already held; this one is
    /// superseded and not held.
    Superseded,
}

/// How much one repository or author (or everything) holds: events and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Usage {
    events: usize,
    bytes: usize,
}

impl Usage {
    fn add(&mut self, bytes: usize) {
        self.events = self.events.saturating_add(1);
        self.bytes = self.bytes.saturating_add(bytes);
    }

    fn remove(&mut self, bytes: usize) {
        self.events = self.events.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
    }
}

/// A held event's bytes (those of its journal record), arrival sequence and repository.
#[derive(Clone, Debug)]
struct Entry {
    bytes: usize,
    seq: u64,
    repo: RepoRef,
}

/// An event purgatory dropped to make room for another (see [`PurgatoryStore::insert`]).
#[derive(Clone, Debug)]
pub struct Eviction {
    /// The dropped event.
    pub held: HeldEvent,
    /// The cap that was reached: its author held more of it than the newcomer's.
    pub cap: Cap,
}

/// Events waiting for git data, by repository.
#[derive(Debug, Default)]
pub struct PurgatoryStore {
    by_repo: BTreeMap<RepoRef, Vec<HeldEvent>>,
    /// Every held event's id, with its bytes, arrival sequence and repository.
    ids: HashMap<EventId, Entry>,
    /// Events held for more than one repository: how many copies beyond the first.
    copies: HashMap<EventId, usize>,
    /// The bytes of those extra copies (bounded by [`HeldLimits::total_bytes`] again).
    copy_bytes: usize,
    /// What each author holds, all kinds together.
    by_author: Shares,
    /// What each author holds in pull requests (and updates) alone.
    pull_requests: Shares,
    /// The arrival sequence of the next event held.
    next_seq: u64,
    /// Events evicted since [`PurgatoryStore::take_evictions`] was last called.
    evicted: Vec<Eviction>,
    /// Bytes held per repository (its event count is `by_repo`'s).
    repo_bytes: HashMap<RepoRef, usize>,
    /// Everything held.
    total: Usage,
    /// Events being handed to the sink: still held (and journaled) until the sink
    /// confirms, but not offered again meanwhile.
    releasing: HashSet<EventId>,
    /// Per repository, objects known to exist in its local repository.
    present: BTreeMap<RepoRef, BTreeSet<GitOid>>,
    limits: HeldLimits,
    journal: Option<Journal>,
    /// Repositories whose stale `refs/purgatory/*` must still be deleted.
    sweeps: RefSweeps,
    /// Repositories an event left unreleased (expired, evicted, refused): once their
    /// refs are swept, the objects fetched for it are unreachable and are pruned.
    prunes: BTreeSet<RepoRef>,
    /// No held event was held before this (`None`: none is held): until it plus the
    /// expiry, [`PurgatoryStore::take_expired`] has nothing to look at. Lowered as events
    /// are held, raised by each scan; an event leaving leaves it low, which costs one
    /// scan at most.
    earliest_held: Option<Timestamp>,
}

impl PurgatoryStore {
    /// An empty purgatory with the default [`HeldLimits`] and no journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty purgatory holding at most `limits`.
    pub fn with_limits(limits: HeldLimits) -> Self {
        PurgatoryStore {
            limits,
            ..Self::default()
        }
    }

    /// The limits this store applies.
    pub fn limits(&self) -> HeldLimits {
        self.limits
    }

    /// Writes every change to `journal` from now on.
    pub(crate) fn attach_journal(&mut self, journal: Journal) {
        self.journal = Some(journal);
    }

    /// Holds `held`, replacing an older state of the same author and repository.
    ///
    /// When a repository or total limit is reached, room is made by evicting, never by
    /// refusing a newcomer outright: the victim is the oldest event of the author who
    /// holds the most (by the limit's unit, events or bytes), provided they hold more
    /// than `held`'s author. An author at the top is the one refused. A pull request
    /// only evicts pull requests, so maintainers' states keep their room; a state
    /// evicts a pull request of its own repository when that repository is full. The
    /// evicted events are journaled and left for [`PurgatoryStore::take_evictions`].
    ///
    /// Refuses `held` when its author reached their own limits, when nothing may be
    /// evicted for it, or when the journal cannot take it; then nothing but the
    /// evictions already made changed.
    ///
    /// An event already held for another repository is held for this one too, as a
    /// copy ([`PurgatoryStore::spread_repository`]); for the same repository it is a
    /// duplicate. A copy evicts nothing: it needs room of its own.
    pub fn insert(&mut self, held: HeldEvent) -> Result<Inserted, AddError> {
        if self.ids.contains_key(&held.event.id) {
            if self.holds(&held.repo, &held.event.id) {
                return Ok(Inserted::Duplicate);
            }
            return Ok(match self.place_copy(held) {
                Placed::Held => Inserted::New,
                Placed::Replaced(old) => Inserted::Replaced { old },
                Placed::Superseded => Inserted::Superseded,
                Placed::Refused => Inserted::Duplicate,
            });
        }
        let events = self.events(&held.repo);
        let older = match &held.kind {
            HeldKind::State { .. } if has_newer_state(events, &held) => {
                return Ok(Inserted::Superseded)
            }
            HeldKind::State { .. } => older_state_index(events, &held),
            HeldKind::PullRequest { .. } => None,
        };
        let record = added_line(&held);
        let bytes = record.len();
        let replacing = older
            .and_then(|index| self.events(&held.repo).get(index))
            .map(|old| self.bytes_of(&old.event.id));
        self.check_own_share(&held, bytes, replacing)?;
        self.make_room(&held, bytes, replacing)?;
        if let Some(journal) = &mut self.journal {
            journal.added_record(record).map_err(AddError::Journal)?;
        }
        let replaced = older.and_then(|index| {
            let events = self.by_repo.get_mut(&held.repo)?;
            (index < events.len()).then(|| events.remove(index))
        });
        let outcome = match replaced {
            Some(old) => {
                self.forget_event(&old, Removal::Replaced);
                Inserted::Replaced { old: old.event.id }
            }
            None => Inserted::New,
        };
        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        let entry = Entry {
            bytes,
            seq,
            repo: held.repo.clone(),
        };
        self.ids.insert(held.event.id, entry);
        self.by_author
            .add(held.event.pubkey, seq, held.event.id, bytes);
        if is_pull_request(&held) {
            self.pull_requests
                .add(held.event.pubkey, seq, held.event.id, bytes);
        }
        let repo_bytes = self.repo_bytes.entry(held.repo.clone()).or_default();
        *repo_bytes = repo_bytes.saturating_add(bytes);
        self.total.add(bytes);
        self.push_held(held);
        Ok(outcome)
    }

    /// Refuses `held` (of `bytes`) when its author reached their own limits, or when it
    /// is larger alone than a repository's or the whole byte budget: no eviction
    /// would make room for it.
    fn check_own_share(
        &self,
        held: &HeldEvent,
        bytes: usize,
        replacing: Option<usize>,
    ) -> Result<(), AddError> {
        let limits = self.limits;
        let oversized = [
            (Cap::RepositoryBytes, limits.per_repository_bytes),
            (Cap::TotalBytes, limits.total_bytes),
        ]
        .into_iter()
        .find(|(_, limit)| bytes > *limit);
        let reached = oversized
            .or_else(|| self.reached(held, bytes, replacing, &[Cap::Author, Cap::AuthorBytes]));
        match reached {
            Some((cap, limit)) => Err(AddError::Full { cap, limit }),
            None => Ok(()),
        }
    }

    /// Evicts, one event at a time, until `held` (of `bytes`) fits the repository and
    /// total limits; refuses it when a limit is reached and nothing may be evicted.
    fn make_room(
        &mut self,
        held: &HeldEvent,
        bytes: usize,
        replacing: Option<usize>,
    ) -> Result<(), AddError> {
        const ROOM: [Cap; 4] = [
            Cap::Repository,
            Cap::Total,
            Cap::RepositoryBytes,
            Cap::TotalBytes,
        ];
        while let Some((cap, limit)) = self.reached(held, bytes, replacing, &ROOM) {
            let victim = match cap {
                Cap::Repository | Cap::RepositoryBytes => {
                    self.repository_victim(held, weight_of(cap))
                }
                _ => self.total_victim(held, weight_of(cap)),
            };
            let Some(victim) = victim else {
                return Err(AddError::Full { cap, limit });
            };
            if !self.evict(&victim, cap) {
                // Nothing held under that id any more: stop rather than loop.
                return Err(AddError::Full { cap, limit });
            }
        }
        Ok(())
    }

    /// The first of `caps` that holding `held` (of `bytes`) would break, with its
    /// limit. An event that replaces one of `replacing` bytes keeps the counts, so only
    /// the bytes are checked, net of the replaced event's.
    fn reached(
        &self,
        held: &HeldEvent,
        bytes: usize,
        replacing: Option<usize>,
        caps: &[Cap],
    ) -> Option<(Cap, usize)> {
        caps.iter().copied().find_map(|cap| {
            let (usage, limit) = self.usage_and_limit(held, cap);
            let full = match weight_of(cap) {
                Weight::Events => replacing.is_none() && usage.events >= limit,
                Weight::Bytes => {
                    usage
                        .bytes
                        .saturating_sub(replacing.unwrap_or(0))
                        .saturating_add(bytes)
                        > limit
                }
            };
            full.then_some((cap, limit))
        })
    }

    /// What `held`'s repository, author or everything holds, by `cap`, and its limit.
    fn usage_and_limit(&self, held: &HeldEvent, cap: Cap) -> (Usage, usize) {
        let limits = self.limits;
        let repository = || Usage {
            events: self.events(&held.repo).len(),
            bytes: self.repo_bytes.get(&held.repo).copied().unwrap_or(0),
        };
        let author = || self.by_author.usage(&held.event.pubkey);
        match cap {
            Cap::Repository => (repository(), limits.per_repository),
            Cap::RepositoryBytes => (repository(), limits.per_repository_bytes),
            Cap::Author => (author(), limits.per_author),
            Cap::AuthorBytes => (author(), limits.per_author_bytes),
            Cap::Total => (self.total, limits.total),
            Cap::TotalBytes => (self.total, limits.total_bytes),
        }
    }

    /// Whom to evict from `held`'s full repository: a pull request of the author who
    /// holds the most pull requests there (by `weight`), oldest first. For a state
    /// (its repository's maintainers' room), whoever that author is; for a pull
    /// request, only an author who holds more than `held`'s. A state is never evicted
    /// here. Linear in the repository's held events, which its limit bounds.
    fn repository_victim(&self, held: &HeldEvent, weight: Weight) -> Option<EventId> {
        let events = self.events(&held.repo);
        let mut held_by: HashMap<PublicKey, Usage> = HashMap::new();
        for pull_request in events.iter().filter(|event| is_pull_request(event)) {
            held_by
                .entry(pull_request.event.pubkey)
                .or_default()
                .add(self.bytes_of(&pull_request.event.id));
        }
        let newcomer = match held.kind {
            HeldKind::State { .. } => None,
            HeldKind::PullRequest { .. } => Some((
                held.event.pubkey,
                held_by
                    .get(&held.event.pubkey)
                    .copied()
                    .unwrap_or_default()
                    .weighed(weight),
            )),
        };
        let mut candidates: Vec<(usize, PublicKey)> = held_by
            .iter()
            .map(|(author, usage)| (usage.weighed(weight), *author))
            .filter(|(heavy, author)| match newcomer {
                Some((newcomer, own)) => *author != newcomer && *heavy > own,
                None => true,
            })
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates.into_iter().find_map(|(_, author)| {
            events
                .iter()
                .filter(|event| is_pull_request(event) && event.event.pubkey == author)
                .map(|event| event.event.id)
                .find(|id| !self.releasing.contains(id))
        })
    }

    /// Whom to evict when purgatory is full: the oldest event of the author who holds
    /// the most (by `weight`), if they hold more than `held`'s author. A pull request
    /// weighs and evicts pull requests only, so strangers' pull requests never take a
    /// maintainer's state's room; a state weighs and evicts events of any kind.
    fn total_victim(&self, held: &HeldEvent, weight: Weight) -> Option<EventId> {
        let shares = match held.kind {
            HeldKind::State { .. } => &self.by_author,
            HeldKind::PullRequest { .. } => &self.pull_requests,
        };
        let own = shares.usage(&held.event.pubkey).weighed(weight);
        shares
            .heaviest(weight)
            .take_while(|(_, heavy)| *heavy > own)
            .filter(|(author, _)| *author != held.event.pubkey)
            .find_map(|(author, _)| {
                shares
                    .oldest_of(&author)
                    .find(|id| !self.releasing.contains(id))
            })
    }

    /// Drops the held event `id` to make room, because `cap` was reached: from every
    /// repository holding it (a copy alone would free nothing). Whether it was held.
    fn evict(&mut self, id: &EventId, cap: Cap) -> bool {
        let repos = self.repositories_holding(id);
        let mut evicted = false;
        for repo in repos {
            let taken = self.take_where(&repo, Removal::Evicted, |held| held.event.id == *id);
            self.forget_if_empty(&repo);
            for held in taken {
                evicted = true;
                // One eviction per event, reported with its last copy.
                if !self.ids.contains_key(&held.event.id) {
                    tracing::info!(id = %held.event.id, author = %held.event.pubkey, %repo, reason = cap.label(), "purgatory evicted an event of its heaviest author to make room");
                    self.evicted.push(Eviction { held, cap });
                }
            }
        }
        evicted
    }

    /// The repositories holding the event `id`: the one it was held for, and when it
    /// has copies, each holding one (a scan, made only for copied events).
    fn repositories_holding(&self, id: &EventId) -> Vec<RepoRef> {
        let recorded = self.ids.get(id).map(|entry| entry.repo.clone());
        match recorded {
            Some(repo) if !self.copies.contains_key(id) && self.holds(&repo, id) => vec![repo],
            Some(_) => self
                .by_repo
                .iter()
                .filter(|(_, events)| events.iter().any(|held| held.event.id == *id))
                .map(|(repo, _)| repo.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The events evicted since the last call, each with the cap that was reached.
    pub fn take_evictions(&mut self) -> Vec<Eviction> {
        std::mem::take(&mut self.evicted)
    }

    /// The bytes the held event `id` counts (0 if it is not held).
    fn bytes_of(&self, id: &EventId) -> usize {
        self.ids.get(id).map_or(0, |entry| entry.bytes)
    }

    /// Whether the event with this id is held.
    pub fn contains(&self, id: &EventId) -> bool {
        self.ids.contains_key(id)
    }

    /// Whether any event of `repo` is held.
    pub fn has_pending(&self, repo: &RepoRef) -> bool {
        !self.events(repo).is_empty()
    }

    /// The held events of `repo`, in arrival order.
    pub fn events(&self, repo: &RepoRef) -> &[HeldEvent] {
        self.by_repo.get(repo).map_or(&[], Vec::as_slice)
    }

    /// Every held event once (the first copy of one held for several repositories),
    /// by repository.
    pub fn iter(&self) -> impl Iterator<Item = &HeldEvent> {
        let mut seen = HashSet::new();
        self.by_repo
            .values()
            .flatten()
            .filter(move |held| seen.insert(held.event.id))
    }

    /// The repositories with held events.
    pub fn repositories(&self) -> impl Iterator<Item = &RepoRef> {
        self.by_repo.keys()
    }

    /// How many events are held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The bytes of the held events (those of their journal records), which
    /// [`HeldLimits::total_bytes`] bounds.
    pub fn bytes(&self) -> usize {
        self.total.bytes
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

    /// Every object the held events of `repo` need.
    pub fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        self.events(repo)
            .iter()
            .flat_map(HeldEvent::needed_oids)
            .collect()
    }

    /// The objects the held events of `repo` need that are not known to be present.
    pub fn missing_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        let present = self.present.get(repo);
        self.needed_oids(repo)
            .into_iter()
            .filter(|oid| !present.is_some_and(|present| present.contains(oid)))
            .collect()
    }

    /// The clone URLs the held pull requests of `repo` name (`clone` tags), one source
    /// per pull request with its updates (every URL any of them names is a source for
    /// all their objects; an update naming none uses its pull request's), each with its
    /// objects not known to be present.
    pub fn event_sources(&self, repo: &RepoRef) -> Vec<EventSource> {
        let present = self.present.get(repo);
        crate::held::event_sources(self.events(repo), |oid| {
            present.is_some_and(|present| present.contains(oid))
        })
    }

    /// Holds the events of `from` (those not being released) for every repository of
    /// `to` instead: the first takes them, each other one a copy (a co-maintainer's
    /// state counts for every repository listing them, each fetching it from its own
    /// clone URLs; no one of them decides for the others). In each repository a newer
    /// state of the same author wins, as on insertion; a copy that the repository's
    /// limits or the copies' budget cannot take is not made (logged). Returns how many
    /// events left `from`.
    pub fn spread_repository(&mut self, from: &RepoRef, to: &[RepoRef]) -> usize {
        if to.is_empty() {
            return 0;
        }
        let releasing = &self.releasing;
        let Some(events) = self.by_repo.get_mut(from) else {
            return 0;
        };
        let (moving, staying): (Vec<HeldEvent>, Vec<HeldEvent>) = std::mem::take(events)
            .into_iter()
            .partition(|held| !releasing.contains(&held.event.id));
        *events = staying;
        let moved = moving.len();
        for held in moving {
            let id = held.event.id;
            let bytes = self.bytes_of(&id);
            // Held elsewhere too (it arrived again for its own repository): the copy
            // leaving `from` was one of several.
            let elsewhere = self.copies.get(&id).copied().unwrap_or(0) > 0;
            if elsewhere {
                self.drop_copy_count(&id, bytes);
            }
            let mut placed = elsewhere;
            for home in to {
                if self.holds(home, &id) {
                    continue;
                }
                let mut copy = held.clone();
                copy.repo = home.clone();
                let outcome = if placed {
                    self.place_copy(copy)
                } else {
                    self.place_original(copy, bytes)
                };
                placed |= matches!(outcome, Placed::Held | Placed::Replaced(_));
            }
            if placed {
                self.take_repo_bytes(from, bytes);
            } else {
                self.forget_event(&held, Removal::Replaced);
            }
        }
        self.forget_if_empty(from);
        moved
    }

    /// Puts `held` (already counted as an event, no longer in any repository) in its
    /// repository, where a newer state of its author may supersede it.
    fn place_original(&mut self, held: HeldEvent, bytes: usize) -> Placed {
        let target = self.events(&held.repo);
        if matches!(held.kind, HeldKind::State { .. }) && has_newer_state(target, &held) {
            return Placed::Superseded;
        }
        let replaced = self.replace_older(&held);
        let to_bytes = self.repo_bytes.entry(held.repo.clone()).or_default();
        *to_bytes = to_bytes.saturating_add(bytes);
        if let Some(entry) = self.ids.get_mut(&held.event.id) {
            entry.repo = held.repo.clone();
        }
        self.push_held(held);
        replaced.map_or(Placed::Held, Placed::Replaced)
    }

    /// Holds a copy of an event held elsewhere for `held.repo` too, within the
    /// repository's limits and the copies' budget.
    fn place_copy(&mut self, held: HeldEvent) -> Placed {
        let bytes = self.bytes_of(&held.event.id);
        let target = self.events(&held.repo);
        if matches!(held.kind, HeldKind::State { .. }) && has_newer_state(target, &held) {
            return Placed::Superseded;
        }
        let limits = self.limits;
        let repo_bytes = self.repo_bytes.get(&held.repo).copied().unwrap_or(0);
        let full = target.len() >= limits.per_repository
            || repo_bytes.saturating_add(bytes) > limits.per_repository_bytes
            || self.copy_bytes.saturating_add(bytes) > limits.total_bytes;
        if full {
            tracing::debug!(repo = %held.repo, id = %held.event.id, "no room for a copy of a held event");
            return Placed::Refused;
        }
        let replaced = self.replace_older(&held);
        *self.copies.entry(held.event.id).or_default() += 1;
        self.copy_bytes = self.copy_bytes.saturating_add(bytes);
        let to_bytes = self.repo_bytes.entry(held.repo.clone()).or_default();
        *to_bytes = to_bytes.saturating_add(bytes);
        self.push_held(held);
        replaced.map_or(Placed::Held, Placed::Replaced)
    }

    /// Drops the older state of `held`'s author that `held.repo` holds, if any.
    fn replace_older(&mut self, held: &HeldEvent) -> Option<EventId> {
        let index = older_state_index(self.events(&held.repo), held)?;
        let old = self.by_repo.get_mut(&held.repo)?.remove(index);
        self.forget_event(&old, Removal::Replaced);
        Some(old.event.id)
    }

    /// One copy of the event `id` (of `bytes`) fewer.
    fn drop_copy_count(&mut self, id: &EventId, bytes: usize) {
        if let Some(copies) = self.copies.get_mut(id) {
            *copies = copies.saturating_sub(1);
            if *copies == 0 {
                self.copies.remove(id);
            }
            self.copy_bytes = self.copy_bytes.saturating_sub(bytes);
        }
    }

    /// Whether `repo` holds the event `id`.
    fn holds(&self, repo: &RepoRef, id: &EventId) -> bool {
        self.events(repo).iter().any(|held| held.event.id == *id)
    }

    /// Records that these objects exist in the local repository of `repo`.
    pub fn mark_present(&mut self, repo: &RepoRef, oids: impl IntoIterator<Item = GitOid>) {
        if !self.has_pending(repo) {
            return;
        }
        self.present.entry(repo.clone()).or_default().extend(oids);
    }

    /// Forgets that these objects were seen in the local repository of `repo`: a
    /// release that named them failed (the repository was damaged by hand, objects
    /// removed), so the next attempt looks again and fetches what is gone, instead of
    /// retrying the release on a stale answer until the event expires.
    pub fn forget_present<'a>(
        &mut self,
        repo: &RepoRef,
        oids: impl IntoIterator<Item = &'a GitOid>,
    ) {
        if let Some(present) = self.present.get_mut(repo) {
            for oid in oids {
                present.remove(oid);
            }
        }
    }

    /// Whether `oid` was seen present in `repo`'s local repository at the last check.
    pub fn is_known_present(&self, repo: &RepoRef, oid: &GitOid) -> bool {
        self.present
            .get(repo)
            .is_some_and(|present| present.contains(oid))
    }

    /// The held events of `repo` to release at `now` ([`held_event_fate`](grasp_sync_core::purgatory::held_event_fate): their
    /// objects are all present and they have not expired) and that are not being
    /// released already, now marked as being released. They stay held until
    /// [`PurgatoryStore::finish_release`] (so a crash or shutdown in between loses
    /// nothing) or [`PurgatoryStore::abort_release`].
    pub fn begin_release(
        &mut self,
        repo: &RepoRef,
        now: Timestamp,
        expiry: Duration,
    ) -> Vec<HeldEvent> {
        let present = self.present.get(repo).cloned().unwrap_or_default();
        let satisfied: Vec<HeldEvent> = self
            .events(repo)
            .iter()
            .filter(|held| !self.releasing.contains(&held.event.id))
            .filter(|held| held.fate(&present, now, expiry) == HeldFate::Release)
            .cloned()
            .collect();
        self.releasing
            .extend(satisfied.iter().map(|held| held.event.id));
        satisfied
    }

    /// The sink took these events: they leave purgatory.
    pub fn finish_release(&mut self, repo: &RepoRef, released: &[EventId]) {
        for id in released {
            self.releasing.remove(id);
        }
        self.take_where(repo, Removal::Released, |held| {
            released.contains(&held.event.id)
        });
        self.forget_if_empty(repo);
        self.drop_other_copies(released);
    }

    /// The events `ids` were released from one repository: their copies held for
    /// other repositories leave too (each repository's reconciliation holds the event
    /// again if it still lacks the objects).
    fn drop_other_copies(&mut self, ids: &[EventId]) {
        let copied: Vec<EventId> = ids
            .iter()
            .filter(|id| self.ids.contains_key(*id))
            .copied()
            .collect();
        if copied.is_empty() {
            return;
        }
        let repos: Vec<RepoRef> = self
            .by_repo
            .iter()
            .filter(|(_, events)| events.iter().any(|held| copied.contains(&held.event.id)))
            .map(|(repo, _)| repo.clone())
            .collect();
        for repo in repos {
            self.take_where(&repo, Removal::Released, |held| {
                copied.contains(&held.event.id)
            });
            self.forget_if_empty(&repo);
        }
    }

    /// The sink refused these events for good: they leave purgatory, not offered again.
    pub fn refuse_release(&mut self, repo: &RepoRef, refused: &[EventId]) {
        if refused.is_empty() {
            return;
        }
        for id in refused {
            self.releasing.remove(id);
        }
        self.take_where(repo, Removal::Refused, |held| {
            refused.contains(&held.event.id)
        });
        self.forget_if_empty(repo);
    }

    /// The sink failed or refused these events for now: they stay held and will be
    /// offered again.
    pub fn abort_release(&mut self, ids: &[EventId]) {
        for id in ids {
            self.releasing.remove(id);
        }
    }

    /// Removes and returns every held event that expired at `now` ([`held_event_fate`](grasp_sync_core::purgatory::held_event_fate):
    /// held `expiry` or longer), unless it is being released.
    /// Costs nothing until the earliest held event can have expired (the loop asks at
    /// every turn, and a scan looks at every held event).
    pub fn take_expired(&mut self, now: Timestamp, expiry: Duration) -> Vec<HeldEvent> {
        if !self.may_have_expired(now, expiry) {
            return Vec::new();
        }
        let expired = self.scan_expired(now, expiry);
        self.earliest_held = self
            .by_repo
            .values()
            .flatten()
            .map(|held| held.held_since)
            .min();
        expired
    }

    /// Whether an event held since [`PurgatoryStore::earliest_held`] has expired at `now`.
    fn may_have_expired(&self, now: Timestamp, expiry: Duration) -> bool {
        self.earliest_held.is_some_and(|earliest| {
            earliest.as_secs().saturating_add(expiry.as_secs()) <= now.as_secs()
        })
    }

    /// Puts `held` with its repository's events.
    fn push_held(&mut self, held: HeldEvent) {
        self.earliest_held = Some(
            self.earliest_held
                .map_or(held.held_since, |earliest| earliest.min(held.held_since)),
        );
        self.by_repo
            .entry(held.repo.clone())
            .or_default()
            .push(held);
    }

    /// Every held event expired at `now` (not being released), taken out.
    fn scan_expired(&mut self, now: Timestamp, expiry: Duration) -> Vec<HeldEvent> {
        let repos: Vec<RepoRef> = self.by_repo.keys().cloned().collect();
        let mut expired = Vec::new();
        let none = BTreeSet::new();
        for repo in repos {
            let releasing = &self.releasing;
            let present = self.present.get(&repo).unwrap_or(&none);
            let due: Vec<EventId> = self
                .events(&repo)
                .iter()
                .filter(|held| !releasing.contains(&held.event.id))
                .filter(|held| held.fate(present, now, expiry) == HeldFate::Expire)
                .map(|held| held.event.id)
                .collect();
            if due.is_empty() {
                continue;
            }
            let taken =
                self.take_where(&repo, Removal::Expired, |held| due.contains(&held.event.id));
            // An event held for several repositories expires once, with its last copy.
            expired.extend(
                taken
                    .into_iter()
                    .filter(|held| !self.ids.contains_key(&held.event.id)),
            );
            self.forget_if_empty(&repo);
        }
        expired
    }

    /// Whether the journal should be compacted now.
    pub(crate) fn journal_needs_compaction(&self) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|journal| journal.needs_compaction(self.len(), self.bytes()))
    }

    /// Starts compacting the journal to the events held now (see
    /// [`Journal::begin_compaction`]); `None` without a journal.
    pub(crate) fn begin_compaction(&mut self) -> Option<Snapshot> {
        let mut seen = HashSet::new();
        let live: Vec<&HeldEvent> = self
            .by_repo
            .values()
            .flatten()
            .filter(|held| seen.insert(held.event.id))
            .collect();
        let journal = self.journal.as_mut()?;
        Some(journal.begin_compaction(live))
    }

    /// Ends a compaction started by [`PurgatoryStore::begin_compaction`]: with the
    /// written snapshot, or (`None`) giving up.
    pub(crate) fn finish_compaction(
        &mut self,
        written: Option<WrittenSnapshot>,
    ) -> std::io::Result<()> {
        let Some(journal) = &mut self.journal else {
            return Ok(());
        };
        match written {
            Some(written) => journal.finish_compaction(written).inspect_err(|_| {
                journal.abort_compaction();
            }),
            None => {
                journal.abort_compaction();
                Ok(())
            }
        }
    }

    /// A handle to `fsync` the journal with, if it was written since the last one.
    pub(crate) fn journal_to_sync(&mut self) -> Option<std::io::Result<std::fs::File>> {
        self.journal.as_mut()?.take_unsynced()
    }

    /// Records in the journal file (0 without a journal).
    pub fn journal_records(&self) -> usize {
        self.journal.as_ref().map_or(0, Journal::records)
    }

    /// Bytes in the journal file (0 without a journal).
    pub fn journal_bytes(&self) -> u64 {
        self.journal.as_ref().map_or(0, Journal::bytes)
    }

    fn take_where(
        &mut self,
        repo: &RepoRef,
        why: Removal,
        mut take: impl FnMut(&HeldEvent) -> bool,
    ) -> Vec<HeldEvent> {
        let Some(events) = self.by_repo.get_mut(repo) else {
            return Vec::new();
        };
        let (taken, kept): (Vec<HeldEvent>, Vec<HeldEvent>) = std::mem::take(events)
            .into_iter()
            .partition(|held| take(held));
        *events = kept;
        for held in &taken {
            self.forget_event(held, why);
        }
        taken
    }

    /// Forgets a removed event's id and author count, notes that its repository owes a
    /// sweep, and journals its removal (a failed write is logged: replaying would hold
    /// it again, and release or expire it again).
    /// A copy of an event held for several repositories only leaves its repository.
    fn forget_event(&mut self, held: &HeldEvent, why: Removal) {
        if self.copies.contains_key(&held.event.id) {
            let bytes = self.bytes_of(&held.event.id);
            self.drop_copy_count(&held.event.id, bytes);
            self.take_repo_bytes(&held.repo, bytes);
            self.sweeps.request(held.repo.clone());
            if matches!(why, Removal::Expired | Removal::Evicted | Removal::Refused) {
                self.prunes.insert(held.repo.clone());
            }
            return;
        }
        if let Some(entry) = self.ids.remove(&held.event.id) {
            let (bytes, id, author) = (entry.bytes, held.event.id, held.event.pubkey);
            self.total.remove(bytes);
            self.take_repo_bytes(&held.repo, bytes);
            self.by_author.remove(author, entry.seq, id, bytes);
            if is_pull_request(held) {
                self.pull_requests.remove(author, entry.seq, id, bytes);
            }
        }
        // Its refs may be needed by nothing any more.
        self.sweeps.request(held.repo.clone());
        if matches!(why, Removal::Expired | Removal::Evicted | Removal::Refused) {
            self.prunes.insert(held.repo.clone());
        }
        if let Some(journal) = &mut self.journal {
            if let Err(error) = journal.removed(&held.event.id, why) {
                tracing::warn!(id = %held.event.id, %error, "journaling a purgatory removal failed");
            }
        }
    }

    /// Notes that these repositories' `refs/purgatory/*` must be swept (for example
    /// after a restart, when a crash may have left refs nothing needs).
    pub fn request_sweeps(&mut self, repos: impl IntoIterator<Item = RepoRef>) {
        for repo in repos {
            self.sweeps.request(repo);
        }
    }

    /// Starts the owed sweep of `repo`: whether the caller now runs it (and then calls
    /// [`PurgatoryStore::sweep_finished`]).
    pub fn claim_sweep(&mut self, repo: &RepoRef) -> bool {
        self.sweeps.claim(repo)
    }

    /// Starts every owed sweep; the caller runs one per repository returned and calls
    /// [`PurgatoryStore::sweep_finished`] for each.
    pub fn claim_sweeps(&mut self) -> Vec<RepoRef> {
        self.sweeps.claim_all()
    }

    /// Whether the sweep of `repo` starting now must also prune its unreachable objects
    /// (an event of it left unreleased since the last one); the answer is given once.
    pub fn take_prune(&mut self, repo: &RepoRef) -> bool {
        self.prunes.remove(repo)
    }

    /// A claimed sweep of `repo` finished.
    pub fn sweep_finished(&mut self, repo: &RepoRef) {
        self.sweeps.finished(repo);
    }

    /// How many repositories still owe (or are running) a sweep of their stale refs. An
    /// event that leaves purgatory makes its repository owe one in the same step.
    pub fn sweeps_outstanding(&self) -> usize {
        self.sweeps.outstanding()
    }

    /// Takes `bytes` off what `repo` holds.
    fn take_repo_bytes(&mut self, repo: &RepoRef, bytes: usize) {
        if let Some(held) = self.repo_bytes.get_mut(repo) {
            *held = held.saturating_sub(bytes);
        }
    }

    fn forget_if_empty(&mut self, repo: &RepoRef) {
        if !self.has_pending(repo) {
            self.by_repo.remove(repo);
            self.present.remove(repo);
            self.repo_bytes.remove(repo);
        }
    }
}

/// What placing an event in a repository did.
enum Placed {
    /// It is held there.
    Held,
    /// It is held there, in place of this older state of its author.
    Replaced(EventId),
    /// A newer state of its author is held there: it is not.
    Superseded,
    /// The repository's limits or the copies' budget had no room.
    Refused,
}

fn is_pull_request(held: &HeldEvent) -> bool {
    matches!(held.kind, HeldKind::PullRequest { .. })
}

/// What `cap` counts: events or bytes.
fn weight_of(cap: Cap) -> Weight {
    match cap {
        Cap::Repository | Cap::Author | Cap::Total => Weight::Events,
        Cap::RepositoryBytes | Cap::AuthorBytes | Cap::TotalBytes => Weight::Bytes,
    }
}

fn same_address(a: &HeldEvent, b: &HeldEvent) -> bool {
    matches!(a.kind, HeldKind::State { .. }) && a.event.pubkey == b.event.pubkey && a.repo == b.repo
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
mod tests;
