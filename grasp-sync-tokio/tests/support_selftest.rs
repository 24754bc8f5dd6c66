//! Tests of the integration-test harness itself (`grasp_sync_test_harness::relays`).

use grasp_sync_test_harness::relays as support;

use std::time::Duration;

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::{
    connect_client, sign_notes, try_connect_client, Client, Nip77Refusal, RecvError, TestRelay,
    TestRelayConfig,
};

const TS: u64 = 1_700_000_000;

fn kind1() -> Filter {
    Filter::new().kind(Kind::TextNote)
}

#[tokio::test]
async fn add_event_then_req_returns_it() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    assert!(relay.url().as_str().starts_with("ws://127.0.0.1:"));
    let keys = Keys::generate();
    let events = sign_notes(&keys, 3, TS, "stored");
    relay.add_events(&events).await;
    relay.add_event(&events[0]).await; // duplicate: ignored

    let want: std::collections::BTreeSet<EventId> = events.iter().map(|e| e.id).collect();
    assert_eq!(relay.event_ids().await, want);
    let mut stored = relay.stored_events().await;
    stored.sort_by_key(|e| e.created_at);
    assert_eq!(stored, events);

    let mut client = connect_client(&relay.url()).await;
    let got = client.req_all(kind1()).await;
    let got_ids: std::collections::BTreeSet<EventId> = got.iter().map(|e| e.id).collect();
    assert_eq!(got_ids, want);
    for event in &got {
        event.verify().expect("relay returns valid events");
    }
    assert_eq!(relay.events_sent(), 3);
    assert_eq!(relay.reqs_seen(), 1);
    assert_eq!(relay.connections_seen(), 1);

    // an ids filter fully served: LocalRelay sends `CLOSED ""` after EOSE; the client drops it
    let by_id = client.req_all(Filter::new().id(events[1].id)).await;
    assert_eq!(by_id.len(), 1);
    client.assert_silent(Duration::from_millis(200)).await;
    client.close().await;
}

#[tokio::test]
async fn publish_reaches_an_open_subscription_live() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let keys = Keys::generate();
    let mut client = connect_client(&relay.url()).await;
    assert!(client.subscribe("live", vec![kind1()]).await.is_empty());

    let live = sign_notes(&keys, 1, TS, "live").remove(0);
    relay.publish(&live).await;
    assert_eq!(client.next_event("live").await.id, live.id);
    assert!(relay.event_ids().await.contains(&live.id));

    // a duplicate is not delivered again; add_event is not delivered live
    relay.publish(&live).await;
    relay
        .add_event(&sign_notes(&keys, 1, TS + 1, "quiet")[0])
        .await;
    client.assert_silent(Duration::from_millis(300)).await;

    // events written by another client reach the subscription too
    let mut writer = connect_client(&relay.url()).await;
    let written = sign_notes(&keys, 1, TS + 2, "written").remove(0);
    assert_eq!(writer.publish(&written).await, (true, String::new()));
    assert_eq!(client.next_event("live").await.id, written.id);
}

#[tokio::test]
async fn stop_closes_connections_and_refuses_new_ones() {
    let mut relay = TestRelay::start(TestRelayConfig::default()).await;
    let url = relay.url();
    let mut client = connect_client(&url).await;
    client.subscribe("s", vec![kind1()]).await;
    assert_eq!(relay.connections_open(), 1);

    relay.stop().await;
    assert!(!relay.is_running());
    let how = client.expect_closed().await;
    println!("client saw: {how}");
    assert!(try_connect_client(&url).await.is_err());
    assert_eq!(relay.connections_open(), 0);
    relay.stop().await; // idempotent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_port_and_events() {
    let mut relay = TestRelay::start(TestRelayConfig::default()).await;
    let url = relay.url();
    let keys = Keys::generate();
    let events = sign_notes(&keys, 5, TS, "kept");
    relay.add_events(&events).await;
    let mut before = connect_client(&url).await;
    assert_eq!(before.req_all(kind1()).await.len(), 5);

    for _ in 0..3 {
        relay.restart().await; // stops first
        assert_eq!(relay.url(), url);
        before.expect_closed().await;
        before = connect_client(&url).await;
        assert_eq!(before.req_all(kind1()).await.len(), 5);
    }
    relay.stop().await;
    assert!(try_connect_client(&url).await.is_err());
    relay.restart().await;
    let mut client = connect_client(&url).await;
    client.subscribe("s", vec![kind1()]).await;
    let live = sign_notes(&keys, 1, TS + 10, "after restart").remove(0);
    relay.publish(&live).await;
    assert_eq!(client.next_event("s").await.id, live.id);
    assert_eq!(relay.event_ids().await.len(), 6);
}

