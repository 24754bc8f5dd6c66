//! What one event in purgatory waits for: the git objects it names, in which repository.
//!
//! The repository is a coordinate `30617:<owner>:<identifier>`, never a bare identifier:
//! a state's owner is its author, a pull request's owner the repository its `a` tag
//! names. The objects are fetched into the owner's repository, from the clone URLs of the
//! owner's announcement and of the maintainers it lists.
//!
//! A repository state (30618) waits for the tip of every ref it lists; a pull request
//! (1618) or pull request update (1619) waits for its commit (`c` tag). Everything is read
//! and checked here, before the event is held, so nothing malformed ever reaches git: an
//! object id that is not hex, a state with a malformed ref tag or a pull request without a
//! valid tip is refused with a [`HoldError`].

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use grasp_sync_core::nip34::{
    parse_repo_state, pull_request_clone_urls, pull_request_tip, referenced_root_ids,
    root_event_repo_refs, GitOid, Nip34Error, RepoRef, KIND_PULL_REQUEST, KIND_PULL_REQUEST_UPDATE,
    KIND_REPO_STATE,
};
use grasp_sync_core::purgatory::{held_event_fate, EventSource, HeldFate};
use indexmap::IndexMap;
use nostr::prelude::{Event, EventId, PublicKey, Timestamp};

/// Who handed an event to purgatory; decides how long sync waits before fetching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A user submitted it to our relay: a `git push` is expected to follow, so sync
    /// waits the default delay (3 min) first.
    Submitted,
    /// It arrived by proactive sync from another relay: sync starts after the short
    /// immediate delay (500 ms), which batches bursts.
    Synced,
}

impl Origin {
    /// The name used in the journal.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::Submitted => "submitted",
            Origin::Synced => "synced",
        }
    }

    /// The origin named `text` in the journal.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "submitted" => Some(Origin::Submitted),
            "synced" => Some(Origin::Synced),
            _ => None,
        }
    }
}

/// The kind of a held event, with what it asks of the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldKind {
    /// A repository state: every ref tip must exist.
    State {
        /// The refs and the objects they point at.
        refs: Vec<(String, GitOid)>,
    },
    /// A pull request or pull request update: its commit must exist. When released, the
    /// commit is written under `refs/nostr/<event id>`.
    PullRequest {
        /// The proposed commit (`c` tag).
        tip: GitOid,
        /// Where the commit may be fetched from besides the repository's clone URLs
        /// (`clone` tags, often the contributor's fork; at most
        /// [`MAX_PULL_REQUEST_CLONE_URLS`](grasp_sync_core::nip34::MAX_PULL_REQUEST_CLONE_URLS),
        /// checked by the clone URL policy before use).
        clone_urls: Vec<String>,
    },
}

/// An event waiting in purgatory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldEvent {
    /// The event itself, verified by whoever handed it over.
    pub event: Event,
    /// The repository it belongs to: `30617:<state author>:<d tag>` for a state, the
    /// first `a` tag of a pull request or update.
    pub repo: RepoRef,
    /// What the event asks of the repository.
    pub kind: HeldKind,
    /// Who handed it over.
    pub origin: Origin,
    /// When it entered purgatory (unix time); it expires a configured time later.
    pub held_since: Timestamp,
}

impl HeldEvent {
    /// The repository identifier (the `d` tag of its announcement).
    pub fn identifier(&self) -> &str {
        self.repo.identifier()
    }

    /// Every object the event needs, whether present locally or not.
    pub fn needed_oids(&self) -> BTreeSet<GitOid> {
        match &self.kind {
            HeldKind::State { refs } => refs.iter().map(|(_, oid)| oid.clone()).collect(),
            HeldKind::PullRequest { tip, .. } => BTreeSet::from([tip.clone()]),
        }
    }

    /// Whether it is released, expired or still held at `now`, when its local
    /// repository is known to have `present` ([`held_event_fate`]).
    pub fn fate(&self, present: &BTreeSet<GitOid>, now: Timestamp, expiry: Duration) -> HeldFate {
        held_event_fate(&self.needed_oids(), present, self.held_since, now, expiry)
    }
}

