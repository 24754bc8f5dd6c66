#![allow(clippy::unwrap_used)]
//! Bounded resources on virtual time (`tokio::time::pause`) with the in-memory git
//! backend: an event beyond a limit is refused explicitly (an error, a `rate-limited:`
//! rejection through the gate), counted in the metrics and the status, and accepted
//! again once room frees; the `domain` metric series of an idle domain are removed.

mod events;

use std::sync::Arc;
use std::time::Duration;

use events::memory_git::{MemoryGit, OneRepo};
use grasp_purgatory::{
    AddError, Cap, ChannelSink, HeldLimits, MemoryAnnouncements, Origin, Purgatory, PurgatoryGate,
    PurgatoryOutput,
};
use grasp_sync_core::purgatory::throttle_key;
use grasp_sync_core::store::{EventStore, IngestOutcome, MemoryEventStore, Refusal};
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, sign, tag, Announcement};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;
use prometheus::Registry;

const HOST: &str = "git.example.com";

/// The value of counter `name` with label `reason` (0 when absent).
fn refused(registry: &Registry, reason: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == "purgatory_events_refused_total")
        .flat_map(|family| family.get_metric())
        .filter(|metric| metric.get_label().iter().any(|l| l.value() == reason))
        .map(|metric| metric.get_counter().get_value())
        .sum()
}

/// The `domain` label values of the series of `name`.
fn domains(registry: &Registry, name: &str) -> Vec<String> {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric())
        .flat_map(|metric| metric.get_label())
        .filter(|label| label.name() == "domain")
        .map(|label| label.value().to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_event_beyond_a_limit_is_refused_explicitly_counted_and_accepted_once_room_frees() {
    let git = Arc::new(MemoryGit::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, mut output) = ChannelSink::new();
    let registry = Registry::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements.clone())
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(git.clone())
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .limits(HeldLimits {
            per_repository: 2,
            per_author: 10,
            total: 3,
            ..HeldLimits::default()
        })
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let owner = Keys::generate();
    // One contributor, who holds the most: their events beyond a limit are refused (a
    // lighter author's would evict theirs; see tests/fair_purgatory.rs).
    let contributor = Keys::generate();
    let pr = |identifier: &str, tip: u8| {
        pull_request(&contributor, &owner.public_key(), identifier, &oid(tip))
    };

    // Two of repository "a" fit; the third is refused, not held.
    purgatory.add_pr(pr("a", 1), Origin::Submitted).unwrap();
    purgatory.add_pr(pr("a", 2), Origin::Submitted).unwrap();
    let third = pr("a", 3);
    let refusal = purgatory.add_pr(third.clone(), Origin::Submitted);
    assert!(
        matches!(
            refusal,
            Err(AddError::Full {
                cap: Cap::Repository,
                limit: 2
            })
        ),
        "{refusal:?}"
    );
    assert!(!purgatory.contains(&third.id));
    assert_eq!(purgatory.held(), 2);
    assert_eq!(refused(&registry, "repository_full"), 1.0);
    assert_eq!(purgatory.status_now().events_refused, 1);

    // Another repository fits until the total is reached.
    purgatory.add_pr(pr("b", 4), Origin::Submitted).unwrap();
    let over_total = purgatory.add_pr(pr("c", 5), Origin::Submitted);
    assert!(matches!(
        over_total,
        Err(AddError::Full {
            cap: Cap::Total,
            limit: 3
        })
    ));
    assert_eq!(refused(&registry, "total_full"), 1.0);

    // Through proactive sync's gate: a rejection the engine retries later.
    let store = Arc::new(MemoryEventStore::new());
    let gate = PurgatoryGate::new(store.clone(), purgatory.clone());
    match gate.ingest(&third).await.unwrap() {
        IngestOutcome::Rejected { reason, refusal } => {
            assert!(reason.starts_with("rate-limited: "), "{reason}");
            assert_eq!(refusal, Refusal::ForNow, "a full purgatory refuses for now");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(!gate.contains(&third.id).await.unwrap());
    assert_eq!(refused(&registry, "repository_full"), 2.0);
    assert_eq!(purgatory.status_now().events_refused, 3);

    // Room frees when "a"'s events are released: the refused event is accepted again.
    let url = format!("https://{HOST}/a.git");
    announcements
        .add(Announcement::new("a").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.serve(&url, [oid(1), oid(2)]);
    purgatory.trigger_immediate_sync("a");
    for _ in 0..2 {
        let released = tokio::time::timeout(Duration::from_secs(5), output.recv()).await;
        assert!(matches!(released, Ok(Some(PurgatoryOutput::Released(_)))));
    }
    assert_eq!(
        gate.ingest(&third).await.unwrap(),
        IngestOutcome::Stored,
        "held once there is room"
    );
    assert!(purgatory.contains(&third.id));
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_domain_series_of_an_idle_domain_are_removed() {
    let git = Arc::new(MemoryGit::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, mut output) = ChannelSink::new();
    let registry = Registry::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements.clone())
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(git.clone())
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);
    let owner = Keys::generate();
    let url = format!("https://{HOST}/r.git");
    announcements
        .add(Announcement::new("r").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.serve(&url, [oid(1)]);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &oid(1));
    purgatory.add_pr(pr, Origin::Synced).unwrap();
    let released = tokio::time::timeout(Duration::from_secs(5), output.recv()).await;
    assert!(matches!(released, Ok(Some(PurgatoryOutput::Released(_)))));
    assert_eq!(
        domains(&registry, "purgatory_domain_requests_total"),
        vec![throttle_key(HOST)],
        "labelled by the throttle key (the registrable domain)"
    );
    // The request leaves the one-minute window: the domain is idle, its series go.
    tokio::time::sleep(Duration::from_secs(62)).await;
    assert!(domains(&registry, "purgatory_domain_requests_total").is_empty());
    assert!(domains(&registry, "purgatory_domain_in_flight").is_empty());
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn large_events_filling_the_byte_budget_are_refused_and_counted() {
    let (sink, _output) = ChannelSink::new();
    let registry = Registry::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(Arc::new(MemoryGit::default()))
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .limits(HeldLimits {
            total_bytes: 1_000_000,
            ..HeldLimits::default()
        })
        .build()
        .unwrap();
    let owner = Keys::generate();
    let contributor = Keys::generate();
    let large = |n: u8| {
        let a = format!("30617:{}:r{n}", owner.public_key().to_hex());
        let tags = vec![tag(&["a", &a]), tag(&["c", &oid(n)])];
        sign(&contributor, 1618, &"x".repeat(300_000), tags, 1)
    };
    // Three events of 300 kB fit in 1 MB, far below the count limits; the fourth not.
    for n in 0..3 {
        purgatory.add_pr(large(n), Origin::Synced).unwrap();
    }
    let status = purgatory.status_now();
    assert!(status.bytes_held > 900_000, "{}", status.bytes_held);
    let refusal = purgatory.add_pr(large(3), Origin::Synced);
    assert!(
        matches!(
            refusal,
            Err(AddError::Full {
                cap: Cap::TotalBytes,
                limit: 1_000_000
            })
        ),
        "{refusal:?}"
    );
    assert_eq!(purgatory.held(), 3);
    assert_eq!(refused(&registry, "total_bytes_full"), 1.0);
    assert_eq!(purgatory.status_now().events_refused, 1);
}
