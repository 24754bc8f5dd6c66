//! Executing the engine's commands: step 2 of the driving contract in one
//! call, with the driver's own executor. [`Command`] is the only vocabulary:
//! the driver matches on it (a message for a relay is
//! [`Command::client_message`]) and says whether its relay could take it.

use nostr::prelude::RelayUrl;
use tracing::warn;

use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::transport::TransportError;

impl SyncEngine {
    /// Step 2 of the driving contract in one call: hands every waiting
    /// command to `execute`, oldest first, and feeds back the relays whose
    /// connection could not take one (`execute` returned an error:
    /// [`SyncEngine::handle_send_failed`]). Returns how many commands were
    /// executed.
    ///
    /// ```
    /// use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
    /// use grasp_sync_core::{Instant, Now};
    /// use nostr::prelude::{RelayUrl, Timestamp};
    ///
    /// let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
    /// let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
    /// let config = EngineConfig {
    ///     bootstrap_relays: vec![relay.clone()],
    ///     ..EngineConfig::default()
    /// };
    /// let mut engine = SyncEngine::new(config, now);
    /// engine.handle_timeout(now);
    /// let mut executed = Vec::new();
    /// engine.execute_commands(now, |command| {
    ///     // Connect, send `command.client_message()`, store, query …
    ///     executed.push(command);
    ///     Ok(())
    /// });
    /// assert!(matches!(executed.as_slice(), [Command::Connect { .. }]));
    /// ```
    pub fn execute_commands(
        &mut self,
        now: Now,
        mut execute: impl FnMut(Command) -> Result<(), TransportError>,
    ) -> usize {
        let mut executed = 0;
        while let Some(command) = self.poll_command() {
            executed += 1;
            let relay = command.relay().clone();
            if let Err(error) = execute(command) {
                self.handle_send_failed(now, &relay, &error);
            }
        }
        executed
    }

    /// The connection of `relay` could not take a command's message: the
    /// relay and the engine are out of step, so the connection is closed and
    /// its work planned again on reconnect (the own relay's: reconnected
    /// after its backoff).
    pub fn handle_send_failed(&mut self, now: Now, relay: &RelayUrl, error: &TransportError) {
        self.observe(now);
        if self.own.is_for(relay) {
            warn!(%relay, %error, "cannot send to the own relay; reconnecting");
            self.emit(Command::Disconnect {
                relay: relay.clone(),
            });
            return self.own_closed(now, "send failed");
        }
        let status = self
            .relays
            .state(relay)
            .map(|state| state.connection_status);
        match status {
            Some(crate::model::ConnectionStatus::Connected) => {}
            Some(crate::model::ConnectionStatus::Connecting) => {
                // The connect itself could not be started.
                return self.handle_connect_failed(now, relay);
            }
            _ => return self.ignored(relay, "send failure while not connected"),
        }
        warn!(%relay, %error, "cannot send to relay; reconnecting");
        self.relays
            .note_error(relay, format!("send failed: {error}"));
        self.emit(Command::Disconnect {
            relay: relay.clone(),
        });
        self.forget_connection(now, relay);
        self.maintain(now);
    }
}
