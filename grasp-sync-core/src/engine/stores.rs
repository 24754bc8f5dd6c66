//! Store outcomes: every verified event handed to the store is tracked until
//! the store says what it did with it. A batch confirms only when all of its
//! events are stored (or held); a store that refuses for now
//! ([`Refusal::ForNow`]), fails or does not answer gets the event again, in
//! order, with backoff; a refusal for good ([`Refusal::ForGood`]) is
//! remembered so a re-sync does not download the event again, and so is an
//! event the store holds outside what it serves ([`IngestOutcome::Held`]).
//! Events reach the store in dependency order ([`super::store_order`]): one
//! whose announcement or root is on its way waits (parked) for its answer.

use crate::health::Retry;
use std::collections::{HashMap, VecDeque};

use nostr::prelude::{Event, EventId, Filter, RelayUrl, Timestamp};
use tracing::{debug, warn};

use super::store_order::StoreOrder;
use super::{Command, EngineConfig};
use crate::clock::{Instant, Now};
use crate::model::BatchId;
use crate::nip34::is_root_kind;
use crate::recent::RecentIds;
use crate::screen::event_size;
use crate::store::{IngestOutcome, Refusal, StoreError, StoreRefusal};
use crate::verified::VerifiedEvent;

/// What the engine makes of one store answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreVerdict {
    /// Newly stored.
    Stored,
    /// The store already had it.
    Duplicate,
    /// The store holds it outside what it serves until its git data
    /// arrives: stored for the sync's purposes (its batch confirms, it is
    /// not fetched again, negentropy lists it as present).
    Held,
    /// Refused for now ([`Refusal::ForNow`], a failure): offered again
    /// after a backoff, for as long as it takes.
    Retry(String),
    /// Refused without saying for how long ([`Refusal::Unclear`]): offered
    /// again a few times
    /// ([`Timeouts::store_attempts`](super::Timeouts::store_attempts)),
    /// then taken as refused for good.
    Unclear(String),
    /// Refused for good ([`Refusal::ForGood`]): remembered, not downloaded
    /// again.
    Refused(String),
}

impl StoreVerdict {
    /// Reads a store's answer: a refusal by its [`Refusal`] (never its
    /// text: a store that relays a relay's `OK` reads the text once, in
    /// [`IngestOutcome::rejected`]); a backend failure is for now.
    pub fn of(result: &Result<IngestOutcome, StoreError>) -> StoreVerdict {
        match result {
            Ok(IngestOutcome::Stored) => StoreVerdict::Stored,
            Ok(IngestOutcome::Duplicate) => StoreVerdict::Duplicate,
            Ok(IngestOutcome::Held) => StoreVerdict::Held,
            Ok(IngestOutcome::Rejected { reason, refusal }) => match refusal {
                Refusal::ForNow => StoreVerdict::Retry(reason.clone()),
                Refusal::ForGood => StoreVerdict::Refused(reason.clone()),
                Refusal::Unclear => StoreVerdict::Unclear(reason.clone()),
            },
            Err(error) => StoreVerdict::Retry(error.to_string()),
        }
    }
}

/// An event handed to the store and not answered for yet.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The event.
    pub(crate) event: VerifiedEvent,
    /// The relay that sent it first.
    pub(crate) relay: RelayUrl,
    /// Batches (of their relays) that confirm only once it is stored.
    pub(crate) batches: Vec<(RelayUrl, BatchId)>,
    /// Where it is: with the store, waiting for a retry, or parked.
    stage: Stage,
    /// Unclear refusals so far.
    unclear: u32,
}

/// Where an event handed over is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Sent to the store: its answer is awaited.
    Sent,
    /// Refused for now: waiting in the retry queue.
    Retrying,
    /// Not sent yet: what it needs goes to the store first
    /// ([`StoreOrder`]).
    Parked,
}

