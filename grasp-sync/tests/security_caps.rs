//! SECURITY.md states every cap with its default: this test reads its tables
//! and compares each row with the code. It fails when a value differs, when a
//! row names a field or constant it does not know, and when a configuration
//! struct has a field that is neither in the tables nor classified below as
//! not a cap (so a new limit has to be documented).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use grasp_purgatory::PurgatoryConfig;
use grasp_sync_core::engine::EngineConfig;
use grasp_sync_tokio::ConnectionConfig;

const SECURITY_MD: &str = include_str!("../../SECURITY.md");

/// A count or a number of bytes, as the tables write it.
fn count(n: impl Into<u64>) -> String {
    n.into().to_string()
}

/// A `usize` count.
fn size(n: usize) -> String {
    n.to_string()
}

/// A duration, as the tables write it: `N s`, or `N ms` below whole seconds.
fn duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Every row the tables may have, with the code's default.
fn code_defaults() -> BTreeMap<&'static str, String> {
    let e = EngineConfig::default();
    let c = ConnectionConfig::default();
    let p = PurgatoryConfig::default();
    let rows = [
        ("Caps::max_relays", size(e.caps.max_relays)),
        (
            "Caps::max_relays_per_announcement",
            size(e.caps.max_relays_per_announcement),
        ),
        (
            "Caps::max_relays_per_author",
            size(e.caps.max_relays_per_author),
        ),
        (
            "Caps::relay_trial_period",
            duration(e.caps.relay_trial_period),
        ),
        (
            "Caps::max_relays_per_network",
            size(e.caps.max_relays_per_network),
        ),
        (
            "Caps::relay_earn_window",
            duration(e.caps.relay_earn_window),
        ),
        (
            "Caps::max_unannounced_repos",
            size(e.caps.max_unannounced_repos),
        ),
        (
            "Caps::max_unconfirmed_stores",
            size(e.caps.max_unconfirmed_stores),
        ),
        (
            "Caps::max_unconfirmed_store_bytes",
            size(e.caps.max_unconfirmed_store_bytes),
        ),
        ("Caps::refused_memory", size(e.caps.refused_memory)),
        (
            "Caps::received_ids_per_relay",
            size(e.caps.received_ids_per_relay),
        ),
        (
            "Caps::sent_replies_per_relay",
            size(e.caps.sent_replies_per_relay),
        ),
        (
            "Caps::max_negentropy_rounds",
            count(e.caps.max_negentropy_rounds),
        ),
        (
            "Caps::max_negentropy_need",
            size(e.caps.max_negentropy_need),
        ),
        (
            "Limits::negentropy_frame_size_limit",
            count(e.limits.negentropy_frame_size_limit),
        ),
        (
            "Limits::default_frame_budget",
            size(e.limits.default_frame_budget),
        ),
        (
            "Limits::max_subscriptions",
            size(e.limits.max_subscriptions),
        ),
        (
            "Limits::max_filters_per_req",
            size(e.limits.max_filters_per_req),
        ),
        ("Limits::chunk_size", size(e.limits.chunk_size)),
        ("Limits::page_limit", size(e.limits.page_limit)),
        ("Limits::fetch_chunk", size(e.limits.fetch_chunk)),
        ("Limits::max_event_size", size(e.limits.max_event_size)),
        ("Limits::max_event_tags", size(e.limits.max_event_tags)),
        ("Caps::max_bad_events", count(e.caps.max_bad_events)),
        ("Timeouts::fetch_attempts", count(e.timeouts.fetch_attempts)),
        (
            "Timeouts::batch_timeout",
            duration(e.timeouts.batch_timeout),
        ),
        (
            "Timeouts::batch_stall_limit",
            duration(e.timeouts.batch_stall_limit),
        ),
        (
            "Timeouts::req_resume_attempts",
            count(e.timeouts.req_resume_attempts),
        ),
        (
            "Timeouts::negentropy_timeout",
            duration(e.timeouts.negentropy_timeout),
        ),
        (
            "Timeouts::store_timeout",
            duration(e.timeouts.store_timeout),
        ),
        ("Timeouts::store_attempts", count(e.timeouts.store_attempts)),
        (
            "Timeouts::unreachable_after",
            count(e.timeouts.unreachable_after),
        ),
        (
            "SyncPlusConfig::participants_per_pass",
            size(e.sync_plus.participants_per_pass),
        ),
        (
            "SyncPlusConfig::relays_per_pass",
            size(e.sync_plus.relays_per_pass),
        ),
        ("SyncPlusConfig::max_relays", size(e.sync_plus.max_relays)),
        (
            "SyncPlusConfig::max_participants_per_repo",
            size(e.sync_plus.max_participants_per_repo),
        ),
        (
            "SyncPlusConfig::max_relays_per_list",
            size(e.sync_plus.max_relays_per_list),
        ),
        (
            "grasp_sync_core::engine::MAX_CANDIDATES",
            size(grasp_sync_core::engine::MAX_CANDIDATES),
        ),
        (
            "grasp_sync_core::engine::MAX_CANDIDATE_BYTES",
            size(grasp_sync_core::engine::MAX_CANDIDATE_BYTES),
        ),
        (
            "grasp_sync_core::engine::MAX_REFUSED_TAGS",
            size(grasp_sync_core::engine::MAX_REFUSED_TAGS),
        ),
        (
            "grasp_sync_core::engine::MIN_FRAME_BUDGET",
            size(grasp_sync_core::engine::MIN_FRAME_BUDGET),
        ),
        (
            "grasp_sync_core::url_policy::MAX_URL_LEN",
            size(grasp_sync_core::url_policy::MAX_URL_LEN),
        ),
        (
            "grasp_sync_core::nip34::MAX_IDENTIFIER_LEN",
            size(grasp_sync_core::nip34::MAX_IDENTIFIER_LEN),
        ),
        (
            "grasp_sync_core::nip34::MAX_REF_NAME_LEN",
            size(grasp_sync_core::nip34::MAX_REF_NAME_LEN),
        ),
        (
            "ConnectionConfig::max_message_size",
            size(c.max_message_size),
        ),
        ("ConnectionConfig::max_frame_size", size(c.max_frame_size)),
        (
            "ConnectionConfig::inbound_bytes_per_relay",
            size(c.inbound_bytes_per_relay),
        ),
        (
            "ConnectionConfig::inbound_bytes_total",
            size(c.inbound_bytes_total),
        ),
        ("ConnectionConfig::outgoing_queue", size(c.outgoing_queue)),
        (
            "ConnectionConfig::verified_signatures",
            size(c.verified_signatures),
        ),
        ("ConnectionConfig::ping_interval", duration(c.ping_interval)),
        ("HeldLimits::total", size(p.limits.total)),
        ("HeldLimits::per_repository", size(p.limits.per_repository)),
        ("HeldLimits::per_author", size(p.limits.per_author)),
        ("HeldLimits::total_bytes", size(p.limits.total_bytes)),
        (
            "HeldLimits::per_repository_bytes",
            size(p.limits.per_repository_bytes),
        ),
        (
            "HeldLimits::per_author_bytes",
            size(p.limits.per_author_bytes),
        ),
        (
            "DiskLimits::total_bytes",
            p.disk.total_bytes.map_or("none".to_owned(), count),
        ),
        (
            "DiskLimits::per_author_bytes",
            p.disk.per_author_bytes.map_or("none".to_owned(), count),
        ),
        ("PurgatoryConfig::expiry", duration(p.expiry)),
        (
            "GitFetcherConfig::fetch_timeout",
            duration(p.git.fetch_timeout),
        ),
        (
            "GitFetcherConfig::max_pack_bytes",
            p.git.max_pack_bytes.map_or("none".to_owned(), count),
        ),
        (
            "GitFetcherConfig::max_concurrent_fetches",
            size(p.git.max_concurrent_fetches),
        ),
        (
            "GitFetcherConfig::max_memory_bytes",
            p.git.max_memory_bytes.map_or("none".to_owned(), count),
        ),
        ("PurgatoryConfig::max_clone_urls", size(p.max_clone_urls)),
        (
            "PurgatoryConfig::max_pull_request_tips",
            size(p.max_pull_request_tips),
        ),
        (
            "PurgatoryConfig::attempt_deadline",
            duration(p.attempt_deadline),
        ),
        (
            "ThrottleConfig::max_concurrent",
            count(p.throttle.max_concurrent),
        ),
        (
            "ThrottleConfig::max_per_minute",
            count(p.throttle.max_per_minute),
        ),
        ("ThrottleConfig::window", duration(p.throttle.window)),
        (
            "grasp_purgatory::git::MAX_OIDS_PER_FETCH",
            size(grasp_purgatory::git::MAX_OIDS_PER_FETCH),
        ),
        (
            "grasp_purgatory::MAX_SINGLE_FETCHES",
            size(grasp_purgatory::MAX_SINGLE_FETCHES),
        ),
        (
            "grasp_purgatory::git::RESOLVE_TIMEOUT",
            duration(grasp_purgatory::git::RESOLVE_TIMEOUT),
        ),
        (
            "grasp_purgatory::git::RESOLVE_CACHE_TTL",
            duration(grasp_purgatory::git::RESOLVE_CACHE_TTL),
        ),
        (
            "grasp_purgatory::git::RESOLVE_CACHE_ENTRIES",
            size(grasp_purgatory::git::RESOLVE_CACHE_ENTRIES),
        ),
        (
            "grasp_sync_core::purgatory::IPV4_BLOCK_BITS",
            count(grasp_sync_core::purgatory::IPV4_BLOCK_BITS),
        ),
        (
            "grasp_sync_core::purgatory::IPV6_BLOCK_BITS",
            count(grasp_sync_core::purgatory::IPV6_BLOCK_BITS),
        ),
        (
            "grasp_sync_core::purgatory::MAX_REPOSITORY_MAINTAINERS",
            size(grasp_sync_core::purgatory::MAX_REPOSITORY_MAINTAINERS),
        ),
        (
            "grasp_sync_core::nip34::MAX_PULL_REQUEST_CLONE_URLS",
            size(grasp_sync_core::nip34::MAX_PULL_REQUEST_CLONE_URLS),
        ),
        (
            "grasp_sync_core::nip34::MAX_ANNOUNCEMENT_CLONE_URLS",
            size(grasp_sync_core::nip34::MAX_ANNOUNCEMENT_CLONE_URLS),
        ),
        (
            "grasp_purgatory::MAX_FILE_NAME_BYTES",
            size(grasp_purgatory::MAX_FILE_NAME_BYTES),
        ),
        (
            "grasp_purgatory::MAX_LISTED_REPOSITORIES",
            size(grasp_purgatory::MAX_LISTED_REPOSITORIES),
        ),
    ];
    let mut map = BTreeMap::new();
    for (field, value) in rows {
        assert!(map.insert(field, value).is_none(), "{field} listed twice");
    }
    map
}

