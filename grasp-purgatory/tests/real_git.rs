//! Purgatory against real git servers on loopback: `git daemon` on 127.0.0.1 and smart
//! HTTP (`git http-backend`) on ::1, started by the tests. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_purgatory::{
    ChannelSink, GitError, GitFetcher, GitFetcherConfig, MemoryAnnouncements, NpubLayout, Origin,
    Purgatory, PurgatoryOutput,
};
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{pull_request, state, Announcement};
use nostr::prelude::*;
use support::{
    closed_port_url, git, has_object, init_bare_repo, GitDaemon, GitHttpServer, HangingServer,
    SourceRepo, TempDir,
};
use tokio::sync::mpsc::UnboundedReceiver;

const IPV6_LOOPBACK: std::net::IpAddr = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
const IPV4_LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// The loopback test servers are local addresses over plain protocols.
fn test_policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_git_protocol(true)
        .allow_local_addresses(true)
}

fn fetcher(timeout: Duration) -> GitFetcher {
    GitFetcher::new(GitFetcherConfig {
        fetch_timeout: timeout,
        policy: test_policy(),
        ..GitFetcherConfig::default()
    })
}

/// A purgatory fetching with real git into `<root>/<npub>/<identifier>.git`.
struct Relay {
    purgatory: Purgatory,
    fetcher: GitFetcher,
    announcements: Arc<MemoryAnnouncements>,
    output: UnboundedReceiver<PurgatoryOutput>,
    layout: NpubLayout,
    owner: Keys,
    run: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Relay {
    async fn start(root: &Path) -> Relay {
        let fetcher = fetcher(Duration::from_secs(20));
        let announcements = Arc::new(MemoryAnnouncements::new());
        let (sink, output) = ChannelSink::new();
        let purgatory = Purgatory::builder()
            .announcements(announcements.clone())
            .repos_root(root)
            .git_backend(Arc::new(fetcher.clone()))
            .clone_policy(test_policy())
            .sink(Arc::new(sink))
            .build()
            .unwrap();
        let run = events::spawn_run(&purgatory);
        Relay {
            purgatory,
            fetcher,
            announcements,
            output,
            layout: NpubLayout::new(root),
            owner: Keys::generate(),
            run,
        }
    }

    /// The owner's repository `identifier`.
    fn repo(&self, identifier: &str) -> RepoRef {
        RepoRef::new(self.owner.public_key(), identifier).unwrap()
    }

    /// Announces `identifier` with these clone URLs and creates its local bare repository.
    fn announce(&self, identifier: &str, urls: &[&str]) -> PathBuf {
        self.announcements
            .add(
                Announcement::new(identifier)
                    .clone_urls(urls)
                    .sign(&self.owner),
            )
            .unwrap();
        let path = self
            .layout
            .path_of(&self.owner.public_key(), identifier)
            .unwrap();
        std::fs::create_dir_all(&path).unwrap();
        init_bare_repo(&path);
        path
    }

    fn add_pr(&self, identifier: &str, tip: &str) -> EventId {
        let event = pull_request(&Keys::generate(), &self.owner.public_key(), identifier, tip);
        let id = event.id;
        self.purgatory.add_pr(event, Origin::Synced).unwrap();
        id
    }

    async fn released(&mut self, count: usize, within: Duration) -> Vec<EventId> {
        let deadline = tokio::time::Instant::now() + within;
        let mut ids = Vec::new();
        while ids.len() < count {
            match tokio::time::timeout_at(deadline, self.output.recv()).await {
                Ok(Some(PurgatoryOutput::Released(held))) => ids.push(held.event.id),
                Ok(other) => panic!("unexpected output {other:?}"),
                Err(_) => panic!("{} of {count} released within {within:?}", ids.len()),
            }
        }
        ids
    }

    async fn stop(self) {
        self.purgatory.shutdown();
        tokio::time::timeout(Duration::from_secs(5), self.run)
            .await
            .expect("purgatory stops")
            .unwrap()
            .unwrap();
    }
}

fn refs_under(repo: &Path, prefix: &str) -> String {
    git(
        repo,
        &["for-each-ref", "--format=%(refname) %(objectname)", prefix],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_and_a_pr_are_released_from_the_second_url_when_the_first_lacks_them() {
    let dir = TempDir::new("purgatory-two-servers");
    // git:// on 127.0.0.1 has the repository, but an unrelated history.
    let unrelated = SourceRepo::create(dir.join("daemon/r.git"));
    unrelated.commit("something else entirely");
    let daemon = GitDaemon::start(&dir.join("daemon"));
    // Smart HTTP on ::1 has the commits.
    let source = SourceRepo::create(dir.join("http/r.git"));
    let first = source.commit("first");
    let second = source.commit("second");
    let pr_tip = source.commit_unreferenced("proposed change");
    let http = GitHttpServer::start(dir.join("http"), IPV6_LOOPBACK).await;

    let mut relay = Relay::start(&dir.join("repos")).await;
    let local = relay.announce("r", &[&daemon.url("r.git"), &http.url("r.git")]);
    let state_event = state(&relay.owner, "r", &[&second, &first], 1_700_000_000);
    relay
        .purgatory
        .add_state(state_event.clone(), Origin::Synced)
        .unwrap();
    let pr = relay.add_pr("r", &pr_tip);

    let mut released = relay.released(2, Duration::from_secs(30)).await;
    released.sort();
    let mut expected = vec![state_event.id, pr];
    expected.sort();
    assert_eq!(released, expected);
    for oid in [&first, &second, &pr_tip] {
        assert!(
            has_object(&local, oid),
            "{oid} fetched into the local repository"
        );
    }
    assert_eq!(
        refs_under(&local, "refs/nostr/").trim(),
        format!("refs/nostr/{pr} {pr_tip}"),
        "the PR tip is under refs/nostr/<event id>"
    );
    events::eventually(
        "temporary refs are dropped",
        Duration::from_secs(10),
        || refs_under(&local, "refs/purgatory/").is_empty(),
    )
    .await;
    assert_eq!(http.stats().fetches(), 1, "one fetch for both events");
    assert!(http.stats().v2_requests > 0);
    assert_eq!(relay.purgatory.held(), 0);
    assert!(
        relay.fetcher.fetch_processes_spawned() >= 2,
        "daemon first, then HTTP"
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_events_for_one_identifier_within_100_ms_cause_one_fetch_at_the_server() {
    let dir = TempDir::new("purgatory-burst");
    let source = SourceRepo::create(dir.join("http/r.git"));
    source.commit("base");
    let tips: Vec<String> = (0..10)
        .map(|n| source.commit_unreferenced(&format!("proposal {n}")))
        .collect();
    let http = GitHttpServer::start(dir.join("http"), IPV4_LOOPBACK).await;
    let mut relay = Relay::start(&dir.join("repos")).await;
    relay.announce("r", &[&http.url("r.git")]);

    let started = Instant::now();
    for tip in &tips {
        relay.add_pr("r", tip);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(started.elapsed() < Duration::from_millis(400));
    relay.released(10, Duration::from_secs(30)).await;
    assert_eq!(http.stats().fetches(), 1, "{:?}", http.stats().records);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_server_never_sees_more_than_five_concurrent_or_thirty_a_minute() {
    const IDENTIFIERS: usize = 50;
    let dir = TempDir::new("purgatory-limits");
    let source = SourceRepo::create(dir.join("http/source.git"));
    source.commit("base");
    let tips: Vec<String> = (0..IDENTIFIERS)
        .map(|n| source.commit_unreferenced(&format!("proposal {n}")))
        .collect();
    for n in 0..IDENTIFIERS {
        std::os::unix::fs::symlink(source.path(), dir.join(format!("http/r{n}.git"))).unwrap();
    }
    let http = GitHttpServer::builder(dir.join("http"))
        .bind(IPV4_LOOPBACK)
        .response_delay(Duration::from_millis(300))
        .start()
        .await;
    let mut relay = Relay::start(&dir.join("repos")).await;
    for (n, tip) in tips.iter().enumerate() {
        relay.announce(&format!("r{n}"), &[&http.url(&format!("r{n}.git"))]);
        relay.add_pr(&format!("r{n}"), tip);
    }
    relay.released(IDENTIFIERS, Duration::from_secs(120)).await;

    let stats = http.stats();
    // One fetch per repository; on a loaded machine a fetch cut off by the
    // fetcher's 20 s timeout is retried (seen once in CI: 51), which the
    // limits below must hold for too. One fetch per burst is
    // `ten_events_for_one_identifier_within_100_ms_cause_one_fetch_at_the_server`.
    assert!(
        (IDENTIFIERS..=IDENTIFIERS + 3).contains(&stats.fetches()),
        "{} fetches: {:?}",
        stats.fetches(),
        stats.records
    );
    assert!(
        stats.max_concurrent <= 5,
        "max concurrent {}",
        stats.max_concurrent
    );
    assert!(
        stats.max_concurrent >= 2,
        "fetches overlapped: the limit was exercised"
    );
    // The limit is applied when a fetch is started; the server sees each fetch a
    // process start later, so its clock may shift a fetch by a few milliseconds. A
    // 59.5 s window leaves room for that without letting a 31st fetch through.
    let per_window = stats.max_fetches_in_any_window(Duration::from_millis(59_500));
    assert!(per_window <= 30, "{per_window} fetches within a minute");
    assert_eq!(per_window, 30, "the per-minute limit was reached");
    let mut starts = stats.fetch_starts.clone();
    starts.sort();
    assert!(starts[30] - starts[0] >= Duration::from_millis(59_500));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_urls_and_object_ids_are_refused_before_any_process_runs() {
    let dir = TempDir::new("purgatory-hostile");
    let strict = GitFetcher::new(GitFetcherConfig::default());
    let repo = dir.join("local.git");
    init_bare_repo(&repo);
    let marker = dir.join("pwned");
    let marker_text = marker.display().to_string();
    let hostile = [
        format!("file://{}", dir.path().display()),
        format!("ext::sh -c touch% {marker_text}"),
        format!("ext::sh -c 'touch {marker_text}'"),
        format!("-u touch {marker_text}"),
        format!("--upload-pack=touch {marker_text}"),
        "https://-oProxyCommand=touch/r.git".to_owned(),
        "https://user:secret@example.com/r.git".to_owned(),
        "https://token@example.com/r.git".to_owned(),
        "ssh://example.com/r.git".to_owned(),
        "git@example.com:r.git".to_owned(),
        "https://127.0.0.1/r.git".to_owned(),
        "https://[::1]/r.git".to_owned(),
        "https://10.1.2.3/r.git".to_owned(),
        "https://192.168.1.1/r.git".to_owned(),
        "https://169.254.169.254/latest/meta-data".to_owned(),
        "https://[::ffff:127.0.0.1]/r.git".to_owned(),
        "https://2130706433/r.git".to_owned(),
        "https://localhost/r.git".to_owned(),
        "http://example.com/r.git".to_owned(),
        "git://example.com/r.git".to_owned(),
    ];
    let oid = GitOid::parse(&ids::oid(1)).unwrap();
    for url in &hostile {
        let result = strict.fetch(&repo, url, std::slice::from_ref(&oid)).await;
        assert!(
            matches!(result, Err(GitError::Policy { .. })),
            "{url}: {result:?}"
        );
    }
    assert_eq!(
        strict.processes_spawned(),
        0,
        "no process ran for any hostile url"
    );

    // Through the whole purgatory: an announcement listing only hostile URLs.
    let fetcher = GitFetcher::new(GitFetcherConfig::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, _output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements.clone())
        .repos_root(dir.join("repos"))
        .git_backend(Arc::new(fetcher.clone()))
        .immediate_delay(Duration::from_millis(10))
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let owner = Keys::generate();
    let urls: Vec<&str> = hostile.iter().map(String::as_str).collect();
    announcements
        .add(Announcement::new("r").clone_urls(&urls).sign(&owner))
        .unwrap();
    let local = NpubLayout::new(dir.join("repos"))
        .path_of(&owner.public_key(), "r")
        .unwrap();
    std::fs::create_dir_all(&local).unwrap();
    init_bare_repo(&local);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &ids::oid(2));
    purgatory.add_pr(pr, Origin::Synced).unwrap();
    // Non-hex object ids never enter purgatory.
    for bad in ["--upload-pack=touch", "HEAD", "../../etc/passwd", "0123"] {
        let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", bad);
        assert!(purgatory.add_pr(pr, Origin::Synced).is_err(), "{bad}");
        let st = state(&owner, "r", &[bad], 1);
        assert!(purgatory.add_state(st, Origin::Synced).is_err(), "{bad}");
    }
    // Let the sync run its first attempt (and back off).
    let deadline = Instant::now() + Duration::from_secs(10);
    let repo = RepoRef::new(owner.public_key(), "r").unwrap();
    while purgatory.queue_entry(&repo).map(|e| e.attempt_count) != Some(1) {
        assert!(Instant::now() < deadline, "first attempt within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fetcher.fetch_processes_spawned(), 0, "no git fetch ran");
    assert_eq!(purgatory.held(), 1);
    assert!(!marker.exists());
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_is_cut_off_by_the_timeout() {
    let dir = TempDir::new("purgatory-hanging");
    let repo = dir.join("local.git");
    init_bare_repo(&repo);
    let hanging = HangingServer::start().await;
    let fetcher = fetcher(Duration::from_secs(1));
    let oid = GitOid::parse(&ids::oid(1)).unwrap();
    for (n, url) in [hanging.git_url("r.git"), hanging.http_url("r.git")]
        .iter()
        .enumerate()
    {
        let started = Instant::now();
        let result = fetcher.fetch(&repo, url, std::slice::from_ref(&oid)).await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(GitError::Timeout { .. })),
            "{url}: {result:?}"
        );
        assert!(
            took < Duration::from_secs(4),
            "{url}: cut off after {took:?}"
        );
        assert!(
            hanging
                .wait_for_accepted(n + 1, Duration::from_secs(2))
                .await
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lacking_one_of_several_ids_refuses_the_request_and_each_id_alone_is_one_request()
{
    let dir = TempDir::new("purgatory-partial");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let present = source.commit("on the server");
    let http = GitHttpServer::start(dir.join("served"), IPV4_LOOPBACK).await;
    let url = http.url("r.git");
    let repo = dir.join("local.git");
    init_bare_repo(&repo);
    let fetcher = fetcher(Duration::from_secs(20));
    let present_oid = GitOid::parse(&present).unwrap();
    let wanted = [present_oid.clone(), GitOid::parse(&ids::oid(9)).unwrap()];
    // One request: the server refuses it whole, nothing is fetched, the report says why.
    let report = fetcher.fetch(&repo, &url, &wanted).await.unwrap();
    assert!(report.present.is_empty());
    assert_eq!(report.missing.len(), 2);
    assert!(report.error.is_some());
    assert_eq!(fetcher.fetch_processes_spawned(), 1);
    assert_eq!(http.stats().fetches(), 1);
    // The id the server has, asked alone: one more request.
    let report = fetcher
        .fetch(&repo, &url, std::slice::from_ref(&present_oid))
        .await
        .unwrap();
    assert_eq!(report.present, [present_oid].into_iter().collect());
    assert!(report.error.is_none());
    assert_eq!(fetcher.fetch_processes_spawned(), 2);
    assert_eq!(http.stats().fetches(), 2);
    assert_eq!(
        refs_under(&repo, "refs/purgatory/").trim(),
        format!("refs/purgatory/{present} {present}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_without_its_history_does_not_count_as_present() {
    let dir = TempDir::new("purgatory-connectivity");
    let repo = dir.join("local.git");
    init_bare_repo(&repo);
    // A commit whose parent is missing, as a cut-off or hostile fetch leaves behind.
    let tree = git(&repo, &["mktree"]).trim().to_owned();
    let orphan = format!(
        "tree {tree}\nparent {}\nauthor a <a@a> 1 +0000\ncommitter a <a@a> 1 +0000\n\nx\n",
        ids::oid(5)
    );
    let broken = support::git_with_input(
        &repo,
        &["hash-object", "-t", "commit", "-w", "--stdin"],
        orphan.as_bytes(),
    )
    .trim()
    .to_owned();
    let root = format!("tree {tree}\nauthor a <a@a> 1 +0000\ncommitter a <a@a> 1 +0000\n\ny\n");
    let whole = support::git_with_input(
        &repo,
        &["hash-object", "-t", "commit", "-w", "--stdin"],
        root.as_bytes(),
    )
    .trim()
    .to_owned();
    assert!(has_object(&repo, &broken));
    let fetcher = fetcher(Duration::from_secs(20));
    let asked = [
        GitOid::parse(&broken).unwrap(),
        GitOid::parse(&whole).unwrap(),
    ];
    let present = fetcher.existing(&repo, &asked).await.unwrap();
    let present: Vec<String> = present.iter().map(|o| o.to_string()).collect();
    assert_eq!(present, vec![whole]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_url_fails_fast_and_is_retried_twenty_seconds_later() {
    let dir = TempDir::new("purgatory-unreachable");
    let relay = Relay::start(&dir.join("repos")).await;
    relay.announce("r", &[&closed_port_url("http", "r.git")]);
    relay.add_pr("r", &ids::oid(3));
    let deadline = Instant::now() + Duration::from_secs(10);
    let retry_in = loop {
        let repo = relay.repo("r");
        let attempted = relay.purgatory.queue_entry(&repo).map(|e| e.attempt_count) == Some(1);
        if let Some(retry_in) = relay.purgatory.retry_in(&repo).filter(|_| attempted) {
            break retry_in;
        }
        assert!(Instant::now() < deadline, "first attempt within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        retry_in > Duration::from_secs(18) && retry_in <= Duration::from_secs(20),
        "next attempt in {retry_in:?}"
    );
    assert_eq!(relay.fetcher.fetch_processes_spawned(), 1);
    assert_eq!(relay.purgatory.held(), 1);
    relay.stop().await;
}

/// A local copy between two repositories of ours (the owners of one identifier): the
/// objects another repository holds, even unreferenced (its `refs/purgatory/*` swept),
/// are copied with their history under `refs/purgatory/<oid>`, no fetch from a server
/// counted; an object that repository lacks is left out, not an error; a relative path
/// works; nothing runs when everything is present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_copied_between_local_repositories_without_a_server() {
    let dir = TempDir::new("purgatory-copy");
    let source = SourceRepo::create(dir.join("root/a/r.git"));
    let first = source.commit("first");
    let unreferenced = source.commit_unreferenced("fetched for a, swept");
    let target = dir.join("root/b/r.git");
    std::fs::create_dir_all(&target).unwrap();
    let fetcher = fetcher(Duration::from_secs(20));
    fetcher.init_bare(&target).await.unwrap();
    let (first_oid, unreferenced_oid) = (
        GitOid::parse(&first).unwrap(),
        GitOid::parse(&unreferenced).unwrap(),
    );
    let lacking = GitOid::parse(&ids::oid(7)).unwrap();
    let asked = [unreferenced_oid.clone(), lacking];
    // The command runs in the target: a relative source path is made absolute first.
    let relative = pathdiff(source.path());

    let present = fetcher
        .copy_objects(&relative, &target, &asked)
        .await
        .unwrap();
    assert_eq!(
        present,
        std::collections::BTreeSet::from([unreferenced_oid.clone()])
    );
    assert!(has_object(&target, &first), "with its history");
    assert_eq!(
        refs_under(&target, "refs/purgatory/").trim(),
        format!("refs/purgatory/{unreferenced} {unreferenced}")
    );
    assert_eq!(fetcher.fetch_processes_spawned(), 0, "no server asked");
    let packs = || {
        std::fs::read_dir(target.join("objects/pack"))
            .unwrap()
            .count()
    };
    let before = packs();
    let again = fetcher
        .copy_objects(source.path(), &target, std::slice::from_ref(&first_oid))
        .await
        .unwrap();
    assert!(again.contains(&first_oid));
    assert_eq!(packs(), before, "present already: nothing copied");
}

/// `path` relative to the current directory (`../..` as needed).
fn pathdiff(path: &Path) -> PathBuf {
    let here = std::env::current_dir().unwrap();
    let common = here
        .ancestors()
        .find(|ancestor| path.starts_with(ancestor))
        .unwrap();
    let ups = here.components().count() - common.components().count();
    let mut relative: PathBuf = std::iter::repeat_n("..", ups).collect();
    relative.push(path.strip_prefix(common).unwrap());
    relative
}
