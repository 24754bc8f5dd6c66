//! The field's sync from strfry (issue 44): 4 000 repositories (116 000 events) from two
//! real strfry relays into an empty strfry, by the `grasp-sync` sidecar over NIP-77 and
//! over REQ, beside strfry's own `strfry sync` on the same data, in one run. A plain
//! program, not criterion.
//!
//! ```text
//! cargo bench -p grasp-sync-benches --bench strfry_sync
//! GRASP_BENCH_REPOSITORIES=400 GRASP_BENCH_RUNS=1 cargo bench -p grasp-sync-benches --bench strfry_sync   # quick
//! ```
//!
//! The data set is `grasp_sync_test_support::field`'s (the `sidecar_strfry` tests'),
//! generated once: `GRASP_BENCH_REPOSITORIES` repositories of ours (default 4 000, 29
//! events each), a third of the conversations on each remote only and a third on both,
//! among 1 600 other people's repositories and 50 notes per remote. Two remote strfry
//! relays at strfry's defaults are loaded with `strfry import`. Then, for each path, a
//! fresh empty strfry (its defaults) is the own relay:
//!
//! - (a) the sidecar, `grasp-sync --once` with its defaults (NIP-77), the first remote
//!   as bootstrap relay, `--allow-local-addresses`;
//! - (b) the same with `--no-negentropy` (REQ only);
//! - (c) `strfry sync <remote> --dir=down` from the first remote, then from the second:
//!   strfry's own NIP-77 client. It syncs everything, so it also takes the strangers'
//!   repositories, their issues and the notes (3 460 events more than ours).
//!
//! The sidecar is this program run again as a separate process (`GRASP_BENCH_AS_SIDECAR`
//! set, the sidecar's flags as arguments: `grasp_sync::main`), so it is the sidecar's
//! own code in the same release build. `GRASP_BENCH_RUNS` (default 3) runs of each
//! path, in turns (a, b, c, a, b, c, …); `GRASP_BENCH_PATHS` (e.g. `a,c`) picks paths.
//!
//! Each run prints the wall time (spawn to exit), the client's CPU (user + system of the
//! sidecar or of the two `strfry sync` processes: this process's waited-for children's
//! CPU before and after), the own relay's and the remotes' CPU (their `/proc/<pid>/stat`),
//! the events the own relay holds (`strfry export`) and whether they are exactly ours
//! ((a), (b)) or everything the remotes hold ((c)); at the end a table of min / median /
//! max per path and the ratios (a)/(c), (b)/(c). Before the runs it measures strfry's
//! first `NEG-MSG` for the Layer 1 filter (every announcement and state) from each
//! remote: its size is why the sidecar accepts messages over strfry's own 128 KiB.
//!
//! Needs strfry (`$STRFRY_BIN`, else `.ci/install-strfry`): without it the program
//! prints one line and exits 0. Under `cargo test` (no `--bench` argument) it does
//! nothing.

#[path = "throughput/relays.rs"]
#[allow(dead_code)]
mod relays;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use grasp_sync_benches::load_average;
use grasp_sync_test_support::field::{self, Dataset, EVENTS_PER_REPOSITORY, FIELD_REPOSITORIES};
use grasp_sync_test_support::strfry::{find_strfry, Strfry};
use negentropy::{Negentropy, NegentropyStorageVector};
use nostr::prelude::{EventId, RelayUrl};
use tokio_tungstenite::tungstenite::Message;

use relays::{cpu_seconds, run_base, stat_seconds};

/// Set in the environment of this program run again as the sidecar.
const AS_SIDECAR: &str = "GRASP_BENCH_AS_SIDECAR";
/// The sidecar's `--timeout`, seconds.
const SIDECAR_TIMEOUT: u64 = 1_200;
/// strfry's largest incoming frame (`relay.maxWebsocketPayloadSize`).
const STRFRY_ACCEPTS: usize = 131_072;

/// The three ways into the own relay.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Path3 {
    Nip77,
    Req,
    StrfrySync,
}

impl Path3 {
    const ALL: [Path3; 3] = [Path3::Nip77, Path3::Req, Path3::StrfrySync];

    fn letter(self) -> char {
        match self {
            Path3::Nip77 => 'a',
            Path3::Req => 'b',
            Path3::StrfrySync => 'c',
        }
    }

    fn name(self) -> &'static str {
        match self {
            Path3::Nip77 => "(a) grasp-sync --once, NIP-77",
            Path3::Req => "(b) grasp-sync --once --no-negentropy, REQ",
            Path3::StrfrySync => "(c) strfry sync --dir=down, both remotes",
        }
    }
}

