//! The adapter against real relays (nostr-relay-builder, in process, on
//! 127.0.0.1): discovery and fresh sync, live events, shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::EngineConfig;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::root;
use grasp_sync_tokio::{RelayStore, Summary, SyncManager};
use nostr::prelude::*;
use support::{announcement, sign, tag, TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(30);

/// An engine tuned for a fast test on loopback.
fn engine_config() -> EngineConfig {
    let mut config = EngineConfig::default()
        .with_relay_policy(RelayUrlPolicy::new().allow_local_addresses(true));
    config.timeouts.batch_window = Duration::from_millis(200);
    config
}

fn manager(own: &TestRelay) -> SyncManager {
    manager_with(own, engine_config(), prometheus::Registry::new())
}

/// A manager syncing into `own` (self-subscription and store).
fn manager_with(
    own: &TestRelay,
    config: EngineConfig,
    registry: prometheus::Registry,
) -> SyncManager {
    SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(config)
        .registry(registry)
        .build()
        .unwrap()
}

/// Polls `own` until it holds `expected` (bounded).
async fn wait_for(own: &TestRelay, expected: &BTreeSet<EventId>) -> BTreeSet<EventId> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let held = own.event_ids().await;
        if expected.is_subset(&held) || tokio::time::Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct World {
    own: TestRelay,
    a: TestRelay,
    b: TestRelay,
    expected: BTreeSet<EventId>,
    noise: Vec<EventId>,
    issue: Event,
    user: Keys,
}

async fn world() -> World {
    let config = || TestRelayConfig::default();
    let own = TestRelay::start(config()).await;
    let a = TestRelay::start(config()).await;
    let b = TestRelay::start(config()).await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(
        &maintainer,
        "alpha",
        &[&own.url(), &a.url(), &b.url()],
        base,
    );
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let a_tag = || tag(&["a", &repo]);
    let issue = sign(&user, 1621, "issue", vec![a_tag()], base + 1);
    let patch = sign(&user, 1617, "patch", vec![a_tag()], base + 2);
    let pr = sign(&user, 1618, "pr", vec![a_tag()], base + 3);
    let pr_update = sign(
        &user,
        1619,
        "",
        vec![tag(&["E", &pr.id.to_hex()]), a_tag()],
        base + 4,
    );
    let reply = sign(
        &user,
        1111,
        "reply",
        vec![tag(&["E", &issue.id.to_hex()])],
        base + 5,
    );
    let quote = sign(&user, 1, "quote", vec![tag(&["q", &repo])], base + 6);
    let reply_b = sign(
        &user,
        1111,
        "reply on b",
        vec![tag(&["e", &patch.id.to_hex()])],
        base + 7,
    );
    // A second repository, announced only on a remote relay, listing us.
    let other = Keys::generate();
    let beta = announcement(&other, "beta", &[&own.url(), &b.url()], base + 8);
    let beta_repo = coordinate(&other.public_key(), "beta");
    let beta_issue = root(&user, 1621, &beta_repo, "beta issue", base + 9);
    let noise: Vec<Event> = (0..5)
        .map(|n| sign(&user, 1, &format!("noise {n}"), Vec::new(), base + 10 + n))
        .collect();

    own.add_event(&alpha).await;
    a.add_events(&[
        alpha.clone(),
        issue.clone(),
        patch.clone(),
        pr.clone(),
        pr_update.clone(),
        reply.clone(),
        quote.clone(),
    ])
    .await;
    a.add_events(&noise).await;
    b.add_events(&[
        alpha.clone(),
        reply_b.clone(),
        beta.clone(),
        beta_issue.clone(),
    ])
    .await;
    b.add_events(&noise).await;
    let expected = [
        &alpha,
        &issue,
        &patch,
        &pr,
        &pr_update,
        &reply,
        &quote,
        &reply_b,
        &beta,
        &beta_issue,
    ]
    .iter()
    .map(|event| event.id)
    .collect();
    World {
        own,
        a,
        b,
        expected,
        noise: noise.iter().map(|event| event.id).collect(),
        issue,
        user,
    }
}

async fn stop(
    handle: grasp_sync_tokio::ShutdownHandle,
    run: tokio::task::JoinHandle<Summary>,
) -> Summary {
    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(2), run)
        .await
        .expect("stops")
        .expect("no panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_fresh_sync_store_exactly_the_matching_events() {
    let world = world().await;
    let manager = manager(&world.own);
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let held = wait_for(&world.own, &world.expected).await;
    assert!(
        world.expected.is_subset(&held),
        "missing {:?}",
        world.expected.difference(&held).collect::<Vec<_>>()
    );
    for noise in &world.noise {
        assert!(!held.contains(noise), "noise was synced");
    }
    assert_eq!(held, world.expected, "exactly the matching events");
    let summary = stop(shutdown, run).await;
    assert_eq!(
        summary.engine.dropped_forged + summary.engine.dropped_off_filter,
        0
    );
    assert!(summary.bytes_received > 0 && summary.bytes_sent > 0);
    let _ = (&world.a, &world.b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_published_after_historic_sync_arrives_live() {
    let world = world().await;
    let manager = manager(&world.own);
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let held = wait_for(&world.own, &world.expected).await;
    assert!(world.expected.is_subset(&held));
    let live = sign(
        &world.user,
        1111,
        "live reply",
        vec![tag(&["E", &world.issue.id.to_hex()])],
        Timestamp::now().as_secs(),
    );
    world.a.publish(&live).await;
    let mut expected = world.expected.clone();
    expected.insert(live.id);
    let held = wait_for(&world.own, &expected).await;
    assert!(
        held.contains(&live.id),
        "the live event reached the own relay"
    );
    stop(shutdown, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_an_active_sync_stops_every_task_within_one_second() {
    let world = world().await;
    let manager = manager(&world.own);
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    // Let connections open and sync start.
    let deadline = tokio::time::Instant::now() + WAIT;
    while world.a.connections_open() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = tokio::time::Instant::now();
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("run returned within one second")
        .expect("no panic");
    assert!(started.elapsed() <= Duration::from_secs(1));
    assert_eq!(
        summary.tasks_aborted, 0,
        "every connection task ended by itself"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while world.a.connections_open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(world.a.connections_open(), 0, "no connection left open");
}

/// An engine that retries and cools down fast, for tests that wait on it.
fn fast_engine_config() -> EngineConfig {
    let mut config = engine_config();
    // The connect timeout is the base backoff: keep it above a loaded
    // machine's handshake time.
    config.health.backoff.base = Duration::from_secs(2);
    config.health.backoff.max = Duration::from_secs(4);
    config.health.rate_limit_cooldown = Duration::from_secs(1);
    config.health.work_backoff.base = Duration::from_millis(500);
    config.timeouts.negentropy_timeout = Duration::from_secs(3);
    config
}

fn fast_manager(own: &TestRelay) -> SyncManager {
    manager_with(own, fast_engine_config(), prometheus::Registry::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_reconnect_catches_up_events_published_while_disconnected() {
    let mut world = world().await;
    let manager = fast_manager(&world.own);
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    assert!(world
        .expected
        .is_subset(&wait_for(&world.own, &world.expected).await));
    world.a.stop().await;
    let during = sign(
        &world.user,
        1111,
        "while away",
        vec![tag(&["E", &world.issue.id.to_hex()])],
        Timestamp::now().as_secs(),
    );
    world.a.add_event(&during).await;
    world.a.reset_counters();
    world.a.restart().await;
    let mut expected = world.expected.clone();
    expected.insert(during.id);
    let held = wait_for(&world.own, &expected).await;
    assert!(held.contains(&during.id), "caught up after reconnecting");
    assert_eq!(
        world.a.neg_opens_seen(),
        0,
        "a quick reconnect is not a full re-sync"
    );
    // The gap's event, plus its repetition on the page that confirms the
    // end of the catch-up (inclusive `until`); a full re-sync sends 8.
    assert!(
        world.a.events_sent() <= 2,
        "only the event published in the gap was sent again ({})",
        world.a.events_sent()
    );
    stop(shutdown, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negentropy_resync_downloads_nothing_again_and_req_fallback_pages_past_the_limit() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let nip77 = TestRelay::start(TestRelayConfig::default()).await;
    // Relays refusing NIP-77 the three ways real relays do.
    let refusing_with = |nip77| TestRelayConfig {
        nip77,
        default_filter_limit: Some(50),
        max_filter_limit: Some(50),
        ..TestRelayConfig::default()
    };
    let refusing = TestRelay::start(refusing_with(support::Nip77Refusal::Notice)).await;
    let neg_err = TestRelay::start(refusing_with(support::Nip77Refusal::Blocked)).await;
    let silent = TestRelay::start(refusing_with(support::Nip77Refusal::Silence)).await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(
        &maintainer,
        "alpha",
        &[
            &own.url(),
            &nip77.url(),
            &refusing.url(),
            &neg_err.url(),
            &silent.url(),
        ],
        base,
    );
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issues: Vec<Event> = (0..200)
        .map(|n| {
            sign(
                &user,
                1621,
                &format!("issue {n}"),
                vec![tag(&["a", &repo])],
                base + 1 + n / 4,
            )
        })
        .collect();
    own.add_event(&alpha).await;
    // The refusing relay alone holds the oldest 80 issues, below its
    // newest page of 50: only paging by `until` reaches them.
    nip77.add_events(&issues[80..]).await;
    nip77.add_event(&alpha).await;
    refusing.add_events(&issues[..120]).await;
    refusing.add_event(&alpha).await;
    neg_err.add_events(&issues[100..170]).await;
    neg_err.add_event(&alpha).await;
    silent.add_events(&issues[60..140]).await;
    silent.add_event(&alpha).await;
    let mut expected: BTreeSet<EventId> = issues.iter().map(|event| event.id).collect();
    expected.insert(alpha.id);

    let manager = fast_manager(&own);
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let held = wait_for(&own, &expected).await;
    assert_eq!(held, expected, "every relay fully synced");
    // The events may all have come from other relays first: wait until the
    // engine has taken each refusal (the relay is synced by REQ) and each
    // refusing relay has been paged through too.
    let refusers: Vec<RelayUrl> = [&refusing, &neg_err, &silent]
        .iter()
        .map(|relay| relay.url())
        .collect();
    let _ = tokio::time::timeout(
        WAIT,
        status.wait_for(|status| {
            refusers.iter().all(|url| {
                status.relays.iter().any(|relay| {
                    &relay.report.relay == url
                        && relay.report.method == grasp_sync_core::model::SyncMethod::ReqEose
                })
            })
        }),
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while [&refusing, &neg_err, &silent]
        .iter()
        .any(|relay| relay.reqs_seen() <= 4)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(nip77.neg_opens_seen() > 0, "synced by negentropy");
    for relay in [&refusing, &neg_err, &silent] {
        assert!(
            relay.reqs_seen() > 4,
            "a refusing relay was paged by REQ past its limit of 50: {} REQs, {} NEG-OPENs",
            relay.reqs_seen(),
            relay.neg_opens_seen()
        );
    }
    let first = stop(shutdown, run).await;
    assert_eq!(
        first.engine.negentropy_refusals, 3,
        "each refusal form (NOTICE, NEG-ERR, silence) remembered once per relay"
    );

    // A second sync of the same data: negentropy finds nothing missing.
    nip77.reset_counters();
    let manager = fast_manager(&own);
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    // Done is the manager's explicit state, not a quiet period.
    let complete = tokio::time::timeout(
        WAIT,
        status.wait_for(|status| status.historic_sync_complete),
    )
    .await;
    assert!(matches!(complete, Ok(Ok(_))), "historic sync completed");
    let second = stop(shutdown, run).await;
    assert!(
        nip77.neg_opens_seen() >= 2,
        "the second sync reconciled again: {} NEG-OPENs, {} REQs, {} connections, {} events sent; refusing relay {} NEG-OPENs {} REQs; first {first:?}; second {second:?}",
        nip77.neg_opens_seen(),
        nip77.reqs_seen(),
        nip77.connections_seen(),
        nip77.events_sent(),
        refusing.neg_opens_seen(),
        refusing.reqs_seen(),
    );
    assert_eq!(nip77.events_sent(), 0, "no event downloaded again");
    assert!(
        nip77.bytes_sent() < 20_000,
        "the re-sync cost {} bytes: fingerprints, not events",
        nip77.bytes_sent()
    );
    assert_eq!(second.events_stored, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_limits_are_respected_and_a_refusing_relay_is_still_synced() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let told = TestRelay::start(TestRelayConfig {
        max_reqs: Some(3),
        nip11: Some(r#"{"name":"told","limitation":{"max_subscriptions":3}}"#.into()),
        ..TestRelayConfig::default()
    })
    .await;
    let refusing = TestRelay::start(TestRelayConfig {
        max_reqs: Some(2),
        ..TestRelayConfig::default()
    })
    .await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let alpha = announcement(
        &maintainer,
        "alpha",
        &[&own.url(), &told.url(), &refusing.url()],
        base,
    );
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let mut events = vec![alpha.clone()];
    for n in 0..20u64 {
        let issue = sign(
            &user,
            1621,
            &format!("issue {n}"),
            vec![tag(&["a", &repo])],
            base + 1 + n,
        );
        events.push(sign(
            &user,
            1111,
            "reply",
            vec![tag(&["E", &issue.id.to_hex()])],
            base + 30 + n,
        ));
        events.push(issue);
    }
    own.add_event(&alpha).await;
    told.add_events(&events).await;
    refusing.add_events(&events).await;
    let expected: BTreeSet<EventId> = events.iter().map(|event| event.id).collect();
    let manager = fast_manager(&own);
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let held = wait_for(&own, &expected).await;
    assert_eq!(held, expected);
    let summary = stop(shutdown, run).await;
    assert!(
        told.max_concurrent_reqs_seen() <= 3,
        "a told limit is never exceeded ({})",
        told.max_concurrent_reqs_seen()
    );
    assert!(
        summary.engine.rate_limits >= 1,
        "'rate-limited: too many REQs' started the cooldown, and sync resumed after it"
    );
    assert!(
        summary.engine.subscription_refusals >= 1,
        "the refusing relay's limit was learned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_relay_gets_nothing_forged_or_off_filter_into_the_store() {
    let user = Keys::generate();
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issue = root(&user, 1621, &repo, "issue", base + 3);
    // A copy that tags our repository with its content changed: it matches
    // the filter, so only the id/signature check stops it.
    let tampered = Event::new(
        issue.id,
        issue.pubkey,
        issue.created_at,
        issue.kind,
        issue.tags.clone().to_vec(),
        "tampered",
        issue.sig,
    );
    let impostor = root(&user, 1621, &repo, "impostor", base + 4);
    let forged = grasp_sync_test_support::nip34::forged(&impostor, &issue);
    let off_filter = sign(&user, 1, "never asked for", Vec::new(), base + 5);
    let hostile = TestRelay::start(TestRelayConfig {
        hostile: vec![tampered.as_json(), forged.as_json(), off_filter.as_json()],
        ..TestRelayConfig::default()
    })
    .await;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &hostile.url()], base);
    hostile.add_events(&[alpha.clone(), issue.clone()]).await;
    own.add_event(&alpha).await;
    let expected: BTreeSet<EventId> = [alpha.id, issue.id].into();
    let registry = prometheus::Registry::new();
    let manager = manager_with(&own, fast_engine_config(), registry.clone());
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let held = wait_for(&own, &expected).await;
    assert!(expected.is_subset(&held));
    let summary = stop(shutdown, run).await;
    let dropped = |reason: &str| -> f64 {
        registry
            .gather()
            .iter()
            .filter(|family| family.name() == "grasp_sync_events_dropped_total")
            .flat_map(|family| family.get_metric().to_vec())
            .filter(|metric| {
                metric
                    .get_label()
                    .iter()
                    .any(|label| label.value() == reason)
            })
            .map(|metric| metric.get_counter().get_value())
            .sum()
    };
    assert!(
        dropped("forged") > 0.0,
        "the forged drop counter shows them"
    );
    assert!(
        dropped("off_filter") > 0.0,
        "the off-filter drop counter shows them"
    );
    let held = own.event_ids().await;
    assert!(!held.contains(&forged.id), "forged event stored");
    assert!(!held.contains(&off_filter.id), "off-filter event stored");
    assert_eq!(held, expected, "nothing but the matching events");
    let stored = own.stored_events().await;
    assert!(
        stored.iter().all(|event| event.content != "tampered"),
        "tampered copy stored"
    );
    assert!(
        summary.engine.dropped_forged > 0,
        "forged events were counted"
    );
    assert!(
        summary.engine.dropped_off_filter > 0,
        "off-filter events were counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_relay_hands_events_in_process_and_stores_in_its_database() {
    use nostr_database::NostrDatabase as _;
    let world = world().await;
    let database = Arc::new(nostr_memory::MemoryDatabase::unbounded());
    let registry = prometheus::Registry::new();
    let manager = SyncManager::builder()
        .store(Arc::new(grasp_sync_tokio::DatabaseStore::new(
            database.clone(),
        )))
        .engine_config(fast_engine_config())
        .registry(registry.clone())
        .build()
        .unwrap();
    let own_events = manager.own_events_sender();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    // The embedding relay hands us what it accepted: the announcement, then
    // every root event that sync stores (as its own accept hook would).
    let announcement = world.own.stored_events().await;
    for event in announcement {
        own_events.send(event).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut handed = BTreeSet::new();
    let mut held = BTreeSet::new();
    // The second repository is announced on a remote relay only; without an
    // own relay URL every accepted announcement is ours, beta included.
    while tokio::time::Instant::now() < deadline && !world.expected.is_subset(&held) {
        let events = database.query(Filter::new()).await.unwrap();
        for event in events.iter() {
            held.insert(event.id);
            let root = [30617, 1617, 1618, 1621].contains(&event.kind.as_u16());
            if root && handed.insert(event.id) {
                own_events.send(event.clone()).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let summary = stop(shutdown, run).await;
    assert!(
        world.expected.is_subset(&held),
        "missing {:?}",
        world.expected.difference(&held).collect::<Vec<_>>()
    );
    assert!(summary.events_stored >= world.expected.len() as u64 - 1);
    let names: BTreeSet<String> = registry
        .gather()
        .iter()
        .map(|family| family.name().to_owned())
        .collect();
    for name in [
        "grasp_sync_relay_connected",
        "grasp_sync_connection_attempts_total",
        "grasp_sync_relay_status",
        "grasp_sync_events_synced_total",
        "grasp_sync_relays_tracked_total",
    ] {
        assert!(names.contains(name), "metric {name} registered: {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_self_subscription_reads_the_whole_own_history_past_the_relays_page_limit() {
    let own = TestRelay::start(TestRelayConfig {
        max_filter_limit: Some(50),
        default_filter_limit: Some(50),
        ..TestRelayConfig::default()
    })
    .await;
    let a = TestRelay::start(TestRelayConfig::default()).await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 10_000;
    // The announcement and the first issue are the oldest of 121 events on
    // the own relay, far below its newest page of 50.
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &a.url()], base);
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issues: Vec<Event> = (0..120)
        .map(|n| {
            sign(
                &user,
                1621,
                &format!("issue {n}"),
                vec![tag(&["a", &repo])],
                base + 1 + n,
            )
        })
        .collect();
    own.add_event(&alpha).await;
    own.add_events(&issues).await;
    let reply = sign(
        &user,
        1111,
        "reply to the oldest issue",
        vec![tag(&["E", &issues[0].id.to_hex()])],
        base + 500,
    );
    a.add_events(&[alpha.clone(), reply.clone()]).await;
    let manager = fast_manager(&own);
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let held = wait_for(&own, &BTreeSet::from([reply.id])).await;
    stop(shutdown, run).await;
    assert!(
        held.contains(&reply.id),
        "the oldest announcement and root event were read"
    );
}
