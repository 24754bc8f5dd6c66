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

use crate::nip34::RepoAnnouncement;
use crate::url_policy::{is_own_domain, CloneUrl, CloneUrlPolicy};

/// What the local store knows about a repository: its announcements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepositoryData {
    /// Every announcement of the repository (one per maintainer).
    pub announcements: Vec<RepoAnnouncement>,
}

impl RepositoryData {
    /// The clone URLs of all announcements, in order, with repetitions.
    pub fn clone_urls(&self) -> impl Iterator<Item = &str> {
        self.announcements
            .iter()
            .flat_map(|announcement| announcement.clone_urls.iter().map(String::as_str))
    }
}

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
mod tests {
    use super::super::test_support::repository;
    use super::*;

    fn policy() -> CloneUrlPolicy {
        CloneUrlPolicy::new()
            .allow_http(false)
            .allow_local_addresses(false)
    }

    fn candidates(urls: &[&str]) -> CandidateUrls {
        candidate_urls(&repository(&[urls]), &policy(), None)
    }

    fn tried(list: &[&str]) -> HashSet<String> {
        list.iter().map(|u| (*u).to_owned()).collect()
    }

    fn not_throttled(_: &str) -> bool {
        false
    }

    fn as_str(url: Option<CloneUrl>) -> Option<String> {
        url.map(|u| u.as_str().to_owned())
    }

    fn flat(candidates: &CandidateUrls) -> Vec<&str> {
        candidates
            .values()
            .flatten()
            .map(CloneUrl::as_str)
            .collect()
    }

    #[test]
    fn no_candidates_no_url() {
        let none = candidate_urls(&RepositoryData::default(), &policy(), None);
        assert!(none.is_empty());
        assert_eq!(next_url(&none, None, &tried(&[]), not_throttled), None);
        assert_eq!(
            next_url(&none, Some("example.com"), &tried(&[]), not_throttled),
            None
        );
    }

    #[test]
    fn returns_non_throttled() {
        let c = candidates(&["https://example.com/repo.git", "https://other.com/repo.git"]);
        let url = next_url(&c, None, &tried(&[]), |d| d == "example.com");
        assert_eq!(as_str(url).as_deref(), Some("https://other.com/repo.git"));
        let url = next_url(&c, None, &tried(&[]), not_throttled);
        assert_eq!(as_str(url).as_deref(), Some("https://example.com/repo.git"));
        assert_eq!(next_url(&c, None, &tried(&[]), |_| true), None);
    }

    #[test]
    fn skips_tried() {
        let c = candidates(&["https://example.com/repo.git", "https://other.com/repo.git"]);
        let url = next_url(
            &c,
            None,
            &tried(&["https://example.com/repo.git"]),
            not_throttled,
        );
        assert_eq!(as_str(url).as_deref(), Some("https://other.com/repo.git"));
    }

    #[test]
    fn specific_domain_even_when_throttled() {
        let c = candidates(&[
            "https://example.com/repo.git",
            "https://other.com/a.git",
            "https://other.com/b.git",
        ]);
        let url = next_url(&c, Some("other.com"), &tried(&[]), |_| true);
        assert_eq!(as_str(url).as_deref(), Some("https://other.com/a.git"));
        let url = next_url(
            &c,
            Some("other.com"),
            &tried(&["https://other.com/a.git"]),
            |_| true,
        );
        assert_eq!(as_str(url).as_deref(), Some("https://other.com/b.git"));
        assert_eq!(
            next_url(&c, Some("unknown.com"), &tried(&[]), not_throttled),
            None
        );
    }

    #[test]
    fn none_when_all_tried() {
        let c = candidates(&["https://example.com/repo.git"]);
        let all = tried(&["https://example.com/repo.git"]);
        assert_eq!(next_url(&c, None, &all, not_throttled), None);
        assert_eq!(next_url(&c, Some("example.com"), &all, not_throttled), None);
    }

