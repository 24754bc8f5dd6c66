//! Hostile relay messages into the engine (proptest): any sequence of
//! EVENTs (signed, forged, off-filter, on unknown subscriptions), EOSE,
//! CLOSED and NOTICE with every NIP-01 prefix, OK for unknown ids, NEG-MSG
//! garbage, NEG-ERR, and arbitrary text that happens to parse, never panics;
//! only verified events matching a filter the relay was sent reach
//! `Command::Store`; every EVENT is stored or counted as a drop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::collections::HashSet;

use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
use grasp_sync_core::store::IngestOutcome;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_core::{Instant, Now};
use grasp_sync_test_support::nip34::Announcement;
use nostr::prelude::*;
use proptest::prelude::*;

const PREFIXES: [&str; 10] = [
    "duplicate:",
    "pow:",
    "blocked:",
    "rate-limited:",
    "invalid:",
    "restricted:",
    "mute:",
    "error:",
    "auth-required:",
    "",
];

/// One hostile input, as indices and seeds resolved against the engine's
/// open subscriptions when it is fed.
#[derive(Clone, Debug)]
enum Input {
    /// An EVENT on the `sub`-th subscription seen (or an unknown one).
    Event {
        sub: usize,
        kind: u16,
        forged: bool,
    },
    Eose {
        sub: usize,
    },
    Closed {
        sub: usize,
        prefix: usize,
        text: String,
    },
    Notice {
        prefix: usize,
        text: String,
    },
    Ok {
        accepted: bool,
        prefix: usize,
    },
    NegMsg {
        sub: usize,
        message: String,
    },
    NegErr {
        sub: usize,
        prefix: usize,
    },
    Raw(String),
    Tick(u64),
}

fn input() -> impl Strategy<Value = Input> {
    let text = "[ -~]{0,24}";
    prop_oneof![
        4 => (0..8usize, prop::sample::select(vec![30617u16, 1621, 1617, 1111, 1, 7]), any::<bool>())
            .prop_map(|(sub, kind, forged)| Input::Event { sub, kind, forged }),
        1 => (0..8usize).prop_map(|sub| Input::Eose { sub }),
        1 => (0..8usize, 0..PREFIXES.len(), text).prop_map(|(sub, prefix, text)| Input::Closed { sub, prefix, text }),
        1 => (0..PREFIXES.len(), text).prop_map(|(prefix, text)| Input::Notice { prefix, text }),
        1 => (any::<bool>(), 0..PREFIXES.len()).prop_map(|(accepted, prefix)| Input::Ok { accepted, prefix }),
        1 => (0..8usize, "[0-9a-fx]{0,64}").prop_map(|(sub, message)| Input::NegMsg { sub, message }),
        1 => (0..8usize, 0..PREFIXES.len()).prop_map(|(sub, prefix)| Input::NegErr { sub, prefix }),
        1 => r#"\[("EVENT"|"EOSE"|"CLOSED"|"NOTICE"|"NEG-MSG"|"OK"|"AUTH"|"COUNT"),[ -~]{0,60}\]"#.prop_map(Input::Raw),
        1 => (1..120_000u64).prop_map(Input::Tick),
    ]
}

/// The engine and what the relay was sent.
struct Harness {
    engine: SyncEngine,
    relay: RelayUrl,
    now: Now,
    /// Subscription ids in the order first seen, with their filters.
    subs: Vec<(SubscriptionId, Vec<Filter>)>,
    keys: Keys,
    stranger: Keys,
    fed_events: u64,
    stored: HashSet<EventId>,
}

impl Harness {
    fn new() -> Harness {
        let relay = RelayUrl::parse("ws://hostile.sim").unwrap();
        let maintainer = Keys::generate();
        let own = RelayUrl::parse("ws://own.sim").unwrap();
        let mut config = EngineConfig::default();
        config.identity.bootstrap_relays = vec![relay.clone()];
        config.identity.service_relays = vec![own.clone()];
        config.identity.relay_policy = RelayUrlPolicy::new().allow_local_addresses(true);
        let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
        let mut engine = SyncEngine::new(config, now).expect("a valid configuration");
        // One repository of ours listing the hostile relay, with a root.
        let announcement = Announcement::new("repo")
            .relays([&own, &relay])
            .at(1_700_000_000)
            .sign(&maintainer);
        engine.handle_own_events(now, [announcement]);
        let mut harness = Harness {
            engine,
            relay,
            now,
            subs: Vec::new(),
            keys: maintainer,
            stranger: Keys::generate(),
            fed_events: 0,
            stored: HashSet::new(),
        };
        harness.advance(6_000);
        harness
    }

    fn advance(&mut self, millis: u64) {
        let instant = self.now.instant + std::time::Duration::from_millis(millis);
        let unix = Timestamp::from_secs(self.now.unix.as_secs() + millis / 1000);
        self.now = Now::new(instant, unix);
        self.engine.handle_timeout(self.now);
        self.drain();
    }

