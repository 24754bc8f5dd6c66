//! The whole job at the network's scale (issue 46): the `grasp-sync` sidecar run as an
//! operator runs it, against real peers, until every repository is served. A plain
//! program, not criterion.
//!
//! ```text
//! cargo bench -p grasp-sync-benches --bench whole_job
//! GRASP_BENCH_REPOSITORIES=400 cargo bench -p grasp-sync-benches --bench whole_job   # one size
//! GRASP_BENCH_PARTS=live cargo bench -p grasp-sync-benches --bench whole_job         # live latency only
//! ```
//!
//! **Part `job`**, for each size of `GRASP_BENCH_REPOSITORIES` (default `400,1000`):
//! the data set of `data.rs` (22 events per repository, every commit on one of 5 git
//! hosts over smart HTTP, `hosts.rs`) on a remote strfry (`strfry import`); a fresh
//! empty strfry as the own relay; an empty git root; then `grasp-sync --once` with the
//! remote as bootstrap relay, `--git-root`, `--allow-local-addresses`,
//! `--allow-insecure-clone-urls` and its defaults otherwise (5 fetches at once and 30 a
//! minute per host). It reports time to served (spawn to exit; `--once` exits when
//! every held event is released), CPU user and system of the sidecar with its git
//! processes, its peak RSS, the own relay's CPU, the git processes spawned and the
//! data set's politeness floor, then checks what is served: every repository's
//! `refs/heads/main` and `HEAD` as its state says and each pull request's and update's
//! tip at `refs/nostr/<id>`, and every event on the own relay.
//!
//! **Part `live`**: live latency. 200 repositories on 20 hosts (so no host is over its
//! budget at 5 states a second) are synced and served by a running sidecar (no
//! `--once`); then for each repository a commit is pushed to its host and, 5 a second,
//! a new state naming it is published to the remote relay. The latency of each is from
//! just before the state is sent to the remote (an upper bound of its arrival at the
//! sidecar) to the served repository's `refs/heads/main` naming the new commit (read
//! from the ref files every 5 ms; confirmed with `git ls-remote` at the end). It
//! reports p50, p99 and the maximum.
//!
//! `GRASP_BENCH_KEEP=1` keeps each run's directory (the sidecar's log, the git
//! processes' log `counting-git/starts.log`, the git root); `GRASP_BENCH_SIDECAR_LOG`
//! sets the sidecar's `RUST_LOG` (default `warn`).
//!
//! Needs strfry (`$STRFRY_BIN`, else `.ci/install-strfry`): without it the program
//! prints one line and exits 0. Under `cargo test` (no `--bench` argument) it does
//! nothing.

use grasp_sync_test_harness::git as git_support;
#[path = "../throughput/relays.rs"]
#[allow(dead_code, unused_imports)]
mod relays;

mod data;
mod hosts;
mod live;
mod served;
mod sidecar;
mod world;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use grasp_sync_benches::load_average;
use grasp_sync_test_support::strfry::find_strfry;

use data::{politeness_floor, EVENTS_PER_REPOSITORY};
use relays::{cpu_seconds, run_base};
use sidecar::{Cost, CountingPath};
use world::World;

/// Git hosts of the `job` part.
const JOB_HOSTS: usize = 5;
/// The purgatory's default fetches a minute per host.
const PER_MINUTE: usize = 30;
/// The sidecar's `--timeout`, seconds.
const TIMEOUT_SECS: u64 = 3_600;

/// A temporary directory under the throughput benchmark's `run_base` (`GRASP_BENCH_DIR`,
/// else `/dev/shm` when there is one), removed on drop unless `GRASP_BENCH_KEEP`.
pub(crate) struct RunDir(PathBuf);

