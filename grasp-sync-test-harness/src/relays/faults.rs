//! Seeded faults of the proxy: what each one is ([`FaultPlan`]) and how many were injected
//! ([`FaultCounts`]). The per-connection decisions are in [`super::inject`].

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use nostr::prelude::EventId;

use super::rng::SeededRng;

/// The NIP-01 machine-readable prefixes, each used in injected NOTICE and CLOSED messages.
pub const NIP01_PREFIXES: [&str; 9] = [
    "duplicate:",
    "pow:",
    "blocked:",
    "rate-limited:",
    "invalid:",
    "restricted:",
    "mute:",
    "error:",
    "auth-required:",
];

/// Most forged and off-filter event ids remembered by [`FaultStats::injected_ids`].
const INJECTED_IDS_KEPT: usize = 100_000;

/// Faults the proxy injects, decided per frame by a generator seeded with `seed` (and the
/// connection's number). Probabilities are per relay → client text frame unless said
/// otherwise; 0 turns a fault off. [`FaultPlan::none`] (also `Default`) has every fault
/// off; [`FaultPlan::random`] is the chaos mix. Set on [`super::TestRelayConfig::faults`];
/// [`super::TestRelay::stop_faults`] / [`super::TestRelay::start_faults`] switch them at
/// run time; [`super::TestRelay::fault_counts`] counts what was injected.
///
/// What a fault does to the relay's own state is kept consistent: an injected CLOSED is
/// followed by a CLOSE to the relay, and the relay's later frames for that subscription
/// are not forwarded (until the client opens that id again).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// Seed of every decision.
    pub seed: u64,
    /// Drop the TCP connection (no close frame, unflushed frames lost) before a frame.
    pub drop: f64,
    /// Drop every connection when it reaches this many relay frames.
    pub drop_after_frames: Option<u64>,
    /// Stall: from this frame on nothing is forwarded either way and nothing is answered
    /// (not even WebSocket pings), but the connection stays open until the client closes it
    /// (a half-open socket). A stalled connection stays stalled after `stop_faults`.
    pub stall: f64,
    /// Pause for up to `max_delay` before a frame (what was sent before is flushed first).
    pub delay: f64,
    /// Longest pause of `delay`.
    pub max_delay: Duration,
    /// Hold a frame back and send it after the next frame of the same burst, if that one
    /// belongs to another subscription (or to none): relays interleave subscriptions
    /// freely, but NIP-01 keeps one subscription's frames in order (its EVENTs before its
    /// EOSE).
    pub reorder: f64,
    /// Let `reorder` also swap two frames of one subscription (an EVENT after its EOSE: a
    /// protocol violation). Not part of [`FaultPlan::random`].
    pub reorder_within_subscription: bool,
    /// Send an EVENT frame twice (relays do send an event once per matching filter).
    pub duplicate: f64,
    /// Let `duplicate` repeat any frame (a second EOSE or CLOSED: a protocol violation).
    /// Not part of [`FaultPlan::random`].
    pub duplicate_any: bool,
    /// Inject a frame that is not a relay message (junk text, JSON of the wrong shape, or
    /// a binary frame) before a frame.
    pub garbage: f64,
    /// Inject a truncated copy (a strict prefix) of a frame before it.
    pub truncated: f64,
    /// Inject a text frame of `oversized_bytes` (a NOTICE) before a frame.
    pub oversized: f64,
    /// Size of an oversized frame, in bytes.
    pub oversized_bytes: usize,
    /// Inject `NOTICE "<prefix> chaos"` with a random NIP-01 prefix before a frame.
    pub notice: f64,
    /// Instead of an EVENT or EOSE of an open REQ: `CLOSED` with a random NIP-01 prefix
    /// for its subscription (and a CLOSE to the relay).
    pub closed: f64,
    /// Inject a forged copy of an EVENT in the same subscription: content changed, with
    /// the id kept (id mismatch) or recomputed (bad signature).
    pub forged: f64,
    /// Forged copies injected each time `forged` strikes, each with its own content (a
    /// flood of forged events: 1 in [`FaultPlan::none`]).
    pub forged_copies: usize,
    /// Inject, into the subscription of an EVENT, a validly signed kind-1 note without
    /// tags (matches no sync filter).
    pub off_filter: f64,
    /// Per client `NEG-OPEN`: answer `NEG-ERR` with a random prefix instead of forwarding.
    pub neg_err: f64,
    /// Answer every `NEG-OPEN` and `NEG-MSG` with a negentropy message that claims
    /// `endless_ids_per_round` new ids and a mismatching fingerprint for the rest, so a
    /// client never finishes (counted in [`FaultCounts::endless_rounds`]). Not part of
    /// [`FaultPlan::random`]. After `stop_faults`, such a session's next `NEG-MSG` gets
    /// `NEG-ERR "closed: faults stopped"`.
    pub endless_negentropy: bool,
    /// New ids claimed per endless round.
    pub endless_ids_per_round: usize,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan::none(0)
    }
}

