//! The own relay's events are read whatever their size: it accepted them
//! under its own limit. A message over the limit for strangers' relays
//! (`ConnectionConfig::max_message_size`, strfry's 128 KiB) from the own
//! relay would otherwise end the self-subscription each time it is sent, so
//! the repository it announces would never be ours.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use grasp_sync_test_support::nip34::Announcement;
use nostr::prelude::*;
use support::{loopback_engine_config, manager_into, sign, tag, TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_larger_than_a_strangers_message_limit_on_the_own_relay_is_read() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let keys = Keys::generate();
    let at = Timestamp::now().as_secs() - 1_000;
    // A long description: 200 KiB, over the 128 KiB message limit.
    let description = "a".repeat(200 * 1024);
    let big = Announcement::new("big")
        .relays([own.url(), remote.url()])
        .tag(tag(&["description", &description]))
        .at(at)
        .sign(&keys);
    assert!(big.as_json().len() > 128 * 1024);
    let repo = RepoRef::new(keys.public_key(), "big").unwrap().to_string();
    let issue = sign(&keys, 1621, "an issue", vec![tag(&["a", &repo])], at + 1);
    own.add_event(&big).await;
    remote.add_event(&issue).await;

    let mut config = loopback_engine_config();
    config.identity.service_relays = vec![own.url()];
    let manager = manager_into(&own.url(), config, prometheus::Registry::new());
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let expected: BTreeSet<EventId> = [issue.id].into();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if expected.is_subset(&own.event_ids().await) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the issue of the repository the large announcement makes ours never arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
    assert_eq!(
        summary.engine.dropped_oversized, 0,
        "nothing of the own relay's refused"
    );
}
