//! What the engine emits: its commands in order, the subscription and batch
//! ids it hands out, and the time commands are stamped with.

use std::collections::VecDeque;

use nostr::prelude::SubscriptionId;

use super::Command;
use crate::clock::{Instant, Now};
use crate::model::BatchId;

/// The engine's output queue and id counters. A relay session that emits a
/// command does its own bookkeeping first
/// ([`RelaySession::send`](super::relay_session::RelaySession::send)).
#[derive(Debug)]
pub(crate) struct Outbox {
    commands: VecDeque<Command>,
    next_batch: u64,
    next_sub: u64,
    /// The latest `now` seen, for what is stamped or computed without an
    /// input of its own.
    now: Instant,
}

impl Outbox {
    /// An empty outbox at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Outbox {
            commands: VecDeque::new(),
            next_batch: 0,
            next_sub: 0,
            now,
        }
    }

    /// Appends `command`.
    pub(crate) fn push(&mut self, command: Command) {
        self.commands.push_back(command);
    }

    /// The oldest command not taken yet.
    pub(crate) fn pop(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// A new subscription id, `gs-<purpose>-<n>`.
    pub(crate) fn sub_id(&mut self, purpose: &str) -> SubscriptionId {
        self.next_sub += 1;
        SubscriptionId::new(format!("gs-{purpose}-{}", self.next_sub))
    }

    /// A new batch id.
    pub(crate) fn batch_id(&mut self) -> BatchId {
        self.next_batch += 1;
        BatchId(self.next_batch)
    }

    /// Records the time of an input (time never goes back).
    pub(crate) fn observe(&mut self, now: Now) {
        self.now = self.now.max(now.instant);
    }

    /// The latest `now` seen.
    pub(crate) fn now(&self) -> Instant {
        self.now
    }
}
