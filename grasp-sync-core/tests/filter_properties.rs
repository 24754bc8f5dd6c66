//! Property tests of the Layer 2/3 filter builders.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeSet, HashMap};

use common::{event_id, repo};
use grasp_sync_core::filters::{
    repo_tag_filters, root_event_tag_filters, FilterMode, REPO_TAGS, ROOT_EVENT_TAGS,
};
use grasp_sync_core::RepoRef;
use nostr::prelude::{EventId, Filter, SingleLetterTag, Timestamp};
use proptest::prelude::*;

fn mode() -> impl Strategy<Value = FilterMode> {
    prop_oneof![
        Just(FilterMode::Live),
        Just(FilterMode::FULL_HISTORY),
        (0u64..2_000_000_000).prop_map(|s| FilterMode::Historic {
            since: Some(Timestamp::from_secs(s))
        }),
    ]
}

/// Every value, per tag letter, and the number of chunks it appears in.
fn occurrences(
    filters: &[Filter],
    tags: &[SingleLetterTag],
) -> HashMap<(SingleLetterTag, String), usize> {
    let mut seen = HashMap::new();
    for filter in filters {
        for (tag, values) in &filter.generic_tags {
            assert!(tags.contains(tag), "unexpected tag {tag:?}");
            for value in values {
                *seen.entry((*tag, value.clone())).or_insert(0) += 1;
            }
        }
    }
    seen
}

fn check_chunks(
    filters: &[Filter],
    tags: &[SingleLetterTag],
    values: &BTreeSet<String>,
    chunk: usize,
    mode: FilterMode,
) -> Result<(), TestCaseError> {
    for filter in filters {
        prop_assert_eq!(filter.generic_tags.len(), 1, "one tag letter per filter");
        let size: usize = filter.generic_tags.values().map(BTreeSet::len).sum();
        prop_assert!(size >= 1 && size <= chunk.max(1));
        match mode {
            FilterMode::Live => prop_assert_eq!(filter.limit, Some(0)),
            FilterMode::Historic { since } => {
                prop_assert_eq!(filter.since, since);
                prop_assert_eq!(filter.limit, None);
            }
        }
    }
    let seen = occurrences(filters, tags);
    for tag in tags {
        for value in values {
            prop_assert_eq!(
                seen.get(&(*tag, value.clone())).copied(),
                Some(1),
                "exactly one chunk per tag letter"
            );
        }
    }
    prop_assert_eq!(seen.len(), values.len() * tags.len());
    Ok(())
}

proptest! {
    #[test]
    fn repo_chunks_cover_each_repo_once_per_letter(
        repos in proptest::collection::vec(0usize..400, 0..300),
        chunk in 0usize..130,
        mode in mode(),
    ) {
        let repos: Vec<RepoRef> = repos.into_iter().map(repo).collect();
        let filters = repo_tag_filters(&repos, chunk, mode);
        let values: BTreeSet<String> = repos.iter().map(ToString::to_string).collect();
        check_chunks(&filters, &REPO_TAGS, &values, chunk, mode)?;
    }

    #[test]
    fn root_event_chunks_cover_each_id_once_per_letter(
        ids in proptest::collection::vec(0u64..1000, 0..400),
        chunk in 0usize..130,
        mode in mode(),
    ) {
        let ids: Vec<EventId> = ids.into_iter().map(event_id).collect();
        let filters = root_event_tag_filters(&ids, chunk, mode);
        let values: BTreeSet<String> = ids.iter().map(EventId::to_hex).collect();
        check_chunks(&filters, &ROOT_EVENT_TAGS, &values, chunk, mode)?;
    }
}
