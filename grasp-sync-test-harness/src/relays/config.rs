//! [`TestRelayConfig`]: what a [`TestRelay`](super::TestRelay) serves and refuses, and the
//! nostr 0.44 types of its relay side (`r44`), shared by the relay and its proxy.

use super::faults::FaultPlan;

/// The relay side: nostr 0.44 types, all through the relay-builder prelude.
pub(crate) mod r44 {
    pub(crate) use nostr_relay_builder::prelude::{
        Event, Filter, JsonUtil, LocalRelay, MemoryDatabase, MemoryDatabaseOptions, NostrDatabase,
        RateLimit, RelayBuilder,
    };
}

/// How the proxy treats NIP-77 from clients: [`Nip77Refusal::Served`] forwards it to the
/// relay (relay-builder's negentropy, 60 000-byte frames); any other value answers as that
/// refusing relay would (the simulation's relay shares the behaviour) and forwards nothing.
pub use grasp_sync_test_support::relay::Nip77Refusal;

/// Configuration of a [`TestRelay`]. `Default`: NIP-77 served, relay-builder limits except
/// writes (unlimited), no frame size limit, no NIP-11 document, no hostile events, no
/// faults.
/// [`TestRelayConfig::strfry`]: strfry's limits, as far as the proxy can emulate them.
///
/// [`TestRelay`]: super::TestRelay
#[derive(Debug, Clone, Default)]
pub struct TestRelayConfig {
    /// NIP-77 behaviour (implemented by the proxy).
    pub nip77: Nip77Refusal,
    /// `RateLimit.max_reqs`: open REQs per connection; the next one gets
    /// `CLOSED "rate-limited: too many REQs"`. Default (None): 500.
    pub max_reqs: Option<usize>,
    /// `RateLimit.notes_per_minute` for EVENTs written by clients
    /// (`OK false "rate-limited: slow down"`). Default (None): `u32::MAX` (unlimited).
    pub notes_per_minute: Option<u32>,
    /// Limit applied per filter when a filter has no `limit` (and no `ids`). Default: 500.
    pub default_filter_limit: Option<usize>,
    /// `limit` values above this are silently clamped. Default: no cap.
    pub max_filter_limit: Option<usize>,
    /// NIP-11 document served (verbatim, `Content-Type: application/nostr+json`) on a plain
    /// HTTP GET carrying `Accept: application/nostr+json`. Any string, so malformed documents
    /// can be tested. None: such a GET gets `404`.
    pub nip11: Option<String>,
    /// Stall NIP-11: a GET with `Accept: application/nostr+json` is read but never answered
    /// (not a byte is written; the connection stays open until the relay is stopped or
    /// dropped). Counted in [`TestRelay::nip11_requests_seen`]. Overrides `nip11`; WebSocket
    /// upgrades and other HTTP requests on the same port are served as usual.
    ///
    /// [`TestRelay::nip11_requests_seen`]: super::TestRelay::nip11_requests_seen
    pub nip11_stall: bool,
    /// Largest client frame (text or binary message payload, in bytes) the proxy accepts. A
    /// longer one is not forwarded: the proxy drops the TCP connection at once, with no
    /// WebSocket close frame and no NOTICE (strfry: close code 1006 over 131 072 bytes).
    /// Counted in [`TestRelay::frames_too_large`]. The whole frame is read first (strfry may
    /// cut the connection while the client is still writing it). None: no limit (the
    /// proxy's own 64 MiB WebSocket limit).
    ///
    /// [`TestRelay::frames_too_large`]: super::TestRelay::frames_too_large
    pub max_frame_bytes: Option<usize>,
    /// Raw JSON event objects injected as `["EVENT",<sub_id>,<ev>]` before every EOSE the
    /// proxy forwards (forged / off-filter event tests). Not stored in the database.
    pub hostile: Vec<String>,
    /// Seeded faults the proxy injects ([`FaultPlan`]), from the start until
    /// [`TestRelay::stop_faults`](super::TestRelay::stop_faults). None: none.
    pub faults: Option<FaultPlan>,
}

