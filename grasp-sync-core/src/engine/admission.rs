//! Relay admission: which relays an announcement (or a Sync+ outbox) may
//! bring in under the caps, which wait for a slot, and which relay yields
//! its slot to one waiting. [`RelayAdmission`] owns the slots
//! ([`RelaySlots`]) and the waiting lists and decides; the engine carries
//! out (registering, listing, forgetting relays) and counts and logs.

use std::collections::HashSet;

use indexmap::{IndexMap, IndexSet};
use nostr::prelude::{PublicKey, RelayUrl};

use super::config::Caps;
use super::relay_slots::{Admission, RelaySlots, SlotRules};
use crate::clock::Instant;
use crate::nip34::RepoRef;

/// Relays that yielded their slot that are logged at `info` once each.
const YIELDED_RELAYS_REMEMBERED: usize = 10_000;

/// The relays that hold a slot, the repositories whose relays wait for
/// one, and the relays that yielded theirs.
#[derive(Debug, Default)]
pub(crate) struct RelayAdmission {
    /// Repositories some of whose relays wait for a slot (under
    /// [`Caps::max_relays`], their author's share or benched after yielding
    /// one), longest waiting first: every relay they list within the
    /// per-announcement cap.
    over_cap: IndexMap<RepoRef, Vec<RelayUrl>>,
    /// Repositories some of whose Sync+ outbox relays wait for a slot
    /// ([`RelayAdmission::outbox_within_slots`]): listed again each Sync+
    /// pass.
    outbox_waiting: IndexSet<RepoRef>,
    /// The slots of relays taken from announcements: whose, since when,
    /// whether they served ([`RelaySlots`]).
    slots: RelaySlots,
    /// Relays that yielded their slot, logged at `info` once each (then at
    /// `debug`).
    yielded_relays: HashSet<RelayUrl>,
}

/// What [`RelayAdmission::within_caps`] left out of one announcement, by
/// reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeftOut {
    /// Distinct relays the announcement listed (after the policy).
    pub(crate) listed: usize,
    /// Beyond [`Caps::max_relays_per_announcement`]: not synced.
    pub(crate) over_announcement: usize,
    /// Waiting: every slot taken.
    pub(crate) total_full: usize,
    /// Waiting: the author holds its share.
    pub(crate) author_full: usize,
    /// Waiting: the relay's network holds its share.
    pub(crate) network_full: usize,
    /// Waiting: yielded a slot lately.
    pub(crate) benched: usize,
}

impl LeftOut {
    /// How many relays were left out, whatever the reason.
    pub(crate) fn count(&self) -> usize {
        self.over_announcement
            + self.total_full
            + self.author_full
            + self.network_full
            + self.benched
    }
}

/// The slot rules of `caps`.
fn slot_rules(caps: &Caps) -> SlotRules {
    SlotRules {
        max_relays: caps.max_relays,
        per_author: caps.max_relays_per_author,
        per_network: caps.max_relays_per_network,
        trial: caps.relay_trial_period,
        earn_window: caps.relay_earn_window,
    }
}

