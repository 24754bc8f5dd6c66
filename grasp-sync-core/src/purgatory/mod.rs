//! The pure decisions of purgatory git-data sync.
//!
//! Events that point at git objects the server does not have wait in a
//! purgatory until those objects are fetched from the repository's clone
//! URLs. Sync is per repository, not per event: a burst of events for one
//! repository causes one fetch. A repository is a coordinate
//! `30617:<owner>:<identifier>` ([`RepoRef`](crate::nip34::RepoRef)), never a
//! bare identifier: only the owner's announcement and those of the maintainers
//! it lists give clone URLs ([`select_repository`]), so a stranger announcing
//! the same identifier takes no part. This module holds every decision of that
//! sync and none of its effects; nothing here reads a clock (every
//! time-dependent method takes `now`), spawns a task or does I/O.
//!
//! - [`select_repository`], [`maintainer_set`], [`home_repositories`]: which
//!   announcements speak for a repository, whose states count for it, and which
//!   repositories a maintainer without an announcement belongs to.
//! - [`newest_authorized_state`], [`served_ref_plan`], [`pull_request_ref_changes`]:
//!   what a served repository's refs must be, and [`reconciliation`]: what one
//!   reconciliation writes and fetches (module `serving`).
//! - [`ReconcileSchedule`]: when each served repository is reconciled next, and which
//!   due ones start (a bounded pool, owners in turn); [`MaintainerIndex`]: which
//!   repositories a released state's author maintains.
//! - [`SyncQueue`] / [`SyncQueueEntry`]: when each repository is synced next
//!   (debounce of 3 min for user-submitted events, 500 ms for events that
//!   arrived by sync; backoff 20 s, 40 s, 80 s, then 2 min).
//! - [`DomainThrottle`] / [`DomainThrottles`]: per-domain limits (5 in
//!   flight, 30 per minute) and the round-robin queue of repositories waiting
//!   for a throttled domain. One request to a host takes one slot. [`HostLimits`]:
//!   the operator's per-host overrides of those limits.
//!
//! The queue and the throttles key what they schedule by an opaque string
//! (the spec's "identifier"); purgatory uses the repository coordinate's text.
//! - [`UrlSources`] (built once per attempt) / [`RepositoryData::oids_to_ask`]: which
//!   objects a clone URL is asked for (a pull request's own `clone` URL only for that
//!   pull request's tip).
//! - [`select_candidates`] / [`candidate_urls`], [`next_url`],
//!   [`throttled_domains_with_untried_urls`]: which clone URL to try next (at most
//!   [`DEFAULT_MAX_CLONE_URLS`] per attempt by default), never one on our own service
//!   ([`OwnService`]); [`throttle_key`]: which throttle a host shares (subdomains of one
//!   registrable domain share one).
//! - [`held_progress`], [`all_accounted`] ([`NotFetchable`]): whether every held event
//!   is accounted for (released, expired, or not fetchable with a reason);
//!   [`missing_repository_action`]: create a missing local repository or wait for it.
//! - [`held_event_fate`] ([`HeldFate`]): whether a held event is released (its objects
//!   are present), expired (held the expiry time) or still held.
//! - [`git_version_verdict`]: whether the installed git pins hosts to their checked
//!   address (2.37 and later), and what to do when it does not.
//! - [`SyncContext`]: the effects (store, purgatory, git) the async driver
//!   calls, with [`MemorySyncContext`] for tests.
//!
//! # Driving one identifier (the spec's `sync_identifier`)
//!
//! ```text
//! for id in queue.take_ready(now):
//!     tried = {}
//!     loop:
//!         if !ctx.has_pending_events(id) or ctx.collect_needed_oids(id) is empty:
//!             ctx.process_satisfiable_events(id); queue.complete(id, now, done = true); stop
//!         candidates = candidate_urls(ctx.fetch_repository_data(id), policy, ctx.own_service(), max_urls)
//!         url = next_url(candidates, None, tried, |d| throttles.is_throttled(d, now))
//!         if url is None: break
//!         if throttles.entry(throttle_key(url.domain())).try_start_request(now):
//!             ctx.fetch_oids(target, url, needed); throttles.entry(..).complete_request(now)
//!             ctx.process_satisfiable_events(id)
//!         tried.insert(url)
//!     for info in throttled_domains_with_untried_urls(candidates, tried, is_throttled):
//!         throttles.entry(info.domain).enqueue_identifier(id, info.tried_urls_for_domain)
//!     queue.complete(id, now, done = false)        // backoff
//! ```
//!
//! A domain's queue is served the same way with `next_url(.., Some(domain), ..)`
//! and the tried URLs the throttle keeps for the identifier, whenever
//! `DomainThrottle::has_capacity` after an enqueue or a completion, and at
//! `DomainThrottle::poll_timeout`. Sleep until the earliest of
//! [`SyncQueue::poll_timeout`] and [`DomainThrottles::poll_timeout`].
//!
//! Differences from the spec's sketches: time is an argument; starting a
//! request checks and records capacity in one step
//! ([`DomainThrottle::try_start_request`]), so the limits hold even when two
//! paths race for the last slot; our own service is excluded by exact host
//! (and port, when its URL names one), not by substring; and every collection
//! iterates in a fixed order.

