//! Syncing one repository: the spec's `sync_identifier_next_url`,
//! `sync_identifier_from_url` and `sync_identifier`, over any [`SyncContext`]. The spec's
//! "identifier" is a repository coordinate `30617:<owner>:<identifier>` ([`RepoRef`]):
//! only the owner's announcement and those of the maintainers it lists give clone URLs.
//!
//! Domains here are throttle keys ([`ThrottleManager::throttle_key`]): the subdomains of
//! one registrable domain share one throttle, and a host name also takes a slot of the
//! address block it resolves to, unless the operator gave the host limits of its own
//! ([`HostLimits`](grasp_sync_core::purgatory::HostLimits): then it is a key of its own
//! and takes no block slot). One attempt tries at most [`ThrottleManager::max_clone_urls`] distinct
//! URLs, chosen once per attempt, and starts fetches for at most
//! [`ThrottleManager::attempt_deadline`]; the URLs left then wait in their domains'
//! queues.
//!
//! The main sync ([`sync_identifier`]) tries every clone URL whose domain has capacity,
//! then leaves the repository in the queue of each throttled domain that still has
//! untried URLs and returns (the queue backs off and retries later). A request asks for
//! [`MAX_OIDS_PER_FETCH`] objects at most: a URL that gave that many is asked again for
//! the rest in the same attempt (a state of 2 000 refs is fetched in one attempt, not
//! one request per backoff). When capacity
//! frees, the [`ThrottleManager`] yields a [`QueueStep::Serve`] and its driver runs
//! [`serve_queued_identifier`]. Both paths use the same two functions,
//! [`sync_identifier_next_url`] and [`sync_identifier_from_url`].
//!
//! The owners of one identifier scheduled together
//! ([`Purgatory::schedule_identifier`](crate::Purgatory::schedule_identifier)) are one
//! group: before any request, a member copies the objects it needs that were already
//! fetched for another member, from that member's local repository
//! ([`SyncContext::copy_from_group`]), on both paths.
//!
//! One request to a host takes one slot of its domain's throttle: when a server refuses
//! a request for several objects because it lacks some, the objects are asked for one at
//! a time (at most [`MAX_SINGLE_FETCHES`]), each in a slot of its own, stopping when the
//! domain is full (the rest waits for the next attempt).
//!
//! [`QueueStep::Serve`]: grasp_sync_core::purgatory::QueueStep::Serve

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::{
    missing_repository_action, next_url, select_candidates_keyed,
    throttled_domains_with_untried_urls, CandidateUrls, MissingRepository, NotFetchable,
    RepositoryData, SyncContext, SyncContextError, UrlSources,
};
use grasp_sync_core::url_policy::CloneUrl;

use crate::git::MAX_OIDS_PER_FETCH;
use crate::throttle_manager::{Slot, ThrottleManager};

/// When a server lacks some of the objects asked for, at most this many are then asked
/// for one at a time in one attempt (each a request in its own throttle slot).
pub const MAX_SINGLE_FETCHES: usize = 16;

/// What [`sync_identifier_from_url`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum FromUrl {
    /// The domain had no capacity; nothing was fetched (the URL is not tried yet).
    Throttled,
    /// The domain had capacity, but the address block its host name resolves to (this
    /// throttle key) had none; nothing was fetched (the URL is not tried yet).
    BlockThrottled(String),
    /// Nothing was left to fetch, or there is no local repository to fetch into.
    NothingToDo,
    /// The fetches ran and obtained this many objects.
    Fetched(usize),
    /// The fetch (or reading the repository) failed.
    Failed(SyncContextError),
}

/// The candidate clone URLs of `repo`, or `None` when nothing is left to do.
async fn candidates_if_needed(
    ctx: &dyn SyncContext,
    repo: &RepoRef,
    manager: &ThrottleManager,
) -> Option<CandidateUrls> {
    if !ctx.has_pending_events(repo) || ctx.collect_needed_oids(repo).is_empty() {
        return None;
    }
    match ctx.fetch_repository_data(repo).await {
        Ok(data) => Some(
            select_candidates_keyed(
                &data,
                manager.policy(),
                ctx.own_service(),
                manager.max_clone_urls(),
                manager.host_limits(),
            )
            .urls,
        ),
        Err(error) => {
            tracing::debug!(%repo, %error, "no repository data");
            None
        }
    }
}

