//! The sync functions against a mocked [`SyncContext`]: what they ask of the context,
//! how often and in which order, where the in-memory context of `tests.rs` only shows
//! the end state (a release that releases nothing, or a read of the store that changes
//! nothing, leaves no trace there).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::{OwnService, RepositoryData, SyncContext, SyncContextError};
use grasp_sync_core::url_policy::{CloneUrl, CloneUrlPolicy};
use mockall::{mock, predicate, Sequence};

use super::tests::{manager, oid, repo, repository, ONE};
use super::{sync_identifier, sync_identifier_from_url, FromUrl};

mock! {
    Ctx {}

    #[async_trait::async_trait]
    impl SyncContext for Ctx {
        async fn fetch_repository_data(
            &self,
            repo: &RepoRef,
        ) -> Result<RepositoryData, SyncContextError>;
        fn collect_needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid>;
        fn oid_exists(&self, repo: &RepoRef, oid: &GitOid) -> bool;
        async fn fetch_oids(
            &self,
            repo_path: &Path,
            url: &CloneUrl,
            oids: &[GitOid],
        ) -> Result<Vec<GitOid>, SyncContextError>;
        async fn process_satisfiable_events(
            &self,
            repo: &RepoRef,
        ) -> Result<usize, SyncContextError>;
        fn has_pending_events(&self, repo: &RepoRef) -> bool;
        fn find_target_repo(&self, repo: &RepoRef) -> Option<PathBuf>;
        fn creates_repositories(&self) -> bool;
        async fn create_target_repo(&self, repo: &RepoRef) -> Result<PathBuf, SyncContextError>;
        fn own_service(&self) -> &OwnService;
        async fn move_to_home_repositories(
            &self,
            repo: &RepoRef,
        ) -> Result<Vec<RepoRef>, SyncContextError>;
    }
}

const TARGET: &str = "/srv/git/test.git";

/// A context whose repository has a local repository at [`TARGET`], lists `urls`,
/// and holds events that need `needed` (read any number of times).
fn context(urls: &'static [&'static str], needed: &[GitOid]) -> MockCtx {
    let mut ctx = MockCtx::new();
    let needed: BTreeSet<GitOid> = needed.iter().cloned().collect();
    ctx.expect_find_target_repo()
        .returning(|_| Some(PathBuf::from(TARGET)));
    ctx.expect_collect_needed_oids()
        .returning(move |_| needed.clone());
    ctx.expect_fetch_repository_data()
        .returning(move |_| Ok(repository(urls)));
    ctx
}

/// A fetch that brings objects is one request to the URL for exactly the objects the
/// repository needs, into its local repository, and is followed by one release, not
/// before.
#[tokio::test]
async fn a_fetch_asks_the_url_once_for_what_is_needed_then_releases_once() {
    let mut ctx = context(&[ONE], &[oid(1), oid(2)]);
    let mut order = Sequence::new();
    ctx.expect_fetch_oids()
        .withf(|path, url, oids| {
            path == Path::new(TARGET) && url.as_str() == ONE && oids == [oid(1), oid(2)]
        })
        .times(1)
        .in_sequence(&mut order)
        .returning(|_, _, oids| Ok(oids.to_vec()));
    ctx.expect_process_satisfiable_events()
        .with(predicate::eq(repo()))
        .times(1)
        .in_sequence(&mut order)
        .returning(|_| Ok(1));
    let url = CloneUrlPolicy::new().check(ONE).unwrap();
    let outcome = sync_identifier_from_url(&ctx, &repo(), &url, &manager()).await;
    assert!(matches!(outcome, FromUrl::Fetched(2)), "{outcome:?}");
}

/// A fetch that brought nothing releases nothing: no release is asked for (with the
/// git context a release reads the store and the repository for nothing).
#[tokio::test]
async fn a_fetch_that_brings_nothing_asks_for_no_release() {
    let mut ctx = context(&[ONE], &[oid(1)]);
    ctx.expect_fetch_oids()
        .times(1)
        .returning(|_, _, _| Ok(Vec::new()));
    ctx.expect_process_satisfiable_events().never();
    let url = CloneUrlPolicy::new().check(ONE).unwrap();
    let outcome = sync_identifier_from_url(&ctx, &repo(), &url, &manager()).await;
    assert!(matches!(outcome, FromUrl::Fetched(0)), "{outcome:?}");
}

/// When the objects arrived meanwhile (a push), an attempt releases the events once
/// and is done: it reads no clone URLs, creates no repository and fetches nothing.
#[tokio::test]
async fn objects_already_present_are_released_once_without_reading_urls_or_fetching() {
    let mut ctx = MockCtx::new();
    let mut order = Sequence::new();
    ctx.expect_has_pending_events()
        .times(1)
        .in_sequence(&mut order)
        .return_const(true);
    ctx.expect_process_satisfiable_events()
        .with(predicate::eq(repo()))
        .times(1)
        .in_sequence(&mut order)
        .returning(|_| Ok(1));
    ctx.expect_has_pending_events()
        .times(1)
        .in_sequence(&mut order)
        .return_const(false);
    ctx.expect_fetch_repository_data().never();
    ctx.expect_create_target_repo().never();
    ctx.expect_fetch_oids().never();
    let report = sync_identifier(&ctx, &repo(), &manager()).await;
    assert!(report.is_complete(), "{report:?}");
}
