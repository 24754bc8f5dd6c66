//! Which Prometheus metric families a host exports, and under which names:
//! the per-family settings `grasp-sync-tokio`'s `SyncManagerBuilder` and
//! `grasp-purgatory`'s `PurgatoryBuilder` take.
//!
//! A host that already exports a family of the same name (the reference
//! GRASP server's `ngit_sync_relay_connected` is a 0–4 connection state, ours
//! a 0/1 gauge) keeps its own and either renames ours or leaves it out; every
//! other family of ours stays. A family is named by its *key*: the name it
//! has by default, without the crate's prefix where the crate has one
//! (`relay_connected` for `grasp_sync_relay_connected`; purgatory's families
//! have no prefix: `purgatory_events_held`). A family left out is registered
//! nowhere and is not in the crate's text handle; its values are still kept
//! (the crates' status reports read some of them).
//!
//! The settings are checked when the crate builds: a key the crate does not
//! export, a name Prometheus does not accept, or two families under one
//! name is a [`MetricFamiliesError`].
//!
//! ```
//! use grasp_sync_core::metric_families::{KnownFamily, MetricFamilies};
//!
//! let families = MetricFamilies::new()
//!     .leave_out("relay_connected")
//!     .name("relays_connected_total", "sync_relays_up");
//! let known = [
//!     KnownFamily::new("relay_connected", "grasp_sync_relay_connected"),
//!     KnownFamily::new("relays_connected_total", "grasp_sync_relays_connected_total"),
//!     KnownFamily::new("relay_status", "grasp_sync_relay_status"),
//! ];
//! let names = families.resolve(&known)?;
//! assert_eq!(names.name("relay_connected"), None);
//! assert_eq!(names.name("relays_connected_total"), Some("sync_relays_up"));
//! assert_eq!(names.name("relay_status"), Some("grasp_sync_relay_status"));
//! # Ok::<(), grasp_sync_core::metric_families::MetricFamiliesError>(())
//! ```

use std::collections::BTreeMap;

/// What a host said of one family.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FamilySetting {
    /// Exported under this name: the whole name, no prefix is added.
    Named(String),
    /// Registered nowhere and not in the text handle.
    LeftOut,
}

/// Per-family settings: families renamed or left out, by key; the others
/// keep their default names. Of two settings of one family, the later one
/// holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricFamilies {
    settings: BTreeMap<String, FamilySetting>,
}

impl MetricFamilies {
    /// No setting: every family under its default name.
    pub fn new() -> Self {
        Self::default()
    }

    /// Exports `family` as `name` (the whole metric name; a prefix the
    /// crate has is not added). A family exported only on request is
    /// exported once named.
    pub fn name(mut self, family: impl Into<String>, name: impl Into<String>) -> Self {
        self.settings
            .insert(family.into(), FamilySetting::Named(name.into()));
        self
    }

    /// Leaves `family` out: it is registered nowhere and is not in the text
    /// handle.
    pub fn leave_out(mut self, family: impl Into<String>) -> Self {
        self.settings.insert(family.into(), FamilySetting::LeftOut);
        self
    }

    /// Every setting of `other` applied over these (`other`'s hold where
    /// both name a family).
    pub fn with(mut self, other: MetricFamilies) -> Self {
        self.settings.extend(other.settings);
        self
    }

    /// What was said of `family`, if anything.
    pub fn setting(&self, family: &str) -> Option<&FamilySetting> {
        self.settings.get(family)
    }

    /// Every setting, by family key in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &FamilySetting)> {
        self.settings
            .iter()
            .map(|(family, setting)| (family.as_str(), setting))
    }

    /// `true` when nothing was said of any family.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }

    /// The name each of `known` is exported under (or that it is left out),
    /// after checking the settings: every family named is one of `known`,
    /// every name given is a Prometheus metric name, and no two families
    /// exported share a name. Default names are not checked here (the
    /// crate's Prometheus library checks them when it builds the family).
    pub fn resolve(&self, known: &[KnownFamily]) -> Result<FamilyNames, MetricFamiliesError> {
        for (family, setting) in &self.settings {
            if !known.iter().any(|candidate| candidate.family == family) {
                return Err(MetricFamiliesError::UnknownFamily {
                    family: family.clone(),
                    known: known
                        .iter()
                        .map(|candidate| candidate.family)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            if let FamilySetting::Named(name) = setting {
                if !is_metric_name(name) {
                    return Err(MetricFamiliesError::InvalidName {
                        family: family.clone(),
                        name: name.clone(),
                    });
                }
            }
        }
        let mut names = BTreeMap::new();
        let mut taken: BTreeMap<&str, &str> = BTreeMap::new();
        for candidate in known {
            let name = match self.settings.get(candidate.family) {
                Some(FamilySetting::Named(name)) => Some(name.as_str()),
                Some(FamilySetting::LeftOut) => None,
                None => candidate
                    .exported_by_default
                    .then_some(candidate.default_name.as_str()),
            };
            if let Some(name) = name {
                if let Some(first) = taken.insert(name, candidate.family) {
                    return Err(MetricFamiliesError::DuplicateName {
                        name: name.to_owned(),
                        first: first.to_owned(),
                        second: candidate.family.to_owned(),
                    });
                }
            }
            names.insert(candidate.family, name.map(str::to_owned));
        }
        Ok(FamilyNames { names })
    }
}

/// A family a crate exports, as [`MetricFamilies::resolve`] checks the
/// settings against it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownFamily {
    family: &'static str,
    default_name: String,
    exported_by_default: bool,
}

impl KnownFamily {
    /// The family `family`, exported as `default_name` unless a setting
    /// says otherwise.
    pub fn new(family: &'static str, default_name: impl Into<String>) -> Self {
        KnownFamily {
            family,
            default_name: default_name.into(),
            exported_by_default: true,
        }
    }

    /// The family `family`, exported only once a setting names it
    /// ([`MetricFamilies::name`]): one that repeats another's values with
    /// another meaning, for a host that wants that meaning.
    pub fn on_request(family: &'static str, default_name: impl Into<String>) -> Self {
        KnownFamily {
            exported_by_default: false,
            ..KnownFamily::new(family, default_name)
        }
    }
}

/// The name each family is exported under, as resolved from the settings
/// ([`MetricFamilies::resolve`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyNames {
    names: BTreeMap<&'static str, Option<String>>,
}

