//! `grasp-sync-demo`: the whole system on loopback, in one command.
//!
//! ```sh
//! cargo run --release -p grasp-sync-examples --bin grasp-sync-demo
//! ```
//!
//! It starts an own relay (nostr-relay-builder 0.44 over LMDB on disk,
//! embedding the sync and purgatory through `grasp-sync-relay-builder`), two
//! remote relays (one serving NIP-77; one refusing it and returning at most
//! 50 events per REQ, so pagination runs) and a smart-HTTP git server, and
//! generates a NIP-34 data set on the remotes: repositories whose
//! announcements list the own relay, states and pull requests naming real
//! commits, patches, issues, replies, reactions, quotes, and noise. The
//! maintainers publish their announcements to the own relay; proactive sync
//! and purgatory do the rest, with live progress on stderr. At the end: a
//! table per relay, and a check that the own relay holds exactly the events
//! our filters match on the remotes and that the empty bare repositories
//! now hold every referenced commit. Exit 0 only if the check passes.
//!
//! It waits on explicit states only: the job done as the sidecar's `--once`
//! decides it (`grasp_sync_core::job::job_done`: historic sync complete,
//! purgatory's accounting), with every repository tracked and every event
//! released, within a deadline.
//! `RUST_LOG` selects the library's logs (default: warnings, errors only
//! on a terminal where progress is drawn in place; none of the relay
//! builder's).
//!
//! With `--metrics-addr ADDR` it serves the sidecar's status page on `/`,
//! `/metrics` and `/status` while it runs, and once it is done keeps the
//! sync running and the page up until Ctrl-C, so the page can be looked at.
#![forbid(unsafe_code)]

mod dataset;
mod oracle;
mod progress;
mod report;
mod world;

// The test harness's git servers (smart HTTP over `git http-backend`, source
// repositories, a temporary directory), its relays (a nostr-relay-builder
// relay behind a proxy that can refuse NIP-77 and clamp limits) and a client.
use grasp_sync_test_harness::git as git_support;
use grasp_sync_test_harness::relays as relay_support;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
// Reading the command line as the sidecar does, and the sidecar's `/`, `/metrics`
// and `/status`.
use grasp_purgatory::{Purgatory, PurgatoryGate, PurgatoryStatus, StoreSink};
use grasp_sync::{args, http};
use grasp_sync_core::job::{job_done, JobExpectation, JobProgress};
use grasp_sync_tokio::core::url_policy::CloneUrlPolicy;
use grasp_sync_tokio::{SyncManager, SyncStatus};
use nostr::prelude::{Event, RelayUrl};
use tokio::sync::watch;

use dataset::Endpoints;
use oracle::RemoteContent;
use progress::Progress;
use world::World;

/// Logs shown unless `RUST_LOG` says otherwise: the library's warnings; the
/// relays' own connection errors (peers hanging up) are not the demo's.
const DEFAULT_LOG: &str = "warn,nostr_relay_builder=off";
/// The same on a terminal, where progress is drawn in place: errors only.
const DEFAULT_TERMINAL_LOG: &str = "error,nostr_relay_builder=off";
/// How long the sync and purgatory may take to finish.
const DEADLINE: Duration = Duration::from_secs(90);
/// How long the sync and purgatory may take to stop.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// The self-subscriber's batch window (the default, 5 s, suits a busy relay).
const BATCH_WINDOW: Duration = Duration::from_millis(200);

/// The whole system embedded on loopback: own relay, two remote relays (one with
/// NIP-77, one REQ-only with a 50-event limit), a git server, a generated NIP-34 data
/// set; live progress, a summary and an exact-set check. Exit 0 only if the check
/// passed (1: it failed, 2: the demo could not run).
#[derive(Debug, Parser)]
#[command(name = "grasp-sync-demo")]
struct Args {
    /// Serve the status page on `/`, `/metrics` and `/status` on this address, and
    /// once done keep running until Ctrl-C so the page can be looked at.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
}

