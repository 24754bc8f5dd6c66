//! The `grasp-sync` sidecar against the real nostr-rs-relay 0.8.12, the REQ-only relay
//! GRASP operators run: no NIP-77, no EOSE for a `limit: 0` REQ, 32 subscriptions per
//! connection, queries aborted without EOSE when the reader falls 2 s behind.
//!
//! Two nostr-rs-relays hold 100 repositories with 2 000 root events, a NIP-22 comment on
//! every root (`E` and `e`), statuses (`e` and `a`) on a quarter of them, and noise; a
//! third nostr-rs-relay is the own relay and starts empty. The sidecar, given only the
//! first remote as bootstrap relay, must bring exactly the repositories' events to the
//! own relay, then keep both connections through several batch timeouts (shortened to
//! 4 s) with no reconnect while live events keep arriving. What each relay sent beyond
//! the distinct events it holds is printed (`--nocapture`) with its cause.
//!
//! Needs the nostr-rs-relay binary (`.ci/install-nostr-rs-relay`; see
//! `support::nostr_rs_relay_binary`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/http.rs"]
mod http;
use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use http::{free_port, get};
use nostr::prelude::*;
use support::{announcement, connect_client, sign, tag, NostrRsRelay};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync");
/// Bound on the historic sync.
const SYNC_DEADLINE: Duration = Duration::from_secs(180);
/// The batch timeout the sidecar runs with here (production: 60 s).
const BATCH_TIMEOUT_SECS: u64 = 4;
/// Batch timeouts the connections must survive after historic sync.
const TIMEOUTS_SURVIVED: u64 = 3;
const REPOSITORIES: usize = 100;
const ROOTS_PER_REPOSITORY: usize = 20;

/// Which remote relays hold an event.
#[derive(Clone, Copy, PartialEq)]
enum Holder {
    First,
    Second,
    Both,
}

impl Holder {
    /// Root `n`'s relays: a third on the first only, a third on both, a third on the
    /// second only.
    fn of_root(n: usize) -> Holder {
        match n % 3 {
            0 => Holder::First,
            1 => Holder::Both,
            _ => Holder::Second,
        }
    }

    fn first(self) -> bool {
        self != Holder::Second
    }

    fn second(self) -> bool {
        self != Holder::First
    }
}

/// The data set, placed on the two remotes.
struct Dataset {
    first: Vec<Event>,
    second: Vec<Event>,
    /// What the own relay must hold after the sync: announcements listing it, root
    /// events, comments, statuses.
    expected: BTreeSet<EventId>,
    /// Announcements that do not list the own relay (discovery only, never stored).
    foreign: BTreeSet<EventId>,
    /// Events that may reach us twice over REQ because two of our filters match them
    /// (a comment's `e` and `E`, a status's `e` and `a`), per remote.
    double_matched: [usize; 2],
    /// A repository to publish live events for.
    live_repo: String,
}