#[tokio::test]
async fn dropping_the_relay_stops_it() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let url = relay.url();
    let mut client = connect_client(&url).await;
    drop(relay);
    client.expect_closed().await;
    assert!(try_connect_client(&url).await.is_err());
}

/// NEG-OPEN for kind-1 events with `ours` as the client's set.
fn neg_open(sub: &str, ours: &[Event]) -> (Negentropy<'static, NegentropyStorageVector>, String) {
    let mut storage = NegentropyStorageVector::with_capacity(ours.len());
    for e in ours {
        storage
            .insert(e.created_at.as_secs(), Id::from_byte_array(e.id.to_bytes()))
            .expect("insert");
    }
    storage.seal().expect("seal");
    let mut neg = Negentropy::owned(storage, 60_000).expect("negentropy");
    let init = neg.initiate().expect("initiate");
    let msg = ClientMessage::neg_open(SubscriptionId::new(sub), kind1(), hex::encode(&init));
    (neg, msg.as_json())
}

async fn relay_with_notes(nip77: Nip77Refusal, keys: &Keys) -> (TestRelay, Vec<Event>) {
    let relay = TestRelay::start(TestRelayConfig {
        nip77,
        ..Default::default()
    })
    .await;
    let events = sign_notes(keys, 20, TS, "neg");
    relay.add_events(&events).await;
    (relay, events)
}

#[tokio::test]
async fn nip77_serve_reconciles() {
    let keys = Keys::generate();
    let (relay, events) = relay_with_notes(Nip77Refusal::Served, &keys).await;
    let mut client = connect_client(&relay.url()).await;
    // we have the first 5 plus 2 the relay lacks
    let mut ours: Vec<Event> = events[..5].to_vec();
    ours.extend(sign_notes(&keys, 2, TS + 100, "ours only"));
    let (mut neg, open) = neg_open("neg", &ours);
    client.send(open).await;

    let (mut have, mut need) = (Vec::new(), Vec::new());
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 10, "negentropy does not converge");
        let hex = match client.recv().await {
            RelayMessage::NegMsg { message, .. } => message.into_owned(),
            other => panic!("expected NEG-MSG, got {other:?}"),
        };
        let bytes = hex::decode(&hex).expect("hex");
        match neg
            .reconcile_with_ids(&bytes, &mut have, &mut need)
            .expect("reconcile")
        {
            Some(next) => {
                let msg = serde_json::json!(["NEG-MSG", "neg", hex::encode(&next)]);
                client.send(msg.to_string()).await;
            }
            None => break,
        }
    }
    client.send(r#"["NEG-CLOSE","neg"]"#).await;
    let need: std::collections::BTreeSet<[u8; 32]> = need.iter().map(|i| *i.as_bytes()).collect();
    let want: std::collections::BTreeSet<[u8; 32]> =
        events[5..].iter().map(|e| e.id.to_bytes()).collect();
    assert_eq!(need, want);
    assert_eq!(have.len(), 2);
    assert_eq!(relay.neg_opens_seen(), 1);
    // the connection is still usable
    assert_eq!(client.req_all(kind1()).await.len(), 20);
}

