//! An operator's per-host override, with real git over smart HTTP: 40 repositories on
//! one host, which the default limits (30 fetches a minute) would hold to a floor of one
//! window for the last ten, are all fetched and released well within it under an
//! override of 120 a minute and 10 in flight, and the server saw more than 30 fetches
//! start within one minute. The host is a name resolved by the test's resolver to
//! loopback, so the override also keeps it out of the address block's default throttle.
//! (The default's floor itself, and `unlimited`, are measured on virtual time in
//! `virtual_time.rs`.)
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
use grasp_sync_core::purgatory::HostLimits;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use nostr::prelude::*;
use support::{GitHttpServer, SourceRepo, TempDir};

const HOST: &str = "git.polite.test";
const REPOSITORIES: usize = 40;
/// The default per-minute limit: no more fetches than this start within a minute
/// without an override.
const DEFAULT_PER_MINUTE: usize = 30;
/// Every event is released within this under the override (the default's floor for
/// the last ten is one minute).
const WITHIN: Duration = Duration::from_secs(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_repositories_on_an_overridden_host_are_fetched_within_the_default_s_window() {
    let dir = TempDir::new("purgatory-polite-hosts");
    let tips: Vec<String> = (0..REPOSITORIES)
        .map(|n| SourceRepo::create(dir.join(format!("served/r{n}.git"))).commit("work"))
        .collect();
    let server = GitHttpServer::start(dir.join("served"), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let resolver = StaticResolver::new().with(HOST, [IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let policy = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true);
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy.clone(),
        resolver: Arc::new(resolver.clone()),
        ..GitFetcherConfig::default()
    });
    let announcements = Arc::new(MemoryAnnouncements::new());
    let owner = Keys::generate();
    for n in 0..REPOSITORIES {
        let url = format!("http://{HOST}:{}/r{n}.git", server.addr().port());
        announcements
            .add(
                Announcement::new(&format!("r{n}"))
                    .clone_urls(&[url.as_str()])
                    .sign(&owner),
            )
            .unwrap();
    }
    let limits: HostLimits = format!("{HOST}=120/10").parse().unwrap();
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(dir.join("repos"))
        .git_backend(Arc::new(fetcher))
        .resolver(Arc::new(resolver))
        .clone_policy(policy)
        .host_limits(limits)
        .immediate_delay(Duration::ZERO)
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);

    let started = Instant::now();
    for (n, tip) in tips.iter().enumerate() {
        let pr = pull_request(
            &Keys::generate(),
            &owner.public_key(),
            &format!("r{n}"),
            tip,
        );
        purgatory.add_pr(pr, Origin::Synced).unwrap();
    }
    let mut released = 0;
    let mut saw_override = false;
    let all = tokio::time::timeout(WITHIN, async {
        while released < REPOSITORIES {
            match output.recv().await {
                Some(PurgatoryOutput::Released(_)) => released += 1,
                Some(_) => {}
                None => panic!("the purgatory stopped"),
            }
            let status = purgatory.status_now();
            if let Some(host) = status.throttled_hosts.iter().find(|h| h.key == HOST) {
                assert!(host.overridden, "{host:?}");
                assert_eq!(host.limit.to_string(), "120/10");
                assert!(host.in_flight <= 10, "{host:?}");
                saw_override = true;
            }
            assert!(
                status
                    .throttled_hosts
                    .iter()
                    .all(|h| h.key != "127.0.0.0/24"),
                "the overridden host takes no slot of its address block: {:?}",
                status.throttled_hosts
            );
        }
    })
    .await;
    let took = started.elapsed();
    assert!(
        all.is_ok(),
        "{released} of {REPOSITORIES} released within {WITHIN:?}"
    );
    eprintln!("{REPOSITORIES} repositories released in {took:?}");
    assert!(saw_override, "the status showed the overridden throttle");
    let stats = server.stats();
    assert!(stats.fetches() >= REPOSITORIES, "{}", stats.fetches());
    assert!(
        server.max_fetches_in_any_window(Duration::from_secs(60)) > DEFAULT_PER_MINUTE,
        "more fetches started within a minute than the default allows"
    );
    assert!(stats.max_concurrent <= 10, "{}", stats.max_concurrent);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
