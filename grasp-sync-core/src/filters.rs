//! Filter builders for the three layers of proactive sync.
//!
//! - Layer 1: repository announcements and state (kinds 30617, 30618).
//! - Layer 2: events tagging one of our repositories (`#a`, `#A`, `#q`).
//! - Layer 3: events tagging one of our root events (`#e`, `#E`, `#q`).
//! - Relay lists (GRASP-03 Sync+): participants' kinds 10002 and 10317
//!   (`authors`).
//!
//! Layers 2 and 3 are chunked: each filter carries at most `chunk_size`
//! values (100 by default), and each item appears in exactly one chunk per tag
//! letter. Items are sorted first, so the same items always give the same
//! filters. Every builder takes a [`FilterMode`]: live filters carry
//! `limit: 0` (only new events), historic ones an optional `since`.
//!
//! [`matches()`] is whether an event matches a filter (NIP-01), the one check
//! of every event a relay sends against the subscription it came on.

use nostr::filter::MatchEventOptions;
use nostr::prelude::{Event, EventId, Filter, Kind, PublicKey, SingleLetterTag, Timestamp};

use crate::model::PendingItems;
use crate::nip34::{
    RepoRef, KIND_GRASP_LIST, KIND_ISSUE, KIND_PATCH, KIND_PULL_REQUEST, KIND_RELAY_LIST,
    KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE,
};

/// Values per Layer 2/3 filter unless configured otherwise.
pub(crate) const DEFAULT_CHUNK_SIZE: usize = 100;

/// Whether a filter streams new events or fetches stored ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterMode {
    /// Ongoing stream: `limit: 0`, nothing stored is returned.
    Live,
    /// Stored events, optionally only those created at or after `since`.
    Historic {
        /// Lower bound (inclusive) on `created_at`.
        since: Option<Timestamp>,
    },
}

impl FilterMode {
    /// Historic with no lower bound.
    pub const FULL_HISTORY: FilterMode = FilterMode::Historic { since: None };

    /// Applies the mode to `filter`.
    pub(crate) fn apply(self, filter: Filter) -> Filter {
        match self {
            FilterMode::Live => filter.limit(0),
            FilterMode::Historic { since: Some(since) } => filter.since(since),
            FilterMode::Historic { since: None } => filter,
        }
    }
}

/// Layer 1: repository announcements (30617) and states (30618).
pub(crate) fn announcement_filter(mode: FilterMode) -> Filter {
    mode.apply(Filter::new().kinds([
        Kind::Custom(KIND_REPO_ANNOUNCEMENT),
        Kind::Custom(KIND_REPO_STATE),
    ]))
}

/// The self-subscription on the own relay: announcements and root events
/// (30617, 1617, 1618, 1621 — not 1619 or 30618, spec), and with Sync+ on
/// relay lists (10002, 10317: participants' lists are known again after a
/// restart from the own relay, where it keeps them).
pub(crate) fn own_relay_filter(relay_lists: bool) -> Filter {
    let mut kinds = vec![
        Kind::Custom(KIND_REPO_ANNOUNCEMENT),
        Kind::Custom(KIND_PATCH),
        Kind::Custom(KIND_PULL_REQUEST),
        Kind::Custom(KIND_ISSUE),
    ];
    if relay_lists {
        kinds.extend(RELAY_LIST_KINDS);
    }
    Filter::new().kinds(kinds)
}

/// The kinds of a participant's relay lists: NIP-65 (10002) and GRASP
/// servers (10317).
const RELAY_LIST_KINDS: [Kind; 2] = [Kind::Custom(KIND_RELAY_LIST), Kind::Custom(KIND_GRASP_LIST)];

/// Relay lists (GRASP-03 Sync+): filters for the kinds 10002 and 10317 of
/// `authors`, at most `chunk_size` authors each, sorted.
pub fn relay_list_filters<'a, I>(authors: I, chunk_size: usize, mode: FilterMode) -> Vec<Filter>
where
    I: IntoIterator<Item = &'a PublicKey>,
{
    let mut authors: Vec<PublicKey> = authors.into_iter().copied().collect();
    authors.sort_unstable();
    authors.dedup();
    authors
        .chunks(chunk_size.max(1))
        .map(|chunk| {
            mode.apply(
                Filter::new()
                    .kinds(RELAY_LIST_KINDS)
                    .authors(chunk.iter().copied()),
            )
        })
        .collect()
}

/// The tag letters of Layer 2: `a`, `A` and `q`.
pub const REPO_TAGS: [SingleLetterTag; 3] = [
    SingleLetterTag::LOWERCASE_A,
    SingleLetterTag::UPPERCASE_A,
    SingleLetterTag::LOWERCASE_Q,
];