#[tokio::test]
async fn nip77_refuse_notice() {
    let keys = Keys::generate();
    let (relay, events) = relay_with_notes(Nip77Refusal::Notice, &keys).await;
    let mut client = connect_client(&relay.url()).await;
    let (_neg, open) = neg_open("neg", &events[..3]);
    client.send(open).await;
    assert_eq!(
        client.recv().await,
        RelayMessage::Notice("could not parse command".into())
    );
    client.send(r#"["NEG-MSG","neg","6100"]"#).await;
    assert_eq!(
        client.recv().await,
        RelayMessage::Notice("could not parse command".into())
    );
    assert_eq!(relay.neg_opens_seen(), 1);
    assert_eq!(client.req_all(kind1()).await.len(), 20);
}

#[tokio::test]
async fn nip77_refuse_neg_err() {
    let keys = Keys::generate();
    let (relay, events) = relay_with_notes(Nip77Refusal::Blocked, &keys).await;
    let mut client = connect_client(&relay.url()).await;
    let (_neg, open) = neg_open("neg-1", &events[..3]);
    client.send(open).await;
    match client.recv().await {
        RelayMessage::NegErr {
            subscription_id,
            message,
        } => {
            assert_eq!(subscription_id.as_str(), "neg-1");
            assert_eq!(message, "blocked: negentropy disabled");
        }
        other => panic!("expected NEG-ERR, got {other:?}"),
    }
    client.send(r#"["NEG-MSG","neg-2","6100"]"#).await;
    assert!(matches!(
        client.recv().await,
        RelayMessage::NegErr { subscription_id, .. } if subscription_id.as_str() == "neg-2"
    ));
    assert_eq!(relay.neg_opens_seen(), 1);
    assert_eq!(client.req_all(kind1()).await.len(), 20);
}

#[tokio::test]
async fn nip77_silence() {
    let keys = Keys::generate();
    let (relay, events) = relay_with_notes(Nip77Refusal::Silence, &keys).await;
    let mut client = connect_client(&relay.url()).await;
    let (_neg, open) = neg_open("neg", &events[..3]);
    client.send(open).await;
    client.assert_silent(Duration::from_millis(500)).await;
    assert_eq!(relay.neg_opens_seen(), 1);
    assert_eq!(client.req_all(kind1()).await.len(), 20);
}

#[tokio::test]
async fn max_concurrent_reqs_counts_per_connection() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let stored = sign_notes(&Keys::generate(), 1, TS, "one").remove(0);
    relay.add_event(&stored).await;
    let mut a = connect_client(&relay.url()).await;
    for sub in ["s1", "s2", "s3"] {
        a.subscribe(sub, vec![kind1()]).await;
    }
    assert_eq!(relay.max_concurrent_reqs_seen(), 3);
    a.close_sub("s2").await;
    a.subscribe("s4", vec![kind1()]).await; // 3 open again
    a.subscribe("s1", vec![kind1()]).await; // replaces s1: still 3
    assert_eq!(relay.max_concurrent_reqs_seen(), 3);

    // an ids REQ fully served: the relay sends EOSE then CLOSED "", which frees the slot
    a.subscribe("ids", vec![Filter::new().id(stored.id)]).await;
    assert_eq!(relay.max_concurrent_reqs_seen(), 4);
    match a.recv().await {
        RelayMessage::Closed {
            subscription_id,
            message,
        } => assert_eq!((subscription_id.as_str(), message.as_ref()), ("ids", "")),
        other => panic!("expected CLOSED, got {other:?}"),
    }
    // req_all closes its subscription after EOSE: never more than 4 at once
    for _ in 0..3 {
        a.req_all(kind1()).await;
    }
    assert_eq!(relay.max_concurrent_reqs_seen(), 4);

    // another connection does not add to this one
    let mut b = connect_client(&relay.url()).await;
    b.subscribe("b1", vec![kind1()]).await;
    b.subscribe("b2", vec![kind1()]).await;
    assert_eq!(relay.max_concurrent_reqs_seen(), 4);

    // a closed connection frees all of its REQs; per connection, max over time
    a.close().await;
    let mut c = connect_client(&relay.url()).await;
    for i in 0..5 {
        c.subscribe(&format!("c{i}"), vec![kind1()]).await;
    }
    assert_eq!(relay.max_concurrent_reqs_seen(), 5);
    assert_eq!(relay.reqs_seen(), 5 + 1 + 3 + 2 + 5);

    relay.reset_counters();
    assert_eq!(relay.max_concurrent_reqs_seen(), 0);
    assert_eq!(relay.reqs_seen(), 0);
}

#[tokio::test]
async fn max_reqs_refusal_is_counted_then_freed() {
    let relay = TestRelay::start(TestRelayConfig {
        max_reqs: Some(2),
        ..Default::default()
    })
    .await;
    let mut client = connect_client(&relay.url()).await;
    client.subscribe("a", vec![kind1()]).await;
    client.subscribe("b", vec![kind1()]).await;
    let refused = client.try_req_all(vec![kind1()]).await;
    assert_eq!(refused, Err("rate-limited: too many REQs".to_owned()));
    // the client had 3 REQs in flight at once; the CLOSED freed the third
    assert_eq!(relay.max_concurrent_reqs_seen(), 3);
    assert!(client.try_req_all(vec![kind1()]).await.is_err());
    assert_eq!(relay.max_concurrent_reqs_seen(), 3);
    client.close_sub("a").await;
    assert!(client.try_req_all(vec![kind1()]).await.is_ok());
}

#[tokio::test]
async fn hostile_events_are_injected_before_every_eose() {
    let keys = Keys::generate();
    let other = Keys::generate();
    // forged: content changed after signing (id and sig no longer match)
    let mut forged = sign_notes(&keys, 1, TS + 50, "genuine").remove(0);
    forged.content = "forged".to_owned();
    // off-filter: a valid event of another kind
    let off_filter = EventBuilder::new(Kind::Metadata, "{}")
        .finalize(&other)
        .expect("sign");
    let relay = TestRelay::start(TestRelayConfig {
        hostile: vec![forged.as_json(), off_filter.as_json()],
        ..Default::default()
    })
    .await;
    let stored = sign_notes(&keys, 2, TS, "stored");
    relay.add_events(&stored).await;

    let mut client = connect_client(&relay.url()).await;
    let got = client
        .req_all(Filter::new().author(keys.public_key()).kind(Kind::TextNote))
        .await;
    let ids: Vec<EventId> = got.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 4);
    assert!(ids.contains(&stored[0].id) && ids.contains(&stored[1].id));
    assert_eq!(&ids[2..], &[forged.id, off_filter.id]); // injected last, just before EOSE
    assert!(got[2].verify().is_err());
    assert_eq!(relay.events_sent(), 4);
    // not stored
    assert_eq!(relay.event_ids().await.len(), 2);

    // raw frames: the sub id is JSON-escaped, injection precedes EOSE, also for empty results
    let sub = r#"we"ird\sub"#;
    client
        .send(serde_json::json!(["REQ", sub, {"kinds": [7]}]).to_string())
        .await;
    let mut frames = Vec::new();
    for _ in 0..3 {
        let text = client
            .recv_text(Duration::from_secs(5))
            .await
            .expect("frame");
        frames.push(serde_json::from_str::<serde_json::Value>(&text).expect("json"));
    }
    assert_eq!(frames[0][0], "EVENT");
    assert_eq!(frames[0][1], sub);
    assert_eq!(frames[0][2]["content"], "forged");
    assert_eq!(frames[1][2]["id"], off_filter.id.to_hex());
    assert_eq!(frames[2], serde_json::json!(["EOSE", sub]));
}

