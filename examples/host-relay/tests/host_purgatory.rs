//! The host's purgatory on its own: what it holds, what a release takes (an
//! announcement only with a state), what it tells its listener, what expires.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use grasp_purgatory::Origin;
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::store::EventStore as _;
use grasp_sync_host_example::host_purgatory::{Admission, AdmitError, HoldListener, OwnPurgatory};
use grasp_sync_relay_builder::{r44, Bridge};
use grasp_sync_test_support::nip34::{pull_request, state, Announcement};
use nostr::prelude::*;

const STATE_TIP: &str = "1111111111111111111111111111111111111111";
const PR_TIP: &str = "2222222222222222222222222222222222222222";

/// What the purgatory told its listener.
#[derive(Default)]
struct Heard {
    holding: Mutex<Vec<(RepoRef, Origin)>>,
    dropped: Mutex<Vec<EventId>>,
}

#[async_trait]
impl HoldListener for Heard {
    fn holding(&self, repo: &RepoRef, origin: Origin) {
        self.holding.lock().unwrap().push((repo.clone(), origin));
    }

    async fn dropped(&self, ids: Vec<EventId>) {
        self.dropped.lock().unwrap().extend(ids);
    }
}

/// A purgatory over an in-memory relay (no git repository: nothing is present), and
/// the relay's store to look into.
fn purgatory(expiry: Duration) -> (Arc<OwnPurgatory>, Arc<Heard>, impl Fn(EventId) -> bool) {
    with_capacity(expiry, grasp_sync_host_example::host_purgatory::MAX_HELD)
}

/// [`purgatory`] holding at most `capacity` events.
fn with_capacity(
    expiry: Duration,
    capacity: usize,
) -> (Arc<OwnPurgatory>, Arc<Heard>, impl Fn(EventId) -> bool) {
    let database = Arc::new(r44::MemoryDatabase::with_opts(r44::MemoryDatabaseOptions {
        events: true,
        max_events: None,
    }));
    let bridge = Bridge::new(database.clone());
    let relay = r44::LocalRelay::new(r44::RelayBuilder::default().database(database));
    let store = bridge.store(relay);
    let purgatory = Arc::new(
        OwnPurgatory::new(
            store.clone(),
            "/nonexistent/grasp-sync-host-example",
            expiry,
        )
        .with_capacity(capacity),
    );
    let heard = Arc::new(Heard::default());
    purgatory.listen(heard.clone());
    let stored = move |id: EventId| {
        let store = store.clone();
        futures_util::FutureExt::now_or_never(async move { store.contains(&id).await.unwrap() })
            .expect("the memory database answers at once")
    };
    (purgatory, heard, stored)
}

#[tokio::test]
async fn an_announcement_is_released_with_its_state_and_served() {
    let (purgatory, heard, stored) = purgatory(Duration::from_secs(1800));
    let owner = Keys::generate();
    let announcement = Announcement::new("r").sign(&owner);
    let state = state(&owner, "r", &[STATE_TIP], 1_700_000_000);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "r", PR_TIP);
    let repo = RepoRef::new(owner.public_key(), "r").unwrap();
    for event in [&announcement, &state, &pr] {
        let admitted = purgatory
            .admit(event.clone(), Origin::Synced)
            .await
            .unwrap();
        assert_eq!(admitted, Admission::Held);
        assert!(purgatory.holds(&event.id));
    }
    assert_eq!(heard.holding.lock().unwrap().len(), 3);
    let needed = purgatory.needed_oids(&repo);
    let expected = [STATE_TIP, PR_TIP].map(|oid| GitOid::parse(oid).unwrap());
    assert_eq!(needed, expected.into_iter().collect());
    let announcements = Filter::new().kind(Kind::Custom(30617));
    assert_eq!(
        purgatory.matching(&announcements),
        vec![announcement.clone()]
    );

    // Only the PR's tip is here: the PR goes, the announcement waits for a state.
    let only_pr = |oid: &GitOid| oid.as_str() == PR_TIP;
    assert_eq!(
        purgatory.release_satisfied(&repo, &only_pr).await.unwrap(),
        1
    );
    assert!(stored(pr.id));
    assert!(!stored(announcement.id) && purgatory.holds(&announcement.id));

    // The state's tip arrives: the state and the announcement go (the repository is
    // promoted: its announcement is served), nothing is pending.
    let all = |_: &GitOid| true;
    assert_eq!(purgatory.release_satisfied(&repo, &all).await.unwrap(), 2);
    assert!(stored(announcement.id) && stored(state.id));
    assert!(!purgatory.has_pending(&repo));

    // An announcement of a repository that serves a state is not held.
    let newer = Announcement::new("r").at(1_700_000_100).sign(&owner);
    let admitted = purgatory.admit(newer, Origin::Submitted).await.unwrap();
    assert_eq!(admitted, Admission::Ready);
}