/// One run of one path.
#[derive(Clone, Debug)]
struct Run {
    path: Path3,
    /// Wall seconds: the sidecar's spawn to exit, or both `strfry sync`s.
    secs: f64,
    /// CPU seconds of the client (the sidecar, or the `strfry sync` processes).
    client_cpu: f64,
    /// CPU seconds of the own relay process over the run.
    own_cpu: f64,
    /// CPU seconds of both remote relay processes over the run.
    remotes_cpu: f64,
    /// Events the own relay holds afterwards.
    held: usize,
    /// Wanted events it lacks: ours for (a), (b); everything for (c).
    missing: usize,
    /// Events it holds beyond those.
    extra: usize,
    /// The sidecar's exit code (0 for (c), which panics on a failure).
    code: Option<i32>,
    /// Bytes the sidecar received from the remotes (its summary; 0 for (c)).
    bytes_received: u64,
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(default)
}

fn chosen_paths() -> Vec<Path3> {
    match std::env::var("GRASP_BENCH_PATHS") {
        Ok(list) if !list.trim().is_empty() => Path3::ALL
            .into_iter()
            .filter(|path| list.contains(path.letter()))
            .collect(),
        _ => Path3::ALL.to_vec(),
    }
}

/// User + system CPU seconds of this process's children that ended and were waited
/// for, with theirs (`cutime` + `cstime`, what `getrusage(RUSAGE_CHILDREN)` reads):
/// the difference around one child's run is that child's CPU.
fn children_cpu() -> f64 {
    // cutime (field 16) and cstime (17).
    stat_seconds("/proc/self/stat", 13)
}

/// CPU seconds of the process `pid` so far.
fn pid_cpu(pid: u32) -> f64 {
    cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// The bytes of the `NEG-MSG` `relay` answers a client holding nothing with, for the
/// Layer 1 filter (announcements and states).
fn first_neg_msg_len(relay: &RelayUrl) -> Result<usize, String> {
    let mut storage = NegentropyStorageVector::new();
    storage.seal().map_err(|e| e.to_string())?;
    let mut negentropy = Negentropy::owned(storage, 0).map_err(|e| e.to_string())?;
    let initial = hex::encode(negentropy.initiate().map_err(|e| e.to_string())?);
    let open = format!(r#"["NEG-OPEN","probe",{{"kinds":[30617,30618]}},"{initial}"]"#);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (mut socket, _) = tokio_tungstenite::connect_async(relay.as_str())
            .await
            .map_err(|e| e.to_string())?;
        socket
            .send(Message::text(open))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), socket.next())
                .await
                .map_err(|_| "no answer within 30 s".to_owned())?;
            match frame {
                Some(Ok(Message::Text(text))) if text.starts_with(r#"["NEG-MSG""#) => {
                    let _ = socket.close(None).await;
                    return Ok(text.len());
                }
                Some(Ok(Message::Text(text))) => {
                    return Err(format!("answered {:.200}", text.as_str()))
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error.to_string()),
                None => return Err("closed".to_owned()),
            }
        }
    })
}

/// The sidecar's summary numbers: events stored and bytes received from every relay.
fn summary_numbers(stdout: &str) -> (Option<u64>, u64) {
    let number_before = |line: &str, unit: &str| -> Option<u64> {
        let (before, _) = line.split_once(unit)?;
        before.split_whitespace().last()?.parse().ok()
    };
    let stored = stdout
        .lines()
        .find(|line| line.starts_with("historic sync complete"))
        .and_then(|line| number_before(line, " events stored"));
    let received = stdout
        .lines()
        .filter(|line| line.starts_with("relay "))
        .filter_map(|line| number_before(line, " bytes received"))
        .sum();
    (stored, received)
}

/// Held, missing and extra events of the own relay against `wanted`.
fn compare(held: &BTreeSet<EventId>, wanted: &BTreeSet<EventId>) -> (usize, usize, usize) {
    (
        held.len(),
        wanted.difference(held).count(),
        held.difference(wanted).count(),
    )
}

