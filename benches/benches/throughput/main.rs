//! Historic sync throughput and re-sync bytes (issue "Historic sync at the
//! machine's limit", benchmarks 2 and 3). A plain program, not criterion:
//! every relay is a separate process on 127.0.0.1 (`bench_relay`: a
//! nostr-relay-builder 0.44.1 relay over nostr-lmdb 0.44), each path runs
//! three times (`GRASP_BENCH_RUNS`), and CPU seconds are read per process
//! from `/proc`. A path must complete within 600 s
//! (`GRASP_BENCH_DEADLINE_SECS`).
//!
//! ```text
//! cargo bench -p grasp-sync-benches --bench throughput
//! GRASP_BENCH_EVENTS=10000 cargo bench -p grasp-sync-benches --bench throughput   # quick
//! GRASP_BENCH_PATHS=a,c cargo bench -p grasp-sync-benches --bench throughput      # some paths
//! GRASP_BENCH_OWN_RELAY_CPU=1 cargo bench -p grasp-sync-benches --bench throughput # own relay on CPU 1 alone
//! GRASP_BENCH_RESYNC=0 GRASP_BENCH_PATHS=a cargo bench -p grasp-sync-benches --bench throughput # (a) without benchmark 3
//! GRASP_BENCH_RUNS=3 GRASP_BENCH_PATHS="a',h" cargo bench -p grasp-sync-benches --bench throughput # Sync+, no lists
//! GRASP_BENCH_RESYNC=0 GRASP_BENCH_PATHS="k,l" cargo bench -p grasp-sync-benches --bench throughput # Sync+ world
//! GRASP_BENCH_EVENTS=20000 GRASP_BENCH_PATHS="i,j" cargo bench -p grasp-sync-benches --bench throughput # in process
//! ```
//!
//! (`GRASP_BENCH_RESYNC=0` leaves out the re-sync after each (a) run, which
//! runs in the same process: for a profile of the sync alone.)
//!
//! Data: N (default 100 000) signed NIP-34 events over 500 repositories
//! (see `dataset.rs`), cached in `target/grasp-bench-data/`. The remote relay
//! holds all N; the own side starts with the 500 announcements (that is how
//! the sync learns its repositories), so every path brings N − 500 events.
//!
//! Benchmark 2, paths (time from starting the manager or connecting the
//! client until the store holds every event, a state, not a quiet period):
//! - (a) ours, sidecar: `SyncManager` + `RelayStore` publishing into an own
//!   relay process (write limit lifted);
//! - (a') ours, in process: `SyncManager` + `DatabaseStore` over a nostr 0.45
//!   memory database, no own relay process;
//! - (b) as (a), the remote refusing NIP-77 (`NEG-ERR "blocked: …"` from a
//!   proxy in front of it): REQ + EOSE with `until` pagination;
//! - (c) nostr-sdk 0.44.1 `Client::sync` into its memory database, called
//!   again until a call brings nothing new;
//! - (d) `Event::verify` alone on one core over the same N events;
//! - (e) the ceiling of (a)'s own relay: a fresh one holding the
//!   announcements, the N − 500 events blasted at it over several
//!   connections with many `EVENT`s in flight (`ingest.rs`), every `OK`
//!   counted;
//! - (f) as (a), the own relay the real nostr-rs-relay 0.8.12 (SQLite, its
//!   defaults; `NOSTR_RS_RELAY`, else `.ci/install-nostr-rs-relay`'s cache);
//! - (g) the ceiling of (f)'s own relay, as (e).
//!
//! GRASP-03 Sync+ paths, run only when `GRASP_BENCH_PATHS` names them:
//! - (h) as (a'), Sync+ switched off (it is on by default, so (a')
//!   is the same data set with it on): what Sync+ costs when nobody
//!   publishes relay lists (it still asks the remote for every
//!   participant's lists);
//! - (i) and (j): as (a') over the Sync+ world (`sync_plus.rs`): the same
//!   data set, the participants' relay lists on the remote, and 12 more
//!   relays (3 popular outbox relays most lists share, 8 users' own, one
//!   marked `read` only) holding ~10 % more conversation only there, plus
//!   noise; (i) with Sync+ off, (j) on. (j) must bring every outbox-only
//!   event, (i) none, neither any noise; the Sync+ table gives time, relays
//!   connected, bytes per kind of relay and `sync_plus_events` of each;
//!   at N = 100 000 (j) outlasts the deadline (nostr-memory scans its
//!   events for every NIP-77 listing: `BENCHMARKS.md` section 8);
//! - (k) and (l): as (a) (the sidecar into an LMDB own relay, whose tag
//!   indexes answer the listings NIP-77 needs) over the Sync+ world, Sync+
//!   off and on.
//!
//! strfry is not measured: it is not on crates.io nor in Debian (`apt-cache
//! policy strfry` finds no candidate), the only registries this machine
//! reaches.
//!
//! Benchmark 3: after each (a) run, a fresh sidecar against the complete own
//! relay and the same remote; bytes exchanged with the remote until historic
//! sync is complete, against one REQ re-downloading the same set.
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

