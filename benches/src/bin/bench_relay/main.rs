//! One relay process of the throughput benchmark (`benches/benches/throughput`):
//! a nostr-relay-builder 0.44 relay over nostr-lmdb on 127.0.0.1.
//!
//! ```text
//! bench_relay --port P --db DIR [--load FILE.jsonl]... [--write-limit N] [--no-negentropy]
//! ```
//!
//! - `--load`: events (one JSON object a line) stored straight into the
//!   database before the relay listens (no rate limit, no policy);
//! - `--write-limit`: events a connection may write per minute (the relay's
//!   default is 60; the own relay of the benchmark takes the sidecar's
//!   writes, so it gets a very high one);
//! - `--no-negentropy`: a small WebSocket proxy in front of the relay answers
//!   every `NEG-OPEN` with `["NEG-ERR", <id>, "blocked: negentropy disabled"]`
//!   and forwards everything else (nostr-relay-builder has no such switch).
//!
//! Prints `ready <events loaded>` on stdout once it accepts connections; runs
//! until killed.

mod proxy;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt as _;
use nostr_lmdb::NostrLMDB;
use nostr_relay_builder::builder::RateLimit;
use nostr_relay_builder::prelude::{Event, JsonUtil as _, NostrDatabase};
use nostr_relay_builder::{LocalRelay, RelayBuilder};

/// LMDB's map size: room for a few hundred thousand events.
const MAP_SIZE: usize = 8 << 30;
/// Saves in flight while loading (nostr-lmdb batches concurrent saves into
/// one transaction).
const LOAD_CONCURRENCY: usize = 2_000;

/// The command line.
struct Args {
    port: u16,
    db: PathBuf,
    load: Vec<PathBuf>,
    write_limit: u32,
    no_negentropy: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut port = None;
    let mut db = None;
    let mut load = Vec::new();
    let mut write_limit = RateLimit::default().notes_per_minute;
    let mut no_negentropy = false;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--port" => port = Some(value()?.parse().map_err(|e| format!("--port: {e}"))?),
            "--db" => db = Some(PathBuf::from(value()?)),
            "--load" => load.push(PathBuf::from(value()?)),
            "--write-limit" => {
                write_limit = value()?
                    .parse()
                    .map_err(|e| format!("--write-limit: {e}"))?
            }
            "--no-negentropy" => no_negentropy = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        port: port.ok_or("--port is required")?,
        db: db.ok_or("--db is required")?,
        load,
        write_limit,
        no_negentropy,
    })
}

/// Stores every event of `path` into `database`; returns how many.
async fn load(database: &Arc<NostrLMDB>, path: &PathBuf) -> Result<usize, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut events = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let event = Event::from_json(line)
            .map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))?;
        events.push(event);
    }
    let count = events.len();
    let results: Vec<_> = futures_util::stream::iter(events.iter())
        .map(|event| database.save_event(event))
        .buffer_unordered(LOAD_CONCURRENCY)
        .collect()
        .await;
    for result in results {
        result.map_err(|e| format!("saving into LMDB: {e}"))?;
    }
    Ok(count)
}

async fn run(args: Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.db).map_err(|e| format!("creating the db dir: {e}"))?;
    let database = Arc::new(
        NostrLMDB::builder(&args.db)
            .map_size(MAP_SIZE)
            .build()
            .map_err(|e| format!("opening LMDB in {}: {e}", args.db.display()))?,
    );
    let mut loaded = 0;
    for path in &args.load {
        loaded += load(&database, path).await?;
    }
    let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut builder = RelayBuilder::default()
        .addr(localhost)
        .database(database.clone())
        .rate_limit(RateLimit {
            notes_per_minute: args.write_limit,
            ..RateLimit::default()
        });
    if !args.no_negentropy {
        builder = builder.port(args.port);
    }
    let relay = LocalRelay::new(builder);
    if args.no_negentropy {
        // The relay takes connections from the proxy only (no listener).
        let addr = SocketAddr::new(localhost, args.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("binding {addr}: {e}"))?;
        tokio::spawn(proxy::serve(listener, relay.clone()));
    } else {
        relay
            .run()
            .await
            .map_err(|e| format!("starting the relay: {e}"))?;
    }
    // `run` and the proxy have bound their listener: connections are accepted.
    println!("ready {loaded}");
    std::future::pending::<()>().await;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("bench_relay: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_relay: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