/// The next clone URL to try for `repo`: with `domain = None` any untried URL of a
/// domain that is not throttled; with `Some(domain)` any untried URL of that domain.
/// `None` when the repository has no pending events, needs no objects, or has no such
/// URL.
pub async fn sync_identifier_next_url(
    ctx: &dyn SyncContext,
    repo: &RepoRef,
    domain: Option<&str>,
    tried: &HashSet<String>,
    manager: &ThrottleManager,
) -> Option<CloneUrl> {
    let candidates = candidates_if_needed(ctx, repo, manager).await?;
    next_url(&candidates, domain, tried, |d| manager.is_throttled(d))
}

/// What [`fetch_in_slot`] did.
enum InSlot {
    /// The request ran.
    Ran(Result<Vec<GitOid>, SyncContextError>),
    /// The domain had no capacity: nothing was asked.
    DomainFull,
    /// The address block (this key) had no capacity: nothing was asked.
    BlockFull(String),
}

/// One request for `oids` from `url` in a slot of its domain (its
/// [`ThrottleManager::throttle_key`]) and, for a host name without an operator's
/// override, of the address block it resolves to; nothing is asked when either has no
/// capacity.
async fn fetch_in_slot(
    ctx: &dyn SyncContext,
    target: &Path,
    url: &CloneUrl,
    oids: &[GitOid],
    manager: &ThrottleManager,
) -> InSlot {
    let domain = manager.throttle_key(url);
    if manager.is_throttled(&domain) {
        // Not even a name look-up for a domain that is full.
        return InSlot::DomainFull;
    }
    let block = manager.address_block(url).await;
    match manager.try_start_request_in(&domain, block.as_deref()) {
        Slot::Started => {}
        Slot::BlockFull => return InSlot::BlockFull(block.unwrap_or_default()),
        _ => return InSlot::DomainFull,
    }
    let result = ctx.fetch_oids(target, url, oids).await;
    manager.complete_request_in(&domain, block.as_deref());
    InSlot::Ran(result)
}

/// Asks for each of `oids` on its own (at most [`MAX_SINGLE_FETCHES`]), each in a slot
/// of its own; stops when the domain is full or a request fails for another reason
/// than a missing object.
async fn fetch_one_by_one(
    ctx: &dyn SyncContext,
    target: &Path,
    url: &CloneUrl,
    oids: &[GitOid],
    manager: &ThrottleManager,
) -> FromUrl {
    let mut fetched = 0;
    for oid in oids.iter().take(MAX_SINGLE_FETCHES) {
        match fetch_in_slot(ctx, target, url, std::slice::from_ref(oid), manager).await {
            InSlot::DomainFull | InSlot::BlockFull(_) => break,
            InSlot::Ran(Ok(got)) => fetched += got.len(),
            InSlot::Ran(Err(SyncContextError::ObjectsMissing { .. })) => {}
            InSlot::Ran(Err(error)) if fetched == 0 => return FromUrl::Failed(error),
            InSlot::Ran(Err(_)) => break,
        }
    }
    FromUrl::Fetched(fetched)
}

/// Fetches the objects `repo` still needs from `url`, within `url`'s domain limits (one
/// slot per request), and releases the events they satisfy. Reads the repository's
/// clone URLs for this one URL; an attempt that tries several reads them once
/// ([`sync_identifier`]).
pub async fn sync_identifier_from_url(
    ctx: &dyn SyncContext,
    repo: &RepoRef,
    url: &CloneUrl,
    manager: &ThrottleManager,
) -> FromUrl {
    if ctx.find_target_repo(repo).is_none() || ctx.collect_needed_oids(repo).is_empty() {
        // Nothing to ask for, or nowhere to put it: the clone URLs need no reading.
        tracing::debug!(%repo, "nothing to fetch, or no local repository to fetch into");
        return FromUrl::NothingToDo;
    }
    match ctx.fetch_repository_data(repo).await {
        Ok(data) => {
            let sources = UrlSources::new(&data, manager.policy());
            fetch_from_url(ctx, repo, url, &sources, manager).await
        }
        Err(error) => FromUrl::Failed(error),
    }
}