/// Fields of each configuration struct that are not caps, and why; every
/// other field must have a row in SECURITY.md.
const NOT_CAPS: &[(&str, &[&str])] = &[
    (
        "EngineConfig",
        &[
            // The groups, each checked as its own struct below.
            "identity",
            "limits",
            "timeouts",
            "caps",
            "sync_plus",
            // Retry timing, described in prose under the sync table.
            "health",
            "seed",
            // A switch of the sync method (NIP-77 or REQ), no bound.
            "negentropy",
        ],
    ),
    (
        "Identity",
        &[
            // The URL policy, described in its own section.
            "relay_policy",
            // The operator's own choices.
            "service_relays",
            "bootstrap_relays",
            "own_relay",
        ],
    ),
    (
        "Limits",
        &[
            // When live subscriptions are rebuilt, not how much a stranger
            // can make us do.
            "consolidation_threshold",
            // A share of the subscription limit kept for history.
            "historic_slots",
        ],
    ),
    (
        "Timeouts",
        &[
            // When things happen, not how much a stranger can make us do.
            "batch_window",
            "quick_reconnect_window",
            "daily_min",
            "daily_max",
            "disconnect_check_interval",
            "uncovered_poll_interval",
        ],
    ),
    ("Caps", &[]),
    (
        "SyncPlusConfig",
        &[
            // The operator's own choices: the switch and the index relays.
            "enabled",
            "index_relays",
            // When the per-pass selection moves on, not how much a stranger can
            // make us do (the per-pass caps bound each pass).
            "pass_interval",
        ],
    ),
    ("ConnectionConfig", &[]),
    (
        "PurgatoryConfig",
        &[
            // The main loop's longest sleep.
            "loop_interval",
            // Debounce and backoff of the sync queue.
            "queue",
            // Structs of their own, checked as such.
            "throttle",
            "git",
            "limits",
            "disk",
            // The operator's own choices (per-host overrides of the throttle: under
            // "What you must still do as an operator").
            "own_service",
            "host_limits",
            "repositories_managed_externally",
            "persist_path",
            // How often served repositories are reconciled: a schedule, not a bound
            // on what strangers can make us hold.
            "reconcile",
        ],
    ),
    (
        "GitFetcherConfig",
        &[
            "git_program",
            "prlimit_program",
            // The clone URL policy, described in its own section.
            "policy",
            "resolver",
            // Switches of the host pin, described under "URLs from strangers": whether
            // an old git or proxy variables may bypass it.
            "allow_old_git",
            "keep_proxy_env",
        ],
    ),
    ("HeldLimits", &[]),
    ("DiskLimits", &[]),
    ("ThrottleConfig", &[]),
];

