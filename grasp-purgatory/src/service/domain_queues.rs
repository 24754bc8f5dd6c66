//! Serving the queues of throttled domains: the loop drains the
//! [`ThrottleManager`](crate::ThrottleManager)'s steps, spawns one task per repository
//! to serve and keeps one wake-up deadline per domain that waits for its per-minute
//! window.

use std::collections::BTreeMap;
use std::sync::Arc;

use grasp_sync_core::clock::Instant;
use grasp_sync_core::purgatory::QueueStep;

use super::api::Purgatory;
use crate::sync::serve_queued_identifier;
use crate::throttle_manager::DomainStep;

/// Per domain, when to look at its queue again ([`QueueStep::WakeAt`]): timers as data,
/// read by the main loop.
#[derive(Debug, Default)]
pub(super) struct DomainWakes {
    deadlines: BTreeMap<String, Instant>,
}

impl DomainWakes {
    /// Wakes `domain` at `at`, unless a wake-up of it is already scheduled.
    fn schedule(&mut self, domain: String, at: Instant) {
        self.deadlines.entry(domain).or_insert(at);
    }

    /// The domains whose wake-up is due at `now`, forgotten here.
    fn take_due(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .deadlines
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(domain, _)| domain.clone())
            .collect();
        for domain in &due {
            self.deadlines.remove(domain);
        }
        due
    }

    /// The earliest scheduled wake-up.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.values().min().copied()
    }
}

impl Purgatory {
    /// Wakes the domains whose deadline passed, then serves every step the throttle
    /// manager yields: a task per identifier to serve, a deadline per waiting domain.
    pub(super) fn serve_domain_queues(&self, wakes: &mut DomainWakes) {
        let manager = &self.shared.manager;
        for domain in wakes.take_due(self.shared.clock.now()) {
            manager.wake_domain(&domain);
        }
        while let Some(DomainStep { domain, step }) = manager.poll_step() {
            match step {
                QueueStep::Serve(key) => {
                    let ctx = Arc::clone(&self.shared.ctx);
                    let manager = Arc::clone(manager);
                    let wake = Arc::clone(&self.shared.wake);
                    self.shared.tasks.spawn(async move {
                        serve_queued_identifier(ctx.as_ref(), &domain, &key, &manager).await;
                        // Events may have been released: let the loop forget them.
                        wake.notify_one();
                    });
                }
                QueueStep::WakeAt(at) => wakes.schedule(domain, at),
                QueueStep::Idle => {}
            }
        }
    }
}
