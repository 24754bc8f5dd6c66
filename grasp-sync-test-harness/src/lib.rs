//! Integration-test harness of the grasp-sync workspace (`publish = false`).
//!
//! The peers the tests, benches and examples run against, all on loopback:
//!
//! * [`relays`]: remote nostr relays. An in-process nostr-relay-builder relay
//!   behind a WebSocket proxy that counts, refuses NIP-77, clamps limits and
//!   injects seeded faults ([`relays::TestRelay`]); the real nostr-rs-relay and
//!   strfry as processes; a raw NIP-01 client. Formerly
//!   `grasp-sync-tokio/tests/support`.
//! * [`git`]: real git servers (`git daemon`, smart HTTP over
//!   `git http-backend`), source repositories, hanging and stalling servers,
//!   and the relay a purgatory releases into. Formerly
//!   `grasp-purgatory/tests/support`.
//!
//! Tests keep their old module names with an import, e.g.
//! `use grasp_sync_test_harness::relays as support;`.
//!
//! Signed events and ids come from `grasp-sync-test-support`, which depends on
//! `nostr` alone so that the core's unit tests can use it; this crate depends
//! on the library crates (grasp-sync-core, grasp-sync-tokio, grasp-purgatory).
//! Harness code panics on setup failures: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod git;
pub mod relays;