/// One run of `path` into a fresh own strfry.
fn run_path(
    path: Path3,
    bin: &Path,
    own_port: u16,
    remotes: [&Strfry; 2],
    data: &Dataset,
    everything: &BTreeSet<EventId>,
    verbose: bool,
) -> Run {
    let own = Strfry::start_at(bin, &run_base(), own_port, "");
    let remotes_before: f64 = remotes.iter().map(|relay| pid_cpu(relay.pid())).sum();
    let own_before = pid_cpu(own.pid());
    let client_before = children_cpu();
    let started = Instant::now();
    let (code, stdout, stderr) = match path {
        Path3::Nip77 | Path3::Req => {
            let output = sidecar(&own.url(), &remotes[0].url(), path == Path3::Req);
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
        Path3::StrfrySync => {
            let logs: Vec<String> = remotes
                .iter()
                .map(|remote| own.sync_down(&remote.url()).log)
                .collect();
            (Some(0), String::new(), logs.join("\n"))
        }
    };
    let secs = started.elapsed().as_secs_f64();
    let client_cpu = children_cpu() - client_before;
    let own_cpu = pid_cpu(own.pid()) - own_before;
    let remotes_cpu = remotes
        .iter()
        .map(|relay| pid_cpu(relay.pid()))
        .sum::<f64>()
        - remotes_before;
    let held = own.ids();
    let wanted = if path == Path3::StrfrySync {
        everything
    } else {
        &data.expected
    };
    let (held_count, missing, extra) = compare(&held, wanted);
    let (stored, bytes_received) = summary_numbers(&stdout);
    if verbose || code != Some(0) {
        for line in stdout.lines() {
            println!("    {line}");
        }
        if path == Path3::StrfrySync {
            // Its log's lines are `<date> <time> (<uptime>) [<thread>] INFO| <message>`.
            let said = ["Set reconcile complete", "Sync transfer stats"];
            for line in stderr.lines() {
                if let Some((_, message)) = line.split_once("| ") {
                    if said.iter().any(|start| message.starts_with(start)) {
                        println!("    strfry sync: {}", message.trim());
                    }
                }
            }
        }
    }
    if code != Some(0) {
        let log: Vec<&str> = stderr.lines().collect();
        println!(
            "    exit {code:?}; the last lines of its log:\n{}",
            log[log.len().saturating_sub(30)..].join("\n")
        );
    }
    if let Some(stored) = stored {
        if stored as usize != held_count {
            println!(
                "    the sidecar says {stored} events stored; the own relay holds {held_count}"
            );
        }
    }
    Run {
        path,
        secs,
        client_cpu,
        own_cpu,
        remotes_cpu,
        held: held_count,
        missing,
        extra,
        code,
        bytes_received,
    }
}

/// This program as the sidecar: `grasp-sync --once` from `bootstrap` into `own`, with
/// its defaults (no `NGIT_*` variable from our environment), REQ only if `req_only`.
fn sidecar(own: &RelayUrl, bootstrap: &RelayUrl, req_only: bool) -> std::process::Output {
    let exe = std::env::current_exe().expect("this program's path");
    let mut command = Command::new(exe);
    command
        .env(AS_SIDECAR, "1")
        .env("RUST_LOG", "warn")
        .args([
            "--own-relay",
            own.as_str(),
            "--bootstrap-relay",
            bootstrap.as_str(),
            "--allow-local-addresses",
            "--once",
            "--timeout",
            &SIDECAR_TIMEOUT.to_string(),
        ])
        .stdin(Stdio::null());
    if req_only {
        command.arg("--no-negentropy");
    }
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NGIT_") {
            command.env_remove(name);
        }
    }
    command.output().expect("running the sidecar")
}

