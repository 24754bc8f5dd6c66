//! Remote relays and a client (formerly `grasp-sync-tokio/tests/support`): an
//! in-process nostr relay and a tiny raw WebSocket client.
//!
//! * [`TestRelay`]: a nostr-relay-builder 0.44 `LocalRelay` (nostr 0.44 types, fed our
//!   nostr 0.45 events as JSON) served on `127.0.0.1` by our own `TcpListener`, with a thin
//!   WebSocket proxy in front of it on every connection. The proxy counts what clients do
//!   (concurrent REQs, NEG-OPENs, EVENTs and bytes sent), can refuse NIP-77 the ways real
//!   relays do ([`Nip77Refusal`]), can inject hostile events before every EOSE, and can drop
//!   the TCP connection on a client frame over a size limit (no close frame, like strfry),
//!   and can inject seeded faults ([`FaultPlan`]: drops, stalls, delays, reordered,
//!   duplicated, junk, truncated and oversized frames, NOTICE/CLOSED with every NIP-01
//!   prefix, NEG-ERR refusals, forged and off-filter events, endless negentropy), switched
//!   off at run time with [`TestRelay::stop_faults`].
//!   The same listener serves a NIP-11 document, or stalls NIP-11 requests. A preset
//!   emulates strfry's limits ([`TestRelayConfig::strfry`]). `stop` / `restart` are
//!   deterministic (our own accept loop; `LocalRelay::run`/`shutdown` are never used).
//! * [`NostrRsRelay`]: the real nostr-rs-relay 0.8.12 as a process (REQ-only, no EOSE for
//!   `limit: 0`), installed by `.ci/install-nostr-rs-relay`.
//! * [`Strfry`]: the real strfry as a process (NIP-77 answers up to ~1 MB, 128 KiB
//!   incoming frames), from `$STRFRY_BIN` or `.ci/install-strfry`; [`strfry_binary`]
//!   skips the test (one printed line) where strfry cannot be had, outside CI.
//!   `grasp-sync-test-support`'s blocking helper, shared with the benchmarks: call it
//!   between awaits.
//! * [`Client`] / [`connect_client`]: raw NIP-01 client over tokio-tungstenite for asserting
//!   what a relay says.
//!
//! Every wait is bounded; only `127.0.0.1` is used.
//!
//! Paused tokio time (`start_paused = true`): the relay and the proxy do real loopback socket
//! I/O. Probes (~270 connect + REQ rounds with restarts, also under CPU load) all passed,
//! because loopback data is ready before the runtime parks, but with paused time an idle
//! runtime jumps to the next timer: a wait for something that never comes ends at once, and
//! a timeout could in principle fire before a slow answer. Prefer real time for these tests.

mod client;
mod config;
mod endless;
mod faults;
mod flood;
mod inject;
mod nip34;
mod nostr_rs_relay;
mod proxy;
mod relay;
mod rng;

pub use client::{connect_client, try_connect_client, Client, RecvError, RECV_TIMEOUT};
pub use config::{Nip77Refusal, TestRelayConfig};
pub use faults::{FaultCounts, FaultPlan, NIP01_PREFIXES};
pub use flood::{flooding_remote, wait_until_held};
pub use grasp_sync_test_support::strfry::{strfry_binary, Strfry, StrfrySync, STRFRY_VERSION};
pub use nip34::{announcement, loopback_engine_config, manager_into, sign, sign_notes, tag};
pub use nostr_rs_relay::{nostr_rs_relay_binary, NostrRsRelay, NOSTR_RS_RELAY_VERSION};
pub use relay::TestRelay;
pub use rng::SeededRng;

/// The sum of the counter `name`'s series that carry a label with value
/// `label` (e.g. `grasp_sync_refused_total`, `resolved_address`).
pub fn counter_value(registry: &prometheus::Registry, name: &str, label: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric().to_vec())
        .filter(|metric| metric.get_label().iter().any(|l| l.value() == label))
        .map(|metric| metric.get_counter().get_value())
        .sum()
}