/// Every event between `Command::Store` and the store's answer.
#[derive(Debug, Default)]
pub(crate) struct StoreTracker {
    in_flight: HashMap<EventId, InFlight>,
    /// The size of the events in `in_flight` ([`event_size`]).
    in_flight_bytes: usize,
    /// Events refused for now, in the order they were first stored.
    retry: VecDeque<EventId>,
    retry_at: Option<Instant>,
    /// The store's refusals for now in a row and their backoff
    /// ([`HealthConfig::store_backoff`](crate::health::HealthConfig::store_backoff));
    /// `None` once it takes or settles an event.
    refusals: Option<Retry>,
    /// The store's last sign of life (an answer, or the first event handed
    /// to an idle store): with events waiting and no answer for the store
    /// timeout after it, the store is taken for stalled.
    alive_at: Option<Instant>,
    /// The last event refused for good, for the status.
    last_refusal: Option<StoreRefusal>,
    /// Refused for good, stripped of their content, to answer negentropy.
    refused: HashMap<EventId, Event>,
    /// `refused` in the order remembered, oldest first.
    refused_order: VecDeque<EventId>,
    /// Held by the store outside what it serves ([`IngestOutcome::Held`]),
    /// stripped of their content like the refused ([`refused_record`]), to
    /// answer negentropy and not hand them over again until the host drops
    /// them ([`StoreTracker::forget_held`]).
    held: HashMap<EventId, Event>,
    /// `held` in the order remembered, oldest first.
    held_order: VecDeque<EventId>,
    /// Stored (or held already) lately: not handed to the store again.
    /// Forgotten at the daily re-sync, which compares with the store itself.
    stored_lately: RecentIds,
    /// Root events the store took as new lately: their replies are new to
    /// us too, so they are fetched by REQ without reconciling first.
    fresh_roots: RecentIds,
    /// Whether the store was falling behind when last asked
    /// ([`StoreTracker::pace_changed`]).
    fell_behind: bool,
    /// What is on its way to the store and what waits for it.
    order: StoreOrder,
}

impl StoreTracker {
    /// Events waiting for the store's answer or a retry.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Events waiting for a retry.
    pub(crate) fn retrying(&self) -> usize {
        self.retry.len()
    }

    /// Events parked until what they need reaches the store.
    pub(crate) fn parked(&self) -> usize {
        self.order.parked()
    }

    /// Events sent whose answer is awaited (not parked, not waiting for a
    /// retry).
    fn awaiting_answer(&self) -> usize {
        self.in_flight
            .len()
            .saturating_sub(self.retry.len() + self.order.parked())
    }

    /// The last event the store refused for good (its reason clipped).
    pub(crate) fn last_refusal(&self) -> Option<&StoreRefusal> {
        self.last_refusal.as_ref()
    }

    /// `true` if `id` was stored (or held already) lately: not handed to
    /// the store again.
    pub(crate) fn stored_lately(&self, id: &EventId) -> bool {
        self.stored_lately.contains(id)
    }

    /// Marks `id` stored lately, as a store answer would (tests).
    #[cfg(test)]
    pub(crate) fn note_stored_lately(&mut self, id: EventId) {
        self.stored_lately.insert(id, ());
    }

    /// `true` if `id` is a root event the store took as new lately; it is
    /// taken (its replies are fetched once).
    pub(crate) fn take_fresh_root(&mut self, id: &EventId) -> bool {
        self.fresh_roots.take(id).is_some()
    }

    /// Forgets what was stored lately and the fresh root events: the daily
    /// re-sync compares with the store itself.
    pub(crate) fn forget_lately(&mut self) {
        self.stored_lately.clear();
        self.fresh_roots.clear();
    }

    /// Items matching `filter` of the events the store does not list but
    /// that count as present for negentropy: those it refused for good
    /// (not downloaded again) and those it holds outside what it serves
    /// ([`IngestOutcome::Held`]).
    pub(crate) fn unlisted_items(&self, filter: &Filter) -> Vec<(EventId, Timestamp)> {
        (self.refused.values())
            .chain(self.held.values())
            .filter(|event| crate::filters::matches(filter, event))
            .map(|event| (event.id, event.created_at))
            .collect()
    }

