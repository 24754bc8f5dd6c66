//! The sync's status as JSON, for `/status` and the `--once` report.

use grasp_sync_tokio::core::engine::LiveMode;
use grasp_sync_tokio::{RelayStatus, SyncStatus};
use serde_json::{json, Value};

/// `status` as a JSON object.
pub(crate) fn status_json(status: &SyncStatus) -> Value {
    json!({
        "historic_sync_complete": status.historic_sync_complete,
        "own_history_complete": status.own_history_complete,
        "repositories": status.repositories,
        "root_events": status.root_events,
        "relays_tracked": status.relays_tracked,
        "relays_connected": status.relays_connected,
        "relays_unreachable": status.relays_unreachable,
        "relays_dead": status.relays_dead,
        "relays_polling": status.relays_polling,
        "unconfirmed_stores": status.unconfirmed_stores,
        "events_stored": status.engine.events_stored,
        "relays": status.relays.iter().map(relay_json).collect::<Vec<_>>(),
    })
}

fn relay_json(relay: &RelayStatus) -> Value {
    let live = match relay.report.live_mode {
        Some(LiveMode::Full) => json!("full"),
        Some(LiveMode::Polling { uncovered_filters }) => json!({ "polling": uncovered_filters }),
        _ => Value::Null,
    };
    json!({
        "relay": relay.report.relay.as_str(),
        "connection": format!("{:?}", relay.report.connection).to_lowercase(),
        "health": relay.report.health.as_str(),
        "method": format!("{:?}", relay.report.method),
        "events_received": relay.report.events_received,
        "events_stored": relay.report.events_stored,
        "bytes_received": relay.bytes_received,
        "bytes_sent": relay.bytes_sent,
        "historic_confirmed": relay.report.historic_confirmed,
        "unreachable": relay.report.unreachable,
        "last_error": relay.report.last_error,
        "retry_in_secs": relay.retry_in.map(|retry| retry.as_secs_f64()),
        "live": live,
    })
}
