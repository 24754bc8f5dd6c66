//! Runs the example host: `grasp-sync-host-example <listen address> <git root> [bootstrap relay…]`.

use std::process::ExitCode;

use grasp_sync_host_example::{HostConfig, HostRelay};
use nostr::prelude::RelayUrl;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("grasp-sync-host-example: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the arguments, starts the host and serves until Ctrl-C.
async fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: grasp-sync-host-example <listen address> <git root> [bootstrap relay…]";
    let listen = args.next().ok_or(usage)?;
    let listen = listen
        .parse()
        .map_err(|error| format!("{listen}: {error}"))?;
    let git_root = args.next().ok_or(usage)?;
    let mut config = HostConfig::new(listen, git_root);
    for relay in args {
        let url = RelayUrl::parse(&relay).map_err(|error| format!("{relay}: {error}"))?;
        config.bootstrap_relays.push(url);
    }
    let host = HostRelay::start(config)
        .await
        .map_err(|error| error.to_string())?;
    println!("serving {}", host.url());
    tokio::signal::ctrl_c()
        .await
        .map_err(|error| format!("waiting for Ctrl-C: {error}"))?;
    host.stop().await;
    Ok(())
}
