//! Which clone URL to fetch from next: the pure part of the spec's
//! `sync_identifier_next_url` and `get_throttled_domains_with_untried_urls`.
//!
//! [`candidate_urls`] turns a repository's announcements into the clone URLs
//! we may fetch, grouped by domain; [`next_url`] and
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

use super::repository::RepositoryData;
use crate::url_policy::{is_own_domain, CloneUrl, CloneUrlPolicy};

/// Clone URLs that passed the policy, grouped by domain, in first-appearance
/// order (both the domains and the URLs within a domain).
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

/// The clone URLs of all announcements in `data` that we may fetch from.
///
/// Duplicates are dropped, as are URLs the `policy` rejects (each logged at
/// debug level) and URLs whose host is exactly `own_domain` (our own git
/// server has nothing we lack). A host that merely contains `own_domain`,
/// such as a subdomain, is kept.
pub fn candidate_urls(
    data: &RepositoryData,
    policy: &CloneUrlPolicy,
    own_domain: Option<&str>,
) -> CandidateUrls {
    let mut candidates = CandidateUrls::new();
    for raw in data.clone_urls() {
        let Some(url) = accepted_url(raw, policy, own_domain) else {
            continue;
        };
        let urls = candidates.entry(url.domain().to_owned()).or_default();
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    candidates
}

/// `raw` as a checked URL, or `None` if the policy rejects it or it is ours.
fn accepted_url(raw: &str, policy: &CloneUrlPolicy, own_domain: Option<&str>) -> Option<CloneUrl> {
    let url = match policy.check(raw) {
        Ok(url) => url,
        Err(error) => {
            tracing::debug!(url = raw, %error, "clone url rejected by policy");
            return None;
        }
    };
    if own_domain.is_some_and(|own| is_own_domain(url.as_str(), own)) {
        tracing::debug!(url = raw, "clone url skipped: our own domain");
        return None;
    }
    Some(url)
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