/// Runs the demo; exit 0 only if the check passed (1: it failed, 2: the
/// demo could not run).
fn main() -> ExitCode {
    let args = match args::parse_or_exit::<Args>("grasp-sync-demo") {
        Ok(args) => args,
        Err(code) => return code,
    };
    // On a terminal, log lines would tear the progress lines drawn in place.
    let default_log = if std::io::stderr().is_terminal() {
        DEFAULT_TERMINAL_LOG
    } else {
        DEFAULT_LOG
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log));
    // Colour only on a terminal, as the sidecar: a log file gets plain text.
    let ansi = grasp_sync::colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(args.metrics_addr)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(line) => {
            eprintln!("error: {line}");
            ExitCode::from(2)
        }
    };
    runtime.shutdown_timeout(STOP_WAIT);
    code
}

/// The demo; `Ok(true)` if the check passed. With `metrics_addr`, serves the status
/// page and waits for Ctrl-C once done.
async fn run(metrics_addr: Option<SocketAddr>) -> Result<bool, String> {
    let started = Instant::now();
    let world = World::start().await?;
    let remote_urls = world.remote_urls();
    let clone_url = |name: &str| world.git.url(name);
    let data = dataset::generate(&Endpoints {
        own: &world.own.url,
        remotes: [&remote_urls[0], &remote_urls[1]],
        clone_url: &clone_url,
        served: &world.served,
        git_root: &world.git_root,
    });
    for (index, events) in data.remote_events.iter().enumerate() {
        world.fill_remote(index, events).await;
    }
    let remotes: Vec<RemoteContent<'_>> = remote_urls
        .iter()
        .zip(&data.remote_events)
        .map(|(url, events)| RemoteContent { url, events })
        .collect();
    let expected = oracle::expected(&world.own.url, &data.own_announcements, &remotes);
    if let Some(id) = data.noise.iter().find(|id| expected.contains(id)) {
        return Err(format!(
            "the data set is inconsistent: noise {id} is expected"
        ));
    }
    introduce(&world, &data, expected.len(), started.elapsed());

    // The embedding: purgatory releases into the own relay, the sync stores
    // through purgatory's gate, the relay reports accepted events to the sync.
    let own = &world.own;
    let registry = prometheus::Registry::new();
    let purgatory = Purgatory::builder()
        .registry(registry.clone())
        .announcements(Arc::new(own.bridge.announcements()))
        .repos_root(&world.git_root)
        .clone_policy(
            CloneUrlPolicy::new()
                .allow_local_addresses(true)
                .allow_http(true),
        )
        .sink(Arc::new(StoreSink::new(
            own.bridge.store(own.relay.clone()),
        )))
        .build()
        .map_err(|error| format!("building purgatory: {error}"))?;
    let store = PurgatoryGate::new(own.bridge.store(own.relay.clone()), purgatory.clone());
    let manager = SyncManager::builder()
        .registry(registry.clone())
        .service_relay(own.url.clone())
        .allow_local_addresses(true)
        .batch_window(BATCH_WINDOW)
        .store(Arc::new(store))
        .build()
        .map_err(|error| format!("building the sync: {error}"))?;
    own.bridge.forward_accepted_to(manager.own_events_sender());
    let status = manager.status();
    let purgatory_status = purgatory.status();
    let shutdown = manager.shutdown_handle();
    let (http_stop, http_stopped) = watch::channel(false);
    let page = match metrics_addr {
        Some(addr) => {
            let statuses = http::Statuses {
                sync: status.clone(),
                purgatory: Some(purgatory_status.clone()),
            };
            let bound = http::serve(addr, registry, statuses, http_stopped)
                .await
                .map_err(|error| format!("cannot serve on {addr}: {error}"))?;
            Some(bound)
        }
        None => None,
    };
    let sync_started = Instant::now();
    let sync_task = tokio::spawn(manager.run());
    let purgatory_task = tokio::spawn({
        let purgatory = purgatory.clone();
        async move { purgatory.run().await }
    });
    let names: BTreeMap<RelayUrl, String> = remote_urls
        .iter()
        .map(|url| (url.clone(), world.name_of(url)))
        .collect();
    let progress = Progress::start(
        status.clone(),
        purgatory_status.clone(),
        names.clone(),
        sync_started,
    );

    publish_announcements(&own.url, &data.own_announcements).await?;
    let waited = wait_until_done(
        status.clone(),
        purgatory_status,
        data.repository_count(),
        started,
    )
    .await;
    let confirmations = progress.finish().await;
    if let Some(bound) = page {
        eprintln!("status page: http://{bound}/ (the sync keeps running; Ctrl-C to finish)");
        let _ = tokio::signal::ctrl_c().await;
    }
    let final_status = status.borrow().clone();
    let final_purgatory = purgatory.status_now();

    shutdown.shutdown();
    purgatory.shutdown();
    let _ = tokio::time::timeout(STOP_WAIT, purgatory_task).await;
    let _ = tokio::time::timeout(STOP_WAIT, sync_task).await;
    let _ = http_stop.send(true);
    if let Err(why) = &waited {
        eprintln!("{why}");
    }
    report::print_summary(
        &world,
        &names,
        &final_status,
        &final_purgatory,
        &confirmations,
    );
    let passed = report::check(&world, &data, &expected).await? && waited.is_ok();
    report::print_elapsed(started.elapsed(), sync_started.elapsed(), passed);
    world.shutdown();
    Ok(passed)
}

