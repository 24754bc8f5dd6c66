//! Our paths: the sidecar (`SyncManager` + `RelayStore` into an own relay
//! process), the same against a remote refusing NIP-77, and the library in
//! process (`SyncManager` + `DatabaseStore` over a nostr 0.45 memory
//! database, announcements handed in as an embedding relay does); and the
//! re-sync of an already complete own relay (benchmark 3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_sync_tokio::nostr_database::NostrDatabase as _;
use grasp_sync_tokio::{DatabaseStore, RelayStore, SyncManager, SyncStatus};
use nostr::prelude::{Event, EventId, Filter, RelayUrl};
use tokio::sync::watch;

use super::counting::CountingStore;
use super::own::{OwnKind, OwnRelay};
use super::relays::{free_port, own_cpu, RelayProcess, RelaySpec, RunDir};
use super::{dataset, sync_plus, wire, Bench, Measurement};

/// How long one path may take to complete: `GRASP_BENCH_DEADLINE_SECS`,
/// else 600 s.
fn deadline() -> Duration {
    let secs = std::env::var("GRASP_BENCH_DEADLINE_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(600);
    Duration::from_secs(secs)
}
/// The batch window for live events (own events handed in, roots stored);
/// the sidecar's default is 5 s, the demo's 200 ms.
pub(crate) const BATCH_WINDOW: Duration = Duration::from_millis(200);

/// What benchmark 3 measured after one sidecar run.
#[derive(Clone, Debug)]
pub(crate) struct Resync {
    /// Bytes received from the remote relay by the fresh manager until
    /// historic sync was complete.
    pub(crate) received: u64,
    /// Bytes it sent to the remote relay.
    pub(crate) sent: u64,
    /// Seconds it took.
    pub(crate) secs: f64,
    /// Events the fresh manager stored (0 expected).
    pub(crate) stored: u64,
    /// One REQ for everything: events, bytes (sent + received).
    pub(crate) req_events: u64,
    /// Bytes of that REQ re-download.
    pub(crate) req_bytes: u64,
}

/// The most connections `RelayStore` may publish on:
/// `GRASP_BENCH_STORE_CONNECTIONS`, else its default.
fn store_connections() -> usize {
    std::env::var("GRASP_BENCH_STORE_CONNECTIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(grasp_sync_tokio::INGEST_CONNECTIONS)
}

fn url(text: &str) -> RelayUrl {
    RelayUrl::parse(text).expect("a relay URL")
}

/// Waits until historic sync is complete with `repos` repositories and
/// `stored(status)` reaches `want`; panics at the deadline.
async fn wait_complete(
    status: &mut watch::Receiver<SyncStatus>,
    repos: usize,
    want: u64,
    stored: impl Fn(&SyncStatus) -> u64,
    what: &str,
) -> SyncStatus {
    let deadline = deadline();
    let done = tokio::time::timeout(
        deadline,
        status
            .wait_for(|s| s.historic_sync_complete && s.repositories == repos && stored(s) >= want),
    )
    .await
    .map(|waited| waited.map(|status| status.clone()));
    match done {
        Ok(Ok(status)) => status,
        _ => {
            let last = status.borrow().clone();
            panic!(
                "{what}: not complete after {deadline:?} (stored {} of {want}, {} repositories, \
                 complete {}): {:?}",
                stored(&last),
                last.repositories,
                last.historic_sync_complete,
                last.engine
            );
        }
    }
}

/// The remote relay of a run: the data set plus this run's announcements.
fn start_remote(
    bench: &Bench,
    dir: &RunDir,
    anns: &str,
    no_negentropy: bool,
    port: u16,
) -> RelayProcess {
    let remote = RelayProcess::start(
        &RelaySpec {
            name: "remote",
            db: dir.0.join("remote-lmdb"),
            load: vec![bench.data_file.clone(), dir.0.join(anns)],
            write_limit: None,
            no_negentropy,
            own: false,
        },
        port,
    );
    assert_eq!(
        remote.loaded, bench.n,
        "the remote relay loaded the data set"
    );
    remote
}

/// The remote relay of a run and, in the Sync+ world, the outbox relays
/// (started first: the relay lists the remote holds name them).
fn start_world(
    bench: &Bench,
    dir: &RunDir,
    variant: Variant<'_>,
    repos: usize,
    no_negentropy: bool,
    port: u16,
) -> (RelayProcess, Option<sync_plus::Outboxes>) {
    let Some(world) = variant.world else {
        let remote = start_remote(bench, dir, "announcements.jsonl", no_negentropy, port);
        return (remote, None);
    };
    let outboxes = sync_plus::start_outboxes(world, dir);
    let lists = sync_plus::relay_lists(&outboxes, repos);
    let lists_file = dir.0.join("relay-lists.jsonl");
    dataset::write_jsonl(&lists_file, &lists);
    let remote = RelayProcess::start(
        &RelaySpec {
            name: "remote",
            db: dir.0.join("remote-lmdb"),
            load: vec![
                bench.data_file.clone(),
                dir.0.join("announcements.jsonl"),
                lists_file,
            ],
            write_limit: None,
            no_negentropy,
            own: false,
        },
        port,
    );
    assert_eq!(
        remote.loaded,
        bench.n + lists.len(),
        "the remote relay loaded the data set and the relay lists"
    );
    (remote, Some(outboxes))
}

/// The counting store of a run: in the Sync+ world it waits for the data
/// set and, with Sync+ on, the outbox-only events (not for the relay lists
/// it also takes), and records what was stored.
fn counting<S: grasp_sync_tokio::core::store::EventStore>(
    bench: &Bench,
    variant: Variant<'_>,
    inner: S,
    want: u64,
) -> Arc<CountingStore<S>> {
    match variant.world {
        None => CountingStore::new(inner, want),
        Some(world) => {
            let outbox_only: &[EventId] = if variant.sync_plus {
                &world.outbox_only
            } else {
                &[]
            };
            CountingStore::of_ids(
                inner,
                bench.base_ids.iter().chain(outbox_only).copied().collect(),
            )
        }
    }
}

/// Events the store must newly hold in `variant`: the data set but its
/// `repos` announcements, and with Sync+ on in the Sync+ world the
/// outbox-only events.
fn wanted(bench: &Bench, variant: Variant<'_>, repos: usize) -> u64 {
    let outbox_only = match variant.world {
        Some(world) if variant.sync_plus => world.outbox_only.len(),
        _ => 0,
    };
    (bench.n - repos + outbox_only) as u64
}

/// Path (a) (`no_negentropy` false, own relay `Lmdb`), (b) (the remote
/// refusing NIP-77) or (f) (own relay nostr-rs-relay): the sidecar into an
/// own relay process. With `resync`, then benchmark 3 against the same
/// relays.
pub(crate) async fn sidecar(
    bench: &Bench,
    own_kind: OwnKind,
    no_negentropy: bool,
    resync: bool,
    variant: Variant<'_>,
) -> (Measurement, Option<Resync>) {
    let dir = RunDir::new(if no_negentropy { "b" } else { "a" });
    let (remote_port, own_port) = (free_port(), free_port());
    let remote_url = format!("ws://127.0.0.1:{remote_port}");
    let own_url = format!("ws://127.0.0.1:{own_port}");
    let anns = dataset::announcements(bench.n, &[remote_url.clone(), own_url.clone()]);
    dataset::write_jsonl(&dir.0.join("announcements.jsonl"), &anns);
    let (remote, outboxes) =
        start_world(bench, &dir, variant, anns.len(), no_negentropy, remote_port);
    let own = OwnRelay::start(
        own_kind,
        &dir,
        own_port,
        &anns,
        &dir.0.join("announcements.jsonl"),
    )
    .await;
    let repos = anns.len();
    let want = wanted(bench, variant, repos);
    let store = counting(
        bench,
        variant,
        RelayStore::with_ingest_connections(
            url(&own_url),
            Duration::from_secs(10),
            store_connections(),
        ),
        want,
    );
    let manager = SyncManager::builder()
        .own_relay(url(&own_url))
        .allow_local_addresses(true)
        .batch_window(BATCH_WINDOW)
        .sync_plus(variant.sync_plus)
        .store(store.clone())
        .build()
        .expect("building the sync manager");
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let outbox_cpu = |o: &Option<sync_plus::Outboxes>| o.as_ref().map_or(0.0, |o| o.cpu());
    let cpu = (own_cpu(), remote.cpu(), own.cpu(), outbox_cpu(&outboxes));
    let started = Instant::now();
    let run = tokio::spawn(manager.run());
    let last = wait_complete(
        &mut status,
        repos,
        want,
        |s| s.engine.events_stored,
        "sidecar",
    )
    .await;
    let status_secs = started.elapsed().as_secs_f64();
    let secs = stored_secs(&store.reached(), started);
    let outbox_cpu = outbox_cpu(&outboxes) - cpu.3;
    let cpu = (own_cpu() - cpu.0, remote.cpu() - cpu.1, own.cpu() - cpu.2);
    shutdown.shutdown();
    let summary = run.await.expect("the sync manager task");
    let held = own.held(&own_url, bench.n).await;
    let (listings, listed) = store.listings();
    assert!(
        held >= bench.n as u64,
        "the own relay holds {held} events, fewer than {}",
        bench.n
    );
    let measurement = Measurement {
        secs,
        status_secs: Some(status_secs),
        new_events: want,
        cpu: {
            let mut cpus = vec![
                ("sync".into(), cpu.0),
                ("remote".into(), cpu.1),
                ("own relay".into(), cpu.2),
            ];
            if outboxes.is_some() {
                cpus.push(("outbox relays".into(), outbox_cpu));
            }
            cpus
        },
        note: format!(
            "stored {}, duplicates {}, store retries {}, own relay echoes {}, rate limits {}, \
             live consolidations {}, listings {} ({} items), NIP-77 refusals {}, \
             bytes from remote {}, {}",
            summary.events_stored,
            summary.events_duplicate,
            summary.store_retries,
            last.engine.own_echoes,
            last.engine.rate_limits,
            last.engine.consolidations,
            listings,
            listed,
            last.engine.negentropy_refusals,
            remote_bytes(&last, &remote_url).0,
            remote_events(&last, &remote_url, bench.n),
        ),
        sync_plus: Some(sync_plus_figures(
            &last,
            &remote_url,
            variant,
            outboxes.as_ref(),
            |ids| store.stored_of(ids),
        )),
    };
    let resync = if resync {
        Some(resync_run(bench, &own_url, &remote_url, repos).await)
    } else {
        None
    };
    drop((remote, own, outboxes));
    drop(dir);
    (measurement, resync)
}

/// Seconds from `started` until the counting store saw the last event.
fn stored_secs(reached: &Option<Instant>, started: Instant) -> f64 {
    reached
        .expect("historic sync complete before every event was stored")
        .duration_since(started)
        .as_secs_f64()
}

/// Events the remote sent (handed to the store), how many of them it had sent
/// lately already (the engine remembers a bounded number of ids per relay),
/// and received ÷ `distinct` (every event the remote holds matches a filter).
fn remote_events(status: &SyncStatus, remote: &str, distinct: usize) -> String {
    let remote = url(remote);
    let (received, again) = status
        .relays
        .iter()
        .find(|relay| relay.report.relay == remote)
        .map(|relay| {
            (
                relay.report.events_received,
                relay.report.events_received_again,
            )
        })
        .unwrap_or((0, 0));
    format!(
        "events from remote {received} ({again} seen again), {:.3} per distinct event",
        received as f64 / distinct.max(1) as f64
    )
}

/// (received, sent) bytes of the remote relay in `status`.
fn remote_bytes(status: &SyncStatus, remote: &str) -> (u64, u64) {
    let remote = url(remote);
    status
        .relays
        .iter()
        .find(|relay| relay.report.relay == remote)
        .map(|relay| (relay.bytes_received, relay.bytes_sent))
        .unwrap_or((0, 0))
}

/// Benchmark 3: a fresh sidecar against an own relay that already holds
/// everything, and a REQ re-download of the same set for comparison.
async fn resync_run(bench: &Bench, own_url: &str, remote_url: &str, repos: usize) -> Resync {
    let manager = SyncManager::builder()
        .own_relay(url(own_url))
        .allow_local_addresses(true)
        .batch_window(BATCH_WINDOW)
        .store(Arc::new(RelayStore::new(
            url(own_url),
            Duration::from_secs(10),
        )))
        .build()
        .expect("building the sync manager");
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let started = Instant::now();
    let run = tokio::spawn(manager.run());
    // Every root event of the own relay must be known before "complete"
    // means anything: wait for them all.
    let roots = bench.roots as u64;
    let last = wait_complete(
        &mut status,
        repos,
        roots,
        |s| s.root_events as u64,
        "re-sync",
    )
    .await;
    let secs = started.elapsed().as_secs_f64();
    shutdown.shutdown();
    let summary = run.await.expect("the sync manager task");
    let (received, sent) = remote_bytes(&last, remote_url);
    let (req_events, req_sent, req_received) = wire::req_download(remote_url, bench.n).await;
    assert_eq!(
        req_events, bench.n as u64,
        "the REQ re-download got every event"
    );
    Resync {
        received,
        sent,
        secs,
        stored: summary.events_stored,
        req_events,
        req_bytes: req_sent + req_received,
    }
}

/// What Sync+ did in one in-process run.
#[derive(Clone, Debug)]
pub(crate) struct SyncPlusFigures {
    /// Relays connected at completion.
    pub(crate) relays_connected: usize,
    /// Relays tracked at completion.
    pub(crate) relays_tracked: usize,
    /// Relays synced as some participant's outbox relay.
    pub(crate) outbox_relays: usize,
    /// Bytes received from every relay (WebSocket payload).
    pub(crate) received: u64,
    /// Bytes sent to every relay.
    pub(crate) sent: u64,
    /// Bytes received from the remote relay.
    pub(crate) remote_received: u64,
    /// Bytes sent to the remote relay.
    pub(crate) remote_sent: u64,
    /// Bytes received from the outbox relays.
    pub(crate) outbox_received: u64,
    /// Bytes sent to the outbox relays.
    pub(crate) outbox_sent: u64,
    /// `EngineStats::sync_plus_events`: events handed to the store that
    /// came only from Sync+ relays.
    pub(crate) sync_plus_events: u64,
    /// `EngineStats::sync_plus_passes`.
    pub(crate) passes: u64,
    /// Participants remembered over every repository.
    pub(crate) participants: usize,
    /// Participants' relay lists kept.
    pub(crate) relay_lists: usize,
    /// In the Sync+ world: outbox-only events in the store, of how many.
    pub(crate) outbox_only: Option<(usize, usize)>,
}

/// What our paths vary: Sync+ on or off, and the Sync+ world
/// (participants' relay lists, outbox relays) or the plain data set.
#[derive(Clone, Copy)]
pub(crate) struct Variant<'a> {
    /// `SyncManagerBuilder::sync_plus` (on by default, as in (a')).
    pub(crate) sync_plus: bool,
    /// The Sync+ world of paths (i) and (j), `None` for the plain data set.
    pub(crate) world: Option<&'a sync_plus::World>,
}

/// Path (a') (Sync+ on, the default; plain data set), (h) (Sync+ off), (i)
/// and (j) (the Sync+ world, Sync+ off and on): the library in process,
/// storing into a nostr 0.45 memory database; the announcements are in the
/// database and handed to the engine as an embedding relay's accept hook
/// would.
///
/// In the Sync+ world the remote also holds the participants' relay lists
/// and the outbox relays run beside it; the clock stops once the store
/// holds every event of the data set and, with Sync+ on, every outbox-only
/// conversation event (the relay lists it takes too are not waited for).
/// Afterwards the database is checked: every outbox-only event is in it
/// with Sync+ on, none with it off, and never any noise nor the inbox's.
pub(crate) async fn in_process(bench: &Bench, variant: Variant<'_>) -> Measurement {
    let dir = RunDir::new("a-in-process");
    let remote_port = free_port();
    let remote_url = format!("ws://127.0.0.1:{remote_port}");
    // The embedding relay's URL as announcements list it (nothing listens).
    let own_url = format!("ws://127.0.0.1:{}", free_port());
    let anns: Vec<Event> = dataset::announcements(bench.n, &[remote_url.clone(), own_url.clone()]);
    dataset::write_jsonl(&dir.0.join("announcements.jsonl"), &anns);
    let (remote, outboxes) = start_world(bench, &dir, variant, anns.len(), false, remote_port);
    let database = Arc::new(nostr_memory::MemoryDatabase::unbounded());
    for event in &anns {
        database
            .save_event(event)
            .await
            .expect("saving an announcement");
    }
    let repos = anns.len();
    let want = wanted(bench, variant, repos);
    let store = counting(bench, variant, DatabaseStore::new(database.clone()), want);
    let manager = SyncManager::builder()
        .service_relay(url(&own_url))
        .allow_local_addresses(true)
        .batch_window(BATCH_WINDOW)
        .sync_plus(variant.sync_plus)
        .store(store.clone())
        .build()
        .expect("building the sync manager");
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let own_events = manager.own_events_sender();
    let outbox_cpu = |o: &Option<sync_plus::Outboxes>| o.as_ref().map_or(0.0, |o| o.cpu());
    let cpu_before = (own_cpu(), remote.cpu(), outbox_cpu(&outboxes));
    let started = Instant::now();
    let run = tokio::spawn(manager.run());
    for event in anns {
        own_events
            .send(event)
            .await
            .expect("handing an announcement in");
    }
    let last = wait_complete(
        &mut status,
        repos,
        want,
        |s| s.engine.events_stored,
        "in process",
    )
    .await;
    let status_secs = started.elapsed().as_secs_f64();
    let secs = stored_secs(&store.reached(), started);
    let mut cpu = vec![
        ("sync".into(), own_cpu() - cpu_before.0),
        ("remote".into(), remote.cpu() - cpu_before.1),
    ];
    if outboxes.is_some() {
        cpu.push(("outbox relays".into(), outbox_cpu(&outboxes) - cpu_before.2));
    }
    shutdown.shutdown();
    let summary = run.await.expect("the sync manager task");
    let (listings, listed) = store.listings();
    let held = database
        .count(Filter::new())
        .await
        .expect("counting the database");
    assert!(
        held >= bench.n,
        "the database holds {held} events, fewer than {}",
        bench.n
    );
    let figures = sync_plus_figures(&last, &remote_url, variant, outboxes.as_ref(), |ids| {
        store.stored_of(ids)
    });
    drop((remote, outboxes));
    drop(dir);
    Measurement {
        secs,
        status_secs: Some(status_secs),
        new_events: want,
        cpu,
        note: format!(
            "stored {}, duplicates {}, NIP-77 rounds {}, live consolidations {}, \
             listings {} ({} items), bytes from remote {}, {}",
            summary.events_stored,
            summary.events_duplicate,
            last.engine.negentropy_rounds,
            last.engine.consolidations,
            listings,
            listed,
            remote_bytes(&last, &remote_url).0,
            remote_events(&last, &remote_url, bench.n),
        ),
        sync_plus: Some(figures),
    }
}

/// What Sync+ did in one run ([`SyncPlusFigures`]), read from the status at
/// completion and from what the store newly stored (`stored_of`: how many
/// of these ids); panics if an outbox-only event is missing with Sync+ on,
/// or present with it off, or if noise, an inbox reply or the inbox relay
/// itself reached the sync.
fn sync_plus_figures(
    status: &SyncStatus,
    remote: &str,
    variant: Variant<'_>,
    outboxes: Option<&sync_plus::Outboxes>,
    stored_of: impl Fn(&[EventId]) -> usize,
) -> SyncPlusFigures {
    let remote = url(remote);
    let (mut received, mut sent) = (0, 0);
    let (mut outbox_received, mut outbox_sent, mut outbox_relays) = (0, 0, 0);
    for relay in &status.relays {
        received += relay.bytes_received;
        sent += relay.bytes_sent;
        if relay.report.relay != remote && relay.reasons().contains(&"outbox") {
            outbox_received += relay.bytes_received;
            outbox_sent += relay.bytes_sent;
            outbox_relays += 1;
        }
    }
    let (remote_received, remote_sent) = remote_bytes(status, remote.as_str());
    let mut figures = SyncPlusFigures {
        relays_connected: status.relays_connected,
        relays_tracked: status.relays_tracked,
        outbox_relays,
        received,
        sent,
        remote_received,
        remote_sent,
        outbox_received,
        outbox_sent,
        sync_plus_events: status.engine.sync_plus_events,
        passes: status.engine.sync_plus_passes,
        participants: status.sync_plus.participants,
        relay_lists: status.sync_plus.relay_lists,
        outbox_only: None,
    };
    if let (Some(world), Some(outboxes)) = (variant.world, outboxes) {
        let arrived = stored_of(&world.outbox_only);
        let never = stored_of(&world.never);
        let expected = if variant.sync_plus {
            world.outbox_only.len()
        } else {
            0
        };
        assert_eq!(
            arrived, expected,
            "outbox-only conversation events in the store (Sync+ {})",
            variant.sync_plus
        );
        assert_eq!(never, 0, "noise or inbox replies reached the store");
        assert!(
            status
                .relays
                .iter()
                .all(|relay| &relay.report.relay != outboxes.inbox()),
            "the relay marked read only was synced"
        );
        figures.outbox_only = Some((arrived, world.outbox_only.len()));
    }
    figures
}
