//! The host's own purgatory: announcements (30617), states (30618), PRs (1618) and PR
//! updates (1619) wait here, by repository, until their git data arrives.
//!
//! - An announcement waits until its repository has the git data of a state: it is
//!   released (and the repository promoted) together with that state. An announcement
//!   of a repository that already serves a state is not held.
//! - A state waits for the tip of every ref it lists, a PR or PR update for its `c` tip.
//! - Held events older than the expiry are dropped.
//!
//! The purgatory keeps no fetch logic: it tells its [`HoldListener`] what it holds
//! and drops, and releases what is satisfied when asked
//! ([`OwnPurgatory::release_satisfied`]). Released events are saved in the relay's
//! database and delivered to its subscribers: a promotion shows only as its
//! announcement, served.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use grasp_purgatory::{hold_event, HoldError, NpubLayout, Origin, ReleaseError};
use grasp_sync_core::filters::matches;
use grasp_sync_core::nip34::{
    parse_announcement, GitOid, Nip34Error, RepoRef, KIND_REPO_ANNOUNCEMENT, KIND_REPO_STATE,
};
use grasp_sync_core::purgatory::EventSource;
use grasp_sync_core::store::{EventStore, IngestOutcome};
use grasp_sync_relay_builder::RelayBuilderStore;
use nostr::prelude::{Event, EventId, Filter, Kind, Timestamp};
use tracing::{debug, info, warn};

/// The most events held at once (all repositories together), unless
/// [`OwnPurgatory::with_capacity`] says otherwise.
pub const MAX_HELD: usize = 10_000;

/// The kinds this purgatory holds.
pub const HELD_KINDS: [u16; 4] = [30617, 30618, 1618, 1619];

/// Who hears what the purgatory does: the fetch scheduler and the sync (wired by the
/// glue, `purgatory_glue.rs`).
#[async_trait]
pub trait HoldListener: Send + Sync {
    /// `repo` holds something new: its git data should be fetched.
    fn holding(&self, repo: &RepoRef, origin: Origin);
    /// These held events expired without their git data.
    async fn dropped(&self, ids: Vec<EventId>);
}

/// What [`OwnPurgatory::admit`] did with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Held until its git data arrives (or already held).
    Held,
    /// Its git data is here: the caller stores it as usual.
    Ready,
}

