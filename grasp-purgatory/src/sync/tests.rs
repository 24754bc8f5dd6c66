//! The spec's unit tests of the sync functions, on the core's in-memory context.

use std::sync::Arc;

use grasp_sync_core::nip34::{GitOid, RepoAnnouncement, RepoRef};
use grasp_sync_core::purgatory::{
    FetchCall, MemorySyncContext, NotFetchable, QueueStep, RepositoryData, ThrottleConfig,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use nostr::prelude::Keys;
use nostr::prelude::PublicKey;

use super::*;
use crate::git::StaticResolver;
use crate::throttle_manager::DomainStep;
use grasp_sync_core::clock::{Clock, SystemClock};

pub(super) const ONE: &str = "https://example.com/repo.git";
const TWO: &str = "https://other.com/repo.git";

pub(super) fn oid(n: u8) -> GitOid {
    GitOid::parse(&grasp_sync_test_support::ids::oid(n)).unwrap()
}

/// The repository the tests sync: `30617:<the generator point>:test`.
pub(super) fn repo() -> RepoRef {
    let owner =
        PublicKey::from_hex("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
            .unwrap();
    RepoRef::new(owner, "test").unwrap()
}

pub(super) fn repository(urls: &[&str]) -> RepositoryData {
    RepositoryData {
        announcements: vec![RepoAnnouncement {
            repo: repo(),
            relays: Vec::new(),
            clone_urls: urls.iter().map(|url| (*url).to_owned()).collect(),
            maintainers: Vec::new(),
            skipped: Vec::new(),
        }],
        event_sources: Vec::new(),
    }
}

/// A context holding one event of [`repo`] that needs `needed`, with these URLs.
fn context(urls: &[&str], needed: &[GitOid]) -> Arc<MemorySyncContext> {
    let ctx = MemorySyncContext::new();
    ctx.add_repository(&repo(), repository(urls));
    if !needed.is_empty() {
        ctx.add_pending_event(&repo(), needed.iter().cloned());
    }
    Arc::new(ctx)
}

pub(super) fn manager() -> ThrottleManager {
    manager_with(ThrottleConfig::default())
}

fn manager_with(config: ThrottleConfig) -> ThrottleManager {
    manager_resolving(config, StaticResolver::new())
}

/// A manager whose host names resolve through `resolver`.
fn manager_resolving(config: ThrottleConfig, resolver: StaticResolver) -> ThrottleManager {
    ThrottleManager::new(
        config,
        Arc::new(SystemClock::new()),
        CloneUrlPolicy::new(),
        grasp_sync_core::purgatory::DEFAULT_MAX_CLONE_URLS,
        crate::metrics::Metrics::new().unwrap(),
        Arc::new(resolver),
    )
}

/// Two names of two registrable domains, pointing into one /24.
const NAMED_ONE: &str = "https://git.one.test/repo.git";
const NAMED_TWO: &str = "https://git.two.test/repo.git";
const BLOCK: &str = "203.0.113.0/24";

fn one_block() -> StaticResolver {
    StaticResolver::new()
        .with("git.one.test", ["203.0.113.1".parse().unwrap()])
        .with("git.two.test", ["203.0.113.2".parse().unwrap()])
}

/// Names are throttled by the address block they resolve to as well as by their name:
/// with the block full (5 requests to `git.one.test`), a request to `git.two.test`, a
/// domain of its own, does not start either.
#[tokio::test]
async fn names_of_other_domains_in_a_full_address_block_fetch_nothing() {
    let ctx = context(&[NAMED_TWO], &[oid(1)]);
    ctx.set_remote(NAMED_TWO, [oid(1)]);
    let manager = manager_resolving(ThrottleConfig::default(), one_block());
    let one = CloneUrlPolicy::new().check(NAMED_ONE).unwrap();
    assert_eq!(manager.address_block(&one).await.as_deref(), Some(BLOCK));
    for _ in 0..5 {
        assert_eq!(
            manager.try_start_request_in("one.test", Some(BLOCK)),
            Slot::Started
        );
    }
    let two = CloneUrlPolicy::new().check(NAMED_TWO).unwrap();
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &two, &manager).await;
    assert!(
        matches!(&outcome, FromUrl::BlockThrottled(block) if block == BLOCK),
        "{outcome:?}"
    );
    assert!(ctx.fetch_log().is_empty());
    assert_eq!(manager.in_flight("two.test"), 0);
    manager.complete_request_in("one.test", Some(BLOCK));
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &two, &manager).await;
    assert!(matches!(outcome, FromUrl::Fetched(1)), "{outcome:?}");
}

