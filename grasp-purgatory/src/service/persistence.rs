//! Persistence of the held events: saved to the configured file when the loop stops,
//! restored (and queued with the immediate delay) when the purgatory is built.

use std::path::Path;
use std::sync::PoisonError;

use super::api::Purgatory;
use crate::held::hold_event;
use crate::persist::{self, RejectedLine};

impl Purgatory {
    /// Saves the purgatory to its persistence file, if one is set.
    pub async fn save(&self) -> Result<(), std::io::Error> {
        let Some(path) = &self.shared.config.persist_path else {
            return Ok(());
        };
        let events = self.all_held_events();
        persist::save(path, &events).await?;
        tracing::info!(path = %path.display(), events = events.len(), "purgatory saved");
        Ok(())
    }

    /// Holds the events saved in `path` and queues their identifiers; lines that cannot
    /// be read back are logged and kept for [`Purgatory::restore_rejected`]. Reads the
    /// file synchronously (the builder is synchronous).
    pub(super) fn restore(&self, path: &Path) -> Result<(), std::io::Error> {
        let report = persist::load_blocking(path)?;
        for rejected in &report.rejected {
            tracing::warn!(line = rejected.line, reason = %rejected.reason, "purgatory line not restored");
        }
        let mut refused = report.rejected;
        for saved in report.events {
            match hold_event(saved.event, saved.origin, saved.held_since) {
                Ok(held) => {
                    let identifier = held.identifier.clone();
                    self.hold(held);
                    self.enqueue(&identifier, self.shared.config.queue.immediate_delay);
                }
                Err(error) => refused.push(RejectedLine {
                    line: 0,
                    reason: error.to_string(),
                }),
            }
        }
        *self
            .shared
            .restore_rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = refused;
        Ok(())
    }
}
