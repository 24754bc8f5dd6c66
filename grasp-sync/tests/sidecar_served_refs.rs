//! The `grasp-sync` sidecar makes the bare repositories under `--git-root` SERVE what
//! GRASP-01 says a repository serves: `refs/heads/*`, `refs/tags/*` and `HEAD` of the
//! newest repository state (30618) by the repository's maintainer set (the owner and the
//! keys its announcement lists in `maintainers`, who need no announcement of their own),
//! never a state by anyone else; and every PR (1618) and PR update (1619) at
//! `refs/nostr/<event id>`, fetched from the PR's own `clone` URLs (a contributor's fork on
//! another host) when the repository's servers lack its commits. GRASP-02: a repository
//! whose refs or objects went missing converges again within `--reconcile-interval`, with
//! no new event.
//!
//! What the repositories serve is read the way a git client reads it: `git ls-remote` and
//! `git clone` through a `git http-backend` server whose project root is the sidecar's git
//! root.
//!
//! The first test runs next to the real nostr-rs-relay (`support::NostrRsRelay`; install it
//! with `.ci/install-nostr-rs-relay`), behind the listener of `common/own_front.rs` that
//! counts git requests to our own service (every announcement lists it first among its
//! clone URLs; there must be none). The remote relay keeps nostr-relay-builder's default
//! read limits (500 REQs per connection, 500 results per filter without `limit`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
#[path = "common/http.rs"]
mod http;
#[path = "common/own_front.rs"]
mod own_front;
#[path = "common/served.rs"]
mod served;
use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use git_support::{git, has_object, tokio_git_command, GitHttpServer, SourceRepo, TempDir};
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use http::{free_port, get};
use nostr::prelude::*;
use own_front::OwnFront;
use served::{served_at, Served};
use support::{connect_client, NostrRsRelay, TestRelay, TestRelayConfig};
use tokio::process::{Child, Command};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Another host: where contributors' forks are served.
const FORK_HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// Repositories in the large run.
const REPOSITORIES: usize = 50;
/// Repositories with a PR and a PR update whose commits only a fork holds.
const WITH_PULL_REQUEST: Range<usize> = 0..10;
/// Repositories whose owner lists a co-maintainer (who has no announcement) whose state
/// is newer than the owner's. Two of them have a PR too. The co-maintainer's state names
/// no tag: a tag only the owner's older state names (repositories 8, 12, 16) is not served.
const WITH_CO_MAINTAINER: Range<usize> = 8..18;
/// Repositories with a state by a stranger, newer than every other. Three of them have a
/// co-maintainer too.
const WITH_STRANGER: Range<usize> = 15..20;
/// Every how many repositories the owner's state names a tag (`refs/tags/v1`).
const TAGGED_EVERY: usize = 4;
/// `--reconcile-interval` of the second test.
const RECONCILE_INTERVAL_SECS: u64 = 5;

/// How a repository of a data set is made.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    /// The owner's state names `refs/tags/v1` (at the first commit).
    tagged: bool,
    /// A PR and a PR update by a contributor, their commits only in a fork.
    pull_request: bool,
    /// A co-maintainer pushed `refs/heads/feature` and a new `main` upstream and
    /// published a state newer than the owner's.
    co_maintainer: bool,
    /// A stranger published a state newer than all, naming a commit that is upstream.
    stranger: bool,
}

impl Shape {
    /// Repository `n` of the large run.
    fn of_large_run(n: usize) -> Shape {
        Shape {
            tagged: n % TAGGED_EVERY == 0,
            pull_request: WITH_PULL_REQUEST.contains(&n),
            co_maintainer: WITH_CO_MAINTAINER.contains(&n),
            stranger: WITH_STRANGER.contains(&n),
        }
    }
}

/// Where the repositories of a data set live and are announced.
struct Places<'a> {
    /// The own relay as the sidecar sees it (`ws://…`).
    own_relay: String,
    /// Our own service's HTTP base (`http://host:port`): first clone URL of every
    /// announcement, never to be fetched from.
    own_service: String,
    remote_relay: String,
    /// The upstream repositories (`<identifier>.git`) and their server.
    upstream_dir: PathBuf,
    upstream: &'a GitHttpServer,
    /// Contributors' forks (`<identifier>.git`) and their server, on another host.
    forks_dir: PathBuf,
    forks: Option<&'a GitHttpServer>,
    contributor: Keys,
    /// `created_at` of the announcements; the other events are a few seconds later.
    at: u64,
}