/// A host the operator gave limits of its own is a throttle key of its own and takes no
/// slot of its address block: with the block full (5 requests to `git.one.test`), the
/// overridden `git.two.test` fetches, under its own key, and the block stays at 5. A
/// stranger's name pointing at the same server (`evil.test`) still waits for the block.
#[tokio::test]
async fn an_overridden_host_fetches_beside_a_full_address_block() {
    let resolver = one_block().with("evil.test", ["203.0.113.2".parse().unwrap()]);
    let manager = manager_resolving(ThrottleConfig::default(), resolver)
        .with_host_limits("git.two.test=120/10".parse().unwrap());
    let two = CloneUrlPolicy::new().check(NAMED_TWO).unwrap();
    assert_eq!(manager.throttle_key(&two), "git.two.test");
    assert_eq!(manager.address_block(&two).await, None);
    let evil = CloneUrlPolicy::new()
        .check("https://evil.test/r.git")
        .unwrap();
    assert_eq!(manager.throttle_key(&evil), "evil.test");
    assert_eq!(manager.address_block(&evil).await.as_deref(), Some(BLOCK));
    for _ in 0..5 {
        manager.try_start_request_in("one.test", Some(BLOCK));
    }
    let ctx = context(&[NAMED_TWO], &[oid(1)]);
    ctx.set_remote(NAMED_TWO, [oid(1)]);
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &two, &manager).await;
    assert!(matches!(outcome, FromUrl::Fetched(1)), "{outcome:?}");
    assert_eq!(manager.in_flight(BLOCK), 5);
    let (hosts, total) = manager.throttled_hosts();
    assert_eq!(total, 3, "{hosts:?}");
    let two = hosts.iter().find(|h| h.key == "git.two.test").unwrap();
    assert!(two.overridden);
    assert_eq!(two.limit.to_string(), "120/10");
    assert_eq!(two.started_in_window, 1);
    let block = hosts.iter().find(|h| h.key == BLOCK).unwrap();
    assert!(!block.overridden);
    assert_eq!(block.limit.to_string(), "30/5");
    assert_eq!(block.in_flight, 5);

    let ctx = context(&["https://evil.test/r.git"], &[oid(2)]);
    ctx.set_remote("https://evil.test/r.git", [oid(2)]);
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &evil, &manager).await;
    assert!(
        matches!(&outcome, FromUrl::BlockThrottled(block) if block == BLOCK),
        "{outcome:?}"
    );
}

/// A queued repository whose block is full waits without spinning: its domain's queue
/// yields nothing more until the block's next completion, then serves it.
#[tokio::test]
async fn a_queue_waiting_for_a_full_block_moves_when_the_block_frees() {
    let ctx = context(&[NAMED_TWO], &[oid(1)]);
    ctx.set_remote(NAMED_TWO, [oid(1)]);
    let manager = manager_resolving(ThrottleConfig::default(), one_block());
    for _ in 0..5 {
        manager.try_start_request_in("one.test", Some(BLOCK));
    }
    while manager.poll_step().is_some() {}
    let key = repo().to_string();
    manager.enqueue_identifier("two.test", &key, HashSet::new());
    let step = manager
        .poll_step()
        .expect("the queue serves the repository");
    assert_eq!(step.step, QueueStep::Serve(key.clone()));
    serve_queued_identifier(ctx.as_ref(), "two.test", &key, &manager).await;
    assert!(ctx.fetch_log().is_empty());
    assert_eq!(
        manager.poll_step(),
        None,
        "no busy retry while the block is full"
    );
    manager.complete_request_in("one.test", Some(BLOCK));
    let steps: Vec<DomainStep> = std::iter::from_fn(|| manager.poll_step()).collect();
    assert!(
        steps
            .iter()
            .any(|s| s.domain == "two.test" && s.step == QueueStep::Serve(key.clone())),
        "{steps:?}"
    );
    serve_queued_identifier(ctx.as_ref(), "two.test", &key, &manager).await;
    assert_eq!(ctx.fetch_log().len(), 1);
    assert_eq!(ctx.released(&repo()), 1);
}

