//! [`RepoRelays`]: each repository's relays — those its announcement lists,
//! and those GRASP-03 "Sync+" adds: its participants' own write relays.
//!
//! Participants are the owner, the maintainers and the authors of events
//! admitted to the repository's conversation; only admitted events widen
//! the set. Their relay lists (kind 10002 `r` tags not marked `read`, kind
//! 10317 `g` tags, newest per author and kind) are read from the
//! repository's relays and the configured index relays
//! ([`RepoRelays::lookups`]). The write relays of the participants chosen
//! this pass become sources of the repository's conversation (its Layers 2
//! and 3, never Layer 1): [`RepoRelays::relays_of`].
//!
//! Bounds strangers cannot stretch ([`SyncPlusConfig`]): participants
//! remembered per repository, write relays read per list, participants and
//! outbox relays per repository per pass, and outbox relays in total. Each
//! pass ([`RepoRelays::next_pass`]) the selection moves on through what is
//! over the per-pass caps, so every participant and relay is reached over
//! successive passes.
//!
//! Fair, never first come:
//! - participants are ranked by what they brought ([`Participants`]): the
//!   owner and maintainers first, then contributors by the events of theirs
//!   admitted, then by arrival. A repository at its cap remembers a
//!   newcomer in place of the lowest-ranked participant who brought no
//!   more, so sockpuppets arriving first cannot keep a contributor out;
//! - the global outbox cap is shared: each pass every repository with
//!   outbox relays may take its share of the cap (the cap over those
//!   repositories, at least one), in an order that starts where the cap
//!   ran out the pass before; only then do repositories take what the
//!   shares left over. Repositories listing many relays cannot hold the
//!   cap, and every repository is reached within
//!   `⌈repositories with outbox relays / max_relays⌉` passes.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};

use indexmap::{IndexMap, IndexSet};
use nostr::prelude::{Event, EventId, PublicKey, RelayUrl, Timestamp};

use super::config::SyncPlusConfig;
use super::stats::SyncPlusCounts;
use crate::nip34::{is_relay_list_kind, replaces, write_relays, RepoRef, KIND_RELAY_LIST};

/// Each repository's relays: announced, and added by Sync+.
#[derive(Debug, Default)]
pub(crate) struct RepoRelays {
    /// Sync+ switched on ([`SyncPlusConfig::enabled`]).
    enabled: bool,
    repos: IndexMap<RepoRef, RepoEntry>,
    /// Per announced relay: the repositories (positions in `repos`)
    /// listing it.
    announced_by: HashMap<RelayUrl, HashSet<usize>>,
    /// Per participant: the repositories (positions) they take part in.
    participant_of: HashMap<PublicKey, Vec<usize>>,
    /// Participants' relay lists, newest per kind.
    lists: HashMap<PublicKey, RelayLists>,
    /// Per outbox relay: how many repositories chose it this pass (its
    /// length is what [`SyncPlusConfig::max_relays`] bounds).
    outbox: IndexMap<RelayUrl, usize>,
    /// The configured index relays.
    index: Vec<RelayUrl>,
    /// Repositories (positions) whose outbox relays changed since
    /// [`RepoRelays::take_changes`].
    changed: IndexSet<usize>,
    /// Participants chosen since then, with their repository's position.
    newly_chosen: Vec<(usize, PublicKey)>,
    /// A pass chose other participants since then.
    participants_moved: bool,
    /// Outbox relays chosen but kept out by the global cap since then.
    kept_out: u64,
    /// New outbox relays one repository may take of the global cap between
    /// passes: its share as the last pass found it
    /// ([`RepoRelays::next_pass`]).
    share: usize,
    /// Where the next pass starts choosing: the first repository the
    /// global cap kept out of its share in the last pass.
    rotation: usize,
}