impl RunDir {
    fn new(label: &str) -> RunDir {
        let base = run_base();
        let dir = base.join(format!("whole-job-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a run directory");
        RunDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::env::var_os("GRASP_BENCH_KEEP").is_some() {
            println!("kept {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The sizes of the `job` part.
fn sizes() -> Vec<usize> {
    std::env::var("GRASP_BENCH_REPOSITORIES")
        .unwrap_or_else(|_| "400,1000".to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
        .collect()
}

/// Whether `part` is among `GRASP_BENCH_PARTS` (default both).
fn part_chosen(part: &str) -> bool {
    std::env::var("GRASP_BENCH_PARTS")
        .map(|parts| parts.split(',').any(|p| p.trim() == part))
        .unwrap_or(true)
}

/// One size of the `job` part.
#[derive(Debug)]
struct JobRun {
    label: &'static str,
    repositories: usize,
    events: usize,
    floor: u64,
    cost: Cost,
    own_cpu: f64,
    fetches: usize,
    verdict: String,
}

fn main() -> ExitCode {
    if std::env::var_os(sidecar::AS_SIDECAR).is_some() {
        return grasp_sync::main();
    }
    if std::env::var_os(hosts::AS_GIT_HOSTS).is_some() {
        return hosts::serve();
    }
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("whole_job: run with `cargo bench -p grasp-sync-benches --bench whole_job`");
        return ExitCode::SUCCESS;
    }
    let bin = match find_strfry() {
        Ok(bin) => bin,
        Err(reason) => {
            println!(
                "whole_job: skipped: strfry not available ({reason}); set STRFRY_BIN or see \
                 .ci/install-strfry"
            );
            return ExitCode::SUCCESS;
        }
    };
    // Reads the clock tick rate (a `getconf` child) before any child is measured.
    let _ = sidecar::children_cpu();
    println!(
        "whole_job: strfry {}; {} CPUs; load average {}",
        bin.display(),
        std::thread::available_parallelism().map_or(1, usize::from),
        load_average()
    );
    let mut failed = false;
    if part_chosen("job") {
        let sidecars = sidecars();
        let mut runs = Vec::new();
        for n in sizes() {
            for run in job(&bin, n, &sidecars) {
                failed |= run.verdict != "exact";
                runs.push(run);
            }
        }
        for sidecar in &sidecars {
            let these: Vec<&JobRun> = runs
                .iter()
                .filter(|run| run.label == sidecar.label)
                .collect();
            report_jobs(sidecar.label, &these);
        }
    }
    if part_chosen("live") {
        failed |= !live::run(&bin);
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The sidecars the `job` part runs: ours (this build), and before it the baseline
/// `GRASP_BENCH_BASELINE` names (a `grasp-sync` binary built from another commit), if
/// any, on the same data in the same run.
fn sidecars() -> Vec<Sidecar> {
    let baseline = std::env::var_os("GRASP_BENCH_BASELINE").map(|path| Sidecar {
        label: "baseline",
        program: Some(PathBuf::from(path)),
    });
    baseline
        .into_iter()
        .chain([Sidecar {
            label: "this build",
            program: None,
        }])
        .collect()
}

/// A sidecar to run: a binary of its own, or this program as the sidecar.
#[derive(Clone, Debug)]
struct Sidecar {
    label: &'static str,
    program: Option<PathBuf>,
}

/// The `job` part at `n` repositories: the data set made once, then each of `sidecars`
/// from a fresh own relay and an empty git root.
fn job(bin: &Path, n: usize, sidecars: &[Sidecar]) -> Vec<JobRun> {
    let mut world = World::make(bin, &format!("job-{n}"), JOB_HOSTS, n);
    let data = &world.data;
    let floor = politeness_floor(&data.repositories, JOB_HOSTS, PER_MINUTE);
    println!(
        "\n## {n} repositories, {} events, {JOB_HOSTS} git hosts: made in {:.1} s; politeness floor {floor} s",
        data.events.len(),
        world.made_in
    );
    let mut runs = Vec::new();
    for (k, sidecar) in sidecars.iter().enumerate() {
        let own = world.own_relay(bin);
        let base = world.dir.path().join(format!("run-{k}"));
        let git_root = base.join("git-root");
        std::fs::create_dir_all(&git_root).expect("the git root");
        let counting = CountingPath::install(&base);
        let args = world.sidecar_args(&git_root, Some(TIMEOUT_SECS));
        let fetches_before = world.hosts.fetches();
        let own_before = cpu_seconds(&format!("/proc/{}/stat", own.pid()));
        let cost = sidecar::run_once(
            sidecar.program.as_deref(),
            &args,
            &counting,
            &base.join("sidecar.log"),
        );
        let own_cpu = cpu_seconds(&format!("/proc/{}/stat", own.pid())) - own_before;
        let fetches = world.hosts.fetches() - fetches_before;
        let verdict = served::check(&world.data, &git_root, &own);
        println!(
            "{}: time to served {:.1} s (floor + 5 s = {} s); CPU {:.1} s (user {:.1}, sys {:.1}); \
             peak RSS {:.0} MB; own relay CPU {:.1} s; git processes {}; fetches served {fetches}; \
             exit {:?}; {verdict}",
            sidecar.label,
            cost.secs,
            floor + 5,
            cost.user + cost.sys,
            cost.user,
            cost.sys,
            cost.peak_rss as f64 / 1e6,
            own_cpu,
            cost.git_processes,
            cost.code,
        );
        let by_command: Vec<String> = counting
            .by_command()
            .iter()
            .map(|(command, count)| format!("{command} {count}"))
            .collect();
        println!("  git processes by command: {}", by_command.join(", "));
        if cost.code != Some(0) {
            println!("the sidecar's last lines:\n{}", cost.log_tail);
        }
        runs.push(JobRun {
            label: sidecar.label,
            repositories: n,
            events: world.data.events.len(),
            floor,
            cost,
            own_cpu,
            fetches,
            verdict,
        });
    }
    runs
}

/// The table of the `job` part, with per-repository figures and their ratio to the
/// first size's.
fn report_jobs(label: &str, runs: &[&JobRun]) {
    println!("\n### {label}");
    println!(
        "\n| repositories | events | time to served s | floor s | ÷ (floor + 5) | CPU s (user + sys) | \
         CPU ms / repo | peak RSS MB | own relay CPU s | own relay ms / repo | git processes | \
         per repo | fetches | served |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for run in runs {
        let n = run.repositories as f64;
        let cpu = run.cost.user + run.cost.sys;
        println!(
            "| {} | {} | {:.1} | {} | {:.3} | {:.1} ({:.1} + {:.1}) | {:.1} | {:.0} | {:.1} | {:.1} | {} | {:.1} | {} | {} |",
            run.repositories,
            run.events,
            run.cost.secs,
            run.floor,
            run.cost.secs / (run.floor + 5) as f64,
            cpu,
            run.cost.user,
            run.cost.sys,
            1e3 * cpu / n,
            run.cost.peak_rss as f64 / 1e6,
            run.own_cpu,
            1e3 * run.own_cpu / n,
            run.cost.git_processes,
            run.cost.git_processes as f64 / n,
            run.fetches,
            run.verdict,
        );
    }
    if let [first, .., last] = runs {
        let (first, last) = (*first, *last);
        let per = |run: &JobRun, value: f64| value / run.repositories as f64;
        let ratio = |f: &dyn Fn(&JobRun) -> f64| per(last, f(last)) / per(first, f(first));
        println!(
            "\nper repository, {} against {}: CPU {:.2}×, own relay CPU {:.2}×, git processes {:.2}×, \
             peak RSS {:.2}× (total, not per repository: {:.2}×)",
            last.repositories,
            first.repositories,
            ratio(&|run| run.cost.user + run.cost.sys),
            ratio(&|run| run.own_cpu),
            ratio(&|run| run.cost.git_processes as f64),
            ratio(&|run| run.cost.peak_rss as f64),
            last.cost.peak_rss as f64 / first.cost.peak_rss.max(1) as f64,
        );
    }
    let _ = EVENTS_PER_REPOSITORY;
}
