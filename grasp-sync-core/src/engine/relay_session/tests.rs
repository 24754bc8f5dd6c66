//! The session's deadlines, named.

use std::time::Duration;

use super::*;

#[test]
fn the_next_deadline_says_which_kind_it_is() {
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
    session.connect_attempt(now, timeout);
    assert_eq!(
        session.next_deadline(now, &config),
        Some((Deadline::ConnectTimeout, now + timeout))
    );
    let failed = now + timeout;
    assert!(session.connect_failed(failed));
    assert_eq!(
        session.next_deadline(failed, &config),
        Some((
            Deadline::Health,
            session.health().next_attempt_at(&config.health)
        )),
        "the reconnect backoff's end is the health deadline"
    );
}
