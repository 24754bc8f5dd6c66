//! What one relay sent in this sync that names an event by `e`, `E` or `q`
//! (replies, comments, statuses …) and that was handed to the store: the
//! local side of reconciling a fresh root event's replies with NIP-77
//! without asking the store (a store scan per session), so that only the
//! replies still missing are fetched. A bounded memory: an entry forgotten
//! only makes the reconciliation fetch that event again.

use std::collections::{HashMap, HashSet, VecDeque};

use nostr::prelude::{Event, EventId, Filter, SingleLetterTag, Timestamp};

/// One remembered event and the tag letters it names a root with.
#[derive(Clone, Copy, Debug)]
struct Sent {
    id: EventId,
    created_at: Timestamp,
    /// Bit 0: `e`, bit 1: `E`, bit 2: `q`.
    letters: u8,
}

/// The bit of a Layer 3 tag letter, if it is one.
fn letter_bit(letter: SingleLetterTag) -> Option<u8> {
    if letter == SingleLetterTag::LOWERCASE_E {
        Some(1)
    } else if letter == SingleLetterTag::UPPERCASE_E {
        Some(2)
    } else if letter == SingleLetterTag::LOWERCASE_Q {
        Some(4)
    } else {
        None
    }
}

/// Events a relay sent that name other events (`e`, `E`, `q`), by the event
/// they name; at most `capacity` entries (one per event and named event),
/// the earliest named events forgotten first.
#[derive(Debug)]
pub(crate) struct SentReplies {
    by_target: HashMap<EventId, Vec<Sent>>,
    /// Named events in the order first noted.
    order: VecDeque<EventId>,
    len: usize,
    capacity: usize,
}

impl SentReplies {
    /// A memory of at most `capacity` entries (0 remembers none).
    pub(crate) fn new(capacity: usize) -> Self {
        SentReplies {
            by_target: HashMap::new(),
            order: VecDeque::new(),
            len: 0,
            capacity,
        }
    }

    /// Remembers `event` under every event it names with `e`, `E` or `q`.
    pub(crate) fn note(&mut self, event: &Event) {
        if self.capacity == 0 {
            return;
        }
        let mut targets: Vec<(EventId, u8)> = Vec::new();
        for tag in event.tags.iter() {
            let values = tag.as_slice();
            let (Some(name), Some(value)) = (values.first(), values.get(1)) else {
                continue;
            };
            let bit = match name.as_str() {
                "e" => 1,
                "E" => 2,
                "q" => 4,
                _ => continue,
            };
            let Ok(target) = EventId::from_hex(value) else {
                continue;
            };
            match targets.iter_mut().find(|(known, _)| *known == target) {
                Some((_, letters)) => *letters |= bit,
                None => targets.push((target, bit)),
            }
        }
        for (target, letters) in targets {
            let entries = self.by_target.entry(target).or_insert_with(|| {
                self.order.push_back(target);
                Vec::new()
            });
            match entries.iter_mut().find(|sent| sent.id == event.id) {
                Some(sent) => sent.letters |= letters,
                None => {
                    entries.push(Sent {
                        id: event.id,
                        created_at: event.created_at,
                        letters,
                    });
                    self.len += 1;
                }
            }
        }
        while self.len > self.capacity {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(entries) = self.by_target.remove(&oldest) {
                self.len -= entries.len();
            }
        }
    }

    /// The `(id, created_at)` of remembered events matching `filter`, if
    /// `filter` is one this memory can answer: a single `#e`, `#E` or `#q`
    /// tag condition and nothing else (a Layer 3 history filter).
    pub(crate) fn items_matching(&self, filter: &Filter) -> Option<Vec<(EventId, Timestamp)>> {
        if self.capacity == 0 || !Self::answers(filter) {
            return None;
        }
        let (letter, values) = filter.generic_tags.iter().next()?;
        let bit = letter_bit(*letter)?;
        let mut seen = HashSet::new();
        let mut items = Vec::new();
        for value in values {
            let Ok(target) = EventId::from_hex(value) else {
                continue;
            };
            for sent in self.by_target.get(&target).into_iter().flatten() {
                if sent.letters & bit != 0 && seen.insert(sent.id) {
                    items.push((sent.id, sent.created_at));
                }
            }
        }
        Some(items)
    }

    /// `true` if `filter` has one `#e`, `#E` or `#q` condition and no other.
    pub(crate) fn answers(filter: &Filter) -> bool {
        filter.ids.is_none()
            && filter.authors.is_none()
            && filter.kinds.is_none()
            && filter.search.is_none()
            && filter.since.is_none()
            && filter.until.is_none()
            && filter.generic_tags.len() == 1
            && filter
                .generic_tags
                .keys()
                .all(|letter| letter_bit(*letter).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::event::FinalizeEvent;
    use nostr::prelude::{EventBuilder, Keys, Kind, Tag};

    fn event(tags: &[&[&str]], at: u64) -> Event {
        let tags = tags
            .iter()
            .map(|values| Tag::parse(values.iter().copied()).expect("tag"));
        EventBuilder::new(Kind::Custom(1111), "")
            .tags(tags)
            .custom_created_at(Timestamp::from_secs(at))
            .finalize(&Keys::generate())
            .expect("signed")
    }

    fn root(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    #[test]
    fn events_are_found_by_the_letter_and_event_they_name() {
        let mut sent = SentReplies::new(100);
        let (one, two) = (root(1).to_hex(), root(2).to_hex());
        let comment = event(&[&["E", &one], &["e", &one]], 10);
        let status = event(&[&["e", &two, "", "root"], &["a", "30617:x:y"]], 11);
        sent.note(&comment);
        sent.note(&status);
        sent.note(&status);
        let by_e = Filter::new().custom_tags(SingleLetterTag::LOWERCASE_E, [one.clone(), two]);
        let mut items = sent.items_matching(&by_e).expect("answers");
        items.sort();
        let mut expected = vec![
            (comment.id, comment.created_at),
            (status.id, status.created_at),
        ];
        expected.sort();
        assert_eq!(items, expected);
        let by_upper = Filter::new().custom_tag(SingleLetterTag::UPPERCASE_E, one.clone());
        assert_eq!(
            sent.items_matching(&by_upper),
            Some(vec![(comment.id, comment.created_at)])
        );
        let by_q = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_Q, one.clone());
        assert_eq!(sent.items_matching(&by_q), Some(Vec::new()));
        let narrower = by_upper.clone().kind(Kind::Custom(1111));
        assert_eq!(
            sent.items_matching(&narrower),
            None,
            "not a plain tag filter"
        );
        let by_a = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_A, one);
        assert_eq!(sent.items_matching(&by_a), None);
    }

    #[test]
    fn the_earliest_named_events_are_forgotten_past_the_capacity() {
        let mut sent = SentReplies::new(2);
        let hex: Vec<String> = (1..=3).map(|n| root(n).to_hex()).collect();
        for (n, target) in hex.iter().enumerate() {
            sent.note(&event(&[&["e", target]], n as u64));
        }
        let first = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_E, hex[0].clone());
        let last = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_E, hex[2].clone());
        assert_eq!(sent.items_matching(&first), Some(Vec::new()));
        assert_eq!(sent.items_matching(&last).map(|items| items.len()), Some(1));
        assert!(sent.len <= 2);
        let none = SentReplies::new(0);
        assert_eq!(none.items_matching(&last), None, "no memory: no answer");
    }
}
