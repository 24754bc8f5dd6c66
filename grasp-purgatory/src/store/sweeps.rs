//! Which repositories owe a sweep of their stale `refs/purgatory/*`.
//!
//! An event that leaves purgatory (released, expired or replaced) may leave refs behind
//! that nothing needs any more. The store notes the debt in the same step that removes
//! the event, so no status can see the event gone and the refs not yet owed; the debt is
//! paid when a sweep of that repository finishes. Until then the purgatory is not
//! [all accounted](crate::PurgatoryStatus::all_accounted): a sidecar that exits on it
//! leaves no refs behind.

use std::collections::{BTreeMap, BTreeSet};

use grasp_sync_core::nip34::RepoRef;

/// Sweeps owed and running, by repository.
#[derive(Debug, Default)]
pub(crate) struct RefSweeps {
    /// Owed and not started yet.
    requested: BTreeSet<RepoRef>,
    /// Started and not finished, with how many run at once.
    running: BTreeMap<RepoRef, usize>,
}

impl RefSweeps {
    /// Notes that `repo` owes a sweep.
    pub(crate) fn request(&mut self, repo: RepoRef) {
        self.requested.insert(repo);
    }

    /// Starts the owed sweep of `repo`, if one is owed and not started: whether the
    /// caller now runs it.
    pub(crate) fn claim(&mut self, repo: &RepoRef) -> bool {
        if !self.requested.remove(repo) {
            return false;
        }
        *self.running.entry(repo.clone()).or_default() += 1;
        true
    }

    /// Starts every owed sweep; the caller runs one per repository returned.
    pub(crate) fn claim_all(&mut self) -> Vec<RepoRef> {
        let repos: Vec<RepoRef> = std::mem::take(&mut self.requested).into_iter().collect();
        for repo in &repos {
            *self.running.entry(repo.clone()).or_default() += 1;
        }
        repos
    }

    /// A claimed sweep of `repo` finished (whether or not it deleted anything).
    pub(crate) fn finished(&mut self, repo: &RepoRef) {
        if let Some(count) = self.running.get_mut(repo) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.running.remove(repo);
            }
        }
    }

    /// How many repositories owe a sweep or have one running.
    pub(crate) fn outstanding(&self) -> usize {
        self.requested
            .iter()
            .chain(self.running.keys())
            .collect::<BTreeSet<_>>()
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    fn repo(name: &str) -> RepoRef {
        RepoRef::new(Keys::generate().public_key(), name).expect("a valid identifier")
    }

    #[test]
    fn a_debt_is_outstanding_until_its_claimed_sweep_finishes() {
        let mut sweeps = RefSweeps::default();
        let a = repo("a");
        sweeps.request(a.clone());
        assert_eq!(sweeps.outstanding(), 1);
        assert!(sweeps.claim(&a));
        assert!(!sweeps.claim(&a), "one claim per debt");
        assert_eq!(sweeps.outstanding(), 1, "running still counts");
        sweeps.finished(&a);
        assert_eq!(sweeps.outstanding(), 0);
    }

    #[test]
    fn a_debt_noted_while_a_sweep_runs_needs_a_sweep_of_its_own() {
        let mut sweeps = RefSweeps::default();
        let a = repo("a");
        let b = repo("b");
        sweeps.request(a.clone());
        sweeps.request(b.clone());
        assert_eq!(sweeps.claim_all(), {
            let mut both = vec![a.clone(), b.clone()];
            both.sort();
            both
        });
        sweeps.request(a.clone());
        sweeps.finished(&a);
        assert_eq!(
            sweeps.outstanding(),
            2,
            "a's new debt and b's running sweep"
        );
        assert!(sweeps.claim(&a));
        sweeps.finished(&a);
        sweeps.finished(&b);
        assert_eq!(sweeps.outstanding(), 0);
    }
}
