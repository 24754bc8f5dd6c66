//! `RelayStore` against real relays on 127.0.0.1: a relay-builder relay with
//! strfry's limits (every result list clamped to 500, frames over 131 072
//! bytes dropped) and the real nostr-rs-relay 0.8.12 with its defaults.
//! Thousands of events are handed over at once, as the engine does: every
//! one must be answered (the batched writes hold none back for good), stored
//! once, and listed again past the relay's result limit, by id and time and
//! whole. Every wait is bounded, and shorter than the store's own timeout,
//! so an event held back shows as a failure, not as a slow retry. An event
//! whose frame is over the relay's NIP-11 `max_message_length` (a state of
//! 2 000 refs to strfry) is refused for good and never sent: sent, it would
//! drop the connection and every event in flight on it. One nostr-rs-relay
//! refuses with `NOTICE "event exceeded max size"` and no `OK` (its NIP-11
//! states no limit) is refused for good at once, not left to time out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join_all;
use grasp_sync_core::store::{EventStore, IngestOutcome};
use grasp_sync_tokio::RelayStore;
use nostr::prelude::*;
use support::{sign, tag, NostrRsRelay, TestRelay, TestRelayConfig};

/// The store's own bound on every request.
const STORE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on each whole step of a test: well under `STORE_TIMEOUT`.
const STEP: Duration = Duration::from_secs(30);

/// `n` notes by one author, ten to a second (so result pages end inside a
/// second, where paging must not lose or repeat events).
fn notes(n: usize) -> Vec<Event> {
    let keys = Keys::generate();
    (0..n)
        .map(|i| {
            sign(
                &keys,
                1,
                &format!("note {i}"),
                vec![],
                1_700_000_000 + (i / 10) as u64,
            )
        })
        .collect()
}

/// Hands every event to the store at once and returns the answers, in
/// order, within [`STEP`].
async fn ingest_all(store: &RelayStore, events: &[Event]) -> Vec<IngestOutcome> {
    let answers = tokio::time::timeout(STEP, join_all(events.iter().map(|e| store.ingest(e))))
        .await
        .expect("every event answered within the step (none held back)");
    answers
        .into_iter()
        .map(|answer| answer.expect("the store answered"))
        .collect()
}

/// Hands the events to the store in batches of 64, all batches at once,
/// as the sync's store task does, and returns the answers, in order,
/// within [`STEP`].
async fn ingest_in_batches(store: &RelayStore, events: &[Event]) -> Vec<IngestOutcome> {
    let batches = events.chunks(64).map(|batch| async move {
        let refs: Vec<&Event> = batch.iter().collect();
        store.ingest_many(&refs).await
    });
    let answers = tokio::time::timeout(STEP, join_all(batches))
        .await
        .expect("every batch answered within the step (none held back)");
    answers
        .into_iter()
        .flatten()
        .map(|answer| answer.expect("the store answered"))
        .collect()
}