impl RelayAdmission {
    /// The relays of `repo`'s announcement that fit the caps: the first
    /// [`Caps::max_relays_per_announcement`] distinct ones, of which a
    /// relay not tracked yet (`is_tracked`; `tracked` relays are) only if
    /// it may take a slot ([`RelaySlots::admission`]: a slot free under
    /// [`Caps::max_relays`], room in the share of `repo`'s author, not
    /// benched); it takes it. Relays left out for a slot are remembered
    /// ([`RelayAdmission::waiting_repos`]); what was left out and why is
    /// returned, for the caller to count and log when it is news.
    pub(crate) fn within_caps(
        &mut self,
        repo: &RepoRef,
        listed: Vec<RelayUrl>,
        caps: &Caps,
        mut tracked: usize,
        is_tracked: impl Fn(&RelayUrl) -> bool,
        now: Instant,
    ) -> (Vec<RelayUrl>, LeftOut) {
        let mut seen = HashSet::new();
        let distinct: Vec<RelayUrl> = listed
            .into_iter()
            .filter(|relay| seen.insert(relay.clone()))
            .collect();
        let per_announcement = caps.max_relays_per_announcement;
        let mut left = LeftOut {
            listed: distinct.len(),
            over_announcement: distinct.len().saturating_sub(per_announcement),
            ..LeftOut::default()
        };
        let candidates: Vec<RelayUrl> = distinct.into_iter().take(per_announcement).collect();
        let rules = slot_rules(caps);
        let author = *repo.pubkey();
        let mut admitted = Vec::with_capacity(candidates.len());
        let mut waiting = Vec::new();
        for relay in candidates {
            if is_tracked(&relay) {
                admitted.push(relay);
                continue;
            }
            match self.slots.admission(&relay, &author, tracked, rules, now) {
                Admission::Granted => {
                    tracked += 1;
                    self.slots.grant(relay.clone(), author, now);
                    admitted.push(relay);
                    continue;
                }
                Admission::TotalFull => left.total_full += 1,
                Admission::AuthorFull => left.author_full += 1,
                Admission::NetworkFull => left.network_full += 1,
                Admission::Benched => left.benched += 1,
            }
            waiting.push(relay);
        }
        if waiting.is_empty() {
            self.over_cap.shift_remove(repo);
        } else {
            let mut listed = admitted.clone();
            listed.extend(waiting);
            self.over_cap.insert(repo.clone(), listed);
        }
        (admitted, left)
    }

    /// Of `repo`'s Sync+ relays, those that hold a slot or need none
    /// (`needs_slot` tells which do: not tracked and not announced); one
    /// that needs a slot takes it like an announced one
    /// ([`RelaySlots::admission`], charged to `repo`'s owner and the
    /// relay's network), with `tracked` relays tracked. One refused waits:
    /// `repo` is listed again at the next Sync+ pass
    /// ([`RelayAdmission::take_outbox_waiting`]). Returns the relays kept
    /// and, when `repo` newly waits, how many were refused.
    pub(crate) fn outbox_within_slots(
        &mut self,
        repo: &RepoRef,
        relays: Vec<RelayUrl>,
        caps: &Caps,
        mut tracked: usize,
        needs_slot: impl Fn(&RelayUrl) -> bool,
        now: Instant,
    ) -> (Vec<RelayUrl>, Option<u64>) {
        let rules = slot_rules(caps);
        let author = *repo.pubkey();
        let mut refused = 0;
        let mut kept = Vec::with_capacity(relays.len());
        for relay in relays {
            if !needs_slot(&relay) {
                kept.push(relay);
                continue;
            }
            match self.slots.admission(&relay, &author, tracked, rules, now) {
                Admission::Granted => {
                    self.slots.grant(relay.clone(), author, now);
                    tracked += 1;
                    kept.push(relay);
                }
                _ => refused += 1,
            }
        }
        if refused == 0 {
            self.outbox_waiting.shift_remove(repo);
            (kept, None)
        } else if self.outbox_waiting.insert(repo.clone()) {
            (kept, Some(refused))
        } else {
            (kept, None)
        }
    }

    /// The repositories whose Sync+ outbox relays wait for a slot, taken:
    /// they are listed again.
    pub(crate) fn take_outbox_waiting(&mut self) -> IndexSet<RepoRef> {
        std::mem::take(&mut self.outbox_waiting)
    }

    /// The repositories some of whose relays wait for a slot, longest
    /// waiting first.
    pub(crate) fn waiting_repos(&self) -> Vec<RepoRef> {
        self.over_cap.keys().cloned().collect()
    }

    /// Every relay `repo` lists within the per-announcement cap, if some of
    /// them wait for a slot.
    pub(crate) fn waiting(&self, repo: &RepoRef) -> Option<Vec<RelayUrl>> {
        self.over_cap.get(repo).cloned()
    }

