//! Identifiers up to `MAX_IDENTIFIER_LEN` bytes: the scratch directory a repository is
//! created in never carries the identifier, so an identifier whose `<identifier>.git`
//! just fits in a file name (255 bytes) is created, fetched into and released; a
//! 1000-byte one, which no directory of the `<npub>/<identifier>.git` layout can hold,
//! is reported as having no place for its repository rather than failing each attempt.
//! Real git over `git://` on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_purgatory::{
    create_bare_repository, ChannelSink, GitFetcher, GitFetcherConfig, HeldState,
    MemoryAnnouncements, NpubLayout, Origin, Purgatory, PurgatoryOutput,
};
use grasp_sync_core::nip34::{RepoRef, MAX_IDENTIFIER_LEN};
use grasp_sync_core::purgatory::NotFetchable;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use nostr::prelude::*;
use support::{has_object, GitDaemon, SourceRepo, TempDir};

fn fetcher() -> GitFetcher {
    GitFetcher::new(GitFetcherConfig {
        policy: CloneUrlPolicy::new()
            .allow_git_protocol(true)
            .allow_local_addresses(true),
        fetch_timeout: Duration::from_secs(30),
        ..GitFetcherConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_named_by_a_251_byte_identifier_is_created() {
    let dir = TempDir::new("purgatory-long-name");
    // `<identifier>.git`: 255 bytes, the longest file name there is.
    let path = dir.join("repos").join(format!("{}.git", "x".repeat(251)));
    let created = create_bare_repository(&fetcher(), &path).await.unwrap();
    assert!(created);
    assert!(path.join("HEAD").is_file());
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("repos"))
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| name.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no scratch left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_identifiers_are_synced_or_reported_as_having_no_place() {
    let dir = TempDir::new("purgatory-long-identifiers");
    let source = SourceRepo::create(dir.join("served/r.git"));
    let tip = source.commit("work under a long name");
    let daemon = GitDaemon::start(&dir.join("served"));
    let url = daemon.url("r.git");
    let owner = Keys::generate();
    let fits = "f".repeat(251);
    let too_long = "t".repeat(1000);
    assert!(too_long.len() <= MAX_IDENTIFIER_LEN);
    let announcements = Arc::new(MemoryAnnouncements::new());
    for identifier in [&fits, &too_long] {
        announcements
            .add(
                Announcement::new(identifier)
                    .clone_urls(&[url.as_str()])
                    .sign(&owner),
            )
            .unwrap();
    }
    let root = dir.join("repos");
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(&root)
        .git_backend(Arc::new(fetcher()))
        .clone_policy(
            CloneUrlPolicy::new()
                .allow_git_protocol(true)
                .allow_local_addresses(true),
        )
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);

    // 251 bytes: the repository is created (the scratch directory fits), fetched into,
    // and the event released.
    let pr = pull_request(&Keys::generate(), &owner.public_key(), &fits, &tip);
    purgatory.add_pr(pr.clone(), Origin::Synced).unwrap();
    match tokio::time::timeout(Duration::from_secs(60), output.recv()).await {
        Ok(Some(PurgatoryOutput::Released(held))) => assert_eq!(held.event.id, pr.id),
        other => panic!("expected the release, got {other:?}"),
    }
    let local = NpubLayout::new(&root)
        .path_of(&owner.public_key(), &fits)
        .unwrap();
    assert!(has_object(&local, &tip));

    // 1000 bytes: a valid identifier, but no `<identifier>.git` can exist; it waits
    // with that reason.
    let repo = RepoRef::new(owner.public_key(), too_long.clone()).unwrap();
    assert_eq!(
        NpubLayout::new(&root).path_of(&owner.public_key(), &too_long),
        None
    );
    let pr = pull_request(&Keys::generate(), &owner.public_key(), &too_long, &tip);
    purgatory.add_pr(pr, Origin::Synced).unwrap();
    let status = purgatory.status();
    events::eventually(
        "the 1000-byte identifier is reported as having no place",
        Duration::from_secs(60),
        || {
            status.borrow().not_fetchable.iter().any(|held| {
                held.repo == repo.to_string()
                    && held.state == HeldState::NotFetchable(NotFetchable::NoPlaceForRepository)
            })
        },
    )
    .await;
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