fn tried(urls: &[&str]) -> HashSet<String> {
    urls.iter().map(|url| (*url).to_owned()).collect()
}

async fn next(ctx: &Arc<MemorySyncContext>, domain: Option<&str>, skip: &[&str]) -> Option<String> {
    let manager = manager();
    sync_identifier_next_url(ctx.as_ref(), &repo(), domain, &tried(skip), &manager)
        .await
        .map(|url| url.as_str().to_owned())
}

#[tokio::test]
async fn next_url_is_none_without_pending_events() {
    let ctx = context(&[ONE], &[]);
    assert_eq!(next(&ctx, None, &[]).await, None);
}

#[tokio::test]
async fn next_url_is_none_when_no_object_is_needed() {
    let ctx = context(&[ONE], &[oid(1)]);
    ctx.add_local_oid(oid(1));
    assert_eq!(next(&ctx, None, &[]).await, None);
}

#[tokio::test]
async fn next_url_returns_a_url_of_a_domain_with_capacity() {
    let ctx = context(&[ONE], &[oid(1)]);
    assert_eq!(next(&ctx, None, &[]).await.as_deref(), Some(ONE));
}

#[tokio::test]
async fn next_url_skips_tried_urls() {
    let ctx = context(&[ONE, TWO], &[oid(1)]);
    assert_eq!(next(&ctx, None, &[ONE]).await.as_deref(), Some(TWO));
}

#[tokio::test]
async fn next_url_for_a_domain_returns_only_that_domain() {
    let ctx = context(&[ONE, TWO], &[oid(1)]);
    assert_eq!(
        next(&ctx, Some("other.com"), &[]).await.as_deref(),
        Some(TWO)
    );
    assert_eq!(next(&ctx, Some("other.com"), &[TWO]).await, None);
}

#[tokio::test]
async fn next_url_is_none_when_every_url_was_tried() {
    let ctx = context(&[ONE], &[oid(1)]);
    assert_eq!(next(&ctx, None, &[ONE]).await, None);
}

#[tokio::test]
async fn next_url_skips_throttled_domains_and_urls_the_policy_refuses() {
    let ctx = context(
        &["file:///etc/passwd", "https://10.0.0.1/r.git", ONE, TWO],
        &[oid(1)],
    );
    let manager = manager();
    for _ in 0..5 {
        assert!(manager.try_start_request("example.com"));
    }
    let url =
        sync_identifier_next_url(ctx.as_ref(), &repo(), None, &HashSet::new(), &manager).await;
    assert_eq!(url.map(|u| u.as_str().to_owned()).as_deref(), Some(TWO));
}

#[tokio::test]
async fn from_url_fetches_and_releases() {
    let ctx = context(&[ONE], &[oid(1)]);
    ctx.set_remote(ONE, [oid(1)]);
    let manager = manager();
    let url = CloneUrlPolicy::new().check(ONE).unwrap();
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &url, &manager).await;
    assert!(matches!(outcome, FromUrl::Fetched(1)), "{outcome:?}");
    assert_eq!(ctx.released(&repo()), 1);
    assert!(!ctx.has_pending_events(&repo()));
    assert_eq!(manager.in_flight("example.com"), 0);
}

#[tokio::test]
async fn from_url_on_a_full_domain_fetches_nothing() {
    let ctx = context(&[ONE], &[oid(1)]);
    ctx.set_remote(ONE, [oid(1)]);
    let manager = manager();
    for _ in 0..5 {
        assert!(manager.try_start_request("example.com"));
    }
    let url = CloneUrlPolicy::new().check(ONE).unwrap();
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &url, &manager).await;
    assert!(matches!(outcome, FromUrl::Throttled), "{outcome:?}");
    assert!(ctx.fetch_log().is_empty());
}

