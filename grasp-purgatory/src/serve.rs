//! Serving: what `git clone` of a repository under the git root gets is what its
//! maintainers published. One reconciliation of one repository reads its announcement,
//! maintainer set, states and pull requests from the store, compares them with the
//! local repository, asks purgatory to fetch what is missing (by holding the events that
//! need it), and writes the refs whose objects are present in one transaction. The
//! decisions are the core's ([`newest_authorized_state`], [`reconciliation`]); this
//! module only reads and executes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use grasp_sync_core::nip34::{parse_announcement, pull_request_tip, GitOid, RepoRef};
use grasp_sync_core::purgatory::{
    maintainer_set, needed_objects, newest_authorized_state, reconciliation, Reconciliation,
    ServedState,
};
use nostr::prelude::{Event, EventId, PublicKey, Timestamp};

use crate::git::GitBackend;
use crate::repos::{
    create_bare_repository, repository_data, AnnouncementError, Announcements, RepoLocator,
};

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
    /// The repository's maintainer set as read; `None` when nobody announces it.
    pub(crate) maintainers: Option<Vec<PublicKey>>,
}

/// What a repository should serve, as read from the store.
struct Wanted {
    /// The newest authorized state, if there is one.
    newest: Option<ServedState>,
    /// Its event (held for fetching when its objects are missing).
    newest_event: Option<Event>,
    /// Each pull request and update, with its tip.
    pull_requests: Vec<(Event, GitOid)>,
    /// The maintainer set whose states count.
    maintainers: Vec<PublicKey>,
}

impl Wanted {
    /// The pull request tips by event id, as the core takes them.
    fn tips(&self) -> Vec<(EventId, GitOid)> {
        self.pull_requests
            .iter()
            .map(|(event, tip)| (event.id, tip.clone()))
            .collect()
    }

    /// The events `plan` asks objects to be fetched for (one set look-up per pull
    /// request: linear in their number).
    fn to_fetch(&self, plan: &Reconciliation) -> Vec<Event> {
        let state = self.newest_event.iter().filter(|_| plan.fetch_state);
        let asked: HashSet<&EventId> = plan.fetch_pull_requests.iter().collect();
        let pull_requests = self
            .pull_requests
            .iter()
            .map(|(event, _)| event)
            .filter(|event| asked.contains(&event.id));
        state.chain(pull_requests).cloned().collect()
    }

    /// How the repository stands once `plan` is carried out.
    fn serving(&self, plan: &Reconciliation) -> Serving {
        let state = self.newest.as_ref().map(|state| state.id);
        match state {
            _ if plan.is_behind() => Serving::Behind {
                state,
                missing_objects: plan.missing_objects,
                reason: format!("{} objects missing, fetching", plan.missing_objects),
            },
            Some(state) => Serving::Newest { state },
            None => Serving::NoState,
        }
    }
}

/// The default [`PurgatoryConfig::max_pull_request_tips`](crate::PurgatoryConfig):
/// 10 000 pull request tips served per repository.
pub const DEFAULT_MAX_PULL_REQUEST_TIPS: usize = 10_000;

