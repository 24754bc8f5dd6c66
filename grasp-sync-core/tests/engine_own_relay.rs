//! The own relay driven through the engine like any relay: the engine
//! connects to it, pages through its history with `until`, and reconnects
//! after a drop — here in the middle of the paging.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::time::Duration;

use grasp_sync_core::engine::Command;
use grasp_sync_core::store::EventStore;
use nostr::prelude::*;

use sim::events::{self, repo_ref};
use sim::{config, own_url, relay_url, sim_relay, World, OWN_PAGE, UNIX_ORIGIN};

const STEPS: u64 = 400_000;

fn at(offset: u64) -> u64 {
    UNIX_ORIGIN - 100_000 + offset
}

/// The first filter of every history REQ the own relay received, in order.
fn history_reqs(world: &World) -> Vec<Filter> {
    world
        .own
        .history_reqs
        .iter()
        .map(|filters| filters[0].clone())
        .collect()
}

/// The own relay holds an announcement (its oldest event: on the last page
/// of its history) and 100 issues; relay a holds one reply per issue, which
/// only an engine that read every issue asks for. The connection drops right
/// after the `drop_after`-th page, while another client's issue reaches the
/// own relay; the engine must read the whole history again and end with
/// every event.
#[test]
fn a_drop_in_the_middle_of_the_own_history_paging_loses_nothing() {
    for drop_after in 1..=4 {
        let maintainer = Keys::generate();
        let user = Keys::generate();
        let a = relay_url("a");
        let announcement = events::announcement(&maintainer, "alpha", &[&own_url(), &a], at(0));
        let reference = repo_ref(&maintainer, "alpha");
        let roots: Vec<Event> = (0..100)
            .map(|n| events::root(&user, 1621, &reference, &format!("issue {n}"), at(10 + n)))
            .collect();
        let replies: Vec<Event> = roots
            .iter()
            .map(|root| events::reply(&user, &root.id, "reply", at(50_000)))
            .collect();
        let mut own_events = vec![announcement.clone()];
        own_events.extend(roots.iter().cloned());
        assert!(
            own_events.len() > 4 * OWN_PAGE,
            "the history takes more pages than the drop points"
        );
        let mut remote = vec![announcement.clone()];
        remote.extend(replies.iter().cloned());
        let mut world = World::new(config(), vec![sim_relay("a", remote)], own_events.clone());
        world.own.drop_after_pages = Some(drop_after);

        assert!(
            world.run_until(STEPS, |w| w.own.drops == 1),
            "the own relay dropped: {}",
            world.dump()
        );
        assert_eq!(
            world.own.histories_completed, 0,
            "dropped in the middle of the paging"
        );
        assert!(!world.engine.own_history_complete());
        let pages_before_drop = world.own.history_reqs.len();
        assert!(
            pages_before_drop >= drop_after,
            "{pages_before_drop} pages before the drop"
        );
        // While the connection is down, another client's issue reaches the
        // own relay, and its reply relay a.
        let late = events::root(
            &user,
            1621,
            &reference,
            "late issue",
            world.unix().as_secs(),
        );
        let late_reply = events::reply(&user, &late.id, "late reply", world.unix().as_secs());
        futures::executor::block_on(world.own.store.ingest(&late)).unwrap();
        world.publish(&a, late_reply.clone());
        own_events.push(late.clone());

        assert!(
            world.run_until_idle(STEPS),
            "no convergence after a drop after page {drop_after}: {}",
            world.dump()
        );
        world.run_for(Duration::from_secs(60), STEPS);

        // Every event of the own relay reached the engine: each issue's
        // reply was fetched, the late issue's too.
        let expected = world.expected(&own_events, &[]);
        let stored = world.stored();
        let missing: Vec<&EventId> = expected.difference(&stored).collect();
        assert!(
            missing.is_empty() && stored.is_superset(&expected),
            "drop after page {drop_after}: {} of {} missing\n{}",
            missing.len(),
            expected.len(),
            world.dump()
        );
        assert!(stored.contains(&late_reply.id));
        assert!(replies.iter().all(|reply| stored.contains(&reply.id)));
        assert!(world.engine.own_history_complete());
        assert_eq!(world.own.histories_completed, 1);
        assert_eq!(world.own.drops, 1);

        // The reconnect read the history from its top again (nothing was
        // read completely, so no `since`), page by page with `until`.
        let after_drop = &history_reqs(&world)[pages_before_drop..];
        assert!(after_drop.len() > 1, "{after_drop:?}");
        assert_eq!(after_drop[0].until, None, "{after_drop:?}");
        assert_eq!(after_drop[0].since, None, "{after_drop:?}");
        assert!(after_drop[1..].iter().all(|filter| filter.until.is_some()));
        // The engine connected to the own relay twice, and closed the history
        // subscription once, after its last page.
        let own = own_url();
        let own_commands: Vec<&Command> = world
            .command_log
            .iter()
            .map(|(_, command)| command)
            .filter(|command| command.relay() == &own)
            .collect();
        let connects = own_commands
            .iter()
            .filter(|command| matches!(command, Command::Connect { .. }))
            .count();
        assert_eq!(connects, 2);
        let closes = own_commands
            .iter()
            .filter(|command| matches!(command, Command::Unsubscribe { .. }))
            .count();
        assert_eq!(closes, 1);
    }
}