impl TestRelayConfig {
    /// This configuration with `plan`'s faults.
    pub fn with_faults(self, plan: FaultPlan) -> TestRelayConfig {
        TestRelayConfig {
            faults: Some(plan),
            ..self
        }
    }

    /// strfry's `relay.maxWebsocketPayloadSize` (131 072 bytes), advertised as NIP-11
    /// `limitation.max_message_length`.
    pub const STRFRY_MAX_MESSAGE_LENGTH: usize = 131_072;
    /// strfry's `relay.maxFilterLimit`: `limit` (and a filter without one) is clamped to it.
    pub const STRFRY_MAX_LIMIT: usize = 500;
    /// strfry's `relay.maxSubsPerConnection`.
    pub const STRFRY_MAX_SUBSCRIPTIONS: usize = 200;

    /// strfry's limits as far as this proxy and relay-builder can emulate them:
    ///
    /// * frames over 131 072 bytes drop the TCP connection (no close frame, no NOTICE);
    /// * `limit` clamped to 500, and a filter without `limit` gets 500, silently;
    /// * 200 open REQs per connection;
    /// * a NIP-11 document shaped like strfry's: `supported_nips` with 77 and `limitation`
    ///   `{max_message_length: 131072, max_subscriptions: 200, max_filters: 200,
    ///   max_limit: 500, max_subid_length: 71}` (strfry's defaults);
    /// * NIP-77 served, writes unlimited (strfry has no write rate limit by default).
    ///
    /// NOT emulated (relay-builder's behaviour instead):
    ///
    /// * the `ERROR: ` prefix of strfry's messages;
    /// * the 201st REQ: strfry sends `NOTICE "ERROR: too many concurrent REQs"` (no CLOSED);
    ///   here it is `CLOSED "rate-limited: too many REQs"`;
    /// * 200 filters per REQ, 3 tag filters per filter, sub ids over 71 characters
    ///   (`CLOSED "ERROR: bad req: ..."` on strfry): all accepted here;
    /// * event age limits (more than 900 s in the future or 3 years old): accepted here;
    /// * `NEG-ERR "blocked: too many query results"` for large NIP-77 sets, and strfry's
    ///   negentropy frame size: relay-builder's negentropy (60 000-byte frames) is served;
    /// * an oversized frame is read completely before the connection is dropped (strfry can
    ///   cut it while the client is still sending, so the client may see a write error).
    ///
    /// Combine with struct update syntax (or [`TestRelayConfig::with_faults`]), e.g. a
    /// stalling strfry:
    /// `TestRelayConfig { nip11_stall: true, ..TestRelayConfig::strfry() }`.
    pub fn strfry() -> TestRelayConfig {
        let nip11 = serde_json::json!({
            "name": "strfry default",
            "description": "This is a strfry instance.",
            "software": "git+https://github.com/hoytech/strfry.git",
            "supported_nips": [1, 2, 4, 9, 11, 22, 28, 40, 70, 77],
            "limitation": {
                "max_message_length": Self::STRFRY_MAX_MESSAGE_LENGTH,
                "max_subscriptions": Self::STRFRY_MAX_SUBSCRIPTIONS,
                "max_filters": 200,
                "max_limit": Self::STRFRY_MAX_LIMIT,
                "max_subid_length": 71,
                "auth_required": false,
                "payment_required": false
            }
        });
        TestRelayConfig {
            max_frame_bytes: Some(Self::STRFRY_MAX_MESSAGE_LENGTH),
            max_filter_limit: Some(Self::STRFRY_MAX_LIMIT),
            default_filter_limit: Some(Self::STRFRY_MAX_LIMIT),
            max_reqs: Some(Self::STRFRY_MAX_SUBSCRIPTIONS),
            nip11: Some(nip11.to_string()),
            ..TestRelayConfig::default()
        }
    }
}
