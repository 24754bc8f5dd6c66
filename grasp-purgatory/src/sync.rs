//! Syncing one identifier: the spec's `sync_identifier_next_url`,
//! `sync_identifier_from_url` and `sync_identifier`, over any [`SyncContext`].
//!
//! The main sync ([`sync_identifier`]) tries every clone URL whose domain has capacity,
//! then leaves the identifier in the queue of each throttled domain that still has
//! untried URLs and returns (the queue backs off and retries later). When capacity
//! frees, the [`ThrottleManager`] yields a [`QueueStep::Serve`] and its driver runs
//! [`serve_queued_identifier`]. Both paths use the same two functions,
//! [`sync_identifier_next_url`] and [`sync_identifier_from_url`].
//!
//! [`QueueStep::Serve`]: grasp_sync_core::purgatory::QueueStep::Serve

use std::collections::HashSet;

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
    manager: &ThrottleManager,
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

/// One turn of `domain`'s queue for `identifier` (after a [`QueueStep::Serve`] of the
/// [`ThrottleManager`]): fetches from the next URL of `domain` not tried for it yet, or
/// drops the identifier from the domain's queue when none is left.
///
/// [`QueueStep::Serve`]: grasp_sync_core::purgatory::QueueStep::Serve
pub async fn serve_queued_identifier(
    ctx: &dyn SyncContext,
    domain: &str,
    identifier: &str,
    manager: &ThrottleManager,
) {
    let tried = manager.tried_urls(domain, identifier);
    let url = sync_identifier_next_url(ctx, identifier, Some(domain), &tried, manager).await;
    let Some(url) = url else {
        manager.remove_identifier(domain, identifier);
        return;
    };
    let outcome = sync_identifier_from_url(ctx, identifier, &url, manager).await;
    let tried_url = (!matches!(outcome, FromUrl::Throttled)).then_some(url.as_str());
    manager.finish_serving(domain, identifier, tried_url);
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
    manager: &ThrottleManager,
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
    manager: &ThrottleManager,
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
mod tests;