    /// Executes commands the way a driver would, checking every Store.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            let Some(command) = self.engine.poll_command() else {
                return;
            };
            match command {
                Command::Connect { relay, .. } => self.engine.handle_connected(self.now, &relay),
                Command::Subscribe { id, filters, .. } => self.remember(id, filters),
                Command::NegOpen { id, filter, .. } => self.remember(id, vec![filter]),
                Command::QueryLocalItems { relay, id, .. } => {
                    self.engine
                        .handle_local_items(self.now, &relay, &id, Vec::new())
                }
                Command::Store { relay, event } => {
                    assert_eq!(relay, self.relay);
                    assert!(event.verify().is_ok(), "a forged event reached the store");
                    let matched = self
                        .subs
                        .iter()
                        .flat_map(|(_, filters)| filters.iter())
                        .any(|filter| filter.match_event(&event, MatchEventOptions::new()));
                    assert!(
                        matched,
                        "an event matching no filter sent reached the store"
                    );
                    self.stored.insert(event.id);
                    self.engine.handle_store_outcome(
                        self.now,
                        &event.id,
                        Ok(IngestOutcome::Stored),
                    );
                }
                _ => {}
            }
        }
        panic!("the engine kept emitting commands");
    }

    fn remember(&mut self, id: SubscriptionId, filters: Vec<Filter>) {
        match self.subs.iter_mut().find(|(known, _)| *known == id) {
            Some((_, known)) => known.extend(filters),
            None => self.subs.push((id, filters)),
        }
    }

    fn sub(&self, index: usize) -> SubscriptionId {
        self.subs
            .get(index)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| SubscriptionId::new(format!("unknown-{index}")))
    }

    fn feed(&mut self, input: Input) {
        let message = match input {
            Input::Event { sub, kind, forged } => {
                self.fed_events += 1;
                let keys = if kind == 30617 {
                    &self.keys
                } else {
                    &self.stranger
                };
                let event = EventBuilder::new(Kind::Custom(kind), format!("{}", self.fed_events))
                    .tags([Tag::identifier("repo")])
                    .custom_created_at(self.now.unix)
                    .finalize(keys)
                    .unwrap();
                let event = if forged {
                    let json = event.as_json().replace(
                        &format!("\"content\":\"{}\"", self.fed_events),
                        "\"content\":\"tampered\"",
                    );
                    Event::from_json(json).unwrap()
                } else {
                    event
                };
                RelayMessage::event(self.sub(sub), event)
            }
            Input::Eose { sub } => RelayMessage::eose(self.sub(sub)),
            Input::Closed { sub, prefix, text } => {
                RelayMessage::closed(self.sub(sub), format!("{}{text}", PREFIXES[prefix]))
            }
            Input::Notice { prefix, text } => {
                RelayMessage::notice(format!("{}{text}", PREFIXES[prefix]))
            }
            Input::Ok { accepted, prefix } => RelayMessage::ok(
                EventId::from_byte_array([0; 32]),
                accepted,
                PREFIXES[prefix].to_owned(),
            ),
            Input::NegMsg { sub, message } => RelayMessage::NegMsg {
                subscription_id: Cow::Owned(self.sub(sub)),
                message: Cow::Owned(message),
            },
            Input::NegErr { sub, prefix } => RelayMessage::NegErr {
                subscription_id: Cow::Owned(self.sub(sub)),
                message: Cow::Owned(format!("{}no", PREFIXES[prefix])),
            },
            Input::Raw(text) => match RelayMessage::from_json(&text) {
                Ok(message) => message,
                Err(_) => return,
            },
            Input::Tick(millis) => return self.advance(millis),
        };
        self.engine
            .handle_relay_message(self.now, &self.relay, message);
        self.drain();
    }
}

fn cases() -> u32 {
    std::env::var("SIM_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn hostile_relay_messages_never_panic_and_never_reach_the_store_unchecked(
        inputs in prop::collection::vec(input(), 1..120)
    ) {
        let mut harness = Harness::new();
        let mut events_before = 0;
        for input in inputs {
            let is_event = matches!(input, Input::Event { .. });
            let before = accounted(&harness.engine);
            harness.feed(input);
            if is_event {
                events_before += 1;
                let after = accounted(&harness.engine);
                prop_assert!(after > before, "an EVENT was neither stored nor counted as a drop");
            }
        }
        prop_assert_eq!(events_before, harness.fed_events);
        let stats = harness.engine.stats();
        prop_assert!(stats.events_accepted >= harness.stored.len() as u64);
    }
}

/// Events stored, dropped (forged, off filter, unknown subscription) or
/// ignored as duplicates so far.
fn accounted(engine: &SyncEngine) -> u64 {
    let stats = engine.stats();
    stats.events_accepted
        + stats.dropped_forged
        + stats.dropped_off_filter
        + stats.dropped_unknown_subscription
        + stats.inputs_ignored
}

#[test]
fn the_harness_stores_matching_events_and_drops_forged_ones() {
    let mut harness = Harness::new();
    let subs = harness.subs.len();
    assert!(subs > 0, "the harness exercises real subscriptions");
    for sub in 0..subs {
        harness.feed(Input::Event {
            sub,
            kind: 30617,
            forged: false,
        });
        harness.feed(Input::Event {
            sub,
            kind: 30617,
            forged: true,
        });
    }
    assert!(
        !harness.stored.is_empty(),
        "an announcement matches Layer 1"
    );
    // A forged event on a subscription it matches is dropped as forged
    // (elsewhere as off-filter first: the filter is checked before the
    // signature).
    assert!(harness.engine.stats().dropped_forged >= 1);
}