fn dataset(own: &RelayUrl, first: &RelayUrl, second: &RelayUrl) -> Dataset {
    let base = Timestamp::now().as_secs() - 100_000;
    let maintainers: Vec<Keys> = (0..10).map(|_| Keys::generate()).collect();
    let users: Vec<Keys> = (0..20).map(|_| Keys::generate()).collect();
    let (mut on_first, mut on_second) = (Vec::new(), Vec::new());
    let mut expected = BTreeSet::new();
    let mut double_matched = [0, 0];
    let mut place = |event: Event, holder: Holder, double: bool| {
        if holder.first() {
            on_first.push(event.clone());
            double_matched[0] += usize::from(double);
        }
        if holder.second() {
            on_second.push(event.clone());
            double_matched[1] += usize::from(double);
        }
    };
    let mut live_repo = String::new();
    let mut root_number = 0;
    for r in 0..REPOSITORIES {
        let owner = &maintainers[r % maintainers.len()];
        let identifier = format!("repo-{r}");
        let announced = announcement(owner, &identifier, &[own, first, second], base + r as u64);
        expected.insert(announced.id);
        place(announced, Holder::Both, false);
        let repo = RepoRef::new(owner.public_key(), &identifier)
            .unwrap()
            .to_string();
        for k in 0..ROOTS_PER_REPOSITORY {
            let user = &users[root_number % users.len()];
            let at = base + 1_000 + root_number as u64;
            let kind = if k % 2 == 0 { 1621 } else { 1617 };
            let root = sign(
                user,
                kind,
                &format!("root {root_number}"),
                vec![tag(&["a", &repo])],
                at,
            );
            let holder = Holder::of_root(root_number);
            let root_hex = root.id.to_hex();
            let comment = sign(
                &users[(root_number + 1) % users.len()],
                1111,
                &format!("comment on {root_number}"),
                vec![
                    tag(&["E", &root_hex]),
                    tag(&["e", &root_hex]),
                    tag(&["K", &kind.to_string()]),
                ],
                at + 50_000,
            );
            expected.insert(root.id);
            expected.insert(comment.id);
            if k % 4 == 0 {
                let status = sign(
                    owner,
                    1630,
                    "open",
                    vec![tag(&["e", &root_hex, "", "root"]), tag(&["a", &repo])],
                    at + 60_000,
                );
                expected.insert(status.id);
                place(status, holder, true);
            }
            place(root, holder, false);
            place(comment, holder, true);
            root_number += 1;
        }
        live_repo = repo;
    }
    // Announcements of repositories that do not list us: discovery only.
    let stranger = Keys::generate();
    let mut foreign = BTreeSet::new();
    for n in 0..10 {
        let elsewhere = announcement(&stranger, &format!("elsewhere-{n}"), &[first], base + n);
        foreign.insert(elsewhere.id);
        place(elsewhere, Holder::First, false);
    }
    let noise = sign(&users[0], 1, "noise", Vec::new(), base);
    place(noise, Holder::Both, false);
    Dataset {
        first: on_first,
        second: on_second,
        expected,
        foreign,
        double_matched,
        live_repo,
    }
}

/// Every event on `relay` (nostr-rs-relay does not clamp a REQ without `limit`).
async fn ids_on(relay: &RelayUrl) -> BTreeSet<EventId> {
    let mut client = connect_client(relay).await;
    let events = client.req_all(Filter::new()).await;
    client.close().await;
    events.into_iter().map(|event| event.id).collect()
}

async fn status(port: u16) -> Option<serde_json::Value> {
    serde_json::from_str(&get(port, "/status").await?).ok()
}