    #[test]
    fn throttled_domains_with_untried_urls_lists_only_those() {
        let c = candidates(&[
            "https://a.com/1.git",
            "https://a.com/2.git",
            "https://b.com/1.git",
            "https://c.com/1.git",
        ]);
        let done = tried(&[
            "https://a.com/1.git",
            "https://c.com/1.git",
            "https://x.com/1.git",
        ]);
        let info = throttled_domains_with_untried_urls(&c, &done, |d| d != "b.com");
        assert_eq!(
            info,
            vec![ThrottledDomainInfo {
                domain: "a.com".to_owned(),
                tried_urls_for_domain: tried(&["https://a.com/1.git"]),
            }]
        );
        assert!(throttled_domains_with_untried_urls(&c, &done, not_throttled).is_empty());
    }

    #[test]
    fn own_domain_exact_match_excludes_only_that_host() {
        let data = repository(&[&[
            "https://git.example.com/repo.git",
            "https://example.com/repo.git",
            "https://example.com.evil.org/repo.git",
            "https://mirror.git.example.com/repo.git",
        ]]);
        let c = candidate_urls(&data, &policy(), Some("git.example.com"));
        assert_eq!(
            flat(&c),
            vec![
                "https://example.com/repo.git",
                "https://example.com.evil.org/repo.git",
                "https://mirror.git.example.com/repo.git",
            ]
        );
        assert!(!c.contains_key("git.example.com"));
    }

    #[test]
    fn policy_drops_file_and_private_urls() {
        let data = repository(&[&[
            "file:///etc/passwd",
            "https://127.0.0.1/repo.git",
            "https://192.168.1.10/repo.git",
            "https://localhost/repo.git",
            "http://plain.example.org/repo.git",
            "https://public.example.org/repo.git",
        ]]);
        let c = candidate_urls(&data, &policy(), None);
        assert_eq!(flat(&c), vec!["https://public.example.org/repo.git"]);

        let loopback = repository(&[&["http://127.0.0.1:8080/repo.git"]]);
        let lenient = CloneUrlPolicy::new()
            .allow_http(true)
            .allow_local_addresses(true);
        let c = candidate_urls(&loopback, &lenient, None);
        assert_eq!(flat(&c), vec!["http://127.0.0.1:8080/repo.git"]);
    }

    #[test]
    fn dedups_and_groups_in_first_appearance_order() {
        let data = repository(&[
            &["https://b.com/1.git", "https://a.com/1.git"],
            &[
                "https://a.com/1.git",
                "https://b.com/2.git",
                "https://b.com/1.git",
            ],
        ]);
        let c = candidate_urls(&data, &policy(), None);
        assert_eq!(c.keys().collect::<Vec<_>>(), vec!["b.com", "a.com"]);
        assert_eq!(
            flat(&c),
            vec![
                "https://b.com/1.git",
                "https://b.com/2.git",
                "https://a.com/1.git"
            ]
        );
        assert_eq!(data.clone_urls().count(), 5);
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::super::test_support::repository;
    use super::*;

    fn url() -> impl Strategy<Value = String> {
        (0u8..4, 0u8..3).prop_map(|(host, path)| format!("https://h{host}.example/{path}.git"))
    }

    proptest! {
        #[test]
        fn next_url_is_an_untried_candidate_of_an_allowed_domain(
            urls in proptest::collection::vec(url(), 0..10),
            tried in proptest::collection::hash_set(url(), 0..6),
            throttled in proptest::collection::hash_set(0u8..4, 0..4),
        ) {
            let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
            let candidates = candidate_urls(&repository(&[&refs]), &CloneUrlPolicy::new(), None);
            let throttled: HashSet<String> = throttled.iter().map(|h| format!("h{h}.example")).collect();
            let is_throttled = |d: &str| throttled.contains(d);
            let any_left = candidates.iter().any(|(d, us)| {
                !is_throttled(d) && us.iter().any(|u| !tried.contains(u.as_str()))
            });
            match next_url(&candidates, None, &tried, is_throttled) {
                Some(url) => {
                    prop_assert!(urls.contains(&url.as_str().to_owned()));
                    prop_assert!(!tried.contains(url.as_str()));
                    prop_assert!(!is_throttled(url.domain()));
                }
                None => prop_assert!(!any_left),
            }
            for info in throttled_domains_with_untried_urls(&candidates, &tried, is_throttled) {
                prop_assert!(is_throttled(&info.domain));
                prop_assert!(next_url(&candidates, Some(&info.domain), &tried, is_throttled).is_some());
                prop_assert!(info.tried_urls_for_domain.is_subset(&tried));
            }
        }
    }
}
