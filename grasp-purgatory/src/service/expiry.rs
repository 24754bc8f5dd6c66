//! Expiry: events that waited longer than the expiry time for their git data are dropped
//! and reported to the sink, and their repositories' stale refs swept.

use super::api::Purgatory;
use crate::context::lock;

impl Purgatory {
    /// Drops events that waited longer than the expiry time and reports each.
    pub(super) async fn expire(&self) {
        let shared = &self.shared;
        let now = shared.clock.unix_time();
        let expired = lock(&shared.store).take_expired(now, shared.config.expiry);
        for held in &expired {
            shared.sink.expired(held).await;
        }
        // The store noted that the refs that kept their objects are needed by nothing
        // any more; the loop sweeps them.
        if !expired.is_empty() {
            self.forget_released();
        }
        shared.metrics.events_expired.inc_by(expired.len() as u64);
        if !expired.is_empty() {
            self.update_gauges();
        }
    }
}
