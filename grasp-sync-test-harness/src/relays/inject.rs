//! The fault decisions of one connection ([`ConnFaults`]), made without I/O: for each relay
//! frame the proxy gets a list of [`Out`] actions (frames to the client, a CLOSE to the
//! relay, a pause, a drop, a stall) and executes them in order. Every decision comes from
//! one [`SeededRng`] per connection, seeded from the plan's seed and the connection's
//! number, so the same frames on the same connection meet the same faults.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use nostr::prelude::*;

use super::endless;
use super::faults::{FaultPlan, FaultStats, NIP01_PREFIXES};
use super::rng::SeededRng;

/// Prefixes of injected `NEG-ERR` refusals (NIP-77 uses `blocked:` and `closed:`).
const NEG_ERR_PREFIXES: [&str; 6] = [
    "blocked:",
    "closed:",
    "error:",
    "rate-limited:",
    "restricted:",
    "invalid:",
];

/// What the proxy does, in order, for one relay frame.
#[derive(Debug)]
pub(crate) enum Out {
    /// A text frame to the client (`true`: an EVENT, for the counters).
    Text(String, bool),
    /// A binary frame to the client.
    Binary(Vec<u8>),
    /// A text frame to the relay.
    Upstream(String),
    /// Flush, then pause.
    Pause(Duration),
    /// Drop the connection now.
    Drop,
    /// Stall the connection now.
    Stall,
}

/// What the proxy does with a client frame.
#[derive(Debug)]
pub(crate) enum ClientVerdict {
    /// Not decided here: forward (or apply the NIP-77 mode).
    Pass,
    /// Answer the client; do not forward.
    Reply(String),
    /// Do not forward, answer nothing.
    Swallow,
}

/// A frame held back by `reorder`.
struct Held {
    text: String,
    is_event: bool,
    sub: Option<String>,
}

/// The fault state of one connection.
pub(crate) struct ConnFaults {
    plan: Option<FaultPlan>,
    rng: SeededRng,
    frames: u64,
    /// A frame held back by `reorder`.
    held: Option<Held>,
    /// Subscriptions closed by an injected CLOSED, until the client opens them again.
    killed: HashSet<String>,
    /// Endless negentropy sessions and their round.
    endless: HashMap<String, u64>,
    keys: Option<Keys>,
}