/// The field names of a struct, from its pretty `Debug` output: the lines
/// indented one level that name a field.
fn debug_fields(pretty: &str) -> BTreeSet<String> {
    pretty
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("    ")?;
            if rest.starts_with(' ') {
                return None;
            }
            let (name, _) = rest.split_once(": ")?;
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                .then(|| name.to_owned())
        })
        .collect()
}

/// Every configuration struct's fields, enumerated from the code.
fn struct_fields() -> BTreeMap<&'static str, BTreeSet<String>> {
    let p = PurgatoryConfig::default();
    let e = EngineConfig::default();
    BTreeMap::from([
        ("EngineConfig", debug_fields(&format!("{e:#?}"))),
        ("Identity", debug_fields(&format!("{:#?}", e.identity))),
        ("Limits", debug_fields(&format!("{:#?}", e.limits))),
        ("Timeouts", debug_fields(&format!("{:#?}", e.timeouts))),
        ("Caps", debug_fields(&format!("{:#?}", e.caps))),
        (
            "SyncPlusConfig",
            debug_fields(&format!("{:#?}", e.sync_plus)),
        ),
        (
            "ConnectionConfig",
            debug_fields(&format!("{:#?}", ConnectionConfig::default())),
        ),
        ("PurgatoryConfig", debug_fields(&format!("{p:#?}"))),
        ("GitFetcherConfig", debug_fields(&format!("{:#?}", p.git))),
        ("HeldLimits", debug_fields(&format!("{:#?}", p.limits))),
        ("DiskLimits", debug_fields(&format!("{:#?}", p.disk))),
        (
            "ThrottleConfig",
            debug_fields(&format!("{:#?}", p.throttle)),
        ),
    ])
}

