//! The purgatory journal: every event entering and leaving purgatory, appended as it
//! happens, so a crash loses nothing that was accepted.
//!
//! # Format
//!
//! A header line, then one record per line:
//!
//! - `+ <held since, unix seconds> <origin> <event JSON>`: the event entered purgatory;
//! - `- <event id> <why>`: it left (`released`, `expired` or `replaced`).
//!
//! Lines of the version 1 file (`<held since> <origin> <event JSON>`, written at clean
//! shutdown by earlier versions) are read as `+` records.
//!
//! # Durability
//!
//! Each record is written with one `write` call on a file opened for appending, before
//! the caller is told the event is held: once [`Purgatory::add`](crate::Purgatory::add)
//! returns, the record is in the operating system's page cache and survives the process
//! being killed (SIGKILL, a panic, an abort). It is *flushed*, not `fsync`ed, per write:
//! an `fsync` takes milliseconds on most disks and would block a runtime thread for every
//! event of a sync burst. The run loop `fsync`s the journal at most once per
//! [`SYNC_INTERVAL`] (on a blocking thread) when something was written, and at shutdown,
//! so a power failure or kernel crash loses at most the last second of records.
//!
//! # Damage
//!
//! A write that fails (a full disk) may leave part of a record behind: the journal cuts
//! the file back to its last complete record, or, if even that fails, starts the next
//! record on a line of its own, so the next record is never glued to a torn one and
//! lost. On replay, a line that is not UTF-8, does not parse, or is the torn end of the
//! file (no newline after it) is skipped and reported ([`RejectedLine`]); every other
//! record is kept, so one damaged record never stops the purgatory from starting.
//!
//! # Compaction
//!
//! The journal is rewritten to hold only the live events when the purgatory is built
//! (after replaying it) and whenever it holds more than [`COMPACT_FACTOR`] times the live
//! events plus [`COMPACT_SLACK`] records, or more than [`COMPACT_FACTOR`] times the live
//! events' bytes plus [`COMPACT_SLACK_BYTES`]: with the held events bounded in bytes
//! ([`HeldLimits`](crate::HeldLimits)), so is the journal. The live set is written to a
//! temporary file and `fsync`ed while records keep being appended to the old file (and remembered);
//! then the remembered records are appended to the new file, which is `fsync`ed and
//! renamed over the old one. A crash at any point leaves a complete journal.
//!
//! Replaying verifies every event's signature again; a line that cannot be read is
//! reported ([`RejectedLine`]), never silently skipped.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nostr::prelude::{Event, EventId, Timestamp};

use crate::held::{HeldEvent, Origin};

/// The first line of a journal.
const HEADER: &str = "# grasp-purgatory journal v2";

/// The journal is compacted when it holds more than this many times the live events...
pub const COMPACT_FACTOR: usize = 4;

/// ...plus this many records (so a small purgatory is not rewritten over and over).
pub const COMPACT_SLACK: usize = 1024;

/// ...or more than [`COMPACT_FACTOR`] times the live records' bytes plus this many bytes.
pub const COMPACT_SLACK_BYTES: u64 = 1024 * 1024;

/// The longest time a written record waits for its `fsync`.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Why an event left purgatory, as written in its `-` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Its git data arrived and the sink took it.
    Released,
    /// It waited longer than the expiry time.
    Expired,
    /// A newer state of the same author and repository replaced it.
    Replaced,
    /// Its git data arrived, and the sink refused it for good
    /// ([`ReleaseError::Refused`](crate::ReleaseError::Refused)).
    Refused,
    /// Purgatory was full and its author held the most: it made room for another
    /// author's event.
    Evicted,
}

impl Removal {
    fn as_str(self) -> &'static str {
        match self {
            Removal::Released => "released",
            Removal::Expired => "expired",
            Removal::Replaced => "replaced",
            Removal::Refused => "refused",
            Removal::Evicted => "evicted",
        }
    }
}

/// One event read back from a journal.
#[derive(Clone, Debug)]
pub struct SavedEvent {
    /// The event (signature verified).
    pub event: Event,
    /// Who handed it to purgatory.
    pub origin: Origin,
    /// When it entered purgatory.
    pub held_since: Timestamp,
}

/// A line of a journal that could not be read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectedLine {
    /// 1-based line number (0: the event was read but refused when held again).
    pub line: usize,
    /// Why it was refused.
    pub reason: String,
}

/// What [`replay`] read.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Events still held when the journal ends, in the order they entered.
    pub live: Vec<SavedEvent>,
    /// Events the journal saw enter and leave (their repositories may keep stale refs).
    pub left: Vec<SavedEvent>,
    /// Lines refused.
    pub rejected: Vec<RejectedLine>,
}

/// Reads the journal at `path` (a missing file is an empty journal), blocking the thread.
/// Only reading the file can fail: damaged records are skipped and listed in
/// [`Replay::rejected`].
pub fn replay(path: &Path) -> std::io::Result<Replay> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse(&bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Replay::default()),
        Err(error) => Err(error),
    }
}

