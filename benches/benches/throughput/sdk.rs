//! Path (c): nostr-sdk 0.44.1's `Client::sync` (NIP-77) against the same
//! remote relay and data, into its in-memory database, called again until a
//! call brings nothing new; and path (d): `Event::verify` alone on one core.

use std::time::{Duration, Instant};

use nostr::prelude::Event;
use nostr_sdk::prelude as sdk;
use nostr_sdk::prelude::JsonUtil as _;

use super::relays::{free_port, own_cpu, RelayProcess, RelaySpec, RunDir};
use super::{dataset, Bench, Measurement};

/// Calls of `Client::sync` at most (each one that brings something is
/// followed by another).
const MAX_CALLS: usize = 20;

/// Our event as nostr 0.44's (nostr-sdk 0.44.1).
fn to_sdk(event: &Event) -> sdk::Event {
    sdk::Event::from_json(event.as_json()).expect("an event nostr 0.44 reads")
}

/// Path (c).
pub(crate) async fn nostr_sdk_sync(bench: &Bench) -> Measurement {
    let dir = RunDir::new("c");
    let port = free_port();
    let remote_url = format!("ws://127.0.0.1:{port}");
    let own_url = format!("ws://127.0.0.1:{}", free_port());
    let anns = dataset::announcements(bench.n, &[remote_url.clone(), own_url]);
    dataset::write_jsonl(&dir.0.join("announcements.jsonl"), &anns);
    let remote = RelayProcess::start(
        &RelaySpec {
            name: "remote",
            db: dir.0.join("remote-lmdb"),
            load: vec![bench.data_file.clone(), dir.0.join("announcements.jsonl")],
            write_limit: None,
            no_negentropy: false,
            own: false,
        },
        port,
    );
    assert_eq!(
        remote.loaded, bench.n,
        "the remote relay loaded the data set"
    );
    // Like our paths, the client starts with the announcements.
    let database = sdk::MemoryDatabase::with_opts(sdk::MemoryDatabaseOptions {
        events: true,
        max_events: None,
    });
    for event in &anns {
        sdk::NostrDatabase::save_event(&database, &to_sdk(event))
            .await
            .expect("saving an announcement");
    }
    let client = sdk::Client::builder().database(database).build();
    let filter = sdk::Filter::new().kinds(dataset::KINDS.map(sdk::Kind::from));
    let cpu = (own_cpu(), remote.cpu());
    let started = Instant::now();
    client
        .add_relay(&remote_url)
        .await
        .expect("adding the relay");
    client
        .try_connect_relay(&remote_url, Duration::from_secs(10))
        .await
        .expect("connecting to the relay");
    let mut calls = Vec::new();
    loop {
        let output = client
            .sync(filter.clone(), &sdk::SyncOptions::default())
            .await
            .expect("Client::sync");
        assert!(output.failed.is_empty(), "sync failed: {:?}", output.failed);
        calls.push(output.val.received.len());
        if output.val.received.is_empty() || calls.len() == MAX_CALLS {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = (own_cpu() - cpu.0, remote.cpu() - cpu.1);
    let held = client
        .database()
        .count(sdk::Filter::new())
        .await
        .expect("counting the database");
    client.shutdown().await;
    drop(remote);
    drop(dir);
    assert_eq!(held, bench.n, "nostr-sdk's database holds every event");
    Measurement {
        secs,
        status_secs: None,
        new_events: (bench.n - anns.len()) as u64,
        cpu: vec![("sync".into(), cpu.0), ("remote".into(), cpu.1)],
        note: format!("events received per call: {calls:?}"),
        sync_plus: None,
    }
}

/// Path (d): `Event::verify` over the parsed events, on this thread.
pub(crate) fn verify_alone(events: &[Event]) -> Measurement {
    let cpu = own_cpu();
    let started = Instant::now();
    for event in events {
        std::hint::black_box(event).verify().expect("a valid event");
    }
    let secs = started.elapsed().as_secs_f64();
    Measurement {
        secs,
        status_secs: None,
        new_events: events.len() as u64,
        cpu: vec![("verify".into(), own_cpu() - cpu)],
        note: String::new(),
        sync_plus: None,
    }
}
