//! The caps on what strangers' announcements make us track: relays per
//! announcement, relays in total, and repositories no announcement of ours
//! names. Hitting one is counted and logged; relays over the total cap are
//! admitted again when room frees.

use std::collections::HashSet;

use nostr::prelude::RelayUrl;
use tracing::{debug, warn};

use super::SyncEngine;
use crate::nip34::RepoRef;

impl SyncEngine {
    /// The relays of `repo`'s announcement that fit the caps: the first
    /// [`max_relays_per_announcement`](super::EngineConfig::max_relays_per_announcement)
    /// distinct ones, of which a relay not tracked yet only while fewer than
    /// [`max_relays`](super::EngineConfig::max_relays) are. Relays left out
    /// by the total cap are remembered for [`SyncEngine::readmit_relays_over_cap`].
    pub(super) fn relays_within_caps(
        &mut self,
        repo: &RepoRef,
        listed: Vec<RelayUrl>,
    ) -> Vec<RelayUrl> {
        let mut seen = HashSet::new();
        let distinct: Vec<RelayUrl> = listed
            .into_iter()
            .filter(|relay| seen.insert(relay.clone()))
            .collect();
        let per_announcement = self.config.max_relays_per_announcement;
        if distinct.len() > per_announcement {
            let over = distinct.len() - per_announcement;
            self.stats.relays_over_cap += over as u64;
            warn!(%repo, listed = distinct.len(), cap = per_announcement, "announcement lists more relays than the cap; syncing from the first ones");
        }
        let candidates: Vec<RelayUrl> = distinct.into_iter().take(per_announcement).collect();
        let mut admitted = Vec::with_capacity(candidates.len());
        let mut left_out = Vec::new();
        let mut tracked = self.relays.tracked_count();
        for relay in candidates {
            if self.relays.state(&relay).is_some() {
                admitted.push(relay);
            } else if tracked < self.config.max_relays {
                tracked += 1;
                admitted.push(relay);
            } else {
                left_out.push(relay);
            }
        }
        if left_out.is_empty() {
            self.over_cap.remove(repo);
        } else {
            self.stats.relays_over_cap += left_out.len() as u64;
            warn!(%repo, left_out = left_out.len(), cap = self.config.max_relays, "relays tracked at the cap; these wait for room");
            let mut waiting = admitted.clone();
            waiting.extend(left_out);
            self.over_cap.insert(repo.clone(), waiting);
        }
        admitted
    }

    /// Registers the relays of `repo` that are new to us.
    pub(super) fn set_repo_relays(&mut self, repo: &RepoRef, relays: Vec<RelayUrl>) {
        let change = self.repos.set_repo_relays(repo, relays);
        for relay in change.added {
            if self.relays.state(&relay).is_none() {
                tracing::info!(%relay, "discovered relay");
                self.register_relay(relay, false);
            }
        }
    }

    /// Gives relays left out by the total cap another chance, now that
    /// dropped relays may have made room.
    pub(super) fn readmit_relays_over_cap(&mut self) {
        let waiting: Vec<(RepoRef, Vec<RelayUrl>)> = self
            .over_cap
            .iter()
            .map(|(repo, relays)| (repo.clone(), relays.clone()))
            .collect();
        for (repo, relays) in waiting {
            if self.relays.tracked_count() >= self.config.max_relays {
                return;
            }
            // Counted once, when first left out.
            let before = self.stats.relays_over_cap;
            let admitted = self.relays_within_caps(&repo, relays);
            self.stats.relays_over_cap = before;
            debug!(%repo, relays = admitted.len(), "relays over the cap admitted again");
            self.set_repo_relays(&repo, admitted);
        }
    }

    /// `true` if a root event of `repo` may be indexed: the repository is
    /// tracked already, or fewer than
    /// [`max_unannounced_repos`](super::EngineConfig::max_unannounced_repos)
    /// repositories no announcement of ours names are.
    pub(super) fn root_repo_allowed(&mut self, repo: &RepoRef) -> bool {
        if self.repos.repo(repo).is_some() {
            return true;
        }
        let unannounced = self
            .repos
            .repos()
            .len()
            .saturating_sub(self.own.announced_at.len());
        if unannounced < self.config.max_unannounced_repos {
            return true;
        }
        self.stats.root_events_over_cap += 1;
        if self.stats.root_events_over_cap == 1 || self.stats.root_events_over_cap % 1_000 == 0 {
            warn!(%repo, cap = self.config.max_unannounced_repos, refused = self.stats.root_events_over_cap, "root event of an unannounced repository not indexed: too many such repositories");
        }
        false
    }
}
