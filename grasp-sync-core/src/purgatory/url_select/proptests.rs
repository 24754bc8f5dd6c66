use proptest::prelude::*;

use super::super::test_support::repository;
use super::*;
use crate::purgatory::throttle_key;

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
        let candidates = candidate_urls(&repository(&[&refs]), &CloneUrlPolicy::new(), &OwnService::new(), DEFAULT_MAX_CLONE_URLS);
        let throttled: HashSet<String> = throttled.iter().map(|h| format!("h{h}.example")).collect();
        let is_throttled = |d: &str| throttled.contains(d);
        let any_left = candidates.iter().any(|(d, us)| {
            !is_throttled(d) && us.iter().any(|u| !tried.contains(u.as_str()))
        });
        match next_url(&candidates, None, &tried, is_throttled) {
            Some(url) => {
                prop_assert!(urls.contains(&url.as_str().to_owned()));
                prop_assert!(!tried.contains(url.as_str()));
                prop_assert!(!is_throttled(&throttle_key(url.domain())));
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
