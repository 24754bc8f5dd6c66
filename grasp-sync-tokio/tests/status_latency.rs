//! A status change is published within the status interval (100 ms), even
//! when it comes right after another one and nothing follows it: the watch
//! is a state to wait on, so a change must not sit until the next 2 s tick.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_tokio::{DatabaseStore, SyncManager};
use nostr::prelude::*;
use support::{announcement, loopback_engine_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_right_after_another_is_published_within_the_interval() {
    // Embedded (no own relay): announcements are handed in process, and they
    // list no relay, so nothing else happens to refresh the status.
    let manager = SyncManager::builder()
        .engine_config(loopback_engine_config())
        .batch_window(Duration::ZERO)
        .store(Arc::new(DatabaseStore::new(Arc::new(
            nostr_memory::MemoryDatabase::unbounded(),
        ))))
        .build()
        .unwrap();
    let own_events = manager.own_events_sender();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let maintainer = Keys::generate();
    let at = Timestamp::now().as_secs() - 100;
    let mut slowest = Duration::ZERO;
    for n in 0..6 {
        // Each announcement comes a few milliseconds after the status
        // showed the previous one: within the interval of that refresh.
        let event = announcement(&maintainer, &format!("repo-{n}"), &[], at + n);
        let sent = tokio::time::Instant::now();
        own_events.send(event).await.unwrap();
        let want = n as usize + 1;
        tokio::time::timeout(
            Duration::from_secs(5),
            status.wait_for(|status| status.repositories >= want),
        )
        .await
        .expect("the status shows the repository within 5 s")
        .unwrap();
        slowest = slowest.max(sent.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(700),
        "a change waited {slowest:?} to be published (interval 100 ms)"
    );
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
}
