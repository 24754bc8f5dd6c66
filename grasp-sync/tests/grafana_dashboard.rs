//! The Grafana dashboard (`grasp-sync/deploy/grafana-dashboard.json`) asks only for metrics the
//! code registers: every metric name in every panel's query (and in the template
//! variables' queries) is registered in a registry built the way the sidecar builds
//! its own (proactive sync's and purgatory's metrics in one registry).
//!
//! A metric with labels appears in `/metrics` only once a series of it exists, so
//! scraping a run would miss the ones that had nothing to count yet. Instead each name
//! is probed in the registry itself: registering another collector under a name that
//! is taken fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use grasp_purgatory::{ChannelSink, MemoryAnnouncements, Purgatory};
use grasp_sync_tokio::core::store::MemoryEventStore;
use grasp_sync_tokio::SyncManager;
use nostr::prelude::RelayUrl;
use prometheus::{IntGauge, Registry};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../deploy/grafana-dashboard.json");

/// Words of PromQL that are not metric names when they stand outside `{…}`: the
/// aggregation operators (`sum by (x) (…)` puts a word between the operator and its
/// parenthesis) and the other keywords.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
];

/// Histogram and summary series carry these suffixes on the registered name.
const SERIES_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

/// The registry the sidecar builds: proactive sync's metrics and purgatory's.
fn sidecar_registry() -> Registry {
    let registry = Registry::new();
    let own = RelayUrl::parse("ws://127.0.0.1:1").unwrap();
    let _manager = SyncManager::builder()
        .own_relay(own)
        .store(Arc::new(MemoryEventStore::new()))
        .registry(registry.clone())
        .build()
        .expect("the sync manager builds");
    let (sink, _released) = ChannelSink::new();
    let root = std::env::temp_dir().join(format!("grasp-sync-dashboard-{}", std::process::id()));
    let _purgatory = Purgatory::builder()
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repos_root(&root)
        .sink(Arc::new(sink))
        .registry(registry.clone())
        .build()
        .expect("purgatory builds");
    registry
}

/// Whether `name` is taken in `registry`: a gauge of that name cannot be registered.
fn registered(registry: &Registry, name: &str) -> bool {
    let probe = IntGauge::new(name, "probe").expect("a valid metric name");
    match registry.register(Box::new(probe.clone())) {
        Ok(()) => {
            registry
                .unregister(Box::new(probe))
                .expect("unregister the probe");
            false
        }
        Err(_) => true,
    }
}

/// The metric names of one PromQL expression: identifiers outside label matchers,
/// ranges, strings and `by (…)` lists, not followed by `(` (a function), not a keyword,
/// not a Grafana variable (`$job`, `$__rate_interval`).
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut after_grouping = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' | '[' | '"' => {
                let close = match c {
                    '{' => '}',
                    '[' => ']',
                    _ => '"',
                };
                i += 1;
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if after_grouping => {
                // `by (a, b)`: label names.
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                after_grouping = false;
            }
            '$' => {
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next] == ' ' {
                    next += 1;
                }
                let function = chars.get(next) == Some(&'(');
                if ["by", "without", "on", "ignoring"].contains(&word.as_str()) {
                    after_grouping = true;
                } else if !function && !KEYWORDS.contains(&word.as_str()) {
                    names.push(word);
                }
            }
            c if c.is_ascii_digit() => {
                // A number (or a duration such as `1h` outside a range).
                while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every `expr` of every panel, and every template variable's `label_values(metric, …)`.
fn dashboard_queries(dashboard: &Value) -> (Vec<String>, Vec<String>) {
    let mut exprs = Vec::new();
    let mut panels_without_query = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        let before = exprs.len();
        exprs.extend(
            targets
                .iter()
                .filter_map(|target| target["expr"].as_str().map(str::to_owned)),
        );
        if exprs.len() == before {
            panels_without_query.push(panel["title"].to_string());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            if let Some(inner) = query
                .strip_prefix("label_values(")
                .and_then(|rest| rest.split(',').next())
            {
                exprs.push(inner.trim().to_owned());
            }
        }
    }
    (exprs, panels_without_query)
}

#[test]
fn the_expression_reader_finds_metric_names_and_nothing_else() {
    assert_eq!(
        metric_names(
            r#"sum by (reason) (rate(grasp_sync_refused_total{job=~"$job", relay="x y"}[$__rate_interval]))"#
        ),
        vec!["grasp_sync_refused_total"]
    );
    assert_eq!(
        metric_names(r#"increase(a_total{job=~"$job"}[1h]) / ignoring (x) b + 2"#),
        vec!["a_total", "b"]
    );
}

#[test]
fn every_metric_the_dashboard_names_is_registered_by_the_code() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let (exprs, without_query) = dashboard_queries(&dashboard);
    assert_eq!(
        without_query,
        Vec::<String>::new(),
        "every panel has a query"
    );
    let names: BTreeSet<String> = exprs.iter().flat_map(|expr| metric_names(expr)).collect();
    assert!(
        names.len() >= 20,
        "the dashboard names the metrics: {names:?}"
    );
    for expr in &exprs {
        assert!(!metric_names(expr).is_empty(), "{expr:?} names no metric");
    }
    let registry = sidecar_registry();
    assert!(
        !registered(&registry, "grasp_sync_not_a_metric"),
        "the probe tells a free name from a taken one"
    );
    let missing: Vec<&String> = names
        .iter()
        .filter(|name| {
            let base = SERIES_SUFFIXES
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| registered(&registry, base));
            base.is_none() && !registered(&registry, name)
        })
        .collect();
    assert_eq!(
        missing,
        Vec::<&String>::new(),
        "named by the dashboard, not registered"
    );
}
