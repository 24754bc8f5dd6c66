//! One filter of several in a REQ: where its pages go on
//! ([`PaginationState::continue_alone`]); a page the relay stopped
//! answering ([`PaginationState::resume_interrupted`]).

use std::collections::{BTreeSet, HashMap};

use nostr::prelude::{EventId, Filter, Timestamp};

use super::{PageOutcome, PaginationState};

/// An event: id number, `created_at`, in filter `a`, in filter `b`.
type Held = (u32, u64, bool, bool);
/// Whether an event matches a filter.
type InFilter<'a> = &'a dyn Fn(&Held) -> bool;

fn id(n: u32) -> EventId {
    let mut bytes = [0u8; 32];
    bytes[28..].copy_from_slice(&n.to_be_bytes());
    EventId::from_byte_array(bytes)
}

/// Two overlapping filters in one REQ on a relay that returns `page`
/// events per filter and sends each event once: events of filter `a`
/// (`true, _`) and `b` (`_, true`). Paged with `continue_alone`, then
/// alone: every event of each filter is read.
fn group_then_alone(events: &[Held], page: usize) -> [BTreeSet<EventId>; 2] {
    let top = |in_filter: InFilter<'_>, until: Option<u64>| {
        let mut matching: Vec<(u32, u64)> = events
            .iter()
            .filter(|event| in_filter(event))
            .filter(|(_, at, ..)| until.is_none_or(|until| *at <= until))
            .map(|(n, at, ..)| (*n, *at))
            .collect();
        matching.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        matching.truncate(page);
        matching
    };
    let in_a = |event: &Held| event.2;
    let in_b = |event: &Held| event.3;
    // The REQ: the union of both filters' pages, each event once.
    let mut union: HashMap<u32, u64> = HashMap::new();
    union.extend(top(&in_a, None));
    union.extend(top(&in_b, None));
    let mut read = [BTreeSet::new(), BTreeSet::new()];
    for (which, in_filter) in [(0usize, &in_a as InFilter<'_>), (1, &in_b)] {
        let filter = Filter::new().limit(page);
        let mut state = PaginationState::new(filter);
        let seen: Vec<(EventId, Timestamp)> = union
            .iter()
            .filter(|(n, _)| {
                events
                    .iter()
                    .any(|event| event.0 == **n && in_filter(event))
            })
            .map(|(n, at)| (id(*n), Timestamp::from_secs(*at)))
            .collect();
        for (event, at) in &seen {
            state.on_event(*event, *at);
            read[which].insert(*event);
        }
        let Some(mut alone) = state.continue_alone(&seen, page) else {
            continue;
        };
        for _ in 0..1_000 {
            let until = alone.current_filter().until.map(|until| until.as_secs());
            for (n, at) in top(in_filter, until) {
                alone.on_event(id(n), Timestamp::from_secs(at));
                read[which].insert(id(n));
            }
            if alone.on_eose(Some(page)) == PageOutcome::Complete {
                break;
            }
        }
    }
    read
}

#[test]
fn a_filter_sharing_a_req_goes_on_from_its_own_page_end_and_loses_nothing() {
    // `a`: 30 events, the newest 20 its own; `b`: 5 old events that
    // match `a` too (a comment with `e` and `E`). With a page of 10, the
    // REQ brings a's 10 newest and b's 5 old ones: a's page ends at its
    // 10th newest, not at the oldest of b's.
    let mut events: Vec<Held> = (0..30)
        .map(|n| (n, 1_000 + u64::from(n), true, false))
        .collect();
    events.extend((30..35).map(|n| (n, 100 + u64::from(n), true, true)));
    events.push((40, 50, false, true));
    let read = group_then_alone(&events, 10);
    let all_a: BTreeSet<EventId> = events.iter().filter(|e| e.2).map(|e| id(e.0)).collect();
    let all_b: BTreeSet<EventId> = events.iter().filter(|e| e.3).map(|e| id(e.0)).collect();
    assert_eq!(read[0], all_a, "every event of a");
    assert_eq!(read[1], all_b, "every event of b");
    // The oldest-event rule would have skipped a's events 1 000..1 019.
    let page: Vec<(EventId, Timestamp)> = (20..30)
        .map(|n| (id(n), Timestamp::from_secs(1_000 + u64::from(n))))
        .chain((30..35).map(|n| (id(n), Timestamp::from_secs(100 + u64::from(n)))))
        .collect();
    let next = PaginationState::new(Filter::new().limit(10))
        .continue_alone(&page, 10)
        .expect("a's page was cut");
    assert_eq!(
        next.current_filter().until,
        Some(Timestamp::from_secs(1_020)),
        "from a's 10th newest"
    );
}

#[test]
fn a_shared_page_shorter_than_the_relay_page_is_complete() {
    let seen: Vec<(EventId, Timestamp)> = (0..9)
        .map(|n| (id(n), Timestamp::from_secs(u64::from(n))))
        .collect();
    let state = PaginationState::new(Filter::new().limit(10));
    assert!(state.continue_alone(&seen, 10).is_none());
    // Duplicates do not make a page full.
    let doubled: Vec<_> = seen.iter().chain(seen.iter()).copied().collect();
    assert!(state.continue_alone(&doubled, 10).is_none());
}

#[test]
fn an_interrupted_page_resumes_from_its_oldest_second_losing_nothing() {
    // 10 events, two per second (seconds 5 down to 1); the relay sends the
    // newest 5 of a page of 500 and then nothing.
    let events: Vec<(EventId, Timestamp)> = (0..10u32)
        .map(|n| (id(n), Timestamp::from_secs(5 - u64::from(n / 2))))
        .collect();
    let mut paging = PaginationState::new(Filter::new().limit(500));
    for (event, at) in &events[..5] {
        paging.on_event(*event, *at);
    }
    let resumed = paging.resume_interrupted();
    // The 5th event sits at second 3: the resumed page asks until 3.
    assert_eq!(
        resumed.current_filter().until,
        Some(Timestamp::from_secs(3))
    );
    let mut resumed = resumed;
    let mut new = 0;
    for (event, at) in events.iter().filter(|(_, at)| at.as_secs() <= 3) {
        new += usize::from(resumed.on_event(*event, *at));
    }
    // Of the 6 events the resumed page brings, only the one at second 3
    // already received is not new.
    assert_eq!(new, 5);
    // A page that brought nothing is asked again as it was.
    let quiet = PaginationState::new(Filter::new().limit(500));
    assert_eq!(
        quiet.resume_interrupted().current_filter(),
        quiet.current_filter()
    );
}