mod accounting;
mod context;
mod fate;
mod git_version;
mod host_limits;
mod maintainer_index;
mod own_service;
mod queue;
mod reconcile;
mod repository;
mod serving;
#[cfg(test)]
mod test_support;
mod throttle;
mod throttle_key;
mod url_select;

pub use accounting::{
    all_accounted, held_progress, missing_repository_action, HeldProgress, MissingRepository,
    NotFetchable, RepoActivity,
};
pub use context::{FetchCall, MemorySyncContext, SyncContext, SyncContextError};
pub use fate::{held_event_fate, HeldFate};
pub use git_version::{
    git_version_verdict, parse_git_version, GitVersion, GitVersionVerdict, MIN_GIT_FOR_DNS_PIN,
};
pub use host_limits::{HostLimit, HostLimitError, HostLimits, HostOverride};
pub use maintainer_index::MaintainerIndex;
pub use own_service::{OwnService, OwnServiceError};
pub use queue::{SyncQueue, SyncQueueConfig, SyncQueueEntry};
pub use reconcile::{ReconcileConfig, ReconcileSchedule, DEFAULT_RECONCILE_CONCURRENCY};
pub use repository::{
    home_repositories, maintainer_set, select_repository, AnnouncementsByAuthor, EventSource,
    RepositoryData, UrlSources, MAX_REPOSITORY_MAINTAINERS,
};
pub use serving::{
    is_served_ref, needed_objects, newest_authorized_state, pull_request_ref_changes,
    reconciliation, served_head, served_ref_plan, Reconciliation, RefChange, RefPlan, ServedState,
    PULL_REQUEST_REF_PREFIX, SERVED_REF_PREFIXES,
};
pub use throttle::{DomainThrottle, DomainThrottles, QueueStep, ThrottleConfig};
pub use throttle_key::{
    address_block_key, throttle_key, IPV4_BLOCK_BITS, IPV6_BLOCK_BITS, SHARED_SECOND_LEVEL,
};
pub use url_select::{
    candidate_urls, next_url, select_candidates, select_candidates_keyed,
    throttled_domains_with_untried_urls, CandidateSelection, CandidateUrls, ThrottledDomainInfo,
    DEFAULT_MAX_CLONE_URLS,
};

#[cfg(test)]
mod tests {
    //! The pieces driven together the way the purgatory crate will.

    use std::collections::HashSet;

    use futures::executor::block_on;

    use super::test_support::{oid, repo, repository};
    use super::*;
    use crate::clock::Instant;
    use crate::nip34::{GitOid, RepoRef};
    use crate::url_policy::CloneUrlPolicy;

    /// One pass of the main sync for `id`, as sketched in the module doc.
    /// Returns whether nothing is left to fetch.
    fn sync_identifier(
        ctx: &MemorySyncContext,
        key: &str,
        throttles: &mut DomainThrottles,
        now: Instant,
    ) -> bool {
        let policy = CloneUrlPolicy::new();
        let mut tried = HashSet::new();
        let Ok(id) = RepoRef::parse(key) else {
            return false;
        };
        let id = &id;
        let Ok(data) = block_on(ctx.fetch_repository_data(id)) else {
            return false;
        };
        let candidates = candidate_urls(&data, &policy, ctx.own_service(), DEFAULT_MAX_CLONE_URLS);
        let Some(target) = ctx.find_target_repo(id) else {
            return false;
        };
        loop {
            let needed: Vec<GitOid> = ctx.collect_needed_oids(id).into_iter().collect();
            if !ctx.has_pending_events(id) || needed.is_empty() {
                let _ = block_on(ctx.process_satisfiable_events(id));
                return true;
            }
            let is_throttled = |d: &str| throttles.is_throttled(d, now);
            let Some(url) = next_url(&candidates, None, &tried, is_throttled) else {
                break;
            };
            let throttle = throttles.entry(&throttle_key(url.domain()));
            if throttle.try_start_request(now) {
                let _ = block_on(ctx.fetch_oids(&target, &url, &needed));
                throttles
                    .entry(&throttle_key(url.domain()))
                    .complete_request(now);
                let _ = block_on(ctx.process_satisfiable_events(id));
            }
            tried.insert(url.as_str().to_owned());
        }
        let is_throttled = |d: &str| throttles.is_throttled(d, now);
        for info in throttled_domains_with_untried_urls(&candidates, &tried, is_throttled) {
            throttles
                .entry(&info.domain)
                .enqueue_identifier(key, info.tried_urls_for_domain);
        }
        false
    }