#[tokio::test]
async fn full_sync_tries_the_second_server_when_the_first_lacks_the_objects() {
    let ctx = context(&[ONE, TWO], &[oid(1)]);
    ctx.set_remote(ONE, []);
    ctx.set_remote(TWO, [oid(1)]);
    let manager = manager();
    assert!(sync_identifier(ctx.as_ref(), &repo(), &manager)
        .await
        .is_complete());
    let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
    assert_eq!(urls, vec![ONE.to_owned(), TWO.to_owned()]);
    assert_eq!(ctx.released(&repo()), 1);
}

#[tokio::test]
async fn full_sync_leaves_the_identifier_with_a_throttled_domain() {
    let ctx = context(&[ONE, TWO], &[oid(1)]);
    ctx.set_remote(ONE, [oid(1)]);
    ctx.set_remote(TWO, []);
    let manager = manager();
    for _ in 0..5 {
        assert!(manager.try_start_request("example.com"));
    }
    assert!(!sync_identifier(ctx.as_ref(), &repo(), &manager)
        .await
        .is_complete());
    let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
    assert_eq!(urls, vec![TWO.to_owned()]);
    assert_eq!(manager.queued("example.com"), vec![repo().to_string()]);

    // A slot frees: the domain's queue serves the identifier from the throttled URL.
    manager.complete_request("example.com");
    let mut served = Vec::new();
    while let Some(step) = manager.poll_step() {
        if let QueueStep::Serve(identifier) = step.step {
            serve_queued_identifier(ctx.as_ref(), &step.domain, &identifier, &manager).await;
            served.push((step.domain, identifier));
        }
    }
    // Served once to fetch, and once more to find nothing left and leave the queue.
    let expected = ("example.com".to_owned(), repo().to_string());
    assert_eq!(served, vec![expected.clone(), expected]);
    assert!(!ctx.has_pending_events(&repo()));
    assert!(manager.queued("example.com").is_empty());
    assert_eq!(ctx.released(&repo()), 1);
    let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
    assert_eq!(urls, vec![TWO.to_owned(), ONE.to_owned()]);
}

#[tokio::test]
async fn full_sync_releases_objects_that_are_already_present_without_fetching() {
    let ctx = context(&[ONE], &[oid(1)]);
    ctx.add_local_oid(oid(1));
    let manager = manager();
    assert!(sync_identifier(ctx.as_ref(), &repo(), &manager)
        .await
        .is_complete());
    assert!(ctx.fetch_log().is_empty());
    assert_eq!(ctx.released(&repo()), 1);
}

#[tokio::test]
async fn a_server_lacking_some_objects_is_asked_one_at_a_time_each_in_its_own_slot() {
    let ctx = context(&[ONE], &[oid(1), oid(2), oid(3)]);
    ctx.set_remote_strict(ONE, [oid(1), oid(3)]);
    let mut throttle = ThrottleConfig::default();
    throttle.max_per_minute = 3;
    let manager = manager_with(throttle);
    let url = CloneUrlPolicy::new().check(ONE).unwrap();
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &url, &manager).await;
    // The request for all three, then one for oid 1 and one for oid 2: the window is
    // full, so oid 3 waits for the next attempt.
    assert!(matches!(outcome, FromUrl::Fetched(1)), "{outcome:?}");
    let asked: Vec<usize> = ctx.fetch_log().iter().map(|call| call.oids.len()).collect();
    assert_eq!(asked, vec![3, 1, 1]);
    assert!(manager.is_throttled("example.com"));
    assert_eq!(manager.in_flight("example.com"), 0);
    assert_eq!(
        ctx.collect_needed_oids(&repo()),
        [oid(2), oid(3)].into_iter().collect()
    );
}

#[tokio::test]
async fn another_repository_of_the_same_identifier_lends_no_url() {
    let ctx = MemorySyncContext::new();
    let stranger = RepoRef::new(Keys::generate().public_key(), "test").unwrap();
    ctx.add_repository(&stranger, repository(&[ONE]));
    ctx.add_pending_event(&repo(), [oid(1)]);
    ctx.set_remote(ONE, [oid(1)]);
    let manager = manager();
    let report = sync_identifier(&ctx, &repo(), &manager).await;
    assert_eq!(
        report.outcome,
        SyncOutcome::NotFetchable(NotFetchable::NoAnnouncement)
    );
    assert!(ctx.fetch_log().is_empty());
}

