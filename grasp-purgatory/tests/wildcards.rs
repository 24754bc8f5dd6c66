//! Wildcard subdomains cannot take every fetch slot: 500 clone URLs on 500 subdomains
//! of one domain, all pointing at a server that accepts TCP and never answers, share
//! one per-domain throttle (5 in flight), and each announcement gives at most 32 of
//! them (`MAX_ANNOUNCEMENT_CLONE_URLS`); an honest repository on another host (another
//! /24: hosts of one address block share a throttle too) is fetched at once. Real git
//! over http, names resolved by the test's resolver (`.test` never resolves through
//! DNS).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_purgatory::{
    ChannelSink, GitFetcher, GitFetcherConfig, MemoryAnnouncements, Origin, Purgatory,
    PurgatoryOutput, StaticResolver,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use nostr::prelude::*;
use prometheus::Registry;
use support::{counter, GitHttpServer, HangingServer, SourceRepo, TempDir};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The honest server's address: another /24 than the hanging server's.
const HONEST_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1));
const SUBDOMAINS: usize = 500;
const ATTACKER_REPOSITORIES: usize = 20;
/// How long one git command may run: far longer than the honest fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);
/// The honest repository's events are released within this (the fetch timeout the
/// hanging fetches hold their slots for is four times as long).
const HONEST_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_wildcard_subdomains_at_a_hanging_server_leave_room_for_an_honest_fetch() {
    let dir = TempDir::new("purgatory-wildcards");
    let hanging = HangingServer::start().await;
    let source = SourceRepo::create(dir.join("served/honest.git"));
    let tip = source.commit("honest work");
    let honest_server = GitHttpServer::start(dir.join("served"), HONEST_ADDRESS).await;

    let evil_names: Vec<String> = (0..SUBDOMAINS).map(|i| format!("s{i}.evil.test")).collect();
    let resolver = evil_names
        .iter()
        .fold(StaticResolver::new(), |resolver, name| {
            resolver.with(name, [LOOPBACK])
        })
        .with("honest.test", [HONEST_ADDRESS]);
    let evil_urls: Vec<String> = evil_names
        .iter()
        .map(|name| format!("http://{name}:{}/r.git", hanging.addr().port()))
        .collect();
    let honest_url = format!(
        "http://honest.test:{}/honest.git",
        honest_server.addr().port()
    );

    let policy = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true);
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy.clone(),
        resolver: Arc::new(resolver.clone()),
        fetch_timeout: FETCH_TIMEOUT,
        ..GitFetcherConfig::default()
    });
    let announcements = Arc::new(MemoryAnnouncements::new());
    let attackers: Vec<Keys> = (0..ATTACKER_REPOSITORIES)
        .map(|_| Keys::generate())
        .collect();
    for attacker in &attackers {
        announcements
            .add(Announcement::new("r").clone_urls(&evil_urls).sign(attacker))
            .unwrap();
    }
    let owner = Keys::generate();
    announcements
        .add(
            Announcement::new("honest")
                .clone_urls(&[honest_url.as_str()])
                .sign(&owner),
        )
        .unwrap();
    let registry = Registry::new();
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(dir.join("repos"))
        .git_backend(Arc::new(fetcher.clone()))
        .resolver(Arc::new(resolver))
        .clone_policy(policy)
        .fetch_timeout(FETCH_TIMEOUT)
        .registry(registry.clone())
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);

    // Every attacker repository waits for an object no server will send.
    for (n, attacker) in attackers.iter().enumerate() {
        let missing = format!("{n:040x}");
        let pr = pull_request(&Keys::generate(), &attacker.public_key(), "r", &missing);
        purgatory.add_pr(pr, Origin::Synced).unwrap();
    }
    assert!(
        hanging.wait_for_accepted(5, Duration::from_secs(60)).await,
        "the attackers' fetches reached the hanging server"
    );
    events::eventually(
        "every attacker repository had its first attempt or a fetch",
        Duration::from_secs(60),
        || {
            let attempts = counter(
                &registry,
                "purgatory_sync_attempts_total",
                "result",
                "retry",
            );
            let fetching = fetcher.fetch_processes_spawned() as f64;
            attempts + fetching >= ATTACKER_REPOSITORIES as f64 || hanging.accepted() >= 16
        },
    )
    .await;

    // Now the honest repository: its fetch must not wait for the hanging ones.
    let started = Instant::now();
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "honest", &tip);
    purgatory.add_pr(pr.clone(), Origin::Synced).unwrap();
    let released = tokio::time::timeout(HONEST_WITHIN, async {
        loop {
            match output.recv().await {
                Some(PurgatoryOutput::Released(held)) if held.event.id == pr.id => return,
                Some(_) => {}
                None => panic!("the purgatory stopped"),
            }
        }
    })
    .await;
    let took = started.elapsed();
    assert!(
        released.is_ok(),
        "the honest event was not released within {HONEST_WITHIN:?} (hanging connections: {})",
        hanging.accepted()
    );
    eprintln!("the honest event was released {took:?} after it arrived");
    assert!(
        hanging.accepted() <= 5,
        "the subdomains share one throttle of 5: {} connections",
        hanging.accepted()
    );
    // An announcement's clone URLs past the first 32 are not even read
    // (`MAX_ANNOUNCEMENT_CLONE_URLS`), so no attempt sees more than the per-attempt cap.
    let listed = Announcement::new("r")
        .clone_urls(&evil_urls)
        .sign(&attackers[0]);
    let parsed = grasp_sync_core::nip34::parse_announcement(&listed).unwrap();
    assert_eq!(
        parsed.clone_urls.len(),
        grasp_sync_core::nip34::MAX_ANNOUNCEMENT_CLONE_URLS
    );
    assert_eq!(
        parsed.skipped.len(),
        SUBDOMAINS - grasp_sync_core::nip34::MAX_ANNOUNCEMENT_CLONE_URLS
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