impl FaultPlan {
    /// Every fault off (counting only); add faults with struct update syntax.
    pub fn none(seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            drop: 0.0,
            drop_after_frames: None,
            stall: 0.0,
            delay: 0.0,
            max_delay: Duration::from_millis(200),
            reorder: 0.0,
            reorder_within_subscription: false,
            duplicate: 0.0,
            duplicate_any: false,
            garbage: 0.0,
            truncated: 0.0,
            oversized: 0.0,
            oversized_bytes: 1 << 20,
            notice: 0.0,
            closed: 0.0,
            forged: 0.0,
            forged_copies: 1,
            off_filter: 0.0,
            neg_err: 0.0,
            endless_negentropy: false,
            endless_ids_per_round: 64,
        }
    }

    /// The chaos mix: every fault of the list except endless negentropy, each at a rate
    /// drawn from `seed` between 0 and twice its base rate (so seeds differ in emphasis).
    /// At the base rates a connection lives for a few hundred frames.
    pub fn random(seed: u64) -> FaultPlan {
        let mut rng = SeededRng::new(seed ^ 0x6661_756c_7473);
        let mut rate = |base: f64| base * 2.0 * rng.unit();
        FaultPlan {
            drop: rate(0.003),
            stall: rate(0.0008),
            delay: rate(0.01),
            max_delay: Duration::from_millis(300),
            reorder: rate(0.02),
            duplicate: rate(0.02),
            garbage: rate(0.01),
            truncated: rate(0.005),
            oversized: rate(0.002),
            notice: rate(0.005),
            closed: rate(0.005),
            forged: rate(0.01),
            off_filter: rate(0.01),
            neg_err: rate(0.2),
            ..FaultPlan::none(seed)
        }
    }

    /// Only endless negentropy: every NEG-OPEN starts a session that never ends.
    pub fn endless_negentropy(seed: u64) -> FaultPlan {
        FaultPlan {
            endless_negentropy: true,
            ..FaultPlan::none(seed)
        }
    }
}

/// How many faults of each kind were injected (a snapshot of a relay's counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Connections dropped (`drop`, `drop_after_frames`).
    pub drops: u64,
    /// Connections stalled.
    pub stalls: u64,
    /// Pauses.
    pub delays: u64,
    /// Frames held back and sent after the next one.
    pub reorders: u64,
    /// Frames sent twice.
    pub duplicates: u64,
    /// Junk frames.
    pub garbage: u64,
    /// Truncated copies.
    pub truncated: u64,
    /// Oversized frames.
    pub oversized: u64,
    /// NOTICEs.
    pub notices: u64,
    /// CLOSEDs.
    pub closed: u64,
    /// Forged events.
    pub forged: u64,
    /// Off-filter events.
    pub off_filter: u64,
    /// NEG-ERR refusals.
    pub neg_errs: u64,
    /// Endless negentropy messages sent.
    pub endless_rounds: u64,
}

impl FaultCounts {
    /// Every fault injected, of any kind.
    pub fn total(&self) -> u64 {
        self.by_kind().iter().map(|(_, n)| n).sum()
    }

    /// Each kind with its count.
    pub fn by_kind(&self) -> [(&'static str, u64); 14] {
        [
            ("drops", self.drops),
            ("stalls", self.stalls),
            ("delays", self.delays),
            ("reorders", self.reorders),
            ("duplicates", self.duplicates),
            ("garbage", self.garbage),
            ("truncated", self.truncated),
            ("oversized", self.oversized),
            ("notices", self.notices),
            ("closed", self.closed),
            ("forged", self.forged),
            ("off_filter", self.off_filter),
            ("neg_errs", self.neg_errs),
            ("endless_rounds", self.endless_rounds),
        ]
    }

    /// Sum of two snapshots (e.g. over several relays).
    pub fn add(&self, other: &FaultCounts) -> FaultCounts {
        let mut sum = *self;
        for (field, n) in sum.fields_mut().into_iter().zip(other.by_kind()) {
            *field += n.1;
        }
        sum
    }

    fn fields_mut(&mut self) -> [&mut u64; 14] {
        [
            &mut self.drops,
            &mut self.stalls,
            &mut self.delays,
            &mut self.reorders,
            &mut self.duplicates,
            &mut self.garbage,
            &mut self.truncated,
            &mut self.oversized,
            &mut self.notices,
            &mut self.closed,
            &mut self.forged,
            &mut self.off_filter,
            &mut self.neg_errs,
            &mut self.endless_rounds,
        ]
    }
}

/// The counters behind [`FaultCounts`], and the ids of injected events.
#[derive(Default)]
pub(crate) struct FaultStats {
    counts: Mutex<FaultCounts>,
    injected: Mutex<Vec<EventId>>,
    /// Connections that got a fault generator (never reset: each gets its own stream).
    pub(crate) connections: AtomicU64,
}

impl FaultStats {
    /// Counts one fault.
    pub(crate) fn count(&self, field: impl FnOnce(&mut FaultCounts) -> &mut u64) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *field(&mut counts) += 1;
    }

    /// Remembers the id of an injected event.
    pub(crate) fn injected(&self, id: EventId) {
        let mut ids = self.injected.lock().unwrap_or_else(|e| e.into_inner());
        if ids.len() < INJECTED_IDS_KEPT {
            ids.push(id);
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn snapshot(&self) -> FaultCounts {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ids of every forged and off-filter event injected (the first 100 000).
    pub(crate) fn injected_ids(&self) -> Vec<EventId> {
        self.injected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts one endless negentropy message.
    pub(crate) fn endless_round(&self) {
        self.count(|c| &mut c.endless_rounds);
    }
}
