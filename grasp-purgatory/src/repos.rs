//! Where purgatory learns about repositories: their announcements (for clone URLs) and
//! the local bare repository objects are fetched into.
//!
//! Both are per repository (`30617:<owner>:<identifier>`): the announcements read are
//! the owner's and those of the maintainers it lists ([`repository_data`]), and the
//! local repository is the owner's ([`RepoLocator`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use grasp_sync_core::filters::matches;
use grasp_sync_core::nip34::{
    parse_announcement, Nip34Error, RepoAnnouncement, RepoRef, KIND_PULL_REQUEST,
    KIND_PULL_REQUEST_UPDATE, KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE,
};
use grasp_sync_core::purgatory::{
    home_repositories, maintainer_set, select_repository, RepositoryData,
};
use nostr::prelude::{Event, EventId, Filter, Kind, PublicKey, SingleLetterTag, ToBech32};
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

/// The relay's NIP-34 events purgatory reads, usually the relay's database:
/// announcements (30617: clone URLs, maintainers, which repositories are served),
/// states (30618: what a repository serves) and pull requests with their updates
/// (1618, 1619: the tips served at `refs/nostr/<id>`).
///
/// One method is required, [`Announcements::query`]; the others are built on it (a
/// database may answer them more directly).
#[async_trait]
pub trait Announcements: Send + Sync {
    /// The stored events matching `filter` (every one, not one page).
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError>;

    /// Every announcement whose identifier (`d` tag) is `identifier`, one per author.
    async fn announcements(&self, identifier: &str) -> Result<Vec<Event>, AnnouncementError> {
        let filter = Filter::new()
            .kind(Kind::Custom(KIND_REPO_ANNOUNCEMENT))
            .identifier(identifier);
        self.query(&filter).await
    }

    /// The announcements of `identifier` by these `authors` (purgatory asks for a
    /// repository's owner, then for its maintainers).
    async fn announcements_by(
        &self,
        identifier: &str,
        authors: &[PublicKey],
    ) -> Result<Vec<Event>, AnnouncementError> {
        let Some(filter) = addressable_by(KIND_REPO_ANNOUNCEMENT, identifier, authors) else {
            return Ok(Vec::new());
        };
        Ok(only_by(self.query(&filter).await?, authors))
    }

    /// Every announcement held: the repositories served.
    async fn all_announcements(&self) -> Result<Vec<Event>, AnnouncementError> {
        self.query(&Filter::new().kind(Kind::Custom(KIND_REPO_ANNOUNCEMENT)))
            .await
    }

    /// The states (30618) of `identifier` by these `authors` (a repository's
    /// maintainer set).
    async fn states_by(
        &self,
        identifier: &str,
        authors: &[PublicKey],
    ) -> Result<Vec<Event>, AnnouncementError> {
        let Some(filter) = addressable_by(KIND_REPO_STATE, identifier, authors) else {
            return Ok(Vec::new());
        };
        Ok(only_by(self.query(&filter).await?, authors))
    }

    /// The pull requests and pull request updates (1618, 1619) that name `repo` in an
    /// `a` tag.
    async fn pull_requests(&self, repo: &RepoRef) -> Result<Vec<Event>, AnnouncementError> {
        let filter = Filter::new()
            .kinds([
                Kind::Custom(KIND_PULL_REQUEST),
                Kind::Custom(KIND_PULL_REQUEST_UPDATE),
            ])
            .custom_tag(SingleLetterTag::LOWERCASE_A, repo.to_string());
        self.query(&filter).await
    }
}

/// The filter for the addressable events of `kind` and `identifier` by `authors`;
/// `None` when there is no author to ask for.
fn addressable_by(kind: u16, identifier: &str, authors: &[PublicKey]) -> Option<Filter> {
    (!authors.is_empty()).then(|| {
        Filter::new()
            .kind(Kind::Custom(kind))
            .identifier(identifier)
            .authors(authors.iter().copied())
    })
}

/// The events of `events` by one of `authors` (a store that ignores the filter's
/// authors gives no stranger a say).
fn only_by(events: Vec<Event>, authors: &[PublicKey]) -> Vec<Event> {
    events
        .into_iter()
        .filter(|event| authors.contains(&event.pubkey))
        .collect()
}

/// Events kept in memory: announcements (the newest per author and identifier),
/// states (the newest per author and identifier) and any other event once.
#[derive(Debug, Default)]
pub struct MemoryAnnouncements {
    events: Mutex<BTreeMap<EventId, Event>>,
}

impl MemoryAnnouncements {
    /// No events.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an announcement (kept when newer than the author's current one).
    pub fn add(&self, event: Event) -> Result<(), Nip34Error> {
        parse_announcement(&event)?;
        self.add_event(event);
        Ok(())
    }

    /// Adds any event; an addressable one (announcement, state) replaces the author's
    /// older one of the same identifier, and is dropped if older.
    pub fn add_event(&self, event: Event) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if event.kind.is_addressable() {
            let address = |other: &Event| {
                other.kind == event.kind
                    && other.pubkey == event.pubkey
                    && other.tags.identifier() == event.tags.identifier()
            };
            let current: Vec<Event> = events.values().filter(|e| address(e)).cloned().collect();
            if current.iter().any(|other| {
                (other.created_at, std::cmp::Reverse(other.id))
                    >= (event.created_at, std::cmp::Reverse(event.id))
            }) {
                return;
            }
            for old in current {
                events.remove(&old.id);
            }
        }
        events.insert(event.id, event);
    }
}