/// A PR or PR update, with the commit it proposes.
struct Proposal {
    event: Event,
    tip: String,
}

/// One repository of a data set: its events and what it must serve.
struct Repository {
    owner: PublicKey,
    identifier: String,
    announcement: Event,
    /// The owner and the keys the announcement lists in `maintainers`.
    maintainer_set: BTreeSet<PublicKey>,
    /// Every state published for it, by the maintainer set or not.
    states: Vec<Event>,
    proposals: Vec<Proposal>,
    /// The commit only a stranger's state names.
    stranger_commit: Option<String>,
}

impl Repository {
    /// Makes repository `n` of `shape`: the upstream repository with its commits, a fork
    /// if it has a PR, and every event.
    fn make(n: usize, owner: &Keys, shape: Shape, places: &Places<'_>) -> Repository {
        let identifier = format!("repo-{n}");
        let at = places.at;
        let upstream = SourceRepo::create(places.upstream_dir.join(format!("{identifier}.git")));
        let first = upstream.commit(&format!("first of {identifier}"));
        let main = upstream.commit(&format!("main of {identifier}"));
        let mut owner_tags = state_tags(&identifier, "refs/heads/main", &[("main", &main)]);
        if shape.tagged {
            upstream.set_ref("refs/tags/v1", &first);
            owner_tags.push(tag(&["refs/tags/v1", &first]));
        }
        let mut states = vec![sign(owner, 30618, "", owner_tags, at + 1)];
        let mut maintainers = Vec::new();
        if shape.co_maintainer {
            let co_maintainer = Keys::generate();
            let co_main = upstream.commit(&format!("co-maintainer's main of {identifier}"));
            let feature = upstream.commit_unreferenced(&format!("feature of {identifier}"));
            upstream.set_ref("refs/heads/feature", &feature);
            let tags = state_tags(
                &identifier,
                "refs/heads/main",
                &[("main", &co_main), ("feature", &feature)],
            );
            states.push(sign(&co_maintainer, 30618, "", tags, at + 5));
            maintainers.push(co_maintainer.public_key());
        }
        let stranger_commit = shape.stranger.then(|| {
            let commit = upstream.commit_unreferenced(&format!("stranger's {identifier}"));
            upstream.set_ref("refs/heads/stranger", &commit);
            let tags = state_tags(
                &identifier,
                "refs/heads/stranger",
                &[("main", &commit), ("stranger", &commit)],
            );
            states.push(sign(&Keys::generate(), 30618, "", tags, at + 20));
            commit
        });
        let npub = owner.public_key().to_bech32().unwrap();
        let ours = format!("{}/{npub}/{identifier}.git", places.own_service);
        let theirs = places.upstream.url(&format!("{identifier}.git"));
        let announcement = Announcement::new(&identifier)
            .relays([&places.own_relay, &places.remote_relay])
            .clone_urls([&ours, &theirs])
            .maintainers(maintainers.iter().copied())
            .at(at)
            .sign(owner);
        let proposals = if shape.pull_request {
            pull_request_from_fork(&upstream, owner, &identifier, places)
        } else {
            Vec::new()
        };
        let mut maintainer_set: BTreeSet<PublicKey> = maintainers.into_iter().collect();
        maintainer_set.insert(owner.public_key());
        Repository {
            owner: owner.public_key(),
            identifier,
            announcement,
            maintainer_set,
            states,
            proposals,
            stranger_commit,
        }
    }

    /// The newest state (by `created_at`) by the maintainer set.
    fn newest_authorized_state(&self) -> &Event {
        self.authorized_states()
            .max_by_key(|state| state.created_at)
            .expect("the owner's state")
    }

    /// The states by the maintainer set.
    fn authorized_states(&self) -> impl Iterator<Item = &Event> {
        self.states
            .iter()
            .filter(|state| self.maintainer_set.contains(&state.pubkey))
    }

    /// What it must serve: the newest authorized state, and every PR and PR update at
    /// `refs/nostr/<id>`.
    fn expected(&self) -> Served {
        let mut served = Served::of_state(self.newest_authorized_state());
        for proposal in &self.proposals {
            let name = format!("refs/nostr/{}", proposal.event.id.to_hex());
            served.refs.insert(name, proposal.tip.clone());
        }
        served
    }

