//! Publishing to the store relay on one connection, pipelined: up to
//! [`INGEST_WINDOW`] events are sent without waiting, each answered when its
//! `OK` comes (matched by id, in any order). Events are written in batches:
//! while the relay still has [`FLUSH_BELOW`] written events to answer, new
//! ones are held until [`FLUSH_AT`] of them go out in one write (one event
//! per write made a system call, and on loopback the relay's receiving side
//! too, for every event). The window adapts to the relay's write
//! limit: halved by a `rate-limited:` answer, grown by one per event stored.
//! The same event asked twice while in flight is sent once and both callers
//! get its answer. A connection that fails, closes, or leaves the oldest
//! event unanswered for the timeout is dropped: every event waiting on it is
//! answered with the failure (the engine retries), and the next event
//! reconnects. A relay that refuses an event for its size with a `NOTICE`
//! instead of an `OK` (nostr-rs-relay: `"event exceeded max size"`, and its
//! NIP-11 states no limit) has that refusal taken for the largest event in
//! flight ([`InFlight::largest`]): it is refused for good, not left to time
//! out with every event on the connection, for ever.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use grasp_sync_core::engine::{classify, Prefix};
use grasp_sync_core::relay_text::RelayText;
use grasp_sync_core::store::{IngestOutcome, StoreError};
use nostr::prelude::{EventId, RelayMessage, RelayUrl};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tracing::warn;

use super::query::connect;
use super::{Reply, Socket, INGEST_WINDOW};

/// An event to publish (its `EVENT` frame, serialized by the caller) and
/// where its answer goes.
#[derive(Debug)]
pub(super) struct Ingest {
    pub(super) id: EventId,
    pub(super) frame: String,
    pub(super) reply: Reply<IngestOutcome>,
}

/// How much one read of the socket may take: the relay sends only `OK`s
/// (about 100 bytes each) here, and tungstenite zeroes this much of its
/// buffer before every read (with its 128 KiB default that memset was 3 % of
/// a sidecar's CPU).
const ANSWERS_READ_BUFFER: usize = 8 * 1024;

/// An event sent and not answered yet: its frame's length and who waits.
#[derive(Debug)]
struct Waiting {
    frame_len: usize,
    replies: Vec<Reply<IngestOutcome>>,
}

/// The events sent and not answered yet.
#[derive(Debug, Default)]
struct InFlight {
    replies: HashMap<EventId, Waiting>,
    /// Send order, for the oldest deadline (answered ids are skipped).
    sent: VecDeque<(EventId, Instant)>,
}

impl InFlight {
    fn len(&self) -> usize {
        self.replies.len()
    }

    /// The unanswered event with the longest frame, and its length: the one a
    /// relay's size `NOTICE` is taken for. The frame the relay refused was
    /// over its limit, and this one is at least as long, so it is over it too
    /// (and if it is another one, that one's own `NOTICE` comes later and is
    /// taken for it).
    fn largest(&self) -> Option<(EventId, usize)> {
        self.replies
            .iter()
            .map(|(id, waiting)| (*id, waiting.frame_len))
            .max_by_key(|(id, len)| (*len, *id))
    }

    /// When the oldest unanswered event times out.
    fn deadline(&mut self, timeout: Duration) -> Option<Instant> {
        while let Some((id, _)) = self.sent.front() {
            if self.replies.contains_key(id) {
                break;
            }
            self.sent.pop_front();
        }
        self.sent.front().map(|(_, at)| *at + timeout)
    }

    fn answer(&mut self, id: &EventId, outcome: IngestOutcome) {
        let waiting = self.replies.remove(id);
        for reply in waiting.into_iter().flat_map(|waiting| waiting.replies) {
            let _ = reply.send(Ok(outcome.clone()));
        }
    }

