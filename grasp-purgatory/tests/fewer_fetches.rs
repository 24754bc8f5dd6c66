//! Fewer fetches (issue 46, item 3): one fetch per clone URL asks for every object the
//! events held for a repository at that moment need, events held while a fetch of their
//! repository is in flight are served by one follow-up fetch after it (never a second
//! fetch beside it), and an object the local repository already has is never asked for.
//!
//! Real git over smart HTTP on loopback: the owner's server has the repository's first
//! commit only; a contributor's fork (another server, the "fork host") has the pull
//! request's commit and the update's commit, a descendant of it. The purgatory runs git
//! through [`CountingGit`], which logs every `git fetch` with its URL and the object ids
//! it asked for; the fork server counts the fetches it served.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{MemoryAnnouncements, NpubLayout, Origin, Purgatory};
use grasp_sync_core::nip34::RepoRef;
use grasp_sync_test_support::nip34::{pull_request, sign, tag, Announcement};
use nostr::prelude::*;
use support::{
    fetch_by_sha, git, init_bare_repo, serving_builder_with_git, until, CountingGit, FetchOutcome,
    GitHttpServer, SourceRepo, TempDir, SETTLE,
};

/// The owner's server.
const OWNER_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
/// The fork host: another address block than the owner's, so another throttle.
const FORK_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 2, 1));

/// The two servers, the commits, the purgatory's git and its git root.
struct World {
    dir: TempDir,
    counting: CountingGit,
    owner_server: GitHttpServer,
    fork_server: GitHttpServer,
    owner: Keys,
    contributor: Keys,
    relay: Arc<MemoryAnnouncements>,
    /// The pull request's commit (on the fork only).
    pr_tip: String,
    /// The update's commit, a child of `pr_tip` (on the fork only).
    update_tip: String,
}

impl World {
    /// The owner announces `r` on the owner's server (which has the first commit); the
    /// contributor's fork of it on the fork host has two more commits. The fork server
    /// waits `fork_delay` before each answer (a fetch from it takes a while).
    async fn new(name: &str, fork_delay: Duration) -> World {
        let dir = TempDir::new(name);
        let counting = CountingGit::install(&dir.join("bin"));
        let upstream = SourceRepo::create(dir.join("owner/r.git"));
        upstream.commit("first");
        // The same first commit (commits are deterministic), then the contribution.
        let fork = SourceRepo::create(dir.join("fork/r.git"));
        fork.commit("first");
        let pr_tip = fork.commit("proposed change");
        let update_tip = fork.commit("the change, revised");
        let owner_server = GitHttpServer::start(dir.join("owner"), OWNER_ADDRESS).await;
        let fork_server = GitHttpServer::builder(dir.join("fork"))
            .bind(FORK_ADDRESS)
            .response_delay(fork_delay)
            .start()
            .await;
        let owner = Keys::generate();
        let relay = Arc::new(MemoryAnnouncements::new());
        relay
            .add(
                Announcement::new("r")
                    .clone_urls([owner_server.url("r.git")])
                    .sign(&owner),
            )
            .unwrap();
        World {
            dir,
            counting,
            owner_server,
            fork_server,
            owner,
            contributor: Keys::generate(),
            relay,
            pr_tip,
            update_tip,
        }
    }

    /// A purgatory over the relay, its git root under the test's directory, syncing
    /// 10 ms after a synced event arrives.
    fn purgatory(&self) -> Purgatory {
        serving_builder_with_git(
            &self.relay,
            &self.dir.join("root"),
            3600,
            self.counting.program(),
        )
        .build()
        .unwrap()
    }

    /// The owner's repository.
    fn repo(&self) -> RepoRef {
        RepoRef::new(self.owner.public_key(), "r").unwrap()
    }

    /// The local repository purgatory fetches into, created now.
    fn local(&self) -> std::path::PathBuf {
        let local = NpubLayout::new(self.dir.join("root"))
            .path_of(&self.owner.public_key(), "r")
            .unwrap();
        std::fs::create_dir_all(&local).unwrap();
        init_bare_repo(&local);
        local
    }

    /// The fork's clone URL.
    fn fork_url(&self) -> String {
        self.fork_server.url("r.git")
    }

    /// The contributor's pull request proposing `pr_tip`, naming the fork (`clone`).
    fn pull_request(&self) -> Event {
        let tags = vec![
            tag(&["a", &self.repo().to_string()]),
            tag(&["c", &self.pr_tip]),
            tag(&["clone", &self.fork_url()]),
        ];
        sign(&self.contributor, 1618, "", tags, 1_700_000_000)
    }

