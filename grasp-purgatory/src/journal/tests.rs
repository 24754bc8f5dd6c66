use std::path::PathBuf;

use nostr::prelude::Keys;

use super::*;
use crate::held::hold_event;
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, sign, tag};

/// A directory for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!(
            "grasp-purgatory-journal-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    fn file(&self) -> PathBuf {
        self.0.join("journal.txt")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn event(tip: u8, since: u64) -> HeldEvent {
    let owner = Keys::generate();
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", &oid(tip));
    hold_event(pr, Origin::Synced, Timestamp::from_secs(since)).unwrap()
}

fn ids(saved: &[SavedEvent]) -> Vec<EventId> {
    saved.iter().map(|s| s.event.id).collect()
}

#[test]
fn records_replay_in_order_and_damaged_lines_are_reported() {
    let dir = Dir::new("replay");
    let (one, two, three) = (event(1, 10), event(2, 20), event(3, 30));
    let mut journal = Journal::create(&dir.file(), [&one]).unwrap();
    journal.added(&two).unwrap();
    journal.added(&three).unwrap();
    journal.removed(&two.event.id, Removal::Released).unwrap();
    journal.removed(&two.event.id, Removal::Released).unwrap();
    assert_eq!(journal.records(), 5);
    drop(journal);
    let mut text = std::fs::read_to_string(dir.file()).unwrap();
    text.push_str("+ 1 synced {not json\n- nothex released\n");
    // A version 1 line (written at shutdown by earlier versions) is an added event.
    let four = event(4, 40);
    text.push_str(&format!("40 submitted {}\n", four.event.as_json()));
    std::fs::write(dir.file(), text).unwrap();

    let replayed = replay(&dir.file()).unwrap();
    assert_eq!(
        ids(&replayed.live),
        vec![one.event.id, three.event.id, four.event.id]
    );
    assert_eq!(ids(&replayed.left), vec![two.event.id]);
    assert_eq!(replayed.live[0].held_since, Timestamp::from_secs(10));
    assert_eq!(replayed.live[2].origin, Origin::Submitted);
    let lines: Vec<usize> = replayed.rejected.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![7, 8]);
}

#[test]
fn a_missing_journal_is_empty() {
    let dir = Dir::new("missing");
    let replayed = replay(&dir.file()).unwrap();
    assert!(replayed.live.is_empty() && replayed.left.is_empty() && replayed.rejected.is_empty());
}

#[test]
fn an_event_whose_signature_does_not_verify_is_refused() {
    let dir = Dir::new("forged");
    let one = event(1, 10);
    let json = one.event.as_json().replace(&oid(1), &oid(9));
    std::fs::write(dir.file(), format!("{HEADER}\n+ 10 synced {json}\n")).unwrap();
    let replayed = replay(&dir.file()).unwrap();
    assert!(replayed.live.is_empty());
    assert_eq!(replayed.rejected.len(), 1);
}

#[test]
fn compaction_keeps_the_live_events_and_those_appended_meanwhile() {
    let dir = Dir::new("compact");
    let events: Vec<HeldEvent> = (0..6).map(|n| event(n, u64::from(n))).collect();
    let mut journal = Journal::create(&dir.file(), []).unwrap();
    for held in &events {
        journal.added(held).unwrap();
    }
    for held in &events[..4] {
        journal.removed(&held.event.id, Removal::Expired).unwrap();
    }
    assert_eq!(journal.records(), 10);
    assert!(
        !journal.needs_compaction(2, 0),
        "small journals are not rewritten"
    );

    let snapshot = journal.begin_compaction(&events[4..]);
    assert!(!journal.needs_compaction(0, 0), "one compaction at a time");
    // Written while the snapshot is being written: kept by both files.
    let late = event(7, 7);
    journal.added(&late).unwrap();
    journal
        .removed(&events[4].event.id, Removal::Replaced)
        .unwrap();
    let written = snapshot.write().unwrap();
    journal.finish_compaction(written).unwrap();
    assert_eq!(journal.records(), 4);
    journal.added(&event(8, 8)).unwrap();
    assert_eq!(journal.records(), 5);
    drop(journal);

    let replayed = replay(&dir.file()).unwrap();
    assert!(replayed.rejected.is_empty());
    assert_eq!(replayed.live.len(), 3);
    assert_eq!(replayed.live[0].event.id, events[5].event.id);
    assert_eq!(replayed.live[1].event.id, late.event.id);
    assert!(!dir.0.join("journal.txt.tmp").exists());
}

