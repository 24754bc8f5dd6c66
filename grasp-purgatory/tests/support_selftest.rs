//! Self-tests of the git-server test harness `grasp_sync_test_harness::git`.

use grasp_sync_test_harness::git as support;

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Generous bound for one fetch from a loopback server.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// An object id no test repository contains.
const MISSING_OID: &str = "0123456789abcdef0123456789abcdef01234567";
/// The repository name under the served directory.
const REPO: &str = "repo.git";

/// `<root>/served/repo.git` with two commits on main and one unreferenced commit.
struct Fixture {
    root: TempDir,
    _source: SourceRepo,
    tip: String,
    unreferenced: String,
}

impl Fixture {
    fn new() -> Fixture {
        let root = TempDir::new("support-selftest");
        let source = SourceRepo::create(root.join("served").join(REPO));
        source.commit("first");
        let tip = source.commit("second");
        let unreferenced = source.commit_unreferenced("pull request tip");
        Fixture {
            root,
            _source: source,
            tip,
            unreferenced,
        }
    }

    /// The directory the servers serve (base path / project root).
    fn served(&self) -> PathBuf {
        self.root.join("served")
    }

    /// A new empty bare repository to fetch into.
    fn empty_repo(&self, name: &str) -> PathBuf {
        let path = self.root.join(name);
        init_bare_repo(&path);
        path
    }
}

/// Fetches `oid` from `url` into `dest` and checks the object arrived.
async fn assert_fetches(url: &str, dest: &Path, oid: &str) {
    let outcome = fetch_by_sha(dest, url, oid, FETCH_TIMEOUT).await;
    assert_eq!(outcome, FetchOutcome::Fetched, "fetching {oid} from {url}");
    assert!(
        has_object(dest, oid),
        "{oid} missing after fetch from {url}"
    );
}

/// Fetches `oid` from `url` into `dest` and checks git reported an error.
async fn assert_fetch_fails(url: &str, dest: &Path, oid: &str) {
    let outcome = fetch_by_sha(dest, url, oid, FETCH_TIMEOUT).await;
    assert!(
        matches!(outcome, FetchOutcome::Failed { .. }),
        "expected failure fetching {oid} from {url}, got {outcome:?}"
    );
}

/// Prints how long a test took (visible with `--nocapture`).
fn report(name: &str, started: Instant) {
    eprintln!("{name}: {:?}", started.elapsed());
}

#[test]
fn temp_dir_is_unique_and_removed_on_drop() {
    let first = TempDir::new("selftest");
    let second = TempDir::new("selftest");
    assert_ne!(first.path(), second.path());
    let path = first.path().to_owned();
    std::fs::write(first.join("file"), b"x").unwrap();
    drop(first);
    assert!(!path.exists());
}

#[test]
fn source_repo_is_deterministic_and_unreferenced_commits_have_no_ref() {
    let root = TempDir::new("selftest");
    let a = SourceRepo::create(root.join("a.git"));
    let b = SourceRepo::create(root.join("b.git"));
    let a_tip = a.commit("one");
    assert_eq!(b.commit("one"), a_tip);
    assert_eq!(a.tip().as_deref(), Some(a_tip.as_str()));
    assert_eq!(a_tip.len(), 40);

    let loose = a.commit_unreferenced("pr");
    assert!(a.refs_containing(&loose).is_empty());
    assert_eq!(a.tip().as_deref(), Some(a_tip.as_str()));
    assert_eq!(git(a.path(), &["rev-parse", &format!("{loose}^")]), a_tip);

    a.set_ref("refs/heads/pr", &loose);
    assert_eq!(a.refs_containing(&loose), vec!["refs/heads/pr".to_owned()]);
}

