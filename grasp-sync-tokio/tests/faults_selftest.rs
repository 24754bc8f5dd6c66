//! Tests of the proxy's seeded faults (`grasp_sync_test_harness::relays`,
//! [`FaultPlan`]): each fault does what it says, faults stop and start at run
//! time, and a seed repeats its faults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::time::Duration;

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::*;

use support::{
    connect_client, sign_notes, Client, FaultCounts, FaultPlan, RecvError, TestRelay,
    TestRelayConfig, NIP01_PREFIXES,
};

const TS: u64 = 1_700_000_000;
/// Bound on every wait for a frame.
const FRAME: Duration = Duration::from_secs(5);

fn kind1() -> Filter {
    Filter::new().kind(Kind::TextNote)
}

/// A relay holding `notes` signed notes, behind `plan`.
async fn relay_with(plan: FaultPlan, notes: usize) -> (TestRelay, Vec<Event>) {
    let relay = TestRelay::start(TestRelayConfig::default().with_faults(plan)).await;
    let events = sign_notes(&Keys::generate(), notes, TS, "faulted");
    relay.add_events(&events).await;
    (relay, events)
}

/// Sends a REQ for kind 1 under `sub` and returns every raw frame up to and including
/// the EOSE for `sub` (bounded: panics if the connection ends or a frame takes too long).
async fn frames_until_eose(client: &mut Client, sub: &str) -> Vec<String> {
    client
        .send(serde_json::json!(["REQ", sub, {"kinds": [1]}]).to_string())
        .await;
    let eose = serde_json::json!(["EOSE", sub]).to_string();
    let mut frames = Vec::new();
    loop {
        let frame = client
            .recv_text(FRAME)
            .await
            .unwrap_or_else(|e| panic!("waiting for EOSE on {sub}: {e}; got {frames:?}"));
        let done = frame == eose;
        frames.push(frame);
        if done {
            return frames;
        }
    }
}

/// The events of the EVENT frames among `frames`, parsed (unparsable ones left out).
fn events_in(frames: &[String]) -> Vec<Event> {
    frames
        .iter()
        .filter_map(|frame| match RelayMessage::from_json(frame.as_bytes()) {
            Ok(RelayMessage::Event { event, .. }) => Some(event.into_owned()),
            _ => None,
        })
        .collect()
}

fn ids(events: &[Event]) -> BTreeSet<EventId> {
    events.iter().map(|event| event.id).collect()
}

#[tokio::test]
async fn a_plan_without_faults_forwards_everything_and_counts_nothing() {
    let (relay, events) = relay_with(FaultPlan::none(1), 30).await;
    assert!(relay.faults_active());
    let mut client = connect_client(&relay.url()).await;
    let frames = frames_until_eose(&mut client, "s").await;
    assert_eq!(frames.len(), 31, "30 events and EOSE, nothing else");
    assert_eq!(ids(&events_in(&frames)), ids(&events));
    assert_eq!(relay.fault_counts(), FaultCounts::default());
}

#[tokio::test]
async fn drop_after_frames_ends_the_connection_without_a_close_frame() {
    let plan = FaultPlan {
        drop_after_frames: Some(5),
        ..FaultPlan::none(2)
    };
    let (relay, events) = relay_with(plan, 20).await;
    let mut client = connect_client(&relay.url()).await;
    client
        .send(serde_json::json!(["REQ", "s", {"kinds": [1]}]).to_string())
        .await;
    let mut received = 0;
    let how = loop {
        match client.recv_text(FRAME).await {
            Ok(_) => received += 1,
            Err(RecvError::Closed(how)) => break how,
            Err(e) => panic!("expected the connection to end: {e}"),
        }
    };
    assert!(
        received < 5,
        "the fifth frame dropped the connection: {received}"
    );
    assert!(!how.contains("close frame"), "no closing handshake: {how}");
    assert_eq!(relay.fault_counts().drops, 1);

    relay.stop_faults();
    assert!(!relay.faults_active());
    let mut client = connect_client(&relay.url()).await;
    assert_eq!(ids(&client.req_all(kind1()).await), ids(&events));
    assert_eq!(relay.fault_counts().drops, 1, "no fault after stop_faults");
}

