//! Purgatory in the sidecar: announcements (for clone URLs) are read from
//! the own relay, released events are published to it. Missing bare
//! repositories are created under `--git-root` (unless
//! `--git-root-managed-externally`), and clone URLs on the hosts of
//! `--own-relay` and `--service-url` are never fetched from. Each repository
//! serves the newest state of its maintainers and its pull request tips,
//! reconciled at least every `--reconcile-interval`.

use std::sync::Arc;

use async_trait::async_trait;
use grasp_purgatory::core::purgatory::OwnService;
use grasp_purgatory::{AnnouncementError, Announcements, Purgatory, PurgatoryConfig, StoreSink};
use grasp_sync_tokio::core::url_policy::CloneUrlPolicy;
use grasp_sync_tokio::RelayStore;
use nostr::prelude::{Event, Filter};

use crate::cli::{Settings, FLAG_VARIABLES};

/// The own relay as purgatory's source of announcements, states and pull requests.
struct OwnRelayAnnouncements {
    store: RelayStore,
}

#[async_trait]
impl Announcements for OwnRelayAnnouncements {
    async fn query(&self, filter: &Filter) -> Result<Vec<Event>, AnnouncementError> {
        self.store
            .events(filter)
            .await
            .map_err(|error| AnnouncementError::Backend(error.to_string()))
    }
}

/// Builds the purgatory over `store` (the own relay) if `--git-root` is
/// given; the error is one line for the user.
pub(crate) fn build(
    settings: &Settings,
    store: &RelayStore,
    registry: &prometheus::Registry,
) -> Result<Option<Purgatory>, String> {
    let Some(root) = &settings.git_root else {
        return Ok(None);
    };
    let policy = CloneUrlPolicy::new()
        .allow_local_addresses(settings.allow_local_addresses)
        .allow_http(settings.allow_insecure_clone_urls)
        .allow_git_protocol(settings.allow_insecure_clone_urls);
    // `NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY` and the per-host fetch limits'
    // variables are the command line's (the twins of its flags): the flag wins over
    // them.
    let config = PurgatoryConfig::default()
        .apply_env(|name| {
            (!FLAG_VARIABLES.contains(&name))
                .then(|| std::env::var(name).ok())
                .flatten()
        })
        .map_err(|error| error.to_string())?;
    let mut builder = Purgatory::builder().config(config);
    if let Some(interval) = settings.reconcile_interval {
        builder = builder.reconcile_interval(interval);
    }
    if let Some(max) = settings.host_max_concurrent {
        builder = builder.host_max_concurrent(max);
    }
    if let Some(per_minute) = settings.host_max_per_minute {
        builder = builder.host_max_per_minute(per_minute);
    }
    if let Some(limits) = &settings.host_limits {
        for entry in limits.iter() {
            tracing::info!(%entry, "per-host fetch limit");
        }
        builder = builder.host_limits(limits.clone());
    }
    let purgatory = builder
        .announcements(Arc::new(OwnRelayAnnouncements {
            store: store.clone(),
        }))
        .repos_root(root)
        .clone_policy(policy)
        .sink(Arc::new(StoreSink::new(store.clone())))
        .registry(registry.clone())
        .persist_to(root.join("purgatory.journal"))
        .own_service(own_service(settings)?)
        .repositories_managed_externally(settings.git_root_managed_externally)
        // The sync's self-subscription reports every announcement the own relay
        // serves (`run`'s `on_own_announcement`).
        .announcements_followed(true)
        .build()
        .map_err(|error| error.to_string())?;
    Ok(Some(purgatory))
}

/// Our own service: the own relay's host and every `--service-url`'s (with
/// their ports when the URLs name one).
fn own_service(settings: &Settings) -> Result<OwnService, String> {
    std::iter::once(&settings.own_relay)
        .chain(&settings.service_urls)
        .try_fold(OwnService::new(), |own, url| {
            own.with_url(url.as_str())
                .map_err(|error| format!("own service: {error}"))
        })
}
