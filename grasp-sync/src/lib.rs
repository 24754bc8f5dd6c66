//! `grasp-sync`: GRASP-02 proactive sync and purgatory git-data sync as a sidecar
//! next to a Nostr relay you already run. The binary is [`main`]; see
//! `grasp-sync --help` and the workspace README.
//!
//! The library part is what the binary is made of, small enough for the demo to reuse
//! by dependency: reading a command line ([`args`]), the HTTP server of `/`, `/metrics`
//! and `/status` ([`http`]), the status page ([`page`]) and the status as JSON
//! ([`status_json`]). It decides nothing: the decisions are the core's, the work is
//! `grasp-sync-tokio`'s and `grasp-purgatory`'s.
//!
//! Modules: `cli` (flags checked into settings, one line per mistake), `run` (the own
//! relay probe, the wiring, signals), `once` (`--once`: the wait, the final lines, the
//! exit codes), `purgatory` (announcements, states and pull requests read from the own
//! relay; our own service = the `--own-relay` and `--service-url` hosts).
#![forbid(unsafe_code)]

pub mod args;
mod cli;
pub mod http;
mod once;
pub mod page;
mod purgatory;
mod run;
pub mod status_json;

pub use run::{colour, main};
