//! Demo binary for grasp-sync.
//!
//! This package will hold a demo that runs the whole system embedded on loopback
//! (own relay, remote relays with and without NIP-77, a git server, a generated
//! NIP-34 data set) and a sidecar mode against an existing relay. Today it only
//! shows the core's default constants, because the engine and the adapters are
//! not built yet.

use grasp_sync_core::health::HealthConfig;

fn main() {
    let config = HealthConfig::default();
    println!("grasp-sync demo: not built yet; the core's relay health defaults are:");
    println!("{config:#?}");
}
