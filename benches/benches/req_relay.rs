//! REQ-only relays at scale, on a busy machine (issue "The whole GRASP job next to a
//! real relay", item 6). A plain program, not criterion.
//!
//! ```text
//! cargo bench -p grasp-sync-benches --bench req_relay
//! GRASP_BENCH_EVENTS=10000 cargo bench -p grasp-sync-benches --bench req_relay   # quick
//! ```
//!
//! The same data set (the throughput benchmark's: N signed NIP-34 events, default
//! 40 000, over N/200 repositories) is held by two remotes:
//! - a NIP-77 relay: `bench_relay` (nostr-relay-builder 0.44 over LMDB), loaded at start;
//! - the real nostr-rs-relay 0.8.12 (REQ only; no EOSE for `limit: 0`; queries aborted
//!   without EOSE when the reader falls 2 s behind), loaded over WebSocket. Its binary
//!   comes from `.ci/install-nostr-rs-relay` (`NOSTR_RS_RELAY`, else the script's cache).
//!
//! Each run starts a fresh own relay (`bench_relay`, write limit lifted) holding the
//! announcements, which list the own relay and one remote, and runs our `SyncManager` +
//! `RelayStore` (the sidecar's wiring) until the own relay's store counted every event
//! and historic sync is complete (a state, with a deadline). Both remotes are synced from
//! quietly, then with two CPU-busy processes (`sh -c 'while :; do :; done'`) beside the
//! sync, each three times, in turns. Reported: median seconds, the REQ ÷ NIP-77 time
//! ratio (target ≤ 1.5 loaded), failed batches (target 0), events received from the
//! remote ÷ distinct events it holds, bytes received.
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

#[path = "throughput/counting.rs"]
mod counting;
#[path = "throughput/dataset.rs"]
#[allow(dead_code)]
mod dataset;
#[path = "throughput/relays.rs"]
#[allow(dead_code)]
mod relays;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use grasp_sync_tokio::{RelayStore, SyncManager, SyncStatus};
use nostr::prelude::{Event, EventId, RelayUrl};
use tokio_tungstenite::tungstenite::Message;

use counting::CountingStore;
use relays::{free_port, RelayProcess, RelaySpec, RunDir};

/// Repetitions of each (remote, load) pair.
const RUNS: usize = 3;
/// How long one sync may take.
const DEADLINE: Duration = Duration::from_secs(900);
/// The batch window (the sidecar's default is 5 s; the benchmarks use 200 ms).
const BATCH_WINDOW: Duration = Duration::from_millis(200);
/// CPU-busy processes beside the loaded runs.
const BUSY_PROCESSES: usize = 2;
/// The nostr-rs-relay version of `.ci/install-nostr-rs-relay`.
const NOSTR_RS_RELAY_VERSION: &str = "0.8.12";

/// The two remotes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Remote {
    Nip77,
    NostrRsRelay,
}

impl Remote {
    fn name(self) -> &'static str {
        match self {
            Remote::Nip77 => "NIP-77 (nostr-relay-builder, LMDB)",
            Remote::NostrRsRelay => "REQ (nostr-rs-relay 0.8.12)",
        }
    }
}

/// One sync.
#[derive(Clone, Debug)]
struct Run {
    remote: Remote,
    loaded: bool,
    secs: f64,
    batches_failed: u64,
    received: u64,
    bytes_received: u64,
    reconnects: u64,
}

fn events_wanted() -> usize {
    std::env::var("GRASP_BENCH_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n >= 1_000)
        .unwrap_or(40_000)
}

fn nostr_rs_relay_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NOSTR_RS_RELAY") {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("GRASP_CI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/grasp-sync-ci")));
    let path = cache
        .map(|c| {
            c.join(format!(
                "nostr-rs-relay-{NOSTR_RS_RELAY_VERSION}/bin/nostr-rs-relay"
            ))
        })
        .filter(|p| p.is_file());
    path.unwrap_or_else(|| {
        panic!("nostr-rs-relay is not installed: run .ci/install-nostr-rs-relay")
    })
}

/// nostr-rs-relay with its defaults on 127.0.0.1:`port`, data in `dir`.
struct NostrRsRelay {
    child: Child,
}