#[tokio::test]
async fn urls_on_our_own_service_are_never_fetched_and_counted() {
    let own = "https://ours.example/npub1x/test.git";
    let ctx = MemorySyncContext::new().with_our_domain("ours.example");
    ctx.add_repository(&repo(), repository(&[own, ONE]));
    ctx.add_pending_event(&repo(), [oid(1)]);
    ctx.set_remote(own, [oid(1)]);
    ctx.set_remote(ONE, [oid(1)]);
    let report = sync_identifier(&ctx, &repo(), &manager()).await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.own_service_urls_skipped, 1);
    let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
    assert_eq!(urls, vec![ONE.to_owned()]);

    let only_ours = MemorySyncContext::new().with_our_domain("ours.example");
    only_ours.add_repository(&repo(), repository(&[own]));
    only_ours.add_pending_event(&repo(), [oid(1)]);
    only_ours.set_remote(own, [oid(1)]);
    let report = sync_identifier(&only_ours, &repo(), &manager()).await;
    assert_eq!(
        report.outcome,
        SyncOutcome::NotFetchable(NotFetchable::OnlyOwnService)
    );
    assert!(only_ours.fetch_log().is_empty());
}

#[tokio::test]
async fn a_missing_repository_is_created_before_fetching_or_waited_for() {
    let ctx = context(&[ONE], &[oid(1)]);
    ctx.remove_local_repository(&repo());
    ctx.set_remote(ONE, [oid(1)]);
    assert!(sync_identifier(ctx.as_ref(), &repo(), &manager())
        .await
        .is_complete());
    assert!(ctx.find_target_repo(&repo()).is_some());

    let external = MemorySyncContext::new().with_repository_creation(false);
    external.add_repository(&repo(), repository(&[ONE]));
    external.add_pending_event(&repo(), [oid(1)]);
    external.remove_local_repository(&repo());
    external.set_remote(ONE, [oid(1)]);
    let report = sync_identifier(&external, &repo(), &manager()).await;
    assert_eq!(
        report.outcome,
        SyncOutcome::NotFetchable(NotFetchable::RepositoryMissing)
    );
    assert!(external.fetch_log().is_empty());
}

#[tokio::test]
async fn a_failed_fetch_is_a_retry_with_its_error() {
    let ctx = context(&[ONE], &[oid(1)]);
    ctx.set_remote_error(ONE, "connection refused");
    let report = sync_identifier(ctx.as_ref(), &repo(), &manager()).await;
    let SyncOutcome::Retry {
        last_error: Some(error),
    } = report.outcome
    else {
        panic!("a retry with an error: {report:?}");
    };
    assert!(error.contains("connection refused"), "{error}");
}

/// The core's context, freeing one slot of `domain` when the repository data is read
/// for the `free_on`-th time (between choosing a URL and enqueueing with domains), each
/// fetch asking for the first `asks_at_most` objects only (as the git fetcher asks for
/// [`MAX_OIDS_PER_FETCH`](crate::git::MAX_OIDS_PER_FETCH) at most).
struct FreesASlot<'a> {
    inner: &'a MemorySyncContext,
    manager: &'a ThrottleManager,
    domain: &'static str,
    free_on: usize,
    reads: std::sync::atomic::AtomicUsize,
    asks_at_most: usize,
}

