//! The caps on what strangers make us do, against real relays on
//! 127.0.0.1: an announcement listing 1 000 relays leads to at most the
//! configured number of connections, and the refused rest is counted; junk
//! relays that serve nothing, or answer EOSE and deliver nothing no other
//! relay did, yield their slots to an honest one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::root;
use grasp_sync_tokio::{RelayStore, SyncManager};
use nostr::prelude::*;
use support::{
    announcement, counter_value, loopback_engine_config, sign, tag, TestRelay, TestRelayConfig,
};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_listing_1000_relays_connects_at_most_the_cap() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    // 1 000 distinct relay URLs, all served by the one remote relay (the
    // path tells them apart for the engine).
    let base_url = remote.url().as_str().trim_end_matches('/').to_owned();
    let listed: Vec<RelayUrl> = (0..1000)
        .map(|n| RelayUrl::parse(&format!("{base_url}/r{n}")).unwrap())
        .collect();
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 1_000;
    let own_url = own.url();
    let mut relays: Vec<&RelayUrl> = vec![&own_url];
    relays.extend(listed.iter());
    let wide = announcement(&maintainer, "wide", &relays, base);
    let repo = coordinate(&maintainer.public_key(), "wide");
    let issue = root(&maintainer, 1621, &repo, "issue", base + 1);
    own.add_event(&wide).await;
    remote.add_events(&[wide, issue.clone()]).await;

    let cap = 20;
    let mut config = loopback_engine_config();
    config.caps.max_relays_per_announcement = cap;
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .engine_config(config)
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .build()
        .unwrap();
    let registry = manager.registry().clone();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let done = tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| status.historic_sync_complete && status.relays_connected == cap)
            .await
            .map(|status| status.clone())
    })
    .await
    .expect("historic sync completes on the relays within the cap")
    .expect("manager running");
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(done.relays.len(), cap, "relays tracked");
    assert!(
        done.relays
            .iter()
            .all(|relay| listed[..cap].contains(&relay.report.relay)),
        "the first relays of the announcement are the ones synced"
    );
    assert_eq!(remote.connections_seen(), cap, "connections opened");
    assert!(remote.nip11_requests_seen() <= cap);
    assert_eq!(
        counter_value(&registry, "grasp_sync_refused_total", "relays_over_cap") as usize,
        1000 - cap
    );
    assert!(own.event_ids().await.contains(&issue.id));
}

