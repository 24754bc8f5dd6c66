//! A time-compressed soak of the `grasp-sync` sidecar, the way an operator runs it
//! (a service, not `--once`): every simulated hour brings live announcements, states
//! and PRs; a relay or the git server goes away for a while and comes back; a served
//! repository is damaged by hand; and strangers keep up the exploits of issue 45
//! (announcements of our identifiers listing our maintainers, newer states of their
//! own naming our commits, junk PRs, clone URLs that hang). At the end every honest
//! repository serves exactly its newest authorized state (read the way a git client
//! reads it, through `git http-backend` over the git root) with every object its refs
//! name, and the sidecar's peak memory and open files stay flat once every kind of
//! traffic has run: after the first [`WARM_UP_HOURS`] (hour 1 alone starts from an
//! empty server with no outage and nothing to damage; hours 3 and 4 bring the first
//! relay and git server outages), the peak of the later half of the hours is within
//! [`FLAT_FACTOR`] of the peak of the earlier half. Open files in a 100 ms sample are
//! mostly the pipes of git processes in flight, bounded by the fetch permits and the
//! reconcile pool but rising towards that bound as more repositories have work, so
//! the warm-up itself is no baseline for them: a leak shows as growth within the
//! steady hours. Both ratios, and those against the warm-up, are printed.
//!
//! The sidecar runs on the wall clock, so time is compressed through its settings:
//! one simulated hour is `SOAK_SECS_PER_HOUR` real seconds (default 5) plus the time
//! the hour's setup takes; relay backoff and the reconcile interval are set in
//! proportion. The purgatory's fetch backoff (20 s to 120 s) and its retry of a
//! repository still behind (300 s, doubling to the reconcile interval) are not
//! configurable, so expiry (90 s), the git
//! timeout (5 s) and the time allowed to converge at the end (`SOAK_SETTLE_SECS`,
//! 360 s) are real seconds (see [`spawn_sidecar`]). `SOAK_HOURS` simulated hours
//! (default 24) run:
//!
//! ```text
//! SOAK_HOURS=24 SOAK_SECS_PER_HOUR=5 cargo nextest run -p grasp-sync --test soak \
//!     --run-ignored only --no-capture
//! ```
//!
//! `SOAK_STRANGERS_PER_HOUR` (4) and `SOAK_JUNK_PRS_PER_HOUR` (20) set the exploit
//! traffic (0 and 0: churn and damage alone); `SOAK_KEEP_LOG=<file>` keeps the
//! sidecar's log, `SIDECAR_TEST_LOG` sets its `RUST_LOG` (default `warn`).
//!
//! It prints one line per simulated hour (repositories, events, peak RSS and open
//! file descriptors of the sidecar process, from `/proc/<pid>/status` and
//! `/proc/<pid>/fd`, sampled every 100 ms) and the convergence time at the end. Linux
//! only (`/proc`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::git as git_support;
#[path = "common/served.rs"]
mod served;
use grasp_sync_test_harness::relays as support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use git_support::{has_object, GitHttpServer, HangingServer, SourceRepo, TempDir};
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use nostr::prelude::*;
use served::{served_at, Served};
use support::{TestRelay, TestRelayConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Peak RSS and open file descriptors of every later simulated hour stay within this
/// factor of the first hour's peak.
const FLAT_FACTOR: f64 = 1.5;
/// The hours by which every kind of traffic has run once: the baseline of
/// [`FLAT_FACTOR`].
const WARM_UP_HOURS: usize = 4;
/// How long the honest repositories may take to converge after the last hour (real
/// time: the purgatory's fetch backoff, 20 s to 120 s, and its retry of a repository
/// still behind, 300 s, are not configurable and so not compressed).
const SETTLE_SECS: f64 = 360.0;
/// Where the strangers' hanging clone URLs point: another address block than the
/// honest git server's 127.0.0.1, as another host would be.
const STRANGERS_HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 1, 0, 2));

/// The soak's shape, from the environment.
struct Plan {
    hours: u32,
    hour: Duration,
    /// Strangers' announcements (each with a newer state of their own) per hour.
    strangers: usize,
    /// Junk PRs (commits nobody has, a clone URL that hangs) per hour.
    junk_prs: usize,
    /// How long the honest repositories may take to converge after the last hour.
    settle: Duration,
}

