//! Syncing one identifier: the spec's `sync_identifier_next_url`,
//! `sync_identifier_from_url` and `sync_identifier`, over any [`SyncContext`].
//!
//! The main sync tries every clone URL whose domain has capacity, then leaves the
//! identifier in the queue of each throttled domain that still has untried URLs and
//! returns (the queue backs off and retries later); the domain queues serve it when
//! capacity frees. Both paths use the same two functions.

use std::collections::HashSet;
use std::sync::Arc;

use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::purgatory::{
    candidate_urls, next_url, throttled_domains_with_untried_urls, CandidateUrls, SyncContext,
    SyncContextError,
};
use grasp_sync_core::url_policy::CloneUrl;

use crate::throttle_manager::ThrottleManager;

/// What [`sync_identifier_from_url`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum FromUrl {
    /// The domain had no capacity; nothing was fetched (the URL is not tried yet).
    Throttled,
    /// Nothing was left to fetch, or there is no local repository to fetch into.
    NothingToDo,
    /// The fetch ran and obtained this many objects.
    Fetched(usize),
    /// The fetch (or reading the repository) failed.
    Failed(SyncContextError),
}

/// The candidate clone URLs of `identifier`, or `None` when nothing is left to do.
async fn candidates_if_needed(
    ctx: &dyn SyncContext,
    identifier: &str,
    manager: &ThrottleManager,
) -> Option<CandidateUrls> {
    if !ctx.has_pending_events(identifier) || ctx.collect_needed_oids(identifier).is_empty() {
        return None;
    }
    match ctx.fetch_repository_data(identifier).await {
        Ok(data) => Some(candidate_urls(&data, manager.policy(), ctx.our_domain())),
        Err(error) => {
            tracing::debug!(%identifier, %error, "no repository data");
            None
        }
    }
}

/// The next clone URL to try for `identifier`: with `domain = None` any untried URL of
/// a domain that is not throttled; with `Some(domain)` any untried URL of that domain.
/// `None` when the identifier has no pending events, needs no objects, or has no such URL.
pub async fn sync_identifier_next_url(
    ctx: &dyn SyncContext,
    identifier: &str,
    domain: Option<&str>,
    tried: &HashSet<String>,
    manager: &ThrottleManager,
) -> Option<CloneUrl> {
    let candidates = candidates_if_needed(ctx, identifier, manager).await?;
    next_url(&candidates, domain, tried, |d| manager.is_throttled(d))
}

/// Fetches the objects `identifier` still needs from `url`, within `url`'s domain
/// limits, and releases the events they satisfy.
pub async fn sync_identifier_from_url(
    ctx: &dyn SyncContext,
    identifier: &str,
    url: &CloneUrl,
    manager: &Arc<ThrottleManager>,
) -> FromUrl {
    let data = match ctx.fetch_repository_data(identifier).await {
        Ok(data) => data,
        Err(error) => return FromUrl::Failed(error),
    };
    let Some(target) = ctx.find_target_repo(&data) else {
        tracing::debug!(%identifier, "no local repository to fetch into");
        return FromUrl::NothingToDo;
    };
    let needed: Vec<GitOid> = ctx.collect_needed_oids(identifier).into_iter().collect();
    if needed.is_empty() {
        return FromUrl::NothingToDo;
    }
    if !manager.try_start_request(url.domain()) {
        return FromUrl::Throttled;
    }
    tracing::debug!(%identifier, %url, oids = needed.len(), "fetching");
    let result = ctx.fetch_oids(&target, url, &needed).await;
    manager.complete_request(url.domain());
    match result {
        Ok(fetched) => {
            if !fetched.is_empty() {
                release(ctx, identifier).await;
            }
            FromUrl::Fetched(fetched.len())
        }
        Err(error) => {
            tracing::debug!(%identifier, %url, %error, "fetch failed");
            FromUrl::Failed(error)
        }
    }
}

/// Releases whatever is satisfiable now, logging a failure.
async fn release(ctx: &dyn SyncContext, identifier: &str) {
    if let Err(error) = ctx.process_satisfiable_events(identifier).await {
        tracing::warn!(%identifier, %error, "releasing satisfied events failed");
    }
}

/// Whether nothing is left to do for `identifier`: no events held, or every object
/// present and every event released.
async fn is_complete(ctx: &dyn SyncContext, identifier: &str) -> bool {
    if !ctx.has_pending_events(identifier) {
        return true;
    }
    if !ctx.collect_needed_oids(identifier).is_empty() {
        return false;
    }
    release(ctx, identifier).await;
    !ctx.has_pending_events(identifier)
}