#[tokio::test]
async fn held_events_expire_and_malformed_ones_are_refused() {
    let (purgatory, heard, _) = purgatory(Duration::ZERO);
    let owner = Keys::generate();
    let state = state(&owner, "r", &[STATE_TIP], 1_700_000_000);
    purgatory
        .admit(state.clone(), Origin::Synced)
        .await
        .unwrap();
    assert_eq!(purgatory.expire().await, 1);
    assert!(!purgatory.holds(&state.id));
    assert_eq!(*heard.dropped.lock().unwrap(), vec![state.id]);

    // A PR without a tip, a state with a bad object id, a note: refused.
    let no_tip = grasp_sync_test_support::nip34::sign(
        &owner,
        1618,
        "",
        vec![grasp_sync_test_support::nip34::tag(&["a", "30617:00:r"])],
        1_700_000_000,
    );
    let bad_state = grasp_sync_test_support::nip34::state(&owner, "r", &["xyz"], 1_700_000_000);
    let note = grasp_sync_test_support::nip34::noise(&owner, "hi", 1_700_000_000);
    for event in [no_tip, bad_state, note] {
        assert!(purgatory.admit(event, Origin::Submitted).await.is_err());
    }
}

#[tokio::test]
async fn a_pull_request_names_its_fork_to_the_scheduler() {
    let (purgatory, _, _) = purgatory(Duration::from_secs(1800));
    let owner = Keys::generate();
    let repo = RepoRef::new(owner.public_key(), "r").unwrap();
    let fork = "https://git.example.com/fork.git";
    let pr = grasp_sync_test_support::nip34::sign(
        &Keys::generate(),
        1618,
        "",
        vec![
            grasp_sync_test_support::nip34::tag(&["a", &repo.to_string()]),
            grasp_sync_test_support::nip34::tag(&["c", PR_TIP]),
            grasp_sync_test_support::nip34::tag(&["clone", fork]),
        ],
        1_700_000_000,
    );
    let without_fork = pull_request(&Keys::generate(), &owner.public_key(), "r", STATE_TIP);
    for event in [pr, without_fork] {
        purgatory.admit(event, Origin::Synced).await.unwrap();
    }
    let sources = purgatory.event_sources(&repo);
    assert_eq!(sources.len(), 1, "only the PR naming a fork");
    assert_eq!(sources[0].clone_urls, vec![fork.to_owned()]);
    let tip = GitOid::parse(PR_TIP).unwrap();
    assert_eq!(sources[0].missing, [tip].into_iter().collect());
}

#[tokio::test]
async fn a_full_purgatory_refuses_more() {
    let max = 3;
    let (purgatory, _, _) = with_capacity(Duration::from_secs(1800), max);
    let owner = Keys::generate();
    for index in 0..max {
        let event = state(&owner, &format!("r{index}"), &[STATE_TIP], 1_700_000_000);
        let admitted = purgatory.admit(event, Origin::Synced).await;
        assert!(
            matches!(admitted, Ok(Admission::Held)),
            "{index}: {admitted:?}"
        );
    }
    let one_more = state(&owner, "one-more", &[STATE_TIP], 1_700_000_000);
    let refused = purgatory.admit(one_more.clone(), Origin::Synced).await;
    assert!(matches!(refused, Err(AdmitError::Full)), "{refused:?}");
    assert!(!purgatory.holds(&one_more.id));
}
