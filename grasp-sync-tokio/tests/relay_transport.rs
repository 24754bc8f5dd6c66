//! The manager driven through a plugged-in [`RelayTransport`]: a `mockall`
//! mock where it says more than a real relay could (a refused connect, a
//! frame after the connection closed, the order of frames both ways), and
//! an in-memory transport to in-process NIP-01 relays whose events end up
//! in the store, with no socket anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grasp_sync_core::engine::{EngineConfig, RelayLimits};
use grasp_sync_core::model::ConnectionStatus;
use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::{announcement, reply, root};
use grasp_sync_tokio::futures_util::future::BoxFuture;
use grasp_sync_tokio::futures_util::{sink, stream};
use grasp_sync_tokio::{
    ConnectError, ConnectRequest, DatabaseStore, Incoming, RelayConnection, RelayTransport,
    SendError, SyncManager, SyncStatus,
};
use mockall::mock;
use nostr::prelude::*;
use nostr_database::NostrDatabase;
use tokio::sync::{mpsc, watch};

const WAIT: Duration = Duration::from_secs(20);

mock! {
    Transport {}
    impl RelayTransport for Transport {
        fn connect(
            &self,
            request: ConnectRequest,
        ) -> BoxFuture<'static, Result<RelayConnection, ConnectError>>;
        fn relay_limits(
            &self,
            relay: RelayUrl,
            timeout: Duration,
        ) -> BoxFuture<'static, Option<RelayLimits>>;
    }
}

fn url(text: &str) -> RelayUrl {
    RelayUrl::parse(text).unwrap()
}

/// The test's end of a connection made of channels: what the manager sent,
/// and where to push what the relay says.
struct Peer {
    sent: mpsc::UnboundedReceiver<String>,
    say: mpsc::UnboundedSender<Incoming>,
}

impl Peer {
    /// The next frame the manager sent, parsed (bounded wait).
    async fn next_sent(&mut self) -> ClientMessage<'static> {
        let text = tokio::time::timeout(WAIT, self.sent.recv())
            .await
            .expect("the manager sends within the wait")
            .expect("the connection is open");
        ClientMessage::from_json(&text).expect("a NIP-01 client message")
    }

    fn say(&self, message: RelayMessage<'_>) {
        let _ = self.say.send(Incoming::Text(message.as_json().into()));
    }
}

/// A connection over unbounded channels, and the test's end of it.
fn channel_connection() -> (RelayConnection, Peer) {
    let (sent_tx, sent) = mpsc::unbounded_channel::<String>();
    let (say, said) = mpsc::unbounded_channel::<Incoming>();
    let outgoing = sink::unfold(sent_tx, |sent_tx, text: String| async move {
        sent_tx.send(text).map_err(|_| SendError::Closed)?;
        Ok::<_, SendError>(sent_tx)
    });
    let incoming = stream::unfold(said, |mut said| async move {
        said.recv().await.map(|item| (item, said))
    });
    (RelayConnection::new(outgoing, incoming), Peer { sent, say })
}

/// Hands the peers of the connections a mock opens to the test.
type Peers = mpsc::UnboundedSender<(RelayUrl, Peer)>;

/// `connect` answers every request with a channel connection whose peer
/// goes to `peers`; no NIP-11 limits.
fn connecting_mock(peers: Peers) -> MockTransport {
    let mut transport = MockTransport::new();
    transport.expect_connect().returning(move |request| {
        let (connection, peer) = channel_connection();
        let _ = peers.send((request.relay().clone(), peer));
        Box::pin(async move { Ok(connection) })
    });
    transport
        .expect_relay_limits()
        .returning(|_, _| Box::pin(std::future::ready(None)));
    transport
}

/// An engine for a fast test: short backoffs and batch window, NIP-77 off
/// (the peers answer REQs only), Sync+ off (no index relays to reach).
fn engine_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.timeouts.batch_window = Duration::from_millis(50);
    config.health.backoff.base = Duration::from_millis(300);
    config.health.backoff.max = Duration::from_millis(600);
    config.health.work_backoff.base = Duration::from_millis(300);
    config.negentropy = false;
    config.sync_plus.enabled = false;
    config
}

fn memory_store() -> (Arc<nostr_memory::MemoryDatabase>, Arc<DatabaseStore>) {
    let database = Arc::new(nostr_memory::MemoryDatabase::unbounded());
    (database.clone(), Arc::new(DatabaseStore::new(database)))
}

/// Waits until the status satisfies `ready` (bounded).
async fn status_until(
    status: &mut watch::Receiver<SyncStatus>,
    what: &str,
    ready: impl FnMut(&SyncStatus) -> bool,
) -> SyncStatus {
    let shown = tokio::time::timeout(WAIT, status.wait_for(ready))
        .await
        .map(|shown| shown.expect("the manager runs").clone());
    match shown {
        Ok(shown) => shown,
        Err(_) => panic!("status never showed {what}: {:?}", *status.borrow()),
    }
}

