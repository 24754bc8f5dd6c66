//! The `grasp-sync` sidecar doing the whole GRASP job next to a plain relay, the way an
//! operator runs it: events from a remote relay, git data from a real smart-HTTP server
//! (`git http-backend`) on 127.0.0.1, an empty `--git-root` (no bare repository made
//! beforehand). Each announcement lists our own service first among its clone URLs; a
//! listener in front of the own relay answers git requests the way strfry does (200 to
//! any path) and counts them: there must be none. `--once` exits 0 only when every held
//! event was released (checked against the journal and the repositories after exit),
//! 3 after `--timeout` naming the repository whose server never answers, and 4 naming
//! the repository whose only clone URL is ours.
//!
//! The own relay runs with write limits off (it is ours, and nostr-relay-builder's
//! 60 writes a minute would make 100 releases take two minutes); the remote relay runs
//! with nostr-relay-builder's defaults (500 REQs per connection, 500 results per filter
//! without `limit`). The purgatory's per-domain rate limit (30 fetches a minute, ours)
//! is raised in the 50-repository run only: every repository's server is the one
//! 127.0.0.1 git server here, where in the field they are many hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
#[path = "common/http.rs"]
mod http;
#[path = "common/own_front.rs"]
mod own_front;
use grasp_sync_test_harness::relays as support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use git_support::{git, has_object, GitHttpServer, HangingServer, SourceRepo, TempDir};
use grasp_purgatory::journal;
use grasp_purgatory::NpubLayout;
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use http::{free_port, get};
use nostr::prelude::*;
use own_front::OwnFront;
use support::{TestRelay, TestRelayConfig};
use tokio::process::{Child, Command};

const LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
/// Repositories in the large run.
const REPOSITORIES: usize = 50;
/// Announcements in the large run that do not list our service.
const FOREIGN: usize = 10;

/// Our own service's clone URL of `owner`'s `identifier` (the GRASP layout).
fn own_clone_url(front: &OwnFront, owner: &Keys, identifier: &str) -> String {
    let npub = owner.public_key().to_bech32().unwrap();
    front.http_url(&format!("{npub}/{identifier}.git"))
}