#[async_trait::async_trait]
impl SyncContext for FreesASlot<'_> {
    async fn fetch_repository_data(
        &self,
        repo: &RepoRef,
    ) -> Result<RepositoryData, SyncContextError> {
        let read = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if read == self.free_on {
            self.manager.complete_request(self.domain);
        }
        self.inner.fetch_repository_data(repo).await
    }
    fn collect_needed_oids(&self, repo: &RepoRef) -> std::collections::BTreeSet<GitOid> {
        self.inner.collect_needed_oids(repo)
    }
    fn oid_exists(&self, repo: &RepoRef, oid: &GitOid) -> bool {
        self.inner.oid_exists(repo, oid)
    }
    async fn fetch_oids(
        &self,
        repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError> {
        let asked = &oids[..oids.len().min(self.asks_at_most)];
        self.inner.fetch_oids(repo_path, url, asked).await
    }
    async fn process_satisfiable_events(&self, repo: &RepoRef) -> Result<usize, SyncContextError> {
        self.inner.process_satisfiable_events(repo).await
    }
    fn has_pending_events(&self, repo: &RepoRef) -> bool {
        self.inner.has_pending_events(repo)
    }
    fn find_target_repo(&self, repo: &RepoRef) -> Option<std::path::PathBuf> {
        self.inner.find_target_repo(repo)
    }
    fn creates_repositories(&self) -> bool {
        self.inner.creates_repositories()
    }
    async fn create_target_repo(
        &self,
        repo: &RepoRef,
    ) -> Result<std::path::PathBuf, SyncContextError> {
        self.inner.create_target_repo(repo).await
    }
    fn own_service(&self) -> &grasp_sync_core::purgatory::OwnService {
        self.inner.own_service()
    }

    async fn move_to_home_repositories(
        &self,
        repo: &RepoRef,
    ) -> Result<Vec<RepoRef>, SyncContextError> {
        self.inner.move_to_home_repositories(repo).await
    }
}

#[tokio::test]
async fn a_domain_that_frees_a_slot_after_the_url_was_chosen_still_gets_the_repository() {
    let inner = context(&[ONE], &[oid(1)]);
    inner.set_remote(ONE, [oid(1)]);
    let manager = manager();
    for _ in 0..5 {
        assert!(manager.try_start_request("example.com"));
    }
    // The repository data is read once per attempt (the candidates are chosen once);
    // no slot frees during it, one frees right after.
    let ctx = FreesASlot {
        inner: inner.as_ref(),
        manager: &manager,
        domain: "example.com",
        free_on: 0,
        reads: std::sync::atomic::AtomicUsize::new(0),
        asks_at_most: usize::MAX,
    };
    let report = sync_identifier(&ctx, &repo(), &manager).await;
    assert_eq!(report.outcome, SyncOutcome::Retry { last_error: None });
    assert_eq!(
        ctx.reads.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "candidates are chosen once per attempt"
    );
    manager.complete_request("example.com");
    assert!(!manager.is_throttled("example.com"), "the slot freed");
    assert_eq!(
        manager.queued("example.com"),
        vec![repo().to_string()],
        "waits in the domain's queue instead of backing off alone"
    );
}

#[tokio::test]
async fn objects_beyond_one_fetch_are_asked_for_again_in_the_same_attempt() {
    // A state naming 600 commits, a fetcher asking for MAX_OIDS_PER_FETCH (256) at a
    // time: three requests to the one server, all in the first attempt (no backoff).
    let needed: Vec<GitOid> = (1..=600u32)
        .map(|n| GitOid::parse(&format!("{n:040x}")).unwrap())
        .collect();
    let inner = context(&[ONE], &needed);
    inner.set_remote(ONE, needed.iter().cloned());
    let manager = manager();
    let ctx = FreesASlot {
        inner: inner.as_ref(),
        manager: &manager,
        domain: "example.com",
        free_on: 0,
        reads: std::sync::atomic::AtomicUsize::new(0),
        asks_at_most: crate::git::MAX_OIDS_PER_FETCH,
    };
    let report = sync_identifier(&ctx, &repo(), &manager).await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(inner.released(&repo()), 1);
    let asked: Vec<usize> = inner
        .fetch_log()
        .into_iter()
        .map(|call| call.oids.len())
        .collect();
    assert_eq!(
        asked,
        vec![256, 256, 88],
        "one server, asked until it gave all"
    );
}