/// What changed since the last [`RepoRelays::take_changes`].
#[derive(Debug, Default)]
pub(crate) struct RepoRelayChanges {
    /// Repositories whose relays changed (their outbox relays).
    pub(crate) repos: Vec<RepoRef>,
    /// Per relay, participants newly chosen whose relay lists are read
    /// there.
    pub(crate) lookups: IndexMap<RelayUrl, Vec<PublicKey>>,
    /// A pass chose other participants: every relay's lookups are planned
    /// again.
    pub(crate) participants_moved: bool,
    /// Outbox relays chosen but kept out by the global cap
    /// ([`SyncPlusConfig::max_relays`]).
    pub(crate) over_cap: u64,
}

/// One repository: what it announces, who takes part, what this pass
/// chose.
#[derive(Debug, Default)]
struct RepoEntry {
    announced: Vec<RelayUrl>,
    /// Ranked by what they brought.
    participants: Participants,
    /// Where this pass's window of participants starts.
    participant_offset: usize,
    /// Where this pass's window of the chosen participants' relays starts.
    relay_offset: usize,
    /// How many of those relays this pass admitted (the next pass moves the
    /// relay window on by as many).
    admitted: usize,
    /// The participants chosen this pass.
    chosen: Vec<PublicKey>,
    /// The outbox relays chosen this pass (admitted under the global cap).
    outbox: Vec<RelayUrl>,
}

/// How someone takes part in a repository
/// ([`RepoRelays::add_participant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Its owner or a maintainer its announcement names.
    Maintainer,
    /// The author of an event admitted to its conversation (once per
    /// event).
    Author,
}

/// What a participant brought to a repository: how they rank. Compared
/// field by field: a maintainer above every contributor, then more events
/// above fewer, then the earlier arrival above the later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Standing {
    maintainer: bool,
    /// Events of theirs admitted to the repository's conversation.
    events: u64,
    /// Arrival order, reversed: of equals, the earlier ranks higher.
    earlier: Reverse<u64>,
}

impl Standing {
    /// What counts against a newcomer at the cap: the role and the events,
    /// not the arrival.
    fn contribution(&self) -> (bool, u64) {
        (self.maintainer, self.events)
    }
}

/// What noting a participant did ([`Participants::note`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Noted {
    /// New, remembered.
    New,
    /// New, remembered in place of this participant, forgotten: the lowest
    /// ranked, who brought no more than the newcomer.
    Displacing(PublicKey),
    /// Known: their standing rose.
    Known,
    /// New, not remembered: at the cap, everyone brought more.
    OverCap,
}

/// A repository's participants, ranked by what they brought ([`Standing`]).
#[derive(Debug, Default)]
struct Participants {
    standing: HashMap<PublicKey, Standing>,
    /// The same, lowest first.
    ranked: BTreeSet<(Standing, PublicKey)>,
    /// Participants noted new so far (the next arrival's order).
    arrivals: u64,
}

impl Participants {
    fn len(&self) -> usize {
        self.standing.len()
    }

    /// Notes that `key` takes part as `role`: a known participant's
    /// standing rises (a maintainer stays one; an author's events count
    /// one more); a new one is remembered while fewer than `cap` are, and
    /// at the cap in place of the lowest-ranked participant if that one
    /// brought no more ([`Standing::contribution`]).
    fn note(&mut self, key: PublicKey, role: Role, cap: usize) -> Noted {
        if let Some(&old) = self.standing.get(&key) {
            let mut raised = old;
            match role {
                Role::Maintainer => raised.maintainer = true,
                Role::Author => raised.events = raised.events.saturating_add(1),
            }
            self.ranked.remove(&(old, key));
            self.ranked.insert((raised, key));
            self.standing.insert(key, raised);
            return Noted::Known;
        }
        let standing = Standing {
            maintainer: role == Role::Maintainer,
            events: u64::from(role == Role::Author),
            earlier: Reverse(self.arrivals),
        };
        let mut noted = Noted::New;
        if self.len() >= cap {
            let Some(&(lowest, low_key)) = self.ranked.first() else {
                return Noted::OverCap;
            };
            if standing.contribution() < lowest.contribution() {
                return Noted::OverCap;
            }
            self.ranked.remove(&(lowest, low_key));
            self.standing.remove(&low_key);
            noted = Noted::Displacing(low_key);
        }
        self.arrivals += 1;
        self.standing.insert(key, standing);
        self.ranked.insert((standing, key));
        noted
    }