    /// `true` if a relay of `repo` waits that a free slot would admit (its
    /// author has room, it is not benched): only the total cap keeps it
    /// out.
    pub(crate) fn waits_for_a_free_slot(
        &self,
        repo: &RepoRef,
        caps: &Caps,
        tracked: usize,
        is_tracked: impl Fn(&RelayUrl) -> bool,
        now: Instant,
    ) -> bool {
        let Some(relays) = self.over_cap.get(repo) else {
            return false;
        };
        let rules = slot_rules(caps);
        relays.iter().any(|relay| {
            !is_tracked(relay)
                && self
                    .slots
                    .admission(relay, repo.pubkey(), tracked, rules, now)
                    == Admission::TotalFull
        })
    }

    /// Which relay yields its slot to one waiting at `now`
    /// ([`RelaySlots::yielding`]; `dead` tells which relays count as dead).
    pub(crate) fn yielding(
        &self,
        now: Instant,
        caps: &Caps,
        dead: impl Fn(&RelayUrl) -> bool,
    ) -> Option<RelayUrl> {
        self.slots.yielding(now, slot_rules(caps), dead).cloned()
    }

    /// `relay` yields its slot at `now`: it is benched. Returns the author
    /// it was charged to, and `true` the first time it yielded (of the
    /// relays remembered), to log at `info`.
    pub(crate) fn bench(&mut self, relay: &RelayUrl, now: Instant) -> (Option<PublicKey>, bool) {
        let author = self.slots.bench(relay, now);
        let first = self.yielded_relays.len() < YIELDED_RELAYS_REMEMBERED
            && self.yielded_relays.insert(relay.clone());
        (author, first)
    }

    /// Stops `repo`'s relays waiting for a while (its relays are listed
    /// again): what waited, or `listed` if none did.
    pub(crate) fn stop_waiting(&mut self, repo: &RepoRef, listed: &[RelayUrl]) -> Vec<RelayUrl> {
        self.over_cap
            .shift_remove(repo)
            .unwrap_or_else(|| listed.to_vec())
    }

    /// `repo`'s relays `waiting` wait for a slot again, at the back.
    pub(crate) fn wait_again(&mut self, repo: RepoRef, waiting: Vec<RelayUrl>) {
        self.over_cap.insert(repo, waiting);
    }

    /// `relay` is no longer tracked: its slot is free.
    pub(crate) fn release(&mut self, relay: &RelayUrl) {
        self.slots.release(relay);
    }

    /// Forgets benches older than a trial period
    /// ([`RelaySlots::forget_old_benches`]).
    pub(crate) fn forget_old_benches(&mut self, caps: &Caps, now: Instant) {
        self.slots.forget_old_benches(slot_rules(caps), now);
    }

