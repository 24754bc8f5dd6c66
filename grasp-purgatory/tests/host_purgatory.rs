//! The purgatory's scheduler over a purgatory the host keeps (issue #37 item 7), with
//! real git: a GRASP server holds its states itself ([`Host`] below) and only asks for a
//! sync ([`Purgatory::schedule`]); the scheduler fetches the objects from the
//! announcement's clone URL over smart HTTP, has the host release what they satisfy,
//! serves the released state's refs and sweeps `refs/purgatory/*`. A burst of schedules
//! makes one fetch; `add_state` is refused; a clone URL that serves nothing backs off,
//! reported in the status. A host keyed by identifier schedules every owner's
//! repository at once ([`Purgatory::schedule_identifier`], issue 48 item 4): objects the
//! owners share are fetched once and copied into each owner's repository.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use grasp_purgatory::{
    AddError, AnnouncementError, Announcements, GitFetcher, GitFetcherConfig, HeldState,
    HostPurgatory, MemoryAnnouncements, NpubLayout, Origin, Purgatory, ReleaseError,
    ScheduleIdentifierError,
};
use grasp_sync_core::nip34::{
    parse_repo_state, pull_request_clone_urls, pull_request_tip, root_event_repo_refs, GitOid,
    RepoRef,
};
use grasp_sync_core::purgatory::EventSource;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;
use prometheus::Registry;
use support::{counter, git, pairs, until, GitHttpServer, SourceRepo, TempDir, SETTLE};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Another host on loopback: a contributor's git server.
const OTHER_HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const T0: u64 = 1_700_000_000;

// --- The host: a GRASP server's own purgatory, in as few lines as it takes. ---

/// Holds states and pull requests until their commits are present; releases them into
/// its database (which the scheduler reads announcements, states and pull requests
/// from, as a server's is).
struct Host {
    held: Mutex<Vec<Held>>,
    database: Arc<MemoryAnnouncements>,
    release_calls: AtomicUsize,
}

/// One held event: its repository, the commits it needs, its own clone URLs.
struct Held {
    repo: RepoRef,
    event: Event,
    needs: BTreeSet<GitOid>,
    clone_urls: Vec<String>,
}

impl Host {
    /// Holds a state (30618) or a pull request (1618).
    fn hold(&self, event: Event) {
        let held = if event.kind.as_u16() == 30618 {
            let state = parse_repo_state(&event).expect("a valid state");
            Held {
                repo: RepoRef::new(event.pubkey, state.identifier).expect("a valid repository"),
                needs: state.refs.into_iter().map(|(_, oid)| oid).collect(),
                clone_urls: Vec::new(),
                event,
            }
        } else {
            Held {
                repo: root_event_repo_refs(&event).value[0].clone(),
                needs: pull_request_tip(&event).value.into_iter().collect(),
                clone_urls: pull_request_clone_urls(&event).value,
                event,
            }
        };
        self.held.lock().unwrap().push(held);
    }
}

#[async_trait]
impl HostPurgatory for Host {
    fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        let held = self.held.lock().unwrap();
        let of_repo = held.iter().filter(|held| held.repo == *repo);
        of_repo
            .flat_map(|held| held.needs.iter().cloned())
            .collect()
    }

    fn has_pending(&self, repo: &RepoRef) -> bool {
        self.held
            .lock()
            .unwrap()
            .iter()
            .any(|held| held.repo == *repo)
    }

    async fn release_satisfied(
        &self,
        repo: &RepoRef,
        present: &(dyn for<'o> Fn(&'o GitOid) -> bool + Send + Sync),
    ) -> Result<usize, ReleaseError> {
        self.release_calls.fetch_add(1, Ordering::SeqCst);
        let mut held = self.held.lock().unwrap();
        let before = held.len();
        held.retain(|held| {
            let satisfied = held.repo == *repo && held.needs.iter().all(present);
            if satisfied {
                self.database.add_event(held.event.clone());
            }
            !satisfied
        });
        Ok(before - held.len())
    }

    fn event_sources(&self, repo: &RepoRef) -> Vec<EventSource> {
        let held = self.held.lock().unwrap();
        let own_urls = held
            .iter()
            .filter(|held| held.repo == *repo && !held.clone_urls.is_empty());
        own_urls
            .map(|held| EventSource {
                missing: held.needs.clone(),
                clone_urls: held.clone_urls.clone(),
            })
            .collect()
    }
}

