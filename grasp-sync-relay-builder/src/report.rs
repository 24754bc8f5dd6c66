//! Reporting stored events to the sync: the relay's database, wrapped so
//! that every announcement or root event the relay **stored** is handed to
//! the sync, and the forwarder that hands it over.
//!
//! The relay saves an event only after every one of its checks passed
//! (its write policies, duplicate, deleted, its mode), so a report made on
//! a successful save is never early: the event is already queryable when the
//! sync hears of it. The hand-off never waits: the relay's write path puts
//! the event in a bounded queue and moves on. When the queue is full the
//! report is not lost: the window of `created_at` seconds it fell in is
//! remembered (two numbers, whatever the overflow's size) and the forwarder,
//! once the sync reads again, re-reads that window's own kinds from the
//! database and reports them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nostr::prelude::Event;
use nostr_relay_builder::prelude as r44;
use tokio::sync::{mpsc, Notify};
use tracing::{debug, warn};

use crate::convert::event_from_r44;

/// How long the forwarder waits before re-reading again after the
/// database failed a re-read.
const REREAD_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Kinds the sync must hear about when the relay stores them.
const OWN_KINDS: [u16; 4] = [30617, 1617, 1618, 1621];

/// `true` when the sync must hear of a stored event of this kind.
fn is_own_kind(event: &r44::Event) -> bool {
    OWN_KINDS.contains(&event.kind.as_u16())
}

/// The `created_at` seconds of the reports that did not fit in the queue:
/// the forwarder re-reads this window from the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Missed {
    since: u64,
    until: u64,
}

impl Missed {
    /// The window widened to take in `at`.
    fn widened(current: Option<Missed>, at: u64) -> Missed {
        match current {
            None => Missed {
                since: at,
                until: at,
            },
            Some(window) => Missed {
                since: window.since.min(at),
                until: window.until.max(at),
            },
        }
    }
}

/// The hand-off between the relay's write path (which offers) and the
/// forwarder (which takes).
#[derive(Debug)]
pub(crate) struct Handoff {
    queue: mpsc::Sender<r44::Event>,
    missed: Mutex<Option<Missed>>,
    lagged: Notify,
    overflowed: AtomicU64,
}

impl Handoff {
    /// A hand-off holding up to `capacity` reports, and its queue's
    /// receiving end.
    pub(crate) fn new(capacity: usize) -> (Arc<Handoff>, mpsc::Receiver<r44::Event>) {
        let (queue, receiver) = mpsc::channel(capacity.max(1));
        let handoff = Handoff {
            queue,
            missed: Mutex::new(None),
            lagged: Notify::new(),
            overflowed: AtomicU64::new(0),
        };
        (Arc::new(handoff), receiver)
    }

    /// Offers a stored event to the sync without waiting: queued, or (the
    /// queue full) its `created_at` remembered for a re-read.
    fn offer(&self, event: &r44::Event) {
        match self.queue.try_send(event.clone()) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.remember_missed(event),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                debug!(id = %event.id, "the sync stopped; stored event not reported");
            }
        }
    }

    /// Remembers a report that did not fit, and wakes the forwarder.
    fn remember_missed(&self, event: &r44::Event) {
        let at = event.created_at.as_secs();
        let mut missed = self.missed.lock().unwrap_or_else(PoisonError::into_inner);
        if missed.is_none() {
            warn!(
                id = %event.id,
                "the sync is not keeping up: reports overflow; they will be re-read from the database"
            );
        }
        *missed = Some(Missed::widened(*missed, at));
        drop(missed);
        self.overflowed.fetch_add(1, Ordering::Relaxed);
        self.lagged.notify_one();
    }

    /// The window to re-read, taken (a later overflow starts a new one).
    fn take_missed(&self) -> Option<Missed> {
        self.missed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Puts back a window whose re-read failed, and wakes the forwarder to
    /// try again.
    fn restore_missed(&self, window: Missed) {
        let mut missed = self.missed.lock().unwrap_or_else(PoisonError::into_inner);
        let widened = Missed::widened(*missed, window.since);
        *missed = Some(Missed::widened(Some(widened), window.until));
        drop(missed);
        self.lagged.notify_one();
    }

    /// How many reports overflowed the queue so far (each re-read, not lost).
    pub(crate) fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }
}

/// The relay's database, reporting what the relay stores to the sync. Get
/// it from [`Bridge::database`](crate::Bridge::database) and give it to the
/// relay's builder; everything else is the wrapped database's.
#[derive(Debug)]
pub struct ReportingDatabase {
    inner: Arc<dyn r44::NostrDatabase>,
    handoff: Arc<Handoff>,
}