/// Applies the records of a journal's bytes in order, skipping (and listing) the lines
/// that cannot be read.
fn parse(bytes: &[u8]) -> Replay {
    let mut live: Vec<Option<SavedEvent>> = Vec::new();
    let mut index: HashMap<EventId, usize> = HashMap::new();
    let mut replay = Replay::default();
    let mut lines = bytes.split(|byte| *byte == b'\n').peekable();
    let mut line_number = 0usize;
    while let Some(line) = lines.next() {
        line_number = line_number.saturating_add(1);
        let torn = lines.peek().is_none();
        let Some(result) = read_line(line, torn) else {
            continue;
        };
        match result {
            Ok(Record::Added(saved)) => {
                if let std::collections::hash_map::Entry::Vacant(slot) = index.entry(saved.event.id)
                {
                    slot.insert(live.len());
                    live.push(Some(saved));
                }
            }
            Ok(Record::Removed(id)) => {
                if let Some(saved) = index.remove(&id).and_then(|at| live[at].take()) {
                    replay.left.push(saved);
                }
            }
            Err(reason) => replay.rejected.push(RejectedLine {
                line: line_number,
                reason,
            }),
        }
    }
    replay.live = live.into_iter().flatten().collect();
    replay
}

enum Record {
    Added(SavedEvent),
    Removed(EventId),
}

/// The record one line of a journal holds: `None` for a blank or comment line, an error
/// for a line that is not UTF-8, is `torn` (the file's end without a newline after it:
/// a write cut short) or does not parse.
fn read_line(line: &[u8], torn: bool) -> Option<Result<Record, String>> {
    let line = match std::str::from_utf8(line) {
        Ok(line) => line.strip_suffix('\r').unwrap_or(line),
        Err(error) => {
            return Some(Err(format!(
                "not UTF-8 (from byte {})",
                error.valid_up_to()
            )))
        }
    };
    if line.trim().is_empty() || line.starts_with('#') {
        return None;
    }
    if torn {
        return Some(Err(
            "torn record: the journal ends without a newline after it".to_owned(),
        ));
    }
    Some(match line.split_once(' ') {
        Some(("+", added)) => parse_added(added).map(Record::Added),
        Some(("-", removed)) => parse_removed(removed).map(Record::Removed),
        _ => parse_added(line).map(Record::Added),
    })
}

fn parse_added(line: &str) -> Result<SavedEvent, String> {
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

fn parse_removed(line: &str) -> Result<EventId, String> {
    let id = line.split(' ').next().unwrap_or_default();
    EventId::from_hex(id).map_err(|_| format!("bad event id {id:?}"))
}

/// The `+` record of `held`, newline included: its length is what the event counts
/// against the byte limits of [`HeldLimits`](crate::HeldLimits).
pub(crate) fn added_line(held: &HeldEvent) -> String {
    format!(
        "+ {} {} {}\n",
        held.held_since.as_secs(),
        held.origin.as_str(),
        held.event.as_json()
    )
}

/// An open journal, appended to as events enter and leave purgatory.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: File,
    /// Records in the file (the live ones and those that left).
    records: usize,
    /// Bytes of the file up to the end of its last complete record.
    bytes: u64,
    /// A write failed and the file could not be cut back to `bytes`: the next record
    /// starts with a newline so that it is not glued to the torn one.
    torn: bool,
    /// Whether something was written since the last `fsync`.
    dirty: bool,
    /// While a compaction writes the live set: the records appended meanwhile.
    compacting: Option<Vec<String>>,
    /// In tests: the bytes the disk still has room for (`None`: no limit).
    #[cfg(test)]
    room: Option<usize>,
}

/// The live set being written by a compaction, outside any lock.
#[derive(Debug)]
pub(crate) struct Snapshot {
    path: PathBuf,
    lines: Vec<String>,
}

impl Snapshot {
    /// Writes the live set to the temporary file and `fsync`s it (blocking).
    pub(crate) fn write(self) -> std::io::Result<WrittenSnapshot> {
        let temporary = temporary_path(&self.path);
        let mut file = File::create(&temporary)?;
        let mut text = format!("{HEADER}\n");
        for line in &self.lines {
            text.push_str(line);
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        Ok(WrittenSnapshot {
            file,
            temporary,
            records: self.lines.len(),
        })
    }
}

/// A live set written and `fsync`ed to its temporary file, ready to replace the journal.
#[derive(Debug)]
pub(crate) struct WrittenSnapshot {
    file: File,
    temporary: PathBuf,
    records: usize,
}

impl Journal {
    /// Writes a journal holding exactly `live` to `path` (atomically: a temporary file,
    /// `fsync`, rename) and opens it for appending.
    pub(crate) fn create<'a>(
        path: &Path,
        live: impl IntoIterator<Item = &'a HeldEvent>,
    ) -> std::io::Result<Journal> {
        let snapshot = Snapshot {
            path: path.to_owned(),
            lines: live.into_iter().map(added_line).collect(),
        };
        let written = snapshot.write()?;
        let mut journal = Journal {
            path: path.to_owned(),
            file: written.file.try_clone()?,
            records: 0,
            bytes: 0,
            torn: false,
            dirty: false,
            compacting: Some(Vec::new()),
            #[cfg(test)]
            room: None,
        };
        journal.finish_compaction(written)?;
        Ok(journal)
    }