#[tokio::test]
async fn counts_events_and_bytes_sent() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let keys = Keys::generate();
    let events = sign_notes(&keys, 50, TS, "bytes");
    relay.add_events(&events).await;
    let mut client = connect_client(&relay.url()).await;
    assert_eq!(client.req_all(kind1()).await.len(), 50);
    assert_eq!(relay.events_sent(), 50);
    let event_bytes: usize = events.iter().map(|e| e.as_json().len()).sum();
    let sent = relay.bytes_sent();
    assert!(sent as usize > event_bytes, "{sent} <= {event_bytes}");
    assert!((sent as usize) < event_bytes + 50 * 40 + 100, "{sent}");
}

#[tokio::test]
async fn relay_limits_are_configurable() {
    let keys = Keys::generate();
    let relay = TestRelay::start(TestRelayConfig {
        default_filter_limit: Some(3),
        max_filter_limit: Some(4),
        notes_per_minute: Some(1),
        ..Default::default()
    })
    .await;
    relay.add_events(&sign_notes(&keys, 10, TS, "lim")).await;
    let mut client = connect_client(&relay.url()).await;
    assert_eq!(client.req_all(kind1()).await.len(), 3);
    assert_eq!(client.req_all(kind1().limit(100)).await.len(), 4);
    assert_eq!(client.req_all(kind1().limit(2)).await.len(), 2);
    let mut refused = 0;
    for event in sign_notes(&keys, 3, TS + 100, "write") {
        let (ok, message) = client.publish(&event).await;
        if !ok {
            assert!(message.starts_with("rate-limited:"), "{message}");
            refused += 1;
        }
    }
    assert!(refused >= 1);

    // default: unlimited writes
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let mut client = connect_client(&relay.url()).await;
    for event in sign_notes(&keys, 100, TS, "unlimited") {
        assert_eq!(client.publish(&event).await, (true, String::new()));
    }
    assert_eq!(relay.event_ids().await.len(), 100);
}

