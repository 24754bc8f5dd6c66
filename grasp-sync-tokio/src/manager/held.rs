//! `HeldRepositories`: the host's handle on what it holds outside what it
//! serves until git data arrives (a GRASP purgatory), usable from any task.
//! Its notes reach the run loop over a channel and become the engine's
//! `handle_repository_held`, `handle_repository_promoted` and
//! `handle_held_dropped`.

use grasp_sync_core::nip34::RepoRef;
use nostr::prelude::{Event, EventId};
use tokio::sync::{mpsc, oneshot};

/// What the host tells the engine about what it holds.
#[derive(Debug)]
pub(crate) enum HeldNote {
    /// The host holds this repository's announcement.
    Hold(RepoRef),
    /// The host holds this announcement (since before the sync started).
    HoldAnnouncement(Box<Event>),
    /// The host released it: its git data arrived.
    Promote(RepoRef),
    /// The host discarded these held events without their data.
    Dropped(Vec<EventId>),
    /// The host asks which repositories are held.
    List(oneshot::Sender<Vec<RepoRef>>),
}

/// The sync manager's run loop has ended (or was never started and the
/// manager was dropped): nothing more reaches the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the sync manager has stopped")]
pub struct ManagerStopped;

/// Tells a running [`SyncManager`](super::SyncManager) which repositories
/// the host holds until their git data arrives, and which held events it
/// dropped. Cloneable; each call waits only for room in the run loop's
/// queue, not for the engine. A held repository is synced only by Layer 1
/// (its announcement and states) until promoted; then its patches, PRs,
/// issues and replies are synced like a newly discovered repository's. The
/// engine also holds a repository by itself when the store answers
/// [`IngestOutcome::Held`](grasp_sync_core::store::IngestOutcome::Held) for
/// its announcement, and promotes it by itself when the own relay serves
/// its announcement (the host stored it: its git data arrived), so a host
/// that stores a promoted announcement on its relay need not call
/// [`HeldRepositories::promote`].
///
/// ```no_run
/// use grasp_sync_tokio::core::nip34::RepoRef;
/// use grasp_sync_tokio::{HeldRepositories, ManagerStopped};
///
/// async fn git_data_arrived(held: &HeldRepositories, repo: RepoRef) -> Result<(), ManagerStopped> {
///     held.promote(repo).await
/// }
/// ```
#[derive(Clone, Debug)]
pub struct HeldRepositories {
    sender: mpsc::Sender<HeldNote>,
}

impl HeldRepositories {
    /// A handle sending on `sender` (the run loop's held-notes channel).
    pub(crate) fn new(sender: mpsc::Sender<HeldNote>) -> Self {
        HeldRepositories { sender }
    }

    /// The host holds `repo`'s announcement (its git data has not arrived):
    /// the sync keeps to its announcement and states.
    pub async fn hold(&self, repo: RepoRef) -> Result<(), ManagerStopped> {
        self.send(HeldNote::Hold(repo)).await
    }

    /// The host holds `announcement` (held before this sync started, so no
    /// store answer says so): its repository is held, and its states are
    /// synced from the relays it lists. Anything but an announcement is
    /// ignored.
    pub async fn hold_announcement(&self, announcement: Event) -> Result<(), ManagerStopped> {
        self.send(HeldNote::HoldAnnouncement(Box::new(announcement)))
            .await
    }

    /// The host released `repo`'s announcement (its git data arrived): the
    /// sync starts on the events that tag it. A repository not held is
    /// left alone.
    pub async fn promote(&self, repo: RepoRef) -> Result<(), ManagerStopped> {
        self.send(HeldNote::Promote(repo)).await
    }

    /// The host discarded these held events (they expired without their
    /// data): a later sync fetches them again.
    pub async fn dropped(&self, ids: Vec<EventId>) -> Result<(), ManagerStopped> {
        self.send(HeldNote::Dropped(ids)).await
    }

    /// The repositories held now (told by [`HeldRepositories::hold`], or
    /// held because the store answered `Held` for their announcement), in
    /// the order they were first held; a promoted one is no longer listed.
    /// Answered by the run loop between two of its inputs.
    pub async fn list(&self) -> Result<Vec<RepoRef>, ManagerStopped> {
        let (answer, answered) = oneshot::channel();
        self.send(HeldNote::List(answer)).await?;
        answered.await.map_err(|_| ManagerStopped)
    }

    async fn send(&self, note: HeldNote) -> Result<(), ManagerStopped> {
        self.sender.send(note).await.map_err(|_| ManagerStopped)
    }
}