    /// The next store deadline: a retry, or the store's silence reaching the
    /// timeout while events wait for its answer.
    /// A parked event reaching its wait limit (the same timeout) is one too.
    pub(crate) fn next_deadline(&self, timeout: std::time::Duration) -> Option<Instant> {
        let waiting = self.awaiting_answer() > 0;
        let stalled = self.alive_at.filter(|_| waiting).map(|at| at + timeout);
        let parked = self.order.next_deadline(timeout);
        [self.retry_at, stalled, parked].into_iter().flatten().min()
    }
}

impl StoreTracker {
    /// `false` while more than
    /// [`Caps::max_unconfirmed_stores`](super::Caps::max_unconfirmed_stores)
    /// events, or more than
    /// [`Caps::max_unconfirmed_store_bytes`](super::Caps::max_unconfirmed_store_bytes)
    /// bytes of events, wait for the store: new historic jobs and next pages
    /// wait (backpressure).
    pub(crate) fn keeps_up(&self, config: &EngineConfig) -> bool {
        self.in_flight.len() < config.caps.max_unconfirmed_stores
            && self.in_flight_bytes < config.caps.max_unconfirmed_store_bytes
    }

    /// `true` once each time the store starts falling behind or catches up
    /// again ([`StoreTracker::keeps_up`] changed since last asked): every
    /// relay's work may start or wait.
    pub(crate) fn pace_changed(&mut self, config: &EngineConfig) -> bool {
        let fell_behind = !self.keeps_up(config);
        std::mem::replace(&mut self.fell_behind, fell_behind) != fell_behind
    }

    /// What becomes of the verified event `id` about to be handed to the
    /// store.
    pub(crate) fn handover(&self, id: &EventId) -> Handover {
        if self.refused.contains_key(id) {
            Handover::Refused
        } else if self.stored_lately.contains(id) || self.held.contains_key(id) {
            Handover::StoredLately
        } else if self.in_flight.contains_key(id) {
            Handover::OnItsWay
        } else {
            Handover::New
        }
    }

    /// Tracks `event`, from `relay`, handed to the store at `now` (its
    /// [`Handover`] was `New`); `batch` confirms only once it is stored.
    /// `batch_running`: the batch's jobs still run (it may still bring what
    /// the event needs); `known`: the engine knows an event stored (a root
    /// event it plans). Answers the command sending it to the store, or
    /// `None` when it waits for what it needs ([`StoreOrder::arrive`]).
    pub(crate) fn hand_over(
        &mut self,
        event: VerifiedEvent,
        relay: &RelayUrl,
        batch: Option<BatchId>,
        batch_running: bool,
        known: impl Fn(&EventId) -> bool,
        now: Instant,
    ) -> Option<Command> {
        let stored = |id: &EventId| self.stored_lately.contains(id) || known(id);
        let parked = self.order.arrive(
            now,
            event.event(),
            batch.map(|batch| (relay, batch)),
            batch_running,
            stored,
        );
        if !parked && self.awaiting_answer() == 0 {
            // The store had nothing to answer: its silence counts from now.
            self.alive_at = Some(now);
        }
        self.in_flight_bytes += event_size(event.event());
        let command = (!parked).then(|| Command::Store {
            relay: relay.clone(),
            event: event.clone(),
        });
        self.in_flight.insert(
            event.id,
            InFlight {
                event,
                relay: relay.clone(),
                batches: batch
                    .map(|batch| (relay.clone(), batch))
                    .into_iter()
                    .collect(),
                stage: if parked { Stage::Parked } else { Stage::Sent },
                unclear: 0,
            },
        );
        command
    }