/// [`sync_identifier_from_url`] with what each clone URL of `repo` is a source for
/// (`sources`, built once per attempt): a lookup per URL, not the policy run again on
/// every URL the repository lists.
async fn fetch_from_url(
    ctx: &dyn SyncContext,
    repo: &RepoRef,
    url: &CloneUrl,
    sources: &UrlSources,
    manager: &ThrottleManager,
) -> FromUrl {
    let Some(target) = ctx.find_target_repo(repo) else {
        tracing::debug!(%repo, "no local repository to fetch into");
        return FromUrl::NothingToDo;
    };
    // What another owner of the identifier fetched meanwhile is copied, not fetched.
    copy_from_group(ctx, repo).await;
    let missing = ctx.collect_needed_oids(repo);
    if missing.is_empty() {
        return FromUrl::NothingToDo;
    }
    // A URL only a pull request names is asked for that pull request's tip alone.
    let needed: Vec<GitOid> = sources.oids_to_ask(url, &missing).into_iter().collect();
    if needed.is_empty() {
        return FromUrl::NothingToDo;
    }
    tracing::debug!(%repo, %url, oids = needed.len(), "fetching");
    let outcome = match fetch_in_slot(ctx, &target, url, &needed, manager).await {
        InSlot::DomainFull => return FromUrl::Throttled,
        InSlot::BlockFull(block) => return FromUrl::BlockThrottled(block),
        InSlot::Ran(Ok(fetched)) => FromUrl::Fetched(fetched.len()),
        InSlot::Ran(Err(SyncContextError::ObjectsMissing { reason, .. })) => {
            tracing::debug!(%repo, %url, %reason, "the server lacks some objects; asking one at a time");
            let ordered = sources.one_at_a_time_order(url, &needed);
            fetch_one_by_one(ctx, &target, url, &ordered, manager).await
        }
        InSlot::Ran(Err(error)) => {
            tracing::debug!(%repo, %url, %error, "fetch failed");
            return FromUrl::Failed(error);
        }
    };
    if matches!(outcome, FromUrl::Fetched(n) if n > 0) {
        release(ctx, repo).await;
    }
    outcome
}

/// One turn of `domain`'s queue for the repository queued under `key` (after a
/// [`QueueStep::Serve`] of the [`ThrottleManager`]): fetches from the next URL of
/// `domain` not tried for it yet, or drops it from the domain's queue when none is left
/// (or the key is not a repository coordinate).
///
/// [`QueueStep::Serve`]: grasp_sync_core::purgatory::QueueStep::Serve
pub async fn serve_queued_identifier(
    ctx: &dyn SyncContext,
    domain: &str,
    key: &str,
    manager: &ThrottleManager,
) {
    let Ok(repo) = RepoRef::parse(key) else {
        tracing::warn!(%domain, key, "a domain queue holds something that is not a repository");
        manager.remove_identifier(domain, key);
        return;
    };
    let tried = manager.tried_urls(domain, key);
    let url = sync_identifier_next_url(ctx, &repo, Some(domain), &tried, manager).await;
    let Some(url) = url else {
        manager.remove_identifier(domain, key);
        return;
    };
    let outcome = sync_identifier_from_url(ctx, &repo, &url, manager).await;
    if let FromUrl::BlockThrottled(block) = &outcome {
        manager.wait_for_block(domain, key, block);
        return;
    }
    let tried_url = (!matches!(outcome, FromUrl::Throttled)).then_some(url.as_str());
    manager.finish_serving(domain, key, tried_url);
}