/// The tag letters of Layer 3: `e`, `E` and `q`.
pub const ROOT_EVENT_TAGS: [SingleLetterTag; 3] = [
    SingleLetterTag::LOWERCASE_E,
    SingleLetterTag::UPPERCASE_E,
    SingleLetterTag::LOWERCASE_Q,
];

/// Layer 2: filters for events tagging any of `repos`, three per chunk.
pub fn repo_tag_filters<'a, I>(repos: I, chunk_size: usize, mode: FilterMode) -> Vec<Filter>
where
    I: IntoIterator<Item = &'a RepoRef>,
{
    let values: Vec<String> = sorted_strings(repos.into_iter().map(RepoRef::to_string));
    tag_filters(&values, &REPO_TAGS, chunk_size, mode)
}

/// Layer 3: filters for events tagging any of `root_events`, three per chunk.
pub fn root_event_tag_filters<'a, I>(
    root_events: I,
    chunk_size: usize,
    mode: FilterMode,
) -> Vec<Filter>
where
    I: IntoIterator<Item = &'a EventId>,
{
    let values: Vec<String> = sorted_strings(root_events.into_iter().map(EventId::to_hex));
    tag_filters(&values, &ROOT_EVENT_TAGS, chunk_size, mode)
}

/// Every filter of `items`: Layers 2 and 3, and the participants' relay
/// lists.
pub(crate) fn item_filters(
    items: &PendingItems,
    chunk_size: usize,
    mode: FilterMode,
) -> Vec<Filter> {
    let mut filters = repo_tag_filters(&items.repos, chunk_size, mode);
    filters.extend(root_event_tag_filters(&items.root_events, chunk_size, mode));
    filters.extend(relay_list_filters(&items.authors, chunk_size, mode));
    filters
}

/// The next page of an `until`-paginated REQ: `original` with `until` set.
///
/// `until` is inclusive in NIP-01, so events sharing the oldest `created_at`
/// of the previous page are returned again; the caller de-duplicates them by
/// id (see [`PaginationState`](crate::pagination::PaginationState)), which is
/// what makes paging lossless when many events share a second.
pub(crate) fn next_page_filter(original: &Filter, until: Timestamp) -> Filter {
    original.clone().until(until)
}

/// Whether `event` matches `filter` (NIP-01: ids, authors, kinds, `since`,
/// `until`, every `#x` tag condition, and a NIP-50 `search` as a substring):
/// what `Filter::match_event` with every option answers, without the index
/// of the event's tags (a `BTreeMap` of copied `String`s) it builds for each
/// event and filter.
pub fn matches(filter: &Filter, event: &Event) -> bool {
    let all_but_tags = MatchEventOptions {
        tags: false,
        ..MatchEventOptions::new()
    };
    filter.match_event(event, all_but_tags) && tags_match(filter, event)
}

/// Whether every `#x` condition of `filter` holds: for each letter, some tag
/// of `event` named that letter has one of the filter's values as its first
/// value.
fn tags_match(filter: &Filter, event: &Event) -> bool {
    filter.generic_tags.iter().all(|(letter, values)| {
        event.tags.iter().any(|tag| {
            tag.single_letter_tag() == Some(*letter)
                && tag.content().is_some_and(|value| values.contains(value))
        })
    })
}

fn sorted_strings<I: Iterator<Item = String>>(values: I) -> Vec<String> {
    let mut values: Vec<String> = values.collect();
    values.sort_unstable();
    values.dedup();
    values
}