impl NostrRsRelay {
    fn start(dir: &Path, port: u16) -> NostrRsRelay {
        std::fs::create_dir_all(dir).expect("relay directory");
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[info]\nrelay_url = \"ws://127.0.0.1:{port}/\"\n\n[database]\n\
                 data_directory = \"{}\"\n\n[network]\naddress = \"127.0.0.1\"\nport = {port}\n",
                dir.display()
            ),
        )
        .expect("relay config");
        let child = Command::new(nostr_rs_relay_binary())
            .arg("--config")
            .arg(&config)
            .arg("--db")
            .arg(dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting nostr-rs-relay");
        NostrRsRelay { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for NostrRsRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Publishes `events` to `url` over `connections` WebSocket connections, each with up to
/// 500 EVENTs waiting for their OK; panics on a refusal (a `duplicate:` is fine).
async fn publish(url: &str, events: &[Event], connections: usize) {
    let started = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    let socket = loop {
        match tokio_tungstenite::connect_async(url).await {
            Ok((socket, _)) => break socket,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("connecting to {url}: {e}"),
        }
    };
    drop(socket);
    let chunk = events.len().div_ceil(connections.max(1));
    let mut tasks = Vec::new();
    for part in events.chunks(chunk.max(1)) {
        let part: Vec<String> = part
            .iter()
            .map(|e| format!("[\"EVENT\",{}]", e.as_json()))
            .collect();
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
                .await
                .expect("connect to load");
            let (mut sink, mut stream) = socket.split();
            let (mut sent, mut answered) = (0, 0);
            while answered < part.len() {
                while sent < part.len() && sent - answered < 500 {
                    sink.send(Message::text(part[sent].clone()))
                        .await
                        .expect("send");
                    sent += 1;
                }
                let frame = tokio::time::timeout(Duration::from_secs(30), stream.next())
                    .await
                    .expect("an OK within 30 s")
                    .expect("the connection stays")
                    .expect("a frame");
                if let Message::Text(text) = frame {
                    let value: serde_json::Value =
                        serde_json::from_str(text.as_str()).expect("relay JSON");
                    if value[0] == "OK" {
                        answered += 1;
                        let message = value[3].as_str().unwrap_or("");
                        assert!(
                            value[2] == true || message.starts_with("duplicate"),
                            "{url} refused an event: {text}"
                        );
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a loader task");
    }
    eprintln!(
        "loaded {} events into {url} in {:.1} s",
        events.len(),
        started.elapsed().as_secs_f64()
    );
}

/// `n` processes spinning on a core each, killed on drop.
struct Busy(Vec<Child>);

impl Busy {
    fn start(n: usize) -> Busy {
        Busy(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("a busy process")
                })
                .collect(),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One sync from `remote_url` into a fresh own relay on `own_port` holding `anns`.
async fn sync_once(
    remote: Remote,
    remote_url: &str,
    own_port: u16,
    anns_file: &Path,
    repos: usize,
    want: u64,
    loaded: bool,
) -> Run {
    let dir = RunDir::new(&format!("req-relay-own-{own_port}"));
    let own = RelayProcess::start(
        &RelaySpec {
            name: "own",
            db: dir.0.join("own-lmdb"),
            load: vec![anns_file.to_path_buf()],
            write_limit: Some(1_000_000_000),
            no_negentropy: false,
        },
        own_port,
    );
    assert_eq!(own.loaded, repos, "the own relay holds the announcements");
    let own_url = RelayUrl::parse(&format!("ws://127.0.0.1:{own_port}")).expect("own url");
    let store = CountingStore::new(
        RelayStore::new(own_url.clone(), Duration::from_secs(10)),
        want,
    );
    let manager = SyncManager::builder()
        .own_relay(own_url)
        .allow_local_addresses(true)
        .batch_window(BATCH_WINDOW)
        .store(store.clone())
        .build()
        .expect("building the sync manager");
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let busy = loaded.then(|| Busy::start(BUSY_PROCESSES));
    let started = Instant::now();
    let run = tokio::spawn(manager.run());
    let done = tokio::time::timeout(
        DEADLINE,
        status.wait_for(|s: &SyncStatus| {
            s.historic_sync_complete && s.repositories == repos && s.engine.events_stored >= want
        }),
    )
    .await
    .map(|waited| waited.map(|s| s.clone()));
    let last = match done {
        Ok(Ok(last)) => last,
        _ => panic!(
            "{}: not complete after {DEADLINE:?}: {:?}",
            remote.name(),
            status.borrow().engine
        ),
    };
    drop(busy);
    let reached = store.reached().expect("every event stored");
    shutdown.shutdown();
    let _ = run.await;
    let remote_url = RelayUrl::parse(remote_url).expect("remote url");
    let relay = last
        .relays
        .iter()
        .find(|relay| relay.report.relay == remote_url)
        .expect("the remote in the status");
    drop(own);
    Run {
        remote,
        loaded,
        secs: reached.duration_since(started).as_secs_f64(),
        batches_failed: last.engine.batches_failed,
        received: relay.report.events_received,
        bytes_received: relay.bytes_received,
        reconnects: last.engine.relays_dropped,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("req_relay: run with `cargo bench -p grasp-sync-benches --bench req_relay`");
        return;
    }
    let n = events_wanted();
    let target = relays::target_dir();
    let base = dataset::base_events(&target, n);
    let repos = dataset::repo_count(n);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = RunDir::new("req-relay");
    let (own_port, nip77_port, nrr_port) = (free_port(), free_port(), free_port());
    let own_url = format!("ws://127.0.0.1:{own_port}");
    let nip77_url = format!("ws://127.0.0.1:{nip77_port}");
    let nrr_url = format!("ws://127.0.0.1:{nrr_port}");
    let anns_nip77 = dataset::announcements(n, &[own_url.clone(), nip77_url.clone()]);
    let anns_nrr = dataset::announcements(n, &[own_url.clone(), nrr_url.clone()]);
    let (nip77_file, nrr_file) = (dir.0.join("anns-nip77.jsonl"), dir.0.join("anns-nrr.jsonl"));
    dataset::write_jsonl(&nip77_file, &anns_nip77);
    dataset::write_jsonl(&nrr_file, &anns_nrr);
    let base_file = dir.0.join("base.jsonl");
    dataset::write_jsonl(&base_file, &base);
    let nip77 = RelayProcess::start(
        &RelaySpec {
            name: "nip77 remote",
            db: dir.0.join("nip77-lmdb"),
            load: vec![base_file.clone(), nip77_file.clone()],
            write_limit: None,
            no_negentropy: false,
        },
        nip77_port,
    );
    let distinct = nip77.loaded as u64;
    let nrr = NostrRsRelay::start(&dir.0.join("nostr-rs-relay"), nrr_port);
    let mut all = base.clone();
    all.extend(anns_nrr.iter().cloned());
    runtime.block_on(publish(&nrr_url, &all, 4));
    let want = (base.len()) as u64;
    eprintln!(
        "data set: {} events, {repos} repositories; the sync brings {want} (pids: nip77 {}, \
         nostr-rs-relay {})",
        all.len(),
        nip77.pid(),
        nrr.pid()
    );
    let mut runs = Vec::new();
    for run in 1..=RUNS {
        for loaded in [false, true] {
            for (remote, url, file) in [
                (Remote::Nip77, &nip77_url, &nip77_file),
                (Remote::NostrRsRelay, &nrr_url, &nrr_file),
            ] {
                let measured =
                    runtime.block_on(sync_once(remote, url, own_port, file, repos, want, loaded));
                eprintln!(
                    "run {run}/{RUNS}: {} {}: {:.2} s, {} batches failed, {} received",
                    remote.name(),
                    if loaded { "loaded" } else { "quiet" },
                    measured.secs,
                    measured.batches_failed,
                    measured.received
                );
                runs.push(measured);
            }
        }
    }
    let ids: HashSet<EventId> = all.iter().map(|e| e.id).collect();
    report(&runs, n, ids.len() as u64, distinct);
}

fn report(runs: &[Run], n: usize, distinct_nrr: u64, distinct_nip77: u64) {
    let of = |remote: Remote, loaded: bool| -> Vec<&Run> {
        runs.iter()
            .filter(|r| r.remote == remote && r.loaded == loaded)
            .collect()
    };
    println!("\n## REQ-only relay against NIP-77, N = {n}, {RUNS} runs each (medians)\n");
    println!(
        "| remote | machine | seconds | batches failed | received ÷ distinct | MB received | \
         relays dropped |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for loaded in [false, true] {
        for remote in [Remote::Nip77, Remote::NostrRsRelay] {
            let these = of(remote, loaded);
            let distinct = match remote {
                Remote::Nip77 => distinct_nip77,
                Remote::NostrRsRelay => distinct_nrr,
            };
            println!(
                "| {} | {} | {:.2} | {} | {:.3} | {:.1} | {} |",
                remote.name(),
                if loaded { "2 busy processes" } else { "quiet" },
                median(these.iter().map(|r| r.secs).collect()),
                these.iter().map(|r| r.batches_failed).max().unwrap_or(0),
                median(
                    these
                        .iter()
                        .map(|r| r.received as f64 / distinct as f64)
                        .collect()
                ),
                median(
                    these
                        .iter()
                        .map(|r| r.bytes_received as f64 / 1e6)
                        .collect()
                ),
                these.iter().map(|r| r.reconnects).max().unwrap_or(0),
            );
        }
    }
    for loaded in [false, true] {
        let secs = |remote| median(of(remote, loaded).iter().map(|r| r.secs).collect());
        println!(
            "\nREQ ÷ NIP-77 time, {}: {:.2} (target ≤ 1.5 loaded)",
            if loaded { "loaded" } else { "quiet" },
            secs(Remote::NostrRsRelay) / secs(Remote::Nip77)
        );
    }
}
