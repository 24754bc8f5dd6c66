//! Trust: an event reaches the store only if it matches a filter of the
//! subscription it arrived on and its id and signature verify.
//!
//! A driver may verify events before they reach the engine (in parallel, off
//! the engine's thread): they arrive as [`VerifiedEvent`]s and are not
//! verified again. Events inside a plain `RelayMessage` are verified here.

use nostr::filter::MatchEventOptions;

use nostr::prelude::{Event, RelayUrl, SubscriptionId};
use tracing::{debug, warn};

use super::runtime::Sub;
use super::SyncEngine;
use crate::clock::Now;
use crate::verified::VerifiedEvent;

/// An EVENT as it reaches the engine: verified by the driver, or not yet.
#[derive(Debug)]
pub(super) enum Arrived {
    /// From a plain `RelayMessage`: verified here if it matches.
    Unchecked(Event),
    /// Verified by the driver.
    Verified(VerifiedEvent),
}

impl Arrived {
    fn event(&self) -> &Event {
        match self {
            Arrived::Unchecked(event) => event,
            Arrived::Verified(event) => event,
        }
    }
}

impl SyncEngine {
    /// Trust: store an event only if it matches a filter of its subscription
    /// and its id and signature verify.
    pub(super) fn on_event(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        arrived: Arrived,
    ) {
        let event = arrived.event();
        let Some(conn) = self.relays.conn_mut(relay) else {
            return;
        };
        if !conn.subs.contains_key(id) {
            // Sent before the relay saw our CLOSE of a consolidated live
            // subscription: still something we asked for.
            let matches = conn.closed_live.get(id).map(|filters| {
                filters
                    .iter()
                    .any(|filter| filter.match_event(event, MatchEventOptions::new()))
            });
            return match matches {
                Some(true) => self.store_verified(now, relay, arrived),
                Some(false) => self.stats.dropped_off_filter += 1,
                None => self.stats.dropped_unknown_subscription += 1,
            };
        }
        let Some(sub) = conn.subs.get_mut(id) else {
            return;
        };
        let options = MatchEventOptions::new();
        let matches = match &*sub {
            Sub::Live { filters, .. } => filters
                .iter()
                .any(|filter| filter.match_event(event, options)),
            Sub::Req { paging, .. } => paging.matches(event),
            Sub::Fetch { filter, .. } => filter.match_event(event, options),
            Sub::Poll { filters, .. } => filters
                .iter()
                .any(|filter| filter.match_event(event, options)),
            Sub::Negentropy { .. } => false,
        };
        if !matches {
            self.stats.dropped_off_filter += 1;
            debug!(%relay, id = %event.id, "dropped event outside the subscription's filters");
            return;
        }
        let Some(event) = self.verified(relay, arrived) else {
            return;
        };
        let Some(sub) = self
            .relays
            .conn_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        let batch = match sub {
            Sub::Req { batch, paging, .. } => {
                paging.on_event(event.id, event.created_at);
                Some(*batch)
            }
            Sub::Fetch { batch, missing, .. } => {
                missing.remove(&event.id);
                Some(*batch)
            }
            Sub::Poll {
                batch,
                pages,
                received,
                ..
            } => {
                for (page, seen) in pages.iter_mut().zip(received.iter_mut()) {
                    if page.matches(&event) {
                        page.on_event(event.id, event.created_at);
                        seen.push((event.id, event.created_at));
                    }
                }
                Some(*batch)
            }
            _ => None,
        };
        if let Some(batch) = batch {
            self.progress(now, relay, batch);
        }
        self.note_received(relay, event.id);
        if self.admit_ours(now, relay, &event) {
            self.store(now, relay, event, batch);
        }
    }

    /// The event verified (here, unless the driver did); counted and
    /// dropped if its id or signature does not verify.
    fn verified(&mut self, relay: &RelayUrl, arrived: Arrived) -> Option<VerifiedEvent> {
        let checked = match arrived {
            Arrived::Verified(event) => Ok(event),
            Arrived::Unchecked(event) => VerifiedEvent::verify(event),
        };
        match checked {
            Ok(event) => Some(event),
            Err(forged) => {
                self.forged(relay, &forged);
                None
            }
        }
    }

    /// Counts an event whose id or signature did not verify.
    pub(super) fn forged(&mut self, relay: &RelayUrl, forged: &crate::verified::Forged) {
        self.stats.dropped_forged += 1;
        warn!(%relay, id = %forged.id, "dropped event with a bad id or signature");
    }

    /// Stores an event that matched: only if its id and signature verify.
    fn store_verified(&mut self, now: Now, relay: &RelayUrl, arrived: Arrived) {
        if let Some(event) = self.verified(relay, arrived) {
            self.note_received(relay, event.id);
            if self.admit_ours(now, relay, &event) {
                self.store(now, relay, event, None);
            }
        }
    }
}
