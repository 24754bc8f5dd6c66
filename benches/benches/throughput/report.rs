//! The tables: per path min / median / max events/s, median CPU seconds
//! per process, ratios to (c) and (d) from the same run; re-sync bytes.

use super::ours::{Resync, BATCH_WINDOW};
use super::{Bench, Measurement};

/// The paths in the order of the table, with their descriptions.
const PATHS: [(&str, &str); 13] = [
    (
        "a",
        "ours, sidecar (SyncManager + RelayStore → own relay process)",
    ),
    (
        "a'",
        "ours, in process (SyncManager + DatabaseStore, nostr 0.45 memory db)",
    ),
    ("b", "ours, sidecar, remote refuses NIP-77 (REQ + EOSE)"),
    ("c", "nostr-sdk 0.44.1 Client::sync (NIP-77), memory db"),
    ("d", "Event::verify alone, one core"),
    (
        "e",
        "ceiling of (a)'s own relay: events blasted at it, OKs counted",
    ),
    (
        "f",
        "ours, sidecar (SyncManager + RelayStore → nostr-rs-relay 0.8.12)",
    ),
    (
        "g",
        "ceiling of (f)'s own relay: events blasted at it, OKs counted",
    ),
    ("h", "as (a'), Sync+ off"),
    (
        "i",
        "as (a'), Sync+ world (relay lists, outbox relays), Sync+ off",
    ),
    (
        "j",
        "as (a'), Sync+ world, Sync+ on: + outbox-only conversation",
    ),
    ("k", "as (a), Sync+ world, Sync+ off"),
    ("l", "as (a), Sync+ world, Sync+ on"),
];

/// The ceiling path of a sidecar path: the own relay it writes into.
fn ceiling_of(path: &str) -> Option<&'static str> {
    match path {
        "a" | "b" | "k" | "l" => Some("e"),
        "f" => Some("g"),
        _ => None,
    }
}

/// Every measurement of the run.
#[derive(Default)]
pub(crate) struct Results {
    paths: Vec<(String, Measurement)>,
    /// Benchmark 3, one per (a) run.
    pub(crate) resync: Vec<Resync>,
    /// `/proc/loadavg` before the first run.
    pub(crate) load_before: String,
    /// `/proc/loadavg` after the last run.
    pub(crate) load_after: String,
    /// The CPUs this process ran on when the own relay had one of its own
    /// (`GRASP_BENCH_OWN_RELAY_CPU`).
    pub(crate) pinned: Option<String>,
}

pub(crate) use grasp_sync_benches::load_average;

impl Results {
    /// Records one run of `path`.
    pub(crate) fn push(&mut self, path: &str, measurement: Measurement) {
        eprintln!(
            "  {path}: {:.0} events/s ({} events in {:.2} s, status complete at {:?} s); CPU s {}; {}",
            measurement.rate(),
            measurement.new_events,
            measurement.secs,
            measurement.status_secs,
            cpu_text(&measurement.cpu),
            measurement.note
        );
        self.paths.push((path.to_owned(), measurement));
    }

    fn of(&self, path: &str) -> Vec<&Measurement> {
        self.paths
            .iter()
            .filter(|(name, _)| name == path)
            .map(|(_, m)| m)
            .collect()
    }
}

fn cpu_text(cpu: &[(String, f64)]) -> String {
    cpu.iter()
        .map(|(name, secs)| format!("{name} {secs:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CPU seconds of the process named `name` in `measurement` (NaN if
/// it has none).
fn cpu_of(measurement: &Measurement, name: &str) -> f64 {
    measurement
        .cpu
        .iter()
        .find(|(process, _)| process == name)
        .map_or(f64::NAN, |(_, secs)| *secs)
}

/// The median of `values` (sorted here).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.is_empty() {
        f64::NAN
    } else if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The median of each process's CPU seconds over `runs`.
fn median_cpu(runs: &[&Measurement]) -> Vec<(String, f64)> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .cpu
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let mut values: Vec<f64> = runs.iter().map(|m| m.cpu[i].1).collect();
            (name.clone(), median(&mut values))
        })
        .collect()
}

