//! Clone URL hosts are resolved once, through a resolver the caller can replace, every
//! address checked, and git connects to the checked address. Real git servers on
//! 127.0.0.1, reached through a public-looking name only the test's resolver knows
//! (`.test` names never resolve through DNS).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{
    ChannelSink, GitError, GitFetcher, GitFetcherConfig, MemoryAnnouncements, NpubLayout, Origin,
    Purgatory, PurgatoryOutput, StaticResolver,
};
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use nostr::prelude::*;
use prometheus::Registry;
use support::{counter, has_object, init_bare_repo, GitDaemon, GitHttpServer, SourceRepo, TempDir};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const NAME: &str = "git.purgatory.test";

/// `NAME` resolves to 127.0.0.1, for this test only.
fn resolver() -> Arc<StaticResolver> {
    Arc::new(StaticResolver::new().with(NAME, [LOOPBACK]))
}

/// A purgatory for `owner`'s "r" (local repository created) with this policy, fetching
/// through the test's resolver.
fn purgatory(
    dir: &TempDir,
    owner: &Keys,
    url: &str,
    policy: CloneUrlPolicy,
    registry: Registry,
) -> (
    Purgatory,
    tokio::sync::mpsc::UnboundedReceiver<PurgatoryOutput>,
    GitFetcher,
    std::path::PathBuf,
) {
    let fetcher = GitFetcher::new(GitFetcherConfig {
        policy: policy.clone(),
        resolver: resolver(),
        fetch_timeout: Duration::from_secs(20),
        ..GitFetcherConfig::default()
    });
    let announcements = Arc::new(MemoryAnnouncements::new());
    announcements
        .add(Announcement::new("r").clone_urls(&[url]).sign(owner))
        .unwrap();
    let root = dir.join("repos");
    let local = NpubLayout::new(&root)
        .path_of(&owner.public_key(), "r")
        .unwrap();
    init_bare_repo(&local);
    let (sink, output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(&root)
        .git_backend(Arc::new(fetcher.clone()))
        .clone_policy(policy)
        .registry(registry)
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    (purgatory, output, fetcher, local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_is_refused_when_local_addresses_are_not_allowed() {
    let dir = TempDir::new("purgatory-pinning-refused");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let tip = source.commit("served on loopback");
    let server = GitHttpServer::start(dir.join("served"), LOOPBACK).await;
    let url = format!("http://{NAME}:{}/r.git", server.addr().port());
    let owner = Keys::generate();
    // Plain http is allowed (the server is not https); local addresses are not.
    let policy = CloneUrlPolicy::new().allow_http(true);
    let registry = Registry::new();
    let (purgatory, _output, fetcher, _local) =
        purgatory(&dir, &owner, &url, policy, registry.clone());
    let run = events::spawn_run(&purgatory);
    let repo = RepoRef::new(owner.public_key(), "r").unwrap();
    let attempts = |registry: &Registry| {
        registry
            .gather()
            .iter()
            .filter(|family| family.name() == "purgatory_sync_attempts_total")
            .flat_map(|family| family.get_metric())
            .map(|metric| metric.get_counter().get_value())
            .sum::<f64>()
    };

    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &tip);
    purgatory.add_pr(pr, Origin::Synced).unwrap();
    events::eventually("the first attempt", Duration::from_secs(10), || {
        attempts(&registry) >= 1.0
    })
    .await;
    // Tried again at once: refused again, logged and counted once for the URL.
    purgatory.trigger_repository_sync(&repo);
    events::eventually("the second attempt", Duration::from_secs(10), || {
        attempts(&registry) >= 2.0
    })
    .await;
    assert_eq!(
        server.stats().requests,
        0,
        "the loopback server was never reached"
    );
    assert_eq!(fetcher.fetch_processes_spawned(), 0, "no git fetch ran");
    assert_eq!(purgatory.held(), 1);
    assert_eq!(
        counter(
            &registry,
            "purgatory_clone_url_refusals_total",
            "reason",
            "forbidden_address"
        ),
        1.0
    );

    // The fetcher on its own says why, and spawns nothing either.
    let refused = fetcher
        .fetch(&dir.join("repos"), &url, &[GitOid::parse(&tip).unwrap()])
        .await;
    assert!(
        matches!(refused, Err(GitError::ForbiddenAddress { address, .. }) if address == LOOPBACK),
        "{refused:?}"
    );
    assert_eq!(fetcher.fetch_processes_spawned(), 0);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_connects_to_the_address_the_resolver_gave_over_http_and_git() {
    let dir = TempDir::new("purgatory-pinning-allowed");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let first = source.commit("first");
    let second = source.commit("second");
    let server = GitHttpServer::start(dir.join("served"), LOOPBACK).await;
    let daemon = GitDaemon::start(&dir.join("served"));
    let http_url = format!("http://{NAME}:{}/r.git", server.addr().port());
    let git_url = format!("git://{NAME}:{}/r.git", daemon.addr().port());
    let owner = Keys::generate();
    let policy = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_git_protocol(true)
        .allow_local_addresses(true);

    // Over http, through the whole purgatory: the name is unknown to DNS, so the fetch
    // can only have reached the server through the pinned address.
    let (purgatory, mut output, fetcher, local) =
        purgatory(&dir, &owner, &http_url, policy.clone(), Registry::new());
    let run = events::spawn_run(&purgatory);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &first);
    purgatory.add_pr(pr.clone(), Origin::Synced).unwrap();
    match tokio::time::timeout(Duration::from_secs(30), output.recv()).await {
        Ok(Some(PurgatoryOutput::Released(held))) => assert_eq!(held.event.id, pr.id),
        other => panic!("expected the release, got {other:?}"),
    }
    assert!(has_object(&local, &first));
    assert_eq!(server.stats().fetches(), 1);
    purgatory.shutdown();
    run.await.unwrap().unwrap();

    // Over git://: the address replaces the name in the URL git is given.
    let pinned = fetcher.check_url(&git_url).await.unwrap();
    assert_eq!(
        pinned.git_url(),
        format!("git://127.0.0.1:{}/r.git", daemon.addr().port())
    );
    let report = fetcher
        .fetch(&local, &git_url, &[GitOid::parse(&second).unwrap()])
        .await
        .unwrap();
    assert_eq!(report.missing.len(), 0, "{report:?}");
    assert!(has_object(&local, &second));
}