/// The newest `max` of `pull_requests` (by `created_at`, ties to the lowest id), in
/// that order, and how many were left out. Anybody may open pull requests on any
/// repository: the tips one reconciliation checks and writes stay bounded however many
/// a stranger publishes, and the newest are the ones still being worked on.
fn newest_pull_requests(
    mut pull_requests: Vec<(Event, GitOid)>,
    max: usize,
) -> (Vec<(Event, GitOid)>, usize) {
    pull_requests.sort_unstable_by(|(a, _), (b, _)| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    let left_out = pull_requests.len().saturating_sub(max);
    pull_requests.truncate(max);
    (pull_requests, left_out)
}

/// Reads what a repository should serve and makes it so.
pub(crate) struct Reconciler {
    source: Arc<dyn Announcements>,
    locator: Arc<dyn RepoLocator>,
    git: Arc<dyn GitBackend>,
    /// Whether the GRASP server manages the git root: it creates the repositories and
    /// applies states itself; we still write objects and pull request tips.
    managed_externally: bool,
    /// The most pull request tips served per repository, the newest
    /// ([`newest_pull_requests`]).
    max_pull_request_tips: usize,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("managed_externally", &self.managed_externally)
            .field("max_pull_request_tips", &self.max_pull_request_tips)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// A reconciler reading from `source` and writing the repositories `locator` finds,
    /// through `git`, serving at most `max_pull_request_tips` pull request tips per
    /// repository.
    pub(crate) fn new(
        source: Arc<dyn Announcements>,
        locator: Arc<dyn RepoLocator>,
        git: Arc<dyn GitBackend>,
        managed_externally: bool,
        max_pull_request_tips: usize,
    ) -> Self {
        Reconciler {
            source,
            locator,
            git,
            managed_externally,
            max_pull_request_tips,
        }
    }

    /// The repositories served: every announcement of the source.
    pub(crate) async fn served_repositories(&self) -> Result<Vec<RepoRef>, AnnouncementError> {
        let events = self.source.all_announcements().await?;
        Ok(events
            .iter()
            .filter_map(|event| parse_announcement(event).ok())
            .map(|announcement| announcement.repo)
            .collect())
    }

    /// One reconciliation of `repo`: what it should serve read, the local repository
    /// compared with it, the core's [`reconciliation`] carried out.
    pub(crate) async fn reconcile(&self, repo: &RepoRef) -> Result<Reconciled, String> {
        let Some(wanted) = self.wanted(repo).await.map_err(|e| e.to_string())? else {
            return Ok(Reconciled::unannounced());
        };
        let Some((target, created_repository)) = self.target(repo).await? else {
            return Ok(Reconciled::without_repository(&wanted));
        };
        let tips = wanted.tips();
        let needed: Vec<GitOid> = needed_objects(wanted.newest.as_ref(), &tips)
            .into_iter()
            .collect();
        // The refs first: the presence check reuses them (one git process less).
        let local = self
            .git
            .local_refs(&target)
            .await
            .map_err(|e| e.to_string())?;
        let present = self
            .git
            .existing_given_refs(&target, &needed, &local)
            .await
            .map_err(|e| e.to_string())?;
        let plan = reconciliation(
            &local.refs,
            local.head.as_deref(),
            wanted.newest.as_ref(),
            &tips,
            &present,
            !self.managed_externally,
        );
        self.write_refs(repo, &target, &plan).await?;
        Ok(Reconciled {
            serving: Some(wanted.serving(&plan)),
            refs_updated: plan.changes.len(),
            to_fetch: wanted.to_fetch(&plan),
            created_repository,
            maintainers: Some(wanted.maintainers),
        })
    }

    /// What `repo` should serve: its maintainer set's newest state and its pull
    /// requests' tips. `None` when nobody announces it.
    async fn wanted(&self, repo: &RepoRef) -> Result<Option<Wanted>, AnnouncementError> {
        let Some(data) = repository_data(self.source.as_ref(), repo).await? else {
            return Ok(None);
        };
        let maintainers = maintainer_set(repo, &data.announcements);
        let states = self
            .source
            .states_by(repo.identifier(), &maintainers)
            .await?;
        let newest = newest_authorized_state(&states, repo.identifier(), &maintainers);
        let newest_event = newest
            .as_ref()
            .and_then(|state| states.iter().find(|event| event.id == state.id).cloned());
        let pull_requests = self
            .source
            .pull_requests(repo)
            .await?
            .into_iter()
            .filter_map(|event| {
                let tip = pull_request_tip(&event).value?;
                Some((event, tip))
            })
            .collect();
        let (pull_requests, left_out) =
            newest_pull_requests(pull_requests, self.max_pull_request_tips);
        if left_out > 0 {
            tracing::info!(
                %repo,
                left_out,
                max = self.max_pull_request_tips,
                "pull requests past the cap of tips served per repository left out (the newest are served)"
            );
        }
        Ok(Some(Wanted {
            newest,
            newest_event,
            pull_requests,
            maintainers,
        }))
    }

    /// Writes `plan`'s refs in one transaction (nothing when it has none).
    async fn write_refs(
        &self,
        repo: &RepoRef,
        target: &Path,
        plan: &Reconciliation,
    ) -> Result<(), String> {
        if plan.changes.is_empty() && plan.head.is_none() {
            return Ok(());
        }
        self.git
            .apply_ref_changes(target, &plan.changes, plan.head.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(%repo, refs = plan.changes.len(), head = ?plan.head, "served refs updated");
        Ok(())
    }

    /// The local repository of `repo`, created when missing and ours to create (as a
    /// GRASP server creates it when it accepts the announcement), and whether it was
    /// created now.
    async fn target(&self, repo: &RepoRef) -> Result<Option<(PathBuf, bool)>, String> {
        if let Some(path) = self.locator.locate(repo) {
            return Ok(Some((path, false)));
        }
        if self.managed_externally {
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

impl Reconciled {
    /// Nobody announces the repository any more.
    fn unannounced() -> Self {
        Reconciled {
            serving: None,
            refs_updated: 0,
            to_fetch: Vec::new(),
            created_repository: false,
            maintainers: None,
        }
    }

    /// The local repository does not exist and is not ours to create.
    fn without_repository(wanted: &Wanted) -> Self {
        Reconciled {
            serving: Some(Serving::Behind {
                state: wanted.newest.as_ref().map(|state| state.id),
                missing_objects: 0,
                reason: "the local repository does not exist".to_owned(),
            }),
            refs_updated: 0,
            to_fetch: Vec::new(),
            created_repository: false,
            maintainers: Some(wanted.maintainers.clone()),
        }
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

#[cfg(test)]
mod mocked;

#[cfg(test)]
mod tests {
    use grasp_sync_test_support::ids::coordinate;
    use grasp_sync_test_support::nip34::{sign, tag};
    use nostr::prelude::Keys;

    use super::*;

    /// 5 pull requests, created at 1..=5, a cap of 3: the three newest are kept, newest
    /// first, and two are counted as left out.
    #[test]
    fn the_newest_pull_requests_are_kept_and_the_rest_counted() {
        let owner = Keys::generate();
        let pull_requests: Vec<(Event, GitOid)> = (1..=5u64)
            .map(|n| {
                let tip = format!("{n:040x}");
                let a = coordinate(&owner.public_key(), "r");
                let tags = vec![tag(&["a", &a]), tag(&["c", &tip])];
                let event = sign(&Keys::generate(), 1618, "", tags, n);
                (event, GitOid::parse(&tip).unwrap())
            })
            .collect();
        let (kept, left_out) = newest_pull_requests(pull_requests.clone(), 3);
        assert_eq!(left_out, 2);
        let kept: Vec<u64> = kept.iter().map(|(e, _)| e.created_at.as_secs()).collect();
        assert_eq!(kept, vec![5, 4, 3]);
        let (all, none) = newest_pull_requests(pull_requests, 10);
        assert_eq!((all.len(), none), (5, 0));
    }
}
