//! `--once`: wait until the whole job is done, then say how it ended.
//!
//! Done is [`job_done`] (the core's one answer, also the demo's) over both at once
//! (read one after the other): proactive sync's
//! [`SyncStatus::historic_sync_complete`] and, with purgatory, every held event
//! accounted for ([`PurgatoryStatus::all_accounted`]: released, expired, or reported
//! not fetchable with a reason) and every repository under the git root reconciled
//! since it last changed: each serves its maintainers' newest state and its pull
//! request tips, or is named with why not. Never a quiet period. The exit codes:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | done: every event synced, every purgatory event released (or expired), every repository serving its newest state |
//! | 5 | done on the reachable relays, but some relays were unreachable and not synced from (named on the last line; their events may be missing). Wins over 4 |
//! | 4 | done, but some events are held as not fetchable, or some repositories do not serve their newest state (named on the last line) |
//! | 3 | `--timeout` passed first (the last line names what is still held and why) |
//! | 1 | the sync stopped (or failed) before it was done |
//! | 130 | SIGINT or SIGTERM |
//!
//! The summary (a line per relay, purgatory's line, the final line) goes to stdout;
//! with `--summary-json` stdout gets the same as one JSON object instead
//! ([`summary_json`]) and the lines go to stderr.

use std::process::ExitCode;
use std::time::Duration;

use grasp_purgatory::{HeldRepository, Purgatory, PurgatoryStatus, Serving};
use grasp_sync_tokio::core::job::{job_done, JobExpectation, JobProgress};
use grasp_sync_tokio::{RelayStatus, SyncStatus};
use tokio::sync::watch;

use crate::status_json;

/// Exit code: done on the reachable relays, but some relays were unreachable.
pub(crate) const EXIT_UNREACHABLE: u8 = 5;
/// Exit code: done, but some held events are not fetchable.
pub(crate) const EXIT_NOT_FETCHABLE: u8 = 4;
/// Exit code: `--timeout` passed before the job was done.
pub(crate) const EXIT_TIMEOUT: u8 = 3;
/// Exit code: a signal stopped the wait.
const EXIT_SIGNAL: u8 = 130;

/// How long one wait for purgatory lasts before proactive sync is read again.
const RECHECK: Duration = Duration::from_secs(1);

/// At most this many repositories are named in a summary line.
const NAMED_IN_SUMMARY: usize = 5;

/// Both statuses at the moment the job was done.
struct Done {
    sync: SyncStatus,
    purgatory: Option<PurgatoryStatus>,
}

/// How a `--once` run ended; each has its exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Done everywhere.
    Complete,
    /// Done on the reachable relays; some were unreachable.
    Unreachable,
    /// Done, but events are held as not fetchable.
    NotFetchable,
    /// `--timeout` passed first.
    Timeout,
}

impl Outcome {
    /// Its exit code.
    fn code(self) -> u8 {
        match self {
            Outcome::Complete => 0,
            Outcome::Unreachable => EXIT_UNREACHABLE,
            Outcome::NotFetchable => EXIT_NOT_FETCHABLE,
            Outcome::Timeout => EXIT_TIMEOUT,
        }
    }

    /// Its name in the JSON summary.
    fn label(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Unreachable => "complete_on_reachable_relays",
            Outcome::NotFetchable => "not_fetchable",
            Outcome::Timeout => "timeout",
        }
    }
}

/// What a `--once` run prints at the end: its lines and how it ended.
struct Summary {
    lines: Vec<String>,
    outcome: Outcome,
}

/// Waits until done (see the module doc), `timeout` or `signal`; prints the summary
/// (as JSON on stdout with `json`) and returns the exit code.
pub(crate) async fn wait_once(
    status: &mut watch::Receiver<SyncStatus>,
    purgatory: Option<&Purgatory>,
    timeout: Duration,
    json: bool,
    signal: impl std::future::Future<Output = ()>,
) -> ExitCode {
    let (summary, sync, purgatory_status) = tokio::select! {
        done = tokio::time::timeout(timeout, wait_done(status, purgatory)) => match done {
            Ok(Ok(done)) => (report_done(&done), done.sync, done.purgatory),
            Ok(Err(_)) => {
                eprintln!("error: the sync stopped before historic sync completed");
                return ExitCode::FAILURE;
            }
            Err(_) => {
                let sync = status.borrow().clone();
                let held = purgatory.map(Purgatory::status_now);
                let line = timeout_line(timeout, &sync, held.clone());
                if !json {
                    // The reason on stderr too: a caller reading only stderr sees it.
                    eprintln!("{line}");
                }
                let summary = Summary { lines: vec![line], outcome: Outcome::Timeout };
                (summary, sync, held)
            }
        },
        () = signal => return ExitCode::from(EXIT_SIGNAL),
    };
    if json {
        for line in &summary.lines {
            eprintln!("{line}");
        }
        println!(
            "{}",
            summary_json(&sync, purgatory_status.as_ref(), summary.outcome)
        );
    } else {
        for line in &summary.lines {
            println!("{line}");
        }
    }
    ExitCode::from(summary.outcome.code())
}