/// Prints both benchmarks' tables on stdout.
pub(crate) fn print(bench: &Bench, results: &Results) {
    let median_rate = |path: &str| {
        let mut rates: Vec<f64> = results.of(path).iter().map(|m| m.rate()).collect();
        median(&mut rates)
    };
    let (c, d) = (median_rate("c"), median_rate("d"));
    // One-core verification's CPU seconds per event, the yardstick of the
    // sync's cost.
    let verify_per_event = {
        let mut per_event: Vec<f64> = results
            .of("d")
            .iter()
            .map(|m| cpu_of(m, "verify") / m.new_events as f64)
            .collect();
        median(&mut per_event)
    };
    let repos = super::dataset::repo_count(bench.n);
    println!();
    println!(
        "Benchmark 2: historic sync throughput — N = {} events ({repos} repositories, {} root \
         events); the own side starts with the {repos} announcements, so a sync brings {} events; \
         {} runs per path; batch window {} ms",
        bench.n,
        bench.roots,
        bench.n - repos,
        PATHS
            .iter()
            .map(|(path, _)| results.of(path).len())
            .max()
            .unwrap_or(0),
        BATCH_WINDOW.as_millis()
    );
    println!();
    println!(
        "load average (1, 5, 15 min) before: {}, after: {}; relay databases (LMDB) under {}",
        results.load_before,
        results.load_after,
        super::relays::run_base().display()
    );
    match (&results.pinned, super::relays::own_relay_cpu()) {
        (Some(ours), Some(own)) => println!(
            "\nthe own relay on CPU {own} alone; the sync, the remote relay, the blasts' publisher \
             and (d) on CPU {ours}"
        ),
        _ => println!("\nevery process on every CPU"),
    }
    println!();
    println!("| path | events/s min / median / max | median time (s) | median time to status complete (s) | median CPU s per process | × (c) | × (d) | × own relay's ceiling | sync CPU s per event ÷ (d)'s |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (path, what) in PATHS {
        let runs = results.of(path);
        if runs.is_empty() {
            continue;
        }
        let mut rates: Vec<f64> = runs.iter().map(|m| m.rate()).collect();
        let mut times: Vec<f64> = runs.iter().map(|m| m.secs).collect();
        let med = median(&mut rates);
        let mut status: Vec<f64> = runs.iter().filter_map(|m| m.status_secs).collect();
        let status = if status.is_empty() {
            "–".to_owned()
        } else {
            format!("{:.2}", median(&mut status))
        };
        let of_ceiling = ceiling_of(path)
            .map(|ceiling| format!("{:.2}", med / median_rate(ceiling)))
            .unwrap_or_else(|| "–".to_owned());
        let cost = {
            let mut per_event: Vec<f64> = runs
                .iter()
                .map(|m| cpu_of(m, "sync") / m.new_events as f64)
                .collect();
            let ratio = median(&mut per_event) / verify_per_event;
            if ratio.is_finite() && ratio > 0.0 {
                format!("{ratio:.2}")
            } else {
                "–".to_owned()
            }
        };
        println!(
            "| ({path}) {what} | {:.0} / {med:.0} / {:.0} | {:.2} | {status} | {} | {:.2} | {:.2} | {of_ceiling} | {cost} |",
            rates[0],
            rates[rates.len() - 1],
            median(&mut times),
            cpu_text(&median_cpu(&runs)),
            med / c,
            med / d
        );
    }
    println!();
    println!(
        "strfry: not measured (not on crates.io nor in Debian, the only registries reachable)."
    );
    print_sync_plus(results);
    if results.resync.is_empty() {
        return;
    }
    println!();
    println!(
        "Benchmark 3: re-sync bytes — a fresh sidecar against an own relay already holding all {} \
         events and the same remote; bytes sent + received with the remote (WebSocket text \
         payload) until historic sync is complete, against one REQ for every event",
        bench.n
    );
    println!();
    println!("| run | NIP-77 re-sync bytes (received + sent) | time to complete (s) | events stored | REQ re-download bytes (events) | ratio |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (i, r) in results.resync.iter().enumerate() {
        println!(
            "| {} | {} ({} + {}) | {:.2} | {} | {} ({}) | {:.3} % |",
            i + 1,
            r.received + r.sent,
            r.received,
            r.sent,
            r.secs,
            r.stored,
            r.req_bytes,
            r.req_events,
            100.0 * (r.received + r.sent) as f64 / r.req_bytes as f64
        );
    }
}

