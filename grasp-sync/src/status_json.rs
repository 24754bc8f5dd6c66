//! The sync's status as JSON, for `/status` and the `--once` report.

use grasp_purgatory::core::purgatory::HostLimit;
use grasp_purgatory::{HeldRepository, PurgatoryStatus, ServedRepository, Serving, ThrottledHost};
use grasp_sync_tokio::core::engine::LiveMode;
use grasp_sync_tokio::{RelayStatus, SyncStatus};
use serde_json::{json, Value};

/// The `/status` document (also the `--once` JSON summary's base): the sync's `status`
/// and, with `--git-root`, `purgatory`'s under `purgatory`. What the own relay refused
/// for good is counted and named at the top whichever way the event took: the sync's
/// refusals (an event handed to the own relay, or one the purgatory gate knew the own
/// relay would refuse) and purgatory's (a state or PR refused when released), in
/// `store_refused` and, the later of the two, `last_store_refusal` (one line).
pub fn status_document(status: &SyncStatus, purgatory: Option<&PurgatoryStatus>) -> Value {
    let mut json = status_json(status);
    let Some(purgatory) = purgatory else {
        return json;
    };
    json["purgatory"] = purgatory_json(purgatory);
    json["store_refused"] =
        (status.engine.store_refused + purgatory.events_refused_by_store).into();
    let sync_at = status.last_store_refusal.as_ref().map(|refusal| refusal.at);
    if let Some(refusal) = &purgatory.last_store_refusal {
        if sync_at.is_none_or(|at| at <= refusal.at) {
            json["last_store_refusal"] = refusal.to_string().into();
        }
    }
    json
}

/// `status` as a JSON object.
pub fn status_json(status: &SyncStatus) -> Value {
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
        "store_refused": status.engine.store_refused,
        "last_store_refusal": status.last_store_refusal.as_ref().map(ToString::to_string),
        "sync_plus": sync_plus_json(status),
        "relays": status.relays.iter().map(relay_json).collect::<Vec<_>>(),
    })
}