    /// The contributor's update of `pr` moving it to `update_tip`, naming the fork.
    fn update(&self, pr: &Event) -> Event {
        let tags = vec![
            tag(&["E", &pr.id.to_hex()]),
            tag(&["a", &self.repo().to_string()]),
            tag(&["c", &self.update_tip]),
            tag(&["clone", &self.fork_url()]),
        ];
        sign(&self.contributor, 1619, "", tags, 1_700_000_001)
    }

    /// The object ids each `git fetch` from the fork asked for.
    fn fork_fetches(&self) -> Vec<Vec<String>> {
        let fork = self.fork_url();
        self.counting
            .fetches()
            .into_iter()
            .filter(|(url, _)| *url == fork)
            .map(|(_, oids)| oids)
            .collect()
    }

    /// Every `git fetch`, wherever from, with the object ids it asked for.
    fn all_fetches(&self) -> Vec<(String, Vec<String>)> {
        self.counting.fetches()
    }
}

/// Waits until `count` events were released and nothing is held.
async fn released(purgatory: &Purgatory, count: u64) {
    let mut status = purgatory.status();
    until(&mut status, SETTLE * 2, |s| {
        s.events_released >= count && s.events_held == 0
    })
    .await;
}

/// Stops the purgatory's loop.
async fn stop(purgatory: &Purgatory, run: tokio::task::JoinHandle<std::io::Result<()>>) {
    purgatory.shutdown();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("purgatory stops")
        .unwrap()
        .unwrap();
}

/// A pull request and its update held together (before the loop runs) cause one fetch
/// from the fork, asking for both commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_and_its_update_held_together_cause_one_fetch_from_the_fork() {
    let world = World::new("fewer-fetches-together", Duration::ZERO).await;
    world.local();
    let purgatory = world.purgatory();
    let pr = world.pull_request();
    purgatory.add(pr.clone(), Origin::Synced).unwrap();
    purgatory.add(world.update(&pr), Origin::Synced).unwrap();
    let run = events::spawn_run(&purgatory);
    released(&purgatory, 2).await;
    stop(&purgatory, run).await;

    let fork = world.fork_fetches();
    eprintln!("every fetch: {:#?}", world.all_fetches());
    assert_eq!(fork.len(), 1, "one fetch from the fork: {fork:?}");
    let mut asked = fork[0].clone();
    asked.sort();
    let mut both = vec![world.pr_tip.clone(), world.update_tip.clone()];
    both.sort();
    assert_eq!(asked, both, "the one fetch asked for both commits");
    assert_eq!(world.fork_server.stats().fetches(), 1);
}

/// The update arrives while the fetch of its pull request's commit is in flight: it is
/// served by one follow-up fetch after that one, never by a second fetch beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_held_during_the_fetch_of_its_pull_request_joins_one_follow_up_fetch() {
    // Each answer of the fork takes 500 ms: a fetch (three requests) takes 1.5 s.
    let world = World::new("fewer-fetches-in-flight", Duration::from_millis(500)).await;
    world.local();
    let purgatory = world.purgatory();
    let run = events::spawn_run(&purgatory);
    let pr = world.pull_request();
    purgatory.add(pr.clone(), Origin::Synced).unwrap();
    events::eventually(
        "the fork received the first request of the fetch",
        SETTLE,
        || world.fork_server.stats().requests > 0,
    )
    .await;
    purgatory.add(world.update(&pr), Origin::Synced).unwrap();
    released(&purgatory, 2).await;
    stop(&purgatory, run).await;

    let fork = world.fork_fetches();
    eprintln!("every fetch: {:#?}", world.all_fetches());
    let stats = world.fork_server.stats();
    assert_eq!(
        stats.max_concurrent_connections, 1,
        "never two fetches from the fork at once: {fork:?}"
    );
    assert_eq!(fork.len(), 2, "the first fetch and one follow-up: {fork:?}");
    assert_eq!(fork[0], vec![world.pr_tip.clone()]);
    assert_eq!(fork[1], vec![world.update_tip.clone()]);
}

