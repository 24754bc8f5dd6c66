//! Where purgatory learns about repositories: their announcements (for clone URLs) and
//! the local bare repository objects are fetched into.
//!
//! Both are per repository (`30617:<owner>:<identifier>`): the announcements read are
//! the owner's and those of the maintainers it lists ([`repository_data`]), and the
//! local repository is the owner's ([`RepoLocator`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use grasp_sync_core::nip34::{
    parse_announcement, Nip34Error, RepoAnnouncement, RepoRef, KIND_REPO_ANNOUNCEMENT,
};
use grasp_sync_core::purgatory::{listed_maintainers, select_repository, RepositoryData};
use nostr::prelude::{Event, Filter, Kind, PublicKey, ToBech32};
use nostr_database::NostrDatabase;

mod create;

pub use create::{create_bare_repository, CreateRepoError};

/// Why announcements could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnnouncementError {
    /// The backing store failed.
    #[error("reading announcements failed: {0}")]
    Backend(String),
}

/// The source of repository announcements (kind 30617), usually the relay's database.
#[async_trait]
pub trait Announcements: Send + Sync {
    /// Every announcement whose identifier (`d` tag) is `identifier`, one per author.
    async fn announcements(&self, identifier: &str) -> Result<Vec<Event>, AnnouncementError>;

    /// The announcements of `identifier` by these `authors` (purgatory asks for a
    /// repository's owner, then for the maintainers it lists). The default filters
    /// [`Announcements::announcements`]; a database should ask for the authors only.
    async fn announcements_by(
        &self,
        identifier: &str,
        authors: &[PublicKey],
    ) -> Result<Vec<Event>, AnnouncementError> {
        if authors.is_empty() {
            return Ok(Vec::new());
        }
        let all = self.announcements(identifier).await?;
        Ok(all
            .into_iter()
            .filter(|event| authors.contains(&event.pubkey))
            .collect())
    }
}

/// Announcements kept in memory: the newest per author and identifier.
#[derive(Debug, Default)]
pub struct MemoryAnnouncements {
    by_identifier: Mutex<BTreeMap<String, BTreeMap<PublicKey, Event>>>,
}

impl MemoryAnnouncements {
    /// No announcements.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an announcement (kept when newer than the author's current one).
    pub fn add(&self, event: Event) -> Result<(), Nip34Error> {
        let announcement = parse_announcement(&event)?;
        let mut map = self
            .by_identifier
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let authors = map
            .entry(announcement.repo.identifier().to_owned())
            .or_default();
        let newer = authors
            .get(&event.pubkey)
            .is_none_or(|current| event.created_at > current.created_at);
        if newer {
            authors.insert(event.pubkey, event);
        }
        Ok(())
    }
}

