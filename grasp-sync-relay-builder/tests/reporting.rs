//! When the bridge tells the sync of an event the relay accepted: only once
//! the relay stored it (after every write policy, the duplicate and the
//! deletion checks), and never by making the relay's EVENT path wait for a
//! sync that is not reading. Played against a real relay-builder relay over
//! WebSocket; the sync's side is the `own_events` channel the bridge feeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_sync_relay_builder::{convert, r44, Bridge};
use nostr::prelude::*;
use nostr_relay_builder::prelude::{
    BoxedFuture, DatabaseEventStatus, NostrDatabase, PolicyResult, WritePolicy,
};
use support::{announcement, connect_client, sign, tag, try_connect_client};
use tokio::sync::mpsc;

/// The host's own later policy: refuses events whose content is
/// `"refused"`, and takes its time over the others (as a policy that looks
/// something up would), so a report made before the relay stored the event
/// would be seen early.
#[derive(Debug)]
struct SlowRefusing;

impl WritePolicy for SlowRefusing {
    fn admit_event<'a>(
        &'a self,
        event: &'a r44::Event,
        _addr: &'a SocketAddr,
    ) -> BoxedFuture<'a, PolicyResult> {
        Box::pin(async move {
            if event.content == "refused" {
                return PolicyResult::Reject("not on this relay".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            PolicyResult::Accept
        })
    }
}