    /// What the own relay must hold of it: the announcement, the authorized states, the
    /// PRs and PR updates.
    fn expected_on_own_relay(&self) -> impl Iterator<Item = EventId> + '_ {
        std::iter::once(&self.announcement)
            .chain(self.authorized_states())
            .chain(self.proposals.iter().map(|proposal| &proposal.event))
            .map(|event| event.id)
    }

    /// Every event of it (what the remote relay holds).
    fn events(&self) -> Vec<Event> {
        let mut events = vec![self.announcement.clone()];
        events.extend(self.states.iter().cloned());
        events.extend(self.proposals.iter().map(|proposal| proposal.event.clone()));
        events
    }

    /// `<npub>/<identifier>.git`: where it is served under the git root.
    fn served_path(&self) -> String {
        let npub = self.owner.to_bech32().unwrap();
        format!("{npub}/{}.git", self.identifier)
    }
}

/// The tags of a state of `identifier`: `d`, `HEAD` → `head`, `refs/heads/<branch>` for
/// each `(branch, commit)`.
fn state_tags(identifier: &str, head: &str, branches: &[(&str, &str)]) -> Vec<Tag> {
    let mut tags = vec![
        tag(&["d", identifier]),
        tag(&["HEAD", &format!("ref: {head}")]),
    ];
    for (branch, commit) in branches {
        tags.push(tag(&[&format!("refs/heads/{branch}"), commit]));
    }
    tags
}

/// A PR by the contributor and its update, whose commits exist only in the contributor's
/// fork of `upstream` (on the forks' server), which their `clone` tags name.
fn pull_request_from_fork(
    upstream: &SourceRepo,
    owner: &Keys,
    identifier: &str,
    places: &Places<'_>,
) -> Vec<Proposal> {
    let forks = places.forks.expect("a server for forks");
    let name = format!("{identifier}.git");
    let fork = SourceRepo::create(places.forks_dir.join(&name));
    let upstream_path = upstream.path().to_str().unwrap();
    git(
        fork.path(),
        &[
            "fetch",
            "--quiet",
            upstream_path,
            "refs/heads/*:refs/heads/*",
        ],
    );
    let tip = fork.commit(&format!("proposal for {identifier}"));
    let revised = fork.commit(&format!("proposal for {identifier}, revised"));
    for commit in [&tip, &revised] {
        assert!(!has_object(upstream.path(), commit), "only the fork has it");
    }
    let clone = forks.url(&name);
    let coordinate = ids::coordinate(&owner.public_key(), identifier);
    let contributor = &places.contributor;
    let pr = sign(
        contributor,
        1618,
        "",
        vec![
            tag(&["a", &coordinate]),
            tag(&["p", &owner.public_key().to_hex()]),
            tag(&["subject", &format!("a proposal for {identifier}")]),
            tag(&["c", &tip]),
            tag(&["clone", &clone]),
        ],
        places.at + 2,
    );
    let update = sign(
        contributor,
        1619,
        "",
        vec![
            tag(&["a", &coordinate]),
            tag(&["E", &pr.id.to_hex()]),
            tag(&["P", &contributor.public_key().to_hex()]),
            tag(&["c", &revised]),
            tag(&["clone", &clone]),
        ],
        places.at + 3,
    );
    vec![
        Proposal { event: pr, tip },
        Proposal {
            event: update,
            tip: revised,
        },
    ]
}