/// A pull request whose commit the local repository already has is released without
/// any fetch; with its update (whose commit it lacks) held too, the one fetch asks for
/// the update's commit only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_already_present_is_never_fetched() {
    let world = World::new("fewer-fetches-present", Duration::ZERO).await;
    let local = world.local();
    let outcome = fetch_by_sha(
        &local,
        &world.fork_url(),
        &world.pr_tip,
        Duration::from_secs(30),
    )
    .await;
    assert!(matches!(outcome, FetchOutcome::Fetched), "{outcome:?}");
    let served_before = world.fork_server.stats().fetches();

    let purgatory = world.purgatory();
    let pr = world.pull_request();
    purgatory.add(pr.clone(), Origin::Synced).unwrap();
    let run = events::spawn_run(&purgatory);
    released(&purgatory, 1).await;
    assert_eq!(
        world.all_fetches(),
        Vec::<(String, Vec<String>)>::new(),
        "no fetch for an event whose objects are present"
    );
    assert_eq!(world.owner_server.stats().fetches(), 0);

    purgatory.add(world.update(&pr), Origin::Synced).unwrap();
    released(&purgatory, 2).await;
    stop(&purgatory, run).await;
    let fork = world.fork_fetches();
    eprintln!("every fetch: {:#?}", world.all_fetches());
    assert_eq!(fork, vec![vec![world.update_tip.clone()]]);
    assert_eq!(world.fork_server.stats().fetches(), served_before + 1);
}

/// Pull requests in the operator's run, each with one update.
const PULL_REQUESTS: usize = 25;

/// How the updates of the operator's run reached purgatory.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    /// Pull requests and updates in one batch, before the loop runs.
    Together,
    /// The pull requests first; the updates once the first fetch from the fork started.
    UpdatesDuringTheFetch,
}

/// The operator's run: `PULL_REQUESTS` pull requests of the owner's repository, each
/// from its own fork on one fork host (`clone` tag), each with an update whose commit is
/// a child of the pull request's. Returns the fetches from the fork host.
async fn pull_requests_with_updates_on_one_fork_host(
    arrival: Arrival,
    update_names_the_fork: bool,
) -> Vec<(String, Vec<String>)> {
    let world = World::new("fewer-fetches-many", Duration::from_millis(50)).await;
    world.local();
    let fork = SourceRepo::create(world.dir.join("forks/fork.git"));
    let first = fork.commit("first");
    let mut pairs = Vec::new();
    for n in 0..PULL_REQUESTS {
        fork.set_ref(SourceRepo::BRANCH, &first);
        let pr_tip = fork.commit(&format!("change {n}"));
        let update_tip = fork.commit(&format!("change {n}, revised"));
        fork.set_ref(&format!("refs/heads/pr{n}"), &update_tip);
        // Each contributor's fork on the one host (the same objects behind each path).
        std::os::unix::fs::symlink(
            world.dir.join("forks/fork.git"),
            world.dir.join(format!("forks/fork{n}.git")),
        )
        .unwrap();
        pairs.push((pr_tip, update_tip));
    }
    let fork_host = GitHttpServer::builder(world.dir.join("forks"))
        .bind(IpAddr::V4(Ipv4Addr::new(127, 0, 3, 1)))
        .response_delay(Duration::from_millis(50))
        .start()
        .await;
    let mut prs = Vec::new();
    let mut updates = Vec::new();
    for (n, (pr_tip, update_tip)) in pairs.iter().enumerate() {
        let url = fork_host.url(&format!("fork{n}.git"));
        let contributor = Keys::generate();
        let pr = sign(
            &contributor,
            1618,
            "",
            vec![
                tag(&["a", &world.repo().to_string()]),
                tag(&["c", pr_tip]),
                tag(&["clone", &url]),
            ],
            1_700_000_000,
        );
        let mut tags = vec![
            tag(&["E", &pr.id.to_hex()]),
            tag(&["a", &world.repo().to_string()]),
            tag(&["c", update_tip]),
        ];
        if update_names_the_fork {
            tags.push(tag(&["clone", &url]));
        }
        updates.push(sign(&contributor, 1619, "", tags, 1_700_000_001));
        prs.push(pr);
    }
    let purgatory = world.purgatory();
    let run = match arrival {
        Arrival::Together => {
            for event in prs.iter().chain(&updates) {
                purgatory.add(event.clone(), Origin::Synced).unwrap();
            }
            events::spawn_run(&purgatory)
        }
        Arrival::UpdatesDuringTheFetch => {
            for event in &prs {
                purgatory.add(event.clone(), Origin::Synced).unwrap();
            }
            let run = events::spawn_run(&purgatory);
            events::eventually("the first fetch from the fork host", SETTLE, || {
                fork_host.stats().requests > 0
            })
            .await;
            for event in &updates {
                purgatory.add(event.clone(), Origin::Synced).unwrap();
            }
            run
        }
    };
    let mut status = purgatory.status();
    until(&mut status, Duration::from_secs(180), |s| {
        s.events_released >= 2 * PULL_REQUESTS as u64 && s.events_held == 0
    })
    .await;
    stop(&purgatory, run).await;
    let host = format!("http://{}/", fork_host.addr());
    let fetches: Vec<(String, Vec<String>)> = world
        .all_fetches()
        .into_iter()
        .filter(|(url, _)| url.starts_with(&host))
        .collect();
    eprintln!(
        "{arrival:?}, update names the fork: {update_names_the_fork}: {} fetches from the fork host ({} served), {} in all",
        fetches.len(),
        fork_host.stats().fetches(),
        world.all_fetches().len()
    );
    fetches
}