/// Why an event cannot be held in purgatory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HoldError {
    /// Only repository states, pull requests and pull request updates wait for git data.
    #[error("kind {kind} does not reference git objects")]
    UnsupportedKind {
        /// The event's kind.
        kind: u16,
    },
    /// The state event could not be read.
    #[error("malformed repository state: {0}")]
    MalformedState(#[from] Nip34Error),
    /// A `refs/...` tag of the state is malformed (bad ref name or an object id that is
    /// not 40 or 64 hex characters): the whole state is refused rather than half-applied.
    #[error("repository state has {count} malformed ref tag(s), first at tag {first_index}")]
    MalformedRef {
        /// How many ref tags were malformed.
        count: usize,
        /// The index of the first malformed tag.
        first_index: usize,
    },
    /// The pull request has no valid `c` tag (missing, or not a hex object id).
    #[error("pull request has no valid commit tip ('c' tag)")]
    MissingTip,
    /// The pull request names no repository (`a` tag `30617:<author>:<identifier>`).
    #[error("pull request names no repository ('a' tag)")]
    MissingRepository,
}

/// Reads a repository state event into a [`HeldEvent`].
pub fn hold_state(event: Event, origin: Origin, now: Timestamp) -> Result<HeldEvent, HoldError> {
    let state = parse_repo_state(&event)?;
    if let Some(first) = state.skipped.first() {
        return Err(HoldError::MalformedRef {
            count: state.skipped.len(),
            first_index: first.index,
        });
    }
    let repo = RepoRef::new(event.pubkey, state.identifier)
        .map_err(|error| HoldError::MalformedState(Nip34Error::InvalidRepoRef(error)))?;
    Ok(HeldEvent {
        event,
        repo,
        kind: HeldKind::State { refs: state.refs },
        origin,
        held_since: now,
    })
}

/// Reads a pull request (1618) or pull request update (1619) into a [`HeldEvent`].
///
/// The repository is the first one the event names (`a` tag).
pub fn hold_pull_request(
    event: Event,
    origin: Origin,
    now: Timestamp,
) -> Result<HeldEvent, HoldError> {
    let kind = event.kind.as_u16();
    if kind != KIND_PULL_REQUEST && kind != KIND_PULL_REQUEST_UPDATE {
        return Err(HoldError::UnsupportedKind { kind });
    }
    let tip = pull_request_tip(&event)
        .value
        .ok_or(HoldError::MissingTip)?;
    let repo = root_event_repo_refs(&event)
        .value
        .into_iter()
        .next()
        .ok_or(HoldError::MissingRepository)?;
    let clone_urls = pull_request_clone_urls(&event).value;
    Ok(HeldEvent {
        event,
        repo,
        kind: HeldKind::PullRequest { tip, clone_urls },
        origin,
        held_since: now,
    })
}

/// Reads any event purgatory holds (state, PR or PR update) into a [`HeldEvent`].
pub fn hold_event(event: Event, origin: Origin, now: Timestamp) -> Result<HeldEvent, HoldError> {
    match event.kind.as_u16() {
        KIND_REPO_STATE => hold_state(event, origin, now),
        KIND_PULL_REQUEST | KIND_PULL_REQUEST_UPDATE => hold_pull_request(event, origin, now),
        kind => Err(HoldError::UnsupportedKind { kind }),
    }
}

/// The pull request whose family `held` belongs to, among the held `pull_requests` (by
/// id, with their authors): a pull request's own id; for an update, the held pull
/// request it refers to (`E` tag) when the same author wrote both (only the author
/// updates a pull request, so nobody else's update is asked of their fork); `None` for
/// anything else (a state, an update whose pull request is not held).
fn pull_request_family(
    held: &HeldEvent,
    pull_requests: &HashMap<EventId, PublicKey>,
) -> Option<EventId> {
    match held.event.kind.as_u16() {
        KIND_PULL_REQUEST => Some(held.event.id),
        KIND_PULL_REQUEST_UPDATE => referenced_root_ids(&held.event)
            .value
            .into_iter()
            .find(|id| pull_requests.get(id) == Some(&held.event.pubkey)),
        _ => None,
    }
}