#[tokio::test]
async fn notices_carry_every_nip01_prefix() {
    let plan = FaultPlan {
        notice: 1.0,
        ..FaultPlan::none(3)
    };
    let (relay, events) = relay_with(plan, 100).await;
    let mut client = connect_client(&relay.url()).await;
    let frames = frames_until_eose(&mut client, "s").await;
    let notices: Vec<String> = frames
        .iter()
        .filter_map(|frame| match RelayMessage::from_json(frame.as_bytes()) {
            Ok(RelayMessage::Notice(message)) => Some(message.into_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(notices.len(), 101, "one before each frame");
    for prefix in NIP01_PREFIXES {
        assert!(
            notices.iter().any(|notice| notice.starts_with(prefix)),
            "{prefix} never used: {notices:?}"
        );
    }
    assert_eq!(
        ids(&events_in(&frames)),
        ids(&events),
        "nothing else changed"
    );
    assert_eq!(relay.fault_counts().notices, 101);
}

#[tokio::test]
async fn closed_carries_every_nip01_prefix_and_closes_the_subscription_on_the_relay_too() {
    let plan = FaultPlan {
        closed: 1.0,
        ..FaultPlan::none(4)
    };
    let (relay, _events) = relay_with(plan, 5).await;
    let mut client = connect_client(&relay.url()).await;
    let mut prefixes = BTreeSet::new();
    for n in 0..80 {
        let sub = format!("s{n}");
        client
            .send(serde_json::json!(["REQ", sub, {"kinds": [1]}]).to_string())
            .await;
        // The first frame of the subscription is replaced by CLOSED; nothing else of it
        // follows (checked by the next round: its first frame is CLOSED for the next id).
        let frame = client.recv_text(FRAME).await.expect("CLOSED");
        match RelayMessage::from_json(frame.as_bytes()) {
            Ok(RelayMessage::Closed {
                subscription_id,
                message,
            }) => {
                assert_eq!(subscription_id.as_str(), sub, "in order: {frame}");
                let prefix = NIP01_PREFIXES
                    .iter()
                    .find(|prefix| message.starts_with(**prefix))
                    .unwrap_or_else(|| panic!("no NIP-01 prefix: {message}"));
                prefixes.insert(*prefix);
            }
            other => panic!("expected CLOSED for {sub}, got {other:?}"),
        }
    }
    assert_eq!(prefixes.len(), NIP01_PREFIXES.len(), "{prefixes:?}");
    assert_eq!(
        relay.max_concurrent_reqs_seen(),
        1,
        "each closed before the next"
    );
    assert_eq!(relay.fault_counts().closed, 80);

    // Opened again (faults off): served in full.
    relay.stop_faults();
    assert_eq!(client.req_all(kind1()).await.len(), 5);
}

/// The frames of a REQ for kind 1 on `relay` with faults off, then on (sub ids made equal).
async fn clean_and_faulted(relay: &TestRelay) -> (Vec<String>, Vec<String>) {
    let mut client = connect_client(&relay.url()).await;
    relay.stop_faults();
    let clean = frames_until_eose(&mut client, "a").await;
    relay.start_faults();
    let faulted = frames_until_eose(&mut client, "b").await;
    let clean = clean
        .iter()
        .map(|frame| frame.replacen(r#""a""#, r#""b""#, 1))
        .collect();
    (clean, faulted)
}

#[tokio::test]
async fn junk_truncated_and_oversized_frames_come_before_the_real_ones() {
    let plan = FaultPlan {
        garbage: 1.0,
        truncated: 1.0,
        oversized: 1.0,
        oversized_bytes: 200_000,
        ..FaultPlan::none(5)
    };
    let (relay, events) = relay_with(plan, 10).await;
    let (clean, faulted) = clean_and_faulted(&relay).await;
    assert_eq!(
        ids(&events_in(&faulted)),
        ids(&events),
        "every real event arrives"
    );
    assert_eq!(
        faulted.len(),
        4 * clean.len(),
        "three injected before each frame"
    );
    for (injected, real) in faulted.chunks(4).zip(&clean) {
        let [junk, truncated, oversized, forwarded] = injected else {
            unreachable!("chunks of 4")
        };
        assert_eq!(forwarded, real);
        assert!(
            junk != real && !real.starts_with(junk.as_str()),
            "junk: {junk}"
        );
        assert!(
            truncated.len() < real.len() && real.starts_with(truncated.as_str()),
            "a strict prefix: {truncated}"
        );
        assert!(serde_json::from_str::<serde_json::Value>(truncated).is_err());
        assert_eq!(oversized.len(), 200_000);
    }
    let counts = relay.fault_counts();
    assert_eq!(
        (counts.garbage, counts.truncated, counts.oversized),
        (11, 11, 11)
    );
}

#[tokio::test]
async fn duplicates_repeat_events_only() {
    let plan = FaultPlan {
        duplicate: 1.0,
        ..FaultPlan::none(6)
    };
    let (relay, _events) = relay_with(plan, 40).await;
    let (clean, faulted) = clean_and_faulted(&relay).await;
    let doubled: Vec<String> = clean
        .iter()
        .flat_map(|frame| {
            let times = if frame.starts_with(r#"["EVENT""#) {
                2
            } else {
                1
            };
            std::iter::repeat_n(frame.clone(), times)
        })
        .collect();
    assert_eq!(faulted, doubled, "each event twice in a row, EOSE once");
    assert_eq!(relay.fault_counts().duplicates, 40);
}

#[tokio::test]
async fn reordering_keeps_the_order_of_one_subscription() {
    let plan = FaultPlan {
        reorder: 1.0,
        ..FaultPlan::none(6)
    };
    let (relay, _events) = relay_with(plan, 40).await;
    let (clean, faulted) = clean_and_faulted(&relay).await;
    assert_eq!(faulted, clean, "one subscription: nothing swapped");
    assert_eq!(relay.fault_counts().reorders, 0);
}

#[tokio::test]
async fn reordering_within_a_subscription_is_opt_in() {
    let plan = FaultPlan {
        reorder: 1.0,
        reorder_within_subscription: true,
        ..FaultPlan::none(7)
    };
    let (relay, events) = relay_with(plan, 60).await;
    let mut client = connect_client(&relay.url()).await;
    relay.stop_faults();
    let clean = events_in(&frames_until_eose(&mut client, "s").await);
    relay.start_faults();
    let mut faulted = Vec::new();
    client
        .send(serde_json::json!(["REQ", "t", {"kinds": [1]}]).to_string())
        .await;
    // Until every event arrived (EOSE may come before the last ones now).
    while faulted.len() < events.len() {
        let frame = client.recv_text(FRAME).await.expect("a frame");
        faulted.extend(events_in(&[frame]));
    }
    assert_eq!(ids(&faulted), ids(&clean), "every event once");
    assert_ne!(faulted, clean, "some swapped");
    assert!(relay.fault_counts().reorders > 0);
}

#[tokio::test]
async fn forged_events_do_not_verify_and_off_filter_events_match_no_sync_filter() {
    let plan = FaultPlan {
        forged: 1.0,
        off_filter: 1.0,
        ..FaultPlan::none(8)
    };
    let (relay, events) = relay_with(plan, 12).await;
    let mut client = connect_client(&relay.url()).await;
    let received = events_in(&frames_until_eose(&mut client, "s").await);
    let genuine = ids(&events);
    let injected: BTreeSet<EventId> = relay.injected_event_ids().into_iter().collect();
    assert_eq!(injected.len(), 24, "a forged copy and a note per event");
    let mut forged = 0;
    let mut off_filter = 0;
    for event in &received {
        if genuine.contains(&event.id) && event.verify().is_ok() {
            continue;
        }
        assert!(
            injected.contains(&event.id),
            "only injected events are added"
        );
        if event.verify().is_err() {
            forged += 1;
            assert!(event.content.starts_with("forged chaos"));
        } else {
            off_filter += 1;
            assert_eq!(event.kind, Kind::TextNote);
            assert!(event.tags.is_empty(), "tagless: no sync filter matches it");
            assert!(!genuine.contains(&event.id));
        }
    }
    assert_eq!((forged, off_filter), (12, 12));
    let counts = relay.fault_counts();
    assert_eq!((counts.forged, counts.off_filter), (12, 12));
    assert_eq!(
        relay.event_ids().await,
        genuine,
        "nothing injected is stored"
    );
}

/// NEG-OPEN for kind 1 under `sub` with `ours` as the client's set.
fn neg_open(sub: &str, ours: &[Event]) -> (Negentropy<'static, NegentropyStorageVector>, String) {
    let mut storage = NegentropyStorageVector::with_capacity(ours.len());
    for event in ours {
        storage
            .insert(
                event.created_at.as_secs(),
                Id::from_byte_array(event.id.to_bytes()),
            )
            .expect("insert");
    }
    storage.seal().expect("seal");
    let mut negentropy = Negentropy::owned(storage, 60_000).expect("negentropy");
    let initial = negentropy.initiate().expect("initiate");
    let open = ClientMessage::neg_open(SubscriptionId::new(sub), kind1(), hex::encode(&initial));
    (negentropy, open.as_json())
}

#[tokio::test]
async fn neg_err_refuses_negentropy_with_a_prefix() {
    let plan = FaultPlan {
        neg_err: 1.0,
        ..FaultPlan::none(9)
    };
    let (relay, events) = relay_with(plan, 5).await;
    let mut client = connect_client(&relay.url()).await;
    let (_negentropy, open) = neg_open("neg", &events[..2]);
    client.send(open).await;
    match client.recv().await {
        RelayMessage::NegErr {
            subscription_id,
            message,
        } => {
            assert_eq!(subscription_id.as_str(), "neg");
            assert!(
                message.ends_with(" chaos") && message.contains(':'),
                "{message}"
            );
        }
        other => panic!("expected NEG-ERR, got {other:?}"),
    }
    assert_eq!(relay.fault_counts().neg_errs, 1);
    assert_eq!(relay.neg_opens_seen(), 1);
}

#[tokio::test]
async fn endless_negentropy_never_lets_a_client_finish_until_the_faults_stop() {
    let plan = FaultPlan {
        endless_ids_per_round: 10,
        ..FaultPlan::endless_negentropy(10)
    };
    let (relay, events) = relay_with(plan, 20).await;
    let mut client = connect_client(&relay.url()).await;
    let (mut negentropy, open) = neg_open("neg", &events[..5]);
    client.send(open).await;
    let (mut have, mut need) = (Vec::new(), Vec::new());
    let mut last = Vec::new();
    for round in 1..=30 {
        let hex = match client.recv().await {
            RelayMessage::NegMsg { message, .. } => message.into_owned(),
            other => panic!("round {round}: expected NEG-MSG, got {other:?}"),
        };
        last = negentropy
            .reconcile_with_ids(&hex::decode(&hex).expect("hex"), &mut have, &mut need)
            .expect("a valid negentropy message")
            .unwrap_or_else(|| panic!("round {round}: the client finished"));
        assert_eq!(need.len(), 10 * round, "ten new ids claimed each round");
        if round < 30 {
            let message = serde_json::json!(["NEG-MSG", "neg", hex::encode(&last)]);
            client.send(message.to_string()).await;
        }
    }
    let distinct: BTreeSet<[u8; 32]> = need.iter().map(|id| *id.as_bytes()).collect();
    assert_eq!(distinct.len(), 300, "never the same id twice");
    assert_eq!(relay.endless_rounds_served(), 30);

    // Faults stopped: the session ends with NEG-ERR; a new one is served by the relay.
    relay.stop_faults();
    let message = serde_json::json!(["NEG-MSG", "neg", hex::encode(&last)]);
    client.send(message.to_string()).await;
    match client.recv().await {
        RelayMessage::NegErr { message, .. } => assert_eq!(message, "closed: faults stopped"),
        other => panic!("expected NEG-ERR, got {other:?}"),
    }
    let (mut negentropy, open) = neg_open("again", &events[..5]);
    client.send(open).await;
    let mut need = Vec::new();
    for round in 0.. {
        assert!(round < 10, "the relay's own negentropy finishes");
        let hex = match client.recv().await {
            RelayMessage::NegMsg { message, .. } => message.into_owned(),
            other => panic!("expected NEG-MSG, got {other:?}"),
        };
        let bytes = hex::decode(&hex).expect("hex");
        match negentropy.reconcile_with_ids(&bytes, &mut have, &mut need) {
            Ok(Some(next)) => {
                let message = serde_json::json!(["NEG-MSG", "again", hex::encode(&next)]);
                client.send(message.to_string()).await;
            }
            Ok(None) => break,
            Err(e) => panic!("reconcile: {e}"),
        }
    }
    assert_eq!(need.len(), 15, "the 15 events the client lacks");
    assert_eq!(relay.endless_rounds_served(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_forwards_nothing_answers_no_ping_and_stays_open() {
    let plan = FaultPlan {
        stall: 1.0,
        ..FaultPlan::none(11)
    };
    let (relay, events) = relay_with(plan, 5).await;
    let mut client = connect_client(&relay.url()).await;
    client
        .send(serde_json::json!(["REQ", "s", {"kinds": [1]}]).to_string())
        .await;
    assert_eq!(
        client.recv_text(Duration::from_millis(500)).await,
        Err(RecvError::Timeout)
    );
    relay.stop_faults();
    assert_eq!(
        client.ping(Duration::from_millis(500)).await,
        Err(RecvError::Timeout),
        "no pong: stalled below the WebSocket layer, also after stop_faults"
    );
    assert_eq!(relay.connections_open(), 1, "not closed");
    assert_eq!(relay.fault_counts().stalls, 1);

    // The client gives up: the stalled connection ends on the relay too.
    drop(client);
    let deadline = tokio::time::Instant::now() + FRAME;
    while relay.connections_open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(relay.connections_open(), 0);
    let mut client = connect_client(&relay.url()).await;
    client
        .ping(FRAME)
        .await
        .expect("a new connection answers pings");
    assert_eq!(ids(&client.req_all(kind1()).await), ids(&events));
}

#[tokio::test]
async fn delays_lose_nothing() {
    let plan = FaultPlan {
        delay: 1.0,
        max_delay: Duration::from_millis(10),
        ..FaultPlan::none(12)
    };
    let (relay, events) = relay_with(plan, 20).await;
    let mut client = connect_client(&relay.url()).await;
    let frames = frames_until_eose(&mut client, "s").await;
    assert_eq!(frames.len(), 21);
    assert_eq!(ids(&events_in(&frames)), ids(&events));
    assert_eq!(relay.fault_counts().delays, 21);
}

#[tokio::test]
async fn the_same_seed_injects_the_same_faults() {
    let plan = FaultPlan {
        garbage: 0.3,
        notice: 0.3,
        truncated: 0.3,
        ..FaultPlan::none(13)
    };
    let events = sign_notes(&Keys::generate(), 30, TS, "same");
    let mut runs = Vec::new();
    for _ in 0..2 {
        let relay = TestRelay::start(TestRelayConfig::default().with_faults(plan.clone())).await;
        relay.add_events(&events).await;
        let mut client = connect_client(&relay.url()).await;
        runs.push((
            frames_until_eose(&mut client, "s").await,
            relay.fault_counts(),
        ));
    }
    assert_eq!(runs[0], runs[1]);
    assert!(runs[0].1.total() > 0);
}

#[test]
fn random_plans_are_seeded_and_leave_out_endless_negentropy_and_protocol_violations() {
    assert_eq!(FaultPlan::random(7), FaultPlan::random(7));
    assert_ne!(FaultPlan::random(7), FaultPlan::random(8));
    for seed in 0..50 {
        let plan = FaultPlan::random(seed);
        assert_eq!(plan.seed, seed);
        assert!(!plan.endless_negentropy);
        assert!(!plan.reorder_within_subscription && !plan.duplicate_any);
        for p in [
            plan.drop,
            plan.stall,
            plan.delay,
            plan.reorder,
            plan.duplicate,
            plan.garbage,
            plan.truncated,
            plan.oversized,
            plan.notice,
            plan.closed,
            plan.forged,
            plan.off_filter,
            plan.neg_err,
        ] {
            assert!((0.0..=0.4).contains(&p), "seed {seed}: {p}");
        }
    }
    let none = FaultPlan::none(3);
    assert_eq!(none.drop + none.closed + none.neg_err + none.stall, 0.0);
    assert_eq!(FaultPlan::default(), FaultPlan::none(0));
    let one = FaultCounts {
        drops: 1,
        forged: 2,
        ..FaultCounts::default()
    };
    assert_eq!(one.add(&one).total(), 6);
}