#[async_trait]
impl Announcements for MemoryAnnouncements {
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(events
            .values()
            .filter(|event| matches(filter, event))
            .cloned()
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
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        let events = self
            .database
            .query(filter.clone())
            .await
            .map_err(|error| AnnouncementError::Backend(error.to_string()))?;
        Ok(events.into_iter().collect())
    }
}

/// The announcements that speak for `repo` (its owner's, then those of its maintainer
/// set, followed recursively; see
/// [`select_repository`](grasp_sync_core::purgatory::select_repository)), read from
/// `source` one round per level of the set. `None` when the owner has not announced it.
/// Announcements that do not parse are skipped (and logged).
pub async fn repository_data(
    source: &dyn Announcements,
    repo: &RepoRef,
) -> Result<Option<RepositoryData>, AnnouncementError> {
    let identifier = repo.identifier();
    let mut asked = vec![*repo.pubkey()];
    let mut known = parse_all(&source.announcements_by(identifier, &asked).await?);
    if !known.iter().any(|announcement| announcement.repo == *repo) {
        return Ok(None);
    }
    loop {
        let next: Vec<PublicKey> = maintainer_set(repo, &known)
            .into_iter()
            .filter(|key| !asked.contains(key))
            .collect();
        if next.is_empty() {
            break;
        }
        asked.extend(next.iter().copied());
        known.extend(parse_all(
            &source.announcements_by(identifier, &next).await?,
        ));
    }
    Ok(select_repository(repo, known))
}

/// The repositories the held events keyed `held` belong to when `held`'s author has
/// not announced it: every announcement of the same identifier whose maintainer set
/// lists the author ([`home_repositories`], in key order). Empty when there is none.
pub async fn homes_of(
    source: &dyn Announcements,
    held: &RepoRef,
) -> Result<Vec<RepoRef>, AnnouncementError> {
    let candidates = parse_all(&source.announcements(held.identifier()).await?);
    Ok(home_repositories(held, &candidates))
}

/// The repositories of `identifier`: one per author who announced it (announcements
/// that do not parse, or of another identifier, are skipped), in key order. Empty when
/// nobody announced it.
pub(crate) async fn owners_of(
    source: &dyn Announcements,
    identifier: &str,
) -> Result<Vec<RepoRef>, AnnouncementError> {
    let owners: BTreeSet<RepoRef> = parse_all(&source.announcements(identifier).await?)
        .into_iter()
        .map(|announcement| announcement.repo)
        .filter(|repo| repo.identifier() == identifier)
        .collect();
    Ok(owners.into_iter().collect())
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
/// into paths, nor are those whose directory name (`<identifier>.git`) would pass the
/// file system's limit on a name ([`MAX_FILE_NAME_BYTES`]): no git server of this
/// layout can hold them, and purgatory reports them as having no place
/// (`NotFetchable::NoPlaceForRepository`) instead of failing to create them.
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
    /// use as a file name and `<identifier>.git` fits in one ([`MAX_FILE_NAME_BYTES`]).
    pub fn path_of(&self, author: &PublicKey, identifier: &str) -> Option<PathBuf> {
        let name = format!("{identifier}.git");
        if !is_safe_component(identifier) || name.len() > MAX_FILE_NAME_BYTES {
            return None;
        }
        let npub = author.to_bech32().ok()?;
        Some(self.root.join(npub).join(name))
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

/// The longest file name, in bytes, Linux file systems take (`NAME_MAX`).
pub const MAX_FILE_NAME_BYTES: usize = 255;

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

    /// Only the default methods over `query`, as a relay's own implementation may have.
    struct AllOfIdentifier(MemoryAnnouncements);

    #[async_trait]
    impl Announcements for AllOfIdentifier {
        async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
            self.0.query(filter).await
        }
    }

    #[tokio::test]
    async fn the_owner_and_its_maintainer_set_give_clone_urls_and_nobody_else() {
        let (owner, maintainer, co, stranger) = (
            Keys::generate(),
            Keys::generate(),
            Keys::generate(),
            Keys::generate(),
        );
        let memory = MemoryAnnouncements::new();
        let announcements = [
            announce(&owner, "https://owner.example/r.git", &[&maintainer]),
            announce(&maintainer, "https://maintainer.example/r.git", &[&co]),
            announce(&co, "https://co.example/r.git", &[&owner]),
            announce(&stranger, "https://stranger.example/r.git", &[&owner]),
        ];
        for announcement in announcements {
            memory.add(announcement).unwrap();
        }
        let repo = RepoRef::new(owner.public_key(), "r").unwrap();
        let expected = vec![
            "https://owner.example/r.git".to_owned(),
            "https://maintainer.example/r.git".to_owned(),
            "https://co.example/r.git".to_owned(),
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
        // A maintainer without an announcement of their own belongs to the owner's.
        let silent = RepoRef::new(Keys::generate().public_key(), "r").unwrap();
        assert!(homes_of(&default, &silent).await.unwrap().is_empty());
        let listed = RepoRef::new(co.public_key(), "s").unwrap();
        assert!(homes_of(&default, &listed).await.unwrap().is_empty());
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