    /// Who is chosen this pass, `take` of them: the top quarter by rank
    /// always (maintainers and the main contributors), the rest a window of
    /// the others in rank order from `offset`, wrapping around.
    fn choose(&self, offset: usize, take: usize) -> Vec<PublicKey> {
        let ranked: Vec<PublicKey> = self.ranked.iter().rev().map(|(_, key)| *key).collect();
        if ranked.len() <= take {
            return ranked;
        }
        let leading = take / 4;
        let others = &ranked[leading..];
        let rotating = (0..take - leading).map(|step| others[(offset + step) % others.len()]);
        ranked[..leading].iter().copied().chain(rotating).collect()
    }

    /// How far the window of [`Participants::choose`] moves each turn.
    fn window_step(take: usize) -> usize {
        take - take / 4
    }
}

/// A participant's relay lists: the newest NIP-65 list and GRASP list.
#[derive(Debug, Default)]
struct RelayLists {
    nip65: Option<ListVersion>,
    grasp: Option<ListVersion>,
}

/// One relay list event as read.
#[derive(Debug)]
struct ListVersion {
    created_at: Timestamp,
    id: EventId,
    relays: Vec<RelayUrl>,
}

impl RelayLists {
    /// Every write relay, the NIP-65 list's first, de-duplicated.
    fn relays(&self) -> impl Iterator<Item = &RelayUrl> {
        let nip65 = self.nip65.iter().flat_map(|list| list.relays.iter());
        let grasp = self.grasp.iter().flat_map(|list| list.relays.iter());
        let mut seen = HashSet::new();
        nip65.chain(grasp).filter(move |relay| seen.insert(*relay))
    }
}

/// What adding a participant did ([`RepoRelays::add_participant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Joined {
    /// New and chosen this pass: their relay list is looked up now.
    Chosen,
    /// New, remembered for a later pass.
    Waiting,
    /// Known already (their contribution counted), or Sync+ is off, or the
    /// repository is not ours.
    Known,
    /// New, remembered in place of the lowest-ranked participant, who
    /// brought no more and is forgotten: the repository has
    /// [`SyncPlusConfig::max_participants_per_repo`].
    Displacing,
    /// Not remembered: the repository has
    /// [`SyncPlusConfig::max_participants_per_repo`] already, each of whom
    /// brought more.
    OverCap,
}

impl RepoRelays {
    /// Sync+ as `config` says; index relays are the configured ones.
    pub(crate) fn new(config: &SyncPlusConfig) -> Self {
        RepoRelays {
            enabled: config.enabled,
            index: if config.enabled {
                config.index_relays.clone()
            } else {
                Vec::new()
            },
            share: config.relays_per_pass,
            ..RepoRelays::default()
        }
    }

    /// `true` when Sync+ is on.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The index relays (none while Sync+ is off).
    pub(crate) fn index_relays(&self) -> &[RelayUrl] {
        &self.index
    }

    /// `true` if `relay` is a configured index relay (and Sync+ is on).
    pub(crate) fn is_index(&self, relay: &RelayUrl) -> bool {
        self.index.contains(relay)
    }

    /// `true` if an announcement of ours lists `relay`.
    pub(crate) fn is_announced(&self, relay: &RelayUrl) -> bool {
        self.announced_by.contains_key(relay)
    }

    /// `true` if a repository syncs its conversation from `relay` this
    /// pass as a participant's outbox relay.
    pub(crate) fn is_outbox(&self, relay: &RelayUrl) -> bool {
        self.outbox.contains_key(relay)
    }

    /// `true` if `repo` is known (an announcement of ours set its relays).
    pub(crate) fn knows(&self, repo: &RepoRef) -> bool {
        self.repos.contains_key(repo)
    }

