//! Which clone URL to fetch from next: the pure part of the spec's
//! `sync_identifier_next_url` and `get_throttled_domains_with_untried_urls`.
//!
//! [`select_candidates`] (and [`candidate_urls`], its URLs only) turns a
//! repository's announcements into the clone URLs we may fetch, at most a cap of them
//! per attempt ([`DEFAULT_MAX_CLONE_URLS`]), grouped by the throttle they share
//! ([`throttle_key`](super::throttle_key): subdomains of one registrable domain share one; an operator's
//! [`HostLimits`] override makes a host a key of its own), never one on
//! our own service ([`OwnService`]); [`next_url`] and
//! [`throttled_domains_with_untried_urls`] choose among them. Everything keeps
//! the order in which URLs first appear in the announcements, so the same
//! inputs always give the same answer.
//!
//! The spec's `sync_identifier_next_url` first returns `None` when the
//! identifier has no pending events or needs no OIDs. Those checks ask the
//! [`SyncContext`](super::SyncContext) and belong to the async caller, which
//! makes them before calling [`next_url`].

use std::collections::HashSet;

use indexmap::IndexMap;

use super::accounting::NotFetchable;
use super::host_limits::HostLimits;
use super::own_service::OwnService;
use super::repository::RepositoryData;
use crate::url_policy::{CloneUrl, CloneUrlPolicy};

/// The default cap on the distinct clone URLs one attempt of a repository may try
/// (its announcements' and its pull requests' together): 32. The rest are counted
/// ([`CandidateSelection::over_cap`]) and left out.
pub const DEFAULT_MAX_CLONE_URLS: usize = 32;

/// Clone URLs that passed the policy, grouped by throttle key ([`HostLimits::throttle_key`]:
/// the "domain" of the per-domain throttle), in first-appearance order (both the keys
/// and the URLs within a key).
pub type CandidateUrls = IndexMap<String, Vec<CloneUrl>>;

/// A throttled domain that still has URLs not tried for an identifier: the
/// identifier should wait in that domain's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThrottledDomainInfo {
    /// The throttled domain.
    pub domain: String,
    /// URLs of this domain already tried for the identifier.
    pub tried_urls_for_domain: HashSet<String>,
}

/// What [`select_candidates`] found among a repository's clone URLs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CandidateSelection {
    /// The URLs we may fetch from, grouped by domain (see [`CandidateUrls`]).
    pub urls: CandidateUrls,
    /// Clone URLs listed by the announcements (duplicates included).
    pub listed: usize,
    /// Listed URLs the clone-URL policy refused.
    pub refused_by_policy: usize,
    /// Listed URLs on our own service, skipped.
    pub own_service: usize,
    /// Distinct usable URLs left out because the cap was reached.
    pub over_cap: usize,
}

impl CandidateSelection {
    /// Why nothing can be fetched, when no URL is left: none listed, all refused, all
    /// ours, or each one refused or ours. `None` when some URL is left.
    pub fn not_fetchable(&self) -> Option<NotFetchable> {
        if !self.urls.is_empty() {
            return None;
        }
        Some(match (self.refused_by_policy, self.own_service) {
            _ if self.listed == 0 => NotFetchable::NoCloneUrls,
            (0, _) => NotFetchable::OnlyOwnService,
            (_, 0) => NotFetchable::AllRefusedByPolicy,
            _ => NotFetchable::NoUsableCloneUrl,
        })
    }
}

/// The clone URLs of all announcements in `data` that we may fetch from (at most
/// `max_urls` distinct ones, the first listed), grouped by throttle key, with what was
/// dropped and why.
///
/// Duplicates are dropped, as are URLs the `policy` rejects, URLs on our own service
/// (`own`: the destination of the fetch, never a source; see [`OwnService`]) and usable
/// URLs past the first `max_urls`, each logged at debug level and counted.
pub fn select_candidates(
    data: &RepositoryData,
    policy: &CloneUrlPolicy,
    own: &OwnService,
    max_urls: usize,
) -> CandidateSelection {
    select_candidates_keyed(data, policy, own, max_urls, &HostLimits::new())
}

