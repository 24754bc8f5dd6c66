//! The sidecar's run: the command line read, logs set up, the own relay probed,
//! `SyncManager` + `RelayStore` (+ `Purgatory` behind a `PurgatoryGate`) wired, the
//! HTTP server started, and the wait (`--once` or a signal).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::PurgatoryGate;
use grasp_sync_tokio::core::store::EventStore;
use grasp_sync_tokio::{RelayStore, SyncManager};
use tokio::sync::watch;
use tracing::info;

use crate::cli::{self, Args, Settings};
use crate::{args, http, once, purgatory};

/// How long the own relay may take to accept the first connection.
const OWN_RELAY_PROBE: Duration = Duration::from_secs(5);

/// Runs the `grasp-sync` command: reads the command line, runs until done (`--once`)
/// or a signal, and returns the exit code (see `grasp-sync --help`).
pub fn main() -> ExitCode {
    let args = match args::parse_or_exit::<Args>("grasp-sync") {
        Ok(args) => args,
        Err(code) => return code,
    };
    init_logs(args.log_json);
    let settings = match cli::settings(&args) {
        Ok(settings) => settings,
        Err(line) => {
            eprintln!("error: {line}");
            return ExitCode::from(2);
        }
    };
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
    match runtime.block_on(run(settings)) {
        Ok(code) => code,
        Err(line) => {
            eprintln!("error: {line}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, human-readable or JSON, filtered by `RUST_LOG` (default
/// `info`); colour only on a terminal (see [`colour`]).
fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Whether logs are coloured: only on a terminal, and not when `NO_COLOR` is set
/// to anything but the empty string (<https://no-color.org>). A log file or a
/// journal gets plain text.
pub fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

async fn run(settings: Settings) -> Result<ExitCode, String> {
    probe_own_relay(&settings).await?;
    let registry = prometheus::Registry::new();
    let store = RelayStore::new(settings.own_relay.clone(), Duration::from_secs(10));
    let purgatory = purgatory::build(&settings, &store, &registry)?;
    // With purgatory, states and PRs wait for their commits before they
    // reach the own relay.
    let sync_store: Arc<dyn EventStore> = match &purgatory {
        Some(purgatory) => Arc::new(PurgatoryGate::new(store.clone(), purgatory.clone())),
        None => Arc::new(store.clone()),
    };
    let mut builder = SyncManager::builder()
        .own_relay(settings.own_relay.clone())
        .allow_local_addresses(settings.allow_local_addresses)
        .store(sync_store)
        .registry(registry.clone());
    for url in &settings.service_urls {
        builder = builder.service_relay(url.clone());
    }
    for url in &settings.bootstrap_relays {
        builder = builder.bootstrap_relay(url.clone());
    }
    // Given by a flag or its variable, Sync+'s switch and index relays and the
    // NIP-77 switch win over
    // what `from_env` reads (the same variables).
    if let Some(enabled) = settings.sync_plus {
        builder = builder.sync_plus(enabled);
    }
    if let Some(disabled) = settings.no_negentropy {
        builder = builder.negentropy(!disabled);
    }
    for url in &settings.index_relays {
        builder = builder.index_relay(url.clone());
    }
    if let Some(purgatory) = &purgatory {
        // Every announcement the own relay serves, by whatever path it came, is
        // served by purgatory from now on: no listing of every announcement again.
        let purgatory = purgatory.clone();
        builder = builder.on_own_announcement(move |event| purgatory.track_announcement(event));
    }
    let manager = builder
        .from_env()
        .map_err(|error| error.to_string())?
        .build()
        .map_err(|error| error.to_string())?;
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let (http_stop, http_stopped) = watch::channel(false);
    if let Some(addr) = settings.metrics_addr {
        let statuses = http::Statuses {
            sync: status.clone(),
            purgatory: purgatory.as_ref().map(grasp_purgatory::Purgatory::status),
        };
        http::serve(addr, registry, statuses, http_stopped)
            .await
            .map_err(|error| format!("cannot serve on {addr}: {error}"))?;
    }
    if let Some(purgatory) = &purgatory {
        purgatory.pause_fetches(HISTORIC_FETCH_PAUSE);
        tokio::spawn(resume_fetches_when_historic_sync_completes(
            status.clone(),
            purgatory.clone(),
        ));
    }
    let run = tokio::spawn(manager.run());
    let purgatory_run = purgatory
        .clone()
        .map(|purgatory| tokio::spawn(async move { purgatory.run().await }));
    let code = if settings.once {
        once::wait_once(
            &mut status,
            purgatory.as_ref(),
            settings.timeout,
            settings.summary_json,
            wait_for_signal(),
        )
        .await
    } else {
        wait_for_signal().await;
        ExitCode::SUCCESS
    };
    shutdown.shutdown();
    if let Some(purgatory) = &purgatory {
        purgatory.shutdown();
    }
    if let Some(task) = purgatory_run {
        if let Ok(Err(error)) = task.await {
            tracing::warn!(%error, "purgatory could not save its state");
        }
    }
    let _ = http_stop.send(true);
    let summary = run.await.map_err(|error| error.to_string())?;
    info!(
        stored = summary.events_stored,
        duplicates = summary.events_duplicate,
        rejected = summary.events_rejected,
        "stopped"
    );
    Ok(code)
}

/// The longest purgatory's fetches wait for the first historic sync at start: it brings
/// a repository's events in waves (its state first, its pull requests a moment later),
/// and fetching at the first wave would fetch again at the next (see
/// [`grasp_purgatory::Purgatory::pause_fetches`]). A sync still running after this
/// (relays slow to answer) lets fetches start anyway.
const HISTORIC_FETCH_PAUSE: Duration = Duration::from_secs(60);

/// Resumes `purgatory`'s fetches once the sync says its historic sync is complete
/// (the first time: a later one, for a new repository, pauses nothing).
async fn resume_fetches_when_historic_sync_completes(
    mut status: watch::Receiver<grasp_sync_tokio::SyncStatus>,
    purgatory: grasp_purgatory::Purgatory,
) {
    let _ = status
        .wait_for(|status| status.historic_sync_complete)
        .await;
    info!("historic sync complete: purgatory fetches");
    purgatory.resume_fetches();
}

/// The own relay must accept a connection: without it nothing can be read
/// or stored.
async fn probe_own_relay(settings: &Settings) -> Result<(), String> {
    let url = settings.own_relay.as_str();
    let connecting = tokio_tungstenite::connect_async(url);
    match tokio::time::timeout(OWN_RELAY_PROBE, connecting).await {
        Ok(Ok((mut socket, _))) => {
            let _ = socket.close(None).await;
            Ok(())
        }
        Ok(Err(error)) => Err(format!("own relay {url} is unreachable: {error}")),
        Err(_) => Err(format!(
            "own relay {url} is unreachable: no answer within {OWN_RELAY_PROBE:?}"
        )),
    }
}

/// SIGINT or SIGTERM.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None), "a file or a pipe gets plain text");
    }
}