    /// Every relay `repo` is synced from: the announced ones, then this
    /// pass's outbox relays not among them.
    pub(crate) fn relays_of(&self, repo: &RepoRef) -> Vec<RelayUrl> {
        let Some(entry) = self.repos.get(repo) else {
            return Vec::new();
        };
        let mut relays: IndexSet<RelayUrl> = entry.announced.iter().cloned().collect();
        relays.extend(entry.outbox.iter().cloned());
        relays.into_iter().collect()
    }

    /// The relays `repo`'s announcement lists (after the policy and caps).
    pub(crate) fn announced(&self, repo: &RepoRef) -> &[RelayUrl] {
        self.repos
            .get(repo)
            .map_or(&[][..], |entry| entry.announced.as_slice())
    }

    /// Records that `repo`'s announcement lists `relays`; the repository
    /// becomes known.
    pub(crate) fn set_announced(&mut self, repo: &RepoRef, relays: Vec<RelayUrl>) {
        let position = match self.repos.get_index_of(repo) {
            Some(position) => position,
            None => self.repos.insert_full(repo.clone(), RepoEntry::default()).0,
        };
        let old = std::mem::take(&mut self.repos[position].announced);
        for relay in &old {
            if let Some(repos) = self.announced_by.get_mut(relay) {
                repos.remove(&position);
                if repos.is_empty() {
                    self.announced_by.remove(relay);
                }
            }
        }
        for relay in &relays {
            self.announced_by
                .entry(relay.clone())
                .or_default()
                .insert(position);
        }
        self.repos[position].announced = relays;
    }

    /// Notes that `key` takes part in `repo` as `role` (the owner or a
    /// maintainer, or the author of an event admitted to its
    /// conversation): ranked by what they brought ([`Participants::note`]);
    /// a newcomer is chosen at once while this pass chose fewer than
    /// [`SyncPlusConfig::participants_per_pass`].
    pub(crate) fn add_participant(
        &mut self,
        repo: &RepoRef,
        key: PublicKey,
        role: Role,
        config: &SyncPlusConfig,
    ) -> Joined {
        if !self.enabled {
            return Joined::Known;
        }
        let Some(position) = self.repos.get_index_of(repo) else {
            return Joined::Known;
        };
        let cap = config.max_participants_per_repo;
        let displaced = match self.repos[position].participants.note(key, role, cap) {
            Noted::Known => return Joined::Known,
            Noted::OverCap => return Joined::OverCap,
            Noted::New => None,
            Noted::Displacing(displaced) => Some(displaced),
        };
        self.participant_of.entry(key).or_default().push(position);
        if let Some(displaced) = displaced {
            self.forget_participant(position, &displaced, config);
        }
        let entry = &mut self.repos[position];
        let joined = if entry.chosen.len() < config.participants_per_pass {
            entry.chosen.push(key);
            self.newly_chosen.push((position, key));
            // Their lists may be known already (read for another
            // repository): this one syncs from their relays now.
            if self.lists.contains_key(&key) {
                self.choose_relays(position, config);
            }
            Joined::Chosen
        } else {
            Joined::Waiting
        };
        if displaced.is_some() {
            Joined::Displacing
        } else {
            joined
        }
    }

    /// `key` no longer takes part in the repository at `position`: out of
    /// its chosen (its relays go), and their relay lists are forgotten once
    /// they take part nowhere.
    fn forget_participant(&mut self, position: usize, key: &PublicKey, config: &SyncPlusConfig) {
        if let Some(positions) = self.participant_of.get_mut(key) {
            positions.retain(|&other| other != position);
            if positions.is_empty() {
                self.participant_of.remove(key);
                self.lists.remove(key);
            }
        }
        let entry = &mut self.repos[position];
        let before = entry.chosen.len();
        entry.chosen.retain(|chosen| chosen != key);
        if entry.chosen.len() != before {
            self.choose_relays(position, config);
        }
    }

    /// `true` if `key` takes part in a repository (its relay lists are
    /// kept).
    pub(crate) fn is_participant(&self, key: &PublicKey) -> bool {
        self.participant_of.contains_key(key)
    }

