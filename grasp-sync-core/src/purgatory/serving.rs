//! What a served repository must look like (GRASP-01): the refs of the newest state
//! its maintainer set published, and each pull request's tip at `refs/nostr/<id>`.
//!
//! - [`newest_authorized_state`]: which state event is the repository's.
//! - [`served_ref_plan`]: the ref changes that make the repository serve it
//!   (`refs/heads/*`, `refs/tags/*`, `HEAD`).
//! - [`pull_request_ref_changes`]: the `refs/nostr/<event id>` to write.
//! - [`needed_objects`] and [`reconciliation`]: one reconciliation of a served
//!   repository: the refs to write now, the events to fetch objects for.
//!
//! Pure: the refs read from git and the events read from the store come in, the
//! changes to make go out; purgatory executes them in one `git update-ref --stdin`
//! transaction with the old values, so a concurrent push is never overwritten
//! silently.

use std::collections::{BTreeMap, BTreeSet};

use nostr::event::{Event, EventId};
use nostr::key::PublicKey;
use nostr::types::Timestamp;

use crate::nip34::{parse_repo_state, GitOid};

/// The ref namespaces a state decides: branches and tags.
pub const SERVED_REF_PREFIXES: [&str; 2] = ["refs/heads/", "refs/tags/"];

/// The ref namespace pull request (and update) tips are served under.
pub const PULL_REQUEST_REF_PREFIX: &str = "refs/nostr/";