/// The summary as one JSON object: the `/status` document (purgatory's under
/// `purgatory`) with `outcome` (`complete`, `complete_on_reachable_relays`,
/// `not_fetchable`, `timeout`), `exit_code` and `unreachable_relays` (their URLs).
fn summary_json(
    sync: &SyncStatus,
    purgatory: Option<&PurgatoryStatus>,
    outcome: Outcome,
) -> serde_json::Value {
    let mut json = status_json::status_document(sync, purgatory);
    json["outcome"] = outcome.label().into();
    json["exit_code"] = outcome.code().into();
    json["unreachable_relays"] = unreachable(sync)
        .map(|relay| serde_json::Value::from(relay.report.relay.as_str()))
        .collect();
    json
}

/// The relays historic sync did not wait for because they could not be reached.
fn unreachable(sync: &SyncStatus) -> impl Iterator<Item = &RelayStatus> {
    sync.relays.iter().filter(|relay| relay.report.unreachable)
}

/// Until the job is done ([`job_done`]: historic sync complete and purgatory has every
/// held event accounted for), both read one after the other. Each time historic sync
/// becomes complete, the repositories reported not fetchable are tried once more: their
/// announcements may have arrived with the sync since their last attempt.
async fn wait_done(
    status: &mut watch::Receiver<SyncStatus>,
    purgatory: Option<&Purgatory>,
) -> Result<Done, watch::error::RecvError> {
    let mut purgatory_status = purgatory.map(Purgatory::status);
    let mut retried = false;
    loop {
        let sync = status
            .wait_for(|status| status.historic_sync_complete)
            .await
            .map(|status| status.clone())?;
        let (Some(purgatory), Some(receiver)) = (purgatory, purgatory_status.as_mut()) else {
            let progress = JobProgress {
                historic_sync_complete: sync.historic_sync_complete,
                repositories: sync.repositories,
                purgatory: None,
            };
            if job_done(&progress, &JobExpectation::default()) {
                return Ok(Done {
                    sync,
                    purgatory: None,
                });
            }
            continue;
        };
        if !retried {
            purgatory.retry_not_fetchable();
            retried = true;
        }
        let accounted =
            tokio::time::timeout(RECHECK, receiver.wait_for(|status| status.all_accounted))
                .await
                .map(|waited| waited.map(|status| status.clone()));
        // Accounted for, or (not within the recheck) as it stands now.
        let purgatory_now = match accounted {
            Ok(Ok(status)) => status,
            Ok(Err(error)) => return Err(error),
            Err(_) => receiver.borrow().clone(),
        };
        // Both at once: the sync may have brought new work meanwhile.
        let still_complete = status.borrow().historic_sync_complete;
        let progress = JobProgress {
            historic_sync_complete: still_complete,
            repositories: sync.repositories,
            purgatory: Some(purgatory_now.progress()),
        };
        if job_done(&progress, &JobExpectation::default()) {
            return Ok(Done {
                sync,
                purgatory: Some(purgatory_now),
            });
        }
        if !still_complete {
            retried = false;
        }
    }
}