/// Why an event cannot enter the purgatory.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// Not an announcement, state, PR or PR update.
    #[error("kind {0} is not held")]
    NotHeld(u16),
    /// A malformed announcement.
    #[error("malformed announcement: {0}")]
    Announcement(#[from] Nip34Error),
    /// A malformed state, PR or PR update.
    #[error("{0}")]
    Objects(#[from] HoldError),
    /// As many events as the purgatory's capacity are held already.
    #[error("the purgatory is full")]
    Full,
}

/// What one held event waits for.
#[derive(Clone, Debug)]
enum Waits {
    /// An announcement: a state of its repository released.
    Announcement,
    /// A state: these ref tips.
    State(BTreeSet<GitOid>),
    /// A PR or PR update: its tip, which its own clone URLs (a fork) may also have.
    PullRequest(GitOid, Vec<String>),
}

/// One held event.
#[derive(Clone, Debug)]
struct Held {
    event: Event,
    waits: Waits,
    since: Instant,
}

/// The host's purgatory. See the [module docs](self).
pub struct OwnPurgatory {
    held: Mutex<BTreeMap<RepoRef, Vec<Held>>>,
    relay: RelayBuilderStore,
    layout: NpubLayout,
    expiry: Duration,
    capacity: usize,
    listener: Mutex<Option<Arc<dyn HoldListener>>>,
}

impl std::fmt::Debug for OwnPurgatory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnPurgatory")
            .field("repositories", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl OwnPurgatory {
    /// A purgatory releasing into `relay`, whose repositories live under `git_root`
    /// (`<npub>/<identifier>.git`), dropping what waited longer than `expiry`.
    pub fn new(relay: RelayBuilderStore, git_root: impl Into<PathBuf>, expiry: Duration) -> Self {
        OwnPurgatory {
            held: Mutex::new(BTreeMap::new()),
            relay,
            layout: NpubLayout::new(git_root),
            expiry,
            capacity: MAX_HELD,
            listener: Mutex::new(None),
        }
    }

    /// Holds at most `capacity` events at once ([`MAX_HELD`] by default).
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Tells `listener` from now on what is held and dropped (instead of the
    /// previous one).
    pub fn listen(&self, listener: Arc<dyn HoldListener>) {
        *self.listener.lock().unwrap_or_else(PoisonError::into_inner) = Some(listener);
    }

    /// Who hears what the purgatory does, if anyone.
    fn listener(&self) -> Option<Arc<dyn HoldListener>> {
        self.listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Holds `event` (verified by the caller) until its git data arrives, or says it is
    /// [`Admission::Ready`] when the data is already here.
    pub async fn admit(&self, event: Event, origin: Origin) -> Result<Admission, AdmitError> {
        let (repo, waits) = waits_for(&event)?;
        if self.holds(&event.id) {
            return Ok(Admission::Held);
        }
        if self.is_ready(&repo, &waits).await {
            return Ok(Admission::Ready);
        }
        {
            let mut held = self.lock();
            if held.values().map(Vec::len).sum::<usize>() >= self.capacity {
                return Err(AdmitError::Full);
            }
            let events = held.entry(repo.clone()).or_default();
            if events.iter().any(|held| held.event.id == event.id) {
                return Ok(Admission::Held);
            }
            debug!(id = %event.id, %repo, "held until its git data arrives");
            events.push(Held {
                event,
                waits,
                since: Instant::now(),
            });
        }
        if let Some(listener) = self.listener() {
            listener.holding(&repo, origin);
        }
        Ok(Admission::Held)
    }

    /// Whether the event with `id` is held.
    pub fn holds(&self, id: &EventId) -> bool {
        self.lock()
            .values()
            .flatten()
            .any(|held| held.event.id == *id)
    }

    /// The held events matching `filter`.
    pub fn matching(&self, filter: &Filter) -> Vec<Event> {
        self.lock()
            .values()
            .flatten()
            .filter(|held| matches(filter, &held.event))
            .map(|held| held.event.clone())
            .collect()
    }

    /// Every git object the held states and PRs of `repo` need.
    pub fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
        let held = self.lock();
        let events = held.get(repo).map(Vec::as_slice).unwrap_or_default();
        events
            .iter()
            .flat_map(|held| match &held.waits {
                Waits::Announcement => BTreeSet::new(),
                Waits::State(oids) => oids.clone(),
                Waits::PullRequest(tip, _) => BTreeSet::from([tip.clone()]),
            })
            .collect()
    }

    /// The held PRs of `repo` that name clone URLs of their own, with their tips.
    pub fn event_sources(&self, repo: &RepoRef) -> Vec<EventSource> {
        let held = self.lock();
        let events = held.get(repo).map(Vec::as_slice).unwrap_or_default();
        events
            .iter()
            .filter_map(|held| match &held.waits {
                Waits::PullRequest(tip, urls) if !urls.is_empty() => Some(EventSource {
                    missing: BTreeSet::from([tip.clone()]),
                    clone_urls: urls.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// Whether anything of `repo` is held.
    pub fn has_pending(&self, repo: &RepoRef) -> bool {
        self.lock()
            .get(repo)
            .is_some_and(|events| !events.is_empty())
    }

    /// Releases the held events of `repo` whose objects are all `present`: a satisfied
    /// state brings the repository's announcements with it (announcements first, then
    /// states, then PRs), and the repository is promoted. Returns how many were released.
    pub async fn release_satisfied(
        &self,
        repo: &RepoRef,
        present: &(dyn Fn(&GitOid) -> bool + Send + Sync),
    ) -> Result<usize, ReleaseError> {
        let released = self.take_satisfied(repo, present);
        let promoted = released
            .iter()
            .any(|held| matches!(held.waits, Waits::Announcement));
        for (index, held) in released.iter().enumerate() {
            if let Err(error) = self.store(&held.event).await {
                // Keeps what was not stored, to be released on the next call.
                self.put_back(repo, released[index..].to_vec());
                return Err(error);
            }
        }
        if promoted {
            info!(%repo, "repository promoted: its announcement is served");
        }
        Ok(released.len())
    }

    /// Drops the events held longer than the expiry; returns how many.
    pub async fn expire(&self) -> usize {
        let expired: Vec<EventId> = {
            let mut held = self.lock();
            let mut expired = Vec::new();
            for events in held.values_mut() {
                events.retain(|held| {
                    let keep = held.since.elapsed() < self.expiry;
                    if !keep {
                        expired.push(held.event.id);
                    }
                    keep
                });
            }
            held.retain(|_, events| !events.is_empty());
            expired
        };
        let count = expired.len();
        if count > 0 {
            warn!(count, "held events expired without their git data");
            if let Some(listener) = self.listener() {
                listener.dropped(expired).await;
            }
        }
        count
    }

    /// Expires held events every `every`, forever.
    pub async fn run_expiry(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            self.expire().await;
        }
    }

    /// Whether the git data `waits` names is already here: for an announcement, a
    /// state of its repository is served.
    async fn is_ready(&self, repo: &RepoRef, waits: &Waits) -> bool {
        let oids: Vec<&GitOid> = match waits {
            Waits::Announcement => return self.serves_a_state(repo).await,
            Waits::State(oids) => oids.iter().collect(),
            Waits::PullRequest(tip, _) => vec![tip],
        };
        let Some(path) = self.layout.path_of(repo.pubkey(), repo.identifier()) else {
            return false;
        };
        path.is_dir() && objects_present(&path, &oids).await
    }

    /// Whether the relay serves a state of `repo`.
    async fn serves_a_state(&self, repo: &RepoRef) -> bool {
        let filter = Filter::new()
            .kind(Kind::Custom(KIND_REPO_STATE))
            .author(*repo.pubkey())
            .identifier(repo.identifier());
        match self.relay.negentropy_items(&filter).await {
            Ok(items) => !items.is_empty(),
            Err(error) => {
                warn!(%error, %repo, "cannot read the repository's states");
                false
            }
        }
    }

    /// Takes the satisfied events of `repo` out, in release order.
    fn take_satisfied(&self, repo: &RepoRef, present: &dyn Fn(&GitOid) -> bool) -> Vec<Held> {
        let mut held = self.lock();
        let Some(events) = held.get_mut(repo) else {
            return Vec::new();
        };
        let state_ready = |held: &Held| match &held.waits {
            Waits::State(oids) => oids.iter().all(present),
            _ => false,
        };
        let any_state = events.iter().any(state_ready);
        let (mut out, kept): (Vec<Held>, Vec<Held>) =
            events.drain(..).partition(|held| match &held.waits {
                Waits::Announcement => any_state,
                Waits::State(oids) => oids.iter().all(present),
                Waits::PullRequest(tip, _) => present(tip),
            });
        *events = kept;
        if events.is_empty() {
            held.remove(repo);
        }
        out.sort_by_key(|held| match held.waits {
            Waits::Announcement => 0,
            Waits::State(_) => 1,
            Waits::PullRequest(..) => 2,
        });
        out
    }

    /// Holds `events` of `repo` again (their release failed).
    fn put_back(&self, repo: &RepoRef, events: Vec<Held>) {
        self.lock().entry(repo.clone()).or_default().extend(events);
    }

    /// Saves a released event in the relay's database and delivers it.
    async fn store(&self, event: &Event) -> Result<(), ReleaseError> {
        match self.relay.ingest(event).await {
            Ok(IngestOutcome::Rejected { reason, .. }) => Err(ReleaseError::Failed(reason)),
            Ok(_) => Ok(()),
            Err(error) => Err(ReleaseError::Failed(error.to_string())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<RepoRef, Vec<Held>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The repository `event` belongs to and what it waits for.
fn waits_for(event: &Event) -> Result<(RepoRef, Waits), AdmitError> {
    if event.kind.as_u16() == KIND_REPO_ANNOUNCEMENT {
        let announcement = parse_announcement(event)?;
        return Ok((announcement.repo, Waits::Announcement));
    }
    let held = hold_event(event.clone(), Origin::Synced, Timestamp::now())?;
    let waits = match held.kind {
        grasp_purgatory::HeldKind::State { .. } => Waits::State(held.needed_oids()),
        grasp_purgatory::HeldKind::PullRequest { tip, clone_urls } => {
            Waits::PullRequest(tip, clone_urls)
        }
        _ => return Err(AdmitError::NotHeld(event.kind.as_u16())),
    };
    Ok((held.repo, waits))
}

/// Whether every object of `oids` is in the repository at `path` (`git cat-file -e`).
async fn objects_present(path: &Path, oids: &[&GitOid]) -> bool {
    for oid in oids {
        let status = tokio::process::Command::new("git")
            .arg("--git-dir")
            .arg(path)
            .args(["cat-file", "-e", oid.as_str()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        if !status.is_ok_and(|status| status.success()) {
            return false;
        }
    }
    true
}
