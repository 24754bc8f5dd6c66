//! How many bytes of relays' messages may wait in memory, received and not
//! yet handled by the engine: each relay's own budget
//! (`ConnectionConfig::inbound_bytes_per_relay`) and one that all relays
//! share (`ConnectionConfig::inbound_bytes_total`). A connection reads its
//! next message only once both have room for it, so a thousand relays
//! sending at once hold at most the shared budget, not a thousand times
//! their own.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget all relays' messages share.
#[derive(Clone, Debug)]
pub(crate) struct SharedBudget {
    bytes: usize,
    room: Arc<Semaphore>,
}

impl SharedBudget {
    /// A shared budget of `bytes` (at least 1).
    pub(crate) fn new(bytes: usize) -> Self {
        let bytes = bytes.clamp(1, Semaphore::MAX_PERMITS);
        SharedBudget {
            bytes,
            room: Arc::new(Semaphore::new(bytes)),
        }
    }
}

/// One relay's budget, and the shared one it draws on too.
#[derive(Clone, Debug)]
pub(crate) struct InboundBudget {
    bytes: usize,
    room: Arc<Semaphore>,
    shared: SharedBudget,
}

/// A message's share of both budgets, given back when it is dropped (after
/// the engine handled the message).
#[derive(Debug)]
pub(crate) struct BufferedShare {
    _relay: OwnedSemaphorePermit,
    _shared: OwnedSemaphorePermit,
}

impl InboundBudget {
    /// A relay's budget of `bytes` (at least 1), drawing on `shared`.
    pub(crate) fn new(bytes: usize, shared: SharedBudget) -> Self {
        let bytes = bytes.clamp(1, Semaphore::MAX_PERMITS);
        InboundBudget {
            bytes,
            room: Arc::new(Semaphore::new(bytes)),
            shared,
        }
    }

    /// Waits until both budgets have room for a message of `size` bytes
    /// and takes it. A message larger than a budget takes all of it (it
    /// waits until nothing else is buffered), so it never waits forever.
    pub(crate) async fn reserve(&self, size: usize) -> Option<BufferedShare> {
        let relay = permits(size, self.bytes);
        let shared = permits(size, self.bytes.min(self.shared.bytes));
        // Always the relay's first, then the shared one: no two
        // reservations wait for each other in opposite orders.
        let relay = self.room.clone().acquire_many_owned(relay).await.ok()?;
        let shared = self
            .shared
            .room
            .clone()
            .acquire_many_owned(shared)
            .await
            .ok()?;
        Some(BufferedShare {
            _relay: relay,
            _shared: shared,
        })
    }
}

/// The permits a message of `size` bytes takes of a budget of `bytes`.
fn permits(size: usize, bytes: usize) -> u32 {
    u32::try_from(size.clamp(1, bytes)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const WAIT: Duration = Duration::from_millis(100);

    #[tokio::test]
    async fn relays_together_hold_no_more_than_the_shared_budget() {
        let shared = SharedBudget::new(1_000);
        let first = InboundBudget::new(800, shared.clone());
        let second = InboundBudget::new(800, shared);
        let held = first.reserve(700).await.expect("room");
        // The second relay's own budget has room, the shared one not.
        let waiting = tokio::time::timeout(WAIT, second.reserve(700)).await;
        assert!(waiting.is_err(), "waits for the shared budget");
        drop(held);
        let taken = tokio::time::timeout(WAIT, second.reserve(700)).await;
        assert!(
            matches!(taken, Ok(Some(_))),
            "taken once room is given back"
        );
    }

    #[tokio::test]
    async fn one_relay_holds_no_more_than_its_own_budget() {
        let first = InboundBudget::new(500, SharedBudget::new(10_000));
        let held = first.reserve(400).await.expect("room");
        assert!(tokio::time::timeout(WAIT, first.reserve(400))
            .await
            .is_err());
        drop(held);
        assert!(matches!(
            tokio::time::timeout(WAIT, first.reserve(400)).await,
            Ok(Some(_))
        ));
    }

    #[tokio::test]
    async fn a_message_larger_than_both_budgets_takes_all_of_them_and_does_not_wait_forever() {
        let budget = InboundBudget::new(500, SharedBudget::new(300));
        let taken = tokio::time::timeout(WAIT, budget.reserve(5_000)).await;
        assert!(matches!(taken, Ok(Some(_))));
    }
}
