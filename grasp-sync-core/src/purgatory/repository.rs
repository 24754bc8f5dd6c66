//! Which announcements speak for a repository: the pure rule that keeps
//! strangers out of a repository's purgatory sync.
//!
//! Purgatory syncs per repository, not per bare identifier. A repository is a
//! coordinate `30617:<owner>:<identifier>`: the owner is the author of a state
//! (30618), or the repository a pull request names in its `a` tag. Its clone
//! URLs come from the owner's announcement of that identifier and from the
//! announcements of the maintainers the owner's announcement lists (NIP-34
//! `maintainers` tag), nothing else. Anybody may announce the same identifier;
//! such an announcement contributes no URL, and the git data is fetched into
//! the owner's repository only.

use crate::nip34::{RepoAnnouncement, RepoRef};

/// Maintainers of the owner's announcement whose announcements are read, in
/// the order listed; the rest are ignored (logged at debug). The owner chose
/// them, but an announcement listing thousands must not make one sync read
/// thousands of announcements and try all their URLs.
pub const MAX_REPOSITORY_MAINTAINERS: usize = 32;

/// The announcements that speak for one repository: the owner's first, then
/// those of the maintainers it lists, in the order listed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepositoryData {
    /// The owner's announcement, then its maintainers' announcements.
    pub announcements: Vec<RepoAnnouncement>,
}

impl RepositoryData {
    /// The clone URLs of all announcements, in order, with repetitions.
    pub fn clone_urls(&self) -> impl Iterator<Item = &str> {
        self.announcements
            .iter()
            .flat_map(|announcement| announcement.clone_urls.iter().map(String::as_str))
    }
}

/// The maintainers whose announcements count for `owner`'s announcement: the
/// listed ones other than the owner, at most [`MAX_REPOSITORY_MAINTAINERS`].
pub fn listed_maintainers(owner: &RepoAnnouncement) -> Vec<nostr::key::PublicKey> {
    let listed: Vec<_> = owner
        .maintainers
        .iter()
        .filter(|maintainer| *maintainer != owner.repo.pubkey())
        .copied()
        .collect();
    if listed.len() > MAX_REPOSITORY_MAINTAINERS {
        tracing::debug!(
            repo = %owner.repo,
            listed = listed.len(),
            kept = MAX_REPOSITORY_MAINTAINERS,
            "announcement lists more maintainers than are read"
        );
    }
    listed
        .into_iter()
        .take(MAX_REPOSITORY_MAINTAINERS)
        .collect()
}

/// The [`RepositoryData`] of `repo` among `announcements` (in any order, of
/// any authors and identifiers): the owner's announcement of `repo`'s
/// identifier, then the announcements of that identifier by the maintainers it
/// lists ([`listed_maintainers`]), one per author, in the order listed.
///
/// `None` when the owner's announcement is not among them: without it nobody
/// speaks for the repository. Announcements of other authors or identifiers
/// are ignored.
pub fn select_repository(
    repo: &RepoRef,
    announcements: impl IntoIterator<Item = RepoAnnouncement>,
) -> Option<RepositoryData> {
    let same_identifier: Vec<RepoAnnouncement> = announcements
        .into_iter()
        .filter(|announcement| announcement.repo.identifier() == repo.identifier())
        .collect();
    let owner = same_identifier
        .iter()
        .find(|announcement| announcement.repo.pubkey() == repo.pubkey())?
        .clone();
    let maintainers = listed_maintainers(&owner);
    let mut selected = vec![owner];
    for maintainer in maintainers {
        let found = same_identifier
            .iter()
            .find(|announcement| announcement.repo.pubkey() == &maintainer);
        if let Some(announcement) = found {
            selected.push(announcement.clone());
        }
    }
    Some(RepositoryData {
        announcements: selected,
    })
}

#[cfg(test)]
mod tests {
    use nostr::key::{Keys, PublicKey};

    use super::*;

    fn announce(
        author: &PublicKey,
        identifier: &str,
        url: &str,
        maintainers: &[PublicKey],
    ) -> RepoAnnouncement {
        RepoAnnouncement {
            repo: RepoRef::new(*author, identifier).expect("valid identifier"),
            relays: Vec::new(),
            clone_urls: vec![url.to_owned()],
            maintainers: maintainers.to_vec(),
            skipped: Vec::new(),
        }
    }

    fn urls(data: &RepositoryData) -> Vec<&str> {
        data.clone_urls().collect()
    }

    #[test]
    fn a_stranger_announcing_the_same_identifier_contributes_nothing() {
        let (owner, stranger) = (Keys::generate().public_key(), Keys::generate().public_key());
        let repo = RepoRef::new(owner, "r").expect("valid");
        let all = vec![
            announce(&stranger, "r", "https://stranger.example/r.git", &[]),
            announce(&owner, "r", "https://owner.example/r.git", &[]),
        ];
        let data = select_repository(&repo, all.clone()).expect("owner announced");
        assert_eq!(urls(&data), vec!["https://owner.example/r.git"]);
        // And the stranger's repository is the stranger's alone.
        let theirs = RepoRef::new(stranger, "r").expect("valid");
        let data = select_repository(&theirs, all).expect("stranger announced");
        assert_eq!(urls(&data), vec!["https://stranger.example/r.git"]);
    }

    #[test]
    fn listed_maintainers_count_in_the_order_listed_and_others_do_not() {
        let keys: Vec<PublicKey> = (0..4).map(|_| Keys::generate().public_key()).collect();
        let (owner, first, second, unlisted) = (keys[0], keys[1], keys[2], keys[3]);
        let repo = RepoRef::new(owner, "r").expect("valid");
        let all = vec![
            announce(&second, "r", "https://second.example/r.git", &[]),
            announce(&unlisted, "r", "https://unlisted.example/r.git", &[owner]),
            announce(&first, "r", "https://first.example/r.git", &[unlisted]),
            announce(&first, "other", "https://first.example/other.git", &[]),
            announce(
                &owner,
                "r",
                "https://owner.example/r.git",
                &[owner, first, second],
            ),
        ];
        let data = select_repository(&repo, all).expect("owner announced");
        assert_eq!(
            urls(&data),
            vec![
                "https://owner.example/r.git",
                "https://first.example/r.git",
                "https://second.example/r.git",
            ],
            "a maintainer's own maintainers list is not followed"
        );
    }

    #[test]
    fn without_the_owners_announcement_nobody_speaks_for_the_repository() {
        let (owner, maintainer) = (Keys::generate().public_key(), Keys::generate().public_key());
        let repo = RepoRef::new(owner, "r").expect("valid");
        let all = vec![announce(
            &maintainer,
            "r",
            "https://m.example/r.git",
            &[owner],
        )];
        assert_eq!(select_repository(&repo, all), None);
        assert_eq!(select_repository(&repo, Vec::new()), None);
    }

    #[test]
    fn at_most_the_first_maintainers_are_read() {
        let owner = Keys::generate().public_key();
        let many: Vec<PublicKey> = (0..MAX_REPOSITORY_MAINTAINERS + 5)
            .map(|_| Keys::generate().public_key())
            .collect();
        let announcement = announce(&owner, "r", "https://owner.example/r.git", &many);
        let listed = listed_maintainers(&announcement);
        assert_eq!(listed, many[..MAX_REPOSITORY_MAINTAINERS].to_vec());
    }
}