/// Junk relays (nothing listens on their port) of one announcement take
/// every slot; an honest repository on a real relay is announced too. The
/// junk relays, serving nothing, yield their slots once their trial period
/// is over: the honest relay is synced, and the evictions are counted in
/// the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_relays_yield_their_slots_to_an_honest_relay() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let honest = TestRelay::start(TestRelayConfig::default()).await;
    // Port 1 on loopback: every connection is refused at once.
    let junk: Vec<RelayUrl> = (0..6)
        .map(|n| RelayUrl::parse(&format!("ws://127.0.0.1:1/junk{n}")).unwrap())
        .collect();
    let (flooder, owner) = (Keys::generate(), Keys::generate());
    let base = Timestamp::now().as_secs() - 1_000;
    let own_url = own.url();
    let honest_url = honest.url();
    let mut listed: Vec<&RelayUrl> = vec![&own_url];
    listed.extend(junk.iter());
    let flood = announcement(&flooder, "flood", &listed, base);
    let ours = announcement(&owner, "honest", &[&own_url, &honest_url], base + 1);
    let issue = root(
        &owner,
        1621,
        &coordinate(&owner.public_key(), "honest"),
        "issue",
        base + 2,
    );
    own.add_events(&[flood, ours.clone()]).await;
    honest.add_events(&[ours, issue.clone()]).await;

    // Five slots for seven relays: whichever announcement is read first,
    // some relay waits while junk relays hold slots.
    let mut config = loopback_engine_config();
    config.caps.max_relays = 5;
    config.caps.relay_trial_period = Duration::from_secs(2);
    config.timeouts.disconnect_check_interval = Duration::from_millis(500);
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .engine_config(config)
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .build()
        .unwrap();
    let registry = manager.registry().clone();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let evicted = || counter_value(&registry, "grasp_sync_refused_total", "relays_evicted");
    tokio::time::timeout(WAIT, async {
        loop {
            if own.event_ids().await.contains(&issue.id) && evicted() >= 1.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the honest relay is synced and junk relays yield their slots");
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert!(summary.engine.relays_evicted >= 1, "{summary:?}");
    assert!(honest.connections_seen() >= 1);
}

/// Issue 45, item 3, against real relays: junk relays that answer every
/// request (one real, empty relay behind 12 listed URLs, its paths telling
/// them apart) take every slot, and each one's sync is confirmed. Answering
/// EOSE used to count as serving, and a serving relay never yielded: the
/// honest relay announced afterwards waited forever. Now a slot is kept
/// only by delivering what no other relay did: the junk relays yield once
/// their trial period (2 s here) is over, and the honest relay is synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eose_answering_junk_relays_yield_their_slots_to_an_honest_relay() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let junk_server = TestRelay::start(TestRelayConfig::default()).await;
    let honest = TestRelay::start(TestRelayConfig::default()).await;
    let base_url = junk_server.url().as_str().trim_end_matches('/').to_owned();
    let base = Timestamp::now().as_secs() - 1_000;
    let own_url = own.url();
    // 3 keys × 4 announcements, one junk relay each.
    let mut flood = Vec::new();
    for k in 0..3 {
        let key = Keys::generate();
        for n in 0..4 {
            let junk = RelayUrl::parse(&format!("{base_url}/junk-{k}-{n}")).unwrap();
            let at = base + flood.len() as u64;
            flood.push(announcement(
                &key,
                &format!("junk-{n}"),
                &[&own_url, &junk],
                at,
            ));
        }
    }
    own.add_events(&flood).await;
    let owner = Keys::generate();
    let honest_url = honest.url();
    let ours = announcement(&owner, "honest", &[&own_url, &honest_url], base + 100);
    let issue = root(
        &owner,
        1621,
        &coordinate(&owner.public_key(), "honest"),
        "issue",
        base + 101,
    );
    honest.add_events(&[ours.clone(), issue.clone()]).await;

    // Ten slots for twelve junk relays. Every relay here is on 127.0.0.1,
    // one network: its share is lifted so that only earning is at stake.
    let mut config = loopback_engine_config();
    config.caps.max_relays = 10;
    config.caps.max_relays_per_network = 1_000;
    config.caps.relay_trial_period = Duration::from_secs(2);
    config.timeouts.disconnect_check_interval = Duration::from_millis(500);
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .engine_config(config)
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .build()
        .unwrap();
    let registry = manager.registry().clone();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| status.historic_sync_complete && status.relays_connected >= 10)
            .await
            .map(|_| ())
    })
    .await
    .expect("junk relays fill every slot and answer")
    .expect("manager running");
    // The honest repository is announced only now (live to the sync).
    own.publish(&ours).await;
    let evicted = || counter_value(&registry, "grasp_sync_refused_total", "relays_evicted");
    tokio::time::timeout(WAIT, async {
        loop {
            if own.event_ids().await.contains(&issue.id) && evicted() >= 1.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the honest relay is admitted and synced, junk relays yielding");
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert!(summary.engine.relays_evicted >= 1, "{summary:?}");
    assert!(honest.connections_seen() >= 1);
}

/// A relay that answers every NEG-MSG with another round that claims new
/// ids and never finishes: the session is cut off at the round cap,
/// counted, and the relay's events are synced by REQ all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_endless_negentropy_rounds_is_cut_off_counted_and_synced() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let endless = TestRelay::start(
        TestRelayConfig::default().with_faults(support::FaultPlan::endless_negentropy(7)),
    )
    .await;
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 1_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &endless.url()], base);
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issues: Vec<Event> = (0..30)
        .map(|n| {
            sign(
                &maintainer,
                1621,
                &format!("issue {n}"),
                vec![tag(&["a", &repo])],
                base + 1 + n,
            )
        })
        .collect();
    own.add_event(&alpha).await;
    endless.add_event(&alpha).await;
    endless.add_events(&issues).await;

    let rounds = 40;
    let mut config = loopback_engine_config();
    config.caps.max_negentropy_rounds = rounds;
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .engine_config(config)
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .build()
        .unwrap();
    let registry = manager.registry().clone();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| status.historic_sync_complete && status.root_events >= 30)
            .await
            .map(|_| ())
    })
    .await
    .expect("historic sync completes despite the endless relay")
    .expect("manager running");
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();

    let held = own.event_ids().await;
    assert!(
        issues.iter().all(|issue| held.contains(&issue.id)),
        "the relay's events are synced by REQ after the cut"
    );
    assert!(summary.engine.negentropy_sessions_cut >= 1, "{summary:?}");
    assert!(
        counter_value(
            &registry,
            "grasp_sync_refused_total",
            "negentropy_session_cut"
        ) >= 1.0,
        "the cut is counted in the metrics"
    );
    // Every session the relay kept going was answered at most `rounds`
    // times: the endless rounds served stay within the cap per session.
    let served = endless.fault_counts().endless_rounds;
    let sessions = endless.neg_opens_seen() as u64;
    assert!(sessions >= 1);
    assert!(
        served <= sessions * (u64::from(rounds) + 1),
        "{served} rounds over {sessions} sessions"
    );
}