#[tokio::test]
async fn unparsable_message_ends_the_connection_like_local_relay() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let mut client = connect_client(&relay.url()).await;
    client.send(r#"["HELLO"]"#).await;
    client.expect_closed().await;
    // the relay itself lives on
    let mut client = connect_client(&relay.url()).await;
    assert!(client.req_all(kind1()).await.is_empty());
}

async fn http_get(port: u16, accept: Option<&str>) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{accept}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(&raw).expect("http") {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => panic!("partial response"),
    };
    let content_type = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-type"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .unwrap_or_default();
    let status = response.code.expect("status");
    (
        status,
        content_type,
        String::from_utf8_lossy(&raw[head_len..]).into_owned(),
    )
}

#[tokio::test]
async fn nip11_document_is_served() {
    let doc = serde_json::json!({
        "name": "grasp test relay",
        "supported_nips": [1, 11, 77],
        "limitation": {"max_subscriptions": 7, "max_limit": 300}
    })
    .to_string();
    let relay = TestRelay::start(TestRelayConfig {
        nip11: Some(doc.clone()),
        ..Default::default()
    })
    .await;
    let (status, content_type, body) = http_get(relay.port(), Some("application/nostr+json")).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/nostr+json");
    assert_eq!(body, doc);
    let info = RelayInformationDocument::from_json(&body).expect("NIP-11 doc");
    assert_eq!(
        info.limitation.expect("limitation").max_subscriptions,
        Some(7)
    );
    assert_eq!(relay.nip11_requests_seen(), 1);

    // without the Accept header: 404
    assert_eq!(http_get(relay.port(), None).await.0, 404);
    // WebSocket still works on the same port
    let mut client = connect_client(&relay.url()).await;
    assert!(client.req_all(kind1()).await.is_empty());

    // no document configured: 404
    let bare = TestRelay::start(TestRelayConfig::default()).await;
    assert_eq!(
        http_get(bare.port(), Some("application/nostr+json"))
            .await
            .0,
        404
    );
}

#[tokio::test]
async fn recv_errors_are_bounded() {
    let relay = TestRelay::start(TestRelayConfig::default()).await;
    let mut client: Client = connect_client(&relay.url()).await;
    assert_eq!(
        client.try_recv(Duration::from_millis(100)).await,
        Err(RecvError::Timeout)
    );
}

