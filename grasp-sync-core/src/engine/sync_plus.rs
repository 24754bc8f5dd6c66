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

use std::collections::{HashMap, HashSet};

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
    /// In the order they joined (owner and maintainers first).
    participants: IndexSet<PublicKey>,
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
    /// Known already (or Sync+ is off, or the repository is not ours).
    Known,
    /// Not remembered: the repository has
    /// [`SyncPlusConfig::max_participants_per_repo`] already.
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

    /// Adds `key` to `repo`'s participants (the owner, a maintainer, or the
    /// author of an event admitted to its conversation).
    pub(crate) fn add_participant(
        &mut self,
        repo: &RepoRef,
        key: PublicKey,
        config: &SyncPlusConfig,
    ) -> Joined {
        if !self.enabled {
            return Joined::Known;
        }
        let Some((position, _, entry)) = self.repos.get_full_mut(repo) else {
            return Joined::Known;
        };
        if entry.participants.contains(&key) {
            return Joined::Known;
        }
        if entry.participants.len() >= config.max_participants_per_repo {
            return Joined::OverCap;
        }
        entry.participants.insert(key);
        self.participant_of.entry(key).or_default().push(position);
        if entry.chosen.len() < config.participants_per_pass {
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
    /// relays admitted per pass⌉` passes.
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
                if count > config.participants_per_pass {
                    entry.participant_offset =
                        (entry.participant_offset + config.participants_per_pass) % count;
                    entry.chosen = window(
                        &entry.participants,
                        entry.participant_offset,
                        config.participants_per_pass,
                    )
                    .copied()
                    .collect();
                    self.participants_moved = true;
                }
            }
            // Nothing admitted though relays wait (the global cap is full):
            // the same window waits for room.
            self.choose_relays(position, config);
        }
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

    /// Chooses the repository at `position`'s outbox relays for this pass:
    /// of its candidates ([`RepoRelays::candidates`]), a window of
    /// [`SyncPlusConfig::relays_per_pass`] from its relay offset, each
    /// admitted if another repository chose it already or the outbox relays
    /// are fewer than [`SyncPlusConfig::max_relays`]. A change, and how
    /// many the global cap kept out, are recorded for
    /// [`RepoRelays::take_changes`].
    fn choose_relays(&mut self, position: usize, config: &SyncPlusConfig) {
        let candidates = self.candidates(position);
        let offset = self.repos[position].relay_offset;
        let wanted: Vec<RelayUrl> = (candidates.iter().skip(offset))
            .take(config.relays_per_pass)
            .map(|relay| (*relay).clone())
            .collect();
        let old = std::mem::take(&mut self.repos[position].outbox);
        for relay in &old {
            self.release_outbox(relay);
        }
        let mut over_cap = 0;
        let mut chosen = Vec::new();
        for relay in wanted {
            if self.outbox.contains_key(&relay) || self.outbox.len() < config.max_relays {
                *self.outbox.entry(relay.clone()).or_insert(0) += 1;
                chosen.push(relay);
            } else {
                over_cap += 1;
            }
        }
        if chosen != old {
            self.changed.insert(position);
        }
        self.kept_out += over_cap;
        let entry = &mut self.repos[position];
        entry.admitted = chosen.len();
        entry.outbox = chosen;
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

/// `take` items of `items` from `offset` on, wrapping around, each once.
fn window<T>(items: &IndexSet<T>, offset: usize, take: usize) -> impl Iterator<Item = &T> {
    let len = items.len();
    (0..take.min(len)).filter_map(move |step| items.get_index((offset + step) % len))
}

#[cfg(test)]
mod tests;
