//! `/`: a small status page for a person, rendered from the same JSON as `/status`
//! ([`crate::status_json`]). Self-contained: inline CSS and a few lines of inline
//! JavaScript that fetch `/` again every few seconds and swap the content in (a
//! `<noscript>` meta refresh does the same without JavaScript). Nothing is loaded from
//! anywhere else.
//!
//! Relay URLs, errors, repository names and domains come from strangers' events and
//! relays: every text is HTML-escaped ([`escape`]) before it reaches the page, and the
//! page is served with a Content-Security-Policy that forbids loading or connecting to
//! anything but this server ([`CONTENT_SECURITY_POLICY`]).

use std::fmt::Write as _;

use serde_json::Value;

/// How often the page refreshes itself, in seconds (also in [`SCRIPT`]).
const REFRESH_SECS: u32 = 3;

/// The page's policy: nothing loaded from anywhere, no inline style or script but the
/// page's own (by their SHA-256, `STYLE` and `SCRIPT`; a unit test keeps the hashes
/// true), `fetch` to this server only, no framing. Text that slipped through escaping
/// could still not run a script.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; \
style-src 'sha256-31qra4gIRALyeXjJvk2N6mBrJvGzNhJyPf8VRO+1Jm4='; \
script-src 'sha256-TR1eNB9DUj+ok2IWC15v2yXCX4ItJJULe9cBI8U0WzM='; \
connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's style sheet.
const STYLE: &str = r#"
:root { color-scheme: light dark; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --mute: #6e7781; --line: #d0d7de; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; }
h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; }
.sub { color: var(--mute); margin-bottom: 1rem; }
.cards { display: flex; flex-wrap: wrap; gap: .6rem; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: .45rem .8rem; min-width: 7.5rem; }
.card b { display: block; font-size: 1.25rem; font-variant-numeric: tabular-nums; }
.card span { color: var(--mute); font-size: .85rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3rem .55rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; font-size: .85rem; color: var(--mute); }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.url { font-family: ui-monospace, monospace; overflow-wrap: anywhere; min-width: 13rem; }
td.err { color: var(--warn); overflow-wrap: anywhere; max-width: 28rem; }
td.err.bad { color: var(--bad); }
.ok { color: var(--ok); } .warn { color: var(--warn); } .bad { color: var(--bad); } .mute { color: var(--mute); }
#stale { color: var(--bad); }
"#;

/// The page's script: every few seconds, fetch `/` and swap its `#content` in.
const SCRIPT: &str = r#"
(function () {
  var stale = document.getElementById('stale');
  function refresh() {
    fetch('/', { cache: 'no-store' })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, 'text/html').getElementById('content');
        var now = document.getElementById('content');
        if (next && now) now.replaceWith(document.importNode(next, true));
        stale.hidden = true;
      })
      .catch(function () { stale.hidden = false; });
  }
  setInterval(refresh, 3000);
})();
"#;

/// `text` safe as HTML text and as a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page for `status` (the `/status` document).
pub fn render(status: &Value) -> String {
    let mut page = String::with_capacity(8 * 1024);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>grasp-sync status</title>\
         <noscript><meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\"></noscript>\
         <style>{STYLE}</style></head><body>\
         <h1>grasp-sync</h1>\
         <div class=\"sub\">GRASP-02 proactive sync; refreshes every {REFRESH_SECS} s \
         (<a href=\"/status\">/status</a> JSON, <a href=\"/metrics\">/metrics</a>) \
         <span id=\"stale\" hidden>— cannot reach the sidecar, showing the last state</span></div>"
    );
    content(&mut page, status);
    let _ = writeln!(page, "<script>{SCRIPT}</script></body></html>");
    page
}