    /// The parked events free to go at `now` ([`StoreOrder::release`]:
    /// `running` says whether a relay's batch still runs), as the commands
    /// sending them to the store, in the order they came.
    pub(crate) fn release_parked(
        &mut self,
        now: Instant,
        running: impl Fn(&RelayUrl, BatchId) -> bool,
        known: impl Fn(&EventId) -> bool,
        config: &EngineConfig,
    ) -> Vec<Command> {
        if self.order.parked() == 0 {
            return Vec::new();
        }
        let store_behind = !self.keeps_up(config);
        let stored_lately = &self.stored_lately;
        let stored = |id: &EventId| stored_lately.contains(id) || known(id);
        // A parked event waits for what it needs at most the store timeout.
        let max_wait = config.timeouts.store_timeout;
        let released = self
            .order
            .release(now, max_wait, running, store_behind, stored);
        if !released.is_empty() && self.awaiting_answer() == released.len() {
            // Nothing else was awaited: the store's silence counts from now.
            self.alive_at = Some(now);
        }
        released.iter().filter_map(|id| self.send(id)).collect()
    }

    /// `event` is in the store (the own relay serves it, or the host holds
    /// it): what waits for its announcement may go.
    pub(crate) fn note_in_store(&mut self, event: &Event) {
        self.order.in_store(event);
    }

    /// If `id` is on its way to the store, `batch` of `relay` waits for its
    /// answer too: `None` if it is not on its way, `Some(true)` if `batch`
    /// starts waiting now (it counts one more store), `Some(false)` if it
    /// waited already.
    pub(crate) fn add_waiter(
        &mut self,
        id: &EventId,
        relay: &RelayUrl,
        batch: BatchId,
    ) -> Option<bool> {
        let waiting = self.in_flight.get_mut(id)?;
        let waits = (relay.clone(), batch);
        if waiting.batches.contains(&waits) {
            return Some(false);
        }
        waiting.batches.push(waits);
        if waiting.stage == Stage::Parked {
            // Its first batch must not hold this one back.
            self.order.awaited_elsewhere(id);
        }
        Some(true)
    }

    /// The store's answer `verdict` for the event `id`, at `now`: an event
    /// refused for now waits for a retry (one round of retries per backoff
    /// step, however many events the store refused in it); one refused with
    /// an unclear reason is retried a few times
    /// ([`Timeouts::store_attempts`](super::Timeouts::store_attempts)),
    /// then refused for good; one refused for good is remembered (without
    /// its content, [`Caps::refused_memory`](super::Caps::refused_memory)
    /// at most); a stored one is stored lately (and a root event fresh).
    /// Answers what became of the event ([`Answered`]): settled with its
    /// final verdict (stored, a duplicate, held, or refused for good) for
    /// its batches to count, waiting for a retry, or not awaited; the
    /// engine counts each.
    pub(crate) fn answer(
        &mut self,
        now: Now,
        id: &EventId,
        verdict: StoreVerdict,
        config: &EngineConfig,
    ) -> Answered {
        let Some(waiting) = self.in_flight.get_mut(id) else {
            debug!(%id, "store answer for an event not waiting (already settled)");
            return Answered::NotAwaited;
        };
        if waiting.stage != Stage::Sent {
            // A late answer to an event already queued for a retry (or one
            // never sent: it is parked).
            return Answered::NotAwaited;
        }
        let verdict = match verdict {
            StoreVerdict::Unclear(reason) => {
                waiting.unclear = waiting.unclear.saturating_add(1);
                if waiting.unclear >= config.timeouts.store_attempts {
                    StoreVerdict::Refused(reason)
                } else {
                    StoreVerdict::Retry(reason)
                }
            }
            verdict => verdict,
        };
        match verdict {
            StoreVerdict::Retry(reason) => {
                waiting.stage = Stage::Retrying;
                self.retry.push_back(*id);
                if self.retry_at.is_none() {
                    let backoff = config.health.store_backoff;
                    let delay = Retry::fail_in(&mut self.refusals, backoff);
                    debug!(%id, reason, ?delay, "store refused for now; retrying");
                    self.retry_at = Some(now.instant + delay);
                }
                Answered::Retrying
            }
            StoreVerdict::Refused(reason) | StoreVerdict::Unclear(reason) => {
                self.refusals = None;
                let Some(done) = self.take_in_flight(id) else {
                    return Answered::NotAwaited;
                };
                warn!(id = %done.event.id, kind = done.event.kind.as_u16(), relay = %done.relay, reason, "store refused event; not downloading it again");
                self.last_refusal = Some(StoreRefusal::new(
                    &done.event,
                    &done.relay,
                    &reason,
                    now.unix,
                ));
                self.remember_refused(&done.event, config.caps.refused_memory);
                Answered::Settled(done, StoreVerdict::Refused(reason))
            }
            StoreVerdict::Held => {
                self.refusals = None;
                let Some(done) = self.take_in_flight(id) else {
                    return Answered::NotAwaited;
                };
                self.remember_held(&done.event, config.caps.refused_memory);
                Answered::Settled(done, StoreVerdict::Held)
            }
            StoreVerdict::Stored | StoreVerdict::Duplicate => {
                self.refusals = None;
                self.stored_lately.insert(*id, ());
                let Some(done) = self.take_in_flight(id) else {
                    return Answered::NotAwaited;
                };
                if verdict == StoreVerdict::Stored && is_root_kind(done.event.kind) {
                    self.fresh_roots.insert(*id, ());
                }
                Answered::Settled(done, verdict)
            }
        }
    }

