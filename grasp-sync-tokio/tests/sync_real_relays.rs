//! The adapter against real relays (nostr-relay-builder, in process, on
//! 127.0.0.1): discovery and fresh sync, live events, shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::EngineConfig;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_core::RepoRef;
use grasp_sync_tokio::{RelayStore, Summary, SyncManager};
use nostr::prelude::*;
use support::{TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(30);

fn sign(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>, at: u64) -> Event {
    EventBuilder::new(Kind::Custom(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .unwrap()
}

fn tag(values: &[&str]) -> Tag {
    Tag::parse(values.iter().copied()).unwrap()
}

fn announcement(keys: &Keys, id: &str, relays: &[&RelayUrl], at: u64) -> Event {
    let mut relays_tag = vec!["relays".to_owned()];
    relays_tag.extend(relays.iter().map(|relay| relay.to_string()));
    let tags = vec![Tag::identifier(id), Tag::parse(relays_tag).unwrap()];
    sign(keys, 30617, "", tags, at)
}

/// An engine tuned for a fast test on loopback.
fn engine_config() -> EngineConfig {
    EngineConfig {
        relay_policy: RelayUrlPolicy::new().allow_local_addresses(true),
        batch_window: Duration::from_millis(200),
        ..EngineConfig::default()
    }
}

fn manager(own: &TestRelay) -> SyncManager {
    SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(engine_config())
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
    let repo = RepoRef::new(maintainer.public_key(), "alpha")
        .unwrap()
        .to_string();
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
    let beta_repo = RepoRef::new(other.public_key(), "beta")
        .unwrap()
        .to_string();
    let beta_issue = sign(
        &user,
        1621,
        "beta issue",
        vec![tag(&["a", &beta_repo])],
        base + 9,
    );
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
