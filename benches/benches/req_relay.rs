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
#[allow(dead_code)]
mod counting;
#[path = "throughput/dataset.rs"]
#[allow(dead_code)]
mod dataset;
#[path = "throughput/ingest.rs"]
#[allow(dead_code)]
mod ingest;
#[path = "throughput/relays.rs"]
#[allow(dead_code)]
mod relays;

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use grasp_sync_tokio::{RelayStore, SyncManager, SyncStatus};
use nostr::prelude::{Event, EventId, RelayUrl};

use counting::CountingStore;
use relays::{free_port, NostrRsRelay, RelayProcess, RelaySpec, RunDir};

/// Repetitions of each (remote, load) pair.
const RUNS: usize = 3;
/// How long one sync may take.
const DEADLINE: Duration = Duration::from_secs(900);
/// The batch window (the sidecar's default is 5 s; the benchmarks use 200 ms).
const BATCH_WINDOW: Duration = Duration::from_millis(200);
/// CPU-busy processes beside the loaded runs.
const BUSY_PROCESSES: usize = 2;

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

/// Publishes `events` to the freshly started nostr-rs-relay at `url` (4
/// connections, 500 in flight each); panics unless it stored every one.
async fn load(url: &str, events: &[Event]) {
    ingest::wait_listening(url).await;
    let loaded = ingest::blast(url, &ingest::event_frames(events), 4, 500).await;
    assert_eq!(
        loaded.stored,
        events.len() as u64,
        "{url} stored every event: {loaded:?}"
    );
    eprintln!(
        "loaded {} events into {url} in {:.1} s",
        events.len(),
        loaded.secs
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
            own: true,
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
    // `GRASP_BENCH_OWN_RELAY_CPU`, as in the throughput benchmark: the own
    // relay on that CPU, everything else on the others.
    if let Some(cpus) = relays::pin_away_from_own_relay() {
        eprintln!("the own relay on its own CPU; the rest on CPUs {cpus}");
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
            own: false,
        },
        nip77_port,
    );
    let distinct = nip77.loaded as u64;
    let nrr = NostrRsRelay::start(&dir.0.join("nostr-rs-relay"), nrr_port);
    let mut all = base.clone();
    all.extend(anns_nrr.iter().cloned());
    runtime.block_on(load(&nrr_url, &all));
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