/// One attempt of the main sync for `identifier`. Returns `true` when the identifier is
/// done (nothing held any more), `false` when it should be retried after backoff.
///
/// First releases events whose objects arrived meanwhile (a push), then tries every
/// untried URL of every domain with capacity, and finally leaves the identifier with
/// each throttled domain that still has untried URLs.
pub async fn sync_identifier(
    ctx: &dyn SyncContext,
    identifier: &str,
    manager: &Arc<ThrottleManager>,
) -> bool {
    if ctx.has_pending_events(identifier) {
        release(ctx, identifier).await;
    }
    let mut tried: HashSet<String> = HashSet::new();
    let mut deferred: HashSet<String> = HashSet::new();
    loop {
        if is_complete(ctx, identifier).await {
            tracing::info!(%identifier, "purgatory sync complete");
            return true;
        }
        let skip: HashSet<String> = tried.union(&deferred).cloned().collect();
        let Some(url) = sync_identifier_next_url(ctx, identifier, None, &skip, manager).await
        else {
            break;
        };
        match sync_identifier_from_url(ctx, identifier, &url, manager).await {
            FromUrl::Throttled => deferred.insert(url.as_str().to_owned()),
            _ => tried.insert(url.as_str().to_owned()),
        };
    }
    enqueue_with_throttled_domains(ctx, identifier, &tried, &deferred, manager).await;
    false
}

/// Leaves `identifier` with each throttled domain (and each domain that turned out to be
/// full when a fetch was about to start) that has URLs not tried yet.
async fn enqueue_with_throttled_domains(
    ctx: &dyn SyncContext,
    identifier: &str,
    tried: &HashSet<String>,
    deferred: &HashSet<String>,
    manager: &Arc<ThrottleManager>,
) {
    let Some(candidates) = candidates_if_needed(ctx, identifier, manager).await else {
        return;
    };
    let deferred_domains: HashSet<&str> = candidates
        .iter()
        .filter(|(_, urls)| urls.iter().any(|url| deferred.contains(url.as_str())))
        .map(|(domain, _)| domain.as_str())
        .collect();
    let waiting = throttled_domains_with_untried_urls(&candidates, tried, |d| {
        deferred_domains.contains(d) || manager.is_throttled(d)
    });
    for info in waiting {
        manager.enqueue_identifier(&info.domain, identifier, info.tried_urls_for_domain);
    }
}

#[cfg(test)]
mod tests {
    //! The spec's unit tests of the sync functions, on the core's in-memory context.

    use std::sync::Arc;

    use grasp_sync_core::nip34::{GitOid, RepoAnnouncement, RepoRef};
    use grasp_sync_core::purgatory::{MemorySyncContext, RepositoryData, ThrottleConfig};
    use grasp_sync_core::url_policy::CloneUrlPolicy;
    use nostr::prelude::Keys;

    use super::*;
    use crate::clock::PurgatoryClock;
    use crate::tasks::Tasks;

    const ONE: &str = "https://example.com/repo.git";
    const TWO: &str = "https://other.com/repo.git";

    fn oid(n: u8) -> GitOid {
        GitOid::parse(&format!("{n:02x}").repeat(20)).unwrap()
    }

    fn repository(urls: &[&str]) -> RepositoryData {
        let author = Keys::generate().public_key();
        RepositoryData {
            announcements: vec![RepoAnnouncement {
                repo: RepoRef::new(author, "test").unwrap(),
                relays: Vec::new(),
                clone_urls: urls.iter().map(|url| (*url).to_owned()).collect(),
                maintainers: Vec::new(),
                skipped: Vec::new(),
            }],
        }
    }

    /// A context holding one event of "test" that needs `needed`, with these URLs.
    fn context(urls: &[&str], needed: &[GitOid]) -> Arc<MemorySyncContext> {
        let ctx = MemorySyncContext::new();
        ctx.add_repository("test", repository(urls));
        if !needed.is_empty() {
            ctx.add_pending_event("test", needed.iter().cloned());
        }
        Arc::new(ctx)
    }