/// The operator's run, the updates held while the first fetch from the fork host was
/// in flight: the forks not fetched from yet are each asked for their pull request's
/// commit and its update's in one request, and only the fork whose fetch was in flight
/// is asked again, once, for its update. Before, the attempt asked every fork for the
/// pull request's commit alone (the URLs were read once, before the updates came) and
/// the next attempt asked every fork again: 50 fetches from the fork host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_held_during_the_first_fetch_join_the_fetches_not_made_yet() {
    let fetches =
        pull_requests_with_updates_on_one_fork_host(Arrival::UpdatesDuringTheFetch, true).await;
    assert!(
        fetches.len() <= PULL_REQUESTS + 1,
        "one fetch per fork and one follow-up: {} fetches {fetches:#?}",
        fetches.len()
    );
    assert_no_object_asked_twice(&fetches);
}

/// The operator's run with the updates naming no clone URL of their own, held together
/// with their pull requests: each fork is asked once, for both commits (an update is
/// fetched from its pull request's URLs). Before, the updates' commits were asked of
/// the owner's server only, and never came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_naming_no_url_are_fetched_with_their_pull_request_from_its_fork() {
    let fetches = pull_requests_with_updates_on_one_fork_host(Arrival::Together, false).await;
    assert_eq!(fetches.len(), PULL_REQUESTS, "{fetches:#?}");
    assert!(
        fetches.iter().all(|(_, oids)| oids.len() == 2),
        "each fork asked for both commits: {fetches:#?}"
    );
}

/// Panics when one object was asked for by two fetches from the fork host.
fn assert_no_object_asked_twice(fetches: &[(String, Vec<String>)]) {
    let mut seen = std::collections::BTreeSet::new();
    for (url, oids) in fetches {
        for oid in oids {
            assert!(seen.insert(oid.clone()), "{oid} asked of {url} again");
        }
    }
}

/// An object that arrived (a push) while its repository waited for a throttled domain
/// is not fetched when the domain's queue serves the repository: the pull request is
/// released without a fetch from the fork. The fork host takes one request at a time
/// and is busy with another repository's slow fetch meanwhile. Before, the domain's
/// queue asked the fork for the commit the repository already had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_arrived_while_waiting_for_a_throttled_domain_is_not_fetched() {
    // Each answer of the fork host takes 4 s: the other repository's fetch holds the
    // host's one slot for 8 s or more.
    let world = World::new("fewer-fetches-domain-queue", Duration::from_secs(4)).await;
    let local = world.local();
    let other_owner = Keys::generate();
    let other = SourceRepo::create(world.dir.join("fork/x.git"));
    let other_tip = other.commit("other work");
    world
        .relay
        .add(
            Announcement::new("x")
                .clone_urls([world.fork_server.url("x.git")])
                .sign(&other_owner),
        )
        .unwrap();
    let purgatory = serving_builder_with_git(
        &world.relay,
        &world.dir.join("root"),
        3600,
        world.counting.program(),
    )
    .domain_concurrent(1)
    .build()
    .unwrap();
    let run = events::spawn_run(&purgatory);
    let other_pr = pull_request(
        &Keys::generate(),
        &other_owner.public_key(),
        "x",
        &other_tip,
    );
    purgatory.add(other_pr, Origin::Synced).unwrap();
    events::eventually("the other repository's fetch started", SETTLE, || {
        world.fork_server.stats().requests > 0
    })
    .await;
    purgatory.add(world.pull_request(), Origin::Synced).unwrap();
    let mut status = purgatory.status();
    until(&mut status, SETTLE, |s| {
        s.identifiers_waiting_for_domain > 0
    })
    .await;
    assert!(
        world.fork_fetches().is_empty(),
        "the repository waits for the fork host's slot"
    );
    // The contributor pushes the commit meanwhile.
    let refspec = format!("{}:refs/heads/pushed", world.pr_tip);
    let fork_path = world.dir.join("fork/r.git");
    git(
        &local,
        &["fetch", "--quiet", fork_path.to_str().unwrap(), &refspec],
    );
    released(&purgatory, 2).await;
    stop(&purgatory, run).await;
    eprintln!("every fetch: {:#?}", world.all_fetches());
    assert_eq!(
        world.fork_fetches(),
        Vec::<Vec<String>>::new(),
        "the commit present was not fetched"
    );
}
