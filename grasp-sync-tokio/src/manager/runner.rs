//! The run loop's state: the engine, the connections, the store task, the
//! metrics. It feeds the engine what happens and executes its commands
//! ([`Connections::execute`]); it decides nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::clock::{Clock, Now};
use grasp_sync_core::engine::Command;
use grasp_sync_core::screen::Refused;
use grasp_sync_core::store::StoreError;
use grasp_sync_core::transport::TransportError;
use grasp_sync_core::verified::VerifiedEvent;
use nostr::prelude::{RelayUrl, SubscriptionId};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::store_worker::StoreJob;
use super::summary::Summary;
use super::Runner;
use crate::connection::{Dialer, SentCounter, WsTransport};
use crate::inbound::{Inbound, Report};
use crate::status::SyncStatus;

/// The shortest interval between two status snapshots.
pub(crate) const STATUS_INTERVAL: Duration = Duration::from_millis(100);

/// Where the engine's commands are executed: one connection per relay, the
/// own relay's connection, and the store task.
pub(super) struct Connections {
    pub(super) dialer: Dialer,
    pub(super) transports: HashMap<RelayUrl, WsTransport>,
    /// The self-subscriber's connection to the own relay (its events are not
    /// verified again, its attempts are not relay sync's).
    pub(super) own: Option<WsTransport>,
    pub(super) store_jobs: mpsc::Sender<StoreJob>,
    /// Store work refused because the store task's queue was full, to be
    /// answered to the engine as a transient store failure.
    pub(super) overflow: Vec<StoreJob>,
    pub(super) sent: Arc<AtomicU64>,
    pub(super) bytes_sent: prometheus::IntCounterVec,
    pub(super) connection_attempts: prometheus::IntCounterVec,
    /// To remove a forgotten relay's series.
    pub(super) metrics: crate::metrics::Metrics,
}

impl Connections {
    /// The bytes-sent counters of `relay`.
    pub(super) fn sent_counter(&self, relay: &RelayUrl) -> SentCounter {
        sent_counter(
            &self.sent,
            &self.bytes_sent,
            &self.connection_attempts,
            relay,
        )
    }
}

/// The bytes-sent counters of `relay`: the run's total, the relay's bytes,
/// its connection attempts.
fn sent_counter(
    total: &Arc<AtomicU64>,
    bytes_sent: &prometheus::IntCounterVec,
    attempts: &prometheus::IntCounterVec,
    relay: &RelayUrl,
) -> SentCounter {
    SentCounter {
        total: total.clone(),
        relay: bytes_sent.with_label_values(&[relay.as_str()]),
        connects: Some(attempts.with_label_values(&[relay.as_str(), "started"])),
    }
}

impl Connections {
    /// Executes one of the engine's commands: on the relay's connection
    /// (created on first use; the own relay's for its URL), or as store
    /// work. An error means the connection could not take the message.
    pub(super) fn execute(&mut self, command: Command) -> Result<(), TransportError> {
        match command {
            Command::Connect { relay, timeout } => self.transport(&relay).connect(timeout),
            Command::Disconnect { relay } => self.transport(&relay).close(),
            Command::Forget { relay } => self.forget(&relay),
            Command::QueryLocalItems { relay, id, filter } => {
                self.queue_store_job(StoreJob::Items {
                    relay,
                    id,
                    filter: Box::new(filter),
                })
            }
            Command::Store { relay, event } => {
                self.queue_store_job(StoreJob::Ingest { relay, event })
            }
            command => {
                if let Some(message) = command.client_message() {
                    return self.transport(command.relay()).send(message);
                }
            }
        }
        Ok(())
    }

    /// The connection of `relay`, created on first use.
    fn transport(&mut self, relay: &RelayUrl) -> &mut WsTransport {
        let Connections {
            own,
            transports,
            dialer,
            sent,
            bytes_sent,
            connection_attempts,
            ..
        } = self;
        match own {
            Some(own) if own.relay_url() == relay => own,
            _ => transports.entry(relay.clone()).or_insert_with(|| {
                let counter = sent_counter(sent, bytes_sent, connection_attempts, relay);
                WsTransport::new(relay.clone(), dialer.clone(), counter)
            }),
        }
    }

