//! The subscription slots in use on one connection ([`Sub`] by id, in
//! opening order), and the questions the session asks of them as a whole:
//! how many, whether a batch still runs a job, which wait for an answer.

use indexmap::IndexMap;
use nostr::prelude::SubscriptionId;

use super::Sub;
use crate::clock::Instant;
use crate::model::BatchId;

/// The subscription slots in use on one connection (see the module
/// documentation).
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    /// Every slot in use, in opening order.
    open: IndexMap<SubscriptionId, Sub>,
}

impl Subscriptions {
    /// How many slots are in use.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// `true` while the slot `id` is in use.
    pub(crate) fn contains(&self, id: &SubscriptionId) -> bool {
        self.open.contains_key(id)
    }

    /// The subscription `id`.
    pub(crate) fn get(&self, id: &SubscriptionId) -> Option<&Sub> {
        self.open.get(id)
    }

    /// [`Subscriptions::get`], to change.
    pub(crate) fn get_mut(&mut self, id: &SubscriptionId) -> Option<&mut Sub> {
        self.open.get_mut(id)
    }

    /// Files the subscription `id`, just opened.
    pub(crate) fn insert(&mut self, id: SubscriptionId, sub: Sub) {
        self.open.insert(id, sub);
    }

    /// Frees the slot `id`: its subscription, if it was in use.
    pub(crate) fn remove(&mut self, id: &SubscriptionId) -> Option<Sub> {
        self.open.shift_remove(id)
    }

    /// Frees every slot: their subscriptions, in opening order.
    pub(crate) fn take_all(&mut self) -> Vec<(SubscriptionId, Sub)> {
        self.open.drain(..).collect()
    }

    /// Frees the slots of `batch`'s jobs: their subscriptions, in opening
    /// order.
    pub(crate) fn remove_batch(&mut self, batch: BatchId) -> Vec<(SubscriptionId, Sub)> {
        let ids: Vec<SubscriptionId> = self
            .open
            .iter()
            .filter(|(_, sub)| sub.batch() == Some(batch))
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| self.open.shift_remove(&id).map(|sub| (id, sub)))
            .collect()
    }

    /// Every subscription, with its id, in opening order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&SubscriptionId, &Sub)> {
        self.open.iter()
    }

    /// Every subscription, in opening order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Sub> {
        self.open.values()
    }

    /// `true` while a job of `batch` holds a slot.
    pub(crate) fn has_running_job(&self, batch: BatchId) -> bool {
        self.open.values().any(|sub| sub.batch() == Some(batch))
    }

    /// `true` when every slot in use is a live subscription (no historic
    /// work runs).
    pub(crate) fn all_live(&self) -> bool {
        self.open.values().all(Sub::is_live)
    }

    /// When the oldest live subscription the relay has not answered yet was
    /// opened.
    pub(crate) fn live_unanswered_since(&self) -> Option<Instant> {
        self.open
            .values()
            .filter_map(Sub::live_unanswered_since)
            .min()
    }

    /// The negentropy sessions whose NEG-OPEN the relay has not answered
    /// yet, with when it was sent, in opening order.
    pub(crate) fn negentropy_unanswered(&self) -> impl Iterator<Item = (&SubscriptionId, Instant)> {
        self.open
            .iter()
            .filter_map(|(id, sub)| Some((id, sub.neg_open_unanswered_since()?)))
    }
}