    /// Answers every waiting event with `error`.
    fn fail_all(&mut self, error: &StoreError) {
        for (_, waiting) in self.replies.drain() {
            for reply in waiting.replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
        self.sent.clear();
    }
}

/// Written events the relay has not answered below which what is held is
/// written at once: the relay always has this many to work on.
const FLUSH_BELOW: usize = 32;
/// Held events written together however busy the relay is.
const FLUSH_AT: usize = 32;

/// Whether the `held` events (fed to the socket, not written yet) go out
/// now, with `written` events waiting for the relay's answer.
fn flush_now(written: usize, held: usize) -> bool {
    held > 0 && (written < FLUSH_BELOW || held >= FLUSH_AT)
}

/// Writes the held events if [`flush_now`] says so; the new count held.
async fn flush_if_due(
    ws: &mut Socket,
    in_flight: &InFlight,
    held: usize,
) -> Result<usize, StoreError> {
    if !flush_now(in_flight.len().saturating_sub(held), held) {
        return Ok(held);
    }
    ws.flush().await.map_err(StoreError::unavailable)?;
    Ok(0)
}

/// The ingest connection's task.
pub(super) async fn serve(relay: RelayUrl, timeout: Duration, mut ingests: mpsc::Receiver<Ingest>) {
    let mut socket: Option<Socket> = None;
    let mut in_flight = InFlight::default();
    let mut window = Window::default();
    // Events fed to the socket and not written yet (see `flush_now`).
    let mut held = 0;
    loop {
        let deadline = in_flight.deadline(timeout);
        tokio::select! {
            ingest = ingests.recv(), if in_flight.len() < window.size => {
                let Some(first) = ingest else {
                    break;
                };
                // The events already handed over go out together.
                let mut batch = vec![first];
                while in_flight.len() + batch.len() < window.size {
                    match ingests.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                if socket.is_none() {
                    socket = connect(&relay, timeout, ANSWERS_READ_BUFFER).await;
                    held = 0;
                }
                let Some(ws) = socket.as_mut() else {
                    let error = StoreError::unavailable("cannot connect to the store relay");
                    for Ingest { reply, .. } in batch {
                        let _ = reply.send(Err(error.clone()));
                    }
                    continue;
                };
                let fed = match feed_batch(ws, batch, &mut in_flight).await {
                    Ok(fed) => flush_if_due(ws, &in_flight, held + fed).await,
                    Err(error) => Err(error),
                };
                match fed {
                    Ok(now_held) => held = now_held,
                    Err(error) => {
                        in_flight.fail_all(&error);
                        socket = None;
                    }
                }
            }
            answer = next_answer(&mut socket), if in_flight.len() > 0 => {
                let answered = match answer {
                    Ok(Some(Answer::Ok(id, outcome))) => {
                        window.on_answer(&outcome);
                        in_flight.answer(&id, outcome);
                        Ok(())
                    }
                    Ok(Some(Answer::TooLarge(notice))) => {
                        refuse_largest(&mut in_flight, &relay, &notice);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(error) => Err(error),
                };
                // The relay is one answer further: the held events may be due.
                let flushed = match (answered, socket.as_mut()) {
                    (Ok(()), Some(ws)) => flush_if_due(ws, &in_flight, held).await,
                    (Ok(()), None) => Ok(0),
                    (Err(error), _) => Err(error),
                };
                match flushed {
                    Ok(now_held) => held = now_held,
                    Err(error) => {
                        in_flight.fail_all(&error);
                        socket = None;
                    }
                }
            }
            _ = sleep_until(deadline) => {
                in_flight.fail_all(&StoreError::TimedOut(timeout));
                socket = None;
            }
        }
    }
    // The store is gone: whatever still waits is answered.
    in_flight.fail_all(&StoreError::Stopped);
}

/// Feeds the batch's new events to the socket (not written yet: see
/// [`flush_now`]) and records them in flight; an event already in flight
/// only adds its caller to the waiting ones. How many were fed.
async fn feed_batch(
    ws: &mut Socket,
    batch: Vec<Ingest>,
    in_flight: &mut InFlight,
) -> Result<usize, StoreError> {
    let mut fed = 0;
    for Ingest { id, frame, reply } in batch {
        if let Some(waiting) = in_flight.replies.get_mut(&id) {
            waiting.replies.push(reply);
            continue;
        }
        let waiting = Waiting {
            frame_len: frame.len(),
            replies: vec![reply],
        };
        in_flight.replies.insert(id, waiting);
        in_flight.sent.push_back((id, Instant::now()));
        ws.feed(Message::Text(frame.into()))
            .await
            .map_err(StoreError::unavailable)?;
        fed += 1;
    }
    Ok(fed)
}

/// How many events may wait for their `OK` at once: halved when the relay
/// answers `rate-limited:` (it is writing slower than we send), grown by one
/// per event it takes, between 1 and [`INGEST_WINDOW`].
#[derive(Debug)]
struct Window {
    size: usize,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            size: INITIAL_WINDOW,
        }
    }
}

/// The window a new store starts with.
const INITIAL_WINDOW: usize = 64;

impl Window {
    fn on_answer(&mut self, outcome: &IngestOutcome) {
        match outcome {
            // The relay's own words (strfry's `ERROR: ` decoration, wording):
            // a rate limit narrows the window, whatever the refusal's kind.
            IngestOutcome::Rejected { reason, .. } if classify(reason).rate_limited => {
                self.size = (self.size / 2).max(1);
            }
            IngestOutcome::Stored | IngestOutcome::Duplicate | IngestOutcome::Held => {
                self.size = (self.size + 1).min(INGEST_WINDOW);
            }
            _ => {}
        }
    }
}

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What the relay answered on the ingest connection.
#[derive(Debug, PartialEq)]
enum Answer {
    /// An `OK` for an event.
    Ok(EventId, IngestOutcome),
    /// A `NOTICE` refusing a message for its size, which names no event.
    TooLarge(String),
}

/// Whether a `NOTICE` refuses a message for its size (nostr-rs-relay:
/// `"event exceeded max size"`).
fn is_size_notice(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    ["exceeded max size", "too large", "too big", "too long"]
        .iter()
        .any(|words| text.contains(words))
}

/// Answers the largest event in flight ([`InFlight::largest`]) with the
/// relay's size `notice`, refused for good.
fn refuse_largest(in_flight: &mut InFlight, relay: &RelayUrl, notice: &str) {
    let Some((id, frame_len)) = in_flight.largest() else {
        return;
    };
    let notice = RelayText::new(notice);
    warn!(%relay, %id, frame_len, %notice, "the store relay refused an event for its size by a NOTICE; taken for the largest event in flight");
    let reason = format!(
        "invalid: {notice} (the own relay's NOTICE, taken for the largest event in flight: \
         {frame_len} bytes)"
    );
    in_flight.answer(&id, IngestOutcome::refused_for_good(reason));
}

/// The next `OK` or size `NOTICE` on the connection (`None` for any other
/// message); pending for ever without a connection.
async fn next_answer(socket: &mut Option<Socket>) -> Result<Option<Answer>, StoreError> {
    let Some(ws) = socket.as_mut() else {
        return std::future::pending().await;
    };
    match ws.next().await {
        Some(Ok(Message::Text(text))) => Ok(match RelayMessage::from_json(text.as_str()) {
            Ok(RelayMessage::Ok {
                event_id,
                status,
                message,
            }) => Some(Answer::Ok(event_id, outcome(status, &message))),
            Ok(RelayMessage::Notice(message)) if is_size_notice(&message) => {
                Some(Answer::TooLarge(message.into_owned()))
            }
            _ => None,
        }),
        Some(Ok(Message::Close(_))) | None => {
            Err(StoreError::unavailable("store relay closed the connection"))
        }
        Some(Ok(_)) => Ok(None),
        Some(Err(error)) => Err(StoreError::unavailable(error)),
    }
}

/// What an `OK` says: stored, a duplicate, or refused with its reason and
/// how long for, read from its NIP-01 prefix (strfry's `ERROR: ` decoration
/// included) by [`IngestOutcome::rejected`].
fn outcome(status: bool, message: &str) -> IngestOutcome {
    match (status, classify(message).prefix == Prefix::Duplicate) {
        (true, false) => IngestOutcome::Stored,
        (_, true) => IngestOutcome::Duplicate,
        (false, false) => IngestOutcome::rejected(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_messages_map_to_outcomes() {
        assert_eq!(outcome(true, ""), IngestOutcome::Stored);
        assert_eq!(
            outcome(true, "duplicate: have it"),
            IngestOutcome::Duplicate
        );
        assert_eq!(
            outcome(false, "duplicate: have it"),
            IngestOutcome::Duplicate
        );
        assert_eq!(
            outcome(false, "ERROR: duplicate: have it"),
            IngestOutcome::Duplicate
        );
        assert_eq!(
            outcome(false, "blocked: no"),
            IngestOutcome::refused_for_good("blocked: no")
        );
        assert_eq!(
            outcome(false, "rate-limited: slow down"),
            IngestOutcome::refused_for_now("rate-limited: slow down")
        );
    }

    #[test]
    fn the_window_halves_on_rate_limits_and_grows_on_success() {
        let mut window = Window::default();
        let limited = IngestOutcome::rejected("rate-limited: slow down");
        window.on_answer(&limited);
        assert_eq!(window.size, INITIAL_WINDOW / 2);
        for _ in 0..10 {
            window.on_answer(&limited);
        }
        assert_eq!(window.size, 1);
        window.on_answer(&IngestOutcome::Stored);
        assert_eq!(window.size, 2);
        for _ in 0..2 * INGEST_WINDOW {
            window.on_answer(&IngestOutcome::Duplicate);
        }
        assert_eq!(window.size, INGEST_WINDOW);
        window.on_answer(&IngestOutcome::rejected("blocked: no"));
        assert_eq!(window.size, INGEST_WINDOW);
        // strfry's decorated form counts too.
        window.on_answer(&IngestOutcome::rejected("ERROR: rate-limited: too fast"));
        assert_eq!(window.size, INGEST_WINDOW / 2);
    }

    #[test]
    fn held_events_go_out_when_the_relay_runs_low_or_enough_are_held() {
        // Nothing held: nothing to write.
        assert!(!flush_now(0, 0));
        assert!(!flush_now(100, 0));
        // The relay has little to work on: at once.
        assert!(flush_now(0, 1));
        assert!(flush_now(FLUSH_BELOW - 1, 1));
        // Busy: held until a batch is full.
        assert!(!flush_now(FLUSH_BELOW, 1));
        assert!(!flush_now(500, FLUSH_AT - 1));
        assert!(flush_now(500, FLUSH_AT));
    }

    #[test]
    fn the_deadline_is_the_oldest_unanswered_event() {
        let mut in_flight = InFlight::default();
        let start = Instant::now();
        let (a, b) = (
            EventId::from_byte_array([0; 32]),
            EventId::from_byte_array([1; 32]),
        );
        for (id, offset) in [(a, 0), (b, 5)] {
            let (reply, _answer) = tokio::sync::oneshot::channel();
            let waiting = Waiting {
                frame_len: 100,
                replies: vec![reply],
            };
            in_flight.replies.insert(id, waiting);
            in_flight
                .sent
                .push_back((id, start + Duration::from_secs(offset)));
        }
        let timeout = Duration::from_secs(10);
        assert_eq!(in_flight.deadline(timeout), Some(start + timeout));
        in_flight.answer(&a, IngestOutcome::Stored);
        assert_eq!(
            in_flight.deadline(timeout),
            Some(start + Duration::from_secs(15))
        );
        in_flight.answer(&b, IngestOutcome::Stored);
        assert_eq!(in_flight.deadline(timeout), None);
    }

    #[test]
    fn a_size_notice_is_taken_for_the_largest_event_in_flight() {
        assert!(is_size_notice("event exceeded max size"));
        assert!(is_size_notice("ERROR: event too large"));
        assert!(!is_size_notice("rate limited"));
        assert!(!is_size_notice("could not parse command"));
        let relay = RelayUrl::parse("ws://127.0.0.1:7000").unwrap();
        let mut in_flight = InFlight::default();
        let mut answers = Vec::new();
        for (byte, frame_len) in [(0u8, 500), (1, 90_000), (2, 300)] {
            let id = EventId::from_byte_array([byte; 32]);
            let (reply, answer) = tokio::sync::oneshot::channel();
            let waiting = Waiting {
                frame_len,
                replies: vec![reply],
            };
            in_flight.replies.insert(id, waiting);
            in_flight.sent.push_back((id, Instant::now()));
            answers.push(answer);
        }
        refuse_largest(&mut in_flight, &relay, "event exceeded max size");
        assert_eq!(in_flight.len(), 2);
        let mut large = answers.remove(1);
        assert_eq!(
            large.try_recv().unwrap().unwrap(),
            IngestOutcome::refused_for_good(
                "invalid: event exceeded max size (the own relay's NOTICE, taken for the \
                 largest event in flight: 90000 bytes)"
            )
        );
        assert!(answers.iter_mut().all(|answer| answer.try_recv().is_err()));
    }
}
