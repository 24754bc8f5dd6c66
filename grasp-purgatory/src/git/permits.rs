//! [`FairPermits`]: the fetch processes running at once, shared round-robin per owner.
//!
//! A first-come queue lets whoever asks most often hold every permit: 100 repositories
//! of a few keys, each trying URLs that hang for the whole fetch timeout, queue ahead of
//! an honest repository for as long as their fetches take together. Here each owner (a
//! repository's owner: the directory it sits in under the git root) waits in a queue of
//! its own, and a freed permit goes to the next owner in turn: an owner that starts
//! asking waits for at most one freed permit per other waiting owner.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use indexmap::IndexMap;
use tokio::sync::oneshot;

/// Permits shared round-robin among owners. Cloning shares them.
#[derive(Clone, Debug)]
pub(crate) struct FairPermits {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    /// Permits nobody holds.
    available: usize,
    /// Per owner, its waiters, oldest first; owners in the order they started waiting.
    waiting: IndexMap<String, VecDeque<oneshot::Sender<Permit>>>,
    /// The position in `waiting` of the owner served next.
    next: usize,
}

/// One permit; given back when dropped (to the next owner waiting, in turn).
#[derive(Debug)]
pub(crate) struct Permit {
    state: Option<Arc<Mutex<State>>>,
}

impl FairPermits {
    /// `count` permits (at least one).
    pub(crate) fn new(count: usize) -> Self {
        FairPermits {
            state: Arc::new(Mutex::new(State {
                available: count.max(1),
                waiting: IndexMap::new(),
                next: 0,
            })),
        }
    }

    /// A permit for `owner`: at once if one is free and nobody waits, otherwise when it
    /// is `owner`'s turn.
    pub(crate) async fn acquire(&self, owner: &str) -> Permit {
        let receiver = {
            let mut state = lock(&self.state);
            if state.available > 0 && state.waiting.is_empty() {
                state.available -= 1;
                return self.permit();
            }
            let (sender, receiver) = oneshot::channel();
            state
                .waiting
                .entry(owner.to_owned())
                .or_default()
                .push_back(sender);
            receiver
        };
        // The sender is only dropped unsent when the state is dropped, which holds it.
        match receiver.await {
            Ok(permit) => permit,
            Err(_) => Permit { state: None },
        }
    }

    fn permit(&self) -> Permit {
        Permit {
            state: Some(Arc::clone(&self.state)),
        }
    }
}

impl State {
    /// The next waiter in turn: the oldest of the next owner's; owners left with no
    /// waiter are forgotten.
    fn next_waiter(&mut self) -> Option<oneshot::Sender<Permit>> {
        while !self.waiting.is_empty() {
            let index = self.next % self.waiting.len();
            let (_, queue) = self.waiting.get_index_mut(index)?;
            let waiter = queue.pop_front();
            if queue.is_empty() {
                self.waiting.shift_remove_index(index);
                self.next = index;
            } else {
                self.next = index + 1;
            }
            if waiter.is_some() {
                return waiter;
            }
        }
        None
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(shared) = self.state.take() else {
            return;
        };
        let mut state = lock(&shared);
        while let Some(waiter) = state.next_waiter() {
            let permit = Permit {
                state: Some(Arc::clone(&shared)),
            };
            match waiter.send(permit) {
                Ok(()) => return,
                // The waiter gave up (its fetch was cancelled): the permit comes back
                // unsent; forget it without releasing twice and try the next one.
                Err(mut unsent) => unsent.state = None,
            }
        }
        state.available += 1;
    }
}

/// Locks the state, taking over a poisoned lock (every update leaves it consistent).
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// How many of `waiters` (pending acquisitions, their permits kept in the finished
    /// tasks) got a permit, after a moment for the grants to land.
    async fn granted(waiters: &[tokio::task::JoinHandle<Permit>]) -> usize {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waiters.iter().filter(|waiter| waiter.is_finished()).count()
    }

    /// An attacker holding both permits and queueing 10 more fetches does not keep an
    /// honest owner waiting behind all 10: of the two permits freed next, one is the
    /// honest owner's. (A first-come semaphore gives both to the attacker's fetches.)
    #[tokio::test]
    async fn a_freed_permit_goes_to_the_next_owner_in_turn() {
        let permits = FairPermits::new(2);
        let held = [
            permits.acquire("attacker").await,
            permits.acquire("attacker").await,
        ];
        let acquire = |owner: &'static str| {
            let permits = permits.clone();
            tokio::spawn(async move { permits.acquire(owner).await })
        };
        let attacker: Vec<_> = (0..10).map(|_| acquire("attacker")).collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let honest = [acquire("honest")];
        assert_eq!(granted(&honest).await, 0, "no permit is free yet");
        drop(held);
        // One freed permit went to each owner in turn: the attacker's first waiter (it
        // waited first) and the honest one; the other nine attacker fetches still wait.
        assert_eq!(granted(&honest).await, 1, "the honest owner's turn came");
        assert_eq!(granted(&attacker).await, 1);
        drop(honest);
        assert_eq!(
            granted(&attacker).await,
            2,
            "with nobody else waiting, the attacker's turn"
        );
    }

    /// A waiter that gives up does not lose its permit for everyone.
    #[tokio::test]
    async fn a_cancelled_waiter_passes_the_permit_on() {
        let permits = FairPermits::new(1);
        let held = permits.acquire("a").await;
        let cancelled = {
            let permits = permits.clone();
            tokio::spawn(async move { permits.acquire("b").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(5), permits.acquire("c")).await;
        assert!(again.is_ok(), "the permit is free again");
    }
}
