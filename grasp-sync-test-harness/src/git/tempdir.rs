//! A unique temporary directory, removed on drop (no extra crates).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Distinguishes directories created by one process within the same nanosecond.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A freshly created, empty directory under [`std::env::temp_dir`], removed
/// (recursively) when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<tmp>/<prefix>-<pid>-<counter>-<nanos>`; panics if it cannot.
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating temp dir {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(child)`.
    pub fn join(&self, child: impl AsRef<Path>) -> PathBuf {
        self.path.join(child)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir must not turn a passing test into a panic.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `<prefix>-<pid>-<counter>-<nanos since epoch>`.
fn unique_name(prefix: &str) -> String {
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{count}-{nanos}", std::process::id())
}
