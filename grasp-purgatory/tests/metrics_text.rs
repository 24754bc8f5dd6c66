#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Purgatory's metrics as Prometheus text ([`Purgatory::metrics_handle`]), for a host
//! whose `/metrics` comes from another prometheus version: the families as the builder
//! named them, those left out absent, the values live; and a host keeps its own family
//! of one of purgatory's names in the registry it gives, with its own values.

mod events;

use std::sync::Arc;
use std::time::Duration;

use events::memory_git::{MemoryGit, OneRepo};
use grasp_purgatory::{
    ChannelSink, MemoryAnnouncements, MetricFamiliesError, Origin, Purgatory, PurgatoryBuildError,
};
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;

const HOST: &str = "git.example.com";

/// The value of the sample line `series` in Prometheus text, if there is one.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A purgatory on the in-memory git backend releasing into `sink`, its metrics also in
/// `host`, with the builder's metric settings `settings` applied.
fn purgatory(
    announcements: Arc<MemoryAnnouncements>,
    git: Arc<MemoryGit>,
    sink: ChannelSink,
    host: &prometheus::Registry,
    settings: impl FnOnce(grasp_purgatory::PurgatoryBuilder) -> grasp_purgatory::PurgatoryBuilder,
) -> Result<Purgatory, PurgatoryBuildError> {
    settings(
        Purgatory::builder()
            .clock(Arc::new(TokioClock::new()))
            .announcements(announcements)
            .repo_locator(Arc::new(OneRepo("/memory".into())))
            .git_backend(git)
            .sink(Arc::new(sink))
            .registry(host.clone()),
    )
    .build()
}

#[tokio::test(start_paused = true)]
async fn the_text_handle_holds_purgatorys_families_as_named_with_live_values() {
    let host = prometheus::Registry::new();
    let hosts_own = prometheus::IntGauge::new("purgatory_events_held", "the host's own").unwrap();
    host.register(Box::new(hosts_own.clone())).unwrap();
    hosts_own.set(42);
    let git = Arc::new(MemoryGit::with_delay(Duration::from_secs(1)));
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, _released) = ChannelSink::new();

    // Without leaving ours out, the host's family of the same name is in the way.
    let clash = purgatory(
        announcements.clone(),
        git.clone(),
        sink.clone(),
        &host,
        |builder| builder,
    );
    assert!(
        matches!(clash, Err(PurgatoryBuildError::Metrics(_))),
        "{clash:?}"
    );
    let purgatory = purgatory(announcements.clone(), git.clone(), sink, &host, |builder| {
        builder
            .leave_out_metric("purgatory_events_held")
            .metric_name("purgatory_sync_queue_size", "host_purgatory_queue")
    })
    .expect("ours left out, the host's family stays");
    let handle = purgatory.metrics_handle();

    let text = handle.text();
    assert!(text.contains("# TYPE host_purgatory_queue gauge"), "{text}");
    assert!(
        text.contains("# TYPE purgatory_events_released_total counter"),
        "{text}"
    );
    assert!(!text.contains("purgatory_events_held"), "left out: {text}");
    assert!(
        !text.contains("purgatory_sync_queue_size"),
        "renamed: {text}"
    );
    assert_eq!(value(&text, "host_purgatory_queue"), Some(0.0));

    // The values are read live: a held event is queued, then released.
    let owner = Keys::generate();
    let url = format!("https://{HOST}/one.git");
    announcements
        .add(Announcement::new("one").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.serve(&url, [oid(1)]);
    let event = pull_request(&Keys::generate(), &owner.public_key(), "one", &oid(1));
    purgatory.add_pr(event, Origin::Synced).unwrap();
    assert_eq!(value(&handle.text(), "host_purgatory_queue"), Some(1.0));
    let run = events::spawn_run(&purgatory);
    events::eventually("released", Duration::from_secs(10), || {
        value(&handle.text(), "purgatory_events_released_total") == Some(1.0)
    })
    .await;

    // The host's registry: its own family with its own value, ours beside it as named.
    let families = host.gather();
    let held: Vec<_> = families
        .iter()
        .filter(|family| family.name() == "purgatory_events_held")
        .collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].help(), "the host's own");
    assert_eq!(held[0].get_metric()[0].get_gauge().get_value(), 42.0);
    assert!(families
        .iter()
        .any(|family| family.name() == "host_purgatory_queue"));
    assert!(!families
        .iter()
        .any(|family| family.name() == "purgatory_sync_queue_size"));

    purgatory.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_unknown_purgatory_family_is_a_build_error() {
    let host = prometheus::Registry::new();
    let built = purgatory(
        Arc::new(MemoryAnnouncements::new()),
        Arc::new(MemoryGit::with_delay(Duration::ZERO)),
        ChannelSink::new().0,
        &host,
        |builder| builder.leave_out_metric("events_held"),
    );
    assert!(
        matches!(
            &built,
            Err(PurgatoryBuildError::MetricFamilies(MetricFamiliesError::UnknownFamily { family, .. }))
                if family == "events_held"
        ),
        "{built:?}"
    );
}
