//! A reconciliation against a mocked [`GitBackend`]: which git operations it runs,
//! which a real repository cannot show (a reconciliation that reads the refs twice, or
//! tries to point a ref at a missing object and fails, ends the same there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::RefChange;
use grasp_sync_test_support::nip34::{state, Announcement};
use mockall::{automock, predicate};
use nostr::prelude::Keys;

use super::Reconciler;
use crate::git::{FetchReport, GitBackend, GitError, LocalRefs};
use crate::repos::{MemoryAnnouncements, RepoLocator};

/// [`GitBackend`]'s operations, each call recorded by mockall. A synchronous copy of the
/// trait, forwarded to by [`Mocked`]: mockall cannot mock the `Option<&str>` argument of
/// an `async_trait` method.
#[automock]
trait Git: Send + Sync {
    fn fetch(&self, repo: &Path, url: &str, oids: &[GitOid]) -> Result<FetchReport, GitError>;
    fn existing(&self, repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError>;
    fn existing_given_refs(
        &self,
        repo: &Path,
        oids: &[GitOid],
        refs: &LocalRefs,
    ) -> Result<BTreeSet<GitOid>, GitError>;
    fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError>;
    fn purgatory_refs(&self, repo: &Path) -> Result<Vec<String>, GitError>;
    fn local_refs(&self, repo: &Path) -> Result<LocalRefs, GitError>;
    fn apply_ref_changes(
        &self,
        repo: &Path,
        changes: &[RefChange],
        head: Option<String>,
    ) -> Result<(), GitError>;
    fn init_bare(&self, repo: &Path) -> Result<(), GitError>;
    fn prune_unreachable(&self, repo: &Path) -> Result<(), GitError>;
}

/// A [`GitBackend`] that hands every call to its mock.
struct Mocked(MockGit);

#[async_trait]
impl GitBackend for Mocked {
    async fn fetch(
        &self,
        repo: &Path,
        url: &str,
        oids: &[GitOid],
    ) -> Result<FetchReport, GitError> {
        self.0.fetch(repo, url, oids)
    }

    async fn existing(&self, repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError> {
        self.0.existing(repo, oids)
    }

    async fn existing_given_refs(
        &self,
        repo: &Path,
        oids: &[GitOid],
        refs: &LocalRefs,
    ) -> Result<BTreeSet<GitOid>, GitError> {
        self.0.existing_given_refs(repo, oids, refs)
    }

    async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError> {
        self.0.update_refs(repo, updates)
    }

    async fn purgatory_refs(&self, repo: &Path) -> Result<Vec<String>, GitError> {
        self.0.purgatory_refs(repo)
    }

    async fn local_refs(&self, repo: &Path) -> Result<LocalRefs, GitError> {
        self.0.local_refs(repo)
    }

    async fn apply_ref_changes(
        &self,
        repo: &Path,
        changes: &[RefChange],
        head: Option<&str>,
    ) -> Result<(), GitError> {
        self.0
            .apply_ref_changes(repo, changes, head.map(str::to_owned))
    }

    async fn init_bare(&self, repo: &Path) -> Result<(), GitError> {
        self.0.init_bare(repo)
    }

    async fn prune_unreachable(&self, repo: &Path) -> Result<(), GitError> {
        self.0.prune_unreachable(repo)
    }
}

const TARGET: &str = "/srv/git/npub/test.git";
const TIP: &str = "1111111111111111111111111111111111111111";

/// Every repository is at [`TARGET`].
struct AtTarget;

impl RepoLocator for AtTarget {
    fn locate(&self, _repo: &RepoRef) -> Option<PathBuf> {
        Some(PathBuf::from(TARGET))
    }
}

/// A repository announced by its owner whose state points `refs/heads/b0` at [`TIP`],
/// and a reconciler of it over `git`.
fn reconciler(git: MockGit) -> (Reconciler, RepoRef) {
    let owner = Keys::generate();
    let announcements = MemoryAnnouncements::new();
    announcements
        .add(
            Announcement::new("test")
                .clone_urls(["https://example.com/test.git"])
                .sign(&owner),
        )
        .unwrap();
    announcements.add_event(state(&owner, "test", &[TIP], 1_750_000_000));
    let repo = RepoRef::new(owner.public_key(), "test").unwrap();
    let reconciler = Reconciler::new(
        Arc::new(announcements),
        Arc::new(AtTarget),
        Arc::new(Mocked(git)),
        false,
        crate::DEFAULT_MAX_PULL_REQUEST_TIPS,
    );
    (reconciler, repo)
}

fn tip() -> GitOid {
    GitOid::parse(TIP).unwrap()
}

/// A git mock that reads empty refs once and must never fetch nor read the refs again
/// for the presence check (the refs just read are handed to it: one git process less).
fn git_with_empty_refs() -> MockGit {
    let mut git = MockGit::new();
    git.expect_local_refs()
        .with(predicate::eq(Path::new(TARGET)))
        .times(1)
        .returning(|_| {
            Ok(LocalRefs {
                refs: BTreeMap::new(),
                head: None,
            })
        });
    git.expect_existing().never();
    git.expect_fetch().never();
    git
}

/// The state's objects are present: the refs are read once, the presence check reuses
/// them, and the ref is written in one transaction; nothing is fetched.
#[tokio::test]
async fn present_objects_are_served_with_one_read_of_the_refs_and_one_write() {
    let mut git = git_with_empty_refs();
    git.expect_existing_given_refs()
        .withf(|path, oids, refs| {
            path == Path::new(TARGET) && oids == [tip()] && refs.refs.is_empty()
        })
        .times(1)
        .returning(|_, oids, _| Ok(oids.iter().cloned().collect()));
    git.expect_apply_ref_changes()
        .withf(|path, changes, _| {
            path == Path::new(TARGET)
                && changes
                    == [RefChange {
                        name: "refs/heads/b0".to_owned(),
                        old: None,
                        new: Some(tip()),
                    }]
        })
        .times(1)
        .returning(|_, _, _| Ok(()));
    let (reconciler, repo) = reconciler(git);
    let reconciled = reconciler.reconcile(&repo).await.unwrap();
    assert_eq!(reconciled.refs_updated, 1);
    assert!(reconciled.to_fetch.is_empty());
}

/// The state's objects are missing: no ref is pointed at them (git would refuse, and a
/// real repository would only show the error), and the state is handed back to be held
/// and fetched; the reconciler itself fetches nothing.
#[tokio::test]
async fn missing_objects_are_never_written_to_a_ref_and_are_handed_back() {
    let mut git = git_with_empty_refs();
    git.expect_existing_given_refs()
        .times(1)
        .returning(|_, _, _| Ok(BTreeSet::new()));
    git.expect_apply_ref_changes()
        .withf(|_, changes, _| changes.iter().all(|change| change.new != Some(tip())))
        .returning(|_, _, _| Ok(()));
    let (reconciler, repo) = reconciler(git);
    let reconciled = reconciler.reconcile(&repo).await.unwrap();
    assert_eq!(reconciled.refs_updated, 0);
    assert_eq!(reconciled.to_fetch.len(), 1);
}
