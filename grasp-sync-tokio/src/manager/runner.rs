//! The run loop's state ([`Runner`]): the engine and what executes its
//! commands. It feeds the engine what the connections and the store task
//! report, executes the engine's commands (on [`Connections`], or as store
//! work on the [`StoreQueue`]), counts traffic for the metrics and the
//! summary, and publishes the status; it decides nothing about the sync.

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::clock::{Clock, Now};
use grasp_sync_core::engine::{Command, StoreVerdict, SyncEngine};
use grasp_sync_core::screen::Refused;
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use grasp_sync_core::verified::VerifiedEvent;
use nostr::prelude::{EventId, RelayUrl, SubscriptionId};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::connections::Connections;
use super::held::HeldNote;
use super::status_feed::StatusFeed;
use super::store_queue::StoreQueue;
use super::store_worker::{StoreJob, StoreResult};
use super::summary::Summary;
use super::warn_once::WarnOnce;
use super::OwnAnnouncementObserver;
use crate::clock::TokioClock;
use crate::connection::Dialer;
use crate::inbound::{Inbound, Report};
use crate::metrics::Metrics;
use crate::status::SyncStatus;

/// Relay reports (or store answers) handled in one go when they are
/// already waiting, at least: a message carrying several (the frames
/// decoded together, a batch of store answers) is handled whole.
const INBOUND_BURST: usize = 256;

/// The engine, where its commands are executed, and what is counted of
/// the run.
pub(super) struct Runner {
    engine: SyncEngine,
    clock: TokioClock,
    connections: Connections,
    store: StoreQueue,
    metrics: Metrics,
    summary: Summary,
    status: StatusFeed,
    /// Relays whose refused address was warned about.
    address_refusals: WarnOnce,
    /// Told of every announcement the own relay serves, if set.
    own_announcements: Option<OwnAnnouncementObserver>,
}

impl Runner {
    /// A runner for `engine`, its store task started on `store` (its
    /// answers come on the receiver returned).
    pub(super) fn start(
        engine: SyncEngine,
        store: Arc<dyn EventStore>,
        dialer: Dialer,
        metrics: Metrics,
        status: watch::Sender<SyncStatus>,
        shutdown: watch::Receiver<bool>,
        own_announcements: Option<OwnAnnouncementObserver>,
    ) -> (Self, mpsc::Receiver<StoreResult>) {
        let (store, store_results) = StoreQueue::start(store, shutdown);
        let own_relay = engine.config().identity.own_relay.clone();
        let runner = Runner {
            engine,
            clock: TokioClock::new(),
            connections: Connections::new(dialer, metrics.clone(), own_relay),
            store,
            metrics,
            summary: Summary::default(),
            status: StatusFeed::new(status),
            address_refusals: WarnOnce::default(),
            own_announcements,
        };
        (runner, store_results)
    }