/// Copies the objects `repo` needs that were fetched for another owner of its
/// identifier synced with it ([`SyncContext::copy_from_group`]), and releases what they
/// satisfy: no server is asked for them again. A failure is logged; the objects are
/// then fetched as usual.
async fn copy_from_group(ctx: &dyn SyncContext, repo: &RepoRef) {
    match ctx.copy_from_group(repo).await {
        Ok(0) => {}
        Ok(_) => release(ctx, repo).await,
        Err(error) => tracing::debug!(%repo, %error, "copying from the group failed"),
    }
}

/// Releases whatever is satisfiable now, logging a failure.
async fn release(ctx: &dyn SyncContext, repo: &RepoRef) {
    if let Err(error) = ctx.process_satisfiable_events(repo).await {
        tracing::warn!(%repo, %error, "releasing satisfied events failed");
    }
}

/// Whether nothing is left to do for `repo`: no events held, or every object present
/// and every event released.
async fn is_complete(ctx: &dyn SyncContext, repo: &RepoRef) -> bool {
    if !ctx.has_pending_events(repo) {
        return true;
    }
    if !ctx.collect_needed_oids(repo).is_empty() {
        return false;
    }
    release(ctx, repo).await;
    !ctx.has_pending_events(repo)
}

/// How one attempt of the main sync ([`sync_identifier`]) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncOutcome {
    /// Nothing of the repository is held any more.
    Complete,
    /// Its git data cannot be fetched as things stand (no announcement, no usable
    /// clone URL, no local repository and none to be created): its events stay held,
    /// reported with this reason, and the repository is tried again after backoff in
    /// case that changes.
    NotFetchable(NotFetchable),
    /// Nobody announced the repository, but its author is in the maintainer set of
    /// these repositories, each of which took a copy of its held events (synced under
    /// each from now on, released with the first that has their objects).
    MovedTo(Vec<RepoRef>),
    /// Fetching was tried and more is needed: retry after backoff.
    Retry {
        /// The last failure of this attempt (a fetch error, a server lacking the
        /// objects), if there was one.
        last_error: Option<String>,
    },
}

/// What one attempt of the main sync did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncReport {
    /// How it ended.
    pub outcome: SyncOutcome,
    /// Clone URLs skipped because they are on our own service.
    pub own_service_urls_skipped: usize,
    /// Distinct usable clone URLs left out because the repository lists more than
    /// [`ThrottleManager::max_clone_urls`].
    pub urls_over_cap: usize,
}

impl SyncReport {
    /// Whether the repository is done (nothing held any more).
    pub fn is_complete(&self) -> bool {
        self.outcome == SyncOutcome::Complete
    }
}

/// `repo`'s local repository exists, or is created now; otherwise how the attempt ends
/// (the repository is waited for, or creating it failed).
async fn ensure_target(ctx: &dyn SyncContext, repo: &RepoRef) -> Result<(), SyncOutcome> {
    if ctx.find_target_repo(repo).is_some() {
        return Ok(());
    }
    match missing_repository_action(ctx.creates_repositories()) {
        MissingRepository::Create => match ctx.create_target_repo(repo).await {
            Ok(_) => Ok(()),
            Err(SyncContextError::NoPlaceForRepository { .. }) => Err(SyncOutcome::NotFetchable(
                NotFetchable::NoPlaceForRepository,
            )),
            Err(error) => Err(SyncOutcome::Retry {
                last_error: Some(error.to_string()),
            }),
        },
        MissingRepository::Wait(reason) => {
            tracing::debug!(%repo, %reason, "waiting for the local repository to be created");
            Err(SyncOutcome::NotFetchable(reason))
        }
    }
}

