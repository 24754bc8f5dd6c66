//! Tokio adapter for grasp-sync.
//!
//! This crate will drive the pure [`grasp_sync_core`] sync engine against real
//! relays: a WebSocket `RelayTransport` (rustls for `wss://`), a NIP-77 client,
//! NIP-11 limits, the self-subscriber, timers, Prometheus metrics and a graceful
//! shutdown. It adds no decision of its own: every decision lives in the core.
//!
//! Status: not built yet (see the issue "grasp-sync-tokio: run the engine against
//! real relays over WebSocket"). Today it only re-exports the core so the
//! workspace compiles.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use grasp_sync_core as core;