impl Plan {
    fn from_env() -> Plan {
        let number = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.parse::<f64>().ok())
                .unwrap_or(default)
        };
        Plan {
            hours: number("SOAK_HOURS", 24.0) as u32,
            hour: Duration::from_secs_f64(number("SOAK_SECS_PER_HOUR", 5.0)),
            strangers: number("SOAK_STRANGERS_PER_HOUR", 4.0) as usize,
            junk_prs: number("SOAK_JUNK_PRS_PER_HOUR", 20.0) as usize,
            settle: Duration::from_secs_f64(number("SOAK_SETTLE_SECS", SETTLE_SECS)),
        }
    }

    /// `simulated` seconds of the field, in real seconds (at least one: the sidecar's
    /// settings are whole seconds).
    fn secs(&self, simulated: u64) -> u64 {
        let real = self.hour.as_secs_f64() * simulated as f64 / 3600.0;
        (real.round() as u64).max(1)
    }
}

/// A TCP port that forwards to a server and can go away (connections refused) and come
/// back on the same port: the git server "coming and going".
struct Switchable {
    ip: IpAddr,
    port: u16,
    upstream: SocketAddr,
    connections: Option<JoinSet<()>>,
}

impl Switchable {
    /// Forwards a free port of `ip` to `upstream`.
    async fn start(ip: IpAddr, upstream: SocketAddr) -> Switchable {
        let port = TcpListener::bind((ip, 0))
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut switchable = Switchable {
            ip,
            port,
            upstream,
            connections: None,
        };
        switchable.up().await;
        switchable
    }

    /// Listens again (no-op when up).
    async fn up(&mut self) {
        if self.connections.is_some() {
            return;
        }
        let listener = TcpListener::bind((self.ip, self.port)).await.unwrap();
        let upstream = self.upstream;
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut forwards = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                forwards.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        self.connections = Some(tasks);
    }

    /// Stops listening and cuts every connection.
    fn down(&mut self) {
        self.connections = None;
    }

    fn url(&self, name: &str) -> String {
        format!("http://{}:{}/{name}", self.ip, self.port)
    }
}

/// An honest repository: its owner, upstream, newest state and PRs.
struct Honest {
    owner: Keys,
    identifier: String,
    upstream: SourceRepo,
    state: Event,
    prs: Vec<(EventId, String)>,
}

impl Honest {
    /// What it must serve: the newest state, and each PR at `refs/nostr/<id>`.
    fn expected(&self) -> Served {
        let mut served = Served::of_state(&self.state);
        for (id, tip) in &self.prs {
            served
                .refs
                .insert(format!("refs/nostr/{}", id.to_hex()), tip.clone());
        }
        served
    }

    /// `<npub>/<identifier>.git`: where it is served under the git root.
    fn served_path(&self) -> String {
        let npub = self.owner.public_key().to_bech32().unwrap();
        format!("{npub}/{}.git", self.identifier)
    }

    fn coordinate(&self) -> String {
        ids::coordinate(&self.owner.public_key(), &self.identifier)
    }
}

/// The state of `identifier` serving `main` (and `HEAD` on it).
fn state_of(owner: &Keys, identifier: &str, main: &str, at: u64) -> Event {
    sign(
        owner,
        30618,
        "",
        vec![
            tag(&["d", identifier]),
            tag(&["HEAD", "ref: refs/heads/main"]),
            tag(&["refs/heads/main", main]),
        ],
        at,
    )
}

/// `created_at` for a new event: now, and later than `after`.
fn at_after(after: u64) -> u64 {
    Timestamp::now().as_secs().max(after + 1)
}

/// The sidecar as a service on `own`, bootstrapped from `remote`, its repositories
/// under `root`, its log in `log`; timers compressed to `plan`.
fn spawn_sidecar(plan: &Plan, own: &str, remote: &str, root: &Path, log: &Path) -> Child {
    let reconcile = plan.secs(600).to_string();
    Command::new(env!("CARGO_BIN_EXE_grasp-sync"))
        .args([
            "--own-relay",
            own,
            "--bootstrap-relay",
            remote,
            "--git-root",
            root.to_str().unwrap(),
            "--allow-local-addresses",
            "--allow-insecure-clone-urls",
            "--reconcile-interval",
            &reconcile,
        ])
        // The field's timers, compressed where they can be: relays are retried after
        // 1 s up to 10 simulated minutes, repositories reconciled every 10 simulated
        // minutes. A held event waits 90 s (in the field 30 min: many times the
        // purgatory's fetch backoff, 20 s to 120 s, which is not configurable), a git
        // command runs 5 s (a debug build's fetch on two loaded cores fits).
        .env("NGIT_PURGATORY_EXPIRY_SECS", "90")
        .env("NGIT_PURGATORY_FETCH_TIMEOUT_SECS", "5")
        .env("NGIT_SYNC_BASE_BACKOFF_SECS", "1")
        .env("NGIT_SYNC_MAX_BACKOFF_SECS", plan.secs(600).to_string())
        .env("NGIT_SYNC_DEFAULT_DELAY_SECS", "1")
        .env("NGIT_SYNC_IMMEDIATE_DELAY_MS", "100")
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        // Every server here is 127.0.0.1: one domain stands in for many hosts.
        .env("NGIT_SYNC_DOMAIN_RATE_LIMIT", "6000")
        .env("NGIT_SYNC_DOMAIN_CONCURRENT", "8")
        .env(
            "RUST_LOG",
            std::env::var("SIDECAR_TEST_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync")
}

/// The sidecar's resident memory (KiB) and open file descriptors, from `/proc`.
fn rss_and_fds(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count())
        .unwrap_or(0);
    (rss, fds)
}