/// Stops the manager and checks it stopped cleanly (no task aborted, no
/// panic in the run).
async fn stop(
    shutdown: grasp_sync_tokio::ShutdownHandle,
    run: tokio::task::JoinHandle<grasp_sync_tokio::Summary>,
) {
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the manager stops")
        .expect("the manager did not panic");
    assert_eq!(summary.tasks_aborted, 0, "every task ended on its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connect_is_reported_failed_and_retried_after_a_backoff() {
    let relay = url("wss://down.example.com");
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut transport = MockTransport::new();
    let seen = attempts.clone();
    transport.expect_connect().returning(move |request| {
        seen.lock()
            .unwrap()
            .push((request.relay().clone(), tokio::time::Instant::now()));
        Box::pin(async { Err(ConnectError::Unreachable("refused by the test".into())) })
    });
    transport
        .expect_relay_limits()
        .returning(|_, _| Box::pin(std::future::ready(None)));
    let (_, store) = memory_store();
    let registry = prometheus::Registry::new();
    let manager = SyncManager::builder()
        .engine_config(engine_config())
        .bootstrap_relay(relay.clone())
        .store(store)
        .registry(registry.clone())
        .transport(transport)
        .build()
        .unwrap();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    // The status shows the relay failing, not connected, with a retry due.
    let failing = status_until(&mut status, "the relay failing", |status| {
        status.relays.iter().any(|r| {
            r.report.relay == relay
                && r.report.last_error.is_some()
                && r.report.connection != ConnectionStatus::Connected
                && r.retry_in.is_some()
        })
    })
    .await;
    assert_eq!(failing.relays_connected, 0);
    let shown = failing
        .relays
        .iter()
        .find(|r| r.report.relay == relay)
        .unwrap();
    assert!(
        shown
            .report
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains("connection failed")),
        "{shown:?}"
    );

    // It is tried again, after a backoff each time (not at once).
    let deadline = tokio::time::Instant::now() + WAIT;
    while attempts.lock().unwrap().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attempts = attempts.lock().unwrap().clone();
    assert!(attempts.len() >= 3, "retried: {attempts:?}");
    assert!(attempts.iter().all(|(to, _)| *to == relay));
    for pair in attempts.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap >= Duration::from_millis(200),
            "a retry {gap:?} after the failure: no backoff"
        );
    }
    let failures = registry
        .gather()
        .iter()
        .filter(|family| family.name().ends_with("connection_attempts_total"))
        .flat_map(|family| family.get_metric().to_vec())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|label| label.value() == "failure")
        })
        .map(|metric| metric.get_counter().get_value())
        .sum::<f64>();
    assert!(failures >= 2.0, "failures counted: {failures}");
    stop(shutdown, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_after_the_connection_closed_is_not_delivered() {
    let relay = url("wss://closing.example.com");
    let (peers_tx, mut peers) = mpsc::unbounded_channel();
    let (_, store) = memory_store();
    let manager = SyncManager::builder()
        .engine_config(engine_config())
        .bootstrap_relay(relay.clone())
        .store(store)
        .transport(connecting_mock(peers_tx))
        .build()
        .unwrap();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    let (to, first) = tokio::time::timeout(WAIT, peers.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, relay);
    let received = |status: &SyncStatus| {
        status
            .relays
            .iter()
            .find(|r| r.report.relay == relay)
            .map(|r| r.bytes_received)
    };
    // A frame before the close is delivered (counted as received); it is
    // waited for before the close, so the reconnect cannot make its report
    // stale (reports of an older connection are dropped) …
    let before = RelayMessage::notice("before the close").as_json();
    first.say(RelayMessage::notice("before the close"));
    status_until(
        &mut status,
        "the frame before the close counted",
        |status| received(status) == Some(before.len() as u64),
    )
    .await;
    // … the connection ends, and the stream still yields a frame and more.
    let _ = first
        .say
        .send(Incoming::Closed("closed by the test".into()));
    let after = RelayMessage::notice("after the close: never delivered, a longer text");
    first.say(after.clone());
    first.say(after);
    let _ = first.say.send(Incoming::TooLarge(1 << 30));

    // The engine sees the connection lost and connects again …
    let (to, _second) = tokio::time::timeout(WAIT, peers.recv())
        .await
        .expect("a new connection after the close")
        .unwrap();
    assert_eq!(to, relay);
    let seen = status_until(&mut status, "the relay connected again", |status| {
        status
            .relays
            .iter()
            .any(|r| r.report.relay == relay && r.report.connection == ConnectionStatus::Connected)
    })
    .await;
    // … and of the first connection only the frame before the close
    // arrived: the bytes received are its own.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = status.borrow().clone();
    assert_eq!(received(&seen), Some(before.len() as u64), "{seen:?}");
    assert_eq!(received(&now), Some(before.len() as u64), "{now:?}");
    let last_error = now
        .relays
        .iter()
        .find(|r| r.report.relay == relay)
        .and_then(|r| r.report.last_error.clone());
    assert!(
        !last_error
            .as_deref()
            .unwrap_or_default()
            .contains("over the limit"),
        "the TooLarge after the close was not reported: {last_error:?}"
    );
    stop(shutdown, run).await;
}

/// The numeric suffix of an engine subscription id (`gs-<purpose>-<n>`).
fn sub_number(id: &SubscriptionId) -> Option<u64> {
    id.as_str().rsplit('-').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_go_out_in_the_order_of_the_commands_and_come_in_in_the_order_received() {
    let own = url("wss://own.example.com");
    let remote = url("wss://remote.example.com");
    let (peers_tx, mut peers) = mpsc::unbounded_channel();
    let (_, store) = memory_store();
    let announced = Arc::new(Mutex::new(Vec::new()));
    let observed = announced.clone();
    let manager = SyncManager::builder()
        .engine_config(engine_config())
        .own_relay(own.clone())
        .store(store)
        .on_own_announcement(move |event| {
            let identifier = event.tags.identifier().unwrap_or_default().to_owned();
            observed.lock().unwrap().push(identifier);
        })
        .transport(connecting_mock(peers_tx))
        .build()
        .unwrap();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    let (to, mut own_peer) = tokio::time::timeout(WAIT, peers.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, own, "the own relay is reached through the transport");
    // The own relay's live subscription, then its history: in the order
    // the engine issues them.
    let mut history = None;
    let mut order = Vec::new();
    while history.is_none() {
        if let ClientMessage::Req {
            subscription_id, ..
        } = own_peer.next_sent().await
        {
            order.push(subscription_id.to_string());
            if subscription_id.as_str().contains("history") {
                history = Some(subscription_id.into_owned());
            }
        }
    }
    assert_eq!(order.len(), 2, "{order:?}");
    assert!(order[0].contains("live"), "live first: {order:?}");
    let history = history.unwrap();

    // 64 announcements listing the remote relay: the first 32 large (slow
    // to parse), the rest small, pushed at once (two decoding tasks).
    let maintainer = Keys::generate();
    let at = Timestamp::now().as_secs() - 1_000;
    let identifiers: Vec<String> = (0..64).map(|n| format!("repo-{n:02}")).collect();
    for (n, identifier) in identifiers.iter().enumerate() {
        let mut event = announcement(&maintainer, identifier, &[&own, &remote], at + n as u64);
        if n < 32 {
            let padding = "x".repeat(200_000);
            event = EventBuilder::new(event.kind, padding)
                .tags(event.tags.clone())
                .custom_created_at(event.created_at)
                .finalize(&maintainer)
                .unwrap();
        }
        own_peer.say(RelayMessage::event(history.clone(), event));
    }
    own_peer.say(RelayMessage::eose(history.clone()));

    // Received in order: the observer saw the announcements as sent.
    let deadline = tokio::time::Instant::now() + WAIT;
    while announced.lock().unwrap().len() < identifiers.len()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *announced.lock().unwrap(),
        identifiers,
        "arrival order kept"
    );

    // The remote relay: every REQ answered with EOSE at once; the frames
    // must come in the order the engine numbered its subscriptions, and
    // each CLOSE after its REQ.
    let (to, mut remote_peer) = tokio::time::timeout(WAIT, peers.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, remote);
    let mut opened: Vec<u64> = Vec::new();
    let mut frames = Vec::new();
    let quiet = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < quiet {
        let Ok(Some(text)) =
            tokio::time::timeout(Duration::from_millis(500), remote_peer.sent.recv()).await
        else {
            continue;
        };
        let message = ClientMessage::from_json(&text).unwrap();
        match &message {
            ClientMessage::Req {
                subscription_id, ..
            } => {
                let n = sub_number(subscription_id).expect("an engine id");
                if let Some(last) = opened.last() {
                    assert!(
                        n > *last,
                        "REQ {subscription_id} after REQ gs-…-{last}: out of order ({frames:?})"
                    );
                }
                opened.push(n);
                remote_peer.say(RelayMessage::eose(subscription_id.clone().into_owned()));
            }
            ClientMessage::Close(id) => {
                let n = sub_number(id).expect("an engine id");
                assert!(
                    opened.contains(&n),
                    "CLOSE {id} before its REQ ({frames:?})"
                );
            }
            _ => {}
        }
        frames.push(text);
    }
    assert!(opened.len() >= 2, "several REQs to compare: {frames:?}");
    stop(shutdown, run).await;
}

/// An in-process NIP-01 relay: answers `REQ` with its stored events that
/// match and `EOSE`, stores `EVENT`s (`OK`), refuses NIP-77.
#[derive(Clone)]
struct MemoryRelay {
    database: Arc<nostr_memory::MemoryDatabase>,
}

impl MemoryRelay {
    /// Serves one connection: reads what the client sends, answers on `say`.
    fn serve(
        self,
        mut sent: mpsc::UnboundedReceiver<String>,
        say: mpsc::UnboundedSender<Incoming>,
    ) {
        tokio::spawn(async move {
            while let Some(text) = sent.recv().await {
                let Ok(message) = ClientMessage::from_json(&text) else {
                    continue;
                };
                for answer in self.answer(message).await {
                    if say.send(Incoming::Text(answer.as_json().into())).is_err() {
                        return;
                    }
                }
            }
        });
    }

    async fn answer(&self, message: ClientMessage<'_>) -> Vec<RelayMessage<'static>> {
        match message {
            ClientMessage::Req {
                subscription_id,
                filters,
            } => {
                let id = subscription_id.into_owned();
                let mut events = BTreeSet::new();
                for filter in filters {
                    events.extend(self.database.query(filter.into_owned()).await.unwrap());
                }
                let mut answers: Vec<RelayMessage<'static>> = events
                    .into_iter()
                    .map(|event| RelayMessage::event(id.clone(), event))
                    .collect();
                answers.push(RelayMessage::eose(id));
                answers
            }
            ClientMessage::Event(event) => {
                let saved = self.database.save_event(&event).await.is_ok();
                vec![RelayMessage::ok(event.id, saved, "")]
            }
            ClientMessage::NegOpen {
                subscription_id, ..
            } => vec![RelayMessage::NegErr {
                subscription_id: std::borrow::Cow::Owned(subscription_id.into_owned()),
                message: "blocked: no NIP-77 here".into(),
            }],
            _ => Vec::new(),
        }
    }
}

/// A transport to in-process relays by URL, over channels: no socket, no
/// WebSocket, no DNS.
struct InMemoryTransport {
    relays: HashMap<RelayUrl, MemoryRelay>,
}

impl RelayTransport for InMemoryTransport {
    fn connect(
        &self,
        request: ConnectRequest,
    ) -> BoxFuture<'static, Result<RelayConnection, ConnectError>> {
        let relay = self.relays.get(request.relay()).cloned();
        let name = request.relay().to_string();
        Box::pin(async move {
            let relay = relay.ok_or(ConnectError::Unreachable(format!("no relay {name}")))?;
            let (connection, peer) = channel_connection();
            relay.serve(peer.sent, peer.say);
            Ok(connection)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sync_into_the_store_through_an_in_memory_transport() {
    let own = url("wss://own.example.com");
    let remote = url("wss://remote.example.com");
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let at = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(&maintainer, "alpha", &[&own, &remote], at);
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issue = root(&user, 1621, &repo, "an issue", at + 1);
    let patch = root(&user, 1617, &repo, "a patch", at + 2);
    let answer = reply(&user, &issue.id, "a reply", at + 3);
    let noise = EventBuilder::new(Kind::TextNote, "not ours")
        .finalize(&user)
        .unwrap();

    // The own relay's database is the store's: what is synced is served.
    let (own_database, store) = memory_store();
    own_database.save_event(&alpha).await.unwrap();
    let remote_database = Arc::new(nostr_memory::MemoryDatabase::unbounded());
    for event in [&alpha, &issue, &patch, &answer, &noise] {
        remote_database.save_event(event).await.unwrap();
    }
    let transport = InMemoryTransport {
        relays: HashMap::from([
            (
                own.clone(),
                MemoryRelay {
                    database: own_database.clone(),
                },
            ),
            (
                remote.clone(),
                MemoryRelay {
                    database: remote_database,
                },
            ),
        ]),
    };

    let manager = SyncManager::builder()
        .engine_config(engine_config())
        .own_relay(own.clone())
        .store(store)
        .transport(transport)
        .build()
        .unwrap();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let done = status_until(&mut status, "historic sync complete", |status| {
        status.historic_sync_complete && status.repositories == 1
    })
    .await;
    let from_remote = done
        .relays
        .iter()
        .find(|r| r.report.relay == remote)
        .expect("the remote relay is synced");
    assert!(from_remote.report.historic_confirmed, "{from_remote:?}");
    assert!(from_remote.bytes_received > 0);

    for event in [&issue, &patch, &answer] {
        assert!(
            own_database.event_by_id(&event.id).await.unwrap().is_some(),
            "{} (kind {}) is in the store",
            event.id,
            event.kind
        );
    }
    assert!(
        own_database.event_by_id(&noise.id).await.unwrap().is_none(),
        "what no repository asks for is not synced"
    );
    stop(shutdown, run).await;
}