/// The sidecar on `own_relay`, bootstrapped from `remote_relay`, its repositories under
/// `root`, `/metrics` on `metrics_port`, plus `extra` arguments. Every repository is on
/// one test host: its per-domain limits are raised. It logs at `warn`
/// (`SIDECAR_TEST_LOG` sets its `RUST_LOG` instead) to `stderr`.
fn spawn_sidecar(
    own_relay: &str,
    remote_relay: &str,
    root: &Path,
    metrics_port: u16,
    extra: &[&str],
    (stdout, stderr): (Stdio, Stdio),
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_grasp-sync"))
        .args([
            "--own-relay",
            own_relay,
            "--bootstrap-relay",
            remote_relay,
            "--git-root",
            root.to_str().unwrap(),
            "--allow-local-addresses",
            "--allow-insecure-clone-urls",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args(extra)
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .env("NGIT_SYNC_DOMAIN_RATE_LIMIT", "6000")
        .env("NGIT_SYNC_DOMAIN_CONCURRENT", "8")
        .env(
            "RUST_LOG",
            std::env::var("SIDECAR_TEST_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync")
}

/// Every event id on `relay` (nostr-rs-relay does not clamp a REQ without `limit`).
async fn ids_on(relay: &RelayUrl) -> BTreeSet<EventId> {
    let mut client = connect_client(relay).await;
    let events = client.req_all(Filter::new()).await;
    client.close().await;
    events.into_iter().map(|event| event.id).collect()
}

/// The repositories (by identifier) that do not serve what they must, each with what it
/// serves and what it must.
async fn not_serving_their_state(
    repositories: &[Repository],
    served_by: &GitHttpServer,
    cwd: &Path,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for repository in repositories {
        let served = served_at(&served_by.url(&repository.served_path()), cwd).await;
        let expected = repository.expected();
        if served.as_ref() != Some(&expected) {
            wrong.push(format!(
                "{}: serves {served:?}, must serve {expected:?}",
                repository.identifier
            ));
        }
    }
    wrong
}

/// The sum of the series of metric `name` in a Prometheus text document (`None` when it
/// has none).
fn metric_value(metrics: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The value of metric `name` once it reads `value`, or the last value read when
/// `within` passed first.
async fn metric_settled_at(port: u16, name: &str, value: f64, within: Duration) -> Option<f64> {
    let started = Instant::now();
    loop {
        let read = metric_value(&metrics_of(port).await, name);
        if read == Some(value) || started.elapsed() >= within {
            return read;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `/metrics` of the sidecar on `port` (panics when it does not answer).
async fn metrics_of(port: u16) -> String {
    get(port, "/metrics").await.expect("/metrics answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_newest_authorized_state_and_pr_tips_next_to_nostr_rs_relay() {
    let started = Instant::now();
    let dir = TempDir::new("sidecar-served-refs");
    let own = NostrRsRelay::start().await;
    let front = OwnFront::start(own.port()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let upstream = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    let forks = GitHttpServer::start(dir.join("forks"), FORK_HOST).await;
    let places = Places {
        own_relay: front.ws_url(),
        own_service: front.http_url("").trim_end_matches('/').to_owned(),
        remote_relay: remote.url().to_string(),
        upstream_dir: dir.join("upstream"),
        upstream: &upstream,
        forks_dir: dir.join("forks"),
        forks: Some(&forks),
        contributor: Keys::generate(),
        at: Timestamp::now().as_secs() - 600,
    };
    let owners: Vec<Keys> = (0..5).map(|_| Keys::generate()).collect();
    let repositories: Vec<Repository> = (0..REPOSITORIES)
        .map(|n| {
            Repository::make(
                n,
                &owners[n % owners.len()],
                Shape::of_large_run(n),
                &places,
            )
        })
        .collect();
    let on_remote: Vec<Event> = repositories.iter().flat_map(Repository::events).collect();
    remote.add_events(&on_remote).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();
    let prepared = started.elapsed();

    let metrics_port = free_port();
    let child = spawn_sidecar(
        &front.ws_url(),
        &places.remote_relay,
        &root,
        metrics_port,
        &["--once", "--timeout", "150"],
        (Stdio::piped(), Stdio::piped()),
    );
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("the sidecar exits in time")
        .unwrap();
    let ran = started.elapsed() - prepared;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    eprintln!("prepared in {prepared:?}, the sidecar ran {ran:?}\n{stdout}");
    if std::env::var_os("SIDECAR_TEST_LOG").is_some() {
        eprintln!("{stderr}");
    }

    // Every announcement, authorized state, PR and PR update is on the own relay.
    let held = ids_on(&own.url()).await;
    let missing: Vec<String> = repositories
        .iter()
        .flat_map(|repository| {
            repository
                .expected_on_own_relay()
                .filter(|id| !held.contains(id))
                .map(|id| format!("{} {id}", repository.identifier))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} events missing on the own relay: {missing:?}",
        missing.len()
    );

    // Each repository serves exactly its newest authorized state and its PRs' tips.
    let served_root = GitHttpServer::start(&root, LOOPBACK).await;
    for repository in repositories.iter().filter(|r| r.stranger_commit.is_some()) {
        let url = served_root.url(&repository.served_path());
        let served = served_at(&url, dir.path()).await.unwrap_or_default();
        let stranger = repository.stranger_commit.as_deref().unwrap();
        assert!(
            !served.names_commit(stranger)
                && !served.refs.contains_key("refs/heads/stranger")
                && served.head.as_deref() != Some("refs/heads/stranger"),
            "{}: a stranger's state was applied: {served:?}",
            repository.identifier
        );
    }
    let wrong = not_serving_their_state(&repositories, &served_root, dir.path()).await;
    assert!(
        wrong.is_empty(),
        "{} of {REPOSITORIES} repositories do not serve their newest authorized state:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // A clone of a co-maintainer's repository checks out the co-maintainer's main.
    let co_maintained = &repositories[WITH_CO_MAINTAINER.start];
    let expected = co_maintained.expected();
    let checkout = dir.join("checkout");
    let cloned = tokio_git_command(dir.path())
        .args(["clone", "--quiet"])
        .arg(served_root.url(&co_maintained.served_path()))
        .arg(&checkout)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        cloned.status.success(),
        "git clone: {}",
        String::from_utf8_lossy(&cloned.stderr)
    );
    assert_eq!(
        git(&checkout, &["rev-parse", "HEAD"]),
        expected.refs["refs/heads/main"],
        "the clone checks out the co-maintainer's main"
    );
    assert_eq!(
        git(&checkout, &["rev-parse", "refs/remotes/origin/feature"]),
        expected.refs["refs/heads/feature"],
        "the clone has the co-maintainer's feature branch"
    );

    // Our own service was never asked for git data, though every announcement lists it
    // first.
    assert_eq!(front.git_requests(), Vec::<String>::new());
    eprintln!("the whole test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_moved_or_a_repository_deleted_by_hand_is_restored_within_one_interval() {
    let dir = TempDir::new("sidecar-reconcile");
    // nostr-relay-builder's own write limit (60 a minute) on the own relay.
    let own = TestRelay::start(TestRelayConfig {
        notes_per_minute: Some(60),
        ..TestRelayConfig::default()
    })
    .await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let upstream = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    let places = plain_places(&dir, &own, &remote, &upstream);
    let owner = Keys::generate();
    let repositories: Vec<Repository> = (0..3)
        .map(|n| Repository::make(n, &owner, Shape::default(), &places))
        .collect();
    let on_remote: Vec<Event> = repositories.iter().flat_map(Repository::events).collect();
    remote.add_events(&on_remote).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();
    let served_root = GitHttpServer::start(&root, LOOPBACK).await;

    let metrics_port = free_port();
    let log = dir.join("sidecar.log");
    let interval = RECONCILE_INTERVAL_SECS.to_string();
    let mut child = spawn_sidecar(
        &places.own_relay,
        &places.remote_relay,
        &root,
        metrics_port,
        &["--reconcile-interval", &interval],
        (
            Stdio::null(),
            Stdio::from(std::fs::File::create(&log).unwrap()),
        ),
    );
    let started = Instant::now();
    let served_in = all_serve_their_state_within(
        Duration::from_secs(60),
        &repositories,
        &served_root,
        &mut child,
        &log,
    )
    .await;
    eprintln!("every repository served its state after {served_in:?}");
    let before = metrics_of(metrics_port).await;

    // With no new event: repository A's main moves back one commit, repository B's
    // directory is deleted.
    let moved = &repositories[0];
    let moved_path = root.join(moved.served_path());
    let parent = git(&moved_path, &["rev-parse", "refs/heads/main~1"]);
    git(&moved_path, &["update-ref", "refs/heads/main", &parent]);
    let deleted = &repositories[1];
    std::fs::remove_dir_all(root.join(deleted.served_path())).unwrap();
    // (Not checked through git: a reconciliation may already be restoring them.)
    let broken_at = Instant::now();

    let restored_in = all_serve_their_state_within(
        Duration::from_secs(6 * RECONCILE_INTERVAL_SECS),
        &repositories,
        &served_root,
        &mut child,
        &log,
    )
    .await;
    eprintln!(
        "restored {restored_in:?} after being broken ({:?} since the start)",
        broken_at.duration_since(started)
    );
    let after = metrics_of(metrics_port).await;
    for counter in [
        "purgatory_reconciliations_total",
        "purgatory_refs_updated_total",
    ] {
        let (was, is) = (
            metric_value(&before, counter),
            metric_value(&after, counter),
        );
        assert!(
            was.is_some() && is > was,
            "{counter} increased: before {was:?}, after {is:?}"
        );
    }
    let behind = metric_settled_at(
        metrics_port,
        "purgatory_repositories_behind",
        0.0,
        Duration::from_secs(2 * RECONCILE_INTERVAL_SECS),
    )
    .await;
    assert_eq!(
        behind,
        Some(0.0),
        "no repository behind once all serve their state"
    );
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// The places of a run with no forks: the own relay (its HTTP front our own service),
/// the remote, the upstream git server under `dir`; events made 10 minutes ago.
fn plain_places<'a>(
    dir: &TempDir,
    own: &TestRelay,
    remote: &TestRelay,
    upstream: &'a GitHttpServer,
) -> Places<'a> {
    Places {
        own_relay: own.url().to_string(),
        own_service: format!("http://127.0.0.1:{}", own.port()),
        remote_relay: remote.url().to_string(),
        upstream_dir: dir.join("upstream"),
        upstream,
        forks_dir: dir.join("forks"),
        forks: None,
        contributor: Keys::generate(),
        at: Timestamp::now().as_secs() - 600,
    }
}

/// Waits (at most `deadline`) until every repository serves its state; returns how long
/// it took. Panics naming the ones that do not, with the sidecar's log, or if the sidecar
/// exits.
async fn all_serve_their_state_within(
    deadline: Duration,
    repositories: &[Repository],
    served_by: &GitHttpServer,
    child: &mut Child,
    log: &Path,
) -> Duration {
    let started = Instant::now();
    let cwd = log.parent().unwrap();
    loop {
        let wrong = not_serving_their_state(repositories, served_by, cwd).await;
        if wrong.is_empty() {
            return started.elapsed();
        }
        let sidecar_log = || std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(exit)) = child.try_wait() {
            panic!("grasp-sync exited ({exit}): {}", sidecar_log());
        }
        assert!(
            started.elapsed() < deadline,
            "not served within {deadline:?}:\n{}\nsidecar log:\n{}",
            wrong.join("\n"),
            sidecar_log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A repository announced straight on the own relay after the start (a push to the GRASP
/// server, a user publishing to it: not through the sync, so purgatory's gate never sees
/// it) is served within seconds: the sync's self-subscription reads the announcement and
/// hands it to purgatory, which lists the relay's announcements at start and then only
/// once per reconciliation interval (an hour). (The code before re-read every
/// announcement every 5 minutes and found it then.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_stored_straight_on_the_own_relay_is_served_within_seconds() {
    let dir = TempDir::new("sidecar-own-announcement");
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let upstream = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    let mut places = plain_places(&dir, &own, &remote, &upstream);
    let owner = Keys::generate();
    let synced = Repository::make(0, &owner, Shape::default(), &places);
    remote.add_events(&synced.events()).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();
    let served_root = GitHttpServer::start(&root, LOOPBACK).await;
    let log = dir.join("sidecar.log");
    let mut child = spawn_sidecar(
        &places.own_relay,
        &places.remote_relay,
        &root,
        free_port(),
        &[],
        (
            Stdio::null(),
            Stdio::from(std::fs::File::create(&log).unwrap()),
        ),
    );
    all_serve_their_state_within(
        Duration::from_secs(60),
        std::slice::from_ref(&synced),
        &served_root,
        &mut child,
        &log,
    )
    .await;

    // Stored on the own relay by another path, now: its announcement and state.
    places.at = Timestamp::now().as_secs();
    let pushed = Repository::make(1, &owner, Shape::default(), &places);
    for event in pushed.events() {
        own.publish(&event).await;
    }
    let served_in = all_serve_their_state_within(
        Duration::from_secs(60),
        std::slice::from_ref(&pushed),
        &served_root,
        &mut child,
        &log,
    )
    .await;
    eprintln!("the repository announced on the own relay served after {served_in:?}");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