/// The rows of every table of SECURITY.md whose header starts with
/// `first | second`: the first cell without backticks, and the second up
/// to a comment in parentheses.
fn table_rows(first: &str, second: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in SECURITY_MD.lines() {
        let Some(inner) = line.trim().strip_prefix('|') else {
            in_table = false;
            continue;
        };
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        if cells.len() < 2 {
            continue;
        }
        if cells[0] == first && cells[1] == second {
            in_table = true;
            continue;
        }
        if !in_table || cells[0].starts_with("---") {
            continue;
        }
        let name = cells[0].trim_matches('`').to_owned();
        let value = cells[1]
            .split(" (")
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        rows.push((name, value));
    }
    rows
}

#[test]
fn every_cap_in_security_md_is_the_code_default() {
    let code = code_defaults();
    let rows = table_rows("field", "default");
    assert!(rows.len() > 40, "the cap tables were not found: {rows:?}");

    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (field, value) in &rows {
        if !seen.insert(field.clone()) {
            problems.push(format!("{field}: listed twice"));
        }
        match code.get(field.as_str()) {
            None => problems.push(format!("{field}: not a cap this test knows")),
            Some(default) if default != value => problems.push(format!(
                "{field}: SECURITY.md says {value:?}, the code's default is {default:?}"
            )),
            Some(_) => {}
        }
    }
    for field in code.keys() {
        if !seen.contains(*field) {
            problems.push(format!("{field}: a cap missing from SECURITY.md"));
        }
    }
    assert!(problems.is_empty(), "SECURITY.md:\n{}", problems.join("\n"));
}

