//! A remote relay that floods us through the fault proxy (forged events, frames that
//! are not relay messages) while it holds announcements of ours, and the wait for
//! those announcements once the flood stops: the set-up the flood tests share.

use std::time::Duration;

use nostr::prelude::{Event, Keys, Tag};

use super::config::{Nip77Refusal, TestRelayConfig};
use super::faults::FaultPlan;
use super::nip34::{sign, tag};
use super::relay::TestRelay;

/// A REQ-only remote (NIP-77 refused, so everything arrives on REQs, whose filters
/// the injected events match) faulting by `plan`, holding `count` announcements of
/// one key that list `own` and the remote itself (so they are ours).
pub async fn flooding_remote(
    own: &TestRelay,
    plan: FaultPlan,
    count: usize,
) -> (TestRelay, Vec<Event>) {
    let remote = TestRelay::start(
        TestRelayConfig {
            nip77: Nip77Refusal::NegErr,
            ..TestRelayConfig::default()
        }
        .with_faults(plan),
    )
    .await;
    let stranger = Keys::generate();
    let announcements: Vec<Event> = (0..count)
        .map(|n| {
            let tags = vec![
                Tag::identifier(format!("repo-{n}")),
                tag(&["relays", own.url().as_str(), remote.url().as_str()]),
            ];
            sign(&stranger, 30617, "", tags, 1_700_000_000 + n as u64)
        })
        .collect();
    remote.add_events(&announcements).await;
    (remote, announcements)
}

/// Waits (polling, bounded by `within`) until `own` holds every one of `events`;
/// panics naming how many arrived.
pub async fn wait_until_held(own: &TestRelay, events: &[Event], within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let held = own.event_ids().await;
        let arrived = events.iter().filter(|e| held.contains(&e.id)).count();
        if arrived == events.len() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{arrived} of {} events arrived within {within:?}",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