    /// `relay` delivered an event of ours no other relay had, at `now`: it
    /// earns its slot ([`RelaySlots::note_unique_delivery`]).
    pub(crate) fn note_unique_delivery(&mut self, relay: &RelayUrl, now: Instant) {
        self.slots.note_unique_delivery(relay, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;
    use std::time::Duration;

    fn caps(max_relays: usize) -> Caps {
        Caps {
            max_relays,
            max_relays_per_announcement: 3,
            max_relays_per_author: 10,
            max_relays_per_network: 10,
            relay_trial_period: Duration::from_secs(600),
            relay_earn_window: Duration::from_secs(3_600),
            ..Caps::default()
        }
    }

    fn url(name: &str) -> RelayUrl {
        RelayUrl::parse(&format!("wss://{name}.example.com")).unwrap()
    }

    fn repo() -> RepoRef {
        RepoRef::new(Keys::generate().public_key(), "repo").unwrap()
    }

    fn untracked(_: &RelayUrl) -> bool {
        false
    }

    #[test]
    fn an_announcement_takes_free_slots_and_the_rest_wait() {
        let mut admission = RelayAdmission::default();
        let repo = repo();
        let listed = vec![url("a"), url("b"), url("a"), url("c"), url("d")];
        let (admitted, left) =
            admission.within_caps(&repo, listed, &caps(2), 0, untracked, Instant::ZERO);
        assert_eq!(admitted, vec![url("a"), url("b")]);
        assert_eq!(left.listed, 4);
        assert_eq!(left.over_announcement, 1);
        assert_eq!(left.total_full, 1);
        assert_eq!(left.count(), 2);
        assert_eq!(admission.waiting_repos(), vec![repo.clone()]);
        assert_eq!(
            admission.waiting(&repo),
            Some(vec![url("a"), url("b"), url("c")])
        );
        assert!(admission.waits_for_a_free_slot(&repo, &caps(2), 2, untracked, Instant::ZERO));
        assert!(!admission.waits_for_a_free_slot(&repo, &caps(3), 2, untracked, Instant::ZERO));
    }

    #[test]
    fn an_announcement_that_fits_waits_for_nothing() {
        let mut admission = RelayAdmission::default();
        let repo = repo();
        admission.within_caps(
            &repo,
            vec![url("a"), url("b")],
            &caps(1),
            0,
            untracked,
            Instant::ZERO,
        );
        assert!(admission.waiting(&repo).is_some());
        let (admitted, left) = admission.within_caps(
            &repo,
            vec![url("a"), url("b")],
            &caps(1),
            1,
            |relay| *relay == url("a"),
            Instant::ZERO,
        );
        assert_eq!(admitted, vec![url("a")]);
        assert_eq!(left.total_full, 1);
        let (admitted, _) =
            admission.within_caps(&repo, vec![url("a")], &caps(1), 1, |_| true, Instant::ZERO);
        assert_eq!(admitted, vec![url("a")]);
        assert!(admission.waiting(&repo).is_none());
        assert!(admission.waiting_repos().is_empty());
    }

    #[test]
    fn outbox_relays_refused_a_slot_are_news_once() {
        let mut admission = RelayAdmission::default();
        let repo = repo();
        let relays = vec![url("a"), url("b"), url("c")];
        let needs = |relay: &RelayUrl| *relay != url("c");
        let (kept, news) =
            admission.outbox_within_slots(&repo, relays.clone(), &caps(1), 0, needs, Instant::ZERO);
        assert_eq!(kept, vec![url("a"), url("c")]);
        assert_eq!(news, Some(1));
        let (_, news) =
            admission.outbox_within_slots(&repo, relays, &caps(1), 1, needs, Instant::ZERO);
        assert_eq!(news, None, "a repository waiting already is no news");
        assert_eq!(admission.take_outbox_waiting().len(), 1);
        assert!(admission.take_outbox_waiting().is_empty());
    }

    #[test]
    fn a_relay_that_yields_is_benched_and_logged_first_once() {
        let mut admission = RelayAdmission::default();
        let repo = repo();
        admission.within_caps(&repo, vec![url("a")], &caps(1), 0, untracked, Instant::ZERO);
        let later = Instant::ZERO + Duration::from_secs(601);
        assert_eq!(
            admission.yielding(later, &caps(1), |_| false),
            Some(url("a"))
        );
        let (author, first) = admission.bench(&url("a"), later);
        assert_eq!(author, Some(*repo.pubkey()));
        assert!(first);
        assert_eq!(admission.yielding(later, &caps(1), |_| false), None);
        let (author, first) = admission.bench(&url("a"), later);
        assert_eq!(author, None);
        assert!(!first);
        let (_, left) = admission.within_caps(&repo, vec![url("a")], &caps(1), 0, untracked, later);
        assert_eq!(left.benched, 1);
    }

    #[test]
    fn a_repository_stops_waiting_and_waits_again_at_the_back() {
        let mut admission = RelayAdmission::default();
        let (first, second) = (repo(), repo());
        admission.within_caps(
            &first,
            vec![url("a"), url("b")],
            &caps(1),
            0,
            untracked,
            Instant::ZERO,
        );
        admission.within_caps(
            &second,
            vec![url("c")],
            &caps(1),
            1,
            untracked,
            Instant::ZERO,
        );
        assert_eq!(
            admission.waiting_repos(),
            vec![first.clone(), second.clone()]
        );
        let waiting = admission.stop_waiting(&first, &[]);
        assert_eq!(waiting, vec![url("a"), url("b")]);
        assert_eq!(admission.stop_waiting(&first, &[url("x")]), vec![url("x")]);
        admission.wait_again(first.clone(), waiting);
        assert_eq!(admission.waiting_repos(), vec![second, first]);
    }
}
