//! Strangers' events are bounded in bytes, not only in count, and a relay
//! sending events we refuse is cut off and backed off: 2 000 oversized
//! announcements not ours and 2 000 large ones leave the engine holding at
//! most the stated bound; a relay sending forged or off-filter events past
//! `Caps::max_bad_events` is disconnected once, counted once, and connected
//! again only after a backoff that grows with each cut.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine, MAX_CANDIDATE_BYTES};
use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_core::{Instant, Now};
use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use nostr::prelude::*;

/// The engine, connected to one remote relay, and the relay's
/// subscriptions as sent.
struct Harness {
    engine: SyncEngine,
    relay: RelayUrl,
    now: Now,
    subs: Vec<(SubscriptionId, Vec<Filter>)>,
    connects: usize,
}

impl Harness {
    fn new(config: impl FnOnce(&mut EngineConfig)) -> Harness {
        let relay = RelayUrl::parse("ws://remote.sim").unwrap();
        let own = RelayUrl::parse("ws://own.sim").unwrap();
        let mut engine_config = EngineConfig::default();
        engine_config.identity.bootstrap_relays = vec![relay.clone()];
        engine_config.identity.service_relays = vec![own.clone()];
        engine_config.identity.relay_policy = RelayUrlPolicy::new().allow_local_addresses(true);
        config(&mut engine_config);
        let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
        let mut engine = SyncEngine::new(engine_config, now).expect("a valid configuration");
        let ours = Announcement::new("ours")
            .relays([&own, &relay])
            .at(1_700_000_000)
            .sign(&Keys::generate());
        engine.handle_own_events(now, [ours]);
        let mut harness = Harness {
            engine,
            relay,
            now,
            subs: Vec::new(),
            connects: 0,
        };
        harness.advance(6_000);
        harness
    }

    fn advance(&mut self, millis: u64) {
        let instant = self.now.instant + Duration::from_millis(millis);
        let unix = Timestamp::from_secs(self.now.unix.as_secs() + millis / 1000);
        self.now = Now::new(instant, unix);
        self.engine.handle_timeout(self.now);
        self.drain();
    }

    /// Executes commands as a driver would: connects succeed, the store
    /// takes everything.
    fn drain(&mut self) {
        while let Some(command) = self.engine.poll_command() {
            match command {
                Command::Connect { relay, .. } => {
                    self.connects += 1;
                    self.engine.handle_connected(self.now, &relay);
                }
                Command::Subscribe { id, filters, .. } => self.subs.push((id, filters)),
                Command::QueryLocalItems { relay, id, .. } => {
                    self.engine
                        .handle_local_items(self.now, &relay, &id, Vec::new())
                }
                Command::Store { event, .. } => self.engine.handle_store_outcome(
                    self.now,
                    &event.id,
                    Ok(grasp_sync_core::store::IngestOutcome::Stored),
                ),
                _ => {}
            }
        }
    }

    /// The newest subscription sent whose filters match `event`.
    fn sub_for(&self, event: &Event) -> SubscriptionId {
        self.subs
            .iter()
            .rev()
            .find(|(_, filters)| {
                filters
                    .iter()
                    .any(|filter| filter.match_event(event, MatchEventOptions::new()))
            })
            .map(|(id, _)| id.clone())
            .expect("a subscription matching the event")
    }

    fn send(&mut self, sub: &SubscriptionId, event: Event) {
        let message = RelayMessage::event(sub.clone(), event);
        self.engine
            .handle_relay_message(self.now, &self.relay.clone(), message);
        self.drain();
    }
}

/// An announcement by a stranger, listing no service relay of ours, with
/// `content_bytes` of description and 200 `t` tags.
fn foreign_announcement(keys: &Keys, n: usize, content_bytes: usize) -> Event {
    let mut tags = vec![
        Tag::identifier(format!("foreign-{n}")),
        tag(&["relays", "wss://elsewhere.example"]),
    ];
    tags.extend((0..200).map(|t| Tag::hashtag(format!("topic-{t}"))));
    sign(
        keys,
        30617,
        &"x".repeat(content_bytes),
        tags,
        1_700_000_000 + n as u64,
    )
}

/// The bound stated for what 4 000 strangers' announcements can make the
/// engine hold: the candidates' byte budget, and 4 000 refused-event
/// records of at most 2 KiB each (no content, at most `MAX_REFUSED_TAGS`
/// tags).
const HELD_BOUND: usize = MAX_CANDIDATE_BYTES + 4_000 * 2 * 1024;

