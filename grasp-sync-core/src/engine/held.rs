//! Repositories the host holds: their announcement is kept outside what the
//! host serves until their git data arrives (a GRASP purgatory). While held,
//! a repository is synced only by Layer 1 (its announcement and states);
//! its Layers 2+3 (the events tagging it) wait for its promotion.

use indexmap::IndexSet;
use nostr::prelude::{Event, Kind};

use crate::nip34::{RepoRef, KIND_REPO_ANNOUNCEMENT};

/// The repositories held ([`SyncEngine::held_repositories`](super::SyncEngine::held_repositories)),
/// in the order they were held.
#[derive(Debug, Default)]
pub(crate) struct HeldRepos {
    repos: IndexSet<RepoRef>,
}

impl HeldRepos {
    /// Holds `repo`; `true` if it was not held.
    pub(crate) fn hold(&mut self, repo: RepoRef) -> bool {
        self.repos.insert(repo)
    }

    /// Releases `repo`; `true` if it was held.
    pub(crate) fn promote(&mut self, repo: &RepoRef) -> bool {
        self.repos.shift_remove(repo)
    }

    /// Is this repository held?
    pub(crate) fn is_held(&self, repo: &RepoRef) -> bool {
        self.repos.contains(repo)
    }

    /// Every held repository, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &RepoRef> {
        self.repos.iter()
    }
}

/// The repository an announcement (kind 30617) is of, `None` for any other
/// event or an announcement whose identifier is not a repository's.
pub(crate) fn announced_repo(event: &Event) -> Option<RepoRef> {
    if event.kind != Kind::Custom(KIND_REPO_ANNOUNCEMENT) {
        return None;
    }
    let identifier = event.tags.identifier()?;
    RepoRef::new(event.pubkey, identifier).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_sync_test_support::nip34::{sign, Announcement};
    use nostr::prelude::Keys;

    #[test]
    fn an_announcement_names_its_repository_and_nothing_else_does() {
        let keys = Keys::generate();
        let announcement = Announcement::new("repo").at(10).sign(&keys);
        let repo = announced_repo(&announcement).expect("an announcement's repository");
        assert_eq!(repo.identifier(), "repo");
        assert_eq!(repo.pubkey(), &keys.public_key());
        let note = sign(&keys, 1621, "issue", Vec::new(), 10);
        assert_eq!(announced_repo(&note), None);
    }

    #[test]
    fn a_repository_is_held_until_promoted() {
        let keys = Keys::generate();
        let repo = RepoRef::new(keys.public_key(), "repo").expect("repo");
        let mut held = HeldRepos::default();
        assert!(held.hold(repo.clone()));
        assert!(!held.hold(repo.clone()), "held once");
        assert!(held.is_held(&repo));
        assert_eq!(held.iter().count(), 1);
        assert!(held.promote(&repo));
        assert!(!held.is_held(&repo));
        assert!(!held.promote(&repo), "not held any more");
    }
}