/// Where the objects of `events` (the held events of one repository) may be fetched
/// from besides the repository's clone URLs: one source per pull request with its
/// updates (its family, [`pull_request_family`]), whose clone URLs (every member's
/// `clone` tags) are sources for every member's objects not `present`, so that one
/// fetch from the contributor's fork asks for the pull request's commit and its updates'
/// together, and an update naming no URL of its own is fetched from its pull request's.
/// An update whose pull request is not held stands alone. Sources with no URL or nothing
/// missing are left out; the order is that of the events.
pub(crate) fn event_sources(
    events: &[HeldEvent],
    present: impl Fn(&GitOid) -> bool,
) -> Vec<EventSource> {
    let pull_requests: HashMap<EventId, PublicKey> = events
        .iter()
        .filter(|held| held.event.kind.as_u16() == KIND_PULL_REQUEST)
        .map(|held| (held.event.id, held.event.pubkey))
        .collect();
    let mut families: IndexMap<EventId, EventSource> = IndexMap::new();
    for held in events {
        let HeldKind::PullRequest { tip, clone_urls } = &held.kind else {
            continue;
        };
        let family = pull_request_family(held, &pull_requests).unwrap_or(held.event.id);
        let source = families.entry(family).or_default();
        if !present(tip) {
            source.missing.insert(tip.clone());
        }
        for url in clone_urls {
            if !source.clone_urls.contains(url) {
                source.clone_urls.push(url.clone());
            }
        }
    }
    families
        .into_values()
        .filter(|source| !source.clone_urls.is_empty() && !source.missing.is_empty())
        .collect()
}

/// Whether events of this kind wait in purgatory for git data.
pub fn is_held_kind(kind: u16) -> bool {
    matches!(
        kind,
        KIND_REPO_STATE | KIND_PULL_REQUEST | KIND_PULL_REQUEST_UPDATE
    )
}

#[cfg(test)]
mod tests {
    use nostr::prelude::Keys;

    use super::*;
    use grasp_sync_test_support::ids::oid;
    use grasp_sync_test_support::nip34::{pull_request, sign, state, tag};

    const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

    #[test]
    fn a_state_needs_every_ref_tip() {
        let keys = Keys::generate();
        let held = hold_state(
            state(&keys, "r", &[&oid(1), &oid(2)], 1),
            Origin::Synced,
            NOW,
        );
        let held = held.unwrap();
        assert_eq!(held.repo, RepoRef::new(keys.public_key(), "r").unwrap());
        let needed: Vec<String> = held.needed_oids().iter().map(|o| o.to_string()).collect();
        assert_eq!(needed, vec![oid(1), oid(2)]);
        assert_eq!(held.held_since, NOW);
    }

    #[test]
    fn a_state_with_a_non_hex_object_id_is_refused_whole() {
        let keys = Keys::generate();
        for bad in ["--upload-pack=touch", "zz".repeat(20).as_str(), "abc"] {
            let event = state(&keys, "r", &[&oid(1), bad], 1);
            let result = hold_state(event, Origin::Synced, NOW);
            assert!(
                matches!(result, Err(HoldError::MalformedRef { count: 1, .. })),
                "{bad}: {result:?}"
            );
        }
    }

    #[test]
    fn a_pull_request_needs_its_tip_and_names_its_repository() {
        let (author, owner) = (Keys::generate(), Keys::generate());
        let event = pull_request(&author, &owner.public_key(), "r", &oid(7));
        let held = hold_pull_request(event, Origin::Submitted, NOW).unwrap();
        assert_eq!(
            held.repo,
            RepoRef::new(owner.public_key(), "r").unwrap(),
            "the repository it names, not its author's"
        );
        assert_eq!(held.identifier(), "r");
        assert!(
            matches!(&held.kind, HeldKind::PullRequest { tip, clone_urls } if tip.as_str() == oid(7) && clone_urls.is_empty())
        );
    }

