//! "Is this relay alive?", answered once: a relay is alive while it has sent
//! anything — a message, or a pong to the driver's ping
//! ([`SyncEngine::handle_relay_alive`](super::SyncEngine::handle_relay_alive))
//! — within [`Timeouts::batch_timeout`](super::Timeouts::batch_timeout).
//!
//! What follows from it is decided where the work is: a batch that stalls
//! while its relay is silent drops the connection instead of failing
//! (`RelaySession::expire`), so does a live subscription unanswered while the
//! relay is silent (`RelaySession::live_unanswered`), and a historic REQ
//! counts as dropped only while the relay is alive
//! (`RelayConn::req_stalls_at`). A connection with no work waiting is not
//! dropped for silence by the engine: the driver notices a dead socket by
//! its missed pong (the tokio adapter's `connection`).

use crate::clock::Instant;

use super::config::EngineConfig;

/// When the relay of one open connection was last heard from.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Liveness {
    /// When the relay last sent anything, or the connection opened.
    last_heard: Instant,
}

impl Liveness {
    /// A connection opened at `now`: its relay counts as heard then.
    pub(crate) fn opened(now: Instant) -> Self {
        Liveness { last_heard: now }
    }

    /// The relay sent something at `now` (a message or a pong); an
    /// earlier instant than one already heard changes nothing.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = self.last_heard.max(now);
    }

    /// `true` if the relay is alive at `at`: heard from within the batch
    /// timeout before it. The one answer to "is this relay alive".
    pub(crate) fn is_alive(&self, at: Instant, config: &EngineConfig) -> bool {
        at < self.silent_at(config)
    }

    /// When the relay counts as silent if it sends nothing more.
    pub(crate) fn silent_at(&self, config: &EngineConfig) -> Instant {
        self.last_heard + config.timeouts.batch_timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Instant {
        Instant::ZERO + std::time::Duration::from_secs(secs)
    }

    #[test]
    fn a_relay_is_alive_for_a_batch_timeout_after_it_was_last_heard() {
        let config = EngineConfig::default();
        let timeout = config.timeouts.batch_timeout.as_secs();
        let mut liveness = Liveness::opened(at(10));
        assert!(liveness.is_alive(at(10 + timeout - 1), &config));
        assert!(!liveness.is_alive(at(10 + timeout), &config));
        liveness.heard(at(20));
        liveness.heard(at(15));
        assert_eq!(
            liveness.silent_at(&config),
            at(20 + timeout),
            "the latest wins"
        );
        assert!(liveness.is_alive(at(10 + timeout), &config));
    }
}
