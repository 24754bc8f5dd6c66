//! How many events (and bytes of them) purgatory holds at most, and the error of an event refused because
//! a limit is reached (or because it could not be journaled).

/// The most events purgatory holds, and the most bytes of them, per repository, per
/// author and in total.
///
/// The per-author limits are each author's share: an event beyond them is refused with
/// [`AddError::Full`] (and counted). At a repository or total limit purgatory makes
/// room instead, fairly per author: it evicts the oldest event of the author who holds
/// the most, if they hold more than the newcomer's author, and refuses the newcomer
/// otherwise (an author at the top is the one who loses). Pull requests only evict pull
/// requests, and a repository's states (its maintainers') evict its pull requests when
/// it is full, so strangers' pull requests never lock a maintainer's state out. Every
/// eviction is journaled, logged and counted (`purgatory_events_evicted_total`). A newer
/// state replacing a held one is never refused for the counts (they stay), only when it
/// would take the bytes past a byte limit.
///
/// An event's bytes are those of its journal record (its JSON and about a hundred
/// bytes more), whether a journal is kept or not; the journal itself is compacted
/// before it holds more than four times the held bytes plus a megabyte (see
/// [`crate::journal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldLimits {
    /// Events of one repository (1 000): a burst of pull requests for one repository
    /// cannot take the whole purgatory.
    pub per_repository: usize,
    /// Events by one author (1 000), across repositories.
    pub per_author: usize,
    /// Events in total (10 000).
    pub total: usize,
    /// Bytes of the events of one repository (16 MiB).
    pub per_repository_bytes: usize,
    /// Bytes of the events by one author (16 MiB), across repositories.
    pub per_author_bytes: usize,
    /// Bytes of the events held in total (64 MiB): a few large events cannot take more
    /// memory (and journal) than this, however few they are.
    pub total_bytes: usize,
}

impl Default for HeldLimits {
    fn default() -> Self {
        HeldLimits {
            per_repository: 1_000,
            per_author: 1_000,
            total: 10_000,
            per_repository_bytes: 16 * 1024 * 1024,
            per_author_bytes: 16 * 1024 * 1024,
            total_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Which of the [`HeldLimits`] an event hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cap {
    /// [`HeldLimits::per_repository`].
    Repository,
    /// [`HeldLimits::per_author`].
    Author,
    /// [`HeldLimits::total`].
    Total,
    /// [`HeldLimits::per_repository_bytes`].
    RepositoryBytes,
    /// [`HeldLimits::per_author_bytes`].
    AuthorBytes,
    /// [`HeldLimits::total_bytes`].
    TotalBytes,
}

impl Cap {
    /// The `reason` label of `purgatory_events_refused_total` for this cap.
    pub fn label(self) -> &'static str {
        match self {
            Cap::Repository => "repository_full",
            Cap::Author => "author_full",
            Cap::Total => "total_full",
            Cap::RepositoryBytes => "repository_bytes_full",
            Cap::AuthorBytes => "author_bytes_full",
            Cap::TotalBytes => "total_bytes_full",
        }
    }

    /// Every cap, in the order they are checked.
    pub const ALL: [Cap; 6] = [
        Cap::Repository,
        Cap::Author,
        Cap::Total,
        Cap::RepositoryBytes,
        Cap::AuthorBytes,
        Cap::TotalBytes,
    ];

    /// What the cap counts: `events` or `bytes`.
    pub fn unit(self) -> &'static str {
        match self {
            Cap::Repository | Cap::Author | Cap::Total => "events",
            Cap::RepositoryBytes | Cap::AuthorBytes | Cap::TotalBytes => "bytes",
        }
    }
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cap::Repository | Cap::RepositoryBytes => "its repository",
            Cap::Author | Cap::AuthorBytes => "its author",
            Cap::Total | Cap::TotalBytes => "all repositories",
        })
    }
}

/// Why [`Purgatory::add`](crate::Purgatory::add) did not hold an event. Nothing was
/// held; the caller decides (proactive sync retries the refusals that are not
/// [`AddError::Malformed`] later, through [`PurgatoryGate`](crate::PurgatoryGate)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AddError {
    /// The event cannot wait for git data: wrong kind, malformed refs or tip, no
    /// repository.
    #[error(transparent)]
    Malformed(#[from] crate::held::HoldError),
    /// Purgatory already holds as many events as it may for `cap`.
    #[error("purgatory is full for {cap}: it holds {limit} {}", cap.unit())]
    Full {
        /// The limit reached.
        cap: Cap,
        /// Its value.
        limit: usize,
    },
    /// The event could not be written to the journal, so it would not survive a crash.
    #[error("writing the purgatory journal failed")]
    Journal(#[source] std::io::Error),
    /// This purgatory schedules fetches for a host that holds its own events
    /// ([`PurgatoryBuilder::host_purgatory`](crate::PurgatoryBuilder::host_purgatory)):
    /// the host holds the event and calls [`Purgatory::schedule`](crate::Purgatory::schedule).
    #[error("this purgatory holds no events: the host holds them and calls schedule")]
    HeldByHost,
}

impl AddError {
    /// The `reason` label of `purgatory_events_refused_total`, for the refusals that are
    /// counted (a full purgatory, a journal failure); `None` for malformed events and
    /// for events offered to a purgatory whose host holds its own events.
    pub fn refusal_label(&self) -> Option<&'static str> {
        match self {
            AddError::Malformed(_) | AddError::HeldByHost => None,
            AddError::Full { cap, .. } => Some(cap.label()),
            AddError::Journal(_) => Some("journal"),
        }
    }
}