    /// A relay no longer tracked: its connection closes, its driver tasks
    /// end (dropping their set aborts what is left), and its metric series
    /// go, so strangers' relays cannot grow either without bound.
    fn forget(&mut self, relay: &RelayUrl) {
        if let Some(mut transport) = self.transports.remove(relay) {
            transport.close();
        }
        self.metrics.forget_relay(relay);
    }

    /// Hands a job to the store task; a full queue (a store far behind)
    /// sends it back as a transient failure instead of growing memory.
    fn queue_store_job(&mut self, job: StoreJob) {
        match self.store_jobs.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job)) => self.overflow.push(job),
            Err(mpsc::error::TrySendError::Closed(_)) => warn!("the store task stopped"),
        }
    }
}

impl Runner {
    /// The engine's view of now.
    pub(super) fn clock_now(&self) -> Now {
        self.clock.read()
    }

    /// Executes the engine's commands (step 2 of its driving contract);
    /// store work the full store queue refused is answered as a transient
    /// failure (the engine retries it with the relay health's backoff).
    pub(super) fn drain_commands(&mut self) {
        loop {
            let now = self.clock_now();
            let connections = &mut self.connections;
            self.engine
                .execute_commands(now, |command| connections.execute(command));
            let overflow = std::mem::take(&mut self.connections.overflow);
            if overflow.is_empty() {
                return;
            }
            let full = || StoreError::unavailable("store queue full");
            for job in overflow {
                match job {
                    StoreJob::Ingest { event, .. } => {
                        self.engine
                            .handle_store_outcome(now, &event.id, Err(full()))
                    }
                    StoreJob::Items { relay, id, .. } => {
                        self.engine
                            .handle_local_items_failed(now, &relay, &id, &full().to_string())
                    }
                }
            }
        }
    }

    /// The engine's next deadline (the own relay's reconnect included) or
    /// a held-back status refresh, capped so the loop never sleeps forever.
    pub(super) fn next_deadline(&self) -> tokio::time::Instant {
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        self.engine
            .poll_timeout()
            .map(|at| self.clock.to_tokio(at))
            .into_iter()
            .chain(self.status_due)
            .min()
            .unwrap_or(far)
    }

    /// Reports from a connection task, in order: a run of `EVENT`s goes to
    /// the engine in one call.
    pub(super) fn on_inbound(&mut self, inbound: Inbound) {
        // `_held`, the reports' share of the relay's inbound byte budget, is
        // given back when this function returns.
        let Inbound {
            relay,
            generation,
            reports,
            budget: _held,
        } = inbound;
        let own = self.connections.own.as_ref();
        if own.is_some_and(|own| own.relay_url() == &relay) {
            for report in reports {
                self.on_own(&relay, generation, report);
            }
            return;
        }
        let current = self
            .connections
            .transports
            .get(&relay)
            .map(WsTransport::generation);
        if current != Some(generation) {
            return;
        }
        let mut events = Events::default();
        for report in reports {
            match report {
                Report::Event {
                    subscription_id,
                    checked,
                    size,
                } => events.push(subscription_id, checked, size),
                report => {
                    self.on_events(&relay, &mut events);
                    self.on_report(&relay, report);
                }
            }
        }
        self.on_events(&relay, &mut events);
    }

    /// Hands a run of `EVENT`s from `relay` to the engine (a refused one is
    /// counted by the engine: `dropped_forged`, `dropped_off_filter` …),
    /// and empties it.
    fn on_events(&mut self, relay: &RelayUrl, events: &mut Events) {
        if events.checked.is_empty() {
            return;
        }
        self.count_received(relay, std::mem::take(&mut events.size));
        let now = self.clock_now();
        self.engine
            .handle_checked_events(now, relay, events.checked.drain(..));
    }

