//! Executing the engine's commands: the one place a [`Command`] becomes a
//! transport call ([`RelayTransport`]), a store write or a store query. The
//! tokio adapter and the simulation both drive the engine through it.

use nostr::prelude::{Event, Filter, RelayUrl, SubscriptionId};
use tracing::warn;

use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::transport::{RelayTransport, TransportError};

/// What executes the engine's commands: one transport per relay, and the
/// store. Answers come back to the engine as inputs
/// ([`SyncEngine::handle_connected`], [`SyncEngine::handle_relay_message`],
/// [`SyncEngine::handle_store_outcome`], [`SyncEngine::handle_local_items`]
/// …).
pub trait CommandSink {
    /// The connection of `relay`, created on first use.
    fn transport(&mut self, relay: &RelayUrl) -> &mut dyn RelayTransport;

    /// Hands a verified event to the store; answer with
    /// [`SyncEngine::handle_store_outcome`].
    fn store(&mut self, relay: RelayUrl, event: Box<Event>);

    /// Asks the store for the `(id, created_at)` of its events matching
    /// `filter`; answer with [`SyncEngine::handle_local_items`] or
    /// [`SyncEngine::handle_local_items_failed`].
    fn query_local_items(&mut self, relay: RelayUrl, id: SubscriptionId, filter: Filter);

    /// Forgets `relay` ([`Command::Forget`]): closes its connection and
    /// releases what is kept for it. By default only closes the transport;
    /// a sink that keeps per-relay state (a connection map, metric series)
    /// removes it here.
    fn forget(&mut self, relay: &RelayUrl) -> Result<(), TransportError> {
        self.transport(relay).close()
    }
}

/// Executes one command on `sink`. An error means the relay's transport
/// could not take the message.
pub fn execute(command: Command, sink: &mut impl CommandSink) -> Result<(), TransportError> {
    match command {
        Command::Connect { relay, timeout } => sink.transport(&relay).connect(timeout),
        Command::Disconnect { relay } => sink.transport(&relay).close(),
        Command::Forget { relay } => sink.forget(&relay),
        Command::Subscribe { relay, id, filters } => {
            sink.transport(&relay).subscribe(&id, &filters)
        }
        Command::Unsubscribe { relay, id } => sink.transport(&relay).unsubscribe(&id),
        Command::NegOpen {
            relay,
            id,
            filter,
            initial_message,
        } => sink
            .transport(&relay)
            .neg_open(&id, &filter, &initial_message),
        Command::NegMsg { relay, id, message } => sink.transport(&relay).neg_msg(&id, &message),
        Command::NegClose { relay, id } => sink.transport(&relay).neg_close(&id),
        Command::QueryLocalItems { relay, id, filter } => {
            sink.query_local_items(relay, id, filter);
            Ok(())
        }
        Command::Store { relay, event } => {
            sink.store(relay, event.into_event());
            Ok(())
        }
    }
}

impl SyncEngine {
    /// Step 2 of the driving contract in one call: executes every waiting
    /// command on `sink`, oldest first, and feeds back the transports that
    /// could not take a message ([`SyncEngine::handle_send_failed`]).
    /// Returns how many commands were executed.
    pub fn execute_commands(&mut self, now: Now, sink: &mut impl CommandSink) -> usize {
        let mut executed = 0;
        while let Some(command) = self.poll_command() {
            executed += 1;
            let relay = command.relay().clone();
            if let Err(error) = execute(command, sink) {
                self.handle_send_failed(now, &relay, &error);
            }
        }
        executed
    }

    /// A transport could not take a message for `relay`: the relay and the
    /// engine are out of step, so the connection is closed and its work
    /// planned again on reconnect.
    pub fn handle_send_failed(&mut self, now: Now, relay: &RelayUrl, error: &TransportError) {
        self.observe(now);
        let status = self
            .confirmed
            .get(relay)
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
        self.note_error(relay, format!("send failed: {error}"));
        self.emit(Command::Disconnect {
            relay: relay.clone(),
        });
        self.forget_connection(now, relay);
        self.maintain(now);
    }
}