    fn manager(ctx: &Arc<MemorySyncContext>) -> Arc<ThrottleManager> {
        let ctx: Arc<dyn SyncContext> = ctx.clone();
        Arc::new(ThrottleManager::new(
            ThrottleConfig::default(),
            PurgatoryClock::new(),
            CloneUrlPolicy::new(),
            ctx,
            None,
            Arc::new(Tasks::default()),
            Arc::new(tokio::sync::Notify::new()),
        ))
    }

    fn tried(urls: &[&str]) -> HashSet<String> {
        urls.iter().map(|url| (*url).to_owned()).collect()
    }

    async fn next(
        ctx: &Arc<MemorySyncContext>,
        domain: Option<&str>,
        skip: &[&str],
    ) -> Option<String> {
        let manager = manager(ctx);
        sync_identifier_next_url(ctx.as_ref(), "test", domain, &tried(skip), &manager)
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
        let manager = manager(&ctx);
        for _ in 0..5 {
            assert!(manager.try_start_request("example.com"));
        }
        let url =
            sync_identifier_next_url(ctx.as_ref(), "test", None, &HashSet::new(), &manager).await;
        assert_eq!(url.map(|u| u.as_str().to_owned()).as_deref(), Some(TWO));
    }

    #[tokio::test]
    async fn from_url_fetches_and_releases() {
        let ctx = context(&[ONE], &[oid(1)]);
        ctx.set_remote(ONE, [oid(1)]);
        let manager = manager(&ctx);
        let url = CloneUrlPolicy::new().check(ONE).unwrap();
        let outcome = sync_identifier_from_url(ctx.as_ref(), "test", &url, &manager).await;
        assert!(matches!(outcome, FromUrl::Fetched(1)), "{outcome:?}");
        assert_eq!(ctx.released("test"), 1);
        assert!(!ctx.has_pending_events("test"));
        assert_eq!(manager.in_flight("example.com"), 0);
    }

    #[tokio::test]
    async fn from_url_on_a_full_domain_fetches_nothing() {
        let ctx = context(&[ONE], &[oid(1)]);
        ctx.set_remote(ONE, [oid(1)]);
        let manager = manager(&ctx);
        for _ in 0..5 {
            assert!(manager.try_start_request("example.com"));
        }
        let url = CloneUrlPolicy::new().check(ONE).unwrap();
        let outcome = sync_identifier_from_url(ctx.as_ref(), "test", &url, &manager).await;
        assert!(matches!(outcome, FromUrl::Throttled), "{outcome:?}");
        assert!(ctx.fetch_log().is_empty());
    }

    #[tokio::test]
    async fn full_sync_tries_the_second_server_when_the_first_lacks_the_objects() {
        let ctx = context(&[ONE, TWO], &[oid(1)]);
        ctx.set_remote(ONE, []);
        ctx.set_remote(TWO, [oid(1)]);
        let manager = manager(&ctx);
        assert!(sync_identifier(ctx.as_ref(), "test", &manager).await);
        let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
        assert_eq!(urls, vec![ONE.to_owned(), TWO.to_owned()]);
        assert_eq!(ctx.released("test"), 1);
    }

    #[tokio::test]
    async fn full_sync_leaves_the_identifier_with_a_throttled_domain() {
        let ctx = context(&[ONE, TWO], &[oid(1)]);
        ctx.set_remote(ONE, [oid(1)]);
        ctx.set_remote(TWO, []);
        let manager = manager(&ctx);
        for _ in 0..5 {
            assert!(manager.try_start_request("example.com"));
        }
        assert!(!sync_identifier(ctx.as_ref(), "test", &manager).await);
        let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
        assert_eq!(urls, vec![TWO.to_owned()]);
        assert_eq!(manager.queued("example.com"), vec!["test".to_owned()]);

        // A slot frees: the domain's queue serves the identifier from the throttled URL.
        manager.complete_request("example.com");
        for _ in 0..100 {
            if !ctx.has_pending_events("test") {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(ctx.released("test"), 1);
        let urls: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
        assert_eq!(urls, vec![TWO.to_owned(), ONE.to_owned()]);
    }

    #[tokio::test]
    async fn full_sync_releases_objects_that_are_already_present_without_fetching() {
        let ctx = context(&[ONE], &[oid(1)]);
        ctx.add_local_oid(oid(1));
        let manager = manager(&ctx);
        assert!(sync_identifier(ctx.as_ref(), "test", &manager).await);
        assert!(ctx.fetch_log().is_empty());
        assert_eq!(ctx.released("test"), 1);
    }
}