#[tokio::test]
async fn one_attempt_over_many_urls_reads_and_normalises_the_clone_urls_once() {
    // Twelve servers that lack the objects (each tried once), and a pull request's fork
    // that has its tip: what each URL is asked for comes from one reading of the
    // repository's URLs, not one per URL tried (the policy run on every listed URL).
    let urls: Vec<String> = (0..12)
        .map(|n| format!("https://host{n}.test/repo.git"))
        .collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let inner = context(&url_refs, &[oid(1)]);
    inner.add_pending_event(&repo(), [oid(2)]);
    let mut data = repository(&url_refs);
    data.event_sources
        .push(grasp_sync_core::purgatory::EventSource {
            missing: [oid(2)].into(),
            clone_urls: vec!["https://FORK.test/repo.git".to_owned()],
        });
    inner.add_repository(&repo(), data);
    inner.set_remote("https://fork.test/repo.git", [oid(2)]);
    let manager = manager();
    let ctx = FreesASlot {
        inner: inner.as_ref(),
        manager: &manager,
        domain: "unused.test",
        free_on: 0,
        reads: std::sync::atomic::AtomicUsize::new(0),
        asks_at_most: usize::MAX,
    };
    let report = sync_identifier(&ctx, &repo(), &manager).await;
    assert!(
        matches!(report.outcome, SyncOutcome::Retry { .. }),
        "{report:?}"
    );
    let log = inner.fetch_log();
    assert_eq!(log.len(), 13, "every URL tried once: {log:?}");
    let fork: Vec<&FetchCall> = log
        .iter()
        .filter(|call| call.url == "https://fork.test/repo.git")
        .collect();
    assert_eq!(fork.len(), 1);
    assert_eq!(fork[0].oids, vec![oid(2)], "the fork only for its own tip");
    assert!(log
        .iter()
        .filter(|call| call.url != "https://fork.test/repo.git")
        .all(|call| call.oids.len() == 2));
    assert_eq!(inner.released(&repo()), 1, "the pull request came");
    assert_eq!(
        ctx.reads.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the repository's clone URLs read once for the attempt's 13 URLs"
    );
}

/// A context whose every fetch takes `fetch_takes` of `clock`'s time (a server that
/// hangs until the fetch timeout), otherwise the in-memory one.
struct Hanging {
    inner: Arc<MemorySyncContext>,
    clock: Arc<grasp_sync_core::clock::ManualClock>,
    fetch_takes: std::time::Duration,
}

#[async_trait::async_trait]
impl SyncContext for Hanging {
    async fn fetch_repository_data(
        &self,
        repo: &RepoRef,
    ) -> Result<RepositoryData, SyncContextError> {
        self.inner.fetch_repository_data(repo).await
    }

    fn collect_needed_oids(&self, repo: &RepoRef) -> std::collections::BTreeSet<GitOid> {
        self.inner.collect_needed_oids(repo)
    }

    fn oid_exists(&self, repo: &RepoRef, oid: &GitOid) -> bool {
        self.inner.oid_exists(repo, oid)
    }