    /// Takes `id` off the events waiting for the store, with its bytes:
    /// settled, it no longer holds back what needs it.
    fn take_in_flight(&mut self, id: &EventId) -> Option<InFlight> {
        let done = self.in_flight.remove(id)?;
        self.in_flight_bytes = self
            .in_flight_bytes
            .saturating_sub(event_size(done.event.event()));
        self.order.settled(done.event.event());
        Some(done)
    }

    /// Keeps what recognises a refused event ([`refused_record`]: no
    /// content, only the tags the sync filters read), forgetting the oldest
    /// beyond `memory`.
    pub(crate) fn remember_refused(&mut self, event: &Event, memory: usize) {
        let stripped = refused_record(event);
        if self.refused.insert(event.id, stripped).is_none() {
            self.refused_order.push_back(event.id);
        }
        while self.refused.len() > memory {
            let Some(oldest) = self.refused_order.pop_front() else {
                break;
            };
            self.refused.remove(&oldest);
        }
    }

    /// Keeps the record of an event the store holds ([`refused_record`]),
    /// forgetting the oldest beyond `memory`.
    fn remember_held(&mut self, event: &Event, memory: usize) {
        if self.held.insert(event.id, refused_record(event)).is_none() {
            self.held_order.push_back(event.id);
        }
        while self.held.len() > memory {
            let Some(oldest) = self.held_order.pop_front() else {
                break;
            };
            self.held.remove(&oldest);
        }
    }

    /// Forgets the held events `ids` (the host dropped them without their
    /// data), so a later sync fetches them again; returns how many were
    /// remembered.
    pub(crate) fn forget_held(&mut self, ids: impl IntoIterator<Item = EventId>) -> usize {
        let mut forgotten = 0;
        for id in ids {
            if self.held.remove(&id).is_some() {
                forgotten += 1;
            }
            self.stored_lately.take(&id);
        }
        if forgotten > 0 {
            let held = &self.held;
            self.held_order.retain(|id| held.contains_key(id));
        }
        forgotten
    }

    /// Held events remembered.
    pub(crate) fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Refused events remembered.
    pub(crate) fn refused_count(&self) -> usize {
        self.refused.len()
    }

    /// Bytes of the refused events remembered (their records' size as
    /// JSON, [`crate::screen::event_size`]).
    pub(crate) fn refused_bytes(&self) -> usize {
        self.refused.values().map(crate::screen::event_size).sum()
    }