#[test]
fn every_config_field_is_a_documented_cap_or_classified_as_none() {
    let documented: BTreeSet<String> = table_rows("field", "default")
        .into_iter()
        .map(|(field, _)| field)
        .collect();
    let not_caps: BTreeMap<&str, &[&str]> = NOT_CAPS.iter().copied().collect();
    let mut problems = Vec::new();
    for (name, fields) in struct_fields() {
        assert!(!fields.is_empty(), "no fields read from {name}'s Debug");
        let exempt = not_caps.get(name).copied().unwrap_or_default();
        for field in &fields {
            let row = format!("{name}::{field}");
            match (documented.contains(&row), exempt.contains(&field.as_str())) {
                (false, false) => problems.push(format!(
                    "{row}: neither in SECURITY.md nor classified as not a cap"
                )),
                (true, true) => {
                    problems.push(format!("{row}: documented and classified as not a cap"))
                }
                _ => {}
            }
        }
        for field in exempt {
            if !fields.contains(*field) {
                problems.push(format!("{name}::{field}: classified but not a field"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Evaluates a constant's initialiser as the source writes it: whole numbers
/// (with `_` separators) multiplied together.
fn evaluate(expression: &str) -> Option<u64> {
    expression.split('*').try_fold(1u64, |product, factor| {
        let digits: String = factor.trim().chars().filter(|c| *c != '_').collect();
        product.checked_mul(digits.parse().ok()?)
    })
}

#[test]
fn every_fixed_bound_in_security_md_is_the_constant_in_the_source() {
    let rows = table_rows("constant", "value");
    assert!(!rows.is_empty(), "the fixed-bounds table was not found");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut problems = Vec::new();
    for (location, value) in rows {
        let Some((path, name)) = location.split_once(": ") else {
            problems.push(format!("{location}: not `<file>: <CONSTANT>`"));
            continue;
        };
        let source = match std::fs::read_to_string(format!("{root}/{path}")) {
            Ok(source) => source,
            Err(error) => {
                problems.push(format!("{location}: cannot read {path}: {error}"));
                continue;
            }
        };
        let needle = format!("const {name}: ");
        let found = source.lines().find_map(|line| {
            let (_, rest) = line.split_once(&needle)?;
            let (_, expression) = rest.split_once(" = ")?;
            evaluate(expression.trim_end_matches(';'))
        });
        match found {
            None => problems.push(format!("{location}: no numeric `const {name}` in {path}")),
            Some(code) if code.to_string() != value => problems.push(format!(
                "{location}: SECURITY.md says {value}, the source says {code}"
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "SECURITY.md:\n{}", problems.join("\n"));
}