    /// Appends the `+` record of `held`.
    #[cfg(test)]
    pub(crate) fn added(&mut self, held: &HeldEvent) -> std::io::Result<()> {
        self.append(added_line(held))
    }

    /// Appends a `+` record made by [`added_line`].
    pub(crate) fn added_record(&mut self, line: String) -> std::io::Result<()> {
        self.append(line)
    }

    /// Appends the `-` record of the event `id`.
    pub(crate) fn removed(&mut self, id: &EventId, why: Removal) -> std::io::Result<()> {
        self.append(format!("- {} {}\n", id.to_hex(), why.as_str()))
    }

    /// Writes one record with one `write` call (the page cache keeps it if the process
    /// dies next). A failed write may have left part of the record in the file (a full
    /// disk): the file is cut back to its last complete record, and if that fails too,
    /// the next record starts on a new line.
    fn append(&mut self, line: String) -> std::io::Result<()> {
        let separator = if self.torn { "\n" } else { "" };
        let record = format!("{separator}{line}");
        if let Err(error) = self.write(record.as_bytes()) {
            self.torn = self.file.set_len(self.bytes).is_err();
            return Err(error);
        }
        self.torn = false;
        self.bytes = self.bytes.saturating_add(record.len() as u64);
        self.records = self.records.saturating_add(1);
        self.dirty = true;
        if let Some(pending) = &mut self.compacting {
            pending.push(line);
        }
        Ok(())
    }

    /// Writes `bytes` to the file; in tests, fails once a set number of bytes was
    /// written, leaving the part that fitted (as a full disk does).
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(room) = self.room {
            if bytes.len() > room {
                self.room = Some(0);
                self.file.write_all(&bytes[..room])?;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "no space left on device (simulated)",
                ));
            }
            self.room = Some(room - bytes.len());
        }
        self.file.write_all(bytes)
    }

    /// Whether the journal holds so many more records than the `live` events, or so many
    /// more bytes than their `live_bytes`, that it should be compacted (and no compaction
    /// is running).
    pub(crate) fn needs_compaction(&self, live: usize, live_bytes: usize) -> bool {
        let too_many = self.records
            > live
                .saturating_mul(COMPACT_FACTOR)
                .saturating_add(COMPACT_SLACK);
        let too_big = self.bytes
            > (live_bytes as u64)
                .saturating_mul(COMPACT_FACTOR as u64)
                .saturating_add(COMPACT_SLACK_BYTES);
        self.compacting.is_none() && (too_many || too_big)
    }

    /// Starts a compaction to `live`: from now on appended records are also remembered
    /// for the new file. Write the snapshot outside the lock, then
    /// [`Journal::finish_compaction`] (or [`Journal::abort_compaction`]).
    pub(crate) fn begin_compaction<'a>(
        &mut self,
        live: impl IntoIterator<Item = &'a HeldEvent>,
    ) -> Snapshot {
        self.compacting = Some(Vec::new());
        Snapshot {
            path: self.path.clone(),
            lines: live.into_iter().map(added_line).collect(),
        }
    }

    /// Appends the records written since the snapshot to it, `fsync`s it and renames it
    /// over the journal, which it replaces.
    pub(crate) fn finish_compaction(&mut self, written: WrittenSnapshot) -> std::io::Result<()> {
        let pending = self.compacting.take().unwrap_or_default();
        let WrittenSnapshot {
            mut file,
            temporary,
            records,
        } = written;
        let tail: String = pending.concat();
        file.write_all(tail.as_bytes())?;
        file.sync_data()?;
        std::fs::rename(&temporary, &self.path)?;
        sync_directory(&self.path);
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.bytes = self.file.metadata()?.len();
        self.torn = false;
        self.records = records.saturating_add(pending.len());
        self.dirty = false;
        Ok(())
    }

    /// A compaction failed: keep appending to the current journal only.
    pub(crate) fn abort_compaction(&mut self) {
        self.compacting = None;
    }

    /// A handle to `fsync` outside the lock, if something was written since the last
    /// one (then counted as synced).
    pub(crate) fn take_unsynced(&mut self) -> Option<std::io::Result<File>> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        Some(self.file.try_clone())
    }

    /// Records in the journal file.
    pub(crate) fn records(&self) -> usize {
        self.records
    }

    /// Bytes in the journal file.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// `fsync`s the directory of `path` so a rename in it survives a power failure (best
/// effort: not every platform can open a directory).
fn sync_directory(path: &Path) {
    let Some(directory) = path.parent() else {
        return;
    };
    let directory = if directory.as_os_str().is_empty() {
        Path::new(".")
    } else {
        directory
    };
    if let Err(error) = File::open(directory).and_then(|dir| dir.sync_all()) {
        tracing::debug!(%error, directory = %directory.display(), "syncing the journal's directory failed");
    }
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests;