mod counting;
mod dataset;
mod ingest;
mod ours;
mod own;
mod relays;
mod report;
mod sdk;
mod sync_plus;
mod wire;

use std::path::PathBuf;

use nostr::prelude::{Event, EventId};
use ours::Variant;
use own::OwnKind;

/// The plain data set, Sync+ on (the default).
const PLAIN: Variant<'static> = Variant {
    sync_plus: true,
    world: None,
};

/// Repetitions of each path: `GRASP_BENCH_RUNS`, else 3.
fn runs() -> usize {
    std::env::var("GRASP_BENCH_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(3)
}

/// The data set and where it is.
pub(crate) struct Bench {
    /// Events in total (announcements included).
    pub(crate) n: usize,
    /// The cached file of every event but the announcements.
    pub(crate) data_file: PathBuf,
    /// Root events (1617, 1618, 1621) in the data set.
    pub(crate) roots: usize,
    /// The ids of every event but the announcements.
    pub(crate) base_ids: Vec<EventId>,
    /// The `EVENT` frames of every event but the announcements (what a sync
    /// brings), for the ceiling blasts.
    pub(crate) frames: Vec<String>,
}

/// One run of one path.
#[derive(Clone, Debug)]
pub(crate) struct Measurement {
    /// Seconds from start until the store held every event (historic sync
    /// was then reported complete too).
    pub(crate) secs: f64,
    /// Seconds from start until the status said historic sync is complete
    /// (it is refreshed at most every 100 ms, and every 2 s when idle).
    pub(crate) status_secs: Option<f64>,
    /// Events the path had to bring.
    pub(crate) new_events: u64,
    /// CPU seconds per process during the run: (name, seconds).
    pub(crate) cpu: Vec<(String, f64)>,
    /// Counters worth a look.
    pub(crate) note: String,
    /// What Sync+ did (the in-process paths).
    pub(crate) sync_plus: Option<ours::SyncPlusFigures>,
}

impl Measurement {
    /// Events per second.
    pub(crate) fn rate(&self) -> f64 {
        self.new_events as f64 / self.secs
    }
}

fn events_wanted() -> usize {
    std::env::var("GRASP_BENCH_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n >= 1_000)
        .unwrap_or(100_000)
}

/// The paths to run: `GRASP_BENCH_PATHS` (comma-separated, e.g. `a,c`),
/// by default (a)–(g). The Sync+ paths (h)–(l) run only when named: (j)
/// takes longer than the deadline at N = 100 000 (nostr-memory's NIP-77
/// listings, see `BENCHMARKS.md` section 8).
fn paths_wanted() -> Vec<String> {
    std::env::var("GRASP_BENCH_PATHS")
        .map(|paths| paths.split(',').map(|p| p.trim().to_owned()).collect())
        .unwrap_or_else(|_| {
            ["a", "a'", "b", "c", "d", "e", "f", "g"]
                .map(String::from)
                .to_vec()
        })
}

/// Whether benchmark 3 follows each (a) run (unless `GRASP_BENCH_RESYNC=0`).
fn resync_wanted() -> bool {
    std::env::var("GRASP_BENCH_RESYNC").map_or(true, |value| value.trim() != "0")
}

fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("throughput: run with `cargo bench -p grasp-sync-benches --bench throughput`");
        return;
    }
    let pinned = relays::pin_away_from_own_relay();
    let n = events_wanted();
    let target = relays::target_dir();
    let started = std::time::Instant::now();
    let base = dataset::base_events(&target, n);
    let data_file = target
        .join("grasp-bench-data")
        .join(format!("events-{n}.jsonl"));
    let roots = base
        .iter()
        .filter(|e| matches!(e.kind.as_u16(), 1617 | 1618 | 1621))
        .count();
    eprintln!(
        "data set: {n} events ({} repositories, {roots} root events) in {} ({:.1} s)",
        dataset::repo_count(n),
        data_file.display(),
        started.elapsed().as_secs_f64()
    );
    let bench = Bench {
        n,
        data_file,
        roots,
        base_ids: base.iter().map(|e| e.id).collect(),
        frames: ingest::event_frames(&base),
    };
    // (d) runs over the same N events: the base set and one run's
    // announcements.
    let mut all: Vec<Event> = base;
    all.extend(dataset::announcements(
        n,
        &["ws://127.0.0.1:1".into(), "ws://127.0.0.1:2".into()],
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let wanted = paths_wanted();
    let on = |path: &str| wanted.iter().any(|p| p == path);
    let world = ["i", "j", "k", "l"].into_iter().any(on).then(|| {
        let started = std::time::Instant::now();
        let world = sync_plus::world(&all, n);
        eprintln!(
            "Sync+ world: {} outbox-only conversation events, {} never to be stored, on {} relays \
             ({:.1} s)",
            world.outbox_only.len(),
            world.never.len(),
            sync_plus::RELAYS,
            started.elapsed().as_secs_f64()
        );
        world
    });
    let mut results = report::Results::default();
    results.pinned = pinned;
    results.load_before = report::load_average();
    let runs = runs();
    for run in 1..=runs {
        let step = |path: &str| eprintln!("run {run}/{runs}: {path}");
        if on("d") {
            step("(d) Event::verify alone");
            results.push("d", sdk::verify_alone(&all));
        }
        if on("a") {
            let resync = resync_wanted();
            step(if resync {
                "(a) ours, sidecar (then benchmark 3: re-sync)"
            } else {
                "(a) ours, sidecar"
            });
            let (measured, resync) =
                runtime.block_on(ours::sidecar(&bench, OwnKind::Lmdb, false, resync, PLAIN));
            results.push("a", measured);
            results.resync.extend(resync);
        }
        if on("a'") {
            step("(a') ours, in process");
            let variant = Variant {
                sync_plus: true,
                world: None,
            };
            results.push("a'", runtime.block_on(ours::in_process(&bench, variant)));
        }
        if on("h") {
            step("(h) as (a'), Sync+ off");
            let variant = Variant {
                sync_plus: false,
                world: None,
            };
            results.push("h", runtime.block_on(ours::in_process(&bench, variant)));
        }
        if let Some(world) = &world {
            if on("i") {
                step("(i) as (a'), Sync+ world, Sync+ off");
                let variant = Variant {
                    sync_plus: false,
                    world: Some(world),
                };
                results.push("i", runtime.block_on(ours::in_process(&bench, variant)));
            }
            if on("j") {
                step("(j) as (a'), Sync+ world, Sync+ on");
                let variant = Variant {
                    sync_plus: true,
                    world: Some(world),
                };
                results.push("j", runtime.block_on(ours::in_process(&bench, variant)));
            }
            for (path, sync_plus) in [("k", false), ("l", true)] {
                if on(path) {
                    step(if sync_plus {
                        "(l) as (a), Sync+ world, Sync+ on"
                    } else {
                        "(k) as (a), Sync+ world, Sync+ off"
                    });
                    let variant = Variant {
                        sync_plus,
                        world: Some(world),
                    };
                    let measured = runtime.block_on(ours::sidecar(
                        &bench,
                        OwnKind::Lmdb,
                        false,
                        false,
                        variant,
                    ));
                    results.push(path, measured.0);
                }
            }
        }
        if on("b") {
            step("(b) ours, sidecar, remote refuses NIP-77");
            let measured =
                runtime.block_on(ours::sidecar(&bench, OwnKind::Lmdb, true, false, PLAIN));
            results.push("b", measured.0);
        }
        if on("c") {
            step("(c) nostr-sdk Client::sync");
            results.push("c", runtime.block_on(sdk::nostr_sdk_sync(&bench)));
        }
        if on("e") {
            step("(e) the ceiling of (a)'s own relay");
            results.push("e", runtime.block_on(own::ceiling(&bench, OwnKind::Lmdb)));
        }
        if on("f") {
            step("(f) ours, sidecar into nostr-rs-relay");
            let measured = runtime.block_on(ours::sidecar(
                &bench,
                OwnKind::NostrRsRelay,
                false,
                false,
                PLAIN,
            ));
            results.push("f", measured.0);
        }
        if on("g") {
            step("(g) the ceiling of (f)'s own relay");
            results.push(
                "g",
                runtime.block_on(own::ceiling(&bench, OwnKind::NostrRsRelay)),
            );
        }
    }
    results.load_after = report::load_average();
    report::print(&bench, &results);
}
