//! The session's deadlines, named.

use std::time::Duration;

use super::super::outbox::Outbox;
use super::super::stores::StoreTracker;
use super::*;

/// What a session's handlers are given, owned by a test.
struct Engine {
    relay: RelayUrl,
    config: EngineConfig,
    out: Outbox,
    events: SessionEvents,
    stores: StoreTracker,
    repos: RepoSyncIndex,
}

impl Engine {
    fn new(config: EngineConfig) -> Self {
        Engine {
            relay: RelayUrl::parse("wss://relay.example").expect("url"),
            config,
            out: Outbox::new(Instant::ZERO),
            events: SessionEvents::default(),
            stores: StoreTracker::default(),
            repos: RepoSyncIndex::new(),
        }
    }

    fn cx(&mut self) -> Ctx<'_> {
        Ctx {
            relay: &self.relay,
            config: &self.config,
            out: &mut self.out,
            events: &mut self.events,
            stores: &mut self.stores,
            repos: &self.repos,
            discovers: true,
        }
    }

    fn commands(&mut self) -> Vec<Command> {
        std::iter::from_fn(|| self.out.pop()).collect()
    }
}

fn at(secs: u64) -> Now {
    Now::new(
        Instant::ZERO + Duration::from_secs(secs),
        Timestamp::from_secs(1_700_000_000 + secs),
    )
}

#[test]
fn the_session_runs_its_own_connection_lifecycle_and_says_what_happened() {
    let mut engine = Engine::new(EngineConfig::default());
    let mut session = RelaySession::default();
    session.track(false);
    let start = at(100);
    assert!(session.connect_if_due(&mut engine.cx(), start.instant));
    assert!(matches!(
        engine.commands().as_slice(),
        [Command::Connect { .. }]
    ));
    assert!(
        !session.connect_if_due(&mut engine.cx(), start.instant),
        "one attempt at a time"
    );
    // The attempt times out: the session drops it itself and backs off.
    let timeout = engine.config.health.connect_timeout();
    let late = at(100 + timeout.as_secs());
    assert!(!session.handle_timeout(&mut engine.cx(), late));
    assert!(matches!(
        engine.commands().as_slice(),
        [Command::Disconnect { .. }]
    ));
    assert_eq!(session.health().consecutive_failures(), 1);
    assert!(
        engine.events.take().is_empty(),
        "no connection came or went"
    );
    // The next attempt opens: the session says so and starts Layer 1.
    let retry = session.health().next_attempt_at(&engine.config.health);
    let retry = at(retry.saturating_duration_since(Instant::ZERO).as_secs());
    assert!(session.connect_if_due(&mut engine.cx(), retry.instant));
    assert!(session.on_connected(&mut engine.cx(), retry));
    let events = engine.events.take();
    assert!(events.contains(&SessionEvent::Connected), "{events:?}");
    assert!(events
        .iter()
        .any(|event| matches!(event, SessionEvent::BatchOpened(_))));
    assert!(!session.on_connected(&mut engine.cx(), retry), "twice");
    assert_eq!(
        engine.events.take(),
        vec![SessionEvent::Noted(Noted::InputIgnored)]
    );
    session.on_disconnected(
        &mut engine.cx(),
        at(retry.unix.as_secs() - 1_700_000_000 + 5),
    );
    assert_eq!(engine.events.take(), vec![SessionEvent::Disconnected]);
    assert!(!session.is_connected());
}

#[test]
fn the_next_deadline_says_which_kind_it_is() {
    let mut engine = Engine::new(EngineConfig::default());
    let config = EngineConfig::default();
    let now = Instant::ZERO + Duration::from_secs(100);
    let mut session = RelaySession::default();
    session.track(false);
    assert_eq!(
        session.next_deadline(now, &config),
        None,
        "nothing to wait for"
    );
    let timeout = config.health.connect_timeout();
    assert!(session.connect_if_due(&mut engine.cx(), now));
    assert_eq!(
        session.next_deadline(now, &config),
        Some((Deadline::ConnectTimeout, now + timeout))
    );
    let failed = now + timeout;
    session.on_connect_failed(&mut engine.cx(), at(100 + timeout.as_secs()));
    assert_eq!(
        session.next_deadline(failed, &config),
        Some((
            Deadline::Health,
            session.health().next_attempt_at(&config.health)
        )),
        "the reconnect backoff's end is the health deadline"
    );
}
