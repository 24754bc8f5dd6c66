//! Saving the purgatory to a file on shutdown and reading it back on start.
//!
//! One line per held event: `<held since, unix seconds> <origin> <event JSON>`, after a
//! header line. The file is written to a temporary name and renamed, so a crash while
//! saving leaves the previous file. Restored events are verified again; a line that
//! cannot be read is reported, never silently skipped.

use std::path::{Path, PathBuf};

use nostr::prelude::{Event, Timestamp};

use crate::held::{HeldEvent, Origin};

/// The first line of a purgatory file.
const HEADER: &str = "# grasp-purgatory v1";

/// One event read back from a purgatory file.
#[derive(Clone, Debug)]
pub struct SavedEvent {
    /// The event (signature verified).
    pub event: Event,
    /// Who handed it to purgatory.
    pub origin: Origin,
    /// When it entered purgatory.
    pub held_since: Timestamp,
}

/// A line of a purgatory file that could not be read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectedLine {
    /// 1-based line number.
    pub line: usize,
    /// Why it was refused.
    pub reason: String,
}

/// What [`load`] (or [`load_blocking`]) read.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Events read back.
    pub events: Vec<SavedEvent>,
    /// Lines refused.
    pub rejected: Vec<RejectedLine>,
}

/// Writes every held event to `path` (atomically, through a temporary file).
pub async fn save<'a>(
    path: &Path,
    events: impl IntoIterator<Item = &'a HeldEvent>,
) -> std::io::Result<()> {
    let mut text = format!("{HEADER}\n");
    for held in events {
        text.push_str(&format!(
            "{} {} {}\n",
            held.held_since.as_secs(),
            held.origin.as_str(),
            held.event.as_json()
        ));
    }
    let temporary = temporary_path(path);
    tokio::fs::write(&temporary, text).await?;
    tokio::fs::rename(&temporary, path).await
}

/// Reads a purgatory file. A missing file is an empty report.
pub async fn load(path: &Path) -> std::io::Result<LoadReport> {
    match tokio::fs::read_to_string(path).await {
        Ok(text) => Ok(parse(&text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(LoadReport::default()),
        Err(error) => Err(error),
    }
}

/// [`load`] without a runtime: reads the file with `std::fs`, blocking the thread.
pub fn load_blocking(path: &Path) -> std::io::Result<LoadReport> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(parse(&text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(LoadReport::default()),
        Err(error) => Err(error),
    }
}

/// Reads the lines of a purgatory file's text.
fn parse(text: &str) -> LoadReport {
    let mut report = LoadReport::default();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok(saved) => report.events.push(saved),
            Err(reason) => report.rejected.push(RejectedLine {
                line: index.saturating_add(1),
                reason,
            }),
        }
    }
    report
}

fn parse_line(line: &str) -> Result<SavedEvent, String> {
    let mut parts = line.splitn(3, ' ');
    let since = parts.next().unwrap_or_default();
    let origin = parts.next().unwrap_or_default();
    let json = parts.next().ok_or("missing event")?;
    let held_since = since
        .parse::<u64>()
        .map(Timestamp::from_secs)
        .map_err(|_| format!("bad time {since:?}"))?;
    let origin = Origin::parse(origin).ok_or_else(|| format!("bad origin {origin:?}"))?;
    let event = Event::from_json(json).map_err(|error| format!("bad event: {error}"))?;
    event
        .verify()
        .map_err(|error| format!("event {} does not verify: {error}", event.id))?;
    Ok(SavedEvent {
        event,
        origin,
        held_since,
    })
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}
