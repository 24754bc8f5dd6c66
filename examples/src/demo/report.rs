//! The summary table and the final check: the own relay holds exactly the
//! expected events, and the bare repositories hold every referenced commit
//! with its whole history.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use grasp_purgatory::PurgatoryStatus;
use grasp_sync_tokio::SyncStatus;
use nostr::prelude::{Event, EventId, RelayUrl};

use crate::dataset::DataSet;
use crate::git_support::git_command;
use crate::progress::{human_bytes, method_name, sorted_relays, Confirmations};
use crate::world::World;

/// Differences listed at most, per direction.
const DIFF_SHOWN: usize = 10;

/// Prints the per-relay table and the purgatory line on stdout.
pub(crate) fn print_summary(
    world: &World,
    names: &BTreeMap<RelayUrl, String>,
    status: &SyncStatus,
    purgatory: &PurgatoryStatus,
    confirmations: &Confirmations,
) {
    println!();
    println!(
        "{:<9}  {:<34}  {:<6}  {:>8}  {:>7}  {:>10}  {:>5}  {:>9}  confirmed",
        "relay", "what it does", "method", "received", "stored", "bytes in", "REQs", "NEG-OPENs"
    );
    for relay in sorted_relays(status, names) {
        let remote = world
            .remotes
            .iter()
            .find(|remote| remote.relay.url() == relay.report.relay);
        let (name, description, reqs, negs) = match remote {
            Some(remote) => (
                remote.name.to_owned(),
                remote.description.clone(),
                remote.relay.reqs_seen().to_string(),
                remote.relay.neg_opens_seen().to_string(),
            ),
            None => (
                relay.report.relay.to_string(),
                String::new(),
                "-".into(),
                "-".into(),
            ),
        };
        let confirmed = match (
            relay.report.historic_confirmed,
            confirmations.get(&relay.report.relay),
        ) {
            (true, Some(at)) => format!("yes, {:.1} s after the start", at.as_secs_f64()),
            (true, None) => "yes".to_owned(),
            (false, _) if relay.report.unreachable => "no (unreachable)".to_owned(),
            (false, _) => "no".to_owned(),
        };
        println!(
            "{name:<9}  {description:<34}  {:<6}  {:>8}  {:>7}  {:>10}  {reqs:>5}  {negs:>9}  {confirmed}",
            method_name(relay.report.method),
            relay.report.events_received,
            relay.report.events_stored,
            human_bytes(relay.bytes_received),
        );
    }
    let fetches = world.git.stats().fetches();
    println!(
        "purgatory: {} objects fetched in {fetches} git fetches, {} events released, \
         {} expired, {} still held",
        purgatory.oids_fetched,
        purgatory.events_released,
        purgatory.events_expired,
        purgatory.events_held,
    );
    println!(
        "sync: {} repositories, {} root events, {} events stored by the sync",
        status.repositories, status.root_events, status.engine.events_stored,
    );
}

/// Checks the own relay's content against `expected` and the repositories
/// against the referenced commits; prints the result (and any difference).
/// `true` if both hold.
pub(crate) async fn check(
    world: &World,
    data: &DataSet,
    expected: &BTreeSet<EventId>,
) -> Result<bool, String> {
    let held = world.own.event_ids().await?;
    let events = all_events(data);
    let missing: Vec<&EventId> = expected.difference(&held).collect();
    let unexpected: Vec<&EventId> = held.difference(expected).collect();
    let events_ok = missing.is_empty() && unexpected.is_empty();
    println!();
    if events_ok {
        println!(
            "check: the own relay holds exactly the {} expected events \
             ({} noise events on the remotes left alone)",
            expected.len(),
            data.noise.len()
        );
    } else {
        println!(
            "check FAILED: the own relay holds {} events, {} expected: {} missing, {} unexpected",
            held.len(),
            expected.len(),
            missing.len(),
            unexpected.len()
        );
        show("missing", &missing, &events, data, world);
        show("unexpected", &unexpected, &events, data, world);
    }
    let (present, absent) = commits(data);
    let commits_ok = absent.is_empty();
    if commits_ok {
        println!(
            "check: the {} bare repositories hold all {present} referenced commits with their history",
            data.repos.len()
        );
    } else {
        println!(
            "check FAILED: {} of {} referenced commits missing from the bare repositories",
            absent.len(),
            present + absent.len()
        );
        for (repo, oid) in absent.iter().take(DIFF_SHOWN) {
            println!("  missing commit {oid} in {repo}");
        }
    }
    Ok(events_ok && commits_ok)
}

/// Every generated event by id.
fn all_events(data: &DataSet) -> BTreeMap<EventId, &Event> {
    data.remote_events
        .iter()
        .flatten()
        .chain(&data.own_announcements)
        .map(|event| (event.id, event))
        .collect()
}

/// Lists up to [`DIFF_SHOWN`] ids with their kind, content and the remotes
/// that hold them.
fn show(
    what: &str,
    ids: &[&EventId],
    events: &BTreeMap<EventId, &Event>,
    data: &DataSet,
    world: &World,
) {
    for id in ids.iter().take(DIFF_SHOWN) {
        match events.get(*id) {
            Some(event) => {
                let on: Vec<&str> = world
                    .remotes
                    .iter()
                    .zip(&data.remote_events)
                    .filter(|(_, held)| held.iter().any(|e| e.id == event.id))
                    .map(|(remote, _)| remote.name)
                    .collect();
                let content: String = event.content.chars().take(40).collect();
                println!(
                    "  {what} {id} kind {} on {} {content:?}",
                    event.kind.as_u16(),
                    if on.is_empty() {
                        "the own relay".to_owned()
                    } else {
                        on.join("+")
                    }
                );
            }
            None => println!("  {what} {id} (not generated by the demo)"),
        }
    }
    if ids.len() > DIFF_SHOWN {
        println!("  ... and {} more {what}", ids.len() - DIFF_SHOWN);
    }
}

/// Referenced commits present (count) and absent (repository, commit).
/// Present means the commit and its whole history are in the repository.
fn commits(data: &DataSet) -> (usize, Vec<(String, String)>) {
    let mut present = 0;
    let mut absent = Vec::new();
    for repo in &data.repos {
        for oid in &repo.oids {
            let complete = git_command(&repo.local)
                .args(["rev-list", "--objects", "--quiet", oid.as_str(), "--"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if complete {
                present += 1;
            } else {
                absent.push((repo.identifier.clone(), oid.clone()));
            }
        }
    }
    (present, absent)
}

/// The verdict and how long the whole run and the sync took.
pub(crate) fn print_elapsed(total: Duration, sync: Duration, passed: bool) {
    println!(
        "{} in {:.1} s (sync, purgatory and the check: {:.1} s)",
        if passed { "PASSED" } else { "FAILED" },
        total.as_secs_f64(),
        sync.as_secs_f64(),
    );
}
