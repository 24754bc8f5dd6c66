//! Is the whole job done? The one answer, for every program that waits for it
//! (the sidecar's `--once`, the demo): historic sync complete and, with
//! purgatory, every held event and every repository accounted for.
//!
//! The inputs are plain numbers and flags, as sync and purgatory report them
//! ([`JobProgress`]), and what the caller expects beyond that
//! ([`JobExpectation`]); [`job_done`] reads nothing else. Never a quiet period:
//! a job that stopped moving is not done.

/// What sync and purgatory report, the inputs of [`job_done`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobProgress {
    /// Historic sync is complete
    /// ([`SyncEngine::historic_sync_complete`](crate::engine::SyncEngine::historic_sync_complete)).
    pub historic_sync_complete: bool,
    /// Repositories the sync tracks.
    pub repositories: usize,
    /// Purgatory's accounting; `None` when there is no purgatory.
    pub purgatory: Option<PurgatoryProgress>,
}

/// What purgatory reports of its accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgatoryProgress {
    /// Every held event accounted for (released, expired, or not fetchable with
    /// a reason: [`all_accounted`](crate::purgatory::all_accounted)), nothing left
    /// to release or sweep, and every served repository reconciled since it last
    /// changed.
    pub all_accounted: bool,
    /// Events still held (accounted for as not fetchable, or on their way).
    pub events_held: usize,
}

/// What the caller expects of a finished job, beyond the accounting. The
/// default expects nothing more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobExpectation {
    /// At least this many repositories tracked. Without an own relay, historic
    /// sync is complete before the first announcement arrived; a caller that
    /// knows how many repositories there are waits for them.
    pub repositories: usize,
    /// Every held event released or expired: an event still held, even one
    /// accounted for as not fetchable, means not done yet (a caller that
    /// expects every event's git data to arrive).
    pub every_event_released: bool,
}

/// `true` when the job is done: historic sync complete with the expected
/// repositories tracked and, with purgatory, every held event and repository
/// accounted for (and, if expected, no event held). Read sync and purgatory
/// at the same moment, or sync again after purgatory: the sync may bring new
/// work meanwhile.
pub fn job_done(progress: &JobProgress, expected: &JobExpectation) -> bool {
    let sync_done =
        progress.historic_sync_complete && progress.repositories >= expected.repositories;
    let purgatory_done = progress.purgatory.is_none_or(|purgatory| {
        purgatory.all_accounted && (!expected.every_event_released || purgatory.events_held == 0)
    });
    sync_done && purgatory_done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(
        complete: bool,
        repositories: usize,
        purgatory: Option<(bool, usize)>,
    ) -> JobProgress {
        JobProgress {
            historic_sync_complete: complete,
            repositories,
            purgatory: purgatory.map(|(all_accounted, events_held)| PurgatoryProgress {
                all_accounted,
                events_held,
            }),
        }
    }

    #[test]
    fn without_purgatory_the_job_is_historic_sync() {
        let plain = JobExpectation::default();
        assert!(job_done(&progress(true, 0, None), &plain));
        assert!(!job_done(&progress(false, 3, None), &plain));
    }

    #[test]
    fn purgatory_must_account_for_everything_it_holds() {
        let plain = JobExpectation::default();
        assert!(!job_done(&progress(true, 1, Some((false, 0))), &plain));
        assert!(
            job_done(&progress(true, 1, Some((true, 2))), &plain),
            "held as not fetchable is accounted for"
        );
        assert!(
            !job_done(&progress(false, 1, Some((true, 0))), &plain),
            "purgatory done, sync not"
        );
    }

    #[test]
    fn a_caller_can_expect_its_repositories_and_every_event_released() {
        let strict = JobExpectation {
            repositories: 2,
            every_event_released: true,
        };
        assert!(
            !job_done(&progress(true, 1, Some((true, 0))), &strict),
            "one repository short"
        );
        assert!(
            !job_done(&progress(true, 2, Some((true, 1))), &strict),
            "one event held"
        );
        assert!(job_done(&progress(true, 2, Some((true, 0))), &strict));
        assert!(
            job_done(&progress(true, 2, None), &strict),
            "no purgatory holds nothing"
        );
    }
}
