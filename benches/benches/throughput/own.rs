//! The own relay of a run, of either kind the benchmark measures against
//! (`bench_relay` over LMDB, or the real nostr-rs-relay 0.8.12), started
//! fresh holding the run's announcements; and its ingest ceiling: how fast
//! it takes the data set's events when they are blasted at it
//! (`ingest::blast`), with nothing to sync.

use std::path::Path;

use nostr::prelude::Event;

use super::ingest::{self, Blast};
use super::relays::{own_cpu, NostrRsRelay, RelayProcess, RelaySpec, RunDir};
use super::{dataset, wire, Bench, Measurement};

/// Events per minute the own `bench_relay` lets one connection write
/// (nostr-relay-builder's default is 60; nostr-rs-relay has no limit by
/// default).
pub(crate) const OWN_WRITE_LIMIT: u32 = 1_000_000_000;

/// Which relay is the own relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnKind {
    /// `bench_relay`: nostr-relay-builder 0.44.1 over nostr-lmdb.
    Lmdb,
    /// nostr-rs-relay 0.8.12 over SQLite, its defaults.
    NostrRsRelay,
}

impl OwnKind {
    /// Its name in the tables.
    pub(crate) fn name(self) -> &'static str {
        match self {
            OwnKind::Lmdb => "nostr-relay-builder 0.44.1 + LMDB",
            OwnKind::NostrRsRelay => "nostr-rs-relay 0.8.12 (SQLite)",
        }
    }
}

/// A running own relay; stopped on drop.
pub(crate) enum OwnRelay {
    /// A `bench_relay` process.
    Lmdb(RelayProcess),
    /// A nostr-rs-relay process.
    NostrRsRelay(NostrRsRelay),
}

impl OwnRelay {
    /// Starts a fresh own relay of `kind` on `port` in `dir`, holding
    /// `announcements` (written to `announcements_file` too): `bench_relay`
    /// loads them before it listens; nostr-rs-relay has no loader that
    /// indexes tags, so they are published to it, outside any timed span.
    pub(crate) async fn start(
        kind: OwnKind,
        dir: &RunDir,
        port: u16,
        announcements: &[Event],
        announcements_file: &Path,
    ) -> OwnRelay {
        match kind {
            OwnKind::Lmdb => OwnRelay::Lmdb(RelayProcess::start(
                &RelaySpec {
                    name: "own",
                    db: dir.0.join("own-lmdb"),
                    load: vec![announcements_file.to_path_buf()],
                    write_limit: Some(OWN_WRITE_LIMIT),
                    no_negentropy: false,
                    own: true,
                },
                port,
            )),
            OwnKind::NostrRsRelay => {
                let relay = NostrRsRelay::start(&dir.0.join("own-nostr-rs-relay"), port);
                let url = format!("ws://127.0.0.1:{port}");
                ingest::wait_listening(&url).await;
                let frames = ingest::event_frames(announcements);
                let loaded = ingest::blast(&url, &frames, 1, 100).await;
                assert_eq!(
                    loaded.stored,
                    announcements.len() as u64,
                    "nostr-rs-relay took the announcements: {loaded:?}"
                );
                OwnRelay::NostrRsRelay(relay)
            }
        }
    }

    /// Events it holds (at `url`, of a data set of `n`): NIP-45 `COUNT`
    /// where the relay has it; nostr-rs-relay 0.8.12 has not (`NOTICE
    /// "could not parse command"`), and its SQLite has no result cap, so one
    /// REQ for the data set's kinds read to EOSE.
    pub(crate) async fn held(&self, url: &str, n: usize) -> u64 {
        match self {
            OwnRelay::Lmdb(_) => wire::count(url).await,
            OwnRelay::NostrRsRelay(_) => wire::req_download(url, n).await.0,
        }
    }

    /// CPU seconds it used so far.
    pub(crate) fn cpu(&self) -> f64 {
        match self {
            OwnRelay::Lmdb(relay) => relay.cpu(),
            OwnRelay::NostrRsRelay(relay) => relay.cpu(),
        }
    }
}

/// Connections the ceiling is blasted over: `GRASP_BENCH_CEILING_CONNECTIONS`
/// (comma-separated counts; the best is the ceiling), 8 by default.
fn ceiling_connections() -> Vec<usize> {
    std::env::var("GRASP_BENCH_CEILING_CONNECTIONS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .filter(|n| *n > 0)
                .collect::<Vec<usize>>()
        })
        .filter(|list| !list.is_empty())
        .unwrap_or_else(|| vec![CEILING_CONNECTIONS])
}

/// Connections of the ceiling blast by default (see `BENCHMARKS.md` for the
/// sweep that chose it).
const CEILING_CONNECTIONS: usize = 8;
/// `EVENT`s in flight per connection during the ceiling blast.
const CEILING_IN_FLIGHT: usize = 500;

/// The ingest ceiling of a fresh own relay of `kind`: every event the sync
/// would bring (the data set without its announcements, which the relay
/// holds), blasted at it, for each connection count asked; the fastest
/// blast is the measurement. Every event must be stored.
pub(crate) async fn ceiling(bench: &Bench, kind: OwnKind) -> Measurement {
    let mut best: Option<Measurement> = None;
    for connections in ceiling_connections() {
        let dir = RunDir::new("ceiling");
        let port = super::relays::free_port();
        let url = format!("ws://127.0.0.1:{port}");
        let anns = dataset::announcements(bench.n, std::slice::from_ref(&url));
        let anns_file = dir.0.join("announcements.jsonl");
        dataset::write_jsonl(&anns_file, &anns);
        // Listening once started: `bench_relay` says `ready` after binding,
        // nostr-rs-relay is waited for.
        let own = OwnRelay::start(kind, &dir, port, &anns, &anns_file).await;
        let cpu = (own_cpu(), own.cpu());
        let blast = ingest::blast(&url, &bench.frames, connections, CEILING_IN_FLIGHT).await;
        let cpu = (own_cpu() - cpu.0, own.cpu() - cpu.1);
        assert_eq!(
            blast.stored,
            bench.frames.len() as u64,
            "the {} relay stored every event blasted at it: {blast:?}",
            kind.name()
        );
        let measured = measurement(&blast, connections, cpu);
        eprintln!(
            "    ceiling of {}, {connections} connections: {:.0} events/s",
            kind.name(),
            measured.rate()
        );
        if best.as_ref().is_none_or(|b| measured.rate() > b.rate()) {
            best = Some(measured);
        }
        drop(own);
        drop(dir);
    }
    best.expect("at least one connection count")
}

/// A blast as a measurement of the table.
fn measurement(blast: &Blast, connections: usize, cpu: (f64, f64)) -> Measurement {
    Measurement {
        secs: blast.secs,
        status_secs: None,
        new_events: blast.stored,
        cpu: vec![("publisher".into(), cpu.0), ("own relay".into(), cpu.1)],
        note: format!(
            "{connections} connections × {CEILING_IN_FLIGHT} in flight; stored {}, duplicates {}, \
             rate-limited {}, refused {}",
            blast.stored, blast.duplicates, blast.rate_limited, blast.refused
        ),
        sync_plus: None,
    }
}
