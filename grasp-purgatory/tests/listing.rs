#![allow(clippy::unwrap_used)]
//! What a new announcement costs the served-repository listing, counted in round trips
//! to the relay that holds the announcements (issue 46): the sidecar reads them from
//! its own relay through `RelayStore`, which reads a filter page by page, 500 events a
//! page (strfry's and nostr-relay-builder's cap), so one query of `n` events is
//! ⌈n/500⌉ round trips (at least one). The source here is a `MemoryAnnouncements`
//! counting them that way, on virtual time.
//!
//! With the host reporting every announcement it serves
//! (`PurgatoryBuilder::announcements_followed`, as the sidecar does from its
//! self-subscription), a new announcement costs its own reconciliation's few queries,
//! whether 100 or 2 000 repositories are served, and the listing is read once an hour
//! (the reconciliation interval). Its twin without it reads the whole listing again
//! every 5 minutes.

mod events;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use events::memory_git::{MemoryGit, OneRepo};
use events::{eventually, spawn_run};
use grasp_purgatory::{
    AnnouncementError, Announcements, ChannelSink, MemoryAnnouncements, Purgatory,
};
use grasp_sync_test_support::nip34::Announcement;
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;

/// Events one REQ brings at most (strfry's and nostr-relay-builder's cap).
const PAGE: usize = 500;

/// Announcements read from memory, counting relay round trips as `RelayStore` would
/// make them.
#[derive(Default)]
struct CountingSource {
    inner: MemoryAnnouncements,
    round_trips: AtomicUsize,
    listings: AtomicUsize,
}

impl CountingSource {
    fn round_trips(&self) -> usize {
        self.round_trips.load(Ordering::SeqCst)
    }

    fn listings(&self) -> usize {
        self.listings.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Announcements for CountingSource {
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        let events = self.inner.query(filter).await?;
        let pages = events.len().div_ceil(PAGE).max(1);
        self.round_trips.fetch_add(pages, Ordering::SeqCst);
        let every_announcement = filter.authors.is_none() && filter.generic_tags.is_empty();
        if every_announcement {
            self.listings.fetch_add(1, Ordering::SeqCst);
        }
        Ok(events)
    }
}

/// Announcement number `n` (its own owner, identifier `repo-<n>`).
fn announcement(n: usize) -> Event {
    let keys = Keys::generate();
    Announcement::new(&format!("repo-{n}")).sign(&keys)
}

/// A purgatory over `source` holding `existing` announcements, `followed` or not,
/// once every one of them is served.
async fn serving(source: &Arc<CountingSource>, existing: usize, followed: bool) -> Purgatory {
    for n in 0..existing {
        source.inner.add(announcement(n)).unwrap();
    }
    let (sink, _output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(source.clone())
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(Arc::new(MemoryGit::default()))
        .sink(Arc::new(sink))
        .announcements_followed(followed)
        .build()
        .unwrap();
    let _run = spawn_run(&purgatory);
    let status = purgatory.status();
    eventually(
        "every announcement served",
        Duration::from_secs(600),
        || status.borrow().repositories_served == existing,
    )
    .await;
    purgatory
}

/// The round trips each of 10 new announcements cost until it is served, with
/// `existing` repositories served before, the host reporting each announcement.
async fn per_new_announcement(existing: usize) -> Vec<usize> {
    let source = Arc::new(CountingSource::default());
    let purgatory = serving(&source, existing, true).await;
    let status = purgatory.status();
    let mut costs = Vec::new();
    for n in existing..existing + 10 {
        let before = source.round_trips();
        let event = announcement(n);
        source.inner.add(event.clone()).unwrap();
        purgatory.track_announcement(&event);
        eventually("the new repository served", Duration::from_secs(60), || {
            status.borrow().repositories_served == n + 1
        })
        .await;
        costs.push(source.round_trips() - before);
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    // 50 minutes on: nobody listed every announcement again (that is once per
    // reconciliation interval, an hour, for announcements stored backdated).
    tokio::time::sleep(Duration::from_secs(2_400)).await;
    assert_eq!(
        source.listings(),
        1,
        "the listing is read once within the hour"
    );
    purgatory.shutdown();
    costs
}

#[tokio::test(start_paused = true)]
async fn a_new_announcement_costs_the_same_few_round_trips_with_100_or_2000_served() {
    let small = per_new_announcement(100).await;
    let large = per_new_announcement(2_000).await;
    println!("round trips per new announcement: {small:?} with 100 served, {large:?} with 2 000");
    assert!(
        small.iter().all(|&cost| (1..=4).contains(&cost)),
        "a reconciliation's queries (announcement, maintainers' states, pull requests): {small:?}"
    );
    assert_eq!(small, large, "the same cost, whatever is served besides");
}

/// The twin without the host's reports: the whole listing (⌈2 000 / 500⌉ = 4 round
/// trips) is read again every 5 minutes, to find what was announced elsewhere.
#[tokio::test(start_paused = true)]
async fn without_the_host_s_reports_the_listing_is_read_again_every_5_minutes() {
    let source = Arc::new(CountingSource::default());
    let purgatory = serving(&source, 2_000, false).await;
    let (listings, round_trips) = (source.listings(), source.round_trips());
    tokio::time::sleep(Duration::from_secs(30 * 60)).await;
    let listed = source.listings() - listings;
    assert!(
        (5..=7).contains(&listed),
        "listed {listed} times in 30 minutes"
    );
    let spent = source.round_trips() - round_trips;
    assert!(
        spent >= listed * 4,
        "each listing of 2 000 is 4 round trips: {spent} for {listed}"
    );
    purgatory.shutdown();
}