    /// Forgets the refused events `forget` picks (they became ours), so the
    /// next sync downloads them again.
    pub(crate) fn forget_refused(&mut self, forget: impl Fn(&Event) -> bool) {
        self.refused.retain(|_, event| !forget(event));
        let refused = &self.refused;
        self.refused_order.retain(|id| refused.contains_key(id));
    }

    /// The events to offer the store again at `now`: those refused for now,
    /// in order, once their backoff is over; and, when the store has been
    /// silent for `timeout` with events waiting, those too (a store that is
    /// merely busy keeps answering and is left alone) — the second list.
    pub(crate) fn resends_due(
        &mut self,
        now: Instant,
        timeout: std::time::Duration,
    ) -> (Vec<Command>, Vec<Command>) {
        let mut retried = Vec::new();
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            let ids: Vec<EventId> = self.retry.drain(..).collect();
            if !ids.is_empty() {
                // The store's silence about them counts from their resending.
                self.alive_at = Some(now);
            }
            retried = ids.iter().filter_map(|id| self.send(id)).collect();
        }
        let waiting = self.awaiting_answer() > 0;
        let stalled = waiting && self.alive_at.is_some_and(|at| at + timeout <= now);
        let mut silent = Vec::new();
        if stalled {
            self.alive_at = Some(now);
            let waiting: Vec<EventId> = self
                .in_flight
                .iter()
                .filter(|(_, waiting)| waiting.stage == Stage::Sent)
                .map(|(id, _)| *id)
                .collect();
            silent = waiting.iter().filter_map(|id| self.send(id)).collect();
        }
        (retried, silent)
    }

    /// The store command offering the event `id` (again, or for the first
    /// time once released from parking).
    fn send(&mut self, id: &EventId) -> Option<Command> {
        let waiting = self.in_flight.get_mut(id)?;
        waiting.stage = Stage::Sent;
        Some(Command::Store {
            relay: waiting.relay.clone(),
            event: waiting.event.clone(),
        })
    }

    /// The store answered (or was handed an event) at `now`.
    pub(crate) fn alive(&mut self, now: Instant) {
        self.alive_at = Some(now);
    }
}

/// What a store answer did to the event it answers
/// ([`StoreTracker::answer`]).
#[derive(Debug)]
pub(crate) enum Answered {
    /// Not awaited: already settled, or a late answer to an event queued
    /// for a retry (an input ignored).
    NotAwaited,
    /// Refused for now: queued for a retry.
    Retrying,
    /// Settled: the event, with the final verdict (stored, a duplicate,
    /// held, or refused for good), for its batches to count.
    Settled(InFlight, StoreVerdict),
}

