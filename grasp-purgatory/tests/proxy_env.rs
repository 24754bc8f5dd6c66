//! Proxy variables would make git connect through a proxy to the clone URL's host
//! *name*, bypassing the address purgatory checked and pinned: git does not get them
//! unless the operator keeps them (`GitFetcherConfig::keep_proxy_env`). Here
//! `http_proxy` points at a server that never answers; a fetch from a real git server
//! on 127.0.0.1 (through a name only the test's resolver knows) succeeds because git
//! ignores the proxy, and hangs until the timeout when the proxy is kept.
//!
//! Its own test binary: it sets the process environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{GitError, GitFetcher, GitFetcherConfig, StaticResolver};
use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use support::{GitHttpServer, HangingServer, SourceRepo, TempDir};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const NAME: &str = "git.proxy.test";

fn fetcher(keep_proxy_env: bool) -> GitFetcher {
    GitFetcher::new(GitFetcherConfig {
        policy: CloneUrlPolicy::new()
            .allow_http(true)
            .allow_local_addresses(true),
        resolver: Arc::new(StaticResolver::new().with(NAME, [LOOPBACK])),
        fetch_timeout: Duration::from_secs(5),
        keep_proxy_env,
        ..GitFetcherConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_ignores_proxy_variables_unless_they_are_kept() {
    let dir = TempDir::new("purgatory-proxy-env");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let tip = GitOid::parse(&source.commit("behind no proxy")).unwrap();
    let server = GitHttpServer::start(dir.join("served"), LOOPBACK).await;
    let proxy = HangingServer::start().await;
    let proxy_url = format!("http://{}", proxy.addr());
    for name in ["http_proxy", "HTTP_PROXY", "ALL_PROXY"] {
        std::env::set_var(name, &proxy_url);
    }
    for name in ["no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY"] {
        std::env::remove_var(name);
    }
    let url = format!("http://{NAME}:{}/r.git", server.addr().port());

    let local = dir.join("cleared.git");
    support::init_bare_repo(&local);
    let report = fetcher(false)
        .fetch(&local, &url, std::slice::from_ref(&tip))
        .await
        .unwrap();
    assert!(report.present.contains(&tip), "{report:?}");
    assert_eq!(proxy.accepted(), 0, "the proxy was never asked");

    // Kept: git goes through the proxy, which never answers.
    let local = dir.join("kept.git");
    support::init_bare_repo(&local);
    let result = fetcher(true)
        .fetch(&local, &url, std::slice::from_ref(&tip))
        .await;
    assert!(
        matches!(result, Err(GitError::Timeout { .. })),
        "{result:?}"
    );
    assert!(proxy.accepted() >= 1, "the kept proxy was used");
}