    /// A participant's relay list (10002 or 10317): kept if it is the
    /// newest of its kind by its author, its write relays read up to
    /// [`SyncPlusConfig::max_relays_per_list`] of those `usable` allows;
    /// the repositories whose chosen participants include the author choose
    /// their outbox relays again. A list of someone who takes part in no
    /// repository is not kept. Returns how many write relays were not read
    /// (malformed, over the cap, or not `usable`).
    pub(crate) fn apply_list(
        &mut self,
        event: &Event,
        mut usable: impl FnMut(&RelayUrl) -> bool,
        config: &SyncPlusConfig,
    ) -> u64 {
        let mut left_out = 0;
        if !self.enabled || !self.is_participant(&event.pubkey) {
            return left_out;
        }
        if !is_relay_list_kind(event.kind) {
            return left_out;
        }
        let lists = self.lists.entry(event.pubkey).or_default();
        let slot = if event.kind.as_u16() == KIND_RELAY_LIST {
            &mut lists.nip65
        } else {
            &mut lists.grasp
        };
        let offered = (event.created_at, event.id);
        if (slot.as_ref()).is_some_and(|kept| !replaces(offered, (kept.created_at, kept.id))) {
            return left_out;
        }
        let parsed = write_relays(event);
        left_out += parsed.skipped.len() as u64;
        let mut relays = Vec::new();
        for relay in parsed.value {
            if relays.len() < config.max_relays_per_list && usable(&relay) {
                relays.push(relay);
            } else {
                left_out += 1;
            }
        }
        *slot = Some(ListVersion {
            created_at: event.created_at,
            id: event.id,
            relays,
        });
        let positions: Vec<usize> = self
            .participant_of
            .get(&event.pubkey)
            .cloned()
            .unwrap_or_default();
        for position in positions {
            if self.repos[position].chosen.contains(&event.pubkey) {
                self.choose_relays(position, config);
            }
        }
        left_out
    }

    /// A new pass, for every repository: while its chosen participants
    /// have relays this window has not reached yet, the relay window moves
    /// on past those admitted last pass; once it reached them all, the
    /// participant window moves on (when there are more participants than a
    /// pass takes) and the relay window starts over. So every participant's
    /// lists are read and every relay they list is reached, over at most
    /// `⌈participants / participants_per_pass⌉ × ⌈relays of a window /
    /// relays admitted per pass⌉` passes. Then every repository chooses its
    /// outbox relays afresh under its share of the global cap
    /// ([`RepoRelays::choose_all`]).
    pub(crate) fn next_pass(&mut self, config: &SyncPlusConfig) {
        if !self.enabled {
            return;
        }
        for position in 0..self.repos.len() {
            let candidates = self.candidates(position).len();
            let entry = &mut self.repos[position];
            let reached = entry.relay_offset + entry.admitted;
            if entry.admitted > 0 && reached < candidates {
                entry.relay_offset = reached;
            } else if entry.admitted > 0 || candidates == 0 {
                entry.relay_offset = 0;
                let count = entry.participants.len();
                let take = config.participants_per_pass;
                if count > take {
                    entry.participant_offset =
                        (entry.participant_offset + Participants::window_step(take)) % count;
                    entry.chosen = entry.participants.choose(entry.participant_offset, take);
                    self.participants_moved = true;
                }
            }
            // Nothing admitted though relays wait (the global cap is full):
            // the same window waits for room.
        }
        self.choose_all(config);
    }