/// The part the script swaps in: the counters, Sync+, the relays, purgatory.
fn content(page: &mut String, status: &Value) {
    page.push_str("<main id=\"content\">");
    let complete = status["historic_sync_complete"].as_bool().unwrap_or(false);
    page.push_str("<div class=\"cards\">");
    card(
        page,
        if complete { "complete" } else { "in progress" },
        if complete { "ok" } else { "warn" },
        "historic sync",
    );
    for (key, label) in [
        ("repositories", "repositories"),
        ("root_events", "root events"),
        ("events_stored", "events stored"),
        ("unconfirmed_stores", "unconfirmed stores"),
    ] {
        card(page, &number(&status[key]), "", label);
    }
    let connected = number(&status["relays_connected"]);
    let tracked = number(&status["relays_tracked"]);
    card(
        page,
        &format!("{connected} / {tracked}"),
        "",
        "relays connected",
    );
    let unreachable = status["relays_unreachable"].as_u64().unwrap_or(0);
    card(
        page,
        &unreachable.to_string(),
        if unreachable > 0 { "bad" } else { "" },
        "relays unreachable",
    );
    let refused = status["store_refused"].as_u64().unwrap_or(0);
    card(
        page,
        &refused.to_string(),
        if refused > 0 { "warn" } else { "" },
        "refused by your relay",
    );
    page.push_str("</div>");
    if let Some(line) = status["last_store_refusal"].as_str() {
        let _ = write!(
            page,
            "<div class=\"sub\">last refused by your relay: {}</div>",
            escape(line)
        );
    }
    if let Some(plus) = status.get("sync_plus").filter(|value| value.is_object()) {
        sync_plus(page, plus);
    }
    relays(
        page,
        status["relays"].as_array().map_or(&[][..], Vec::as_slice),
    );
    if let Some(purgatory) = status.get("purgatory").filter(|value| value.is_object()) {
        self::purgatory(page, purgatory);
    }
    page.push_str("</main>");
}

/// One counter: `value` in bold (with a class), `label` under it.
fn card(page: &mut String, value: &str, class: &str, label: &str) {
    let _ = write!(
        page,
        "<div class=\"card\"><b class=\"{}\">{}</b><span>{}</span></div>",
        escape(class),
        escape(value),
        escape(label)
    );
}

/// GRASP-03 Sync+: participants, their relay lists, the outbox relays synced from,
/// what came only through them, and what its caps left out.
fn sync_plus(page: &mut String, plus: &Value) {
    page.push_str("<h2>Sync+ (GRASP-03)</h2><div class=\"cards\">");
    let enabled = plus["enabled"].as_bool().unwrap_or(false);
    card(
        page,
        if enabled { "on" } else { "off" },
        if enabled { "ok" } else { "mute" },
        "conversation from participants' relays",
    );
    for (key, label) in [
        ("participants", "participants"),
        ("relay_lists", "relay lists known"),
        ("outbox_relays", "outbox relays"),
        ("events_stored", "events only through Sync+"),
    ] {
        card(page, &number(&plus[key]), "", label);
    }
    let left_out: u64 = [
        "participants_over_cap",
        "list_relays_left_out",
        "relays_over_cap",
    ]
    .iter()
    .filter_map(|key| plus[*key].as_u64())
    .sum();
    card(
        page,
        &number(&Value::from(left_out)),
        if left_out > 0 { "warn" } else { "" },
        "left out by its caps",
    );
    page.push_str("</div>");
}