#[test]
fn oversized_and_large_foreign_announcements_stay_within_the_byte_bounds() {
    // Never cut the relay off here: every event is to be judged. An event
    // limit of 64 KiB (a stricter operator's, strfry's; the default is 1 MiB)
    // keeps the oversized ones small enough to sign quickly.
    let mut h = Harness::new(|config| {
        config.caps.max_bad_events = 0;
        config.limits.max_event_size = 64 * 1024;
    });
    let stranger = Keys::generate();
    let probe = foreign_announcement(&stranger, 0, 0);
    let sub = h.sub_for(&probe);
    // 2 000 announcements of 100 KiB: over the 64 KiB event limit.
    for n in 0..2_000 {
        let event = foreign_announcement(&stranger, n, 100 * 1024);
        h.send(&sub, event);
    }
    // 2 000 of 16 KiB: within it, not ours, held as candidates (31 MiB in all).
    for n in 2_000..4_000 {
        let event = foreign_announcement(&stranger, n, 16 * 1024);
        h.send(&sub, event);
    }
    let stats = h.engine.stats().clone();
    let held = h.engine.held_bytes();
    println!(
        "held: candidates {} B ({}), refused {} B ({}); dropped oversized {}, candidates dropped {}",
        held.candidates,
        held.candidate_count,
        held.refused,
        held.refused_count,
        stats.dropped_oversized,
        stats.candidates_dropped
    );
    assert_eq!(
        stats.dropped_oversized, 2_000,
        "oversized ones are refused and counted"
    );
    assert_eq!(stats.not_ours, 2_000, "the others are judged not ours");
    assert!(held.candidates <= MAX_CANDIDATE_BYTES, "{held:?}");
    assert!(
        held.candidate_count < 2_000,
        "large candidates are bounded by bytes before their count: {held:?}"
    );
    assert_eq!(
        stats.candidates_dropped as usize,
        2_000 - held.candidate_count,
        "every candidate dropped is counted"
    );
    assert!(
        held.refused <= held.refused_count * 2 * 1024,
        "a refused record is small: {held:?}"
    );
    assert!(
        held.candidates + held.refused <= HELD_BOUND,
        "held {} B, bound {HELD_BOUND} B",
        held.candidates + held.refused
    );
}

/// A text note signed by `keys` with its content changed afterwards: the
/// id no longer matches.
fn forged_note(keys: &Keys, n: u64) -> Event {
    let mut event = sign(
        keys,
        30617,
        "x",
        vec![Tag::identifier(format!("f{n}"))],
        1_700_000_000 + n,
    );
    event.content = format!("forged {n}");
    event
}

#[test]
fn a_relay_sending_refused_events_past_the_threshold_is_cut_off_once_and_backed_off() {
    let mut h = Harness::new(|config| config.caps.max_bad_events = 100);
    let keys = Keys::generate();
    let probe = forged_note(&keys, 0);
    let sub = h.sub_for(&probe);
    assert_eq!(h.connects, 1);
    // Within the threshold: dropped and counted, the relay stays.
    for n in 0..100 {
        h.send(&sub, forged_note(&keys, n));
    }
    assert_eq!(h.engine.stats().dropped_forged, 100);
    assert_eq!(h.engine.stats().relays_cut_for_bad_events, 0);
    // Off-filter and unknown-subscription events count too: the next one
    // goes past the threshold.
    let note = sign(&keys, 1, "off filter", vec![], 1_700_000_000);
    h.send(&sub, note);
    assert_eq!(h.engine.stats().dropped_off_filter, 1);
    assert_eq!(h.engine.stats().relays_cut_for_bad_events, 1);
    // Events still on their way from the lost connection are ignored, not
    // counted again.
    for n in 100..200 {
        h.send(&sub, forged_note(&keys, n));
    }
    assert_eq!(h.engine.stats().relays_cut_for_bad_events, 1);
    assert_eq!(h.engine.stats().dropped_forged, 100);
    // Connected again only after the backoff, and each cut makes it longer.
    let health = h.engine.relay_health(&h.relay).expect("tracked");
    assert_eq!(health.consecutive_failures(), 1);
    h.advance(1_000);
    assert_eq!(h.connects, 1, "not reconnected at once");
    let mut waits = Vec::new();
    for cut in 0..3 {
        let before = h.now.instant;
        let connects = h.connects;
        while h.connects == connects {
            h.advance(1_000);
            assert!(
                h.now.instant.saturating_duration_since(before) < Duration::from_secs(3_600),
                "reconnected"
            );
        }
        waits.push(h.now.instant.saturating_duration_since(before));
        let sub = h.sub_for(&probe);
        for n in 0..101 {
            h.send(&sub, forged_note(&keys, 1_000 * (cut + 2) + n));
        }
        assert_eq!(h.engine.stats().relays_cut_for_bad_events, 2 + cut);
    }
    assert!(
        waits[0] < waits[1] && waits[1] < waits[2],
        "the backoff grows: {waits:?}"
    );
}

#[test]
fn a_message_over_the_size_limit_backs_the_relay_off_even_after_a_stable_connection() {
    let mut h = Harness::new(|_| {});
    let relay = h.relay.clone();
    // Connected long past the stability period: a plain drop now would be
    // no failure, and the relay would be connected again at once.
    // The relay answers every subscription and pings.
    let subs: Vec<SubscriptionId> = h.subs.iter().map(|(id, _)| id.clone()).collect();
    for id in subs {
        h.engine
            .handle_relay_message(h.now, &relay, RelayMessage::eose(id));
    }
    for _ in 0..600 {
        h.engine.handle_relay_alive(h.now, &relay);
        h.advance(1_000);
    }
    assert_eq!(h.connects, 1, "one stable connection");
    let mut waits = Vec::new();
    for round in 0..3 {
        h.engine.handle_message_too_large(h.now, &relay, 200 * 1024);
        h.drain();
        assert_eq!(h.engine.stats().dropped_oversized, round + 1);
        let health = h.engine.relay_health(&relay).expect("tracked");
        assert_eq!(health.consecutive_failures(), round as u32 + 1);
        let before = h.now.instant;
        let connects = h.connects;
        while h.connects == connects {
            h.advance(1_000);
            assert!(
                h.now.instant.saturating_duration_since(before) < Duration::from_secs(3_600),
                "reconnected"
            );
        }
        waits.push(h.now.instant.saturating_duration_since(before));
    }
    assert!(
        waits[0] >= Duration::from_secs(2) && waits[0] < waits[1] && waits[1] < waits[2],
        "not asked again at once, and ever more rarely: {waits:?}"
    );
}