    /// Every repository chooses its outbox relays afresh, the global cap
    /// ([`SyncPlusConfig::max_relays`]) shared: first each takes up to its
    /// share of new relays ([`fair_share`] of the cap over the repositories
    /// that have outbox relays), in an order starting where the cap ran out
    /// last pass; then, in the same order, each takes what the shares left
    /// over, up to its window. The first repository the cap kept out of its
    /// share leads the next pass, so each is reached in turn.
    fn choose_all(&mut self, config: &SyncPlusConfig) {
        let count = self.repos.len();
        if count == 0 {
            return;
        }
        let before: Vec<Vec<RelayUrl>> = (self.repos.values_mut())
            .map(|entry| std::mem::take(&mut entry.outbox))
            .collect();
        self.outbox.clear();
        let active = (0..count)
            .filter(|&position| !self.candidates(position).is_empty())
            .count();
        self.share = fair_share(config.max_relays, active);
        let start = self.rotation % count;
        let order: Vec<usize> = (0..count).map(|step| (start + step) % count).collect();
        let mut first_kept_out = None;
        for &position in &order {
            let choice = self.admit_window(position, self.share, config);
            if choice.kept_out > 0 && first_kept_out.is_none() {
                first_kept_out = Some(position);
            }
            self.repos[position].outbox = choice.relays;
        }
        for &position in &order {
            for relay in std::mem::take(&mut self.repos[position].outbox) {
                self.release_outbox(&relay);
            }
            let choice = self.admit_window(position, config.relays_per_pass, config);
            self.kept_out += choice.kept_out as u64;
            self.repos[position].outbox = choice.relays;
        }
        for (position, old) in before.into_iter().enumerate() {
            let entry = &mut self.repos[position];
            entry.admitted = entry.outbox.len();
            if entry.outbox != old {
                self.changed.insert(position);
            }
        }
        self.rotation = first_kept_out.unwrap_or(start);
    }

    /// What changed since the last call, and forgets it.
    pub(crate) fn take_changes(&mut self) -> RepoRelayChanges {
        let repos = std::mem::take(&mut self.changed)
            .into_iter()
            .filter_map(|position| Some(self.repos.get_index(position)?.0.clone()))
            .collect();
        let mut lookups: IndexMap<RelayUrl, Vec<PublicKey>> = IndexMap::new();
        for (position, key) in std::mem::take(&mut self.newly_chosen) {
            let Some((_, entry)) = self.repos.get_index(position) else {
                continue;
            };
            for relay in entry.announced.iter().chain(&self.index) {
                lookups.entry(relay.clone()).or_default().push(key);
            }
        }
        RepoRelayChanges {
            repos,
            lookups,
            participants_moved: std::mem::take(&mut self.participants_moved),
            over_cap: std::mem::take(&mut self.kept_out),
        }
    }

