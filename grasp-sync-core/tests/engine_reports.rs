//! What the engine reports per relay, and historic sync complete on every
//! reachable relay: an unreachable relay is reported, not waited for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use grasp_sync_core::model::{ConnectionStatus, SyncMethod};
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::relay::{Nip77Refusal, SimRelayConfig};
use sim::{config, own_url, relay_url, sim_relay_with, World, UNIX_ORIGIN};

const STEPS: u64 = 100_000;

#[test]
fn an_unreachable_relay_is_reported_and_does_not_hold_historic_sync() {
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let (a, b, c) = (relay_url("a"), relay_url("b"), relay_url("c"));
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a, &b, &c], at);
    let repo = repo_ref(&maintainer, "alpha");
    let issue = events::root(&user, 1621, &repo, "issue", at + 1);
    let reply = events::reply(&user, &issue.id, "reply", at + 2);
    let remote = vec![announcement.clone(), issue.clone(), reply.clone()];
    let refusing = SimRelayConfig {
        nip77: Nip77Refusal::NegErr,
        ..SimRelayConfig::default()
    };
    let mut world = World::new(
        config(),
        vec![
            sim_relay_with("a", remote.clone(), SimRelayConfig::default()),
            sim_relay_with("b", remote.clone(), refusing),
            sim_relay_with("c", remote, SimRelayConfig::default()),
        ],
        vec![announcement],
    );
    world.relays.get_mut(&c).unwrap().set_down(true);
    assert!(
        world.run_until(STEPS, |w| w.own.histories_completed >= 1
            && w.engine.historic_sync_complete()),
        "{}",
        world.dump()
    );
    assert!(
        !world.engine.is_idle(),
        "is_idle still waits for every relay"
    );
    assert!(world.stored().contains(&reply.id));
    let reports = world.engine.relay_reports();
    let report = |relay: &RelayUrl| reports.iter().find(|r| &r.relay == relay).unwrap().clone();
    let (ra, rb, rc) = (report(&a), report(&b), report(&c));
    assert!(ra.historic_confirmed && !ra.unreachable);
    assert_eq!(ra.connection, ConnectionStatus::Connected);
    assert_eq!(ra.method, SyncMethod::Negentropy);
    assert!(ra.events_received >= 1);
    assert_eq!(rb.method, SyncMethod::ReqEose, "b refused NIP-77");
    assert!(rb
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("NIP-77")));
    assert!(rc.unreachable && !rc.historic_confirmed);
    assert_ne!(rc.connection, ConnectionStatus::Connected);
    assert!(rc.last_error.is_some());
    assert!(rc.retry_at.is_some(), "still retried");
    let stored_total: u64 = reports.iter().map(|r| r.events_stored).sum();
    assert!(
        stored_total >= 2,
        "the issue and the reply were stored from a or b"
    );
}

#[test]
fn a_relays_closed_reason_is_kept_clipped_and_without_control_characters() {
    let maintainer = Keys::generate();
    let a = relay_url("a");
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at);
    let repo = repo_ref(&maintainer, "alpha");
    let issue = events::root(&Keys::generate(), 1621, &repo, "issue", at + 1);
    let hostile = grasp_sync_test_support::relay::hostile_refusal_text();
    let closing = SimRelayConfig {
        nip77: Nip77Refusal::NegErr,
        close_every_req: Some(hostile.clone()),
        ..SimRelayConfig::default()
    };
    let mut world = World::new(
        config(),
        vec![sim_relay_with(
            "a",
            vec![announcement.clone(), issue],
            closing,
        )],
        vec![announcement],
    );
    let batch_failed = |w: &World| {
        w.engine.relay_reports().iter().any(|report| {
            report
                .last_error
                .as_deref()
                .is_some_and(|error| error.starts_with("batch failed: "))
        })
    };
    assert!(world.run_until(STEPS, batch_failed), "{}", world.dump());
    let reports = world.engine.relay_reports();
    let error = reports
        .iter()
        .find(|report| report.relay == a)
        .and_then(|report| report.last_error.clone())
        .unwrap();
    assert_eq!(hostile.len(), 10_000);
    let bound = grasp_sync_core::relay_text::MAX_RELAY_TEXT_LEN + '…'.len_utf8();
    assert!(error.len() <= bound, "{} bytes", error.len());
    assert!(error.ends_with('…'));
    assert!(!error.chars().any(char::is_control), "{error:?}");
    assert!(error.contains("forged log line"));
}

#[test]
fn the_relay_phase_tells_connecting_syncing_synced_and_failed_apart() {
    use grasp_sync_core::engine::RelayPhase;
    let maintainer = Keys::generate();
    let (a, b, c) = (relay_url("a"), relay_url("b"), relay_url("c"));
    let at = UNIX_ORIGIN - 10_000;
    let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a, &b, &c], at);
    let repo = repo_ref(&maintainer, "alpha");
    let issue = events::root(&Keys::generate(), 1621, &repo, "issue", at + 1);
    let remote = vec![announcement.clone(), issue];
    let closing = SimRelayConfig {
        nip77: Nip77Refusal::NegErr,
        close_every_req: Some("blocked: not today".to_owned()),
        ..SimRelayConfig::default()
    };
    let mut world = World::new(
        config(),
        vec![
            sim_relay_with("a", remote.clone(), SimRelayConfig::default()),
            sim_relay_with("b", remote.clone(), closing),
            sim_relay_with("c", remote, SimRelayConfig::default()),
        ],
        vec![announcement],
    );
    world.relays.get_mut(&c).unwrap().set_down(true);
    let mut seen_a = Vec::new();
    let settled = world.run_until(STEPS, |w| {
        let phase = w.engine.relay_phase(&a);
        if seen_a.last() != Some(&phase) {
            seen_a.push(phase);
        }
        w.engine.relay_phase(&a) == RelayPhase::Synced
            && w.engine.relay_phase(&b) == RelayPhase::SyncFailed
    });
    assert!(
        settled,
        "a: {seen_a:?}, b: {:?}",
        world.engine.relay_phase(&b)
    );
    assert!(
        seen_a.contains(&RelayPhase::Syncing),
        "a was connected and syncing before it was confirmed: {seen_a:?}"
    );
    let reports = world.engine.relay_reports();
    let report = |relay: &RelayUrl| reports.iter().find(|r| &r.relay == relay).unwrap().clone();
    assert!(report(&a).historic_confirmed);
    assert_eq!(report(&b).connection, ConnectionStatus::Connected);
    assert!(!report(&b).historic_confirmed);
    assert!(matches!(
        world.engine.relay_phase(&c),
        RelayPhase::Disconnected | RelayPhase::Connecting
    ));
    let values: Vec<i64> = [
        RelayPhase::Disconnected,
        RelayPhase::Connecting,
        RelayPhase::Syncing,
        RelayPhase::Synced,
        RelayPhase::SyncFailed,
    ]
    .into_iter()
    .map(RelayPhase::metric_value)
    .collect();
    assert_eq!(values, [0, 1, 2, 3, 4], "the reference server's 0–4");
}