    #[test]
    fn full_sync_tries_servers_until_the_objects_arrive() {
        let ctx = MemorySyncContext::new();
        let key = repo().to_string();
        let urls = [
            "https://server1.example/r.git",
            "https://server2.example/r.git",
        ];
        ctx.add_repository(&repo(), repository(&[&urls]));
        ctx.add_pending_event(&repo(), [oid(1)]);
        ctx.set_remote(urls[0], []);
        ctx.set_remote(urls[1], [oid(1)]);

        let mut queue = SyncQueue::default();
        let mut throttles = DomainThrottles::default();
        queue.enqueue(&key, Instant::ZERO, queue.config().immediate_delay);
        let now = Instant::from_secs(1);
        for id in queue.take_ready(now) {
            let done = sync_identifier(&ctx, &id, &mut throttles, now);
            queue.complete(&id, now, done);
        }

        let fetched: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
        assert_eq!(fetched, urls.to_vec());
        assert_eq!(ctx.released(&repo()), 1);
        assert!(queue.is_empty());
    }

    #[test]
    fn throttled_domain_gets_the_identifier_and_the_queue_backs_off() {
        let ctx = MemorySyncContext::new().with_our_domain("ours.example");
        let key = repo().to_string();
        let urls = [
            "https://ours.example/r.git",
            "https://busy.example/r.git",
            "https://empty.example/r.git",
        ];
        ctx.add_repository(&repo(), repository(&[&urls]));
        ctx.add_pending_event(&repo(), [oid(7)]);
        ctx.set_remote(urls[1], [oid(7)]);
        ctx.set_remote(urls[2], []);

        let mut throttles = DomainThrottles::default();
        let start = Instant::ZERO;
        for _ in 0..5 {
            assert!(throttles.entry("busy.example").try_start_request(start));
        }
        let mut queue = SyncQueue::default();
        queue.enqueue(&key, start, queue.config().immediate_delay);
        let now = Instant::from_secs(1);
        for id in queue.take_ready(now) {
            let done = sync_identifier(&ctx, &id, &mut throttles, now);
            queue.complete(&id, now, done);
        }

        let fetched: Vec<String> = ctx.fetch_log().into_iter().map(|call| call.url).collect();
        assert_eq!(fetched, vec![urls[2].to_owned()]);
        assert_eq!(queue.poll_timeout(), Some(Instant::from_secs(21)));
        let queued: Option<Vec<&str>> = throttles
            .get("busy.example")
            .map(|t| t.queued_identifiers().collect());
        assert_eq!(queued, Some(vec![key.as_str()]));

        // Capacity frees on busy.example: its queue serves the identifier.
        let Some(busy) = throttles.get_mut("busy.example") else {
            panic!("throttle exists");
        };
        busy.complete_request(now);
        assert!(busy.has_capacity(now));
        assert_eq!(busy.next_ready_identifier().as_deref(), Some(key.as_str()));
        let data = block_on(ctx.fetch_repository_data(&repo())).unwrap_or_default();
        let candidates = candidate_urls(
            &data,
            &CloneUrlPolicy::new(),
            ctx.own_service(),
            DEFAULT_MAX_CLONE_URLS,
        );
        let tried = busy.get_tried_urls(&key);
        let url = next_url(&candidates, Some("busy.example"), &tried, |_| true);
        assert_eq!(url.as_ref().map(|u| u.as_str()), Some(urls[1]));
        if let Some(url) = url {
            assert!(busy.try_start_request(now));
            let needed: Vec<GitOid> = ctx.collect_needed_oids(&repo()).into_iter().collect();
            let got = block_on(ctx.fetch_oids(std::path::Path::new("memory"), &url, &needed));
            busy.complete_request(now);
            busy.mark_url_tried(&key, url.as_str());
            busy.mark_identifier_not_in_progress(&key);
            assert_eq!(got.ok(), Some(vec![oid(7)]));
        }
        assert_eq!(
            block_on(ctx.process_satisfiable_events(&repo())).ok(),
            Some(1)
        );
        assert!(!ctx.has_pending_events(&repo()));
    }
}
