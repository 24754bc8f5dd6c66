//! Live progress on stderr from the status watches: a line for the sync, one
//! per relay and one for purgatory, redrawn in place every 250 ms on a
//! terminal (printed once a second when they changed otherwise). It also
//! records when each relay's historic sync was confirmed.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use grasp_purgatory::PurgatoryStatus;
use grasp_sync_tokio::core::model::{ConnectionStatus, SyncMethod};
use grasp_sync_tokio::{RelayStatus, SyncStatus};
use nostr::prelude::RelayUrl;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Redraw interval on a terminal.
const TERMINAL_REFRESH: Duration = Duration::from_millis(250);
/// Print interval when stderr is not a terminal.
const LOG_REFRESH: Duration = Duration::from_secs(1);

/// When each relay's historic sync was last seen becoming confirmed, since
/// the start.
pub(crate) type Confirmations = BTreeMap<RelayUrl, Duration>;

/// The running progress display; [`Progress::finish`] stops it.
pub(crate) struct Progress {
    /// Tells the display to draw once more and stop.
    stop: watch::Sender<bool>,
    /// The display task.
    task: JoinHandle<Confirmations>,
}

impl Progress {
    /// Starts the display; `names` gives a relay's short name.
    pub(crate) fn start(
        status: watch::Receiver<SyncStatus>,
        purgatory: watch::Receiver<PurgatoryStatus>,
        names: BTreeMap<RelayUrl, String>,
        started: Instant,
    ) -> Progress {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(display(status, purgatory, names, started, stopped));
        Progress { stop, task }
    }

    /// Draws the final state and returns the confirmation times.
    pub(crate) async fn finish(self) -> Confirmations {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The display loop.
async fn display(
    mut status: watch::Receiver<SyncStatus>,
    mut purgatory: watch::Receiver<PurgatoryStatus>,
    names: BTreeMap<RelayUrl, String>,
    started: Instant,
    mut stopped: watch::Receiver<bool>,
) -> Confirmations {
    let terminal = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(if terminal {
        TERMINAL_REFRESH
    } else {
        LOG_REFRESH
    });
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut confirmed = Confirmations::new();
    let mut drawn: Vec<String> = Vec::new();
    let mut printed_lines = 0;
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            changed = status.changed() => {
                note_confirmations(&status.borrow_and_update(), started, &mut confirmed);
                if changed.is_err() { true } else { continue }
            }
            _ = stopped.changed() => true,
        };
        note_confirmations(&status.borrow(), started, &mut confirmed);
        let lines = render(
            &status.borrow(),
            &purgatory.borrow_and_update(),
            &names,
            started.elapsed(),
        );
        // Elapsed time aside, did anything change?
        let changed = lines.iter().skip(1).ne(drawn.iter().skip(1));
        if terminal || changed || last {
            let mut err = std::io::stderr().lock();
            if terminal {
                if printed_lines > 0 {
                    // Back to the first line drawn, and clear to the end.
                    let _ = write!(err, "\x1b[{printed_lines}A\r\x1b[J");
                }
                // No line wrapping while drawing: one line is one row.
                let _ = write!(err, "\x1b[?7l");
            }
            for line in &lines {
                let _ = writeln!(err, "{line}");
            }
            let _ = write!(err, "{}", if terminal { "\x1b[?7h" } else { "\n" });
            printed_lines = lines.len();
            drawn = lines;
        }
        if last {
            return confirmed;
        }
    }
}

/// Records when each relay became confirmed (new work on a confirmed relay
/// makes it unconfirmed again: the last confirmation counts).
fn note_confirmations(status: &SyncStatus, started: Instant, confirmed: &mut Confirmations) {
    for relay in &status.relays {
        if relay.report.historic_confirmed {
            confirmed
                .entry(relay.report.relay.clone())
                .or_insert_with(|| started.elapsed());
        } else {
            confirmed.remove(&relay.report.relay);
        }
    }
}

/// The progress lines.
fn render(
    status: &SyncStatus,
    purgatory: &PurgatoryStatus,
    names: &BTreeMap<RelayUrl, String>,
    elapsed: Duration,
) -> Vec<String> {
    let sync = if status.repositories == 0 {
        "waiting for a repository"
    } else if status.historic_sync_complete {
        "historic sync complete"
    } else {
        "historic sync running"
    };
    let mut lines = vec![format!(
        "[{:>5.1}s] {sync}: {} repos, {} roots, {}/{} relays up, {} stored, {} to store",
        elapsed.as_secs_f64(),
        status.repositories,
        status.root_events,
        status.relays_connected,
        status.relays_tracked,
        status.engine.events_stored,
        status.unconfirmed_stores,
    )];
    for relay in sorted_relays(status, names) {
        lines.push(relay_line(relay, names));
    }
    let domains: Vec<String> = purgatory
        .fetches_by_domain
        .iter()
        .map(|(domain, fetches)| format!("{domain}: {fetches}"))
        .collect();
    lines.push(format!(
        "  purgatory {:<13} held {}, released {}, expired {}, queued {}, {} objects, \
         fetching {}{}",
        if purgatory.all_accounted {
            "accounted"
        } else {
            "busy"
        },
        purgatory.events_held,
        purgatory.events_released,
        purgatory.events_expired,
        purgatory.identifiers_queued,
        purgatory.oids_fetched,
        purgatory.fetches_in_flight,
        if domains.is_empty() {
            String::new()
        } else {
            format!(" ({})", domains.join(", "))
        },
    ));
    lines
}

/// The relays of `status`, by name.
pub(crate) fn sorted_relays<'a>(
    status: &'a SyncStatus,
    names: &BTreeMap<RelayUrl, String>,
) -> Vec<&'a RelayStatus> {
    let mut relays: Vec<&RelayStatus> = status.relays.iter().collect();
    relays.sort_by_key(|relay| names.get(&relay.report.relay).cloned());
    relays
}

/// One relay's progress line.
fn relay_line(relay: &RelayStatus, names: &BTreeMap<RelayUrl, String>) -> String {
    let name = names
        .get(&relay.report.relay)
        .cloned()
        .unwrap_or_else(|| relay.report.relay.to_string());
    let state = if relay.report.historic_confirmed {
        "confirmed".to_owned()
    } else if relay.report.unreachable {
        format!(
            "unreachable ({})",
            relay.report.last_error.as_deref().unwrap_or("no answer")
        )
    } else {
        "syncing".to_owned()
    };
    format!(
        "  {name:<9} {state:<13} {:<12} {:<6} {:>5} events, {:>9}",
        connection_name(relay.report.connection),
        method_name(relay.report.method),
        relay.report.events_received,
        human_bytes(relay.bytes_received),
    )
}

/// A connection state in a word.
pub(crate) fn connection_name(connection: ConnectionStatus) -> &'static str {
    match connection {
        ConnectionStatus::Connected => "connected",
        ConnectionStatus::Connecting => "connecting",
        ConnectionStatus::Disconnected => "disconnected",
    }
}

/// `NIP-77` or `REQ`.
pub(crate) fn method_name(method: SyncMethod) -> &'static str {
    match method {
        SyncMethod::Negentropy => "NIP-77",
        SyncMethod::ReqEose => "REQ",
        _ => "other",
    }
}

/// Bytes in B, KiB or MiB.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let value = bytes as f64;
    if value >= KIB * KIB {
        format!("{:.1} MiB", value / KIB / KIB)
    } else if value >= KIB {
        format!("{:.1} KiB", value / KIB)
    } else {
        format!("{bytes} B")
    }
}