#[async_trait]
impl Announcements for MemoryAnnouncements {
    async fn announcements(&self, identifier: &str) -> Result<Vec<Event>, AnnouncementError> {
        let map = self
            .by_identifier
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(map
            .get(identifier)
            .map(|authors| authors.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn announcements_by(
        &self,
        identifier: &str,
        authors: &[PublicKey],
    ) -> Result<Vec<Event>, AnnouncementError> {
        let map = self
            .by_identifier
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(by_author) = map.get(identifier) else {
            return Ok(Vec::new());
        };
        Ok(authors
            .iter()
            .filter_map(|author| by_author.get(author).cloned())
            .collect())
    }
}

/// Announcements read from a `nostr-database` [`NostrDatabase`] (the relay's own store).
#[derive(Clone, Debug)]
pub struct DatabaseAnnouncements {
    database: Arc<dyn NostrDatabase>,
}

impl DatabaseAnnouncements {
    /// Reads announcements from `database`.
    pub fn new(database: Arc<dyn NostrDatabase>) -> Self {
        DatabaseAnnouncements { database }
    }
}

#[async_trait]
impl Announcements for DatabaseAnnouncements {
    async fn announcements(&self, identifier: &str) -> Result<Vec<Event>, AnnouncementError> {
        let filter = Filter::new()
            .kind(Kind::Custom(KIND_REPO_ANNOUNCEMENT))
            .identifier(identifier);
        let events = self
            .database
            .query(filter)
            .await
            .map_err(|error| AnnouncementError::Backend(error.to_string()))?;
        Ok(events.into_iter().collect())
    }

    async fn announcements_by(
        &self,
        identifier: &str,
        authors: &[PublicKey],
    ) -> Result<Vec<Event>, AnnouncementError> {
        if authors.is_empty() {
            return Ok(Vec::new());
        }
        let filter = Filter::new()
            .kind(Kind::Custom(KIND_REPO_ANNOUNCEMENT))
            .identifier(identifier)
            .authors(authors.iter().copied());
        let events = self
            .database
            .query(filter)
            .await
            .map_err(|error| AnnouncementError::Backend(error.to_string()))?;
        Ok(events.into_iter().collect())
    }
}

/// The announcements that speak for `repo` (its owner's, then those of the maintainers
/// the owner's lists; see
/// [`select_repository`](grasp_sync_core::purgatory::select_repository)), read from
/// `source`. `None` when the owner has not announced it. Announcements that do not
/// parse are skipped (and logged).
pub async fn repository_data(
    source: &dyn Announcements,
    repo: &RepoRef,
) -> Result<Option<RepositoryData>, AnnouncementError> {
    let identifier = repo.identifier();
    let owners = source
        .announcements_by(identifier, &[*repo.pubkey()])
        .await?;
    let owner_announcements = parse_all(&owners);
    let Some(owner) = owner_announcements
        .iter()
        .find(|announcement| announcement.repo == *repo)
    else {
        return Ok(None);
    };
    let maintainers = listed_maintainers(owner);
    let listed = source.announcements_by(identifier, &maintainers).await?;
    let all = owner_announcements.into_iter().chain(parse_all(&listed));
    Ok(select_repository(repo, all))
}

/// Parses announcement events, skipping (and logging) any that do not parse.
fn parse_all(events: &[Event]) -> Vec<RepoAnnouncement> {
    events
        .iter()
        .filter_map(|event| match parse_announcement(event) {
            Ok(announcement) => Some(announcement),
            Err(error) => {
                tracing::debug!(id = %event.id, %error, "skipping unreadable announcement");
                None
            }
        })
        .collect()
}

/// Finds the local bare repository to fetch a repository's objects into.
pub trait RepoLocator: Send + Sync {
    /// The local repository of `repo` (its owner's), if it exists.
    fn locate(&self, repo: &RepoRef) -> Option<PathBuf>;

    /// Where the local repository of `repo` is or would be created, if this locator
    /// lays repositories out (the default: it does not, and a missing repository is
    /// reported not fetchable, "no place for a local repository").
    fn place(&self, repo: &RepoRef) -> Option<PathBuf> {
        let _ = repo;
        None
    }
}

/// The layout of ngit-relay style git servers: `<root>/<npub>/<identifier>.git`.
///
/// Purgatory creates a missing repository at [`RepoLocator::place`] (unless told that
/// the git root is managed externally) with [`create_bare_repository`].
///
/// A repository's objects go to its owner's directory only, never to another author's
/// repository of the same identifier. Identifiers that are not a plain path component
/// (empty, `.`/`..`, containing `/`, `\`, NUL or control characters) are never turned
/// into paths.
#[derive(Clone, Debug)]
pub struct NpubLayout {
    root: PathBuf,
}

impl NpubLayout {
    /// Repositories under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        NpubLayout { root: root.into() }
    }

    /// The directory of `identifier` announced by `author`, if the identifier is safe to
    /// use as a file name.
    pub fn path_of(&self, author: &PublicKey, identifier: &str) -> Option<PathBuf> {
        if !is_safe_component(identifier) {
            return None;
        }
        let npub = author.to_bech32().ok()?;
        Some(self.root.join(npub).join(format!("{identifier}.git")))
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl RepoLocator for NpubLayout {
    fn locate(&self, repo: &RepoRef) -> Option<PathBuf> {
        self.path_of(repo.pubkey(), repo.identifier())
            .filter(|path| path.is_dir())
    }

    fn place(&self, repo: &RepoRef) -> Option<PathBuf> {
        self.path_of(repo.pubkey(), repo.identifier())
    }
}

/// Whether `name` can be used as one path component without escaping its directory.
fn is_safe_component(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('-')
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c == '\0' || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_sync_test_support::nip34::Announcement;
    use nostr::prelude::Keys;

    fn announce(keys: &Keys, url: &str, maintainers: &[&Keys]) -> Event {
        Announcement::new("r")
            .clone_urls([url])
            .maintainers(maintainers.iter().map(|k| k.public_key()))
            .at(1)
            .sign(keys)
    }

    /// Only the default `announcements_by`, as a relay's own implementation may have.
    struct AllOfIdentifier(MemoryAnnouncements);

    #[async_trait]
    impl Announcements for AllOfIdentifier {
        async fn announcements(&self, identifier: &str) -> Result<Vec<Event>, AnnouncementError> {
            self.0.announcements(identifier).await
        }
    }

    #[tokio::test]
    async fn only_the_owner_and_the_maintainers_it_lists_give_clone_urls() {
        let (owner, maintainer, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
        let memory = MemoryAnnouncements::new();
        memory
            .add(announce(
                &owner,
                "https://owner.example/r.git",
                &[&maintainer],
            ))
            .unwrap();
        memory
            .add(announce(
                &maintainer,
                "https://maintainer.example/r.git",
                &[&stranger],
            ))
            .unwrap();
        memory
            .add(announce(
                &stranger,
                "https://stranger.example/r.git",
                &[&owner],
            ))
            .unwrap();
        let repo = RepoRef::new(owner.public_key(), "r").unwrap();
        let expected = vec![
            "https://owner.example/r.git".to_owned(),
            "https://maintainer.example/r.git".to_owned(),
        ];
        let data = repository_data(&memory, &repo).await.unwrap().unwrap();
        let urls: Vec<String> = data.clone_urls().map(str::to_owned).collect();
        assert_eq!(urls, expected);
        let default = AllOfIdentifier(memory);
        let data = repository_data(&default, &repo).await.unwrap().unwrap();
        let urls: Vec<String> = data.clone_urls().map(str::to_owned).collect();
        assert_eq!(urls, expected, "the default implementation filters too");
        let unannounced = RepoRef::new(Keys::generate().public_key(), "r").unwrap();
        assert!(repository_data(&default, &unannounced)
            .await
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_target_is_the_owners_repository_only() {
        let root =
            std::env::temp_dir().join(format!("grasp-purgatory-layout-{}", std::process::id()));
        let layout = NpubLayout::new(&root);
        let (owner, other) = (Keys::generate(), Keys::generate());
        let other_path = layout.path_of(&other.public_key(), "r").unwrap();
        std::fs::create_dir_all(&other_path).unwrap();
        let repo = RepoRef::new(owner.public_key(), "r").unwrap();
        assert_eq!(
            layout.locate(&repo),
            None,
            "another author's repository is not a target"
        );
        let own_path = layout.path_of(&owner.public_key(), "r").unwrap();
        std::fs::create_dir_all(&own_path).unwrap();
        assert_eq!(layout.locate(&repo), Some(own_path));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn unsafe_identifiers_never_become_paths() {
        let layout = NpubLayout::new("/srv/git");
        let author = Keys::generate().public_key();
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b", "a\nb", "-rf"] {
            assert_eq!(layout.path_of(&author, bad), None, "{bad:?}");
        }
        let Some(path) = layout.path_of(&author, "my-repo.v2") else {
            panic!("a plain identifier is a path");
        };
        assert!(path.starts_with("/srv/git"));
        assert!(path.ends_with("my-repo.v2.git"));
        assert_eq!(path.components().count(), 5);
    }
}