/// The report (a line per relay, then the purgatory's) and the final line: complete,
/// [`Outcome::Unreachable`] when relays were unreachable, or
/// [`Outcome::NotFetchable`] when events are held as not fetchable.
fn report_done(done: &Done) -> Summary {
    let mut lines = relay_lines(&done.sync);
    let mut outcome = Outcome::Complete;
    let mut last = "done: historic sync complete".to_owned();
    if let Some(purgatory) = &done.purgatory {
        lines.push(format!(
            "purgatory: {} events released, {} expired, {} objects fetched, {} repositories created, {} clone URLs on our own service skipped",
            purgatory.events_released,
            purgatory.events_expired,
            purgatory.oids_fetched,
            purgatory.repositories_created,
            purgatory.clone_urls_skipped_own_service
        ));
        lines.push(format!(
            "served: {} repositories, {} serving their newest state, {} behind, {} refs written in {} reconciliations",
            purgatory.repositories_served,
            purgatory.repositories_serving_newest,
            purgatory.repositories_behind,
            purgatory.refs_updated,
            purgatory.reconciliations
        ));
        if purgatory.events_held == 0 && purgatory.repositories_behind == 0 {
            last = "done: historic sync complete, every purgatory event released, every repository serving its newest state".to_owned();
        } else if purgatory.events_held == 0 {
            last = format!(
                "done, but {} repositories do not serve their newest state: {}",
                purgatory.repositories_behind,
                behind_named(purgatory)
            );
            outcome = Outcome::NotFetchable;
        } else {
            last = format!(
                "done, but {} held as not fetchable: {}",
                events(purgatory.events_held),
                named(
                    &purgatory.not_fetchable,
                    purgatory.not_fetchable_by_reason.values().sum()
                )
            );
            outcome = Outcome::NotFetchable;
        }
    }
    let unreachable: Vec<&str> = unreachable(&done.sync)
        .map(|relay| relay.report.relay.as_str())
        .collect();
    if !unreachable.is_empty() {
        if outcome == Outcome::NotFetchable {
            lines.push(last);
        }
        let count = unreachable.len();
        let shown = unreachable
            .iter()
            .take(NAMED_IN_SUMMARY)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        let more = if count > NAMED_IN_SUMMARY {
            format!(" and {} more", count - NAMED_IN_SUMMARY)
        } else {
            String::new()
        };
        let relays = if count == 1 { "relay" } else { "relays" };
        last = format!(
            "done on the reachable relays, but {count} {relays} unreachable and not synced from: {shown}{more}"
        );
        outcome = Outcome::Unreachable;
    }
    lines.push(last);
    Summary { lines, outcome }
}

/// The one line saying what is still not done after `timeout`.
fn timeout_line(
    timeout: Duration,
    sync: &SyncStatus,
    purgatory: Option<PurgatoryStatus>,
) -> String {
    let secs = timeout.as_secs();
    let purgatory = purgatory.filter(|status| !status.all_accounted);
    match purgatory {
        Some(status) => {
            let sync_part = if sync.historic_sync_complete {
                String::new()
            } else {
                "; historic sync not complete".to_owned()
            };
            if status.events_held == 0 {
                return format!(
                    "error: not complete after {secs}s: {} repositories being reconciled, {} behind: {}{sync_part}",
                    status.repositories_reconciling,
                    status.repositories_behind,
                    behind_named(&status)
                );
            }
            format!(
                "error: not complete after {secs}s: {} held: {}{sync_part}",
                events(status.events_held),
                named(
                    &waiting_first(&status),
                    status.repositories_waiting
                        + status.not_fetchable_by_reason.values().sum::<usize>()
                )
            )
        }
        None => format!(
            "error: historic sync not complete after {secs}s: {}",
            status_json::status_json(sync)
        ),
    }
}

/// The served repositories that are behind, with why (at most
/// [`NAMED_IN_SUMMARY`]).
fn behind_named(status: &PurgatoryStatus) -> String {
    let behind: Vec<String> = status
        .served
        .iter()
        .filter_map(|served| match &served.serving {
            Serving::Behind { reason, .. } => Some(format!("{} ({reason})", served.repo)),
            _ => None,
        })
        .take(NAMED_IN_SUMMARY)
        .collect();
    let more = status.repositories_behind.saturating_sub(behind.len());
    let mut text = behind.join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

/// The repositories still on their way, then the not fetchable ones.
fn waiting_first(status: &PurgatoryStatus) -> Vec<HeldRepository> {
    status
        .still_waiting
        .iter()
        .chain(&status.not_fetchable)
        .cloned()
        .collect()
}

/// `repo (why), repo (why)` for the first few, then `and N more`.
fn named(repositories: &[HeldRepository], total: usize) -> String {
    let mut text = repositories
        .iter()
        .take(NAMED_IN_SUMMARY)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let shown = repositories.len().min(NAMED_IN_SUMMARY);
    if total > shown {
        text.push_str(&format!(" and {} more repositories", total - shown));
    }
    text
}

/// `1 event` / `n events`.
fn events(count: usize) -> String {
    if count == 1 {
        "1 event".to_owned()
    } else {
        format!("{count} events")
    }
}

/// One line per relay.
fn relay_lines(status: &SyncStatus) -> Vec<String> {
    let mut lines = vec![format!(
        "historic sync complete: {} repositories, {} root events, {} events stored",
        status.repositories, status.root_events, status.engine.events_stored
    )];
    for relay in &status.relays {
        let state = if relay.report.unreachable {
            format!(
                "unreachable ({})",
                relay.report.last_error.as_deref().unwrap_or("no answer")
            )
        } else if relay.report.historic_confirmed {
            "confirmed".to_owned()
        } else {
            "not confirmed".to_owned()
        };
        lines.push(format!(
            "relay {}: {state}, {:?}, {} events received ({} of them again), {} bytes received",
            relay.report.relay,
            relay.report.method,
            relay.report.events_received,
            relay.report.events_received_again,
            relay.bytes_received
        ));
    }
    lines
}
