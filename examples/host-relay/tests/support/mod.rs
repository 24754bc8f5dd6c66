//! The example host's test world: a remote relay behind a tap, a smart-HTTP git
//! server whose repository does not have the state's commit until
//! [`World::publish_commit`], and the NIP-34 events of one repository.
#![allow(dead_code, unreachable_pub)]

pub mod tap;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use grasp_purgatory::NpubLayout;
use grasp_sync_host_example::HostConfig;
use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::{pull_request, reply, root, state, Announcement};
use nostr::prelude::*;

use crate::git_support::{free_port, git, GitHttpServer, SourceRepo, TempDir};
use crate::relay_support::{connect_client, TestRelay, TestRelayConfig};
use tap::Tap;

/// The repository's identifier.
pub const IDENTIFIER: &str = "repo";
/// The longest any test waits for one thing.
pub const WAIT: Duration = Duration::from_secs(90);

/// One repository's events, as the remote relay holds them.
pub struct Events {
    /// The announcement (lists the host and the remote relay, through the tap, and the
    /// git server's clone URL).
    pub announcement: Event,
    /// Its state: `refs/heads/b0` at the commit the git server does not have yet.
    pub state: Event,
    /// A PR proposing the same commit.
    pub pr: Event,
    /// An issue.
    pub issue: Event,
    /// A reply to the issue.
    pub reply: Event,
}

impl Events {
    /// Every event.
    pub fn all(&self) -> Vec<Event> {
        vec![
            self.announcement.clone(),
            self.state.clone(),
            self.pr.clone(),
            self.issue.clone(),
            self.reply.clone(),
        ]
    }
}

/// The world of one test.
pub struct World {
    /// Where the git repositories live (removed on drop).
    pub dir: TempDir,
    /// Serves `served/repo.git` over smart HTTP.
    pub git: GitHttpServer,
    /// Where the state's commit is made (not served).
    pub staging: SourceRepo,
    /// The repository the git server serves.
    pub served: SourceRepo,
    /// The state's commit.
    pub commit: String,
    /// The remote relay.
    pub remote: TestRelay,
    /// The tap in front of it: what the host asks for and gets.
    pub tap: Tap,
    /// The repository's owner.
    pub owner: Keys,
    /// The author of the PR, issue and reply.
    pub contributor: Keys,
    /// Where the host will listen.
    pub host_addr: SocketAddr,
}

impl World {
    /// A remote relay (`config`) behind a tap, a git server without the commit yet.
    pub async fn start(name: &str, config: TestRelayConfig) -> World {
        let dir = TempDir::new(name);
        let staging = SourceRepo::create(dir.join("staging.git"));
        let commit = staging.commit("the state's commit");
        let served = SourceRepo::create(dir.join("served").join(format!("{IDENTIFIER}.git")));
        let git = GitHttpServer::start(dir.join("served"), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
        let remote = TestRelay::start(config).await;
        let tap = Tap::start(remote.url()).await;
        let port = free_port(IpAddr::V4(Ipv4Addr::LOCALHOST));
        World {
            dir,
            git,
            staging,
            served,
            commit,
            remote,
            tap,
            owner: Keys::generate(),
            contributor: Keys::generate(),
            host_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        }
    }

    /// The host's URL (what the announcement lists).
    pub fn host_url(&self) -> RelayUrl {
        RelayUrl::parse(&format!("ws://{}", self.host_addr)).expect("the host's URL")
    }

    /// `30617:<owner>:repo`.
    pub fn coordinate(&self) -> String {
        coordinate(&self.owner.public_key(), IDENTIFIER)
    }

    /// The repository's events, signed.
    pub fn events(&self) -> Events {
        let at = Timestamp::now().as_secs() - 60;
        let host = self.host_url().to_string();
        let remote = self.tap.url().to_string();
        let announcement = Announcement::new(IDENTIFIER)
            .relays([&host, &remote])
            .clone_urls([&self.git.url(&format!("{IDENTIFIER}.git"))])
            .at(at)
            .sign(&self.owner);
        let state = state(&self.owner, IDENTIFIER, &[&self.commit], at);
        let pr = pull_request(
            &self.contributor,
            &self.owner.public_key(),
            IDENTIFIER,
            &self.commit,
        );
        let issue = root(&self.contributor, 1621, &self.coordinate(), "an issue", at);
        let reply = reply(&self.contributor, &issue.id, "a reply", at + 1);
        Events {
            announcement,
            state,
            pr,
            issue,
            reply,
        }
    }

    /// The host's configuration: the remote relay (through the tap) to sync from,
    /// loopback allowed, a user's event fetched after 1 s.
    pub fn host_config(&self) -> HostConfig {
        let mut config = HostConfig::new(self.host_addr, self.dir.join("host-git"));
        config.bootstrap_relays = vec![self.tap.url().clone()];
        config.local_network = true;
        config.submitted_delay = Duration::from_secs(1);
        config
    }

    /// The git server gets the state's commit.
    pub fn publish_commit(&self) {
        let staging = self.staging.path().display().to_string();
        git(
            self.served.path(),
            &["fetch", &staging, "refs/heads/main:refs/heads/main"],
        );
    }

    /// The host's served repository.
    pub fn host_repository(&self) -> PathBuf {
        NpubLayout::new(self.dir.join("host-git"))
            .path_of(&self.owner.public_key(), IDENTIFIER)
            .expect("a valid identifier")
    }
}

/// Waits (polling every 20 ms) until `done`, failing with `what` after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ids of `ids` the relay at `url` serves to a plain client REQ.
pub async fn served(url: &RelayUrl, ids: &[EventId]) -> Vec<EventId> {
    let mut client = connect_client(url).await;
    let events = client.req_all(Filter::new().ids(ids.iter().copied())).await;
    client.close().await;
    events.into_iter().map(|event| event.id).collect()
}

/// Waits until the relay at `url` serves every event of `ids`.
pub async fn wait_served(what: &str, url: &RelayUrl, ids: &[EventId]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = served(url, ids).await;
        if ids.iter().all(|id| got.contains(id)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {what} (served {} of {})",
            got.len(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of the gauge `name` in `registry` (summed over its series; 0 if absent).
pub fn gauge(registry: &prometheus::Registry, name: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric().to_vec())
        .map(|metric| metric.get_gauge().get_value())
        .sum()
}