fn exactness(run: &Run) -> String {
    match (run.path, run.missing, run.extra) {
        (Path3::StrfrySync, 0, 0) => "everything on the remotes (a superset of ours)".to_owned(),
        (_, 0, 0) => "exact".to_owned(),
        (_, missing, extra) => format!("NOT EXACT: {missing} missing, {extra} extra"),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn min_median_max(values: Vec<f64>) -> (f64, f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, median(values), max)
}

fn report(runs: &[Run], repositories: usize, data: &Dataset, everything: usize) {
    println!(
        "\n## {repositories} repositories ({} events of ours; {everything} on the remotes \
         together), {} runs per path\n",
        data.expected.len(),
        runs.iter().filter(|run| run.path == runs[0].path).count()
    );
    println!(
        "| path | wall s min / median / max | client CPU s (median) | own relay CPU s | \
         remotes CPU s | events held | exact | MB received |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut medians = Vec::new();
    for path in Path3::ALL {
        let these: Vec<&Run> = runs.iter().filter(|run| run.path == path).collect();
        if these.is_empty() {
            continue;
        }
        let (min, mid, max) = min_median_max(these.iter().map(|run| run.secs).collect());
        let cpu = median(these.iter().map(|run| run.client_cpu).collect());
        let all_exact = these.iter().all(|run| run.missing == 0 && run.extra == 0);
        let exact = match (path, all_exact) {
            (Path3::StrfrySync, true) => "superset: everything".to_owned(),
            (_, true) => "exact, every run".to_owned(),
            _ => "NOT every run".to_owned(),
        };
        println!(
            "| {} | {min:.1} / {mid:.1} / {max:.1} | {cpu:.1} | {:.1} | {:.1} | {} | {exact} | {} |",
            path.name(),
            median(these.iter().map(|run| run.own_cpu).collect()),
            median(these.iter().map(|run| run.remotes_cpu).collect()),
            these[0].held,
            if path == Path3::StrfrySync {
                "–".to_owned()
            } else {
                format!(
                    "{:.1}",
                    median(these.iter().map(|run| run.bytes_received as f64 / 1e6).collect())
                )
            },
        );
        medians.push((path, mid, cpu));
    }
    let baseline = medians
        .iter()
        .find(|(path, _, _)| *path == Path3::StrfrySync)
        .copied();
    if let Some((_, secs_c, cpu_c)) = baseline {
        for (path, secs, cpu) in &medians {
            if *path != Path3::StrfrySync {
                println!(
                    "\n({})/(c): {:.2}× the wall time, {:.2}× the client CPU (medians)",
                    path.letter(),
                    secs / secs_c,
                    cpu / cpu_c
                );
            }
        }
    }
}

fn main() -> ExitCode {
    if std::env::var_os(AS_SIDECAR).is_some() {
        return grasp_sync::main();
    }
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("strfry_sync: run with `cargo bench -p grasp-sync-benches --bench strfry_sync`");
        return ExitCode::SUCCESS;
    }
    let bin = match find_strfry() {
        Ok(bin) => bin,
        Err(reason) => {
            println!(
                "strfry_sync: skipped: strfry not available ({reason}); set STRFRY_BIN or see \
                 .ci/install-strfry"
            );
            return ExitCode::SUCCESS;
        }
    };
    // Read the clock tick rate (a `getconf` child) before any child is measured.
    let _ = children_cpu();
    let repositories = env_number("GRASP_BENCH_REPOSITORIES", FIELD_REPOSITORIES);
    let runs = env_number("GRASP_BENCH_RUNS", 3);
    let paths = chosen_paths();
    println!(
        "strfry_sync: {repositories} repositories, {runs} runs of {}; strfry {}; {} CPUs; \
         load average {}",
        paths
            .iter()
            .map(|path| path.letter().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        bin.display(),
        std::thread::available_parallelism().map_or(1, usize::from),
        load_average()
    );
    let first = Strfry::start_in(&bin, &run_base(), "");
    let second = Strfry::start_in(&bin, &run_base(), "");
    // The announcements list the own relay's URL (that is what makes them ours), and
    // the data set is made once: every run's fresh own relay listens on the same port.
    let own_port = relays::free_port();
    let own_listed =
        RelayUrl::parse(&format!("ws://127.0.0.1:{own_port}")).expect("the own relay's url");
    let started = Instant::now();
    let data = field::dataset(repositories, &own_listed, [&first.url(), &second.url()]);
    let everything = data.everything();
    println!(
        "signed {} events ({} on the first remote, {} on the second, {} of them ours) in \
         {:.1} s",
        everything.len(),
        data.remotes[0].len(),
        data.remotes[1].len(),
        data.expected.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(data.expected.len(), repositories * EVENTS_PER_REPOSITORY);
    let started = Instant::now();
    for (relay, events) in [(&first, &data.remotes[0]), (&second, &data.remotes[1])] {
        assert_eq!(relay.import(events), events.len(), "strfry import");
    }
    println!(
        "imported into the two remotes in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for (name, relay) in [("first", &first), ("second", &second)] {
        match first_neg_msg_len(&relay.url()) {
            Ok(bytes) => println!(
                "strfry's first NEG-MSG for Layer 1 (kinds 30617, 30618) from the {name} \
                 remote: {bytes} bytes ({:.1}× the {STRFRY_ACCEPTS} bytes strfry accepts)",
                bytes as f64 / STRFRY_ACCEPTS as f64
            ),
            Err(error) => println!("the {name} remote's first NEG-MSG: {error}"),
        }
    }
    let mut measured = Vec::new();
    for run in 1..=runs {
        for &path in &paths {
            let one = run_path(
                path,
                &bin,
                own_port,
                [&first, &second],
                &data,
                &everything,
                run == 1,
            );
            println!(
                "run {run}/{runs} {}: {:.1} s wall, client CPU {:.1} s, own relay CPU {:.1} s, \
                 remotes CPU {:.1} s; {} events held, {}{}{}",
                path.name(),
                one.secs,
                one.client_cpu,
                one.own_cpu,
                one.remotes_cpu,
                one.held,
                exactness(&one),
                if one.code == Some(0) {
                    String::new()
                } else {
                    format!(", exit {:?}", one.code)
                },
                if one.bytes_received > 0 {
                    format!("; {:.1} MB received", one.bytes_received as f64 / 1e6)
                } else {
                    String::new()
                }
            );
            measured.push(one);
        }
    }
    report(&measured, repositories, &data, everything.len());
    println!("\nload average at the end: {}", load_average());
    ExitCode::SUCCESS
}