    /// Runs the loop until shutdown: what arrived is handed to the engine
    /// (already waiting messages in bursts), the engine's commands are
    /// executed after each input, its deadlines fire, the status and the
    /// metrics are refreshed. Then every task is stopped.
    pub(super) async fn run(
        mut self,
        mut inbound: mpsc::Receiver<Inbound>,
        mut own_events: mpsc::Receiver<nostr::prelude::Event>,
        mut held: mpsc::Receiver<HeldNote>,
        mut store_results: mpsc::Receiver<StoreResult>,
        shutdown_tx: watch::Sender<bool>,
    ) -> Summary {
        let mut shutdown = shutdown_tx.subscribe();
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        self.on_timeout();
        loop {
            if *shutdown.borrow_and_update() {
                break;
            }
            self.drain_commands();
            self.refresh_status(false);
            let deadline = self.next_deadline();
            // Biased: messages already received are handled before a
            // deadline fires, so a reply waiting in the queue is never taken
            // for silence.
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                Some(result) = store_results.recv() => {
                    let mut handled = result.len();
                    self.on_store_result(result);
                    while handled < INBOUND_BURST {
                        let Ok(result) = store_results.try_recv() else { break };
                        handled += result.len();
                        self.drain_commands();
                        self.on_store_result(result);
                    }
                }
                Some(message) = inbound.recv() => {
                    let mut handled = message.reports.len();
                    self.on_inbound(message);
                    // What else already arrived is handled (each after the
                    // commands of the one before) before the deadlines and
                    // the status are looked at again: their cost is paid
                    // once per burst, not per message.
                    while handled < INBOUND_BURST {
                        let Ok(message) = inbound.try_recv() else { break };
                        handled += message.reports.len();
                        self.drain_commands();
                        self.on_inbound(message);
                    }
                }
                Some(event) = own_events.recv() => self.on_own_event(event),
                Some(note) = held.recv() => self.on_held_note(note),
                _ = tokio::time::sleep_until(deadline) => self.on_timeout(),
                _ = tick.tick() => {
                    self.update_metrics();
                    self.refresh_status(true);
                }
            }
        }
        let _ = shutdown_tx.send(true);
        drop(inbound);
        self.stop().await
    }

    /// The engine's view of now.
    fn clock_now(&self) -> Now {
        self.clock.read()
    }

    /// The engine's deadlines that are due now fire.
    fn on_timeout(&mut self) {
        let now = self.clock_now();
        self.engine.handle_timeout(now);
    }

    /// Events the embedding relay accepted, for the self-subscriber.
    fn on_own_event(&mut self, event: nostr::prelude::Event) {
        self.saw_own_event(&event);
        let now = self.clock_now();
        self.engine.handle_own_events(now, [event]);
    }

    /// What the host holds, from its [`HeldRepositories`](super::HeldRepositories).
    fn on_held_note(&mut self, note: HeldNote) {
        let now = self.clock_now();
        match note {
            HeldNote::Hold(repo) => self.engine.handle_repository_held(now, repo),
            HeldNote::HoldAnnouncement(event) => {
                self.engine.handle_held_announcement(now, *event);
            }
            HeldNote::Promote(repo) => self.engine.handle_repository_promoted(now, repo),
            HeldNote::Dropped(ids) => self.engine.handle_held_dropped(now, ids),
            HeldNote::List(answer) => {
                let held = self.engine.held_repositories().cloned().collect();
                // The host stopped waiting: nothing to answer.
                let _ = answer.send(held);
            }
        }
    }

    /// Executes the engine's commands (step 2 of its driving contract):
    /// store work on the store queue, the rest on the connections. Store
    /// work the full queue refused is answered as a transient failure (the
    /// engine retries it with the relay health's backoff).
    fn drain_commands(&mut self) {
        loop {
            let now = self.clock_now();
            let Runner {
                engine,
                connections,
                store,
                ..
            } = self;
            let mut closed = Vec::new();
            engine.execute_commands(now, |command| match StoreJob::of(command) {
                Ok(job) => {
                    store.queue(job);
                    Ok(())
                }
                Err(command) => {
                    if let Command::Disconnect { relay } = &command {
                        closed.push(relay.clone());
                    }
                    connections.execute(command)
                }
            });
            // A connection the engine closed reads as closed at once.
            for relay in &closed {
                self.connection_changed(relay);
            }
            let refused = self.store.take_refused();
            if refused.is_empty() {
                return;
            }
            let full = || StoreError::unavailable("store queue full");
            for job in refused {
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
    fn next_deadline(&self) -> tokio::time::Instant {
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        self.engine
            .poll_timeout()
            .map(|at| self.clock.to_tokio(at))
            .into_iter()
            .chain(self.status.due())
            .min()
            .unwrap_or(far)
    }

    /// Reports from a connection task, in order: a run of `EVENT`s goes to
    /// the engine in one call. Reports of an earlier connection are stale
    /// and dropped.
    fn on_inbound(&mut self, inbound: Inbound) {
        // `_held`, the reports' share of the relay's inbound byte budget, is
        // given back when this function returns.
        let Inbound {
            relay,
            generation,
            reports,
            budget: _held,
        } = inbound;
        if !self.connections.is_current(&relay, generation) {
            return;
        }
        let own = self.connections.is_own(&relay);
        let mut events = Vec::new();
        let mut events_size = 0;
        for report in reports {
            if own {
                self.saw_own(&report);
            }
            match report {
                Report::Event {
                    subscription_id,
                    checked,
                    size,
                } => {
                    events.push((subscription_id, checked));
                    events_size += size;
                }
                report => {
                    self.on_events(&relay, &mut events, std::mem::take(&mut events_size));
                    self.on_report(&relay, report);
                }
            }
        }
        self.on_events(&relay, &mut events, events_size);
    }

    /// Hands a run of `EVENT`s from `relay`, `size` bytes on the wire, to
    /// the engine (a refused one is counted by the engine:
    /// `dropped_forged`, `dropped_off_filter` …), and empties it.
    fn on_events(
        &mut self,
        relay: &RelayUrl,
        events: &mut Vec<(SubscriptionId, Result<VerifiedEvent, Refused>)>,
        size: usize,
    ) {
        if events.is_empty() {
            return;
        }
        self.count_received(relay, size);
        let now = self.clock_now();
        self.engine
            .handle_checked_events(now, relay, events.drain(..));
    }

    /// A report other than an `EVENT` from `relay`'s current connection.
    fn on_report(&mut self, relay: &RelayUrl, report: Report) {
        let now = self.clock_now();
        match report {
            Report::Connected => {
                self.count_attempt(relay, "success");
                self.engine.handle_connected(now, relay);
                self.connection_changed(relay);
            }
            Report::Limits(limits) => self.engine.handle_relay_limits(now, relay, limits),
            Report::ConnectFailed(reason) => {
                self.count_attempt(relay, "failure");
                debug!(%relay, reason, "connect failed");
                self.engine.handle_connect_failed(now, relay);
                self.connection_changed(relay);
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
                self.connection_changed(relay);
            }
            Report::Disconnected(reason) => {
                info!(%relay, reason, "connection lost");
                self.engine.handle_disconnected(now, relay);
                self.connection_changed(relay);
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
                // Bad input like a forged event: counted by the engine
                // (`dropped_malformed`) and toward the relay's cut-off.
                self.count_received(relay, size);
                self.engine
                    .handle_refused_event(now, relay, Refused::Malformed { bytes: size });
            }
        }
    }

    /// Tells the observer of own announcements (if any) of the event in a
    /// report of the own relay: it serves it. The engine routes the report
    /// to the own relay's session like any relay's.
    fn saw_own(&self, report: &Report) {
        match report {
            Report::Message(message, _) => {
                if let nostr::prelude::RelayMessage::Event { event, .. } = message.as_ref() {
                    self.saw_own_event(event);
                }
            }
            Report::Event {
                checked: Ok(event), ..
            } => self.saw_own_event(event.event()),
            _ => {}
        }
    }

    /// Tells the observer of own announcements (if any) of `event`, which
    /// the own relay serves.
    fn saw_own_event(&self, event: &nostr::prelude::Event) {
        if let Some(observer) = &self.own_announcements {
            observer.saw(event);
        }
    }

    /// Counts a connection attempt of `relay` that ended in `outcome`
    /// (`success` or `failure`; the own relay's attempts are not relay
    /// sync's).
    fn count_attempt(&self, relay: &RelayUrl, outcome: &str) {
        if self.connections.is_own(relay) {
            return;
        }
        self.metrics.attempt_ended(relay, outcome);
    }

    /// Counts `size` bytes received from `relay` (the own relay's bytes are
    /// not relay sync's).
    fn count_received(&mut self, relay: &RelayUrl, size: usize) {
        if self.connections.is_own(relay) {
            return;
        }
        self.summary.bytes_received += size as u64;
        self.metrics
            .bytes_received
            .with_label_values(&[relay.as_str()])
            .inc_by(size as u64);
    }

    /// Counts the store's answer and hands it to the engine.
    fn on_store_result(&mut self, result: StoreResult) {
        let now = self.clock_now();
        match result {
            StoreResult::Ingested(answers) => {
                for answer in &answers {
                    self.count_store_outcome(&answer.relay, answer.id, &answer.outcome);
                }
                let outcomes = answers
                    .into_iter()
                    .map(|answer| (answer.id, answer.outcome));
                self.engine.handle_store_outcomes(now, outcomes);
            }
            StoreResult::Items { relay, id, items } => match items {
                Ok(items) => self.engine.handle_local_items(now, &relay, &id, items),
                Err(error) => {
                    self.engine
                        .handle_local_items_failed(now, &relay, &id, &error.to_string())
                }
            },
        }
    }

    /// The summary's and the metrics' view of a store answer (the engine
    /// decides what it means).
    fn count_store_outcome(
        &mut self,
        relay: &RelayUrl,
        id: EventId,
        outcome: &Result<IngestOutcome, StoreError>,
    ) {
        match StoreVerdict::of(outcome) {
            StoreVerdict::Stored => {
                self.summary.events_stored += 1;
                self.metrics.events_synced.inc();
            }
            StoreVerdict::Duplicate => self.summary.events_duplicate += 1,
            StoreVerdict::Held => self.summary.events_held += 1,
            StoreVerdict::Refused(reason) => {
                self.summary.events_rejected += 1;
                self.metrics
                    .dropped
                    .with_label_values(&["rejected_by_store"])
                    .inc();
                debug!(%relay, %id, reason, "store refused event");
            }
            StoreVerdict::Retry(reason) | StoreVerdict::Unclear(reason) => {
                self.summary.store_retries += 1;
                debug!(%relay, %id, reason, "store refused event for now; the engine decides");
            }
            _ => {}
        }
    }

    /// Publishes a new status snapshot if the last one is older than the
    /// status interval (or `force`) and something changed.
    fn refresh_status(&mut self, force: bool) {
        let Runner {
            engine,
            clock,
            metrics,
            status,
            ..
        } = self;
        status.refresh(force, || {
            let bytes = |relay: &RelayUrl| {
                let label = [relay.as_str()];
                (
                    metrics.bytes_received.with_label_values(&label).get(),
                    metrics.bytes_sent.with_label_values(&label).get(),
                )
            };
            SyncStatus::of(engine, clock.read().instant, bytes)
        });
    }

    /// `relay`'s connection changed as the engine sees it: its connection
    /// gauges and the connected count are set now, so a host's "connected
    /// relays" drops the moment a source goes, not on the next tick.
    fn connection_changed(&self, relay: &RelayUrl) {
        if self.connections.is_own(relay) {
            return;
        }
        let now = self.clock_now();
        self.metrics
            .connection_changed(&self.engine, relay, now.instant);
    }

    /// Refreshes the gauges and the summary's bytes sent.
    fn update_metrics(&mut self) {
        let now = self.clock_now();
        self.metrics.update(&self.engine, now.instant);
        self.summary.bytes_sent = self.connections.bytes_sent();
    }

    /// Closes every connection and waits up to one second for the tasks.
    async fn stop(mut self) -> Summary {
        self.update_metrics();
        let mut tasks: Vec<JoinSet<()>> = self.connections.take_tasks();
        tasks.push(self.store.take_task());
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
        self.summary.bytes_sent = self.connections.bytes_sent();
        self.summary
    }
}