/// What becomes of a verified event about to be handed to the store
/// ([`StoreTracker::handover`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handover {
    /// Refused for good before: not offered again.
    Refused,
    /// Stored (or held already) lately.
    StoredLately,
    /// On its way to the store already: its answer counts for one more batch.
    OnItsWay,
    /// New: handed to the store.
    New,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(reason: &str) -> StoreVerdict {
        StoreVerdict::of(&Ok(IngestOutcome::rejected(reason)))
    }

    #[test]
    fn large_events_waiting_for_the_store_hold_back_new_work_by_their_bytes() {
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind};
        let mut config = EngineConfig::default();
        config.caps.max_unconfirmed_store_bytes = 100_000;
        let relay = RelayUrl::parse("wss://relay.example.com").expect("url");
        let keys = Keys::generate();
        let events: Vec<VerifiedEvent> = (0..3)
            .map(|n| {
                let event =
                    EventBuilder::new(Kind::Custom(1621), format!("{n}{}", "x".repeat(40_000)))
                        .finalize(&keys)
                        .expect("signs");
                VerifiedEvent::verify(event).expect("valid")
            })
            .collect();
        let first = events[0].id;
        let mut tracker = StoreTracker::default();
        let now = Instant::ZERO;
        for event in events {
            assert!(tracker.keeps_up(&config), "room before 100 000 bytes");
            tracker.hand_over(event, &relay, None, false, |_| false, now);
        }
        assert_eq!(tracker.in_flight(), 3, "far below the count cap");
        assert!(!tracker.keeps_up(&config), "3 × 40 kB wait: past the bytes");
        let settled = tracker.answer(
            Now::new(now, Timestamp::from_secs(0)),
            &first,
            StoreVerdict::Stored,
            &config,
        );
        assert!(matches!(settled, Answered::Settled(..)));
        assert!(tracker.keeps_up(&config), "one stored gives its bytes back");
    }

    #[test]
    fn the_last_refusal_for_good_is_kept_in_one_line_naming_the_event_relay_and_reason() {
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind};
        let config = EngineConfig::default();
        let relay = RelayUrl::parse("wss://relay.example.com").expect("url");
        let keys = Keys::generate();
        let sign = |kind: u16, content: &str| {
            let event = EventBuilder::new(Kind::Custom(kind), content)
                .finalize(&keys)
                .expect("signs");
            VerifiedEvent::verify(event).expect("valid")
        };
        let (note, state) = (sign(1621, "an issue"), sign(30618, ""));
        let (note_id, state_id) = (note.id, state.id);
        let mut tracker = StoreTracker::default();
        let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_700_000_000));
        tracker.hand_over(note, &relay, None, false, |_| false, now.instant);
        tracker.hand_over(state, &relay, None, false, |_| false, now.instant);
        let retrying = tracker.answer(now, &note_id, rejected("rate-limited: slow"), &config);
        assert!(matches!(retrying, Answered::Retrying));
        assert_eq!(
            tracker.last_refusal(),
            None,
            "a refusal for now is no refusal"
        );
        // A relay's reason with a line break and 2 000 bytes more: one bounded line.
        let reason = format!("invalid: too large\n{}", "x".repeat(2_000));
        let settled = tracker.answer(now, &state_id, rejected(&reason), &config);
        assert!(matches!(
            settled,
            Answered::Settled(_, StoreVerdict::Refused(_))
        ));
        let last = tracker.last_refusal().expect("kept");
        assert_eq!((last.kind, last.id), (Kind::Custom(30618), state_id));
        assert_eq!(last.at, now.unix);
        let line = last.to_string();
        assert!(
            line.starts_with(&format!(
                "kind 30618 {state_id} from wss://relay.example.com: invalid: too large"
            )),
            "{line}"
        );
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(line.len() < 700, "bounded: {} bytes", line.len());
    }

    #[test]
    fn a_refusal_is_read_by_its_type_never_its_text() {
        let typed = |reason: &str, refusal| {
            StoreVerdict::of(&Ok(IngestOutcome::Rejected {
                reason: reason.into(),
                refusal,
            }))
        };
        assert_eq!(
            typed("blocked: later", Refusal::ForNow),
            StoreVerdict::Retry("blocked: later".into())
        );
        assert_eq!(
            typed("rate-limited: never", Refusal::ForGood),
            StoreVerdict::Refused("rate-limited: never".into())
        );
        assert_eq!(
            typed("invalid: who knows", Refusal::Unclear),
            StoreVerdict::Unclear("invalid: who knows".into())
        );
        assert_eq!(
            StoreVerdict::of(&Ok(IngestOutcome::Held)),
            StoreVerdict::Held
        );
    }

    #[test]
    fn store_answers_are_read_as_transient_permanent_or_unclear() {
        assert_eq!(
            StoreVerdict::of(&Ok(IngestOutcome::Stored)),
            StoreVerdict::Stored
        );
        assert_eq!(
            StoreVerdict::of(&Ok(IngestOutcome::Duplicate)),
            StoreVerdict::Duplicate
        );
        for transient in [
            "rate-limited: slow down",
            "error: disk full",
            "ERROR: error: busy",
        ] {
            assert!(
                matches!(rejected(transient), StoreVerdict::Retry(_)),
                "{transient}"
            );
        }
        assert!(matches!(
            StoreVerdict::of(&Err(StoreError::TimedOut(std::time::Duration::from_secs(
                10
            )))),
            StoreVerdict::Retry(_)
        ));
        for permanent in [
            "blocked: not on the allow list",
            "invalid: bad signature",
            "pow: difficulty 20 required",
            "restricted: members only",
            "mute: muted",
            "ERROR: blocked: too old",
        ] {
            assert!(
                matches!(rejected(permanent), StoreVerdict::Refused(_)),
                "{permanent}"
            );
        }
        assert_eq!(rejected("duplicate: have it"), StoreVerdict::Duplicate);
        for unclear in ["auth-required: log in", "no thanks", ""] {
            assert!(
                matches!(rejected(unclear), StoreVerdict::Unclear(_)),
                "{unclear:?}"
            );
        }
    }
}