/// What runs where, and the data set, on stderr.
fn introduce(world: &World, data: &dataset::DataSet, expected: usize, setup: Duration) {
    eprintln!("grasp-sync demo, everything on 127.0.0.1 (set up in {setup:.1?}):");
    eprintln!(
        "  own relay  {}  nostr-relay-builder over LMDB in {}",
        world.own.url,
        world.path().display()
    );
    for (remote, events) in world.remotes.iter().zip(&data.remote_events) {
        eprintln!(
            "  {:<9}  {}  {}, holds {} events",
            remote.name,
            remote.relay.url(),
            remote.description,
            events.len()
        );
    }
    eprintln!(
        "  git server http://{}/  {} repositories (empty bare copies under the git root)",
        world.git.addr(),
        data.repos.len()
    );
    eprintln!(
        "  {} announcements published to the own relay (the sync finds the other {} on a remote); \
         {} events expected there after the sync, {} noise events must stay away",
        data.own_announcements.len(),
        data.repos.len() - data.own_announcements.len(),
        expected,
        data.noise.len()
    );
    eprintln!();
}

/// The maintainers publish their announcements to the own relay: the relay
/// stores them and its bridge hands them to the sync.
async fn publish_announcements(own: &RelayUrl, announcements: &[Event]) -> Result<(), String> {
    let mut client = relay_support::try_connect_client(own).await?;
    for announcement in announcements {
        let (accepted, message) = client.publish(announcement).await;
        if !accepted {
            return Err(format!("the own relay refused an announcement: {message}"));
        }
    }
    client.close().await;
    Ok(())
}

/// Waits until the job is done ([`job_done`], as the sidecar's `--once`
/// decides it) with every repository tracked and every event released, or
/// the deadline. Explicit states only; nothing is inferred from quiet time.
async fn wait_until_done(
    mut status: watch::Receiver<SyncStatus>,
    mut purgatory: watch::Receiver<PurgatoryStatus>,
    repositories: usize,
    started: Instant,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::from_std(started) + DEADLINE;
    loop {
        {
            let sync = status.borrow_and_update();
            let purgatory = purgatory.borrow_and_update();
            let progress = JobProgress {
                historic_sync_complete: sync.historic_sync_complete,
                repositories: sync.repositories,
                purgatory: Some(purgatory.progress()),
            };
            // The sidecar's `--once` rule, and what the demo expects beyond
            // it: every repository tracked, every event released.
            let expected = JobExpectation {
                repositories,
                every_event_released: true,
            };
            if job_done(&progress, &expected) {
                return Ok(());
            }
        }
        tokio::select! {
            changed = status.changed() => {
                changed.map_err(|_| "the sync stopped before it was done".to_owned())?;
            }
            changed = purgatory.changed() => {
                changed.map_err(|_| "purgatory stopped before it was done".to_owned())?;
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(format!(
                    "not done after {} s: historic sync {}, purgatory {}",
                    DEADLINE.as_secs(),
                    if status.borrow().historic_sync_complete { "complete" } else { "running" },
                    if purgatory.borrow().all_accounted { "accounted" } else { "busy" },
                ));
            }
        }
    }
}