/// [`select_candidates`] with the URLs grouped by the keys `host_limits` gives
/// ([`HostLimits::throttle_key`]: an overridden host is a key of its own), the keys the
/// throttles that fetch them use.
pub fn select_candidates_keyed(
    data: &RepositoryData,
    policy: &CloneUrlPolicy,
    own: &OwnService,
    max_urls: usize,
    host_limits: &HostLimits,
) -> CandidateSelection {
    let mut kept = 0usize;
    let mut selection = CandidateSelection::default();
    for raw in data.clone_urls() {
        selection.listed += 1;
        let url = match policy.check(raw) {
            Ok(url) => url,
            Err(error) => {
                tracing::debug!(url = raw, %error, "clone url rejected by policy");
                selection.refused_by_policy += 1;
                continue;
            }
        };
        if own.is_own_service(&url) {
            tracing::debug!(url = raw, "clone url skipped: our own service");
            selection.own_service += 1;
            continue;
        }
        let key = host_limits.throttle_key(url.domain());
        if selection
            .urls
            .get(&key)
            .is_some_and(|urls| urls.contains(&url))
        {
            continue;
        }
        if kept >= max_urls {
            tracing::debug!(url = raw, max_urls, "clone url left out: over the cap");
            selection.over_cap += 1;
            continue;
        }
        kept += 1;
        selection.urls.entry(key).or_default().push(url);
    }
    selection
}

/// The clone URLs of all announcements in `data` that we may fetch from (at most
/// `max_urls`): the URLs of [`select_candidates`].
pub fn candidate_urls(
    data: &RepositoryData,
    policy: &CloneUrlPolicy,
    own: &OwnService,
    max_urls: usize,
) -> CandidateUrls {
    select_candidates(data, policy, own, max_urls).urls
}

/// The first URL of `urls` not in `tried`.
fn first_untried<'a>(urls: &'a [CloneUrl], tried: &HashSet<String>) -> Option<&'a CloneUrl> {
    urls.iter().find(|url| !tried.contains(url.as_str()))
}

/// The next URL to fetch from.
///
/// With `domain = None` (the main sync): the first URL not in `tried` of the
/// first domain that `is_throttled` does not report. With `Some(domain)` (a
/// domain's queue, which already holds capacity): the first untried URL of
/// that domain, throttled or not. `None` when no such URL exists.
pub fn next_url(
    candidates: &CandidateUrls,
    domain: Option<&str>,
    tried: &HashSet<String>,
    is_throttled: impl Fn(&str) -> bool,
) -> Option<CloneUrl> {
    let found = match domain {
        Some(domain) => candidates
            .get(domain)
            .and_then(|urls| first_untried(urls, tried)),
        None => candidates
            .iter()
            .filter(|(domain, _)| !is_throttled(domain))
            .find_map(|(_, urls)| first_untried(urls, tried)),
    };
    found.cloned()
}

/// The throttled domains that still have URLs not in `tried`, in candidate
/// order, each with the URLs of that domain already tried. The main sync
/// enqueues the identifier with each of them before backing off.
pub fn throttled_domains_with_untried_urls(
    candidates: &CandidateUrls,
    tried: &HashSet<String>,
    is_throttled: impl Fn(&str) -> bool,
) -> Vec<ThrottledDomainInfo> {
    candidates
        .iter()
        .filter(|(domain, urls)| is_throttled(domain) && first_untried(urls, tried).is_some())
        .map(|(domain, urls)| ThrottledDomainInfo {
            domain: domain.clone(),
            tried_urls_for_domain: tried_urls_of(urls, tried),
        })
        .collect()
}

/// The URLs of `urls` that are in `tried`.
fn tried_urls_of(urls: &[CloneUrl], tried: &HashSet<String>) -> HashSet<String> {
    urls.iter()
        .map(CloneUrl::as_str)
        .filter(|url| tried.contains(*url))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