fn tag_filters(
    values: &[String],
    tags: &[SingleLetterTag],
    chunk_size: usize,
    mode: FilterMode,
) -> Vec<Filter> {
    let chunk_size = chunk_size.max(1);
    values
        .chunks(chunk_size)
        .flat_map(|chunk| {
            tags.iter()
                .map(move |tag| mode.apply(Filter::new().custom_tags(*tag, chunk.iter().cloned())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{Keys, SecretKey};

    fn repo(n: usize) -> RepoRef {
        let mut bytes = [0u8; 32];
        bytes[31] = 3;
        let pubkey = Keys::new(SecretKey::from_slice(&bytes).unwrap()).public_key();
        RepoRef::new(pubkey, format!("repo-{n}")).unwrap()
    }

    #[test]
    fn layer1_asks_for_announcements_and_states() {
        let filter = announcement_filter(FilterMode::FULL_HISTORY);
        let kinds = filter.kinds.clone().unwrap();
        assert!(kinds.contains(&Kind::Custom(30617)) && kinds.contains(&Kind::Custom(30618)));
        assert_eq!(kinds.len(), 2);
        assert_eq!(filter.since, None);
        assert_eq!(filter.limit, None);
        let since = Timestamp::from_secs(1_700_000_000);
        assert_eq!(
            announcement_filter(FilterMode::Historic { since: Some(since) }).since,
            Some(since)
        );
        assert_eq!(announcement_filter(FilterMode::Live).limit, Some(0));
    }

    #[test]
    fn layer2_uses_a_upper_a_and_q_per_chunk_of_100() {
        let repos: Vec<RepoRef> = (0..250).map(repo).collect();
        let filters = repo_tag_filters(&repos, DEFAULT_CHUNK_SIZE, FilterMode::Live);
        assert_eq!(filters.len(), 9, "3 chunks × 3 tag letters");
        for (i, filter) in filters.iter().enumerate() {
            let (tag, values) = filter.generic_tags.iter().next().unwrap();
            assert_eq!(filter.generic_tags.len(), 1);
            assert_eq!(*tag, REPO_TAGS[i % 3]);
            assert!(values.len() <= 100);
            assert_eq!(filter.limit, Some(0));
        }
        let json = filters[0].as_json();
        assert!(json.contains("\"#a\""), "{json}");
        assert!(filters[1].as_json().contains("\"#A\""));
        assert!(filters[2].as_json().contains("\"#q\""));
    }

    #[test]
    fn layer3_uses_e_upper_e_and_q_with_hex_ids() {
        let ids: Vec<EventId> = (0..3u8)
            .map(|n| EventId::from_byte_array([n; 32]))
            .collect();
        let since = Timestamp::from_secs(42);
        let filters = root_event_tag_filters(&ids, 2, FilterMode::Historic { since: Some(since) });
        assert_eq!(filters.len(), 6);
        assert!(filters
            .iter()
            .all(|f| f.since == Some(since) && f.limit.is_none()));
        let first = filters[0]
            .generic_tags
            .get(&SingleLetterTag::LOWERCASE_E)
            .unwrap();
        assert!(first.contains(&ids[0].to_hex()));
        assert!(filters[1]
            .generic_tags
            .contains_key(&SingleLetterTag::UPPERCASE_E));
        assert!(filters[2]
            .generic_tags
            .contains_key(&SingleLetterTag::LOWERCASE_Q));
    }

    #[test]
    fn same_items_give_the_same_filters() {
        let items = PendingItems {
            repos: (0..120).map(repo).collect(),
            root_events: (0..7u8)
                .map(|n| EventId::from_byte_array([n; 32]))
                .collect(),
            authors: (3..9u8)
                .map(|n| {
                    let mut bytes = [0u8; 32];
                    bytes[31] = n;
                    Keys::new(SecretKey::from_slice(&bytes).unwrap()).public_key()
                })
                .collect(),
        };
        let a = item_filters(&items, 50, FilterMode::FULL_HISTORY);
        let b = item_filters(&items.clone(), 50, FilterMode::FULL_HISTORY);
        assert_eq!(a, b);
        // 120 repositories: 3 chunks × 3 letters; 7 root events: 3
        // letters; 6 authors: one relay-list filter.
        assert_eq!(a.len(), 9 + 3 + 1);
        let lists = a.last().unwrap();
        assert_eq!(lists.authors.as_ref().map(|authors| authors.len()), Some(6));
        assert!(lists.kinds.as_ref().unwrap().contains(&Kind::Custom(10002)));
    }

    #[test]
    fn empty_items_give_no_filter_and_zero_chunk_is_one() {
        assert!(item_filters(&PendingItems::default(), 100, FilterMode::Live).is_empty());
        let filters = repo_tag_filters(&[repo(1), repo(2)], 0, FilterMode::Live);
        assert_eq!(filters.len(), 6);
    }

    #[test]
    fn next_page_keeps_the_filter_and_sets_until() {
        let original = announcement_filter(FilterMode::Historic {
            since: Some(Timestamp::from_secs(5)),
        })
        .limit(500);
        let next = next_page_filter(&original, Timestamp::from_secs(99));
        assert_eq!(next.until, Some(Timestamp::from_secs(99)));
        assert_eq!(next.since, original.since);
        assert_eq!(next.limit, original.limit);
        assert_eq!(next.kinds, original.kinds);
    }

    mod matching {
        use super::*;
        use grasp_sync_test_support::nip34::{sign, tag};
        use proptest::prelude::*;

        const LETTERS: [&str; 6] = ["a", "A", "e", "q", "p", "t"];
        const VALUES: [&str; 3] = ["x", "y", "z"];
        const KINDS: [u16; 4] = [1, 1617, 1621, 30617];

        /// One tag: a name (single letters and others) with zero to two
        /// values from a small pool, so filters and events meet often.
        fn a_tag() -> impl Strategy<Value = Vec<String>> {
            (
                prop::sample::select(vec!["a", "A", "e", "q", "p", "t", "alt", "ee", "1"]),
                prop::collection::vec(prop::sample::select(VALUES.to_vec()), 0..3),
            )
                .prop_map(|(name, values)| {
                    std::iter::once(name)
                        .chain(values)
                        .map(str::to_owned)
                        .collect()
                })
        }

        fn an_event() -> impl Strategy<Value = Event> {
            (
                any::<bool>(),
                prop::sample::select(KINDS.to_vec()),
                prop::sample::select(vec!["", "hello", "a HeLLo world"]),
                prop::collection::vec(a_tag(), 0..6),
                0u64..6,
            )
                .prop_map(|(second_key, kind, content, tags, at)| {
                    let keys = Keys::new(
                        SecretKey::from_slice(&[if second_key { 2 } else { 1 }; 32])
                            .expect("a key"),
                    );
                    let tags = tags
                        .iter()
                        .map(|values| tag(&values.iter().map(String::as_str).collect::<Vec<_>>()))
                        .collect();
                    sign(&keys, kind, content, tags, 1_000 + at)
                })
        }

        /// A filter over the event's own fields or near misses, with
        /// zero to three tag conditions.
        fn a_filter(event: Event) -> impl Strategy<Value = Filter> {
            (
                (any::<bool>(), any::<bool>(), any::<bool>()),
                prop::collection::vec(prop::sample::select(KINDS.to_vec()), 0..3),
                (prop::option::of(0u64..7), prop::option::of(0u64..7)),
                prop::collection::vec(
                    (
                        prop::sample::select(LETTERS.to_vec()),
                        prop::collection::vec(prop::sample::select(VALUES.to_vec()), 0..3),
                    ),
                    0..3,
                ),
                prop::option::of(prop::sample::select(vec!["", "hello", "world!"])),
            )
                .prop_map(
                    move |((by_id, by_author, with_kinds), kinds, (since, until), tags, search)| {
                        let mut filter = Filter::new();
                        if by_id {
                            filter = filter.id(event.id);
                        }
                        if by_author {
                            filter = filter.author(event.pubkey);
                        }
                        if with_kinds {
                            filter = filter.kinds(kinds.into_iter().map(Kind::Custom));
                        }
                        if let Some(since) = since {
                            filter = filter.since(Timestamp::from_secs(1_000 + since));
                        }
                        if let Some(until) = until {
                            filter = filter.until(Timestamp::from_secs(1_000 + until));
                        }
                        for (letter, values) in tags {
                            let letter =
                                SingleLetterTag::from_char(letter.chars().next().unwrap_or('a'))
                                    .expect("a letter");
                            filter = filter.custom_tags(letter, values);
                        }
                        if let Some(search) = search {
                            filter = filter.search(search);
                        }
                        filter
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// The matcher answers what nostr's `match_event` answers.
            #[test]
            fn matches_answers_what_match_event_answers(
                (event, filter) in an_event().prop_flat_map(|event| (Just(event.clone()), a_filter(event)))
            ) {
                prop_assert_eq!(
                    matches(&filter, &event),
                    filter.match_event(&event, MatchEventOptions::new()),
                    "{} against {}", event.as_json(), filter.as_json()
                );
            }
        }

        #[test]
        fn a_tag_condition_needs_a_tag_of_that_letter_with_one_of_its_values() {
            let keys = Keys::new(SecretKey::from_slice(&[1; 32]).expect("a key"));
            let event = sign(
                &keys,
                1617,
                "",
                vec![tag(&["a", "30617:x:y"]), tag(&["t", "root"]), tag(&["e"])],
                1_000,
            );
            let a = SingleLetterTag::from_char('a').expect("a letter");
            let e = SingleLetterTag::from_char('e').expect("a letter");
            let t = SingleLetterTag::from_char('t').expect("a letter");
            assert!(matches(&Filter::new().custom_tag(a, "30617:x:y"), &event));
            assert!(matches(
                &Filter::new()
                    .custom_tags(a, ["other", "30617:x:y"])
                    .custom_tag(t, "root"),
                &event
            ));
            // Every letter must hold, not one of them.
            assert!(!matches(
                &Filter::new()
                    .custom_tag(a, "30617:x:y")
                    .custom_tag(t, "other"),
                &event
            ));
            // A tag without a value matches no value.
            assert!(!matches(&Filter::new().custom_tag(e, ""), &event));
            assert!(matches(&Filter::new(), &event));
        }
    }
}