impl ConnFaults {
    /// The state of a new connection (no plan: nothing is ever injected).
    pub(crate) fn new(plan: Option<&FaultPlan>, stats: &FaultStats) -> ConnFaults {
        let n = stats.connections.fetch_add(1, Ordering::SeqCst);
        let seed = plan.map_or(0, |plan| plan.seed);
        ConnFaults {
            plan: plan.cloned(),
            rng: SeededRng::new(seed ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03)),
            frames: 0,
            held: None,
            killed: HashSet::new(),
            endless: HashMap::new(),
            keys: None,
        }
    }

    /// A client frame of type `kind` for `sub` (NIP-77 and REQ are looked at); `active`:
    /// faults are on.
    pub(crate) fn on_client(
        &mut self,
        kind: &str,
        sub: Option<&str>,
        active: bool,
        stats: &FaultStats,
    ) -> ClientVerdict {
        let Some(plan) = &self.plan else {
            return ClientVerdict::Pass;
        };
        let sub = sub.unwrap_or_default();
        match kind {
            "REQ" => {
                self.killed.remove(sub);
                ClientVerdict::Pass
            }
            "NEG-OPEN" if active && plan.endless_negentropy => {
                self.endless.insert(sub.to_owned(), 0);
                ClientVerdict::Reply(self.endless_reply(sub, stats))
            }
            "NEG-MSG" if self.endless.contains_key(sub) => {
                if active {
                    ClientVerdict::Reply(self.endless_reply(sub, stats))
                } else {
                    self.endless.remove(sub);
                    ClientVerdict::Reply(neg_err(sub, "closed: faults stopped"))
                }
            }
            "NEG-CLOSE" if self.endless.remove(sub).is_some() => ClientVerdict::Swallow,
            "NEG-OPEN" if active && self.rng.chance(plan.neg_err) => {
                stats.count(|c| &mut c.neg_errs);
                let prefix = self.rng.pick(&NEG_ERR_PREFIXES);
                ClientVerdict::Reply(neg_err(sub, &format!("{prefix} chaos")))
            }
            _ => ClientVerdict::Pass,
        }
    }

    fn endless_reply(&mut self, sub: &str, stats: &FaultStats) -> String {
        let per_round = self.plan.as_ref().map_or(0, |p| p.endless_ids_per_round);
        let round = self.endless.entry(sub.to_owned()).or_insert(0);
        *round += 1;
        stats.endless_round();
        let message = endless::message(&mut self.rng, per_round);
        serde_json::json!(["NEG-MSG", sub, hex::encode(&message)]).to_string()
    }

    /// Whether the relay's frames for `sub` are dropped (closed by an injected CLOSED).
    pub(crate) fn is_killed(&self, sub: &str) -> bool {
        self.killed.contains(sub)
    }

    /// The actions for one relay frame `text` of type `kind` for `sub` (`open`: the
    /// connection's open REQs, updated when a CLOSED is injected); `active`: faults are on.
    pub(crate) fn on_relay(
        &mut self,
        text: String,
        kind: &str,
        sub: Option<&str>,
        open: &mut HashSet<String>,
        active: bool,
        stats: &FaultStats,
    ) -> Vec<Out> {
        let is_event = kind == "EVENT";
        let Some(plan) = self.plan.clone().filter(|_| active) else {
            return self.forward(text, is_event, sub, None, stats);
        };
        self.frames += 1;
        let rng = &mut self.rng;
        if plan.drop_after_frames.is_some_and(|n| self.frames >= n) || rng.chance(plan.drop) {
            stats.count(|c| &mut c.drops);
            return vec![Out::Drop];
        }
        if rng.chance(plan.stall) {
            stats.count(|c| &mut c.stalls);
            return vec![Out::Stall];
        }
        let mut out = Vec::new();
        if rng.chance(plan.delay) {
            stats.count(|c| &mut c.delays);
            let ms = rng.below(plan.max_delay.as_millis() as u64 + 1);
            out.push(Out::Pause(Duration::from_millis(ms)));
        }
        if rng.chance(plan.garbage) {
            stats.count(|c| &mut c.garbage);
            out.push(garbage(rng));
        }
        if rng.chance(plan.truncated) && text.len() > 1 {
            stats.count(|c| &mut c.truncated);
            let mut cut = 1 + rng.below(text.len() as u64 - 1) as usize;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push(Out::Text(text[..cut].to_owned(), false));
        }
        if rng.chance(plan.oversized) {
            stats.count(|c| &mut c.oversized);
            // `["NOTICE","` and `"]` around the padding: the frame is `oversized_bytes` long.
            let padding = "x".repeat(plan.oversized_bytes.saturating_sub(13));
            out.push(Out::Text(format!(r#"["NOTICE","{padding}"]"#), false));
        }
        if rng.chance(plan.notice) {
            stats.count(|c| &mut c.notices);
            let prefix = rng.pick(&NIP01_PREFIXES);
            let notice = serde_json::json!(["NOTICE", format!("{prefix} chaos")]);
            out.push(Out::Text(notice.to_string(), false));
        }
        let Some(sub) = sub else {
            out.extend(self.forward(text, is_event, None, Some(&plan), stats));
            return out;
        };
        let subscription_frame = is_event || kind == "EOSE";
        if subscription_frame && open.contains(sub) && rng.chance(plan.closed) {
            stats.count(|c| &mut c.closed);
            let prefix = rng.pick(&NIP01_PREFIXES);
            let closed = serde_json::json!(["CLOSED", sub, format!("{prefix} chaos")]);
            if self
                .held
                .as_ref()
                .is_some_and(|held| held.sub.as_deref() == Some(sub))
            {
                // Held back from this subscription: it goes out before its CLOSED.
                out.extend(self.release());
            }
            out.push(Out::Text(closed.to_string(), false));
            out.push(Out::Upstream(serde_json::json!(["CLOSE", sub]).to_string()));
            open.remove(sub);
            self.killed.insert(sub.to_owned());
            return out;
        }
        if is_event && rng.chance(plan.forged) {
            for _ in 0..plan.forged_copies {
                if let Some(forged) = forge(&text, rng) {
                    stats.count(|c| &mut c.forged);
                    stats.injected(forged.id);
                    out.push(Out::Text(event_frame(sub, &forged), true));
                }
            }
        }
        if is_event && rng.chance(plan.off_filter) {
            let keys = self.keys.get_or_insert_with(|| self.rng.keys());
            let n = self.frames;
            let note = EventBuilder::new(Kind::TextNote, format!("off-filter chaos {n}"))
                .finalize(keys)
                .expect("sign an off-filter note");
            stats.count(|c| &mut c.off_filter);
            stats.injected(note.id);
            out.push(Out::Text(event_frame(sub, &note), true));
        }
        out.extend(self.forward(text, is_event, Some(sub), Some(&plan), stats));
        out
    }

    /// Forward `text` (of subscription `sub`), applying reorder and duplicate (with a
    /// plan); a frame held back before goes out after it (before it when both belong to one
    /// subscription, unless the plan allows that swap). Without a plan (or with faults off)
    /// the held frame, if any, goes out first: no new reordering.
    fn forward(
        &mut self,
        text: String,
        is_event: bool,
        sub: Option<&str>,
        plan: Option<&FaultPlan>,
        stats: &FaultStats,
    ) -> Vec<Out> {
        let Some(plan) = plan else {
            let mut out: Vec<Out> = self.release().into_iter().collect();
            out.push(Out::Text(text, is_event));
            return out;
        };
        if self.held.is_none() && self.rng.chance(plan.reorder) {
            self.held = Some(Held {
                text,
                is_event,
                sub: sub.map(str::to_owned),
            });
            return Vec::new();
        }
        let mut out = Vec::new();
        let same_subscription = self
            .held
            .as_ref()
            .is_some_and(|held| held.sub.is_some() && held.sub.as_deref() == sub);
        if same_subscription && !plan.reorder_within_subscription {
            out.extend(self.release());
        }
        out.push(Out::Text(text.clone(), is_event));
        if (is_event || plan.duplicate_any) && self.rng.chance(plan.duplicate) {
            stats.count(|c| &mut c.duplicates);
            out.push(Out::Text(text, is_event));
        }
        if let Some(held) = self.release() {
            stats.count(|c| &mut c.reorders);
            out.push(held);
        }
        out
    }

    /// The frame held back by `reorder`, if any: the proxy sends it at the end of a burst
    /// at the latest (it is then not counted as reordered).
    pub(crate) fn release(&mut self) -> Option<Out> {
        self.held
            .take()
            .map(|held| Out::Text(held.text, held.is_event))
    }
}

fn neg_err(sub: &str, message: &str) -> String {
    serde_json::json!(["NEG-ERR", sub, message]).to_string()
}

fn event_frame(sub: &str, event: &Event) -> String {
    let sub = serde_json::to_string(sub).expect("string to JSON");
    format!(r#"["EVENT",{sub},{}]"#, event.as_json())
}

/// A frame that is not a relay message.
fn garbage(rng: &mut SeededRng) -> Out {
    const SHAPES: [&str; 10] = [
        "null",
        "[]",
        "{}",
        "42",
        r#"["EVENT"]"#,
        r#"["EOSE"]"#,
        r#"["EVENT","x",{"id":"zz"}]"#,
        r#"["NEG-MSG","x","not hex"]"#,
        r#"["OK","nope",true]"#,
        "not json at all",
    ];
    match rng.below(SHAPES.len() as u64 + 2) as usize {
        n if n < SHAPES.len() => Out::Text(SHAPES[n].to_owned(), false),
        n if n == SHAPES.len() => {
            let len = 1 + rng.below(200) as usize;
            let junk: String = (0..len)
                .map(|_| char::from(b' ' + rng.below(95) as u8))
                .collect();
            Out::Text(junk, false)
        }
        _ => Out::Binary(rng.bytes32().to_vec()),
    }
}

/// A forged copy of the event in the EVENT frame `text`: content changed, id kept (so
/// it no longer matches) or recomputed (so the signature no longer matches).
fn forge(text: &str, rng: &mut SeededRng) -> Option<Event> {
    let frame: serde_json::Value = serde_json::from_str(text).ok()?;
    let event = Event::from_json(frame.get(2)?.to_string()).ok()?;
    let content = format!("forged chaos {}", rng.next_u64());
    let id = if rng.chance(0.5) {
        event.id
    } else {
        EventId::compute(
            &event.pubkey,
            &event.created_at,
            &event.kind,
            &event.tags,
            &content,
        )
    };
    Some(Event::new(
        id,
        event.pubkey,
        event.created_at,
        event.kind,
        event.tags.to_vec(),
        content,
        event.sig,
    ))
}