/// The own relay's connect, its timeout and its reconnect are the engine's
/// commands and deadlines: an attempt nobody answers is given up after its
/// timeout (Disconnect), the next one is due after the own relay's backoff,
/// and `poll_timeout` names both instants.
#[test]
fn the_own_relay_connect_and_reconnect_are_engine_deadlines() {
    use grasp_sync_core::{Instant, Now};
    let own = own_url();
    let mut engine = grasp_sync_core::engine::SyncEngine::new(
        config(),
        Now::new(Instant::ZERO, Timestamp::from_secs(UNIX_ORIGIN)),
    )
    .expect("a valid configuration");
    let at = |secs: u64| {
        Now::new(
            Instant::ZERO + Duration::from_secs(secs),
            Timestamp::from_secs(UNIX_ORIGIN + secs),
        )
    };
    let drain = |engine: &mut grasp_sync_core::engine::SyncEngine, now: Now| {
        let mut commands = Vec::new();
        engine.execute_commands(now, |command| {
            commands.push(command);
            Ok(())
        });
        commands
    };
    engine.handle_timeout(at(0));
    let commands = drain(&mut engine, at(0));
    assert!(
        matches!(commands.as_slice(), [Command::Connect { relay, timeout }]
            if relay == &own && *timeout == Duration::from_secs(5)),
        "{commands:?}"
    );
    // Nobody answers: the attempt ends at its timeout.
    assert_eq!(engine.poll_timeout(), Some(at(5).instant));
    engine.handle_timeout(at(5));
    let commands = drain(&mut engine, at(5));
    assert!(
        matches!(commands.as_slice(), [Command::Disconnect { relay }] if relay == &own),
        "{commands:?}"
    );
    // The next attempt after the own relay's backoff (2 s).
    assert_eq!(engine.poll_timeout(), Some(at(7).instant));
    engine.handle_timeout(at(6));
    assert!(
        drain(&mut engine, at(6)).is_empty(),
        "not before the backoff"
    );
    engine.handle_timeout(at(7));
    let commands = drain(&mut engine, at(7));
    assert!(
        matches!(commands.as_slice(), [Command::Connect { relay, .. }] if relay == &own),
        "{commands:?}"
    );
    // This one opens: the live subscription and the first history page.
    engine.handle_connected(at(8), &own);
    let commands = drain(&mut engine, at(8));
    let limits: Vec<Option<usize>> = commands
        .iter()
        .map(|command| match command {
            Command::Subscribe { relay, filters, .. } if relay == &own => filters[0].limit,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(limits, [Some(0), Some(500)]);
    assert!(!engine.own_history_complete());
    // A drop one second after it opened: the own relay's session is a
    // relay session like any, held to the same flapping rule — the failure
    // run the connection interrupted goes on (2 failures: 4 s of the own
    // relay's backoff), rather than starting over.
    engine.handle_disconnected(at(9), &own);
    assert_eq!(engine.poll_timeout(), Some(at(13).instant));
}
