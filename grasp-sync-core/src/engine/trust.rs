//! Trust: an event reaches the store only if it matches a filter of the
//! subscription it arrived on and its id and signature verify.

use nostr::filter::MatchEventOptions;

use nostr::prelude::{Event, RelayUrl, SubscriptionId};
use tracing::{debug, warn};

use super::runtime::Sub;
use super::SyncEngine;
use crate::clock::Now;

impl SyncEngine {
    /// Trust: store an event only if it matches a filter of its subscription
    /// and its id and signature verify.
    pub(super) fn on_event(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        id: &SubscriptionId,
        event: Event,
    ) {
        let Some(conn) = self.conns.get_mut(relay) else {
            return;
        };
        if !conn.subs.contains_key(id) {
            // Sent before the relay saw our CLOSE of a consolidated live
            // subscription: still something we asked for.
            let matches = conn.closed_live.get(id).map(|filters| {
                filters
                    .iter()
                    .any(|filter| filter.match_event(&event, MatchEventOptions::new()))
            });
            return match matches {
                Some(true) => self.store_verified(now, relay, event),
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
                .any(|filter| filter.match_event(&event, options)),
            Sub::Req { paging, .. } => paging.matches(&event),
            Sub::Fetch { filter, .. } => filter.match_event(&event, options),
            Sub::Poll { filters, .. } => filters
                .iter()
                .any(|filter| filter.match_event(&event, options)),
            Sub::Negentropy { .. } => false,
        };
        if !matches {
            self.stats.dropped_off_filter += 1;
            debug!(%relay, id = %event.id, "dropped event outside the subscription's filters");
            return;
        }
        if !self.verifies(relay, &event) {
            return;
        }
        let Some(sub) = self
            .conns
            .get_mut(relay)
            .and_then(|conn| conn.subs.get_mut(id))
        else {
            return;
        };
        let batch = match sub {
            Sub::Req { batch, paging } => {
                paging.on_event(event.id, event.created_at);
                Some(*batch)
            }
            Sub::Fetch { batch, missing, .. } => {
                missing.remove(&event.id);
                Some(*batch)
            }
            Sub::Poll { batch, pages, .. } => {
                for page in pages.iter_mut().filter(|page| page.matches(&event)) {
                    page.on_event(event.id, event.created_at);
                }
                Some(*batch)
            }
            _ => None,
        };
        if let Some(batch) = batch {
            self.progress(now, batch);
        }
        self.store(now, relay, event, batch);
    }

    /// `true` if the event's id and signature verify; counts it otherwise.
    pub(super) fn verifies(&mut self, relay: &RelayUrl, event: &Event) -> bool {
        let valid = event.verify().is_ok();
        if !valid {
            self.stats.dropped_forged += 1;
            warn!(%relay, id = %event.id, "dropped event with a bad id or signature");
        }
        valid
    }

    /// Stores an event that matched: only if its id and signature verify.
    pub(super) fn store_verified(&mut self, now: Now, relay: &RelayUrl, event: Event) {
        if self.verifies(relay, &event) {
            self.store(now, relay, event, None);
        }
    }
}