/// Connection attempts started to the relay on `relay_port`
/// (`grasp_sync_connection_attempts_total{result="started"}`).
fn connection_attempts(metrics: &str, relay_port: u16) -> f64 {
    let needle = format!("127.0.0.1:{relay_port}");
    metrics
        .lines()
        .filter(|line| line.starts_with("grasp_sync_connection_attempts_total{"))
        .filter(|line| line.contains(&needle) && line.contains("result=\"started\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The counter `field` of the relay on `relay_port` in a `/status` document.
fn relay_counter(status: &serde_json::Value, relay_port: u16, field: &str) -> u64 {
    let needle = format!("127.0.0.1:{relay_port}");
    status["relays"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|relay| {
            relay["relay"]
                .as_str()
                .is_some_and(|url| url.contains(&needle))
        })
        .and_then(|relay| relay[field].as_u64())
        .unwrap_or(0)
}

fn sidecar(own: &RelayUrl, bootstrap: &RelayUrl, metrics_port: u16) -> Child {
    Command::new(BIN)
        .args([
            "--own-relay",
            own.as_str(),
            "--bootstrap-relay",
            bootstrap.as_str(),
            "--allow-local-addresses",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .env(
            "NGIT_SYNC_BATCH_TIMEOUT_SECS",
            BATCH_TIMEOUT_SECS.to_string(),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync")
}

/// Publishes `event` to `remote` and waits (bounded) until it is on `own`.
async fn arrives_live(event: &Event, remote: &RelayUrl, own: &RelayUrl) {
    let mut client = connect_client(remote).await;
    assert_eq!(client.publish_all(std::slice::from_ref(event), 1).await, 1);
    client.close().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut own_client = connect_client(own).await;
        let found = own_client.req_all(Filter::new().id(event.id)).await;
        own_client.close().await;
        if !found.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "live event {} from {remote} never reached the own relay",
            event.id
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_exactly_from_two_nostr_rs_relays_and_never_reconnects_them() {
    let own = NostrRsRelay::start().await;
    let first = NostrRsRelay::start().await;
    let second = NostrRsRelay::start().await;
    let data = dataset(&own.url(), &first.url(), &second.url());
    assert!(data.expected.len() >= 2 * REPOSITORIES * ROOTS_PER_REPOSITORY);
    for (relay, events) in [(&first, &data.first), (&second, &data.second)] {
        let mut client = connect_client(&relay.url()).await;
        assert_eq!(client.publish_all(events, 200).await, events.len());
        client.close().await;
    }

    let metrics_port = free_port();
    let mut child = sidecar(&own.url(), &first.url(), metrics_port);
    let started = tokio::time::Instant::now();
    let deadline = started + SYNC_DEADLINE;
    let complete = loop {
        if let Some(status) = status(metrics_port).await {
            if status["historic_sync_complete"] == serde_json::Value::Bool(true) {
                break status;
            }
        }
        if let Ok(Some(exit)) = child.try_wait() {
            panic!("grasp-sync exited during the sync: {exit}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "historic sync not complete within {SYNC_DEADLINE:?}: {:?}",
            status(metrics_port).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let synced_in = started.elapsed();
    let held = ids_on(&own.url()).await;
    let missing: Vec<&EventId> = data.expected.difference(&held).collect();
    let extra: Vec<&EventId> = held.difference(&data.expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the own relay holds exactly the expected {} events: {} missing, {} extra ({} of them \
         announcements not listing us)",
        data.expected.len(),
        missing.len(),
        extra.len(),
        extra.iter().filter(|id| data.foreign.contains(id)).count()
    );

    // Received ÷ distinct received, per remote. Everything a remote holds but the noise
    // matches one of our filters (Layer 1 reads every announcement).
    for (name, relay, events, double) in [
        ("first", &first, &data.first, data.double_matched[0]),
        ("second", &second, &data.second, data.double_matched[1]),
    ] {
        let distinct = events.iter().filter(|e| e.kind != Kind::TextNote).count() as u64;
        let received = relay_counter(&complete, relay.port(), "events_received");
        let again = relay_counter(&complete, relay.port(), "events_received_again");
        println!(
            "{name} nostr-rs-relay: {received} events received for {distinct} distinct \
             ({:.3}x), {again} of them again; {double} events match two of our filters (a \
             comment's `e` and `E`, a status's `e` and `a`), which nostr-rs-relay answers \
             filter by filter even within one REQ",
            received as f64 / distinct as f64
        );
        let foreign = events
            .iter()
            .filter(|e| data.foreign.contains(&e.id))
            .count() as u64;
        assert!(
            received - again + foreign >= distinct,
            "{name}: every event arrives ({received} received, {again} again, {foreign} not ours)"
        );
        assert!(
            again <= double as u64 + distinct / 20,
            "{name}: {again} received again: more than the events two filters match \
             ({double}) and 5 % of the rest"
        );
    }
    println!("historic sync from two nostr-rs-relays: {synced_in:?}");

    // Live: the connections stay through several batch timeouts, events keep arriving.
    // The remotes take turns, one event every 1.5 batch timeouts, so each stays silent
    // (nothing but answers to pings) for three batch timeouts between its events.
    let keys = Keys::generate();
    let pause = Duration::from_millis(BATCH_TIMEOUT_SECS * 1_500);
    for n in 0..=TIMEOUTS_SURVIVED {
        let issue = sign(
            &keys,
            1621,
            &format!("live {n}"),
            vec![tag(&["a", &data.live_repo])],
            Timestamp::now().as_secs(),
        );
        let remote = if n % 2 == 0 { &first } else { &second };
        arrives_live(&issue, &remote.url(), &own.url()).await;
        tokio::time::sleep(pause).await;
    }
    let metrics = get(metrics_port, "/metrics").await.expect("/metrics");
    for (name, relay) in [("first", &first), ("second", &second)] {
        assert_eq!(
            connection_attempts(&metrics, relay.port()),
            1.0,
            "{name} nostr-rs-relay was connected once and never again over {} batch \
             timeouts:\n{}",
            TIMEOUTS_SURVIVED,
            metrics
                .lines()
                .filter(|line| line.contains("connection_attempts"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    child.start_kill().unwrap();
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("reconnecting"),
        "no reconnect logged: {stderr}"
    );
}
