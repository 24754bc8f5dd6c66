//! Which served repositories each key maintains: per identifier, the repositories whose
//! maintainer set (as their last reconciliation found it) lists the key.
//!
//! A released state of key `M` can change the served refs of exactly the repositories
//! of its identifier whose maintainer set holds `M`; [`MaintainerIndex`] answers that
//! by lookup, so a release costs the repositories it concerns, not a scan of every
//! announcement of the identifier. Its size is linear in what is served: each
//! repository's set is at most [`MAX_REPOSITORY_MAINTAINERS`](super::MAX_REPOSITORY_MAINTAINERS)
//! keys. Pure data.

use std::collections::{BTreeSet, HashMap};

use nostr::key::PublicKey;

use crate::nip34::RepoRef;

/// Per identifier and key, the repositories whose maintainer set lists the key.
#[derive(Clone, Debug, Default)]
pub struct MaintainerIndex {
    /// (identifier, key) → repositories listing the key.
    listing: HashMap<(String, PublicKey), BTreeSet<RepoRef>>,
    /// Each repository's maintainer set as recorded.
    sets: HashMap<RepoRef, Vec<PublicKey>>,
}

impl MaintainerIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// `repo`'s maintainer set is now `maintainers` (replacing what was recorded).
    pub fn record(&mut self, repo: &RepoRef, maintainers: &[PublicKey]) {
        if self.sets.get(repo).is_some_and(|set| set == maintainers) {
            return;
        }
        self.forget(repo);
        for key in maintainers {
            self.listing
                .entry((repo.identifier().to_owned(), *key))
                .or_default()
                .insert(repo.clone());
        }
        self.sets.insert(repo.clone(), maintainers.to_vec());
    }

    /// `repo` is no longer served.
    pub fn forget(&mut self, repo: &RepoRef) {
        let Some(old) = self.sets.remove(repo) else {
            return;
        };
        for key in old {
            let entry = (repo.identifier().to_owned(), key);
            if let Some(repos) = self.listing.get_mut(&entry) {
                repos.remove(repo);
                if repos.is_empty() {
                    self.listing.remove(&entry);
                }
            }
        }
    }

    /// The repositories of `identifier` whose maintainer set lists `key`.
    pub fn listing(&self, identifier: &str, key: &PublicKey) -> impl Iterator<Item = &RepoRef> {
        self.listing
            .get(&(identifier.to_owned(), *key))
            .into_iter()
            .flatten()
    }

    /// `repo`'s maintainer set as recorded (empty when it is not).
    pub fn maintainers_of(&self, repo: &RepoRef) -> &[PublicKey] {
        self.sets.get(repo).map_or(&[], Vec::as_slice)
    }

    /// How many repositories are recorded.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// Whether no repository is recorded.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use nostr::key::Keys;

    use super::*;

    #[test]
    fn a_key_is_found_in_the_repositories_listing_it_until_they_change() {
        let (owner, fork, maintainer) = (
            Keys::generate().public_key(),
            Keys::generate().public_key(),
            Keys::generate().public_key(),
        );
        let ours = RepoRef::new(owner, "r").expect("valid");
        let theirs = RepoRef::new(fork, "r").expect("valid");
        let other = RepoRef::new(owner, "s").expect("valid");
        let mut index = MaintainerIndex::new();
        index.record(&ours, &[owner, maintainer]);
        index.record(&theirs, &[fork, maintainer]);
        index.record(&other, &[owner, maintainer]);
        let listing = |index: &MaintainerIndex, key| -> Vec<RepoRef> {
            index.listing("r", key).cloned().collect()
        };
        let mut both = vec![ours.clone(), theirs.clone()];
        both.sort();
        assert_eq!(listing(&index, &maintainer), both, "per identifier");
        index.record(&theirs, &[fork]);
        assert_eq!(listing(&index, &maintainer), vec![ours.clone()]);
        index.forget(&ours);
        assert!(listing(&index, &maintainer).is_empty());
        assert_eq!(listing(&index, &owner), Vec::<RepoRef>::new());
        assert_eq!(index.len(), 2);
    }
}
