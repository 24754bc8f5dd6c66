//! Where purgatory learns about repositories: their announcements (for clone URLs) and
//! the local bare repository objects are fetched into.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use grasp_sync_core::nip34::{
    parse_announcement, Nip34Error, RepoAnnouncement, KIND_REPO_ANNOUNCEMENT,
};
use grasp_sync_core::purgatory::RepositoryData;
use nostr::prelude::{Event, Filter, Kind, PublicKey, ToBech32};
use nostr_database::NostrDatabase;

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
}

/// Reads announcement events into [`RepositoryData`], skipping (and logging) any that
/// do not parse.
pub fn repository_data(events: &[Event]) -> RepositoryData {
    let announcements: Vec<RepoAnnouncement> = events
        .iter()
        .filter_map(|event| match parse_announcement(event) {
            Ok(announcement) => Some(announcement),
            Err(error) => {
                tracing::debug!(id = %event.id, %error, "skipping unreadable announcement");
                None
            }
        })
        .collect();
    RepositoryData { announcements }
}

/// Finds the local bare repository to fetch a repository's objects into.
pub trait RepoLocator: Send + Sync {
    /// The repository directory for these announcements, if one exists.
    fn locate(&self, data: &RepositoryData) -> Option<PathBuf>;
}

/// The layout of ngit-relay style git servers: `<root>/<npub>/<identifier>.git`.
///
/// The first announcement whose directory exists wins. Identifiers that are not a plain
/// path component (empty, `.`/`..`, containing `/`, `\`, NUL or control characters) are
/// never turned into paths.
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
    fn locate(&self, data: &RepositoryData) -> Option<PathBuf> {
        data.announcements
            .iter()
            .filter_map(|a| self.path_of(a.repo.pubkey(), a.repo.identifier()))
            .find(|path| path.is_dir())
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
    use nostr::prelude::Keys;

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
