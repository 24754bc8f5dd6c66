//! How many events purgatory holds at most, and the error of an event refused because
//! a limit is reached (or because it could not be journaled).

/// The most events purgatory holds, per repository, per author and in total. An event
/// beyond a limit is refused with [`AddError::Full`] (and counted), never accepted and
/// dropped later. A newer state replacing a held one is never refused (the count stays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldLimits {
    /// Events of one repository (1 000): a burst of pull requests for one repository
    /// cannot take the whole purgatory.
    pub per_repository: usize,
    /// Events by one author (1 000), across repositories.
    pub per_author: usize,
    /// Events in total (10 000; with events of a few kilobytes, tens of megabytes).
    pub total: usize,
}

impl Default for HeldLimits {
    fn default() -> Self {
        HeldLimits {
            per_repository: 1_000,
            per_author: 1_000,
            total: 10_000,
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
}

impl Cap {
    /// The `reason` label of `purgatory_events_refused_total` for this cap.
    pub fn label(self) -> &'static str {
        match self {
            Cap::Repository => "repository_full",
            Cap::Author => "author_full",
            Cap::Total => "total_full",
        }
    }
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cap::Repository => "its repository",
            Cap::Author => "its author",
            Cap::Total => "all repositories",
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
    #[error("purgatory is full for {cap}: it holds {limit} events")]
    Full {
        /// The limit reached.
        cap: Cap,
        /// Its value.
        limit: usize,
    },
    /// The event could not be written to the journal, so it would not survive a crash.
    #[error("writing the purgatory journal failed")]
    Journal(#[source] std::io::Error),
}

impl AddError {
    /// The `reason` label of `purgatory_events_refused_total`, for the refusals that are
    /// counted (a full purgatory, a journal failure); `None` for malformed events.
    pub fn refusal_label(&self) -> Option<&'static str> {
        match self {
            AddError::Malformed(_) => None,
            AddError::Full { cap, .. } => Some(cap.label()),
            AddError::Journal(_) => Some("journal"),
        }
    }
}