#[test]
fn only_written_journals_are_synced() {
    let dir = Dir::new("sync");
    let mut journal = Journal::create(&dir.file(), []).unwrap();
    assert!(journal.take_unsynced().is_none());
    journal.added(&event(1, 1)).unwrap();
    let handle = journal.take_unsynced();
    assert!(matches!(handle, Some(Ok(_))));
    if let Some(Ok(file)) = handle {
        file.sync_data().unwrap();
    }
    assert!(journal.take_unsynced().is_none());
}

#[test]
fn a_record_that_is_not_utf8_and_a_torn_last_record_are_skipped_and_the_rest_kept() {
    let dir = Dir::new("damaged");
    let (one, two, three) = (event(1, 10), event(2, 20), event(3, 30));
    let mut journal = Journal::create(&dir.file(), [&one]).unwrap();
    journal.added(&two).unwrap();
    drop(journal);
    let mut bytes = std::fs::read(dir.file()).unwrap();
    // Line 4: a record with a byte that is not UTF-8 in its middle.
    bytes.extend_from_slice(b"+ 5 synced {\"content\":\"\xff\xfe\"}\n");
    bytes.extend_from_slice(added_line(&three).as_bytes());
    // Line 6: half a record, the file's end (a write cut short by a full disk).
    let torn = added_line(&event(4, 40));
    bytes.extend_from_slice(&torn.as_bytes()[..torn.len() / 2]);
    std::fs::write(dir.file(), bytes).unwrap();

    let replayed = replay(&dir.file()).unwrap();
    assert_eq!(
        ids(&replayed.live),
        vec![one.event.id, two.event.id, three.event.id]
    );
    let lines: Vec<usize> = replayed.rejected.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![4, 6], "{:?}", replayed.rejected);
    assert!(replayed.rejected[0].reason.contains("UTF-8"));
    assert!(replayed.rejected[1].reason.contains("torn"));
}

#[test]
fn a_write_cut_short_by_a_full_disk_does_not_lose_the_next_record() {
    let dir = Dir::new("full-disk");
    let (one, two, three) = (event(1, 10), event(2, 20), event(3, 30));
    let mut journal = Journal::create(&dir.file(), [&one]).unwrap();
    let before = journal.bytes();
    // Room for half of the next record: it is written in part, then the write fails.
    journal.room = Some(added_line(&two).len() / 2);
    assert!(journal.added(&two).is_err());
    assert_eq!(journal.records(), 1);
    assert_eq!(journal.bytes(), before);
    // Space frees: the next record is whole and readable.
    journal.room = None;
    journal.added(&three).unwrap();
    drop(journal);

    let replayed = replay(&dir.file()).unwrap();
    assert!(replayed.rejected.is_empty(), "{:?}", replayed.rejected);
    assert_eq!(ids(&replayed.live), vec![one.event.id, three.event.id]);
}

#[test]
fn after_a_failed_write_that_could_not_be_cut_back_the_next_record_starts_a_new_line() {
    let dir = Dir::new("torn-write");
    let (one, two, three) = (event(1, 10), event(2, 20), event(3, 30));
    let mut journal = Journal::create(&dir.file(), [&one]).unwrap();
    journal.room = Some(added_line(&two).len() / 2);
    assert!(journal.added(&two).is_err());
    // As if cutting the file back had failed: the torn half stays.
    journal.room = None;
    journal.torn = true;
    let mut file = OpenOptions::new().append(true).open(dir.file()).unwrap();
    let half = added_line(&two);
    file.write_all(&half.as_bytes()[..half.len() / 2]).unwrap();
    journal.added(&three).unwrap();
    drop(journal);

    let replayed = replay(&dir.file()).unwrap();
    assert_eq!(ids(&replayed.live), vec![one.event.id, three.event.id]);
    assert_eq!(replayed.rejected.len(), 1, "the torn half only");
}

#[test]
fn a_journal_much_bigger_than_the_live_events_needs_compaction() {
    let dir = Dir::new("bytes");
    let mut journal = Journal::create(&dir.file(), []).unwrap();
    let owner = Keys::generate();
    let a = format!("30617:{}:r", owner.public_key().to_hex());
    let tags = vec![tag(&["a", &a]), tag(&["c", &oid(1)])];
    let large = sign(&owner, 1618, &"x".repeat(100_000), tags, 1);
    let held = hold_event(large, Origin::Synced, Timestamp::from_secs(1)).unwrap();
    let record = added_line(&held).len();
    let mut written = 0u64;
    while written <= COMPACT_SLACK_BYTES + 4 * record as u64 {
        journal.added(&held).unwrap();
        written += record as u64;
    }
    // Few records, but many more bytes than the one live event's.
    assert!(journal.records() < COMPACT_SLACK);
    assert!(journal.needs_compaction(1, record));
    assert!(!journal.needs_compaction(1, journal.bytes() as usize));
}