#[test]
fn http_stats_window_counts_fetch_starts() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let stats = HttpStats {
        fetch_starts: vec![at(900), at(0), at(1000), at(1001), at(2500)],
        ..HttpStats::default()
    };
    assert_eq!(
        stats.max_fetches_in_any_window(Duration::from_millis(1000)),
        3
    );
    assert_eq!(
        stats.max_fetches_in_any_window(Duration::from_millis(100)),
        2
    );
    assert_eq!(stats.max_fetches_in_any_window(Duration::ZERO), 1);
    assert_eq!(
        HttpStats::default().max_fetches_in_any_window(Duration::from_secs(1)),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_daemon_serves_referenced_and_unreferenced_commits_by_sha() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let daemon = GitDaemon::start(&fixture.served());
    let url = daemon.url(REPO);
    assert!(url.starts_with("git://127.0.0.1:"), "{url}");

    assert_fetches(&url, &fixture.empty_repo("tip.git"), &fixture.tip).await;
    assert_fetches(&url, &fixture.empty_repo("pr.git"), &fixture.unreferenced).await;
    // The name without `.git` resolves too.
    assert_fetches(
        &daemon.url("repo"),
        &fixture.empty_repo("short.git"),
        &fixture.tip,
    )
    .await;
    report("git_daemon_serves_by_sha", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_daemon_fetch_of_missing_oid_or_repo_fails() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let daemon = GitDaemon::start(&fixture.served());
    let dest = fixture.empty_repo("dest.git");
    assert_fetch_fails(&daemon.url(REPO), &dest, MISSING_OID).await;
    assert_fetch_fails(&daemon.url("nope.git"), &dest, &fixture.tip).await;
    report("git_daemon_missing", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_daemon_drop_kills_its_processes_and_frees_the_port() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let daemon = GitDaemon::start(&fixture.served());
    let (addr, group) = (daemon.addr(), daemon.process_group().unwrap());
    assert_fetches(
        &daemon.url(REPO),
        &fixture.empty_repo("dest.git"),
        &fixture.tip,
    )
    .await;
    let real_daemon = real_daemon_pid(group);
    assert_ne!(
        real_daemon, group,
        "git daemon is a wrapper around git-daemon"
    );

    drop(daemon);

    assert!(TcpStream::connect(addr).is_err(), "{addr} still accepts");
    assert_eq!(live_pids_in_group(group), Vec::<u32>::new());
    assert!(!live_pids_named("git-daemon").contains(&real_daemon));
    report("git_daemon_drop", started);
}

/// The pid of the real `git-daemon` in process group `group` (not the `git` wrapper).
fn real_daemon_pid(group: u32) -> u32 {
    let in_group = live_pids_in_group(group);
    let daemons: Vec<u32> = live_pids_named("git-daemon")
        .into_iter()
        .filter(|pid| in_group.contains(pid))
        .collect();
    assert_eq!(
        daemons.len(),
        1,
        "one git-daemon in group {group}: {in_group:?}"
    );
    daemons[0]
}

/// Pids of non-zombie processes in process group `group`.
fn live_pids_in_group(group: u32) -> Vec<u32> {
    pgrep(&["-g", &group.to_string()])
}

/// Pids of non-zombie processes named exactly `name`.
fn live_pids_named(name: &str) -> Vec<u32> {
    pgrep(&["-x", name])
}

/// Runs `pgrep` (zombies excluded: their sockets are closed already).
fn pgrep(args: &[&str]) -> Vec<u32> {
    let output = Command::new("pgrep")
        .args(args)
        .output()
        .expect("running pgrep");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .filter(|pid| !is_zombie(*pid))
        .collect()
}

/// Whether `/proc/<pid>/stat` says the process is a zombie (or it is gone).
fn is_zombie(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    matches!(state, None | Some('Z') | Some('X'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_serves_by_sha_over_protocol_v2() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let server = GitHttpServer::start(fixture.served(), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let url = server.url(REPO);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    assert_fetches(&url, &fixture.empty_repo("tip.git"), &fixture.tip).await;
    let after_first = server.stats();
    assert_eq!(after_first.fetches(), 1);
    assert!(after_first.requests >= 2, "{after_first:#?}");

    // Over v0 an unadvertised id is refused: this fetch also proves v2 is used.
    assert_fetches(&url, &fixture.empty_repo("pr.git"), &fixture.unreferenced).await;
    let stats = server.stats();
    assert_eq!(stats.fetches(), 2);
    assert!(stats.upload_pack_posts >= 2, "{stats:#?}");
    assert_eq!(stats.v2_requests, stats.requests, "{stats:#?}");
    assert!(
        stats.records.iter().all(|r| r.status == Some(200)),
        "{stats:#?}"
    );
    report("http_server_serves_by_sha", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_works_on_ipv6_loopback() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let server = GitHttpServer::start(fixture.served(), IpAddr::V6(Ipv6Addr::LOCALHOST)).await;
    let url = server.url(REPO);
    assert!(url.starts_with("http://[::1]:"), "{url}");
    assert_fetches(&url, &fixture.empty_repo("dest.git"), &fixture.unreferenced).await;
    assert_eq!(server.stats().fetches(), 1);
    report("http_server_ipv6", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_fetch_of_missing_oid_or_repo_fails() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let server = GitHttpServer::start(fixture.served(), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let dest = fixture.empty_repo("dest.git");
    assert_fetch_fails(&server.url(REPO), &dest, MISSING_OID).await;
    assert_fetch_fails(&server.url("nope.git"), &dest, &fixture.tip).await;
    let statuses: Vec<Option<u16>> = server.stats().records.iter().map(|r| r.status).collect();
    assert!(statuses.contains(&Some(404)), "{statuses:?}");
    report("http_server_missing", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_delay_makes_concurrent_fetches_observable() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let server = GitHttpServer::builder(fixture.served())
        .response_delay(Duration::from_millis(300))
        .start()
        .await;
    let url = server.url(REPO);
    let dests: Vec<PathBuf> = (0..3)
        .map(|i| fixture.empty_repo(&format!("d{i}.git")))
        .collect();
    let (a, b, c) = tokio::join!(
        fetch_by_sha(&dests[0], &url, &fixture.tip, FETCH_TIMEOUT),
        fetch_by_sha(&dests[1], &url, &fixture.tip, FETCH_TIMEOUT),
        fetch_by_sha(&dests[2], &url, &fixture.unreferenced, FETCH_TIMEOUT),
    );
    assert_eq!(
        [a, b, c],
        [
            FetchOutcome::Fetched,
            FetchOutcome::Fetched,
            FetchOutcome::Fetched
        ]
    );

    let stats = server.stats();
    assert_eq!(stats.fetches(), 3);
    assert!(stats.max_concurrent >= 2, "{stats:#?}");
    assert!(stats.max_concurrent_connections >= 2, "{stats:#?}");
    assert_eq!(server.max_fetches_in_any_window(Duration::from_secs(5)), 3);
    report("http_server_concurrency", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_records_sequential_fetches_one_at_a_time() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let server = GitHttpServer::start(fixture.served(), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let url = server.url(REPO);
    assert_fetches(&url, &fixture.empty_repo("a.git"), &fixture.tip).await;
    assert_fetches(&url, &fixture.empty_repo("b.git"), &fixture.tip).await;
    let stats = server.stats();
    assert_eq!(stats.max_concurrent, 1, "{stats:#?}");
    assert!(stats.records.iter().all(|r| r.finished.is_some()));
    report("http_server_sequential", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_accepts_chunked_and_gzip_request_bodies() {
    let started = Instant::now();
    let fixture = Fixture::new();
    let server = GitHttpServer::start(fixture.served(), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let addr = server.addr();
    for (chunked, gzip) in [(false, false), (true, false), (false, true), (true, true)] {
        let response = tokio::task::spawn_blocking(move || post_ls_refs(addr, chunked, gzip))
            .await
            .unwrap();
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "{chunked} {gzip}: {response}"
        );
        let advertised = format!("{} refs/heads/main", fixture.tip);
        assert!(
            response.contains(&advertised),
            "{chunked} {gzip}: {response}"
        );
    }
    report("http_server_chunked_gzip", started);
}

/// Sends a raw protocol-v2 `ls-refs` POST to `repo.git`, its body optionally
/// gzip-compressed and/or chunked; returns the whole raw response.
fn post_ls_refs(addr: SocketAddr, chunked: bool, gzip: bool) -> String {
    let pkt_lines = b"0014command=ls-refs\n0001000csymrefs\n0000".to_vec();
    let body = if gzip {
        gzip_bytes(&pkt_lines)
    } else {
        pkt_lines
    };
    let mut head = format!(
        "POST /{REPO}/git-upload-pack HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Git-Protocol: version=2\r\nContent-Type: application/x-git-upload-pack-request\r\n"
    );
    if gzip {
        head.push_str("Content-Encoding: gzip\r\n");
    }
    let framed = if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
        chunk_encode(&body)
    } else {
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        body
    };
    let mut stream = TcpStream::connect(addr).expect("connecting");
    stream
        .set_read_timeout(Some(FETCH_TIMEOUT))
        .expect("read timeout");
    stream.write_all(head.as_bytes()).expect("writing head");
    stream.write_all(&framed).expect("writing body");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("reading response");
    String::from_utf8_lossy(&response).into_owned()
}

/// `body` as two HTTP/1.1 chunks plus the terminating chunk.
fn chunk_encode(body: &[u8]) -> Vec<u8> {
    let (first, second) = body.split_at(body.len() / 2);
    let mut framed = Vec::new();
    for chunk in [first, second] {
        framed.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
    }
    framed.extend_from_slice(b"0\r\n\r\n");
    framed
}

/// `data` compressed by the `gzip` CLI.
fn gzip_bytes(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawning gzip");
    child
        .stdin
        .take()
        .expect("gzip stdin")
        .write_all(data)
        .expect("writing to gzip");
    let output = child.wait_with_output().expect("waiting for gzip");
    assert!(output.status.success());
    output.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repos_owned_by_another_user_are_served_when_running_as_root() {
    if !running_as_root() {
        eprintln!("not root: cannot chown, skipping the dubious-ownership check");
        return;
    }
    let started = Instant::now();
    let fixture = Fixture::new();
    let status = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(fixture.served())
        .status()
        .unwrap();
    assert!(status.success());
    let daemon = GitDaemon::start(&fixture.served());
    let server = GitHttpServer::start(fixture.served(), IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    assert_fetches(
        &daemon.url(REPO),
        &fixture.empty_repo("a.git"),
        &fixture.tip,
    )
    .await;
    assert_fetches(
        &server.url(REPO),
        &fixture.empty_repo("b.git"),
        &fixture.tip,
    )
    .await;
    report("foreign_owner", started);
}

/// Whether this process runs as uid 0 (`id -u`).
fn running_as_root() -> bool {
    let output = Command::new("id")
        .arg("-u")
        .output()
        .expect("running id -u");
    String::from_utf8_lossy(&output.stdout).trim() == "0"
}

/// A fetch from `url` (served by `server`) is cut by a 1 s timeout after exactly one
/// accepted connection.
async fn assert_fetch_hangs(server: &HangingServer, url: &str) {
    let root = TempDir::new("selftest");
    let dest = root.join("dest.git");
    init_bare_repo(&dest);
    let outcome = fetch_by_sha(&dest, url, MISSING_OID, Duration::from_secs(1)).await;
    assert_eq!(outcome, FetchOutcome::TimedOut);
    assert!(server.wait_for_accepted(1, Duration::from_secs(1)).await);
    assert_eq!(server.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_server_makes_git_fetch_time_out() {
    let started = Instant::now();
    let server = HangingServer::start().await;
    assert_fetch_hangs(&server, &server.git_url(REPO)).await;
    report("hanging_git", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_server_makes_http_fetch_time_out() {
    let started = Instant::now();
    let server = HangingServer::start().await;
    assert_fetch_hangs(&server, &server.http_url(REPO)).await;
    report("hanging_http", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_port_urls_are_refused_quickly() {
    let started = Instant::now();
    let root = TempDir::new("selftest");
    let dest = root.join("dest.git");
    init_bare_repo(&dest);
    for scheme in ["git", "http"] {
        let url = closed_port_url(scheme, REPO);
        assert!(url.starts_with(&format!("{scheme}://127.0.0.1:")), "{url}");
        assert_fetch_fails(&url, &dest, MISSING_OID).await;
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    report("closed_port", started);
}