/// The own relay (write limits off), the front on its port, a remote relay with
/// nostr-relay-builder's defaults.
async fn relays() -> (TestRelay, OwnFront, TestRelay) {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let front = OwnFront::start(own.port()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    (own, front, remote)
}

/// Starts the sidecar with `--once` against the front, purgatory under `root`, plus
/// `extra` arguments. It logs at `warn` (`SIDECAR_TEST_LOG` sets its `RUST_LOG`
/// instead, and the large run then prints its log).
fn spawn_sidecar(
    front: &OwnFront,
    root: &Path,
    timeout_secs: u64,
    env: &[(&str, &str)],
    extra: &[String],
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_grasp-sync"))
        .args([
            "--own-relay",
            &front.ws_url(),
            "--git-root",
            root.to_str().unwrap(),
            "--allow-local-addresses",
            "--allow-insecure-clone-urls",
            "--once",
            "--timeout",
            &timeout_secs.to_string(),
        ])
        .args(extra)
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .envs(env.iter().copied())
        .env(
            "RUST_LOG",
            std::env::var("SIDECAR_TEST_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits at most `wait` for the sidecar to exit.
async fn exited(child: Child, wait: Duration) -> Output {
    tokio::time::timeout(wait, child.wait_with_output())
        .await
        .expect("the sidecar exits in time")
        .unwrap()
}

/// [`spawn_sidecar`], then [`exited`].
async fn run_sidecar(
    front: &OwnFront,
    root: &Path,
    timeout_secs: u64,
    env: &[(&str, &str)],
    wait: Duration,
) -> Output {
    exited(spawn_sidecar(front, root, timeout_secs, env, &[]), wait).await
}

/// The last line of the sidecar's stdout.
fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

/// The number just before `suffix` in `text` (0 when absent).
fn number_before(text: &str, suffix: &str) -> u64 {
    text.split(suffix)
        .next()
        .filter(|head| head.len() < text.len())
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or(0)
}

/// Every `<root>/<npub>/<identifier>.git` directory.
fn created_repositories(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for owner in std::fs::read_dir(root).unwrap().map(|entry| entry.unwrap()) {
        if !owner.file_type().unwrap().is_dir() {
            continue;
        }
        for repo in std::fs::read_dir(owner.path()).unwrap() {
            found.push(repo.unwrap().path());
        }
    }
    found.sort();
    found
}

/// One repository of the large run: where it is served, what its events name.
struct Repository {
    owner: Keys,
    identifier: String,
    main: String,
    proposal: String,
    state: Event,
    pr: Event,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_repositories_sync_completely_into_repositories_nobody_created_beforehand() {
    // One git server stands in for 50 hosts: its domain may take them all.
    let raised = [("NGIT_SYNC_DOMAIN_RATE_LIMIT", "6000")];
    sync_repositories_completely(REPOSITORIES, &raised, true).await;
}

/// The twin with purgatory's default per-domain limits (5 in flight, 30 a minute): few
/// enough repositories that their fetches fit the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_repositories_sync_completely_within_the_default_domain_limits() {
    sync_repositories_completely(10, &[], false).await;
}

/// `repositories` repositories (a state and a PR each, on the remote relay) sync
/// completely into an empty git root; `with_foreign`: plus [`FOREIGN`] announcements
/// not listing us, none of which may reach the own relay.
async fn sync_repositories_completely(
    repositories_wanted: usize,
    env: &[(&str, &str)],
    with_foreign: bool,
) {
    let started = Instant::now();
    let dir = TempDir::new("sidecar-git-http");
    let served = dir.join("served");
    let (own, front, remote) = relays().await;
    let server = GitHttpServer::start(&served, LOOPBACK).await;
    let owners: Vec<Keys> = (0..5).map(|_| Keys::generate()).collect();
    let contributor = Keys::generate();
    let at = Timestamp::now().as_secs() - 600;
    let (own_url, remote_url) = (front.ws_url(), remote.url().to_string());
    let mut repositories = Vec::new();
    let mut announcements = Vec::new();
    for n in 0..repositories_wanted {
        let owner = owners[n % owners.len()].clone();
        let identifier = format!("repo-{n}");
        let source = SourceRepo::create(served.join(format!("{identifier}.git")));
        let main = source.commit(&format!("main of {identifier}"));
        let proposal = source.commit_unreferenced(&format!("proposal for {identifier}"));
        let ours = own_clone_url(&front, &owner, &identifier);
        let theirs = server.url(&format!("{identifier}.git"));
        announcements.push(
            Announcement::new(&identifier)
                .relays(&[&own_url, &remote_url])
                .clone_urls(&[&ours, &theirs])
                .at(at)
                .sign(&owner),
        );
        let coordinate = ids::coordinate(&owner.public_key(), &identifier);
        let state = sign(
            &owner,
            30618,
            "",
            vec![tag(&["d", &identifier]), tag(&["refs/heads/main", &main])],
            at + 1,
        );
        let pr = sign(
            &contributor,
            1618,
            "",
            vec![tag(&["a", &coordinate]), tag(&["c", &proposal])],
            at + 2,
        );
        repositories.push(Repository {
            owner,
            identifier,
            main,
            proposal,
            state,
            pr,
        });
    }
    let foreign_count = if with_foreign { FOREIGN } else { 0 };
    let foreign: Vec<Event> = (0..foreign_count)
        .map(|n| {
            let identifier = format!("elsewhere-{n}");
            let clone = server.url(&format!("repo-{n}.git"));
            Announcement::new(&identifier)
                .relays(&[&remote_url])
                .clone_urls(&[&clone])
                .at(at)
                .sign(&Keys::generate())
        })
        .collect();
    own.add_events(&announcements).await;
    let mut on_remote = announcements.clone();
    on_remote.extend(foreign.iter().cloned());
    for repository in &repositories {
        on_remote.push(repository.state.clone());
        on_remote.push(repository.pr.clone());
    }
    remote.add_events(&on_remote).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();
    let prepared = started.elapsed();

    let output = run_sidecar(&front, &root, 150, env, Duration::from_secs(180)).await;
    let ran = started.elapsed() - prepared;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        last_line(&output)
            .starts_with("done: historic sync complete, every purgatory event released"),
        "{stdout}"
    );
    eprintln!("prepared in {prepared:?}, the sidecar ran {ran:?}\n{stdout}");
    if std::env::var_os("SIDECAR_TEST_LOG").is_some() {
        eprintln!("{stderr}");
    }

    // Every state and PR reached the own relay, every object its repository.
    let stored = own.event_ids().await;
    let layout = NpubLayout::new(&root);
    let mut expected_repositories = Vec::new();
    for repository in &repositories {
        let name = &repository.identifier;
        assert!(
            stored.contains(&repository.state.id),
            "state of {name}: {stdout}"
        );
        assert!(stored.contains(&repository.pr.id), "PR of {name}: {stdout}");
        let local = layout
            .path_of(&repository.owner.public_key(), name)
            .unwrap();
        assert_eq!(git(&local, &["rev-parse", "--is-bare-repository"]), "true");
        assert_eq!(
            git(&local, &["config", "--get-all", "uploadpack.hideRefs"]),
            "refs/purgatory",
            "{name} hides refs/purgatory"
        );
        assert!(has_object(&local, &repository.main), "{name}: main");
        assert!(has_object(&local, &repository.proposal), "{name}: proposal");
        let nostr_ref = git(
            &local,
            &["rev-parse", &format!("refs/nostr/{}", repository.pr.id)],
        );
        assert_eq!(nostr_ref, repository.proposal, "{name}: refs/nostr");
        let purgatory_refs = git(&local, &["for-each-ref", "refs/purgatory/"]);
        assert!(purgatory_refs.is_empty(), "{name}: {purgatory_refs}");
        expected_repositories.push(local);
    }
    expected_repositories.sort();
    assert_eq!(
        created_repositories(&root),
        expected_repositories,
        "exactly our repositories were created, nothing else"
    );
    // Nothing left held: the journal after exit has no live event.
    let replayed = journal::replay(&root.join("purgatory.journal")).unwrap();
    assert!(replayed.rejected.is_empty(), "{:?}", replayed.rejected);
    assert!(
        replayed.live.is_empty(),
        "{} events still held after exit",
        replayed.live.len()
    );
    assert!(
        stdout.contains(&format!("{} events released", 2 * repositories_wanted)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{repositories_wanted} repositories created")),
        "{stdout}"
    );
    // Our own service was never asked for git data, though every announcement lists
    // it first.
    assert_eq!(front.git_requests(), Vec::<String>::new());
    let skipped = number_before(&stdout, " clone URLs on our own service skipped");
    assert!(
        skipped >= repositories_wanted as u64,
        "skipped and counted: {stdout}"
    );
    // GRASP-01: announcements that do not list our service are not stored on the own
    // relay (needs the engine's "store only what is ours", issue 18 item 4).
    let foreign_stored: Vec<&Event> = foreign
        .iter()
        .filter(|event| stored.contains(&event.id))
        .collect();
    assert!(
        foreign_stored.is_empty(),
        "{} of {foreign_count} announcements not listing us are on the own relay",
        foreign_stored.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_server_that_never_answers_fails_the_run_after_the_timeout_naming_its_repository() {
    let dir = TempDir::new("sidecar-git-silent");
    let served = dir.join("served");
    let (own, front, remote) = relays().await;
    let server = GitHttpServer::start(&served, LOOPBACK).await;
    let silent_server = HangingServer::start().await;
    let owner = Keys::generate();
    let at = Timestamp::now().as_secs() - 600;
    let (own_url, remote_url) = (front.ws_url(), remote.url().to_string());
    let good = SourceRepo::create(served.join("good.git"));
    let good_main = good.commit("main");
    let unserved = SourceRepo::create(dir.join("unserved/silent.git"));
    let silent_main = unserved.commit("never served");
    let mut events = Vec::new();
    for (identifier, clone, main) in [
        ("good", server.url("good.git"), &good_main),
        ("silent", silent_server.http_url("silent.git"), &silent_main),
    ] {
        let ours = own_clone_url(&front, &owner, identifier);
        let announced = Announcement::new(identifier)
            .relays(&[&own_url, &remote_url])
            .clone_urls(&[&ours, &clone])
            .at(at)
            .sign(&owner);
        own.add_event(&announced).await;
        events.push(announced);
        events.push(sign(
            &owner,
            30618,
            "",
            vec![tag(&["d", identifier]), tag(&["refs/heads/main", main])],
            at + 1,
        ));
    }
    remote.add_events(&events).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();

    let port = free_port();
    let child = spawn_sidecar(
        &front,
        &root,
        12,
        &[("NGIT_PURGATORY_FETCH_TIMEOUT_SECS", "2")],
        &["--metrics-addr".to_owned(), format!("127.0.0.1:{port}")],
    );
    let silent = ids::coordinate(&owner.public_key(), "silent");
    // While it waits, /status names the repository and why.
    let mut reported = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(body) = get(port, "/status").await else {
            continue;
        };
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        let waiting = &json["purgatory"]["still_waiting"];
        let names_it = waiting.as_array().is_some_and(|list| {
            list.iter().any(|entry| {
                entry["repo"] == silent.as_str()
                    && entry["state"]
                        .as_str()
                        .is_some_and(|state| state.starts_with("fetch failed: "))
            })
        });
        if names_it {
            reported = Some(json["purgatory"].clone());
            break;
        }
    }
    let reported = reported.expect("/status names the silent repository as failing");
    assert_eq!(reported["all_accounted"], false, "{reported}");
    let output = exited(child, Duration::from_secs(60)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    let line = last_line(&output);
    eprintln!("last line: {line}");
    assert!(
        line.starts_with("error: not complete after 12s: 1 event held: "),
        "{line}"
    );
    assert!(line.contains(&format!("{silent} (")), "{line}");
    assert!(!line.contains(":good"), "{line}");
    assert!(silent_server.accepted() > 0, "the silent server was asked");
    let layout = NpubLayout::new(&root);
    let good_local = layout.path_of(&owner.public_key(), "good").unwrap();
    assert!(
        has_object(&good_local, &good_main),
        "the other repository synced"
    );
    assert_eq!(front.git_requests(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_whose_only_clone_url_is_ours_is_reported_not_fetchable() {
    let dir = TempDir::new("sidecar-git-only-ours");
    let (own, front, remote) = relays().await;
    let owner = Keys::generate();
    let at = Timestamp::now().as_secs() - 600;
    let (own_url, remote_url) = (front.ws_url(), remote.url().to_string());
    let unserved = SourceRepo::create(dir.join("unserved/only.git"));
    let main = unserved.commit("main");
    let ours = own_clone_url(&front, &owner, "only");
    let announced = Announcement::new("only")
        .relays(&[&own_url, &remote_url])
        .clone_urls(&[&ours])
        .at(at)
        .sign(&owner);
    let state = sign(
        &owner,
        30618,
        "",
        vec![tag(&["d", "only"]), tag(&["refs/heads/main", &main])],
        at + 1,
    );
    own.add_event(&announced).await;
    remote.add_events(&[announced, state.clone()]).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();

    let output = run_sidecar(&front, &root, 60, &[], Duration::from_secs(90)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stdout}\n{stderr}");
    let only = ids::coordinate(&owner.public_key(), "only");
    let line = last_line(&output);
    eprintln!("last line: {line}");
    assert_eq!(
        line,
        format!(
            "done, but 1 event held as not fetchable: {only} (not fetchable: only clone URLs on our own service)"
        )
    );
    assert!(
        !own.event_ids().await.contains(&state.id),
        "held, not published"
    );
    assert_eq!(front.git_requests(), Vec::<String>::new());
}
