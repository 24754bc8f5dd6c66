//! What the engine reports about itself: counters, and what is open and
//! waiting on each relay.

use super::session_events::{Dropped, Noted, SessionEvent};

/// What strangers' events make the engine hold beyond its queues, in bytes
/// ([`SyncEngine::held_bytes`](super::SyncEngine::held_bytes)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldBytes {
    /// Bytes of the candidates (at most [`MAX_CANDIDATE_BYTES`](super::MAX_CANDIDATE_BYTES)).
    pub candidates: usize,
    /// Candidates held (at most [`MAX_CANDIDATES`](super::MAX_CANDIDATES)).
    pub candidate_count: usize,
    /// Bytes of the records of events refused for good.
    pub refused: usize,
    /// Records of events refused for good (at most
    /// [`Caps::refused_memory`](super::Caps::refused_memory)).
    pub refused_count: usize,
    /// Records of events the store holds outside what it serves
    /// ([`IngestOutcome::Held`](crate::store::IngestOutcome::Held)), kept to
    /// answer negentropy (at most
    /// [`Caps::refused_memory`](super::Caps::refused_memory)).
    pub held_events: usize,
}

/// Counters of what the engine did and dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Events handed to the store.
    pub events_accepted: u64,
    /// Events a relay sent that the same relay had sent lately (another
    /// subscription's filter matched it too, a page repeated it): wire
    /// overhead, not stored twice.
    pub events_received_again: u64,
    /// Announcements and states from remote relays not stored because they
    /// are not ours: they list none of
    /// [`Identity::service_relays`](super::Identity::service_relays)
    /// and are by no author of a repository of ours (held as candidates, up
    /// to [`MAX_CANDIDATES`](super::MAX_CANDIDATES), in case an announcement
    /// of ours naming their author comes).
    pub not_ours: u64,
    /// Held announcements and states stored after all, once an announcement
    /// of ours named their author.
    pub candidates_stored: u64,
    /// Ids a negentropy round found missing that were not fetched: stored
    /// lately, or already on their way to the store.
    pub fetches_saved: u64,
    /// Events not handed to the store again because they were stored
    /// lately (the same event from another relay, filter or re-sync).
    pub already_stored: u64,
    /// Root events whose replies were fetched by REQ without reconciling:
    /// the store had just taken the root event as new.
    pub fresh_roots_by_req: u64,
    /// Root events the store had just taken as new whose replies were
    /// reconciled (NIP-77) against what their relay sent this sync, not
    /// against a store query: only the replies still missing are fetched
    /// ([`Caps::sent_replies_per_relay`](super::Caps::sent_replies_per_relay)).
    pub fresh_roots_reconciled: u64,
    /// Historic REQs the relay stopped answering without EOSE or CLOSED
    /// (while it answered other things) that were closed and asked again
    /// from where they were, instead of failing their batch.
    pub reqs_resumed: u64,
    /// Events dropped because the id or signature did not verify.
    pub dropped_forged: u64,
    /// Events dropped because they matched no filter of their subscription.
    pub dropped_off_filter: u64,
    /// Events on a subscription we do not have open.
    pub dropped_unknown_subscription: u64,
    /// Events and messages refused for their size: an event over
    /// [`Limits::max_event_size`](super::Limits::max_event_size) or
    /// [`Limits::max_event_tags`](super::Limits::max_event_tags) (refused by
    /// its length before parsing where the driver can), a WebSocket message
    /// over the connection's limit (the connection is then lost).
    pub dropped_oversized: u64,
    /// Frames from a relay that are not relay messages (unparseable JSON,
    /// unknown verbs); each counts toward
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) like a forged
    /// event.
    pub dropped_malformed: u64,
    /// Times a relay was cut off (disconnected, then backed off) for
    /// sending more than [`Caps::max_bad_events`](super::Caps::max_bad_events)
    /// refused events on one connection: once per such connection.
    pub relays_cut_for_bad_events: u64,
    /// Candidates (see [`EngineStats::not_ours`]) dropped, oldest first, to
    /// keep them under [`MAX_CANDIDATES`](super::MAX_CANDIDATES) and
    /// [`MAX_CANDIDATE_BYTES`](super::MAX_CANDIDATE_BYTES).
    pub candidates_dropped: u64,
    /// Batches confirmed.
    pub batches_confirmed: u64,
    /// Of those, Layer 1 and Layers 2+3 batches: history reads that ended
    /// with everything they brought stored. What they brought is planned at
    /// once, without the self-subscriber's batch window.
    pub history_reads_confirmed: u64,
    /// Events of the own relay's live self-subscription that this engine
    /// had stored itself lately: already queued for planning when the
    /// store answered, so not queued again (the relay echoes what we
    /// publish).
    pub own_echoes: u64,
    /// Batches failed (and planned again).
    pub batches_failed: u64,
    /// Relays that refused NIP-77 and are synced by REQ+EOSE.
    pub negentropy_refusals: u64,
    /// Negentropy rounds completed.
    pub negentropy_rounds: u64,
    /// Seconds that held a full page (of a plausible relay page size) during
    /// REQ pagination: events beyond the page may be missing.
    pub crowded_seconds: u64,
    /// Rate-limit signals received.
    pub rate_limits: u64,
    /// Subscription-limit refusals received.
    pub subscription_refusals: u64,
    /// Consolidations of live subscriptions.
    pub consolidations: u64,
    /// Relays dropped because nothing is left to sync from them.
    pub relays_dropped: u64,
    /// Ids a relay's negentropy set held but fetches did not return, after
    /// every retry.
    pub fetch_missing: u64,
    /// Fetches of missing ids asked again because they brought nothing new.
    pub fetch_retries: u64,
    /// Events the store reported newly stored.
    pub events_stored: u64,
    /// Events the store reported held ([`IngestOutcome::Held`](crate::store::IngestOutcome::Held)):
    /// kept outside what it serves until their git data arrives. Not in
    /// [`EngineStats::events_stored`].
    pub events_held: u64,
    /// Store answers that asked for a retry (`rate-limited:`, `error:`,
    /// failures, timeouts).
    pub store_retries: u64,
    /// Events the store refused for good.
    pub store_refused: u64,
    /// Events that waited before going to the store, for what they need
    /// to reach it first: their repository's announcement, the event they
    /// reply to (dependency order, `store_order`).
    pub store_waits: u64,
    /// Times a relay's frame budget was lowered after it dropped the
    /// connection right after a large frame.
    pub frame_budget_lowered: u64,
    /// Times a relay's lowered subscription limit or frame budget was
    /// raised a step again after a quiet period (no refusal, no drop):
    /// learned limits recover, a blip does not cost a relay for good.
    pub learned_limits_raised: u64,
    /// Relays whose NIP-77 answer was over the connection's message limit:
    /// each is synced by REQ from then on, never left out as unreachable.
    pub negentropy_over_limit: u64,
    /// Polls of items whose live subscription did not fit a relay's limits.
    pub uncovered_polls: u64,
    /// Negentropy sessions replaced by REQ because the store could not list
    /// its items.
    pub local_items_failures: u64,
    /// Inputs that did not fit the engine's state (a message from a relay
    /// not connected, a store answer for an event not waiting …), logged at
    /// `debug` and ignored.
    pub inputs_ignored: u64,
    /// Relay URLs from announcements refused by the relay policy.
    pub relays_refused: u64,
    /// Relay URLs from announcements not synced because of
    /// [`Caps::max_relays_per_announcement`](super::Caps::max_relays_per_announcement),
    /// [`Caps::max_relays`](super::Caps::max_relays),
    /// [`Caps::max_relays_per_author`](super::Caps::max_relays_per_author) or
    /// [`Caps::max_relays_per_network`](super::Caps::max_relays_per_network)
    /// (those under the last three wait for a slot), and Sync+ outbox
    /// relays waiting for a slot (once per repository while they wait).
    pub relays_over_cap: u64,
    /// Relays that yielded their slot to one waiting: past their
    /// [`Caps::relay_trial_period`](super::Caps::relay_trial_period), they
    /// delivered no event of ours that no other relay delivered within
    /// [`Caps::relay_earn_window`](super::Caps::relay_earn_window). They
    /// wait for a slot again like any relay over the cap.
    pub relays_evicted: u64,
    /// Events handed to the store as new that came from a relay only Sync+ brought in
    /// (an outbox or index relay no announcement lists): the conversation
    /// GRASP-03 adds.
    pub sync_plus_events: u64,
    /// Participants not remembered: over
    /// [`SyncPlusConfig::max_participants_per_repo`](super::SyncPlusConfig::max_participants_per_repo),
    /// a newcomer left out or the lowest-ranked participant it displaced.
    pub sync_plus_participants_over_cap: u64,
    /// Write relays of a relay list not read: over
    /// [`SyncPlusConfig::max_relays_per_list`](super::SyncPlusConfig::max_relays_per_list)
    /// or refused by the relay policy.
    pub sync_plus_list_relays_left_out: u64,
    /// Outbox relays a pass chose but could not add: over
    /// [`SyncPlusConfig::max_relays`](super::SyncPlusConfig::max_relays)
    /// (each time a pass meets one).
    pub sync_plus_relays_over_cap: u64,
    /// Sync+ passes (each moves the selection on).
    pub sync_plus_passes: u64,
    /// Negentropy sessions cut off by
    /// [`Caps::max_negentropy_rounds`](super::Caps::max_negentropy_rounds)
    /// or [`Caps::max_negentropy_need`](super::Caps::max_negentropy_need).
    pub negentropy_sessions_cut: u64,
    /// Root events not indexed because their repository is not announced
    /// and [`Caps::max_unannounced_repos`](super::Caps::max_unannounced_repos)
    /// such repositories are tracked already.
    pub root_events_over_cap: u64,
}

