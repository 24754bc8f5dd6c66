use std::collections::{BTreeMap, BTreeSet};

use grasp_sync_test_support::nip34::{sign, tag};
use nostr::key::Keys;
use nostr::prelude::Tag;

use super::*;
use crate::purgatory::test_support::oid;

/// A state of `identifier` by `keys` at `at`: `refs` as (name, oid byte), `HEAD` at
/// `head` when given.
fn state_event(
    keys: &Keys,
    identifier: &str,
    refs: &[(&str, u8)],
    head: Option<&str>,
    at: u64,
) -> Event {
    let mut tags = vec![Tag::identifier(identifier)];
    for (name, n) in refs {
        tags.push(tag(&[name, oid(*n).as_str()]));
    }
    if let Some(head) = head {
        tags.push(tag(&["HEAD", &format!("ref: {head}")]));
    }
    sign(keys, 30618, "", tags, at)
}

fn refs(entries: &[(&str, u8)]) -> BTreeMap<String, GitOid> {
    entries
        .iter()
        .map(|(name, n)| ((*name).to_owned(), oid(*n)))
        .collect()
}

#[test]
fn the_newest_state_of_the_maintainer_set_wins_and_a_strangers_never_counts() {
    let (owner, maintainer, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let set = [owner.public_key(), maintainer.public_key()];
    let states = vec![
        state_event(&owner, "r", &[("refs/heads/main", 1)], None, 10),
        state_event(&maintainer, "r", &[("refs/heads/main", 2)], None, 20),
        state_event(&stranger, "r", &[("refs/heads/main", 3)], None, 30),
        state_event(&owner, "other", &[("refs/heads/main", 4)], None, 40),
    ];
    let served = newest_authorized_state(&states, "r", &set).expect("a state");
    assert_eq!(served.author, maintainer.public_key());
    assert_eq!(served.refs, refs(&[("refs/heads/main", 2)]));
    // An older state arriving later changes nothing.
    let mut later = states.clone();
    later.push(state_event(
        &owner,
        "r",
        &[("refs/heads/main", 5)],
        None,
        15,
    ));
    assert_eq!(newest_authorized_state(&later, "r", &set), Some(served));
    assert_eq!(
        newest_authorized_state(&states, "r", &[stranger.public_key()]).map(|s| s.refs),
        Some(refs(&[("refs/heads/main", 3)]))
    );
    assert_eq!(newest_authorized_state(&states, "none", &set), None);
}

#[test]
fn equal_times_go_to_the_lowest_id_whatever_the_order() {
    let owner = Keys::generate();
    let a = state_event(&owner, "r", &[("refs/heads/main", 1)], None, 10);
    let b = state_event(&owner, "r", &[("refs/heads/main", 2)], None, 10);
    let lowest = a.id.min(b.id);
    let set = [owner.public_key()];
    for states in [vec![a.clone(), b.clone()], vec![b, a]] {
        let served = newest_authorized_state(&states, "r", &set).expect("a state");
        assert_eq!(served.id, lowest);
    }
}

#[test]
fn a_state_with_a_malformed_ref_is_not_served() {
    let owner = Keys::generate();
    let good = state_event(&owner, "r", &[("refs/heads/main", 1)], None, 10);
    let bad = sign(
        &owner,
        30618,
        "",
        vec![
            Tag::identifier("r"),
            tag(&["refs/heads/main", "not-an-oid"]),
        ],
        20,
    );
    let served = newest_authorized_state(&[good.clone(), bad], "r", &[owner.public_key()]);
    assert_eq!(served.map(|s| s.id), Some(good.id));
}

#[test]
fn the_plan_serves_exactly_the_state_and_leaves_other_namespaces_alone() {
    let owner = Keys::generate();
    let event = state_event(
        &owner,
        "r",
        &[
            ("refs/heads/main", 1),
            ("refs/heads/dev", 2),
            ("refs/tags/v1", 3),
            ("refs/notes/x", 9),
        ],
        Some("refs/heads/dev"),
        10,
    );
    let state = newest_authorized_state(&[event], "r", &[owner.public_key()]).expect("state");
    assert!(
        !state.refs.contains_key("refs/notes/x"),
        "only branches and tags are served"
    );
    let current = refs(&[
        ("refs/heads/main", 1),
        ("refs/heads/dev", 7),
        ("refs/heads/gone", 8),
        ("refs/nostr/abc", 5),
        ("refs/purgatory/x", 6),
    ]);
    let plan = served_ref_plan(&current, Some("refs/heads/main"), &state);
    assert_eq!(
        plan.changes,
        vec![
            RefChange {
                name: "refs/heads/dev".into(),
                old: Some(oid(7)),
                new: Some(oid(2))
            },
            RefChange {
                name: "refs/tags/v1".into(),
                old: None,
                new: Some(oid(3))
            },
            RefChange {
                name: "refs/heads/gone".into(),
                old: Some(oid(8)),
                new: None
            },
        ]
    );
    assert_eq!(plan.head.as_deref(), Some("refs/heads/dev"));
    // Applied, nothing is left to do.
    let served = refs(&[
        ("refs/heads/main", 1),
        ("refs/heads/dev", 2),
        ("refs/tags/v1", 3),
    ]);
    assert!(served_ref_plan(&served, Some("refs/heads/dev"), &state).is_empty());
}

#[test]
fn head_falls_back_to_a_branch_the_state_keeps() {
    let owner = Keys::generate();
    let served = |refs: &[(&str, u8)], head: Option<&str>, current: Option<&str>| {
        let event = state_event(&owner, "r", refs, head, 10);
        let state = newest_authorized_state(&[event], "r", &[owner.public_key()]).expect("state");
        served_head(&state, current)
    };
    let two = [("refs/heads/a", 1), ("refs/heads/master", 2)];
    assert_eq!(
        served(&two, Some("refs/heads/gone"), None).as_deref(),
        Some("refs/heads/master")
    );
    assert_eq!(
        served(&two, None, Some("refs/heads/a")).as_deref(),
        Some("refs/heads/a")
    );
    assert_eq!(
        served(&[("refs/heads/x", 1)], None, Some("refs/heads/main")).as_deref(),
        Some("refs/heads/x")
    );
    assert_eq!(
        served(&[("refs/tags/v1", 1)], None, Some("refs/heads/main")),
        None
    );
}

#[test]
fn pull_request_tips_are_written_where_they_differ() {
    let (a, b, c) = (
        EventId::from_byte_array([0; 32]),
        EventId::from_byte_array([1; 32]),
        EventId::from_byte_array([2; 32]),
    );
    let current = BTreeMap::from([
        (format!("refs/nostr/{a}"), oid(1)),
        (format!("refs/nostr/{b}"), oid(9)),
        ("refs/nostr/unknown".to_owned(), oid(5)),
    ]);
    let changes = pull_request_ref_changes(&current, &[(a, oid(1)), (b, oid(2)), (c, oid(3))]);
    assert_eq!(
        changes,
        vec![
            RefChange {
                name: format!("refs/nostr/{b}"),
                old: Some(oid(9)),
                new: Some(oid(2))
            },
            RefChange {
                name: format!("refs/nostr/{c}"),
                old: None,
                new: Some(oid(3))
            },
        ]
    );
}

#[test]
fn a_reconciliation_writes_what_is_present_and_fetches_for_the_rest() {
    let owner = Keys::generate();
    let event = state_event(
        &owner,
        "r",
        &[("refs/heads/main", 1), ("refs/tags/v1", 2)],
        None,
        10,
    );
    let state = newest_authorized_state(&[event], "r", &[owner.public_key()]);
    let (pr, update) = (
        EventId::from_byte_array([1; 32]),
        EventId::from_byte_array([2; 32]),
    );
    let tips = [(pr, oid(3)), (update, oid(4))];
    let empty = BTreeMap::new();
    let needed = needed_objects(state.as_ref(), &tips);
    assert_eq!(needed, BTreeSet::from([oid(1), oid(2), oid(3), oid(4)]));

    // Half of the state's objects and one tip: the state waits whole, the tip is served.
    let partial = BTreeSet::from([oid(1), oid(3)]);
    let plan = reconciliation(&empty, None, state.as_ref(), &tips, &partial, true);
    assert!(plan.fetch_state && plan.is_behind());
    assert_eq!(plan.missing_objects, 2);
    assert_eq!(plan.fetch_pull_requests, vec![update]);
    assert_eq!(
        plan.changes.len(),
        1,
        "only the present tip: {:?}",
        plan.changes
    );
    assert_eq!(plan.changes[0].name, format!("refs/nostr/{pr}"));
    assert_eq!(plan.head, None);

    // Everything present: the whole state and both tips, nothing to fetch.
    let plan = reconciliation(&empty, None, state.as_ref(), &tips, &needed, true);
    assert!(!plan.fetch_state && !plan.is_behind() && plan.fetch_pull_requests.is_empty());
    assert_eq!(plan.changes.len(), 4);
    assert_eq!(plan.head.as_deref(), Some("refs/heads/main"));

    // The GRASP server owns the branches: only the tips are written.
    let plan = reconciliation(&empty, None, state.as_ref(), &tips, &needed, false);
    assert_eq!(plan.changes.len(), 2);
    assert!(plan
        .changes
        .iter()
        .all(|change| change.name.starts_with(PULL_REQUEST_REF_PREFIX)));
    assert_eq!(plan.head, None);

    // No state, no pull request: nothing to do, nothing behind.
    let plan = reconciliation(&empty, None, None, &[], &BTreeSet::new(), true);
    assert_eq!(plan, Reconciliation::default());
}
