//! Serving: what `git clone` of a repository under the git root gets is what its
//! maintainers published. One reconciliation of one repository reads its announcement,
//! maintainer set, states and pull requests from the store, compares them with the
//! local repository, asks purgatory to fetch what is missing (by holding the events that
//! need it), and writes the refs whose objects are present in one transaction. The
//! decisions are the core's ([`newest_authorized_state`], [`served_ref_plan`],
//! [`pull_request_ref_changes`]); this module only reads and executes.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use grasp_sync_core::nip34::{pull_request_tip, GitOid, RepoRef};
use grasp_sync_core::purgatory::{
    maintainer_set, newest_authorized_state, pull_request_ref_changes, served_ref_plan, RefChange,
};
use nostr::prelude::{Event, EventId, Timestamp};

use crate::git::GitBackend;
use crate::repos::{create_bare_repository, repository_data, Announcements, RepoLocator};

/// How a served repository stands after its last reconciliation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Serving {
    /// It serves its newest authorized state (this event) and every pull request tip.
    Newest {
        /// The state served.
        state: EventId,
    },
    /// Its maintainer set has published no state yet; every pull request tip is served.
    NoState,
    /// It does not serve its newest state, or a pull request tip, yet.
    Behind {
        /// The newest authorized state, if there is one.
        state: Option<EventId>,
        /// Objects still missing locally (asked of purgatory).
        missing_objects: usize,
        /// Why, for a person.
        reason: String,
    },
}

impl Serving {
    /// Whether the repository does not serve what it should yet.
    pub fn is_behind(&self) -> bool {
        matches!(self, Serving::Behind { .. })
    }
}

/// What one reconciliation did.
#[derive(Debug)]
pub(crate) struct Reconciled {
    /// How the repository stands; `None` when nobody announces it any more.
    pub(crate) serving: Option<Serving>,
    /// Refs created, moved or deleted.
    pub(crate) refs_updated: usize,
    /// Events whose objects are missing, with the repository they are fetched into:
    /// purgatory is to hold them.
    pub(crate) to_fetch: Vec<Event>,
    /// Whether the local repository was created by this reconciliation.
    pub(crate) created_repository: bool,
}

/// Reads what a repository should serve and makes it so.
pub(crate) struct Reconciler {
    pub(crate) source: Arc<dyn Announcements>,
    pub(crate) locator: Arc<dyn RepoLocator>,
    pub(crate) git: Arc<dyn GitBackend>,
    /// Whether missing local repositories are created here.
    pub(crate) creates_repositories: bool,
    /// Whether the branch refs are ours to write (not when the GRASP server manages
    /// the git root: it applies states itself; we still write objects and PR tips).
    pub(crate) writes_branches: bool,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("creates_repositories", &self.creates_repositories)
            .field("writes_branches", &self.writes_branches)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// One reconciliation of `repo`.
    pub(crate) async fn reconcile(&self, repo: &RepoRef) -> Result<Reconciled, String> {
        let error = |error: &dyn std::fmt::Display| error.to_string();
        let Some(data) = repository_data(self.source.as_ref(), repo)
            .await
            .map_err(|e| error(&e))?
        else {
            return Ok(Reconciled {
                serving: None,
                refs_updated: 0,
                to_fetch: Vec::new(),
                created_repository: false,
            });
        };
        let maintainers = maintainer_set(repo, &data.announcements);
        let states = self
            .source
            .states_by(repo.identifier(), &maintainers)
            .await
            .map_err(|e| error(&e))?;
        let newest = newest_authorized_state(&states, repo.identifier(), &maintainers);
        let pull_requests = self
            .source
            .pull_requests(repo)
            .await
            .map_err(|e| error(&e))?;
        let tips: Vec<(&Event, GitOid)> = pull_requests
            .iter()
            .filter_map(|event| Some((event, pull_request_tip(event).value?)))
            .collect();
        let Some((target, created_repository)) = self.target(repo).await? else {
            return Ok(Reconciled {
                serving: Some(Serving::Behind {
                    state: newest.as_ref().map(|state| state.id),
                    missing_objects: 0,
                    reason: "the local repository does not exist".to_owned(),
                }),
                refs_updated: 0,
                to_fetch: Vec::new(),
                created_repository: false,
            });
        };
        let mut needed: BTreeSet<GitOid> = tips.iter().map(|(_, tip)| tip.clone()).collect();
        if let Some(state) = &newest {
            needed.extend(state.needed_oids());
        }
        let wanted: Vec<GitOid> = needed.iter().cloned().collect();
        let present = self
            .git
            .existing(&target, &wanted)
            .await
            .map_err(|e| error(&e))?;
        let mut to_fetch = Vec::new();
        let state_ready = newest
            .as_ref()
            .is_none_or(|state| state.needed_oids().is_subset(&present));
        if let (Some(state), false) = (&newest, state_ready) {
            to_fetch.extend(states.iter().find(|event| event.id == state.id).cloned());
        }
        to_fetch.extend(
            tips.iter()
                .filter(|(_, tip)| !present.contains(tip))
                .map(|(event, _)| (*event).clone()),
        );
        let local = self.git.local_refs(&target).await.map_err(|e| error(&e))?;
        let mut changes: Vec<RefChange> = Vec::new();
        let mut head = None;
        if let (Some(state), true, true) = (&newest, state_ready, self.writes_branches) {
            let plan = served_ref_plan(&local.refs, local.head.as_deref(), state);
            changes.extend(plan.changes);
            head = plan.head;
        }
        let ready_tips: Vec<(EventId, GitOid)> = tips
            .iter()
            .filter(|(_, tip)| present.contains(tip))
            .map(|(event, tip)| (event.id, tip.clone()))
            .collect();
        changes.extend(pull_request_ref_changes(&local.refs, &ready_tips));
        if !changes.is_empty() || head.is_some() {
            self.git
                .apply_ref_changes(&target, &changes, head.as_deref())
                .await
                .map_err(|e| error(&e))?;
            tracing::info!(%repo, refs = changes.len(), head = ?head, "served refs updated");
        }
        let missing_objects = needed.len().saturating_sub(present.len());
        let serving = match &newest {
            _ if missing_objects > 0 => Serving::Behind {
                state: newest.as_ref().map(|state| state.id),
                missing_objects,
                reason: format!("{missing_objects} objects missing, fetching"),
            },
            Some(state) => Serving::Newest { state: state.id },
            None => Serving::NoState,
        };
        Ok(Reconciled {
            serving: Some(serving),
            refs_updated: changes.len(),
            to_fetch,
            created_repository,
        })
    }

    /// The local repository of `repo`, created when missing and ours to create (as a
    /// GRASP server creates it when it accepts the announcement), and whether it was
    /// created now.
    async fn target(&self, repo: &RepoRef) -> Result<Option<(PathBuf, bool)>, String> {
        if let Some(path) = self.locator.locate(repo) {
            return Ok(Some((path, false)));
        }
        if !self.creates_repositories {
            return Ok(None);
        }
        let Some(path) = self.locator.place(repo) else {
            return Ok(None);
        };
        let created = create_bare_repository(self.git.as_ref(), &path)
            .await
            .map_err(|error| error.to_string())?;
        if created {
            tracing::info!(%repo, path = %path.display(), "created the local repository");
        }
        Ok(Some((path, created)))
    }
}

/// A served repository in the [`PurgatoryStatus`](crate::PurgatoryStatus).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedRepository {
    /// The repository.
    pub repo: RepoRef,
    /// How it stood after its last reconciliation.
    pub serving: Serving,
    /// When that was (unix time).
    pub reconciled_at: Timestamp,
}