    #[test]
    fn a_pull_request_without_a_valid_tip_or_repository_is_refused() {
        let keys = Keys::generate();
        let non_hex = pull_request(&keys, &keys.public_key(), "r", "-uevil");
        assert!(matches!(
            hold_event(non_hex, Origin::Synced, NOW),
            Err(HoldError::MissingTip)
        ));
        let no_repo = sign(&keys, 1618, "", vec![tag(&["c", &oid(1)])], 1);
        assert!(matches!(
            hold_event(no_repo, Origin::Synced, NOW),
            Err(HoldError::MissingRepository)
        ));
        let note = sign(&keys, 1, "", Vec::new(), 1);
        assert!(matches!(
            hold_event(note, Origin::Synced, NOW),
            Err(HoldError::UnsupportedKind { kind: 1 })
        ));
    }

    /// A pull request naming `url` (if any) proposing `tip`, by `author`.
    fn held_pr(author: &Keys, owner: &Keys, tip: &str, url: Option<&str>) -> HeldEvent {
        let a = format!("30617:{}:r", owner.public_key().to_hex());
        let mut tags = vec![tag(&["a", &a]), tag(&["c", tip])];
        tags.extend(url.map(|url| tag(&["clone", url])));
        hold_event(sign(author, 1618, "", tags, 1), Origin::Synced, NOW).unwrap()
    }

    /// An update of `pr` by `author` moving it to `tip`, naming `url` (if any).
    fn held_update(author: &Keys, pr: &HeldEvent, tip: &str, url: Option<&str>) -> HeldEvent {
        let mut tags = vec![
            tag(&["E", &pr.event.id.to_hex()]),
            tag(&["a", &pr.repo.to_string()]),
            tag(&["c", tip]),
        ];
        tags.extend(url.map(|url| tag(&["clone", url])));
        hold_event(sign(author, 1619, "", tags, 2), Origin::Synced, NOW).unwrap()
    }

    fn oids(values: &[String]) -> BTreeSet<GitOid> {
        values.iter().map(|v| GitOid::parse(v).unwrap()).collect()
    }

    #[test]
    fn a_pull_request_and_its_updates_are_one_source_for_all_their_commits() {
        let (author, owner) = (Keys::generate(), Keys::generate());
        let pr = held_pr(&author, &owner, &oid(1), Some("https://fork.example/a.git"));
        let named = held_update(&author, &pr, &oid(2), Some("https://other.example/a.git"));
        let unnamed = held_update(&author, &pr, &oid(3), None);
        let sources = event_sources(&[pr, named, unnamed], |_| false);
        assert_eq!(sources.len(), 1, "{sources:?}");
        assert_eq!(sources[0].missing, oids(&[oid(1), oid(2), oid(3)]));
        assert_eq!(
            sources[0].clone_urls,
            vec!["https://fork.example/a.git", "https://other.example/a.git"]
        );
        // What is present is not asked for.
        let pr = held_pr(&author, &owner, &oid(1), Some("https://fork.example/a.git"));
        let update = held_update(&author, &pr, &oid(2), None);
        let present = GitOid::parse(&oid(1)).unwrap();
        let sources = event_sources(&[pr, update], |oid| *oid == present);
        assert_eq!(sources[0].missing, oids(&[oid(2)]));
    }

    #[test]
    fn an_update_by_someone_else_or_of_a_pull_request_not_held_stands_alone() {
        let (author, owner, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
        let pr = held_pr(&author, &owner, &oid(1), Some("https://fork.example/a.git"));
        let strangers = held_update(&stranger, &pr, &oid(2), None);
        let sources = event_sources(&[pr.clone(), strangers.clone()], |_| false);
        assert_eq!(sources.len(), 1);
        assert_eq!(
            sources[0].missing,
            oids(&[oid(1)]),
            "the fork is not asked for a stranger's commit"
        );
        // The pull request released (not held): its update names no URL, so no source.
        let alone = held_update(&author, &pr, &oid(3), None);
        assert!(event_sources(&[alone, strangers], |_| false).is_empty());
    }
}
