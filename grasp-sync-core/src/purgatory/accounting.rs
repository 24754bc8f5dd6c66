//! When is purgatory done? When every held event is accounted for.
//!
//! An event leaves purgatory by being released (its objects arrived) or by expiring. An
//! event still held is *accounted for* only when its repository is known to be not
//! fetchable as things stand, with a reason ([`NotFetchable`]): nothing we could do now
//! would bring its objects. A repository backing off after a failed fetch, waiting for
//! a throttled domain, due, being synced or releasing is still on its way: not
//! accounted for. "Nothing ready at this moment" is not "done".
//!
//! - [`held_progress`]: where one held repository stands.
//! - [`all_accounted`]: whether every held repository is accounted for.
//! - [`missing_repository_action`]: create the local repository, or wait for it.

use std::fmt;

/// Why a held repository's git data cannot be fetched as things stand. Its events stay
/// held (until they expire, or a change — a new announcement, a push, a repository
/// created by the GRASP server — makes them fetchable), and are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum NotFetchable {
    /// The repository's owner has not announced it (no 30617 in the store).
    NoAnnouncement,
    /// The announcements list no clone URL.
    NoCloneUrls,
    /// Every clone URL was refused by the clone-URL policy.
    AllRefusedByPolicy,
    /// Every clone URL is on our own service (the destination, not a source).
    OnlyOwnService,
    /// Every clone URL was refused by the policy or is on our own service.
    NoUsableCloneUrl,
    /// The local repository does not exist, and purgatory does not create repositories
    /// (the GRASP server is to create it).
    RepositoryMissing,
    /// The local repository does not exist and cannot be created: there is no place
    /// for it (an identifier that is not a safe file name, or a locator that does not
    /// lay repositories out).
    NoPlaceForRepository,
}

impl NotFetchable {
    /// A short `snake_case` label (for metrics and JSON).
    pub fn label(self) -> &'static str {
        match self {
            NotFetchable::NoAnnouncement => "no_announcement",
            NotFetchable::NoCloneUrls => "no_clone_urls",
            NotFetchable::AllRefusedByPolicy => "all_refused_by_policy",
            NotFetchable::OnlyOwnService => "only_own_service",
            NotFetchable::NoUsableCloneUrl => "no_usable_clone_url",
            NotFetchable::RepositoryMissing => "repository_missing",
            NotFetchable::NoPlaceForRepository => "no_place_for_repository",
        }
    }
}

impl fmt::Display for NotFetchable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotFetchable::NoAnnouncement => "no announcement of the repository",
            NotFetchable::NoCloneUrls => "no clone URL listed",
            NotFetchable::AllRefusedByPolicy => "every clone URL refused by the clone-URL policy",
            NotFetchable::OnlyOwnService => "only clone URLs on our own service",
            NotFetchable::NoUsableCloneUrl => {
                "every clone URL refused by the policy or on our own service"
            }
            NotFetchable::RepositoryMissing => {
                "no local repository (created externally, not by purgatory)"
            }
            NotFetchable::NoPlaceForRepository => "no place for a local repository",
        })
    }
}

/// What is known about one held repository when the status is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepoActivity {
    /// Its sync is running.
    pub syncing: bool,
    /// Its sync is due now (or within the immediate delay).
    pub due: bool,
    /// It waits in (or is served from) a throttled domain's queue.
    pub waiting_for_domain: bool,
    /// Some of its events are being released.
    pub releasing: bool,
    /// Its last attempt found it not fetchable, and nothing changed since.
    pub not_fetchable: Option<NotFetchable>,
}

/// Where one held repository stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldProgress {
    /// Being synced, due, waiting for a domain or releasing.
    Moving,
    /// Waiting for its next attempt (a backoff, or the debounce of submitted events).
    BackingOff,
    /// Not fetchable as things stand: accounted for.
    NotFetchable(NotFetchable),
}

/// Where a held repository stands: anything in motion first (a not-fetchable mark is
/// stale while a new attempt runs or is due), then its last attempt's verdict.
pub fn held_progress(activity: &RepoActivity) -> HeldProgress {
    if activity.syncing || activity.due || activity.waiting_for_domain || activity.releasing {
        return HeldProgress::Moving;
    }
    match activity.not_fetchable {
        Some(reason) => HeldProgress::NotFetchable(reason),
        None => HeldProgress::BackingOff,
    }
}

/// Whether every held repository is accounted for (vacuously true when nothing is
/// held): each one is [`HeldProgress::NotFetchable`].
pub fn all_accounted(progress: impl IntoIterator<Item = HeldProgress>) -> bool {
    progress
        .into_iter()
        .all(|progress| matches!(progress, HeldProgress::NotFetchable(_)))
}

/// What to do about a repository whose local repository does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingRepository {
    /// Create it (`git init --bare`, the way a GRASP server lays it out).
    Create,
    /// Wait for whoever manages the repositories to create it.
    Wait(NotFetchable),
}

/// Whether purgatory creates a missing local repository (`creates_repositories`: it is
/// the one laying out the git root, as next to a plain relay) or waits for the GRASP
/// server that manages them.
pub fn missing_repository_action(creates_repositories: bool) -> MissingRepository {
    if creates_repositories {
        MissingRepository::Create
    } else {
        MissingRepository::Wait(NotFetchable::RepositoryMissing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_in_motion_is_never_accounted_even_with_a_stale_mark() {
        let stale = Some(NotFetchable::OnlyOwnService);
        for activity in [
            RepoActivity {
                syncing: true,
                not_fetchable: stale,
                ..RepoActivity::default()
            },
            RepoActivity {
                due: true,
                not_fetchable: stale,
                ..RepoActivity::default()
            },
            RepoActivity {
                waiting_for_domain: true,
                ..RepoActivity::default()
            },
            RepoActivity {
                releasing: true,
                not_fetchable: stale,
                ..RepoActivity::default()
            },
        ] {
            assert_eq!(
                held_progress(&activity),
                HeldProgress::Moving,
                "{activity:?}"
            );
            assert!(!all_accounted([held_progress(&activity)]));
        }
    }

    #[test]
    fn backing_off_is_waiting_not_done() {
        let backing_off = held_progress(&RepoActivity::default());
        assert_eq!(backing_off, HeldProgress::BackingOff);
        let reported = held_progress(&RepoActivity {
            not_fetchable: Some(NotFetchable::RepositoryMissing),
            ..RepoActivity::default()
        });
        assert_eq!(
            reported,
            HeldProgress::NotFetchable(NotFetchable::RepositoryMissing)
        );
        assert!(all_accounted([reported, reported]));
        assert!(!all_accounted([reported, backing_off]));
        assert!(all_accounted([]), "nothing held is done");
    }

    #[test]
    fn missing_repositories_are_created_or_waited_for_with_the_reason() {
        assert_eq!(missing_repository_action(true), MissingRepository::Create);
        assert_eq!(
            missing_repository_action(false),
            MissingRepository::Wait(NotFetchable::RepositoryMissing)
        );
    }

    #[test]
    fn every_reason_has_a_distinct_label_and_a_message() {
        let all = [
            NotFetchable::NoAnnouncement,
            NotFetchable::NoCloneUrls,
            NotFetchable::AllRefusedByPolicy,
            NotFetchable::OnlyOwnService,
            NotFetchable::NoUsableCloneUrl,
            NotFetchable::RepositoryMissing,
            NotFetchable::NoPlaceForRepository,
        ];
        let labels: std::collections::BTreeSet<&str> = all.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), all.len());
        assert!(all.iter().all(|r| !r.to_string().is_empty()));
    }
}
