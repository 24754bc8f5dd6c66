//! The git operations purgatory needs, as a trait: [`GitFetcher`] runs the git command
//! line; tests may put an in-memory implementation in its place.

use std::collections::BTreeSet;
use std::path::Path;

use async_trait::async_trait;
use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::purgatory::RefChange;

use super::error::GitError;
use super::fetch::{FetchReport, GitFetcher};
use super::refs::LocalRefs;

/// The git operations purgatory needs. [`GitFetcher`] runs the git command line; tests
/// may put an in-memory implementation in its place.
#[async_trait]
pub trait GitBackend: Send + Sync {
    /// Fetches `oids` from `url` into the bare repository at `repo` with one request to
    /// the server, and reports which are present afterwards. Must refuse URLs its policy
    /// refuses without side effects.
    async fn fetch(&self, repo: &Path, url: &str, oids: &[GitOid])
        -> Result<FetchReport, GitError>;

    /// Which of `oids` exist in the repository at `repo`.
    async fn existing(&self, repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError>;

    /// [`GitBackend::existing`] in a repository whose refs `refs` the caller just read
    /// (a reconciliation): the default ignores them.
    async fn existing_given_refs(
        &self,
        repo: &Path,
        oids: &[GitOid],
        refs: &LocalRefs,
    ) -> Result<BTreeSet<GitOid>, GitError> {
        let _ = refs;
        self.existing(repo, oids).await
    }

    /// Points refs at objects (`Some`) or deletes them (`None`).
    async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError>;

    /// The names of the refs under `refs/purgatory/` in the repository at `repo`.
    async fn purgatory_refs(&self, repo: &Path) -> Result<Vec<String>, GitError>;

    /// Every ref of the repository at `repo` and `HEAD`'s target.
    async fn local_refs(&self, repo: &Path) -> Result<LocalRefs, GitError>;

    /// Applies `changes` in one transaction checking each old value (nothing applies
    /// if a ref moved meanwhile), then points `HEAD` at `head` when given.
    async fn apply_ref_changes(
        &self,
        repo: &Path,
        changes: &[RefChange],
        head: Option<&str>,
    ) -> Result<(), GitError>;

    /// Makes the existing, empty directory `repo` a bare repository whose
    /// `refs/purgatory/` are hidden from fetches and pushes
    /// ([`HIDE_REFS_KEYS`](super::HIDE_REFS_KEYS)).
    async fn init_bare(&self, repo: &Path) -> Result<(), GitError>;

    /// Copies `oids` from the local bare repository at `from` into the one at `to`
    /// (another repository's local copy, never a URL from an event: no server is
    /// asked), keeping them under `refs/purgatory/<oid>` like a fetch, and reports
    /// which of `oids` are present in `to` afterwards. Objects `from` lacks are not
    /// copied (not an error). The default copies nothing: the objects are then fetched
    /// from clone URLs.
    async fn copy_objects(
        &self,
        from: &Path,
        to: &Path,
        oids: &[GitOid],
    ) -> Result<BTreeSet<GitOid>, GitError> {
        let _ = (from, to, oids);
        Ok(BTreeSet::new())
    }

    /// Deletes the objects of the repository at `repo` that no ref reaches (those
    /// fetched for events that left purgatory unreleased, once their refs were
    /// swept). The default does nothing (a backend that keeps no objects).
    async fn prune_unreachable(&self, repo: &Path) -> Result<(), GitError> {
        let _ = repo;
        Ok(())
    }
}

#[async_trait]
impl GitBackend for GitFetcher {
    async fn fetch(
        &self,
        repo: &Path,
        url: &str,
        oids: &[GitOid],
    ) -> Result<FetchReport, GitError> {
        GitFetcher::fetch(self, repo, url, oids).await
    }

    async fn existing(&self, repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError> {
        GitFetcher::existing(self, repo, oids).await
    }

    async fn existing_given_refs(
        &self,
        repo: &Path,
        oids: &[GitOid],
        refs: &LocalRefs,
    ) -> Result<BTreeSet<GitOid>, GitError> {
        GitFetcher::existing_given_refs(self, repo, oids, refs).await
    }

    async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError> {
        GitFetcher::update_refs(self, repo, updates).await
    }

    async fn purgatory_refs(&self, repo: &Path) -> Result<Vec<String>, GitError> {
        GitFetcher::purgatory_refs(self, repo).await
    }

    async fn init_bare(&self, repo: &Path) -> Result<(), GitError> {
        GitFetcher::init_bare(self, repo).await
    }

    async fn prune_unreachable(&self, repo: &Path) -> Result<(), GitError> {
        GitFetcher::prune_unreachable(self, repo).await
    }

    async fn copy_objects(
        &self,
        from: &Path,
        to: &Path,
        oids: &[GitOid],
    ) -> Result<BTreeSet<GitOid>, GitError> {
        GitFetcher::copy_objects(self, from, to, oids).await
    }

    async fn local_refs(&self, repo: &Path) -> Result<LocalRefs, GitError> {
        GitFetcher::local_refs(self, repo).await
    }

    async fn apply_ref_changes(
        &self,
        repo: &Path,
        changes: &[RefChange],
        head: Option<&str>,
    ) -> Result<(), GitError> {
        GitFetcher::apply_ref_changes(self, repo, changes, head).await
    }
}