    /// The participants whose relay lists are read from `relay`: on an
    /// index relay, every repository's chosen participants; on a relay an
    /// announcement lists, the chosen participants of the repositories
    /// listing it. Sorted, de-duplicated.
    pub(crate) fn lookups(&self, relay: &RelayUrl) -> Vec<PublicKey> {
        if !self.enabled {
            return Vec::new();
        }
        let mut keys: Vec<PublicKey> = if self.is_index(relay) {
            (self.repos.values())
                .flat_map(|entry| entry.chosen.iter().copied())
                .collect()
        } else {
            (self.announced_by.get(relay).into_iter().flatten())
                .filter_map(|position| self.repos.get_index(*position))
                .flat_map(|(_, entry)| entry.chosen.iter().copied())
                .collect()
        };
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// `true` if every participant whose lists are read from `relay`
    /// ([`RepoRelays::lookups`]) is in `confirmed`; no list is copied.
    pub(crate) fn lookups_confirmed(
        &self,
        relay: &RelayUrl,
        confirmed: &HashSet<PublicKey>,
    ) -> bool {
        if !self.enabled {
            return true;
        }
        let all_chosen = |entry: &RepoEntry| entry.chosen.iter().all(|key| confirmed.contains(key));
        if self.is_index(relay) {
            return self.repos.values().all(all_chosen);
        }
        (self.announced_by.get(relay).into_iter().flatten())
            .filter_map(|position| self.repos.get_index(*position))
            .all(|(_, entry)| all_chosen(entry))
    }

    /// What Sync+ holds now.
    pub(crate) fn counts(&self) -> SyncPlusCounts {
        SyncPlusCounts {
            participants: self
                .repos
                .values()
                .map(|entry| entry.participants.len())
                .sum(),
            relay_lists: self.lists.len(),
            outbox_relays: self.outbox.len(),
            index_relays: self.index.len(),
        }
    }

    /// The write relays of the repository at `position`'s chosen
    /// participants that it does not announce, in participant order,
    /// de-duplicated.
    fn candidates(&self, position: usize) -> IndexSet<&RelayUrl> {
        let entry = &self.repos[position];
        let mut candidates = IndexSet::new();
        for key in &entry.chosen {
            if let Some(lists) = self.lists.get(key) {
                candidates.extend(
                    lists
                        .relays()
                        .filter(|relay| !entry.announced.contains(relay)),
                );
            }
        }
        candidates
    }

    /// Chooses the repository at `position`'s outbox relays again between
    /// passes (a list or a participant changed): up to its share of new
    /// relays as the last pass found it ([`RepoRelays::admit_window`]). A
    /// change, and how many the global cap kept out, are recorded for
    /// [`RepoRelays::take_changes`].
    fn choose_relays(&mut self, position: usize, config: &SyncPlusConfig) {
        let old = std::mem::take(&mut self.repos[position].outbox);
        for relay in &old {
            self.release_outbox(relay);
        }
        let choice = self.admit_window(position, self.share, config);
        if choice.relays != old {
            self.changed.insert(position);
        }
        self.kept_out += choice.kept_out as u64;
        let entry = &mut self.repos[position];
        entry.admitted = choice.relays.len();
        entry.outbox = choice.relays;
    }

    /// Admits, of the repository at `position`'s candidates
    /// ([`RepoRelays::candidates`]), the window of
    /// [`SyncPlusConfig::relays_per_pass`] from its relay offset, in order,
    /// until one is refused: a relay another repository chose already
    /// costs nothing; a new one needs room under
    /// [`SyncPlusConfig::max_relays`] and is one of at most `new_limit`.
    /// What is admitted is a prefix of the window, so the next pass moves
    /// the window on by as many. The caller sets the repository's outbox.
    fn admit_window(
        &mut self,
        position: usize,
        new_limit: usize,
        config: &SyncPlusConfig,
    ) -> Choice {
        let offset = self.repos[position].relay_offset;
        let wanted: Vec<RelayUrl> = (self.candidates(position).into_iter().skip(offset))
            .take(config.relays_per_pass)
            .cloned()
            .collect();
        let mut choice = Choice::default();
        let mut new = 0;
        for (n, relay) in wanted.iter().enumerate() {
            let known = self.outbox.contains_key(relay);
            if !known {
                let cap_full = self.outbox.len() >= config.max_relays;
                if cap_full || new >= new_limit {
                    if cap_full {
                        choice.kept_out = wanted.len() - n;
                    }
                    break;
                }
                new += 1;
            }
            *self.outbox.entry(relay.clone()).or_insert(0) += 1;
            choice.relays.push(relay.clone());
        }
        choice
    }

    /// One repository fewer chooses `relay`.
    fn release_outbox(&mut self, relay: &RelayUrl) {
        if let Some(count) = self.outbox.get_mut(relay) {
            *count -= 1;
            if *count == 0 {
                self.outbox.shift_remove(relay);
            }
        }
    }
}

/// What [`RepoRelays::admit_window`] admitted of a repository's window.
#[derive(Debug, Default)]
struct Choice {
    /// The outbox relays admitted, a prefix of the window.
    relays: Vec<RelayUrl>,
    /// Relays of the window the global cap kept out.
    kept_out: usize,
}

/// New outbox relays each of `active` repositories may take of a global cap
/// of `max_relays` before any takes more: an equal share, at least one (so
/// with more repositories than the cap, the pass reaches `max_relays` of
/// them and the next pass the following ones).
fn fair_share(max_relays: usize, active: usize) -> usize {
    (max_relays / active.max(1)).max(1)
}

#[cfg(test)]
mod tests;