/// The peaks of one simulated hour.
#[derive(Debug, Default, Clone, Copy)]
struct Peaks {
    rss_kib: u64,
    fds: usize,
}

impl Peaks {
    fn sample(&mut self, pid: u32) {
        let (rss, fds) = rss_and_fds(pid);
        self.rss_kib = self.rss_kib.max(rss);
        self.fds = self.fds.max(fds);
    }
}

/// Samples the sidecar every 100 ms until `until`.
async fn sampling_until(pid: u32, peaks: &mut Peaks, until: Instant) {
    loop {
        peaks.sample(pid);
        let now = Instant::now();
        if now >= until {
            return;
        }
        tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
    }
}

/// Damages `repository` by hand under the git root (how, by `hour`): its main moved
/// back, main deleted, a PR ref deleted, its objects removed, or the whole directory
/// removed. Returns what was done.
fn damage(root: &Path, repository: &Honest, hour: u32) -> &'static str {
    let path = root.join(repository.served_path());
    if !path.exists() {
        return "nothing (not created yet)";
    }
    let quiet = |args: &[&str]| {
        let _ = git_support::git_command(&path)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    match hour % 5 {
        0 => {
            quiet(&["update-ref", "refs/heads/main", "refs/heads/main~1"]);
            "main moved back"
        }
        1 => {
            quiet(&["update-ref", "-d", "refs/heads/main"]);
            "main deleted"
        }
        2 => {
            if let Some((id, _)) = repository.prs.first() {
                quiet(&["update-ref", "-d", &format!("refs/nostr/{}", id.to_hex())]);
            }
            "a PR ref deleted"
        }
        3 => {
            let objects = path.join("objects");
            for entry in std::fs::read_dir(&objects).into_iter().flatten().flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.len() == 2 || name == "pack" {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
            let _ = std::fs::create_dir_all(objects.join("pack"));
            "objects removed"
        }
        _ => {
            let _ = std::fs::remove_dir_all(&path);
            "repository removed"
        }
    }
}

/// The honest repositories that do not serve what they must (with what they serve).
async fn wrong_ones(
    repositories: &[Honest],
    root: &Path,
    served_by: &GitHttpServer,
) -> Vec<String> {
    let cwd = root.parent().unwrap();
    let mut wrong = Vec::new();
    for repository in repositories {
        let path = repository.served_path();
        let expected = repository.expected();
        let served = served_at(&served_by.url(&path), cwd).await;
        if served.as_ref() != Some(&expected) {
            wrong.push(format!(
                "{}: serves {served:?}, must serve {expected:?}",
                repository.identifier
            ));
            continue;
        }
        let local = root.join(&path);
        if let Some(oid) = expected.refs.values().find(|oid| !has_object(&local, oid)) {
            wrong.push(format!("{}: object {oid} missing", repository.identifier));
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak: minutes of real time; run with --run-ignored only (see the module docs)"]
async fn a_day_of_traffic_churn_damage_and_exploits_leaves_every_honest_repository_served() {
    let plan = Plan::from_env();
    let dir = TempDir::new("sidecar-soak");
    let mut own = TestRelay::start(TestRelayConfig::default()).await;
    let mut remote = TestRelay::start(TestRelayConfig::default()).await;
    let upstream_dir = dir.join("upstream");
    std::fs::create_dir_all(&upstream_dir).unwrap();
    let upstream_server = GitHttpServer::start(&upstream_dir, LOOPBACK).await;
    let mut upstream = Switchable::start(LOOPBACK, upstream_server.addr()).await;
    let hanging = HangingServer::start().await;
    let hostile = Switchable::start(STRANGERS_HOST, hanging.addr()).await;
    let root = dir.join("repos");
    std::fs::create_dir(&root).unwrap();
    let served_by = GitHttpServer::start(&root, LOOPBACK).await;
    let log = dir.join("sidecar.log");
    let (own_url, remote_url) = (own.url().to_string(), remote.url().to_string());
    let own_service = format!("http://127.0.0.1:{}", own.port());
    let mut child = spawn_sidecar(&plan, &own_url, &remote_url, &root, &log);
    let pid = child.id().expect("the sidecar runs");
    let owners: Vec<Keys> = (0..3).map(|_| Keys::generate()).collect();
    let contributor = Keys::generate();
    let mut honest: Vec<Honest> = Vec::new();
    let mut hours: Vec<Peaks> = Vec::new();
    let mut events_published = 0usize;
    let started = Instant::now();

    println!("hour | repos | events | damage               | down   | peak RSS KiB | peak fds");
    for hour in 1..=plan.hours {
        let hour_started = Instant::now();
        let half = hour_started + plan.hour / 2;
        let mut peaks = Peaks::default();
        // Relays and git servers coming and going: down for the hour's first half.
        let down = match hour % 3 {
            0 => {
                remote.stop().await;
                "relay"
            }
            1 if hour > 1 => {
                upstream.down();
                "git"
            }
            _ => "-",
        };

        // A new honest repository: announced live on our relay, its state and a PR on
        // the remote one.
        let owner = owners[hour as usize % owners.len()].clone();
        let identifier = format!("honest-{hour}");
        let source = SourceRepo::create(upstream_dir.join(format!("{identifier}.git")));
        source.commit(&format!("first of {identifier}"));
        let main = source.commit(&format!("main of {identifier}"));
        let proposal = source.commit_unreferenced(&format!("proposal for {identifier}"));
        let npub = owner.public_key().to_bech32().unwrap();
        let announcement = Announcement::new(&identifier)
            .relays([&own_url, &remote_url])
            .clone_urls([
                format!("{own_service}/{npub}/{identifier}.git"),
                upstream.url(&format!("{identifier}.git")),
            ])
            .at(at_after(0))
            .sign(&owner);
        let state = state_of(
            &owner,
            &identifier,
            &main,
            at_after(announcement.created_at.as_secs()),
        );
        let coordinate = ids::coordinate(&owner.public_key(), &identifier);
        let pr = sign(
            &contributor,
            1618,
            "",
            vec![
                tag(&["a", &coordinate]),
                tag(&["p", &owner.public_key().to_hex()]),
                tag(&["c", &proposal]),
                tag(&["clone", &upstream.url(&format!("{identifier}.git"))]),
            ],
            at_after(0),
        );
        own.publish(&announcement).await;
        remote.publish(&announcement).await;
        remote.publish(&state).await;
        remote.publish(&pr).await;
        events_published += 4;
        honest.push(Honest {
            owner,
            identifier,
            upstream: source,
            state,
            prs: vec![(pr.id, proposal)],
        });

        // An older honest repository moves on: a new commit, a newer state.
        let which = (hour as usize * 7) % honest.len();
        let older = &mut honest[which];
        let main = older
            .upstream
            .commit(&format!("hour {hour} of {}", older.identifier));
        older.state = state_of(
            &older.owner,
            &older.identifier,
            &main,
            at_after(older.state.created_at.as_secs()),
        );
        remote.publish(&older.state).await;
        events_published += 1;

        // Strangers: our identifiers, listing our maintainers, clone URLs that hang,
        // newer states of their own naming our commits; junk PRs to our repositories.
        for n in 0..plan.strangers {
            let target = &honest[(hour as usize + n) % honest.len()];
            let stranger = Keys::generate();
            let mimic = Announcement::new(&target.identifier)
                .relays([&own_url, &remote_url])
                .clone_urls([hostile.url(&format!("{}.git", target.identifier))])
                .maintainers([target.owner.public_key()])
                .at(at_after(0))
                .sign(&stranger);
            let tip = target.upstream.tip().expect("a main");
            let newer = state_of(
                &stranger,
                &target.identifier,
                &tip,
                at_after(target.state.created_at.as_secs() + 60),
            );
            own.publish(&mimic).await;
            remote.publish(&mimic).await;
            remote.publish(&newer).await;
            events_published += 3;
        }
        for n in 0..plan.junk_prs {
            let target = &honest[n % honest.len()];
            let junk = sign(
                &Keys::generate(),
                1618,
                "",
                vec![
                    tag(&["a", &target.coordinate()]),
                    tag(&["c", &Keys::generate().public_key().to_hex()[..40]]),
                    tag(&["clone", &hostile.url(&format!("junk-{hour}-{n}.git"))]),
                ],
                at_after(0),
            );
            remote.publish(&junk).await;
            events_published += 1;
        }

        sampling_until(pid, &mut peaks, half).await;
        remote.restart().await;
        upstream.up().await;
        // A served repository damaged by hand.
        let damaged = if honest.len() > 1 {
            damage(
                &root,
                &honest[(hour as usize * 3) % (honest.len() - 1)],
                hour,
            )
        } else {
            "-"
        };

        sampling_until(pid, &mut peaks, hour_started + plan.hour).await;
        if let Ok(Some(exit)) = child.try_wait() {
            panic!(
                "grasp-sync exited in hour {hour} ({exit}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        println!(
            "{hour:>4} | {:>5} | {events_published:>6} | {damaged:<20} | {down:<6} | {:>12} | {:>8}",
            honest.len(),
            peaks.rss_kib,
            peaks.fds
        );
        hours.push(peaks);
    }

    // Every honest repository converges to its newest authorized state (waited for
    // first, so that the figures below are printed either way).
    let settle_started = Instant::now();
    let mut settled = Peaks::default();
    let wrong = loop {
        settled.sample(pid);
        let wrong = wrong_ones(&honest, &root, &served_by).await;
        if wrong.is_empty() || settle_started.elapsed() > plan.settle {
            break wrong;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "{} of {} honest repositories serve exactly their newest state, {:?} after the last \
         hour ({:?} in all); peak RSS {} KiB, fds {} while settling",
        honest.len() - wrong.len(),
        honest.len(),
        settle_started.elapsed(),
        started.elapsed(),
        settled.rss_kib,
        settled.fds
    );
    let peak_of = |hours: &[Peaks]| {
        hours.iter().fold(Peaks::default(), |mut peak, hour| {
            peak.rss_kib = peak.rss_kib.max(hour.rss_kib);
            peak.fds = peak.fds.max(hour.fds);
            peak
        })
    };
    let warm_up = peak_of(&hours[..WARM_UP_HOURS.min(hours.len())]);
    let steady = &hours[WARM_UP_HOURS.min(hours.len())..];
    let later = peak_of(steady);
    let (earlier_half, later_half) = steady.split_at(steady.len() / 2);
    let (earlier_half, later_half) = (peak_of(earlier_half), peak_of(later_half));
    let first = hours[0];
    let ratio = |later: u64, base: u64| later as f64 / base.max(1) as f64;
    println!(
        "hour 1: {} KiB, {} fds; hours 1-{WARM_UP_HOURS}: {} KiB, {} fds; peak after: {} KiB \
         ({:.2}x warm-up, {:.2}x hour 1), {} fds ({:.2}x warm-up, {:.2}x hour 1)",
        first.rss_kib,
        first.fds,
        warm_up.rss_kib,
        warm_up.fds,
        later.rss_kib,
        ratio(later.rss_kib, warm_up.rss_kib),
        ratio(later.rss_kib, first.rss_kib),
        later.fds,
        ratio(later.fds as u64, warm_up.fds as u64),
        ratio(later.fds as u64, first.fds as u64),
    );
    println!(
        "steady hours, earlier half -> later half: {} -> {} KiB ({:.2}x), {} -> {} fds ({:.2}x)",
        earlier_half.rss_kib,
        later_half.rss_kib,
        ratio(later_half.rss_kib, earlier_half.rss_kib),
        earlier_half.fds,
        later_half.fds,
        ratio(later_half.fds as u64, earlier_half.fds as u64),
    );
    let sidecar_log = std::fs::read_to_string(&log).unwrap_or_default();
    if let Some(keep) = std::env::var_os("SOAK_KEEP_LOG") {
        std::fs::write(keep, &sidecar_log).unwrap();
    }
    child.start_kill().unwrap();
    let _ = child.wait().await;
    own.stop().await;

    assert!(
        wrong.is_empty(),
        "after {:?}, {} of {} honest repositories do not serve their state:\n{}\n\
         sidecar log (tail):\n{}",
        plan.settle,
        wrong.len(),
        honest.len(),
        wrong.join("\n"),
        tail(&sidecar_log, 60)
    );
    // Flat once every kind of traffic has run: no growth within the steady hours.
    assert!(
        ratio(later_half.rss_kib, earlier_half.rss_kib) <= FLAT_FACTOR,
        "peak RSS grew from {} KiB in the earlier steady hours to {} KiB in the later",
        earlier_half.rss_kib,
        later_half.rss_kib
    );
    assert!(
        ratio(later_half.fds as u64, earlier_half.fds as u64) <= FLAT_FACTOR,
        "peak open files grew from {} in the earlier steady hours to {} in the later",
        earlier_half.fds,
        later_half.fds
    );
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
