use super::super::test_support::repository;
use super::*;

fn policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(false)
        .allow_local_addresses(false)
}

fn candidates(urls: &[&str]) -> CandidateUrls {
    candidate_urls(
        &repository(&[urls]),
        &policy(),
        &OwnService::new(),
        DEFAULT_MAX_CLONE_URLS,
    )
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
    let none = candidate_urls(
        &RepositoryData::default(),
        &policy(),
        &OwnService::new(),
        DEFAULT_MAX_CLONE_URLS,
    );
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
    let c = candidate_urls(
        &data,
        &policy(),
        &OwnService::new().with_host("git.example.com"),
        DEFAULT_MAX_CLONE_URLS,
    );
    assert_eq!(
        flat(&c),
        // Grouped by throttle key: the mirror shares example.com's.
        vec![
            "https://example.com/repo.git",
            "https://mirror.git.example.com/repo.git",
            "https://example.com.evil.org/repo.git",
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
    let c = candidate_urls(&data, &policy(), &OwnService::new(), DEFAULT_MAX_CLONE_URLS);
    assert_eq!(flat(&c), vec!["https://public.example.org/repo.git"]);

    let loopback = repository(&[&["http://127.0.0.1:8080/repo.git"]]);
    let lenient = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true);
    let c = candidate_urls(
        &loopback,
        &lenient,
        &OwnService::new(),
        DEFAULT_MAX_CLONE_URLS,
    );
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
    let c = candidate_urls(&data, &policy(), &OwnService::new(), DEFAULT_MAX_CLONE_URLS);
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

#[test]
fn own_service_urls_are_skipped_by_host_and_port_and_counted() {
    let data = repository(&[&[
        "http://127.0.0.1:7000/npub1owner/repo.git",
        "http://127.0.0.1:8000/repo.git",
        "http://127.0.0.1:7000/npub1owner/repo.git",
    ]]);
    let lenient = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true);
    let own = OwnService::new()
        .with_url("ws://127.0.0.1:7000")
        .expect("has a host");
    let selection = select_candidates(&data, &lenient, &own, DEFAULT_MAX_CLONE_URLS);
    assert_eq!(
        flat(&selection.urls),
        vec!["http://127.0.0.1:8000/repo.git"]
    );
    assert_eq!(selection.own_service, 2);
    assert_eq!(selection.refused_by_policy, 0);
    assert_eq!(selection.listed, 3);
    assert_eq!(selection.not_fetchable(), None);
    let c = next_url(&selection.urls, None, &tried(&[]), not_throttled);
    assert_eq!(as_str(c).as_deref(), Some("http://127.0.0.1:8000/repo.git"));
}

#[test]
fn no_url_left_says_why() {
    let lenient = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true);
    let own = OwnService::new()
        .with_url("wss://relay.example.com")
        .expect("has a host");
    let why = |urls: &[&str], policy: &CloneUrlPolicy| {
        select_candidates(&repository(&[urls]), policy, &own, DEFAULT_MAX_CLONE_URLS)
            .not_fetchable()
    };
    assert_eq!(why(&[], &lenient), Some(NotFetchable::NoCloneUrls));
    assert_eq!(
        why(&["https://relay.example.com/npub1x/repo.git"], &lenient),
        Some(NotFetchable::OnlyOwnService)
    );
    assert_eq!(
        why(&["file:///etc/passwd", "ssh://host/x"], &lenient),
        Some(NotFetchable::AllRefusedByPolicy)
    );
    assert_eq!(
        why(
            &[
                "https://relay.example.com/npub1x/repo.git",
                "http://localhost/r.git"
            ],
            &policy()
        ),
        Some(NotFetchable::NoUsableCloneUrl)
    );
    assert_eq!(why(&["https://mirror.example.org/r.git"], &policy()), None);
}

#[test]
fn subdomains_of_one_registrable_domain_are_grouped_under_one_throttle_key() {
    let urls: Vec<String> = (0..5)
        .map(|i| format!("https://s{i}.evil.example/r.git"))
        .chain(["https://honest.example/r.git".to_owned()])
        .collect();
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let c = candidates(&refs);
    assert_eq!(
        c.keys().collect::<Vec<_>>(),
        vec!["evil.example", "honest.example"]
    );
    assert_eq!(c["evil.example"].len(), 5);
    // A throttled key holds back every subdomain at once.
    let url = next_url(&c, None, &tried(&[]), |d| d == "evil.example");
    assert_eq!(as_str(url).as_deref(), Some("https://honest.example/r.git"));
}

#[test]
fn urls_past_the_cap_are_left_out_and_counted() {
    let urls: Vec<String> = (0..500)
        .map(|i| format!("https://s{i}.evil.example/r.git"))
        .collect();
    let mut refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    // Duplicates count once and never against the cap.
    refs.insert(1, refs[0]);
    let selection = select_candidates(&repository(&[&refs]), &policy(), &OwnService::new(), 32);
    assert_eq!(selection.listed, 501);
    assert_eq!(selection.over_cap, 468);
    let kept = flat(&selection.urls);
    assert_eq!(kept.len(), 32);
    assert_eq!(kept[0], "https://s0.evil.example/r.git");
    assert_eq!(kept[31], "https://s31.evil.example/r.git");
    assert_eq!(selection.not_fetchable(), None);
}

#[test]
fn an_overridden_host_is_grouped_under_its_own_key() {
    let refs = [
        "https://git.example.org/r.git",
        "https://ci.example.org/r.git",
        "https://git.example.org/mirror.git",
    ];
    let limits: HostLimits = "git.example.org=120/10".parse().unwrap();
    let selection = select_candidates_keyed(
        &repository(&[&refs]),
        &policy(),
        &OwnService::new(),
        DEFAULT_MAX_CLONE_URLS,
        &limits,
    );
    assert_eq!(
        selection.urls.keys().collect::<Vec<_>>(),
        vec!["git.example.org", "example.org"]
    );
    assert_eq!(selection.urls["git.example.org"].len(), 2);
    // Without the override, one registrable domain: one key.
    assert_eq!(
        candidates(&refs).keys().collect::<Vec<_>>(),
        vec!["example.org"]
    );
}
