//! Creating a repository's local bare repository where the layout puts it, safely: the
//! repository appears whole (initialised and configured) or not at all, and two
//! creators racing for it both succeed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::git::{GitBackend, GitError};

/// Distinguishes the scratch directories of concurrent creations in one process.
static SCRATCH: AtomicU64 = AtomicU64::new(0);

/// Why a local repository could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateRepoError {
    /// A directory could not be created, moved into place or cleaned up.
    #[error("{operation} {path} failed: {source}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `git init --bare` (or configuring the new repository) failed.
    #[error("initialising {path} failed: {source}")]
    Git {
        /// The directory being initialised.
        path: PathBuf,
        /// The error.
        #[source]
        source: GitError,
    },
}

/// Creates a bare repository at `path` (and its parent directories) with `git`, unless
/// a directory is already there. Returns whether this call created it.
///
/// The repository is initialised in a scratch directory beside `path` and renamed into
/// place, so nobody sees a half-made repository; when another creator wins the race, its
/// repository stays and the scratch directory is removed.
pub async fn create_bare_repository(
    git: &dyn GitBackend,
    path: &Path,
) -> Result<bool, CreateRepoError> {
    if path.is_dir() {
        return Ok(false);
    }
    let io = |operation, path: &Path| {
        let path = path.to_owned();
        move |source| CreateRepoError::Io {
            operation,
            path,
            source,
        }
    };
    let (Some(parent), Some(_)) = (path.parent(), path.file_name()) else {
        let source = std::io::Error::from(std::io::ErrorKind::InvalidInput);
        return Err(io("placing", path)(source));
    };
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(io("creating", parent))?;
    let scratch = parent.join(scratch_name(SCRATCH.fetch_add(1, Ordering::Relaxed)));
    tokio::fs::create_dir(&scratch)
        .await
        .map_err(io("creating", &scratch))?;
    if let Err(source) = git.init_bare(&scratch).await {
        remove_scratch(&scratch).await;
        return Err(CreateRepoError::Git {
            path: path.to_owned(),
            source,
        });
    }
    match tokio::fs::rename(&scratch, path).await {
        Ok(()) => Ok(true),
        Err(_) if path.is_dir() => {
            remove_scratch(&scratch).await;
            Ok(false)
        }
        Err(source) => {
            remove_scratch(&scratch).await;
            Err(io("moving into place", path)(source))
        }
    }
}

/// The name of the `n`th scratch directory of this process: `.creating-<pid>-<n>`, a
/// few dozen bytes whatever the repository's name (a name built from the identifier
/// would pass the file system's 255 bytes long before the identifier's own limit).
fn scratch_name(n: u64) -> String {
    format!(".creating-{}-{n}", std::process::id())
}

/// Removes a scratch directory, logging a failure (it holds an empty repository only).
async fn remove_scratch(scratch: &Path) {
    if let Err(error) = tokio::fs::remove_dir_all(scratch).await {
        tracing::warn!(path = %scratch.display(), %error, "removing a scratch repository failed");
    }
}
