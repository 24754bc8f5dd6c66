//! The historic work of a connection waiting for a subscription slot
//! ([`WorkQueue`]): jobs of batches, in the order they start.

use std::collections::VecDeque;

use super::{Job, QueuedJob};
use crate::model::BatchId;

/// Historic jobs waiting for a slot, in the order they start: new work
/// queues behind, work that continues a running batch (follow-up jobs, a
/// refused slot's job, a gap or a poll) goes ahead.
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    /// The jobs, the next to start first.
    jobs: VecDeque<QueuedJob>,
}

impl WorkQueue {
    /// How many jobs wait.
    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// `true` when no job waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Queues `jobs` of `batch`, in order: `ahead` of every job waiting, or
    /// behind them.
    pub(crate) fn enqueue(&mut self, batch: BatchId, jobs: Vec<Job>, ahead: bool) {
        let queued = jobs.into_iter().map(|job| QueuedJob { batch, job });
        if ahead {
            for job in queued.rev() {
                self.jobs.push_front(job);
            }
        } else {
            self.jobs.extend(queued);
        }
    }

    /// Puts `job` of `batch` back at the front: it starts next.
    pub(crate) fn put_back(&mut self, batch: BatchId, job: Job) {
        self.jobs.push_front(QueuedJob { batch, job });
    }

    /// The job to start next, taken from the queue.
    pub(crate) fn next(&mut self) -> Option<QueuedJob> {
        self.jobs.pop_front()
    }

    /// Drops every queued job of `batch` (it failed).
    pub(crate) fn drop_batch(&mut self, batch: BatchId) {
        self.jobs.retain(|queued| queued.batch != batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Filter;

    fn job(limit: usize) -> Job {
        Job::Req(Filter::new().limit(limit))
    }

    fn order(queue: &mut WorkQueue) -> Vec<(u64, usize)> {
        std::iter::from_fn(|| queue.next())
            .map(|QueuedJob { batch, job }| match job {
                Job::Req(filter) => (batch.0, filter.limit.unwrap_or_default()),
                other => panic!("unexpected job {other:?}"),
            })
            .collect()
    }

    #[test]
    fn new_work_queues_behind_and_continued_work_goes_ahead_in_order() {
        let mut queue = WorkQueue::default();
        queue.enqueue(BatchId(1), vec![job(1), job(2)], false);
        queue.enqueue(BatchId(2), vec![job(3)], false);
        queue.enqueue(BatchId(3), vec![job(4), job(5)], true);
        queue.put_back(BatchId(1), job(6));
        assert_eq!(queue.len(), 6);
        assert_eq!(
            order(&mut queue),
            vec![(1, 6), (3, 4), (3, 5), (1, 1), (1, 2), (2, 3)]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn a_failed_batch_leaves_no_job_queued() {
        let mut queue = WorkQueue::default();
        queue.enqueue(BatchId(1), vec![job(1), job(2)], false);
        queue.enqueue(BatchId(2), vec![job(3)], true);
        queue.drop_batch(BatchId(1));
        assert_eq!(order(&mut queue), vec![(2, 3)]);
    }
}
