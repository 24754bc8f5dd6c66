//! Disk quotas of the git root: how many bytes of objects the repositories purgatory
//! fetches into hold, in total and per owner, and the refusal of a fetch or a new
//! repository beyond them.
//!
//! A repository's bytes are those of the files under its `objects/` directory, measured
//! when it is first used and again after each fetch into it and each prune (one
//! directory listing of that repository, never a walk of the whole git root). A fetch
//! may overshoot a quota by one pack at most (bounded by
//! [`GitFetcherConfig::max_pack_bytes`](crate::GitFetcherConfig::max_pack_bytes)); the
//! next is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use grasp_sync_core::nip34::RepoRef;
use nostr::prelude::PublicKey;

/// The most bytes of git objects the repositories under the git root may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLimits {
    /// In total (64 GiB; `None`: no limit). `NGIT_PURGATORY_MAX_DISK_BYTES`, 0 for none.
    pub total_bytes: Option<u64>,
    /// The repositories of one owner together (4 GiB; `None`: no limit), so one key
    /// cannot take the total alone. `NGIT_PURGATORY_MAX_DISK_BYTES_PER_AUTHOR`, 0 for
    /// none.
    pub per_author_bytes: Option<u64>,
}

impl Default for DiskLimits {
    fn default() -> Self {
        DiskLimits {
            total_bytes: Some(64 * 1024 * 1024 * 1024),
            per_author_bytes: Some(4 * 1024 * 1024 * 1024),
        }
    }
}

/// Why a fetch into a repository, or its creation, was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The repositories of the git root hold the total quota or more.
    #[error("the git root holds {used} bytes of objects, its quota is {limit}")]
    Total {
        /// Bytes held.
        used: u64,
        /// [`DiskLimits::total_bytes`].
        limit: u64,
    },
    /// The repositories of the owner hold their quota or more.
    #[error("the repositories of {author} hold {used} bytes of objects, the quota per author is {limit}")]
    Author {
        /// The repository owner.
        author: PublicKey,
        /// Bytes held.
        used: u64,
        /// [`DiskLimits::per_author_bytes`].
        limit: u64,
    },
}

impl QuotaError {
    /// The `quota` label of `purgatory_disk_quota_refusals_total`.
    pub fn label(&self) -> &'static str {
        match self {
            QuotaError::Total { .. } => "total",
            QuotaError::Author { .. } => "author",
        }
    }
}

/// The bytes of objects of every repository purgatory used, by owner and in total.
#[derive(Debug, Default)]
pub(crate) struct DiskUsage {
    limits: DiskLimits,
    repos: HashMap<PathBuf, (RepoRef, u64)>,
    by_author: HashMap<PublicKey, u64>,
    total: u64,
}

impl DiskUsage {
    pub(crate) fn new(limits: DiskLimits) -> Self {
        DiskUsage {
            limits,
            ..Self::default()
        }
    }

    /// The repository whose local copy is at `path`, if it was used.
    pub(crate) fn repository_at(&self, path: &Path) -> Option<&RepoRef> {
        self.repos.get(path).map(|(repo, _)| repo)
    }

    /// Whether the local repository at `path` was measured.
    pub(crate) fn is_measured(&self, path: &Path) -> bool {
        self.repos.contains_key(path)
    }

    /// The local repository of `repo` at `path` now holds `bytes` of objects.
    pub(crate) fn record(&mut self, repo: &RepoRef, path: &Path, bytes: u64) {
        let owner = *repo.pubkey();
        let previous = self
            .repos
            .insert(path.to_owned(), (repo.clone(), bytes))
            .map_or(0, |(_, bytes)| bytes);
        let held = self.by_author.entry(owner).or_default();
        *held = held.saturating_sub(previous).saturating_add(bytes);
        self.total = self.total.saturating_sub(previous).saturating_add(bytes);
    }

    /// Bytes of objects held in total.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Whether `owner` may have more objects fetched (or a repository created): refused
    /// once their repositories, or all, hold their quota.
    pub(crate) fn check(&self, owner: &PublicKey) -> Result<(), QuotaError> {
        let held = self.by_author.get(owner).copied().unwrap_or(0);
        if let Some(limit) = self.limits.per_author_bytes {
            if held >= limit {
                return Err(QuotaError::Author {
                    author: *owner,
                    used: held,
                    limit,
                });
            }
        }
        match self.limits.total_bytes {
            Some(limit) if self.total >= limit => Err(QuotaError::Total {
                used: self.total,
                limit,
            }),
            _ => Ok(()),
        }
    }
}

/// The bytes of the files under `repo`'s `objects/` directory (packs, indexes, loose
/// objects); 0 when it cannot be read.
pub(crate) fn objects_bytes(repo: &Path) -> u64 {
    bytes_under(&repo.join("objects"), 3)
}

/// The bytes of the files under `dir`, `depth` levels down at most.
fn bytes_under(dir: &Path, depth: u8) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() && depth > 0 => bytes_under(&entry.path(), depth - 1),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |meta| meta.len()),
            _ => 0,
        })
        .fold(0, u64::saturating_add)
}