/// A relay-builder relay over `bridge`'s reporting database, with `policy`
/// and a rate limit a burst fits in; returns once it answers.
async fn start_relay(bridge: &Bridge, policy: Option<SlowRefusing>) -> (r44::LocalRelay, RelayUrl) {
    let mut builder = r44::RelayBuilder::default()
        .addr(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
        .database(bridge.database())
        .rate_limit(r44::RateLimit {
            max_reqs: 500,
            notes_per_minute: 1_000_000,
        });
    if let Some(policy) = policy {
        builder = builder.write_policy(policy);
    }
    let relay = r44::LocalRelay::new(builder);
    relay.run().await.expect("the relay listens");
    let url = RelayUrl::parse(relay.url().await.as_str()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while try_connect_client(&url).await.is_err() {
        assert!(Instant::now() < deadline, "the relay never listened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (relay, url)
}

fn memory_database() -> Arc<r44::MemoryDatabase> {
    Arc::new(r44::MemoryDatabase::with_opts(r44::MemoryDatabaseOptions {
        events: true,
        max_events: None,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_stored_events_are_reported_and_each_is_queryable_when_the_sync_hears_of_it() {
    let database = memory_database();
    let bridge = Bridge::new(database.clone());
    let (relay, url) = start_relay(&bridge, Some(SlowRefusing)).await;
    // The sync's side: every report, checked against the relay's database
    // the moment it arrives.
    let (own_events, mut reports) = mpsc::channel(64);
    bridge.forward_accepted_to(own_events);
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 1_000;
    let alpha = announcement(&maintainer, "alpha", &[&url], base);
    let repo = format!("30617:{}:alpha", maintainer.public_key().to_hex());
    let refused = sign(&user, 1621, "refused", vec![tag(&["a", &repo])], base + 1);
    let deleted = sign(&user, 1621, "withdrawn", vec![tag(&["a", &repo])], base + 2);
    let deletion = sign(
        &user,
        5,
        "",
        vec![tag(&["e", &deleted.id.to_hex()])],
        base + 3,
    );
    let last = sign(&user, 1617, "a patch", vec![tag(&["a", &repo])], base + 4);
    // Reports follow the order stored: the checker listens until `last`,
    // then a while longer for any stray report.
    let checked = {
        let database = database.clone();
        let last = last.id;
        tokio::spawn(async move {
            let mut heard = Vec::new();
            loop {
                let wait = if heard.iter().any(|(id, _)| *id == last) {
                    Duration::from_millis(300)
                } else {
                    Duration::from_secs(15)
                };
                let Ok(Some(event)) = tokio::time::timeout(wait, reports.recv()).await else {
                    return heard;
                };
                let status = database
                    .check_id(&convert::id_to_r44(&event.id))
                    .await
                    .unwrap();
                heard.push((event.id, status));
            }
        })
    };

    let mut client = connect_client(&url).await;
    assert!(client.publish(&alpha).await.0, "the announcement is stored");
    let (accepted, message) = client.publish(&alpha).await;
    assert!(accepted && message.starts_with("duplicate"), "{message}");
    let (accepted, message) = client.publish(&refused).await;
    assert!(!accepted, "the host's later policy refuses it: {message}");
    assert!(client.publish(&deleted).await.0);
    assert!(client.publish(&deletion).await.0, "the author withdraws it");
    let (accepted, message) = client.publish(&deleted).await;
    assert!(!accepted, "the relay refuses a deleted event: {message}");
    assert!(client.publish(&last).await.0);
    client.close().await;

    let heard = checked.await.unwrap();
    relay.shutdown();

    let ids: Vec<EventId> = heard.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        [alpha.id, deleted.id, last.id],
        "each stored own-kind event reported once, in order; never the duplicate, the \
         refused or the deleted republication"
    );
    for (id, status) in &heard {
        assert_eq!(
            *status,
            DatabaseEventStatus::Saved,
            "{id} was reported before the relay stored it"
        );
    }
}

/// The relay stores a burst of more own-kind events than the report queue
/// holds while the sync does not read at all, each EVENT answered promptly;
/// once the sync reads again it hears of every one (the overflow re-read
/// from the database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_stores_a_burst_promptly_while_the_sync_is_not_reading_and_none_is_lost() {
    /// The bridge's default report queue, and a burst past it.
    const QUEUE: usize = 4096;
    const BURST: usize = QUEUE + 600;
    /// Stated bound for storing the whole burst on two loaded cores (debug).
    const BURST_BOUND: Duration = Duration::from_secs(25);

    let database = memory_database();
    let bridge = Bridge::new(database.clone());
    let (relay, url) = start_relay(&bridge, None).await;
    // A sync that is not reading: a channel of one, nobody receiving yet.
    let (own_events, mut reports) = mpsc::channel(1);
    bridge.forward_accepted_to(own_events);

    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 100_000;
    let repo = format!("30617:{}:alpha", Keys::generate().public_key().to_hex());
    let burst: Vec<Event> = (0..BURST)
        .map(|n| {
            sign(
                &user,
                1621,
                &format!("issue {n}"),
                vec![tag(&["a", &repo])],
                base + n as u64,
            )
        })
        .collect();

    let mut client = connect_client(&url).await;
    let started = Instant::now();
    let accepted = tokio::time::timeout(BURST_BOUND, client.publish_all(&burst, 64))
        .await
        .unwrap_or_else(|_| {
            panic!("the relay stalled: the burst was not stored within {BURST_BOUND:?}")
        });
    let took = started.elapsed();
    assert_eq!(accepted, BURST);
    let stored = database
        .count(r44::Filter::new().kind(nostr_relay_builder::prelude::Kind::from(1621u16)))
        .await
        .unwrap();
    assert_eq!(stored, BURST, "every event of the burst is stored");
    assert!(
        bridge.overflowed_reports() >= (BURST - QUEUE - 2) as u64,
        "the overflow is counted: {}",
        bridge.overflowed_reports()
    );
    println!(
        "stored {BURST} own-kind events in {took:?} with the sync not reading; {} reports overflowed",
        bridge.overflowed_reports()
    );

    // The sync reads again: every event of the burst is heard.
    let mut heard = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while heard.len() < BURST {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, reports.recv())
            .await
            .unwrap_or_else(|_| panic!("heard only {} of {BURST}", heard.len()))
            .expect("the forwarder runs");
        heard.insert(event.id);
    }
    let expected: BTreeSet<EventId> = burst.iter().map(|event| event.id).collect();
    assert_eq!(heard, expected, "nothing lost, nothing foreign");
    client.close().await;
    relay.shutdown();
}