    async fn fetch_oids(
        &self,
        repo_path: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Vec<GitOid>, SyncContextError> {
        self.clock.advance(self.fetch_takes);
        self.inner.fetch_oids(repo_path, url, oids).await
    }

    async fn process_satisfiable_events(&self, repo: &RepoRef) -> Result<usize, SyncContextError> {
        self.inner.process_satisfiable_events(repo).await
    }

    fn has_pending_events(&self, repo: &RepoRef) -> bool {
        self.inner.has_pending_events(repo)
    }

    fn find_target_repo(&self, repo: &RepoRef) -> Option<std::path::PathBuf> {
        self.inner.find_target_repo(repo)
    }

    fn creates_repositories(&self) -> bool {
        self.inner.creates_repositories()
    }

    async fn create_target_repo(
        &self,
        repo: &RepoRef,
    ) -> Result<std::path::PathBuf, SyncContextError> {
        self.inner.create_target_repo(repo).await
    }

    fn own_service(&self) -> &grasp_sync_core::purgatory::OwnService {
        self.inner.own_service()
    }

    async fn move_to_home_repositories(
        &self,
        repo: &RepoRef,
    ) -> Result<Vec<RepoRef>, SyncContextError> {
        self.inner.move_to_home_repositories(repo).await
    }
}

/// 32 clone URLs on 32 domains, each hanging for a 60 s fetch timeout (virtual time):
/// one attempt starts fetches for the 120 s deadline (2 of them), then leaves the other
/// 30 URLs to their domains' queues, instead of holding the attempt for 32 minutes.
#[tokio::test]
async fn an_attempt_of_hanging_urls_stops_at_its_deadline() {
    let urls: Vec<String> = (0..32)
        .map(|n| format!("https://git.d{n}.test/repo.git"))
        .collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let inner = context(&url_refs, &[oid(1)]);
    for url in &urls {
        inner.set_remote_error(url, "the connection timed out");
    }
    let clock = Arc::new(grasp_sync_core::clock::ManualClock::new(
        nostr::prelude::Timestamp::from_secs(1_750_000_000),
    ));
    let ctx = Hanging {
        inner: Arc::clone(&inner),
        clock: Arc::clone(&clock),
        fetch_takes: std::time::Duration::from_secs(60),
    };
    let manager = ThrottleManager::new(
        ThrottleConfig::default(),
        clock.clone(),
        CloneUrlPolicy::new(),
        grasp_sync_core::purgatory::DEFAULT_MAX_CLONE_URLS,
        crate::metrics::Metrics::new().unwrap(),
        Arc::new(StaticResolver::new()),
    )
    .with_attempt_deadline(std::time::Duration::from_secs(120));
    let started = clock.now();
    let report = sync_identifier(&ctx, &repo(), &manager).await;
    assert!(
        matches!(report.outcome, SyncOutcome::Retry { .. }),
        "{report:?}"
    );
    assert_eq!(
        inner.fetch_log().len(),
        2,
        "fetches started before the deadline"
    );
    assert_eq!(
        clock.now().saturating_duration_since(started),
        std::time::Duration::from_secs(120)
    );
    let key = repo().to_string();
    let waiting = (2..32)
        .filter(|n| manager.queued(&format!("d{n}.test")).contains(&key))
        .count();
    assert_eq!(
        waiting, 30,
        "the untried URLs wait in their domains' queues"
    );
}

#[tokio::test]
async fn strangers_pull_requests_said_to_be_elsewhere_do_not_push_an_honest_tip_out_of_the_one_at_a_time_requests(
) {
    // Forty junk pull requests name tips that exist nowhere and clone URLs of their
    // own; an honest pull request names the repository's URL. The server refuses the
    // request for all of them together, and only MAX_SINGLE_FETCHES are then asked one
    // at a time: the honest tip must be among them, wherever it sorts.
    let honest_tip = oid(250);
    let ctx = context(&[ONE], std::slice::from_ref(&honest_tip));
    let mut data = repository(&[ONE]);
    data.event_sources
        .push(grasp_sync_core::purgatory::EventSource {
            missing: [honest_tip.clone()].into(),
            clone_urls: vec![ONE.to_owned()],
        });
    for n in 1..=40 {
        ctx.add_pending_event(&repo(), [oid(n)]);
        data.event_sources
            .push(grasp_sync_core::purgatory::EventSource {
                missing: [oid(n)].into(),
                clone_urls: vec![format!("https://junk{n}.test/repo.git")],
            });
    }
    ctx.add_repository(&repo(), data);
    ctx.set_remote_strict(ONE, [honest_tip.clone()]);
    let mut throttle = ThrottleConfig::default();
    throttle.max_per_minute = 1_000;
    throttle.max_concurrent = 1_000;
    let manager = manager_with(throttle);
    let url = CloneUrlPolicy::new().check(ONE).unwrap();
    let outcome = sync_identifier_from_url(ctx.as_ref(), &repo(), &url, &manager).await;
    assert!(matches!(outcome, FromUrl::Fetched(1)), "{outcome:?}");
    let asked_alone: Vec<GitOid> = ctx
        .fetch_log()
        .iter()
        .filter(|call| call.oids.len() == 1)
        .flat_map(|call| call.oids.clone())
        .collect();
    assert_eq!(asked_alone.first(), Some(&honest_tip), "{asked_alone:?}");
    assert!(!ctx.collect_needed_oids(&repo()).contains(&honest_tip));
}