/// The Sync+ table: per in-process path, min / median / max of time,
/// events/s, relays connected, bytes, events only Sync+ brought.
fn print_sync_plus(results: &Results) {
    let paths = ["a", "a'", "h", "i", "j", "k", "l"];
    if paths
        .iter()
        .all(|path| results.of(path).iter().all(|m| m.sync_plus.is_none()))
    {
        return;
    }
    println!();
    println!(
        "Sync+ (GRASP-03): what it adds; min / median / max over the runs; bytes are \
         WebSocket payload, MB = 10^6 B"
    );
    println!();
    println!("| path | Sync+ | time to complete (s) | events/s | relays connected of tracked (outbox) | MB received, all relays (median of remote, of outbox relays) | MB sent, all relays (medians of remote, outbox relays) | `sync_plus_events` | outbox-only events stored | participants, relay lists kept, passes |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for path in paths {
        let runs = results.of(path);
        let figures: Vec<&super::ours::SyncPlusFigures> =
            runs.iter().filter_map(|m| m.sync_plus.as_ref()).collect();
        if figures.is_empty() {
            continue;
        }
        let spread = |values: Vec<f64>, digits: usize| {
            let mut values = values;
            let med = median(&mut values);
            format!(
                "{:.digits$} / {med:.digits$} / {:.digits$}",
                values[0],
                values[values.len() - 1]
            )
        };
        let mb = |value: u64| value as f64 / 1e6;
        let mid = |values: Vec<f64>| {
            let mut values = values;
            format!("{:.2}", median(&mut values))
        };
        let text = |values: Vec<String>| {
            let mut values = values;
            values.dedup();
            values.join(", ")
        };
        let on = if matches!(path, "h" | "i" | "k") {
            "off"
        } else {
            "on"
        };
        println!(
            "| ({path}) | {on} | {} | {} | {} | {} (remote {}, outbox {}) | {} (remote {}, outbox {}) | {} | {} | {} |",
            spread(runs.iter().map(|m| m.secs).collect(), 2),
            spread(runs.iter().map(|m| m.rate()).collect(), 0),
            text(
                figures
                    .iter()
                    .map(|f| format!(
                        "{} of {} ({})",
                        f.relays_connected, f.relays_tracked, f.outbox_relays
                    ))
                    .collect()
            ),
            spread(figures.iter().map(|f| mb(f.received)).collect(), 2),
            mid(figures.iter().map(|f| mb(f.remote_received)).collect()),
            mid(figures.iter().map(|f| mb(f.outbox_received)).collect()),
            spread(figures.iter().map(|f| mb(f.sent)).collect(), 2),
            mid(figures.iter().map(|f| mb(f.remote_sent)).collect()),
            mid(figures.iter().map(|f| mb(f.outbox_sent)).collect()),
            text(
                figures
                    .iter()
                    .map(|f| f.sync_plus_events.to_string())
                    .collect()
            ),
            text(
                figures
                    .iter()
                    .map(|f| f
                        .outbox_only
                        .map_or("–".to_owned(), |(got, of)| format!("{got} of {of}")))
                    .collect()
            ),
            text(
                figures
                    .iter()
                    .map(|f| format!("{}, {}, passes {}", f.participants, f.relay_lists, f.passes))
                    .collect()
            ),
        );
    }
}