    /// A report other than an `EVENT` from `relay`'s current connection.
    fn on_report(&mut self, relay: &RelayUrl, report: Report) {
        let now = self.clock_now();
        match report {
            Report::Connected => {
                self.metrics
                    .connection_attempts
                    .with_label_values(&[relay.as_str(), "success"])
                    .inc();
                self.engine.handle_connected(now, relay);
            }
            Report::Limits(limits) => self.engine.handle_relay_limits(now, relay, limits),
            Report::ConnectFailed(reason) => {
                self.metrics
                    .connection_attempts
                    .with_label_values(&[relay.as_str(), "failure"])
                    .inc();
                debug!(%relay, reason, "connect failed");
                self.engine.handle_connect_failed(now, relay);
            }
            Report::AddressRefused(reason) => {
                self.metrics
                    .refused
                    .with_label_values(&["resolved_address"])
                    .inc();
                if self.address_refusals.warn_once(relay) {
                    warn!(%relay, reason, "relay address refused by the relay policy; not connecting");
                } else {
                    debug!(%relay, reason, "relay address refused");
                }
                self.engine.handle_connect_failed(now, relay);
            }
            Report::Disconnected(reason) => {
                info!(%relay, reason, "connection lost");
                self.engine.handle_disconnected(now, relay);
            }
            Report::Message(message, size) => {
                self.count_received(relay, size);
                self.engine.handle_relay_message(now, relay, *message);
            }
            Report::Event {
                subscription_id,
                checked,
                size,
            } => {
                self.count_received(relay, size);
                self.engine
                    .handle_checked_event(now, relay, &subscription_id, checked);
            }
            Report::Refused(refused) => {
                if let Refused::Oversized { bytes, .. } = refused {
                    self.count_received(relay, bytes);
                }
                self.engine.handle_refused_event(now, relay, refused);
            }
            Report::MessageTooLarge(size) => {
                self.engine.handle_message_too_large(now, relay, size);
            }
            Report::Alive => self.engine.handle_relay_alive(now, relay),
            Report::Malformed(size) => {
                self.summary.bytes_received += size as u64;
                self.metrics.dropped.with_label_values(&["malformed"]).inc();
            }
        }
    }

    /// Counts `size` bytes received from `relay`.
    fn count_received(&mut self, relay: &RelayUrl, size: usize) {
        self.summary.bytes_received += size as u64;
        self.metrics
            .bytes_received
            .with_label_values(&[relay.as_str()])
            .inc_by(size as u64);
    }

    /// Publishes a new status snapshot if the last one is older than
    /// [`STATUS_INTERVAL`] (or `force`) and something changed.
    pub(super) fn refresh_status(&mut self, force: bool) {
        let now = tokio::time::Instant::now();
        if !force && now < self.status_at + STATUS_INTERVAL {
            // Published when the interval is over (see `next_deadline`): the
            // last change before a quiet spell is not held back.
            self.status_due = Some(self.status_at + STATUS_INTERVAL);
            return;
        }
        self.status_at = now;
        self.status_due = None;
        let clock_now = self.clock_now();
        let received = &self.metrics.bytes_received;
        let sent = &self.connections.bytes_sent;
        let bytes = |relay: &RelayUrl| {
            let label = [relay.as_str()];
            (
                received.with_label_values(&label).get(),
                sent.with_label_values(&label).get(),
            )
        };
        let status = SyncStatus::of(&self.engine, clock_now.instant, bytes);
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            if changed {
                *current = status;
            }
            changed
        });
    }

    pub(super) fn update_metrics(&mut self) {
        let now = self.clock_now();
        self.metrics.update(&self.engine, now.instant);
        self.summary.bytes_sent = self.connections.sent.load(Ordering::Relaxed);
    }

    /// Closes every connection and waits up to one second for the tasks.
    pub(super) async fn stop(mut self) -> Summary {
        self.update_metrics();
        let mut tasks: Vec<JoinSet<()>> = self
            .connections
            .transports
            .values_mut()
            .chain(self.connections.own.as_mut())
            .filter_map(WsTransport::take_tasks)
            .collect();
        tasks.push(std::mem::take(&mut self.store_task));
        let deadline = tokio::time::Instant::now() + Duration::from_millis(900);
        for set in &mut tasks {
            while tokio::time::timeout_at(deadline, set.join_next())
                .await
                .ok()
                .flatten()
                .is_some()
            {}
        }
        for set in &mut tasks {
            self.summary.tasks_aborted += set.len();
            set.abort_all();
        }
        self.summary.engine = self.engine.stats().clone();
        self.summary.bytes_sent = self.connections.sent.load(Ordering::Relaxed);
        self.summary
    }
}

/// A run of `EVENT`s from one relay waiting to go to the engine together,
/// and their size on the wire.
#[derive(Default)]
struct Events {
    checked: Vec<(SubscriptionId, Result<VerifiedEvent, Refused>)>,
    size: usize,
}

impl Events {
    fn push(
        &mut self,
        subscription_id: SubscriptionId,
        checked: Result<VerifiedEvent, Refused>,
        size: usize,
    ) {
        self.checked.push((subscription_id, checked));
        self.size += size;
    }
}