/// The whole check against the relay at `url`: half the events handed
/// over one by one, half in batches.
async fn publishes_every_event_and_lists_them_back(url: RelayUrl) {
    let store = RelayStore::new(url, STORE_TIMEOUT);
    let events = notes(1_500);
    let ids: BTreeSet<EventId> = events.iter().map(|event| event.id).collect();

    let (singly, batched) = events.split_at(events.len() / 2);
    let mut answers = ingest_all(&store, singly).await;
    answers.extend(ingest_in_batches(&store, batched).await);
    assert_eq!(answers.len(), events.len(), "one answer per event");
    assert!(
        answers
            .iter()
            .all(|answer| *answer == IngestOutcome::Stored),
        "not all stored: {:?}",
        answers
            .iter()
            .find(|answer| **answer != IngestOutcome::Stored)
    );
    // The same events again: each one a duplicate, none lost in the held batch.
    let again = ingest_all(&store, &events[..100]).await;
    assert!(again
        .iter()
        .all(|answer| *answer == IngestOutcome::Duplicate));
    let again = ingest_in_batches(&store, &events[1_400..]).await;
    assert_eq!(again.len(), 100);
    assert!(again
        .iter()
        .all(|answer| *answer == IngestOutcome::Duplicate));
    // A new event twice in one batch is sent once; both get its answer.
    let extra = notes(1).remove(0);
    let twice = tokio::time::timeout(STEP, store.ingest_many(&[&extra, &extra]))
        .await
        .expect("answered within the step");
    assert_eq!(
        twice.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        vec![IngestOutcome::Stored, IngestOutcome::Stored]
    );

    let filter = Filter::new().kind(Kind::TextNote).author(events[0].pubkey);
    let items = tokio::time::timeout(STEP, store.negentropy_items(&filter))
        .await
        .expect("listed within the step")
        .expect("the relay lists");
    assert_eq!(items.len(), ids.len(), "each event listed once");
    let listed: BTreeSet<(EventId, Timestamp)> = items.into_iter().collect();
    let expected: BTreeSet<(EventId, Timestamp)> = events
        .iter()
        .map(|event| (event.id, event.created_at))
        .collect();
    assert_eq!(listed, expected);

    let whole = tokio::time::timeout(STEP, store.events(&filter))
        .await
        .expect("listed within the step")
        .expect("the relay lists");
    let whole: BTreeSet<Event> = whole.into_iter().collect();
    assert_eq!(whole, events.into_iter().collect::<BTreeSet<Event>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_a_relay_with_strfry_s_limits_every_event_is_answered_and_listed_back() {
    let relay = TestRelay::start(TestRelayConfig::strfry()).await;
    publishes_every_event_and_lists_them_back(relay.url()).await;
    assert_eq!(
        relay.event_ids().await.len(),
        1_501,
        "each note once, and the extra one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_the_real_nostr_rs_relay_every_event_is_answered_and_listed_back() {
    let relay = NostrRsRelay::start().await;
    publishes_every_event_and_lists_them_back(relay.url()).await;
}

/// A NIP-34 state (30618) naming `refs` refs, about 100 bytes each (≈ 200 KB for 2 000):
/// over strfry's 131 072-byte frames.
fn large_state(refs: usize) -> Event {
    let mut tags = vec![
        tag(&["d", "big"]),
        tag(&["HEAD", "ref: refs/heads/main"]),
        tag(&["refs/heads/main", &"a".repeat(40)]),
    ];
    tags.extend((1..refs).map(|n| {
        let name = format!("refs/tags/releases/stable/2026-11/grasp-sync-v1.{n:04}.0");
        tag(&[&name, &format!("{n:040x}")])
    }));
    sign(&Keys::generate(), 30618, "", tags, 1_700_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_the_relay_s_stated_message_limit_is_refused_for_good_and_never_sent() {
    // strfry's limits: its NIP-11 states `max_message_length` 131 072; a longer frame
    // drops the TCP connection without a word.
    let relay = TestRelay::start(TestRelayConfig::strfry()).await;
    let store = RelayStore::new(relay.url(), STORE_TIMEOUT);
    let state = large_state(2_000);
    let frame = grasp_sync_core::engine::event_frame(&state).len();
    assert!(
        frame > TestRelayConfig::STRFRY_MAX_MESSAGE_LENGTH,
        "{frame}"
    );
    // The state in the middle of notes handed over with it, in one batch and singly.
    let notes = notes(100);
    let mut batch: Vec<&Event> = notes[..50].iter().collect();
    batch.insert(25, &state);
    let batched = tokio::time::timeout(STEP, store.ingest_many(&batch))
        .await
        .expect("answered within the step");

    let expected = format!(
        "invalid: event of {frame} bytes over the own relay's message limit of 131072 bytes \
         (NIP-11 max_message_length)"
    );
    for (n, answer) in batched.into_iter().enumerate() {
        let answer = answer.expect("the store answered (no connection lost)");
        if n == 25 {
            assert_eq!(answer, IngestOutcome::refused_for_good(expected.clone()));
        } else {
            assert_eq!(answer, IngestOutcome::Stored, "event {n} of the batch");
        }
    }
    let singly = ingest_all(
        &store,
        &[&notes[50..75], std::slice::from_ref(&state), &notes[75..]].concat(),
    )
    .await;
    for (n, answer) in singly.into_iter().enumerate() {
        if n == 25 {
            assert_eq!(answer, IngestOutcome::refused_for_good(expected.clone()));
        } else {
            assert_eq!(
                answer,
                IngestOutcome::Stored,
                "event {n} handed over singly"
            );
        }
    }
    assert_eq!(relay.frames_too_large(), 0, "the state was never sent");
    assert!(
        relay.largest_client_frame() <= TestRelayConfig::STRFRY_MAX_MESSAGE_LENGTH,
        "{}",
        relay.largest_client_frame()
    );
    let held = relay.event_ids().await;
    assert_eq!(held.len(), notes.len(), "every note, not the state");
    assert!(!held.contains(&state.id));
    assert_eq!(
        relay.nip11_requests_seen(),
        1,
        "the document was asked once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_relay_refuses_by_a_size_notice_is_refused_for_good_not_timed_out() {
    // nostr-rs-relay with a 64 KiB event limit: it answers a larger event
    // `NOTICE "event exceeded max size"` and no `OK`, and its NIP-11 states no limit.
    let relay = NostrRsRelay::start_with_config("[limits]\nmax_event_bytes = 65536\n").await;
    let store = RelayStore::new(relay.url(), STORE_TIMEOUT);
    let state = large_state(1_000);
    let frame = grasp_sync_core::engine::event_frame(&state).len();
    assert!(frame > 65_536, "{frame}");
    let notes = notes(50);
    let mut batch: Vec<&Event> = notes.iter().collect();
    batch.insert(25, &state);
    let answers = tokio::time::timeout(STEP, store.ingest_many(&batch))
        .await
        .expect("answered within the step, not left to the store's timeout");
    let expected = format!(
        "invalid: event exceeded max size (the own relay's NOTICE, taken for the largest \
         event in flight: {frame} bytes)"
    );
    for (n, answer) in answers.into_iter().enumerate() {
        let answer = answer.expect("the store answered");
        if n == 25 {
            assert_eq!(answer, IngestOutcome::refused_for_good(expected.clone()));
        } else {
            assert_eq!(answer, IngestOutcome::Stored, "event {n} of the batch");
        }
    }
}