impl ReportingDatabase {
    pub(crate) fn new(inner: Arc<dyn r44::NostrDatabase>, handoff: Arc<Handoff>) -> Self {
        ReportingDatabase { inner, handoff }
    }
}

type Boxed<'a, T> = r44::BoxedFuture<'a, Result<T, r44::DatabaseError>>;

impl r44::NostrDatabase for ReportingDatabase {
    fn backend(&self) -> r44::Backend {
        self.inner.backend()
    }

    fn save_event<'a>(&'a self, event: &'a r44::Event) -> Boxed<'a, r44::SaveEventStatus> {
        Box::pin(async move {
            let status = self.inner.save_event(event).await?;
            if status.is_success() && is_own_kind(event) {
                self.handoff.offer(event);
            }
            Ok(status)
        })
    }

    fn check_id<'a>(&'a self, event_id: &'a r44::EventId) -> Boxed<'a, r44::DatabaseEventStatus> {
        self.inner.check_id(event_id)
    }

    fn event_by_id<'a>(&'a self, event_id: &'a r44::EventId) -> Boxed<'a, Option<r44::Event>> {
        self.inner.event_by_id(event_id)
    }

    fn count(&self, filter: r44::Filter) -> Boxed<'_, usize> {
        self.inner.count(filter)
    }

    fn query(&self, filter: r44::Filter) -> Boxed<'_, r44::Events> {
        self.inner.query(filter)
    }

    fn negentropy_items(
        &self,
        filter: r44::Filter,
    ) -> Boxed<'_, Vec<(r44::EventId, r44::Timestamp)>> {
        self.inner.negentropy_items(filter)
    }

    fn delete(&self, filter: r44::Filter) -> Boxed<'_, ()> {
        self.inner.delete(filter)
    }

    fn wipe(&self) -> Boxed<'_, ()> {
        self.inner.wipe()
    }
}

/// Hands the queued reports, and the re-reads of what overflowed, to the
/// sync's `own_events`, waiting for room there (only this task waits, never
/// the relay). Ends when the sync drops its receiver.
pub(crate) async fn forward(
    handoff: Arc<Handoff>,
    mut queue: mpsc::Receiver<r44::Event>,
    database: Arc<dyn r44::NostrDatabase>,
    own_events: mpsc::Sender<Event>,
) {
    loop {
        let delivered = tokio::select! {
            biased;
            received = queue.recv() => match received {
                Some(event) => report(&event, &own_events).await,
                None => return,
            },
            () = own_events.closed() => false,
            () = handoff.lagged.notified() => match handoff.take_missed() {
                Some(missed) => match reread(missed, database.as_ref(), &own_events).await {
                    Ok(delivered) => delivered,
                    Err(error) => {
                        // Kept for the next try: a report is never lost.
                        warn!(%error, "re-reading overflowed reports failed; retrying");
                        handoff.restore_missed(missed);
                        tokio::time::sleep(REREAD_RETRY).await;
                        true
                    }
                },
                None => true,
            },
        };
        if !delivered {
            debug!("the sync stopped; the bridge stops reporting");
            return;
        }
    }
}

/// Reports one stored event; `false` once the sync stopped.
async fn report(event: &r44::Event, own_events: &mpsc::Sender<Event>) -> bool {
    match event_from_r44(event) {
        Ok(event) => own_events.send(event).await.is_ok(),
        Err(error) => {
            warn!(%error, id = %event.id, "stored event not reported to the sync");
            true
        }
    }
}

/// Re-reads the own kinds stored in `missed` and reports them; `Ok(false)`
/// once the sync stopped.
async fn reread(
    missed: Missed,
    database: &dyn r44::NostrDatabase,
    own_events: &mpsc::Sender<Event>,
) -> Result<bool, r44::DatabaseError> {
    let filter = r44::Filter::new()
        .kinds(OWN_KINDS.map(r44::Kind::from))
        .since(r44::Timestamp::from_secs(missed.since))
        .until(r44::Timestamp::from_secs(missed.until));
    let events = database.query(filter).await?;
    debug!(
        since = missed.since,
        until = missed.until,
        events = events.len(),
        "re-reading overflowed reports"
    );
    for event in events.iter() {
        if !report(event, own_events).await {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missed_window_takes_in_every_overflowed_second() {
        let window = Missed::widened(None, 50);
        assert_eq!(
            window,
            Missed {
                since: 50,
                until: 50
            }
        );
        let window = Missed::widened(Some(window), 10);
        let window = Missed::widened(Some(window), 70);
        let window = Missed::widened(Some(window), 60);
        assert_eq!(
            window,
            Missed {
                since: 10,
                until: 70
            }
        );
    }
}