/// Why a relay is synced, as the page says it: its `reasons`, or `—`.
fn reasons(relay: &Value) -> String {
    let words: Vec<&str> = relay["reasons"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if words.is_empty() {
        "—".to_owned()
    } else {
        words.join(", ")
    }
}

/// The relays' table.
fn relays(page: &mut String, relays: &[Value]) {
    let _ = write!(page, "<h2>Relays ({})</h2>", relays.len());
    if relays.is_empty() {
        page.push_str("<p class=\"mute\">No relay tracked yet.</p>");
        return;
    }
    page.push_str(
        "<table><thead><tr><th>relay</th><th>why</th><th>connection</th><th>health</th><th>method</th>\
         <th>live</th><th>events received</th><th>again</th><th>stored</th>\
         <th>bytes in</th><th>bytes out</th><th>historic</th><th>last error</th></tr></thead><tbody>",
    );
    for relay in relays {
        let connection = text(&relay["connection"]);
        let connection_class = match connection.as_str() {
            "connected" => "ok",
            "connecting" => "warn",
            _ => "mute",
        };
        let health = text(&relay["health"]);
        let health_class = match health.as_str() {
            "healthy" => "ok",
            "dead" => "bad",
            _ => "warn",
        };
        let historic = if relay["unreachable"].as_bool().unwrap_or(false) {
            ("unreachable", "bad")
        } else if relay["historic_confirmed"].as_bool().unwrap_or(false) {
            ("confirmed", "ok")
        } else {
            ("syncing", "warn")
        };
        let error_class = if historic.1 == "bad" {
            "err bad"
        } else {
            "err"
        };
        let live = match &relay["live"] {
            Value::String(mode) => mode.clone(),
            Value::Object(mode) => match mode.get("polling") {
                Some(filters) => format!("polling ({} filters uncovered)", number(filters)),
                None => "—".to_owned(),
            },
            _ => "—".to_owned(),
        };
        let _ = write!(
            page,
            "<tr><td class=\"url\">{}</td><td>{}</td><td class=\"{connection_class}\">{}</td>\
             <td class=\"{health_class}\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"{}\">{}</td>\
             <td class=\"{error_class}\">{}</td></tr>",
            escape(&text(&relay["relay"])),
            escape(&reasons(relay)),
            escape(&connection),
            escape(&health),
            escape(method(&text(&relay["method"]))),
            escape(&live),
            number(&relay["events_received"]),
            number(&relay["events_received_again"]),
            number(&relay["events_stored"]),
            bytes(&relay["bytes_received"]),
            bytes(&relay["bytes_sent"]),
            historic.1,
            historic.0,
            escape(relay["last_error"].as_str().unwrap_or("")),
        );
    }
    page.push_str("</tbody></table>");
}

/// Purgatory's counters, its fetches by domain and the repositories it names.
fn purgatory(page: &mut String, purgatory: &Value) {
    page.push_str("<h2>Purgatory</h2><div class=\"cards\">");
    let accounted = purgatory["all_accounted"].as_bool().unwrap_or(false);
    card(
        page,
        if accounted { "yes" } else { "no" },
        if accounted { "ok" } else { "warn" },
        "all accounted",
    );
    for (key, label) in [
        ("events_held", "held"),
        ("events_releasing", "releasing"),
        ("events_released", "released"),
        ("events_expired", "expired"),
        ("events_refused", "refused"),
        ("events_not_fetchable", "not fetchable"),
        ("fetches_in_flight", "fetches in flight"),
        ("oids_fetched", "objects fetched"),
        ("repositories_created", "repositories created"),
        ("repositories_served", "repositories served"),
        ("repositories_serving_newest", "serving their newest state"),
        ("repositories_behind", "behind"),
        ("refs_updated", "refs written"),
    ] {
        card(page, &number(&purgatory[key]), "", label);
    }
    page.push_str("</div>");
    served(page, purgatory);
    let domains = purgatory["fetches_by_domain"]
        .as_object()
        .filter(|domains| !domains.is_empty());
    page.push_str("<h2>Fetches by domain</h2>");
    match domains {
        None => page.push_str("<p class=\"mute\">No fetch in flight.</p>"),
        Some(domains) => {
            page.push_str(
                "<table><thead><tr><th>domain</th><th>fetches in flight</th></tr></thead><tbody>",
            );
            for (domain, count) in domains {
                let _ = write!(
                    page,
                    "<tr><td class=\"url\">{}</td><td class=\"n\">{}</td></tr>",
                    escape(domain),
                    number(count)
                );
            }
            page.push_str("</tbody></table>");
        }
    }
    throttled_hosts(page, purgatory);
    for (key, title) in [
        ("still_waiting", "Still on their way"),
        ("not_fetchable", "Not fetchable"),
    ] {
        let Some(repositories) = purgatory[key].as_array().filter(|list| !list.is_empty()) else {
            continue;
        };
        let _ = write!(
            page,
            "<h2>{title}</h2><table><thead><tr><th>repository</th><th>events</th>\
             <th>state</th></tr></thead><tbody>"
        );
        for repository in repositories {
            let _ = write!(
                page,
                "<tr><td class=\"url\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                escape(&text(&repository["repo"])),
                number(&repository["events"]),
                escape(&text(&repository["state"]))
            );
        }
        page.push_str("</tbody></table>");
    }
}

/// The per-host fetch throttles: limits (and whether an operator's override), in
/// flight, started in the window, queued, and how long the queue needs to drain.
fn throttled_hosts(page: &mut String, purgatory: &Value) {
    let Some(hosts) = purgatory["throttled_hosts"]
        .as_array()
        .filter(|hosts| !hosts.is_empty())
    else {
        return;
    };
    let _ = write!(
        page,
        "<h2>Hosts fetched from ({} active)</h2><table><thead><tr><th>host</th>\
         <th>limit (per minute/in flight)</th><th>in flight</th><th>started this minute</th>\
         <th>queued</th><th>drains in</th></tr></thead><tbody>",
        number(&purgatory["throttled_hosts_total"])
    );
    for host in hosts {
        let source = if host["override"].as_bool().unwrap_or(false) {
            " (override)"
        } else {
            ""
        };
        let _ = write!(
            page,
            "<tr><td class=\"url\">{}</td><td>{}{source}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} s</td></tr>",
            escape(&text(&host["host"])),
            escape(&text(&host["limit"])),
            number(&host["in_flight"]),
            number(&host["started_in_window"]),
            number(&host["queued"]),
            number(&host["drain_secs"]),
        );
    }
    page.push_str("</tbody></table>");
}

/// The sync method as the spec names it.
/// The served repositories: serving their newest state or behind (and why), and
/// when each was last reconciled.
fn served(page: &mut String, purgatory: &Value) {
    let Some(repositories) = purgatory["served"]
        .as_array()
        .filter(|list| !list.is_empty())
    else {
        return;
    };
    page.push_str(
        "<h2>Served repositories</h2><table><thead><tr><th>repository</th><th>serving</th>\
         <th>state</th><th>why behind</th><th>reconciled at (unix)</th></tr></thead><tbody>",
    );
    for repository in repositories {
        let serving = text(&repository["serving"]);
        let class = if serving == "behind" { "warn" } else { "ok" };
        let _ = write!(
            page,
            "<tr><td class=\"url\">{}</td><td class=\"{class}\">{}</td><td class=\"url\">{}</td>\
             <td>{}</td><td class=\"n\">{}</td></tr>",
            escape(&text(&repository["repo"])),
            escape(&serving),
            escape(&text(&repository["state"])),
            escape(&text(&repository["reason"])),
            escape(&text(&repository["reconciled_at"]))
        );
    }
    page.push_str("</tbody></table>");
}

fn method(debug_name: &str) -> &str {
    match debug_name {
        "Negentropy" => "NIP-77",
        "ReqEose" => "REQ+EOSE",
        other => other,
    }
}

/// A string value as it is, anything else as JSON (`null` as empty).
fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A number with thousands separated by thin spaces; not a number: `—`.
fn number(value: &Value) -> String {
    let Some(n) = value.as_u64() else {
        return "—".to_owned();
    };
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 * 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{202f}');
        }
        out.push(digit);
    }
    out
}

