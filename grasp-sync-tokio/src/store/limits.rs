//! What the store relay takes: the limits its NIP-11 document states on an
//! event (`limitation.max_message_length`, `max_event_tags`,
//! `max_content_length`), fetched before the first event is published and
//! again now and then, and the check of an event against them. An event
//! over a limit is refused for good without being sent: strfry drops the
//! connection without a word on a frame over its `max_message_length`, and
//! every event in flight on that connection would fail with it, be sent
//! again, and fail again, for ever.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nostr::prelude::{Event, RelayUrl};
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::nip11::{fetch_store_limits, Nip11Error, StoreLimits};

/// The longest wait for the store relay's NIP-11 document (the store's own
/// timeout when shorter): the first event waits for it.
const NIP11_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the document is fetched again after an answer (a relay's
/// limits change when it is reconfigured and restarted).
const REFRESH: Duration = Duration::from_secs(10 * 60);
/// How soon the document is asked again after the relay could not be
/// reached for it (the limits learned before are kept meanwhile).
const RETRY: Duration = Duration::from_secs(60);

/// The store relay's limits as last learned, shared by every clone of the
/// store.
#[derive(Debug)]
pub(super) struct OwnLimits {
    relay: RelayUrl,
    timeout: Duration,
    /// Done once the first fetch ended, one way or the other.
    first: OnceCell<()>,
    learned: Mutex<Learned>,
}

/// The limits learned and when they were last asked for.
#[derive(Debug, Default)]
struct Learned {
    limits: StoreLimits,
    /// When the last fetch ended.
    asked_at: Option<Instant>,
    /// The relay answered the last fetch (with a document or without).
    answered: bool,
    /// A fetch runs in the background.
    refreshing: bool,
}

impl OwnLimits {
    /// The limits of `relay`, not fetched yet; a fetch takes at most
    /// `timeout` ([`NIP11_TIMEOUT`] at the most).
    pub(super) fn new(relay: RelayUrl, timeout: Duration) -> Self {
        OwnLimits {
            relay,
            timeout: timeout.min(NIP11_TIMEOUT),
            first: OnceCell::new(),
            learned: Mutex::new(Learned::default()),
        }
    }

    /// The limits in effect: after the first fetch (awaited by whoever
    /// comes first; the others wait for it), and fetched again in the
    /// background once they are [`REFRESH`] old ([`RETRY`] after the relay
    /// could not be asked).
    pub(super) async fn current(self: &Arc<Self>) -> StoreLimits {
        self.first.get_or_init(|| self.fetch()).await;
        let (limits, due) = {
            let mut learned = self.lock();
            let wait = if learned.answered { REFRESH } else { RETRY };
            let due = !learned.refreshing && learned.asked_at.is_none_or(|at| at.elapsed() >= wait);
            learned.refreshing |= due;
            (learned.limits, due)
        };
        if due {
            let limits = Arc::clone(self);
            tokio::spawn(async move { limits.fetch().await });
        }
        limits
    }

    /// Fetches the document and keeps what it says. A relay that answered
    /// without one (or with something else) has no limits; one that could
    /// not be asked keeps those learned before.
    async fn fetch(&self) {
        let fetched = fetch_store_limits(&self.relay, self.timeout).await;
        let mut learned = self.lock();
        learned.asked_at = Some(Instant::now());
        learned.refreshing = false;
        let limits = match fetched {
            Ok(limits) => limits,
            Err(error @ (Nip11Error::Status(_) | Nip11Error::Document(_))) => {
                debug!(relay = %self.relay, %error, "store relay states no NIP-11 limits");
                StoreLimits::default()
            }
            Err(error) => {
                debug!(relay = %self.relay, %error, "store relay's NIP-11 limits not fetched; asking again later");
                learned.answered = false;
                return;
            }
        };
        learned.answered = true;
        if limits != learned.limits {
            info!(
                relay = %self.relay,
                max_message_length = ?limits.max_message_length,
                max_event_tags = ?limits.max_event_tags,
                max_content_length = ?limits.max_content_length,
                "store relay's NIP-11 limits: events over them are refused without being sent"
            );
            learned.limits = limits;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why the store relay would refuse `event`, whose `EVENT` frame is
/// `frame_len` bytes long, by its `limits`: an `invalid:` reason naming
/// the size and the limit, or `None` when it is within them.
pub(super) fn over_limits(limits: &StoreLimits, event: &Event, frame_len: usize) -> Option<String> {
    if let Some(limit) = limits.max_message_length.filter(|limit| frame_len > *limit) {
        return Some(format!(
            "invalid: event of {frame_len} bytes over the own relay's message limit of {limit} \
             bytes (NIP-11 max_message_length)"
        ));
    }
    let tags = event.tags.len();
    if let Some(limit) = limits.max_event_tags.filter(|limit| tags > *limit) {
        return Some(format!(
            "invalid: event with {tags} tags over the own relay's limit of {limit} tags \
             (NIP-11 max_event_tags)"
        ));
    }
    if let Some(limit) = limits.max_content_length {
        // Counting characters only when the bytes could be over.
        let characters = if event.content.len() > limit {
            event.content.chars().count()
        } else {
            0
        };
        if characters > limit {
            return Some(format!(
                "invalid: content of {characters} characters over the own relay's limit of \
                 {limit} (NIP-11 max_content_length)"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_sync_core::engine::event_frame;
    use grasp_sync_core::store::{IngestOutcome, Refusal};
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag};

    fn event(content: &str, tags: usize) -> Event {
        let tags = (0..tags).map(|n| {
            Tag::parse([format!("refs/tags/releases/stable/v{n}"), "0".repeat(40)]).expect("a tag")
        });
        EventBuilder::new(Kind::Custom(30618), content)
            .tags(tags)
            .finalize(&Keys::generate())
            .expect("signs")
    }

    #[test]
    fn an_event_over_a_stated_limit_is_refused_for_good_naming_size_and_limit() {
        let state = event("", 2_000);
        let frame = event_frame(&state).len();
        assert!(frame > 131_072, "a state of 2 000 refs: {frame} bytes");
        let strfry = StoreLimits {
            max_message_length: Some(131_072),
            ..StoreLimits::default()
        };
        let reason = over_limits(&strfry, &state, frame).expect("over strfry's frames");
        assert_eq!(
            reason,
            format!(
                "invalid: event of {frame} bytes over the own relay's message limit of 131072 \
                 bytes (NIP-11 max_message_length)"
            )
        );
        // A relay's refusal of this kind is for good.
        let IngestOutcome::Rejected { refusal, .. } = IngestOutcome::rejected(reason) else {
            panic!("a refusal");
        };
        assert_eq!(refusal, Refusal::ForGood);
        // At the limit exactly: sent.
        let at = StoreLimits {
            max_message_length: Some(frame),
            ..StoreLimits::default()
        };
        assert_eq!(over_limits(&at, &state, frame), None);
        assert_eq!(over_limits(&StoreLimits::default(), &state, frame), None);
    }

    #[test]
    fn tags_and_content_are_checked_when_the_relay_states_their_limits() {
        let limits = StoreLimits {
            max_event_tags: Some(100),
            max_content_length: Some(10),
            ..StoreLimits::default()
        };
        let many_tags = event("", 101);
        let reason = over_limits(&limits, &many_tags, 0).expect("over the tags");
        assert!(
            reason.starts_with("invalid: event with 101 tags"),
            "{reason}"
        );
        assert_eq!(over_limits(&limits, &event("", 100), 0), None);
        // Ten characters of two bytes each: within the limit of ten.
        assert_eq!(over_limits(&limits, &event(&"é".repeat(10), 0), 0), None);
        let reason = over_limits(&limits, &event(&"é".repeat(11), 0), 0).expect("over");
        assert!(
            reason.starts_with("invalid: content of 11 characters"),
            "{reason}"
        );
    }
}
