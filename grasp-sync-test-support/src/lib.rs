//! Test support of the grasp-sync workspace: the one place the test suites,
//! benchmarks and examples get signed NIP-34 events and the ids they carry.
//!
//! - [`field`]: the field's data set, NIP-34 repositories of ours on two remotes
//!   among strangers' repositories and notes ([`field::dataset`]: 4 000 repositories
//!   are 116 000 events).
//! - [`net`]: free loopback ports ([`net::free_port`]).
//! - [`nip34`]: signed events — [`nip34::Announcement`] (30617) and the plain
//!   [`nip34::announcement`], states (30618), roots (patch 1617, pull request
//!   1618, issue 1621), pull request updates (1619), replies (1111), statuses
//!   (1630), quotes and noise, and forged copies.
//! - [`ids`]: git object ids and repository coordinates as text.
//! - [`relay`]: how a relay refuses NIP-77 ([`relay::Nip77Refusal`]), the one
//!   behaviour of the simulation's relay and the tokio tests' proxy.
//! - [`strfry`]: the real strfry relay as a process, blocking
//!   ([`strfry::Strfry`]: started at its defaults, loaded with `strfry import`, read
//!   back with `strfry export`, `strfry sync`), and where its binary comes from
//!   ([`strfry::strfry_binary`]).
//! - [`time`]: increasing `created_at` values for generated data sets
//!   ([`time::Timestamps`]). The clocks the code reads are the core's
//!   (`ManualClock`, `SystemClock`) and the tokio adapter's `TokioClock`.
//!
//! Hex goes through the `hex` crate everywhere (`hex::encode`, `hex::decode`),
//! as in the core's NIP-77 session; there is no hex helper here.
//!
//! This crate depends on `nostr` only (and std: threads and processes, no async
//! runtime), never on a workspace crate, so that the core's own unit tests can use
//! it without linking a second copy of the core.
//! It is a dev-dependency (and a dependency of the unpublished `examples` and
//! `benches` crates), never a normal dependency of a library crate.

pub mod field;
pub mod ids;
pub mod net;
pub mod nip34;
pub mod relay;
pub mod strfry;
pub mod time;
