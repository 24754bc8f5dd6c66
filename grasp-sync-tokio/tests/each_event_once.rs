//! Each relay sends each event once on a fresh sync, as far as NIP-01 can
//! say so. NIP-22 comments carry `e` and `E` (both match a root's Layer 3
//! filters), statuses `a` and `e` (a repository's Layer 2 filter and a
//! root's Layer 3 filter). Against a real nostr-relay-builder relay (which
//! dedupes the filters of one REQ), over NIP-77 and over REQ: events the
//! relay sent ÷ distinct events it sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use nostr::prelude::*;
use support::{
    announcement, loopback_engine_config, manager_into, sign, tag, Nip77Refusal, TestRelay,
    TestRelayConfig,
};

const WAIT: Duration = Duration::from_secs(60);
const REPOS: usize = 10;
const ISSUES: usize = 5;
const COMMENTS: usize = 3;

/// A NIP-11 document telling the relay's per-filter page size (strfry
/// tells 500), so filters that can match the same event share a REQ.
const NIP11: &str = r#"{"name":"test","supported_nips":[1,11,77],"limitation":{"max_limit":500}}"#;

struct Data {
    own_events: Vec<Event>,
    remote_events: Vec<Event>,
    /// Kind 1630 statuses (they tag their repository and their root).
    statuses: usize,
}

fn data(own: &RelayUrl, remote: &RelayUrl) -> Data {
    let base = Timestamp::now().as_secs() - 100_000;
    let mut own_events = Vec::new();
    let mut remote_events = Vec::new();
    let mut statuses = 0;
    let mut at = base;
    let mut next = || {
        at += 1;
        at
    };
    for r in 0..REPOS {
        let keys = Keys::generate();
        let name = format!("repo-{r}");
        let ann = announcement(&keys, &name, &[own, remote], next());
        own_events.push(ann.clone());
        remote_events.push(ann);
        let repo = RepoRef::new(keys.public_key(), &name).unwrap().to_string();
        for i in 0..ISSUES {
            let issue = sign(
                &keys,
                1621,
                &format!("issue {i}"),
                vec![tag(&["a", &repo])],
                next(),
            );
            let root = issue.id.to_hex();
            remote_events.push(issue);
            for c in 0..COMMENTS {
                remote_events.push(sign(
                    &keys,
                    1111,
                    &format!("comment {c}"),
                    vec![tag(&["E", &root]), tag(&["e", &root]), tag(&["K", "1621"])],
                    next(),
                ));
            }
            remote_events.push(sign(
                &keys,
                1630,
                "open",
                vec![tag(&["e", &root, "", "root"]), tag(&["a", &repo])],
                next(),
            ));
            statuses += 1;
        }
    }
    Data {
        own_events,
        remote_events,
        statuses,
    }
}

/// What one relay sent on a fresh sync.
struct Sent {
    /// EVENT frames the relay sent (counted by the proxy).
    events: usize,
    /// Of those, events it had sent already (counted by the engine).
    again: usize,
    /// Bytes the relay sent, and the JSON bytes of the distinct events.
    bytes: u64,
    event_bytes: usize,
    /// Kind 1630 statuses in the data set.
    statuses: usize,
}

impl Sent {
    fn ratio(&self) -> f64 {
        self.events as f64 / (self.events - self.again) as f64
    }
}

/// Syncs the remote into a fresh own relay (which holds the announcements).
async fn sync(nip77: Nip77Refusal) -> Sent {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig {
        nip77,
        nip11: Some(NIP11.to_owned()),
        ..TestRelayConfig::default()
    })
    .await;
    let data = data(&own.url(), &remote.url());
    own.add_events(&data.own_events).await;
    remote.add_events(&data.remote_events).await;
    let expected: BTreeSet<EventId> = data.remote_events.iter().map(|e| e.id).collect();

    let mut config = loopback_engine_config();
    config.identity.service_relays = vec![own.url()];
    let manager = manager_into(&own.url(), config, prometheus::Registry::new());
    let shutdown = manager.shutdown_handle();
    let mut status = manager.status();
    let run = tokio::spawn(manager.run());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let held = own.event_ids().await;
        let done = status.borrow_and_update().historic_sync_complete;
        if (expected.is_subset(&held) && done) || tokio::time::Instant::now() > deadline {
            assert!(expected.is_subset(&held), "synced everything");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = status
        .borrow()
        .relays
        .iter()
        .find(|relay| relay.report.relay == remote.url())
        .map(|relay| relay.report.clone())
        .expect("the remote is tracked");
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(2), run)
        .await
        .expect("stops")
        .expect("no panic");
    assert_eq!(summary.engine.batches_failed, 0);
    assert_eq!(
        report.events_received as usize,
        remote.events_sent(),
        "the engine saw every event the relay sent"
    );
    let distinct: BTreeSet<EventId> = data
        .remote_events
        .iter()
        .map(|e| e.id)
        .filter(|id| !data.own_events.iter().any(|own| own.id == *id))
        .collect();
    let event_bytes = data
        .remote_events
        .iter()
        .filter(|e| distinct.contains(&e.id))
        .map(|e| e.as_json().len())
        .sum();
    Sent {
        events: remote.events_sent(),
        again: report.events_received_again as usize,
        bytes: remote.bytes_sent(),
        event_bytes,
        statuses: data.statuses,
    }
}

fn print(how: &str, sent: &Sent) {
    eprintln!(
        "{how}: {} events sent, {} of them again ({:.3} per distinct event); {} bytes sent for {} bytes of distinct events ({:.3}); {} statuses",
        sent.events,
        sent.again,
        sent.ratio(),
        sent.bytes,
        sent.event_bytes,
        sent.bytes as f64 / sent.event_bytes as f64,
        sent.statuses
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_nip77_each_event_comes_once() {
    let sent = sync(Nip77Refusal::Served).await;
    print("NIP-77", &sent);
    // A status (`a` and `e`) comes with its repository's reconciliation;
    // its fresh root's replies are reconciled against what the relay sent
    // already, so only the comments are fetched (each once: the batch
    // fetches an id its `#e` and `#E` sessions both miss once).
    assert!(
        sent.ratio() <= 1.05,
        "{:.3} events sent per distinct event",
        sent.ratio()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_req_only_what_nip01_cannot_express_comes_twice() {
    let sent = sync(Nip77Refusal::Notice).await;
    print("REQ", &sent);
    // A status matches its repository's `#a` (Layer 2) and its root's `#e`
    // (Layer 3, planned once the root is stored): two REQs, and NIP-01
    // cannot say "not those tagging `a`". Comments (`e` and `E` of one
    // chunk) share a REQ and come once.
    assert!(sent.again <= sent.statuses, "only statuses came twice");
}