impl EngineStats {
    /// Counts what a session reported ([`SessionEvent`]): the one place a
    /// session's doings become counters.
    pub(crate) fn count(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::Connected
            | SessionEvent::Disconnected
            | SessionEvent::BatchOpened(_)
            | SessionEvent::OwnHistoryRead
            | SessionEvent::OwnEvent(_) => {}
            SessionEvent::BatchConfirmed { history, .. } => {
                self.batches_confirmed += 1;
                if *history {
                    self.history_reads_confirmed += 1;
                }
            }
            SessionEvent::BatchFailed(_) => self.batches_failed += 1,
            SessionEvent::Noted(noted) => self.count_noted(*noted),
        }
    }

    /// Counts what a session noted only to be counted.
    fn count_noted(&mut self, noted: Noted) {
        let counter = match noted {
            Noted::Dropped(dropped) => match dropped {
                Dropped::Forged => &mut self.dropped_forged,
                Dropped::UnknownSubscription => &mut self.dropped_unknown_subscription,
                Dropped::OffFilter => &mut self.dropped_off_filter,
                Dropped::Oversized => &mut self.dropped_oversized,
                Dropped::Malformed => &mut self.dropped_malformed,
            },
            Noted::Oversized => &mut self.dropped_oversized,
            Noted::RelayCut => &mut self.relays_cut_for_bad_events,
            Noted::NegentropyOverLimit => &mut self.negentropy_over_limit,
            Noted::ReceivedAgain => &mut self.events_received_again,
            Noted::FetchMissing(ids) => return self.fetch_missing += ids,
            Noted::FetchRetry => &mut self.fetch_retries,
            Noted::Crowded(seconds) => return self.crowded_seconds += seconds,
            Noted::FrameBudgetLowered => &mut self.frame_budget_lowered,
            Noted::LimitsRaised => &mut self.learned_limits_raised,
            Noted::LocalItemsFailed => &mut self.local_items_failures,
            Noted::NegentropySessionCut => &mut self.negentropy_sessions_cut,
            Noted::NegentropyRefused => &mut self.negentropy_refusals,
            Noted::NegentropyRound => &mut self.negentropy_rounds,
            Noted::FetchSaved => &mut self.fetches_saved,
            Noted::Consolidated => &mut self.consolidations,
            Noted::UncoveredPoll => &mut self.uncovered_polls,
            Noted::FreshRootsReconciled(roots) => return self.fresh_roots_reconciled += roots,
            Noted::FreshRootsByReq(roots) => return self.fresh_roots_by_req += roots,
            Noted::ReqResumed => &mut self.reqs_resumed,
            Noted::SubscriptionRefused => &mut self.subscription_refusals,
            Noted::RateLimited => &mut self.rate_limits,
            Noted::OwnEcho => &mut self.own_echoes,
            Noted::InputIgnored => &mut self.inputs_ignored,
        };
        *counter += 1;
    }
}