// --- The world: an upstream over smart HTTP, an announcement, a scheduler. ---

fn policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true)
}

/// One repository `r` announced by `owner` in the host's database with one clone URL,
/// and its upstream (two commits on `main`) served over smart HTTP.
struct World {
    dir: TempDir,
    one: String,
    two: String,
    server: GitHttpServer,
    owner: Keys,
    host: Arc<Host>,
    repo: RepoRef,
}

/// A world whose announcement's clone URL is `r.git` of the upstream server, or, with
/// `serving_nothing`, a repository that server does not have.
async fn world(name: &str, serving_nothing: bool) -> World {
    let dir = TempDir::new(name);
    let upstream = SourceRepo::create(dir.join("upstream/r.git"));
    let one = upstream.commit("one");
    let two = upstream.commit("two");
    let server = GitHttpServer::start(dir.join("upstream"), LOOPBACK).await;
    let owner = Keys::generate();
    let database = Arc::new(MemoryAnnouncements::new());
    let url = server.url(if serving_nothing { "none.git" } else { "r.git" });
    database
        .add(Announcement::new("r").clone_urls([url]).sign(&owner))
        .unwrap();
    let host = Arc::new(Host {
        held: Mutex::new(Vec::new()),
        database,
        release_calls: AtomicUsize::new(0),
    });
    let repo = RepoRef::new(owner.public_key(), "r").unwrap();
    World {
        dir,
        one,
        two,
        server,
        owner,
        host,
        repo,
    }
}

/// A scheduler for `host` (no sink, no journal), its git root in `root`, debouncing
/// synced events by `debounce`.
fn scheduler(host: &Arc<Host>, root: &Path, debounce: Duration, registry: &Registry) -> Purgatory {
    scheduler_reading(
        Arc::clone(&host.database) as _,
        host,
        root,
        debounce,
        registry,
    )
}

/// [`scheduler`] reading announcements, states and pull requests from `source`.
fn scheduler_reading(
    source: Arc<dyn Announcements>,
    host: &Arc<Host>,
    root: &Path,
    debounce: Duration,
    registry: &Registry,
) -> Purgatory {
    Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(source)
        .host_purgatory(Arc::clone(host) as _)
        .repos_root(root)
        .git_backend(Arc::new(GitFetcher::new(GitFetcherConfig {
            fetch_timeout: Duration::from_secs(20),
            policy: policy(),
            ..GitFetcherConfig::default()
        })))
        .clone_policy(policy())
        .immediate_delay(debounce)
        .registry(registry.clone())
        .build()
        .unwrap()
}

/// A state of `r` by `keys` at `T0 + at`: `refs` (name, commit), `HEAD` at `main`.
fn state(keys: &Keys, refs: &[(&str, &str)], at: u64) -> Event {
    let mut tags = vec![Tag::identifier("r"), tag(&["HEAD", "ref: refs/heads/main"])];
    tags.extend(refs.iter().map(|(name, oid)| tag(&[name, oid])));
    sign(keys, 30618, "", tags, T0 + at)
}

fn local(root: &Path, owner: &Keys) -> PathBuf {
    NpubLayout::new(root)
        .path_of(&owner.public_key(), "r")
        .unwrap()
}