/// Tags of a refused event kept in its record, at most: the first of those
/// the sync filters read (`d`, [`crate::filters::REPO_TAGS`],
/// [`crate::filters::ROOT_EVENT_TAGS`]); no content is kept.
pub const MAX_REFUSED_TAGS: usize = 4;

/// Longest tag value kept in a refused event's record (an `a` tag of the
/// longest identifier fits).
const MAX_REFUSED_TAG_VALUE: usize = crate::nip34::MAX_IDENTIFIER_LEN + 128;

/// What is remembered of an event refused for good: its id, author, time,
/// kind and signature, no content, and of its tags only the first
/// [`MAX_REFUSED_TAGS`] that a sync filter reads (`d`, and the repository
/// and root event tags, [`crate::filters::REPO_TAGS`],
/// [`crate::filters::ROOT_EVENT_TAGS`]) with values of bounded length, so
/// a record is small whatever the event was. A refused event whose record
/// lost a tag a filter needs is only downloaded once more, and recognised
/// by its id then.
pub(crate) fn refused_record(event: &Event) -> Event {
    use nostr::prelude::{SingleLetterTag, Tags};
    let read_by_filters = |tag: &nostr::prelude::Tag| {
        tag.single_letter_tag()
            .is_some_and(|letter: SingleLetterTag| {
                letter == SingleLetterTag::LOWERCASE_D
                    || crate::filters::REPO_TAGS.contains(&letter)
                    || crate::filters::ROOT_EVENT_TAGS.contains(&letter)
            })
            && tag
                .as_slice()
                .iter()
                .all(|value| value.len() <= MAX_REFUSED_TAG_VALUE)
    };
    let tags: Vec<nostr::prelude::Tag> = event
        .tags
        .iter()
        .filter(|tag| read_by_filters(tag))
        .take(MAX_REFUSED_TAGS)
        .map(|tag| {
            // The letter and its value: markers and hints are not read.
            let kept: Vec<String> = tag.as_slice().iter().take(2).cloned().collect();
            nostr::prelude::Tag::parse(kept).unwrap_or_else(|_| tag.clone())
        })
        .collect();
    Event::new(
        event.id,
        event.pubkey,
        event.created_at,
        event.kind,
        Tags::from_list(tags),
        String::new(),
        event.sig,
    )
}

#[cfg(test)]
mod refused_tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag};

    #[test]
    fn a_refused_record_keeps_no_content_and_only_the_filters_tags() {
        let tags = (0..3000)
            .map(|n| Tag::hashtag(format!("t{n}")))
            .chain([Tag::identifier("repo")])
            .chain((0..10).map(|n| Tag::parse(["a", &format!("30617:x:{n}")]).expect("tag")));
        let event = EventBuilder::new(Kind::Custom(1617), "x".repeat(60_000))
            .tags(tags)
            .finalize(&Keys::generate())
            .expect("signs");
        let record = refused_record(&event);
        assert!(record.content.is_empty());
        assert_eq!(record.tags.len(), MAX_REFUSED_TAGS);
        assert_eq!(record.tags.identifier().as_deref(), Some("repo"));
        assert!(crate::screen::event_size(&record) < 1_000);
        assert_eq!((record.id, record.kind), (event.id, event.kind));
    }
}