/// What Sync+ holds now (GRASP-03), as gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncPlusCounts {
    /// Participants remembered, over every repository (a key in two
    /// repositories counts twice).
    pub participants: usize,
    /// Participants whose relay list is known.
    pub relay_lists: usize,
    /// Outbox relays synced from this pass.
    pub outbox_relays: usize,
    /// Index relays configured.
    pub index_relays: usize,
}

/// How a relay's live coverage stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LiveMode {
    /// Every item has a live subscription.
    #[default]
    Full,
    /// The relay's subscription and frame limits cannot hold live filters for
    /// every item: `uncovered_filters` of them are polled with a `since`
    /// catch-up every [`Timeouts::uncovered_poll_interval`](super::Timeouts::uncovered_poll_interval).
    Polling {
        /// Live filters that did not fit.
        uncovered_filters: usize,
    },
}

/// What is open and waiting on one connected relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayActivity {
    /// Subscriptions and negentropy sessions open (or reserved).
    pub open_subscriptions: usize,
    /// Live subscriptions among them.
    pub live_subscriptions: usize,
    /// Historic jobs waiting for a slot.
    pub queued_jobs: usize,
    /// Items whose live subscription waits.
    pub deferred_live_items: usize,
    /// The subscription limit in force.
    pub subscription_limit: usize,
    /// Slots live subscriptions may take (the rest is kept for history).
    pub live_slots: usize,
    /// The largest frame sent to the relay, in bytes.
    pub frame_budget: usize,
    /// Whether every item is covered live or some are polled.
    pub live_mode: LiveMode,
}