/// Bytes in B, KiB, MiB or GiB.
fn bytes(value: &Value) -> String {
    let Some(n) = value.as_u64() else {
        return "—".to_owned();
    };
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut size = n as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hostile_text_is_escaped_everywhere() {
        let hostile = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>&";
        let status = json!({
            "historic_sync_complete": false,
            "store_refused": 1,
            "last_store_refusal": format!("kind 30618 x from wss://evil.example: {hostile}"),
            "relays": [{
                "relay": format!("wss://evil.example/{hostile}"),
                "connection": hostile,
                "health": hostile,
                "method": hostile,
                "live": { "polling": 3 },
                "last_error": hostile,
                "unreachable": true,
                "reasons": [hostile, "outbox"],
            }],
            "purgatory": {
                "fetches_by_domain": { hostile: 2 },
                "throttled_hosts": [{ "host": hostile, "limit": hostile, "override": true }],
                "still_waiting": [{ "repo": hostile, "events": 1, "state": hostile }],
                "not_fetchable": [{ "repo": hostile, "events": 1, "state": hostile }],
                "served": [{ "repo": hostile, "serving": hostile, "state": hostile, "reason": hostile }],
            },
        });
        let page = render(&status);
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<img"), "{page}");
        assert!(!page.contains("'x'"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&gt;&lt;img"));
        // The page's own script is the only one.
        assert_eq!(page.matches("<script").count(), 1, "{page}");
    }

    /// `'sha256-…'`: the CSP source of an inline element's text.
    fn csp_hash(text: &str) -> String {
        use base64::Engine as _;
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(text.as_bytes());
        format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    }

    #[test]
    fn the_policy_allows_exactly_the_page_s_own_style_and_script() {
        let style = format!("style-src {};", csp_hash(STYLE));
        let script = format!("script-src {};", csp_hash(SCRIPT));
        assert!(CONTENT_SECURITY_POLICY.contains(&style), "{style}");
        assert!(CONTENT_SECURITY_POLICY.contains(&script), "{script}");
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
        let page = render(&json!({}));
        assert!(page.contains(&format!("<style>{STYLE}</style>")));
        assert!(page.contains(&format!("<script>{SCRIPT}</script>")));
        let refresh_ms = REFRESH_SECS * 1000;
        assert!(SCRIPT.contains(&format!("setInterval(refresh, {refresh_ms})")));
    }

    #[test]
    fn numbers_and_bytes_read_as_a_person_reads_them() {
        assert_eq!(number(&json!(1_234_567)), "1\u{202f}234\u{202f}567");
        assert_eq!(number(&json!(999)), "999");
        assert_eq!(number(&Value::Null), "—");
        assert_eq!(bytes(&json!(512)), "512 B");
        assert_eq!(bytes(&json!(1536)), "1.5 KiB");
        assert_eq!(bytes(&json!(3 * 1024 * 1024)), "3.0 MiB");
    }

    #[test]
    fn each_relay_says_why_it_is_synced_and_sync_plus_has_its_counters() {
        let status = json!({
            "sync_plus": {
                "enabled": true,
                "participants": 12,
                "relay_lists": 9,
                "outbox_relays": 4,
                "events_stored": 30,
                "relays_over_cap": 2,
                "list_relays_left_out": 1,
            },
            "relays": [
                { "relay": "wss://a.example", "reasons": ["announcement", "outbox"] },
                { "relay": "wss://b.example", "reasons": [] },
            ],
        });
        let page = render(&status);
        assert!(page.contains("<th>why</th>"), "{page}");
        assert!(
            page.contains("<td class=\"url\">wss://a.example</td><td>announcement, outbox</td>"),
            "{page}"
        );
        assert!(
            page.contains("<td class=\"url\">wss://b.example</td><td>—</td>"),
            "{page}"
        );
        assert!(page.contains("Sync+ (GRASP-03)"), "{page}");
        assert!(page.contains("<b class=\"ok\">on</b>"), "{page}");
        assert!(
            page.contains("<b class=\"\">12</b><span>participants</span>"),
            "{page}"
        );
        assert!(
            page.contains("<b class=\"warn\">3</b><span>left out by its caps</span>"),
            "{page}"
        );
    }

    #[test]
    fn each_throttled_host_shows_its_limit_override_queue_and_drain_time() {
        let status = json!({
            "purgatory": {
                "throttled_hosts_total": 2,
                "throttled_hosts": [
                    { "host": "example.com", "limit": "30/5", "override": false,
                      "in_flight": 5, "started_in_window": 30, "queued": 10, "drain_secs": 60 },
                    { "host": "git.mine.example", "limit": "unlimited", "override": true,
                      "in_flight": 16, "started_in_window": 400, "queued": 0, "drain_secs": 0 },
                ],
            },
        });
        let page = render(&status);
        assert!(page.contains("Hosts fetched from (2 active)"), "{page}");
        assert!(page.contains("<td>30/5</td>"), "{page}");
        assert!(page.contains("<td>unlimited (override)</td>"), "{page}");
        assert!(page.contains("<td class=\"n\">60 s</td>"), "{page}");
        assert!(!render(&json!({ "purgatory": {} })).contains("Hosts fetched from"));
    }

    #[test]
    fn an_empty_status_still_renders() {
        let page = render(&json!({}));
        assert!(page.contains("No relay tracked yet."));
        assert!(!page.contains("Purgatory"));
        assert!(!page.contains("Sync+"));
    }
}