/// GRASP-03 Sync+: what it holds now, what it brought, and what its caps left out.
fn sync_plus_json(status: &SyncStatus) -> Value {
    let (plus, engine) = (&status.sync_plus, &status.engine);
    json!({
        "enabled": status.sync_plus_enabled,
        "participants": plus.participants,
        "relay_lists": plus.relay_lists,
        "outbox_relays": plus.outbox_relays,
        "index_relays": plus.index_relays,
        "events_stored": engine.sync_plus_events,
        "passes": engine.sync_plus_passes,
        "participants_over_cap": engine.sync_plus_participants_over_cap,
        "list_relays_left_out": engine.sync_plus_list_relays_left_out,
        "relays_over_cap": engine.sync_plus_relays_over_cap,
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
        "reasons": relay.reasons(),
        "connection": format!("{:?}", relay.report.connection).to_lowercase(),
        "health": relay.report.health.as_str(),
        "method": format!("{:?}", relay.report.method),
        "events_received": relay.report.events_received,
        "events_received_again": relay.report.events_received_again,
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

/// Purgatory's `status` as a JSON object: what is held, whether every held event is
/// accounted for, and which repositories are not fetchable or still waiting, and why.
pub fn purgatory_json(status: &PurgatoryStatus) -> Value {
    json!({
        "all_accounted": status.all_accounted,
        "events_held": status.events_held,
        "events_releasing": status.events_releasing,
        "events_released": status.events_released,
        "events_expired": status.events_expired,
        "events_refused": status.events_refused,
        "events_refused_by_store": status.events_refused_by_store,
        "last_store_refusal": status.last_store_refusal.as_ref().map(ToString::to_string),
        "bytes_held": status.bytes_held,
        "journal_bytes": status.journal_bytes,
        "journal_records_rejected": status.journal_records_rejected,
        "events_not_fetchable": status.events_not_fetchable,
        "not_fetchable_by_reason": status.not_fetchable_by_reason,
        "not_fetchable": status.not_fetchable.iter().map(held_json).collect::<Vec<_>>(),
        "repositories_waiting": status.repositories_waiting,
        "repositories_sweeping": status.repositories_sweeping,
        "still_waiting": status.still_waiting.iter().map(held_json).collect::<Vec<_>>(),
        "fetches_in_flight": status.fetches_in_flight,
        "fetches_by_domain": status.fetches_by_domain,
        "throttled_hosts": status.throttled_hosts.iter().map(throttled_host_json).collect::<Vec<_>>(),
        "throttled_hosts_total": status.throttled_hosts_total,
        "oids_fetched": status.oids_fetched,
        "repositories_created": status.repositories_created,
        "clone_urls_skipped_own_service": status.clone_urls_skipped_own_service,
        "repositories_served": status.repositories_served,
        "repositories_serving_newest": status.repositories_serving_newest,
        "repositories_behind": status.repositories_behind,
        "repositories_reconciling": status.repositories_reconciling,
        "reconciliations": status.reconciliations,
        "refs_updated": status.refs_updated,
        "served": status.served.iter().map(served_json).collect::<Vec<_>>(),
    })
}

/// One served repository: whether it serves its newest state, or what it lacks, and
/// when it was last reconciled.
fn served_json(repository: &ServedRepository) -> Value {
    let (serving, state, missing, reason) = match &repository.serving {
        Serving::Newest { state } => ("newest", Some(state.to_hex()), 0, None),
        Serving::NoState => ("no_state", None, 0, None),
        Serving::Behind {
            state,
            missing_objects,
            reason,
        } => (
            "behind",
            state.map(|id| id.to_hex()),
            *missing_objects,
            Some(reason.clone()),
        ),
        _ => ("unknown", None, 0, None),
    };
    json!({
        "repo": repository.repo.to_string(),
        "serving": serving,
        "state": state,
        "missing_objects": missing,
        "reason": reason,
        "reconciled_at": repository.reconciled_at.as_secs(),
    })
}

/// One per-host fetch throttle: its key, its limits (`max_per_minute` and
/// `max_concurrent` null when unlimited) and whether they are an operator's override,
/// what it has in flight, started within the window and queued, and the estimated
/// seconds until its queue drains.
fn throttled_host_json(host: &ThrottledHost) -> Value {
    let (per_minute, concurrent) = match host.limit {
        HostLimit::Limited {
            max_per_minute,
            max_concurrent,
        } => (Some(max_per_minute), Some(max_concurrent)),
        _ => (None, None),
    };
    json!({
        "host": host.key,
        "limit": host.limit.to_string(),
        "max_per_minute": per_minute,
        "max_concurrent": concurrent,
        "override": host.overridden,
        "in_flight": host.in_flight,
        "started_in_window": host.started_in_window,
        "queued": host.queued,
        "drain_secs": host.drain_estimate.as_secs(),
    })
}

fn held_json(repository: &HeldRepository) -> Value {
    json!({
        "repo": repository.repo,
        "events": repository.events,
        "state": repository.state.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purgatory_s_status_lists_its_throttled_hosts() {
        let json = purgatory_json(&PurgatoryStatus::default());
        assert_eq!(json["throttled_hosts"], json!([]));
        assert_eq!(json["throttled_hosts_total"], json!(0));
    }

    #[test]
    fn the_store_s_last_refusal_for_good_is_one_line_naming_the_event_relay_and_reason() {
        use grasp_sync_tokio::core::store::StoreRefusal;
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, RelayUrl};
        let mut status = SyncStatus::default();
        let document = status_json(&status);
        assert_eq!(document["store_refused"], json!(0));
        assert_eq!(document["last_store_refusal"], Value::Null);
        let state = EventBuilder::new(Kind::Custom(30618), "")
            .finalize(&Keys::generate())
            .unwrap();
        let relay = RelayUrl::parse("ws://127.0.0.1:7000").unwrap();
        let reason = "invalid: event of 200000 bytes over the own relay's message limit";
        status.engine.store_refused = 1;
        status.last_store_refusal = Some(StoreRefusal::new(
            &state,
            &relay,
            reason,
            nostr::prelude::Timestamp::from_secs(1_700_000_000),
        ));
        let document = status_json(&status);
        assert_eq!(document["store_refused"], json!(1));
        assert_eq!(
            document["last_store_refusal"],
            json!(format!(
                "kind 30618 {} from ws://127.0.0.1:7000: {reason}",
                state.id
            ))
        );
    }

    #[test]
    fn refusals_by_the_own_relay_are_counted_and_the_later_named_whichever_way_they_took() {
        use grasp_purgatory::{hold_event, Origin, ReleaseRefusal};
        use grasp_sync_tokio::core::store::StoreRefusal;
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, RelayUrl, Timestamp};
        let keys = Keys::generate();
        let state = |content: &str| {
            EventBuilder::new(Kind::Custom(30618), content)
                .tag(nostr::prelude::Tag::identifier("repo"))
                .finalize(&keys)
                .unwrap()
        };
        let (synced, released) = (state("a"), state("b"));
        let relay = RelayUrl::parse("ws://127.0.0.1:7000").unwrap();
        let mut sync = SyncStatus::default();
        sync.engine.store_refused = 1;
        sync.last_store_refusal = Some(StoreRefusal::new(
            &synced,
            &relay,
            "invalid: event of 204366 bytes over the own relay's message limit",
            Timestamp::from_secs(1_700_000_000),
        ));
        let held = hold_event(released.clone(), Origin::Synced, Timestamp::from_secs(0)).unwrap();
        let mut purgatory = PurgatoryStatus::default();
        purgatory.events_refused_by_store = 2;
        purgatory.last_store_refusal = Some(ReleaseRefusal::new(
            &held,
            "invalid: event too large: 102356",
            Timestamp::from_secs(1_700_000_100),
        ));
        let document = status_document(&sync, Some(&purgatory));
        assert_eq!(document["store_refused"], json!(3));
        let later = format!(
            "kind 30618 {} of 30617:{}:repo: invalid: event too large: 102356",
            released.id,
            keys.public_key().to_hex()
        );
        assert_eq!(document["last_store_refusal"], json!(later));
        assert_eq!(document["purgatory"]["last_store_refusal"], json!(later));
        assert_eq!(document["purgatory"]["events_refused_by_store"], json!(2));
        // The sync's is later: it is named.
        purgatory.last_store_refusal = Some(ReleaseRefusal::new(
            &held,
            "invalid: event too large: 102356",
            Timestamp::from_secs(1_600_000_000),
        ));
        let document = status_document(&sync, Some(&purgatory));
        assert!(document["last_store_refusal"]
            .as_str()
            .unwrap()
            .starts_with(&format!(
                "kind 30618 {} from ws://127.0.0.1:7000: ",
                synced.id
            )));
        // Without purgatory: the sync's alone.
        let document = status_document(&sync, None);
        assert_eq!(document["store_refused"], json!(1));
        assert!(document.get("purgatory").is_none());
    }

    #[test]
    fn sync_plus_says_whether_it_is_on_what_it_holds_and_what_its_caps_left_out() {
        let mut status = SyncStatus::default();
        status.sync_plus_enabled = true;
        status.sync_plus.participants = 12;
        status.sync_plus.relay_lists = 9;
        status.sync_plus.outbox_relays = 4;
        status.sync_plus.index_relays = 1;
        status.engine.sync_plus_events = 30;
        status.engine.sync_plus_passes = 3;
        status.engine.sync_plus_participants_over_cap = 2;
        status.engine.sync_plus_list_relays_left_out = 5;
        status.engine.sync_plus_relays_over_cap = 6;
        assert_eq!(
            status_json(&status)["sync_plus"],
            json!({
                "enabled": true,
                "participants": 12,
                "relay_lists": 9,
                "outbox_relays": 4,
                "index_relays": 1,
                "events_stored": 30,
                "passes": 3,
                "participants_over_cap": 2,
                "list_relays_left_out": 5,
                "relays_over_cap": 6,
            })
        );
    }
}