/// `["REQ",<sub>,{"kinds":[1]}]` padded with JSON whitespace to exactly `len` bytes.
fn padded_req(sub: &str, len: usize) -> String {
    let head = format!(r#"["REQ","{sub}",{{"kinds":[1]}}"#);
    let pad = len
        .checked_sub(head.len() + 1)
        .expect("len too small for the REQ");
    format!("{head}{}]", " ".repeat(pad))
}

#[tokio::test]
async fn oversized_frame_drops_the_connection_without_close_frame() {
    let max = TestRelayConfig::STRFRY_MAX_MESSAGE_LENGTH;
    let relay = TestRelay::start(TestRelayConfig::strfry()).await;
    relay
        .add_events(&sign_notes(&Keys::generate(), 2, TS, "frames"))
        .await;

    // exactly at the limit: served
    let mut client = connect_client(&relay.url()).await;
    client.send(padded_req("at-limit", max)).await;
    let mut events = 0;
    loop {
        match client.recv().await {
            RelayMessage::Event { .. } => events += 1,
            RelayMessage::EndOfStoredEvents(sub) => {
                assert_eq!(sub.as_str(), "at-limit");
                break;
            }
            other => panic!("expected EVENT/EOSE, got {other:?}"),
        }
    }
    assert_eq!(events, 2);
    assert_eq!(relay.frames_too_large(), 0);
    assert_eq!(relay.largest_client_frame(), max);
    assert_eq!(relay.reqs_seen(), 1);

    // one byte over: not forwarded, connection dropped, no close frame, no NOTICE
    client.send(padded_req("over", max + 1)).await;
    let started = std::time::Instant::now();
    match client.recv_text(Duration::from_secs(5)).await {
        Err(RecvError::Closed(how)) => {
            println!("client saw: {how}");
            assert!(!how.starts_with("close frame"), "{how}");
        }
        other => panic!("expected the connection to end without a frame, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(relay.frames_too_large(), 1);
    assert_eq!(relay.largest_client_frame(), max + 1);
    assert_eq!(relay.reqs_seen(), 1, "the oversized REQ was not looked at");
    tokio::time::timeout(Duration::from_secs(5), async {
        while relay.connections_open() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("proxy connection ends");

    // a binary frame over the limit too; the relay itself lives on
    let mut client = connect_client(&relay.url()).await;
    client.send(padded_req("small", 100)).await;
    assert!(matches!(client.recv().await, RelayMessage::Event { .. }));
    let mut raw = tokio_tungstenite::connect_async(relay.url().as_str())
        .await
        .expect("connect")
        .0;
    use futures_util::{SinkExt as _, StreamExt as _};
    raw.send(tokio_tungstenite::tungstenite::Message::binary(vec![
        b' ';
        max + 10
    ]))
    .await
    .expect("send binary");
    match tokio::time::timeout(Duration::from_secs(5), raw.next()).await {
        Ok(None) | Ok(Some(Err(_))) => {}
        Ok(Some(Ok(msg))) => panic!("expected no frame, got {msg:?}"),
        Err(_) => panic!("connection still open"),
    }
    assert_eq!(relay.frames_too_large(), 2);
    assert_eq!(relay.largest_client_frame(), max + 10);
    // the other client is unaffected
    assert_eq!(client.req_all(kind1()).await.len(), 2);

    relay.reset_counters();
    assert_eq!(relay.frames_too_large(), 0);
    assert_eq!(relay.largest_client_frame(), 0);

    // default: no limit
    let unlimited = TestRelay::start(TestRelayConfig::default()).await;
    let mut client = connect_client(&unlimited.url()).await;
    client.send(padded_req("big", 4 * max)).await;
    assert_eq!(
        client.recv().await,
        RelayMessage::EndOfStoredEvents(std::borrow::Cow::Owned(SubscriptionId::new("big")))
    );
    assert_eq!(unlimited.frames_too_large(), 0);
    assert_eq!(unlimited.largest_client_frame(), 4 * max);
}

#[tokio::test]
async fn stalling_nip11_answers_nothing_but_websocket_works() {
    let mut relay = TestRelay::start(TestRelayConfig {
        nip11_stall: true,
        ..TestRelayConfig::strfry()
    })
    .await;
    relay
        .add_events(&sign_notes(&Keys::generate(), 3, TS, "stall"))
        .await;
    let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", relay.port()))
        .await
        .expect("connect");
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: application/nostr+json\r\n\r\n",
        relay.port()
    );
    stalled
        .write_all(request.as_bytes())
        .await
        .expect("write request");
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(1), stalled.read(&mut buf)).await;
    assert!(read.is_err(), "expected no answer, got {read:?}");
    assert_eq!(relay.nip11_requests_seen(), 1);

    // WebSocket and other HTTP requests on the same port still work
    let mut client = connect_client(&relay.url()).await;
    assert_eq!(client.req_all(kind1()).await.len(), 3);
    assert_eq!(http_get(relay.port(), None).await.0, 404);
    // the stalled request is still unanswered
    let read = tokio::time::timeout(Duration::from_millis(200), stalled.read(&mut buf)).await;
    assert!(read.is_err(), "expected no answer, got {read:?}");

    // stopping the relay ends the stalled connection without a byte
    relay.stop().await;
    let n = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut buf))
        .await
        .expect("stalled connection ends on stop");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
}

#[tokio::test]
async fn strfry_preset_advertises_and_clamps() {
    let relay = TestRelay::start(TestRelayConfig::strfry()).await;
    let (status, content_type, body) = http_get(relay.port(), Some("application/nostr+json")).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "application/nostr+json")
    );
    let info = RelayInformationDocument::from_json(&body).expect("NIP-11 doc");
    assert!(info.supported_nips.expect("supported_nips").contains(&77));
    let limitation = info.limitation.expect("limitation");
    assert_eq!(limitation.max_message_length, Some(131_072));
    assert_eq!(limitation.max_subscriptions, Some(200));
    assert_eq!(limitation.max_limit, Some(500));
    assert_eq!(limitation.max_subid_length, Some(71));
    // not in nostr's `Limitation`
    let raw: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(raw["limitation"]["max_filters"], 200);

    let keys = Keys::generate();
    relay.add_events(&sign_notes(&keys, 600, TS, "clamp")).await;
    let mut client = connect_client(&relay.url()).await;
    assert_eq!(client.req_all(kind1().limit(1000)).await.len(), 500);
    assert_eq!(client.req_all(kind1()).await.len(), 500);
    assert_eq!(client.req_all(kind1().limit(20)).await.len(), 20);
}