/// One attempt of the main sync for `repo`.
///
/// First releases events whose objects arrived meanwhile (a push); then reads the
/// repository's clone URLs (ending [`SyncOutcome::NotFetchable`] when none is usable:
/// every URL on our own service is skipped and counted), makes sure the local repository
/// exists (creating it when the context does, see
/// [`missing_repository_action`](grasp_sync_core::purgatory::missing_repository_action)),
/// tries every untried URL of every domain with capacity, and finally leaves the
/// repository with each throttled domain that still has untried URLs.
pub async fn sync_identifier(
    ctx: &dyn SyncContext,
    repo: &RepoRef,
    manager: &ThrottleManager,
) -> SyncReport {
    let mut report = SyncReport {
        outcome: SyncOutcome::Complete,
        own_service_urls_skipped: 0,
        urls_over_cap: 0,
    };
    if ctx.has_pending_events(repo) {
        release(ctx, repo).await;
        copy_from_group(ctx, repo).await;
    }
    if is_complete(ctx, repo).await {
        tracing::info!(%repo, "purgatory sync complete");
        return report;
    }
    let read_for = ctx.collect_needed_oids(repo);
    let data = match ctx.fetch_repository_data(repo).await {
        Ok(data) => data,
        Err(SyncContextError::UnknownRepository { .. }) => {
            report.outcome = match ctx.move_to_home_repositories(repo).await {
                Ok(homes) if !homes.is_empty() => SyncOutcome::MovedTo(homes),
                Ok(_) => SyncOutcome::NotFetchable(NotFetchable::NoAnnouncement),
                Err(error) => SyncOutcome::Retry {
                    last_error: Some(error.to_string()),
                },
            };
            return report;
        }
        Err(error) => {
            report.outcome = SyncOutcome::Retry {
                last_error: Some(error.to_string()),
            };
            return report;
        }
    };
    let selection = select_candidates_keyed(
        &data,
        manager.policy(),
        ctx.own_service(),
        manager.max_clone_urls(),
        manager.host_limits(),
    );
    report.own_service_urls_skipped = selection.own_service;
    report.urls_over_cap = selection.over_cap;
    if let Some(reason) = selection.not_fetchable() {
        tracing::debug!(%repo, %reason, "not fetchable");
        report.outcome = SyncOutcome::NotFetchable(reason);
        return report;
    }
    if let Err(outcome) = ensure_target(ctx, repo).await {
        report.outcome = outcome;
        return report;
    }
    let urls = AttemptUrls::new(&data, selection.urls, read_for, manager);
    report.outcome = fetch_from_every_domain(ctx, repo, urls, manager).await;
    report
}

/// The clone URLs one attempt tries and what each is a source for, as read when the
/// repository needed `read_for`.
struct AttemptUrls {
    /// The URLs to try, grouped by domain.
    candidates: CandidateUrls,
    /// What each URL is a source for.
    sources: UrlSources,
    /// The objects the repository needed when these were read.
    read_for: BTreeSet<GitOid>,
}

impl AttemptUrls {
    /// The URLs of `data` (already chosen: `candidates`) as read when the repository
    /// needed `read_for`.
    fn new(
        data: &RepositoryData,
        candidates: CandidateUrls,
        read_for: BTreeSet<GitOid>,
        manager: &ThrottleManager,
    ) -> Self {
        AttemptUrls {
            candidates,
            sources: UrlSources::new(data, manager.policy()),
            read_for,
        }
    }

    /// Whether the repository now needs objects these URLs were not read for: events
    /// held since (an update of a pull request whose fetch was in flight) name URLs, or
    /// make URLs sources of objects, that this reading does not know of.
    fn is_stale(&self, missing: &BTreeSet<GitOid>) -> bool {
        !missing.is_subset(&self.read_for)
    }

    /// The URLs read again for the events held now, or `None` when the repository's data
    /// cannot be read (the attempt goes on with what it has).
    async fn reread(
        ctx: &dyn SyncContext,
        repo: &RepoRef,
        manager: &ThrottleManager,
    ) -> Option<Self> {
        let read_for = ctx.collect_needed_oids(repo);
        match ctx.fetch_repository_data(repo).await {
            Ok(data) => {
                let candidates = select_candidates_keyed(
                    &data,
                    manager.policy(),
                    ctx.own_service(),
                    manager.max_clone_urls(),
                    manager.host_limits(),
                )
                .urls;
                Some(AttemptUrls::new(&data, candidates, read_for, manager))
            }
            Err(error) => {
                tracing::debug!(%repo, %error, "reading the clone urls again failed");
                None
            }
        }
    }
}