/// Whether the newest state decides the ref `name` (a branch or a tag).
pub fn is_served_ref(name: &str) -> bool {
    SERVED_REF_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The repository state a repository serves: its branches, tags and `HEAD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedState {
    /// The state event's id.
    pub id: EventId,
    /// Its author (the owner or a maintainer).
    pub author: PublicKey,
    /// When it was published.
    pub created_at: Timestamp,
    /// The branches and tags it names (other refs of the state are not served).
    pub refs: BTreeMap<String, GitOid>,
    /// The ref `HEAD` points at, when the state says.
    pub head: Option<String>,
}

impl ServedState {
    /// Every object the served refs point at.
    pub fn needed_oids(&self) -> BTreeSet<GitOid> {
        self.refs.values().cloned().collect()
    }
}

/// The state the repository of `identifier` serves: among `states` (any events), the
/// newest kind 30618 of that identifier by a key of `maintainers` (its maintainer set,
/// see [`maintainer_set`](super::maintainer_set)); ties of `created_at` go to the lowest
/// event id, NIP-01's rule for addressable events. A state by anyone else never
/// counts. A state with a malformed ref tag is skipped whole (purgatory never holds
/// such a state either; serving half of it would be a state nobody published).
pub fn newest_authorized_state(
    states: &[Event],
    identifier: &str,
    maintainers: &[PublicKey],
) -> Option<ServedState> {
    states
        .iter()
        .filter(|event| maintainers.contains(&event.pubkey))
        .filter_map(|event| {
            let state = parse_repo_state(event).ok()?;
            (state.identifier == identifier && state.skipped.is_empty()).then(|| ServedState {
                id: event.id,
                author: event.pubkey,
                created_at: event.created_at,
                refs: state
                    .refs
                    .into_iter()
                    .filter(|(name, _)| is_served_ref(name))
                    .collect(),
                head: state.head,
            })
        })
        .max_by(|a, b| {
            (a.created_at, std::cmp::Reverse(a.id)).cmp(&(b.created_at, std::cmp::Reverse(b.id)))
        })
}

/// One ref to change: from `old` (`None`: must not exist) to `new` (`None`: delete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefChange {
    /// The full ref name.
    pub name: String,
    /// What it must point at now for the change to apply.
    pub old: Option<GitOid>,
    /// What it points at afterwards.
    pub new: Option<GitOid>,
}

/// What makes a repository serve a state: ref changes and where `HEAD` points.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefPlan {
    /// Branches and tags to create, move or delete.
    pub changes: Vec<RefChange>,
    /// `HEAD`'s new target, when it must change.
    pub head: Option<String>,
}

impl RefPlan {
    /// Whether the repository already serves the state.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.head.is_none()
    }
}

/// The changes that make a repository whose refs are `current` (any refs; only
/// branches and tags are looked at) and whose `HEAD` points at `current_head` serve
/// exactly `state`: every branch and tag of the state at its object, every other
/// branch and tag deleted, `HEAD` at [`served_head`].
pub fn served_ref_plan(
    current: &BTreeMap<String, GitOid>,
    current_head: Option<&str>,
    state: &ServedState,
) -> RefPlan {
    let mut changes = Vec::new();
    for (name, oid) in &state.refs {
        let old = current.get(name);
        if old != Some(oid) {
            changes.push(RefChange {
                name: name.clone(),
                old: old.cloned(),
                new: Some(oid.clone()),
            });
        }
    }
    for (name, oid) in current {
        if is_served_ref(name) && !state.refs.contains_key(name) {
            changes.push(RefChange {
                name: name.clone(),
                old: Some(oid.clone()),
                new: None,
            });
        }
    }
    let head = served_head(state, current_head).filter(|head| Some(head.as_str()) != current_head);
    RefPlan { changes, head }
}

/// Where `HEAD` points when serving `state`: the state's `HEAD` when it names a branch
/// of the state; otherwise the current target if the state keeps it; otherwise
/// `refs/heads/main`, `refs/heads/master` or the first branch of the state. `None`
/// when the state has no branch (`HEAD` is left alone).
pub fn served_head(state: &ServedState, current_head: Option<&str>) -> Option<String> {
    let is_branch = |name: &str| name.starts_with("refs/heads/") && state.refs.contains_key(name);
    let chosen = [state.head.as_deref(), current_head]
        .into_iter()
        .flatten()
        .chain(["refs/heads/main", "refs/heads/master"])
        .find(|name| is_branch(name))
        .or_else(|| {
            state
                .refs
                .keys()
                .map(String::as_str)
                .find(|name| name.starts_with("refs/heads/"))
        });
    chosen.map(str::to_owned)
}

/// The `refs/nostr/<event id>` changes that put each pull request or update of `tips`
/// (event id, tip commit) at its tip, given the repository's `current` refs. Refs of
/// other ids are left alone (a push may have brought a pull request not seen yet).
pub fn pull_request_ref_changes(
    current: &BTreeMap<String, GitOid>,
    tips: &[(EventId, GitOid)],
) -> Vec<RefChange> {
    tips.iter()
        .filter_map(|(id, tip)| {
            let name = format!("{PULL_REQUEST_REF_PREFIX}{id}");
            let old = current.get(&name);
            (old != Some(tip)).then(|| RefChange {
                old: old.cloned(),
                name,
                new: Some(tip.clone()),
            })
        })
        .collect()
}

/// Every object a repository must have to serve `newest` and the pull request `tips`
/// (event id, tip commit).
pub fn needed_objects(
    newest: Option<&ServedState>,
    tips: &[(EventId, GitOid)],
) -> BTreeSet<GitOid> {
    let mut needed: BTreeSet<GitOid> = tips.iter().map(|(_, tip)| tip.clone()).collect();
    if let Some(state) = newest {
        needed.extend(state.needed_oids());
    }
    needed
}

/// What one reconciliation of a served repository does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// The refs to write now, in one transaction (only those whose objects are present).
    pub changes: Vec<RefChange>,
    /// `HEAD`'s new target, when it must change.
    pub head: Option<String>,
    /// Whether the newest state waits for objects: its event is to be fetched for.
    pub fetch_state: bool,
    /// The pull requests and updates whose tips are missing: their events are to be
    /// fetched for.
    pub fetch_pull_requests: Vec<EventId>,
    /// How many of the needed objects are missing.
    pub missing_objects: usize,
}

impl Reconciliation {
    /// Whether the repository serves everything it should once `changes` are written.
    pub fn is_behind(&self) -> bool {
        self.missing_objects > 0
    }
}

/// One reconciliation of a repository whose refs are `current` (`HEAD` at
/// `current_head`) and in which `present` of the [`needed_objects`] exist: the state's
/// branches, tags and `HEAD` ([`served_ref_plan`]) once all its objects are there and
/// when the branches are ours to write (`writes_branches`: not when the GRASP server
/// manages the git root), each pull request tip that is there
/// ([`pull_request_ref_changes`]), and the events whose objects are to be fetched. A
/// state is never applied half: until its last object arrives, the previous refs stay.
pub fn reconciliation(
    current: &BTreeMap<String, GitOid>,
    current_head: Option<&str>,
    newest: Option<&ServedState>,
    tips: &[(EventId, GitOid)],
    present: &BTreeSet<GitOid>,
    writes_branches: bool,
) -> Reconciliation {
    let state_ready = newest.is_none_or(|state| state.needed_oids().is_subset(present));
    let mut plan = Reconciliation {
        fetch_state: !state_ready,
        missing_objects: needed_objects(newest, tips).difference(present).count(),
        ..Reconciliation::default()
    };
    if let (Some(state), true, true) = (newest, state_ready, writes_branches) {
        let served = served_ref_plan(current, current_head, state);
        plan.changes = served.changes;
        plan.head = served.head;
    }
    let (ready, missing): (Vec<_>, Vec<_>) =
        tips.iter().partition(|(_, tip)| present.contains(tip));
    let ready: Vec<(EventId, GitOid)> = ready.into_iter().cloned().collect();
    plan.changes
        .extend(pull_request_ref_changes(current, &ready));
    plan.fetch_pull_requests = missing.into_iter().map(|(id, _)| *id).collect();
    plan
}

#[cfg(test)]
mod tests;