impl FamilyNames {
    /// The name `family` is exported under; `None` when it is left out (or
    /// not a family that was resolved).
    pub fn name(&self, family: &str) -> Option<&str> {
        self.names.get(family).and_then(Option::as_deref)
    }
}

/// Why per-family metric settings cannot be applied.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetricFamiliesError {
    /// A setting names a family the crate does not export.
    #[error("no metric family {family:?}; the families are: {known}")]
    UnknownFamily {
        /// The key given.
        family: String,
        /// The crate's family keys, comma-separated.
        known: String,
    },
    /// A family was given a name Prometheus does not accept.
    #[error(
        "metric family {family:?}: {name:?} is not a Prometheus metric name \
         ([a-zA-Z_:][a-zA-Z0-9_:]*)"
    )]
    InvalidName {
        /// The family's key.
        family: String,
        /// The name given.
        name: String,
    },
    /// Two families exported would share one name.
    #[error("metric families {first:?} and {second:?} would both be named {name:?}")]
    DuplicateName {
        /// The name.
        name: String,
        /// One family's key.
        first: String,
        /// The other family's key.
        second: String,
    },
}

/// `true` when `name` is a Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_' || first == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<KnownFamily> {
        vec![
            KnownFamily::new("relay_connected", "grasp_sync_relay_connected"),
            KnownFamily::new("relay_status", "grasp_sync_relay_status"),
            KnownFamily::on_request("connection_results_total", "grasp_sync_results_total"),
        ]
    }

    #[test]
    fn unnamed_families_keep_their_default_and_on_request_ones_stay_out() {
        let names = MetricFamilies::new().resolve(&known()).unwrap();
        assert_eq!(
            names.name("relay_connected"),
            Some("grasp_sync_relay_connected")
        );
        assert_eq!(names.name("connection_results_total"), None);
        let names = MetricFamilies::new()
            .name(
                "connection_results_total",
                "ngit_sync_connection_attempts_total",
            )
            .resolve(&known())
            .unwrap();
        assert_eq!(
            names.name("connection_results_total"),
            Some("ngit_sync_connection_attempts_total")
        );
    }

    #[test]
    fn the_later_setting_of_a_family_holds() {
        let families = MetricFamilies::new()
            .name("relay_connected", "up")
            .leave_out("relay_connected");
        assert_eq!(
            families.resolve(&known()).unwrap().name("relay_connected"),
            None
        );
        let families = families.with(MetricFamilies::new().name("relay_connected", "up"));
        assert_eq!(
            families.resolve(&known()).unwrap().name("relay_connected"),
            Some("up")
        );
    }

    #[test]
    fn an_unknown_family_is_an_error_that_lists_the_known_ones() {
        let error = MetricFamilies::new()
            .leave_out("relay_conected")
            .resolve(&known())
            .unwrap_err();
        assert!(matches!(
            &error,
            MetricFamiliesError::UnknownFamily { family, .. } if family == "relay_conected"
        ));
        assert!(error.to_string().contains("relay_connected, relay_status"));
    }

    #[test]
    fn a_name_prometheus_refuses_is_an_error() {
        for bad in ["", "not a name", "9lives", "relay-connected", "é"] {
            let error = MetricFamilies::new()
                .name("relay_status", bad)
                .resolve(&known())
                .unwrap_err();
            assert!(
                matches!(error, MetricFamiliesError::InvalidName { .. }),
                "{bad:?}"
            );
        }
        for good in ["a", "_x", "ns:sub_total", "A9"] {
            assert!(is_metric_name(good), "{good:?}");
        }
    }

    #[test]
    fn two_families_under_one_name_is_an_error_unless_one_is_left_out() {
        let clash = MetricFamilies::new().name("relay_status", "grasp_sync_relay_connected");
        assert!(matches!(
            clash.clone().resolve(&known()),
            Err(MetricFamiliesError::DuplicateName { name, .. }) if name == "grasp_sync_relay_connected"
        ));
        let moved = clash
            .leave_out("relay_connected")
            .resolve(&known())
            .unwrap();
        assert_eq!(
            moved.name("relay_status"),
            Some("grasp_sync_relay_connected")
        );
    }
}