/// The fetching part of [`sync_identifier`]: every untried URL of `urls` (chosen for
/// the attempt) of every domain with capacity, each asked for every missing object it is
/// a source for, then the throttled domains' queues. Events held during the attempt
/// (while a fetch was in flight) make it read the URLs again before the next fetch, so
/// the URLs not tried yet are asked for their objects in the same request as the rest;
/// those of a URL already tried wait for the next attempt (holding them queued the
/// repository).
async fn fetch_from_every_domain(
    ctx: &dyn SyncContext,
    repo: &RepoRef,
    mut urls: AttemptUrls,
    manager: &ThrottleManager,
) -> SyncOutcome {
    let mut tried: HashSet<String> = HashSet::new();
    let mut deferred: HashSet<String> = HashSet::new();
    let mut last_error = None;
    let started = manager.now();
    loop {
        if is_complete(ctx, repo).await {
            tracing::info!(%repo, "purgatory sync complete");
            return SyncOutcome::Complete;
        }
        if is_past_deadline(started, manager) {
            tracing::debug!(%repo, tried = tried.len(), "attempt deadline passed; the other URLs wait in their domains' queues");
            last_error.get_or_insert_with(|| "the attempt's deadline passed".to_owned());
            break;
        }
        if urls.is_stale(&ctx.collect_needed_oids(repo)) {
            tracing::debug!(%repo, "events were held during the attempt; reading the clone urls again");
            if let Some(fresh) = AttemptUrls::reread(ctx, repo, manager).await {
                urls = fresh;
            }
        }
        let skip: HashSet<String> = tried.union(&deferred).cloned().collect();
        let Some(url) = next_url(&urls.candidates, None, &skip, |d| manager.is_throttled(d)) else {
            break;
        };
        match fetch_from_url(ctx, repo, &url, &urls.sources, manager).await {
            FromUrl::Throttled | FromUrl::BlockThrottled(_) => {
                deferred.insert(url.as_str().to_owned());
                continue;
            }
            // One request asks for [`MAX_OIDS_PER_FETCH`] objects at most (a state of
            // 2 000 refs needs several): a URL that gave a full request is asked again
            // for the rest in this attempt, not after a backoff. Each round needs fewer
            // objects.
            FromUrl::Fetched(n) if n >= MAX_OIDS_PER_FETCH => continue,
            FromUrl::Failed(error) => last_error = Some(error.to_string()),
            FromUrl::Fetched(0) => last_error = Some(format!("{url} lacks the objects")),
            FromUrl::Fetched(_) | FromUrl::NothingToDo => {}
        }
        tried.insert(url.as_str().to_owned());
    }
    enqueue_with_throttled_domains(repo, &urls.candidates, &tried, manager);
    SyncOutcome::Retry { last_error }
}

/// Whether an attempt that started at `started` may start no more fetches: its
/// [`ThrottleManager::attempt_deadline`] passed. A repository listing 32 URLs that each
/// hang for the whole fetch timeout keeps its attempt (and its held events' progress)
/// for the deadline and one fetch timeout at most, not 32 timeouts.
fn is_past_deadline(started: Instant, manager: &ThrottleManager) -> bool {
    manager.now().saturating_duration_since(started) >= manager.attempt_deadline()
}

/// Leaves `repo` with each domain that still has URLs not tried for it. The main loop
/// ends with untried URLs only when their domains had no capacity (throttled when the
/// next URL was chosen, or full when its fetch was about to start), so every such
/// domain gets the repository, even one whose slot has freed since: asking again
/// whether it is throttled now would leave the repository with no domain queue and back
/// it off for nothing (a wave of releases 20 s late).
fn enqueue_with_throttled_domains(
    repo: &RepoRef,
    candidates: &CandidateUrls,
    tried: &HashSet<String>,
    manager: &ThrottleManager,
) {
    let waiting = throttled_domains_with_untried_urls(candidates, tried, |_| true);
    let key = repo.to_string();
    for info in waiting {
        manager.enqueue_identifier(&info.domain, &key, info.tried_urls_for_domain);
    }
}

#[cfg(test)]
mod mocked;
#[cfg(test)]
mod tests;