/// The refs of the bare repository at `path` under `prefix`, sorted (name, object).
fn refs_under(path: &Path, prefix: &str) -> Vec<(String, String)> {
    let listing = git(
        path,
        &["for-each-ref", "--format=%(refname) %(objectname)", prefix],
    );
    let mut refs: Vec<(String, String)> = listing
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, oid)| (name.to_owned(), oid.to_owned()))
        .collect();
    refs.sort();
    refs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_held_state_is_fetched_released_by_the_host_and_served() {
    let w = world("host-serves", false).await;
    let root = w.dir.join("root");
    let registry = Registry::new();
    let purgatory = scheduler(&w.host, &root, Duration::from_millis(10), &registry);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    // The server accepted a state whose commits are only upstream.
    let pushed = state(
        &w.owner,
        &[("refs/heads/main", &w.two), ("refs/tags/v1", &w.one)],
        1,
    );
    w.host.hold(pushed.clone());
    purgatory.schedule(&w.repo, Origin::Synced);

    let done = until(&mut status, SETTLE, |s| {
        s.events_released == 1 && s.all_accounted && s.repositories_serving_newest == 1
    })
    .await;
    let path = local(&root, &w.owner);
    assert!(!w.host.has_pending(&w.repo), "the host released its state");
    assert_eq!(
        w.host
            .database
            .states_by("r", &[w.owner.public_key()])
            .await
            .unwrap(),
        [pushed]
    );
    assert_eq!(
        refs_under(&path, "refs/"),
        pairs(&[("refs/heads/main", &w.two), ("refs/tags/v1", &w.one)]),
        "exactly the state's refs, refs/purgatory/* swept"
    );
    assert_eq!(git(&path, &["symbolic-ref", "HEAD"]), "refs/heads/main");
    assert!(done.oids_fetched >= 1, "{done:#?}");
    assert_eq!(done.identifiers_queued, 0, "nothing left to sync");
    assert_eq!(done.events_held, 0, "the host holds the events, not us");
    assert!(
        w.server.stats().fetches() >= 1,
        "fetched from the clone URL"
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_held_pull_request_is_fetched_from_its_fork_and_its_tip_served() {
    let w = world("host-pr", false).await;
    // The contributor's fork, on another host: its commit is nowhere else.
    let fork = SourceRepo::create(w.dir.join("forks/r.git"));
    let tip = fork.commit("pull request");
    let fork_server = GitHttpServer::start(w.dir.join("forks"), OTHER_HOST).await;
    let root = w.dir.join("root");
    let registry = Registry::new();
    let purgatory = scheduler(&w.host, &root, Duration::from_millis(10), &registry);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    let pr = sign(
        &Keys::generate(),
        1618,
        "",
        vec![
            tag(&["a", &w.repo.to_string()]),
            tag(&["c", &tip]),
            tag(&["clone", &fork_server.url("r.git")]),
        ],
        T0 + 1,
    );
    w.host.hold(pr.clone());
    purgatory.schedule(&w.repo, Origin::Synced);

    until(&mut status, SETTLE, |s| {
        s.events_released == 1 && s.all_accounted && s.repositories_served == 1
    })
    .await;
    assert!(
        !w.host.has_pending(&w.repo),
        "the host released its pull request"
    );
    assert_eq!(
        refs_under(&local(&root, &w.owner), "refs/"),
        pairs(&[(&format!("refs/nostr/{}", pr.id), &tip)]),
        "the tip served at refs/nostr/<id>, refs/purgatory/* swept"
    );
    assert!(
        fork_server.stats().fetches() >= 1,
        "the tip came from the fork"
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_schedules_makes_one_fetch_for_the_host() {
    let w = world("host-burst", false).await;
    let root = w.dir.join("root");
    let registry = Registry::new();
    let purgatory = scheduler(&w.host, &root, Duration::from_millis(300), &registry);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    // Two states arrive within the debounce, each with its own commit.
    w.host
        .hold(state(&w.owner, &[("refs/heads/main", &w.one)], 1));
    purgatory.schedule(&w.repo, Origin::Synced);
    let newer = state(
        &w.owner,
        &[("refs/heads/main", &w.two), ("refs/heads/old", &w.one)],
        2,
    );
    w.host.hold(newer);
    purgatory.schedule(&w.repo, Origin::Synced);

    until(&mut status, SETTLE, |s| {
        s.events_released == 2 && s.all_accounted && s.repositories_serving_newest == 1
    })
    .await;
    assert_eq!(w.server.stats().fetches(), 1, "one fetch for the burst");
    let attempts = counter(&registry, "purgatory_sync_attempts_total", "result", "done");
    assert_eq!(attempts, 1.0, "one sync of the repository");
    assert_eq!(
        refs_under(&local(&root, &w.owner), "refs/"),
        pairs(&[("refs/heads/main", &w.two), ("refs/heads/old", &w.one)]),
        "the newer state is served"
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_state_is_refused_when_the_host_holds_the_events() {
    let w = world("host-refuses", false).await;
    let registry = Registry::new();
    let purgatory = scheduler(
        &w.host,
        &w.dir.join("root"),
        Duration::from_millis(10),
        &registry,
    );
    let offered = state(&w.owner, &[("refs/heads/main", &w.one)], 1);

    let refused = purgatory.add_state(offered.clone(), Origin::Synced);
    assert!(matches!(refused, Err(AddError::HeldByHost)), "{refused:?}");
    let refused = purgatory.add(offered.clone(), Origin::Submitted);
    assert!(matches!(refused, Err(AddError::HeldByHost)), "{refused:?}");
    assert_eq!(purgatory.held(), 0);
    assert!(!purgatory.contains(&offered.id));
    assert_eq!(purgatory.queue_len(), 0, "nothing scheduled");
    assert_eq!(
        w.host.release_calls.load(Ordering::SeqCst),
        0,
        "the host was not asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_state_whose_clone_url_serves_nothing_backs_off_in_the_status() {
    let w = world("host-backoff", true).await;
    let root = w.dir.join("root");
    let registry = Registry::new();
    let purgatory = scheduler(&w.host, &root, Duration::from_millis(10), &registry);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    w.host
        .hold(state(&w.owner, &[("refs/heads/main", &w.two)], 1));
    purgatory.schedule(&w.repo, Origin::Synced);

    let key = w.repo.to_string();
    let failed = until(&mut status, SETTLE, |s| {
        s.still_waiting.iter().any(|held| {
            held.repo == key
                && matches!(
                    &held.state,
                    HeldState::BackingOff {
                        last_error: Some(_)
                    }
                )
        })
    })
    .await;
    assert!(!failed.all_accounted, "a backoff is not done: {failed:#?}");
    assert_eq!(failed.events_released, 0);
    assert_eq!(failed.repositories_waiting, 1);
    let entry = purgatory.queue_entry(&w.repo).expect("still queued");
    assert!(entry.attempt_count >= 1, "backing off: {entry:?}");
    assert!(
        purgatory
            .retry_in(&w.repo)
            .is_some_and(|wait| wait > Duration::ZERO),
        "the next attempt waits"
    );
    assert!(
        w.host.has_pending(&w.repo),
        "the host still holds its state"
    );
    assert_eq!(
        refs_under(&local(&root, &w.owner), "refs/heads/"),
        Vec::<(String, String)>::new(),
        "nothing served"
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

/// The world's owner and a co-maintainer both announce `r`, each with a clone URL of its
/// own server (two servers on two addresses, serving the same upstream), and both
/// publish a state naming the same commits. Scheduled by identifier, the commits are
/// fetched once, from one of the servers, and copied into the other owner's repository:
/// both repositories serve exactly their state's refs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_whose_states_name_the_same_commits_fetch_them_once() {
    let w = world("host-two-owners", false).await;
    let co_server = GitHttpServer::start(w.dir.join("upstream"), OTHER_HOST).await;
    let co = Keys::generate();
    w.host
        .database
        .add(
            Announcement::new("r")
                .clone_urls([co_server.url("r.git")])
                .sign(&co),
        )
        .unwrap();
    let co_repo = RepoRef::new(co.public_key(), "r").unwrap();
    let root = w.dir.join("root");
    let registry = Registry::new();
    let purgatory = scheduler(&w.host, &root, Duration::from_millis(10), &registry);
    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    let refs = [
        ("refs/heads/main", w.two.as_str()),
        ("refs/tags/v1", &w.one),
    ];
    w.host.hold(state(&w.owner, &refs, 1));
    w.host.hold(state(&co, &refs, 2));

    let scheduled = purgatory
        .schedule_identifier("r", Origin::Synced)
        .await
        .unwrap();
    let mut owners = vec![w.repo.clone(), co_repo.clone()];
    owners.sort();
    assert_eq!(scheduled, owners, "both owners' repositories, in key order");

    let done = until(&mut status, SETTLE, |s| {
        s.events_released == 2 && s.all_accounted && s.repositories_serving_newest == 2
    })
    .await;
    for (keys, repo) in [(&w.owner, &w.repo), (&co, &co_repo)] {
        assert!(
            !w.host.has_pending(repo),
            "{repo}: the host released its state"
        );
        let path = local(&root, keys);
        assert_eq!(
            refs_under(&path, "refs/"),
            pairs(&refs),
            "{repo}: exactly the state's refs, refs/purgatory/* swept"
        );
        assert_eq!(git(&path, &["symbolic-ref", "HEAD"]), "refs/heads/main");
    }
    let fetches = (w.server.stats().fetches(), co_server.stats().fetches());
    assert_eq!(
        fetches.0 + fetches.1,
        1,
        "one fetch for both owners (owner's server, co-maintainer's server): {fetches:?}"
    );
    assert_eq!(done.identifiers_queued, 0, "nothing left to sync");
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

/// One owner: the identifier schedules that repository, as `schedule` does (queued
/// after the debounce), and its state is fetched, released and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identifier_with_one_owner_schedules_that_repository() {
    let w = world("host-one-owner", false).await;
    let root = w.dir.join("root");
    let registry = Registry::new();
    let debounce = Duration::from_millis(10);
    let purgatory = scheduler(&w.host, &root, debounce, &registry);
    let refs = [("refs/heads/main", w.two.as_str())];
    w.host.hold(state(&w.owner, &refs, 1));

    let scheduled = purgatory
        .schedule_identifier("r", Origin::Synced)
        .await
        .unwrap();
    assert_eq!(scheduled, std::slice::from_ref(&w.repo));
    let entry = purgatory.queue_entry(&w.repo).expect("queued");
    assert_eq!(entry.attempt_count, 0, "backoff reset: {entry:?}");
    assert!(
        purgatory
            .retry_in(&w.repo)
            .is_some_and(|wait| wait <= debounce),
        "after the debounce of a synced event"
    );
    assert_eq!(purgatory.queue_len(), 1);

    let run = events::spawn_run(&purgatory);
    let mut status = purgatory.status();
    until(&mut status, SETTLE, |s| {
        s.events_released == 1 && s.all_accounted && s.repositories_serving_newest == 1
    })
    .await;
    assert_eq!(refs_under(&local(&root, &w.owner), "refs/"), pairs(&refs));
    assert_eq!(w.server.stats().fetches(), 1);
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

/// Nobody announced the identifier: nothing is scheduled, and no repository is
/// returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identifier_nobody_announced_schedules_nothing() {
    let w = world("host-unannounced", false).await;
    let registry = Registry::new();
    let purgatory = scheduler(
        &w.host,
        &w.dir.join("root"),
        Duration::from_millis(10),
        &registry,
    );
    let scheduled = purgatory
        .schedule_identifier("nobody-announced-this", Origin::Synced)
        .await
        .unwrap();
    assert!(scheduled.is_empty(), "{scheduled:?}");
    assert_eq!(purgatory.queue_len(), 0, "nothing scheduled");
    assert_eq!(purgatory.status().borrow().identifiers_queued, 0);
}

/// The relay's database fails.
struct Unreadable;

#[async_trait]
impl Announcements for Unreadable {
    async fn query(&self, _: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        Err(AnnouncementError::Backend(
            "the database is down".to_owned(),
        ))
    }
}

/// The announcements cannot be read: an error naming the identifier, nothing scheduled,
/// no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_announcements_schedule_nothing_and_say_why() {
    let w = world("host-unreadable", false).await;
    let registry = Registry::new();
    let purgatory = scheduler_reading(
        Arc::new(Unreadable),
        &w.host,
        &w.dir.join("root"),
        Duration::from_millis(10),
        &registry,
    );
    w.host
        .hold(state(&w.owner, &[("refs/heads/main", &w.one)], 1));
    let refused = purgatory.schedule_identifier("r", Origin::Synced).await;
    assert!(
        matches!(
            &refused,
            Err(ScheduleIdentifierError::Announcements { identifier, .. }) if identifier == "r"
        ),
        "{refused:?}"
    );
    assert_eq!(purgatory.queue_len(), 0, "nothing scheduled");
    // Once the database answers, the host schedules by repository as before.
    purgatory.schedule(&w.repo, Origin::Synced);
    assert_eq!(purgatory.queue_len(), 1);
}
