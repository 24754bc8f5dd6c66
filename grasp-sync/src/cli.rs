//! The sidecar's command line: flags, each with an environment-variable twin
//! (the flag wins), and checking them into a [`Settings`] with one clear line
//! per mistake.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use grasp_purgatory::core::purgatory::{HostLimitError, HostLimits, HostOverride};
use nostr::prelude::RelayUrl;

/// The environment variable of `--git-root-managed-externally`: purgatory's own
/// (`grasp_purgatory::config::ENV_VARIABLES`), read here by the command line only.
pub(crate) const ENV_MANAGED_EXTERNALLY: &str = "NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY";

/// The environment variable of `--host-max-concurrent` (purgatory's own too).
pub(crate) const ENV_HOST_MAX_CONCURRENT: &str = "NGIT_PURGATORY_HOST_MAX_CONCURRENT";

/// The environment variable of `--host-max-per-minute` (purgatory's own too).
pub(crate) const ENV_HOST_MAX_PER_MINUTE: &str = "NGIT_PURGATORY_HOST_MAX_PER_MINUTE";

/// The environment variable of `--host-limit` (purgatory's own too).
pub(crate) const ENV_HOST_LIMITS: &str = "NGIT_PURGATORY_HOST_LIMITS";

/// Purgatory's variables the command line reads as its flags' twins: purgatory's
/// `apply_env` leaves them to it (the flag wins, and a bad value is reported once).
pub(crate) const FLAG_VARIABLES: &[&str] = &[
    ENV_MANAGED_EXTERNALLY,
    ENV_HOST_MAX_CONCURRENT,
    ENV_HOST_MAX_PER_MINUTE,
    ENV_HOST_LIMITS,
];

/// GRASP-02 proactive sync next to a relay you already run (strfry,
/// nostr-rs-relay, khatru, a nostr-relay-builder relay): reads the
/// repository announcements your relay accepted, pulls their patches, PRs,
/// issues and replies from every relay they name, and publishes them to your
/// relay.
///
/// With `--git-root`, states and PRs wait in purgatory until their commits are
/// fetched: purgatory creates each repository's bare repository
/// (`<dir>/<npub>/<identifier>.git`, `refs/purgatory` hidden from serving) and
/// never fetches from clone URLs on your own service (the hosts of `--own-relay`
/// and `--service-url`).
///
/// GRASP-03 "Sync+" (on by default, like the reference GRASP server): each
/// repository's conversation (issues, patches, PRs, comments, statuses; never
/// the discovery of repositories) is also synced from its participants' own
/// write relays, named in their relay lists (kinds 10002 and 10317). Per
/// repository and pass at most `NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS` (32)
/// participants and `NGIT_SYNC_PLUS_RELAYS_PER_PASS` (24) outbox relays,
/// rotating every `NGIT_SYNC_PLUS_PASS_SECS` (600), and at most
/// `NGIT_SYNC_PLUS_MAX_RELAYS` (200) relays added in total.
///
/// Every flag can also be set by the environment variable shown with it (the
/// flag wins when both are given); a repeatable flag's variable takes a
/// comma-separated list, a switch's `1` (on) or `0` (off). The tuning variables
/// of the spec apply too (`NGIT_SYNC_BATCH_WINDOW_MS`, `NGIT_PURGATORY_EXPIRY_SECS`,
/// …; see the README).
#[derive(Debug, Parser)]
#[command(
    name = "grasp-sync",
    version,
    after_help = "Exit codes with --once: 0 done (historic sync complete on every relay, every \
purgatory event released or expired); 5 done on the reachable relays, but N relays were \
unreachable and not synced from (named in the summary; their events may be missing; wins \
over 4); 4 done, but events are held as not fetchable (no usable clone URL, only your own \
service's, no announcement, or a missing repository with --git-root-managed-externally), \
named on the last line; 3 --timeout passed first, the last line names what is still held \
and why; 2 bad arguments; 1 failure; 130 signal."
)]
pub(crate) struct Args {
    /// Your relay. Read from: the announcements it accepted decide which
    /// repositories are synced, and what it holds is not fetched again.
    /// Published to: every synced event (and, with --git-root, every event
    /// purgatory releases). It is also one of your service URLs.
    #[arg(long, value_name = "URL", env = "NGIT_SYNC_OWN_RELAY")]
    pub(crate) own_relay: String,
    /// A URL under which announcements list your service, when it differs
    /// from --own-relay (repeatable; defaults to the own relay's URL). These
    /// URLs are us: only announcements listing one of them are synced, they
    /// are never synced from, and clone URLs on their hosts are never fetched
    /// from.
    #[arg(
        long = "service-url",
        value_name = "URL",
        env = "NGIT_SYNC_SERVICE_URLS",
        value_delimiter = ','
    )]
    pub(crate) service_urls: Vec<String>,
    /// A relay synced from the start and never dropped, whether or not an
    /// announcement lists it (repeatable). Relays the announcements list are
    /// synced without this flag.
    #[arg(
        long = "bootstrap-relay",
        value_name = "URL",
        env = "NGIT_SYNC_BOOTSTRAP_RELAYS",
        value_delimiter = ','
    )]
    pub(crate) bootstrap_relays: Vec<String>,
    /// GRASP-03 Sync+: also sync each repository's conversation from its
    /// participants' own write relays (`--sync-plus=0` or `false`: only from
    /// the relays announcements list). On by default.
    #[arg(
        long,
        value_name = "1|0",
        env = "NGIT_SYNC_PLUS_ENABLED",
        value_parser = switch,
        num_args = 0..=1,
        default_missing_value = "1"
    )]
    pub(crate) sync_plus: Option<bool>,
    /// Sync by REQ only, never NIP-77 negentropy (NEG-OPEN), even with
    /// relays that do it (`--no-negentropy=0` or `false`: NIP-77 where a
    /// relay does it, the default).
    #[arg(
        long,
        value_name = "1|0",
        env = "NGIT_SYNC_DISABLE_NEGENTROPY",
        value_parser = switch,
        num_args = 0..=1,
        default_missing_value = "1"
    )]
    pub(crate) no_negentropy: Option<bool>,
    /// A relay Sync+ asks for participants' relay lists (kinds 10002 and
    /// 10317) besides each repository's relays, e.g. wss://purplepag.es
    /// (repeatable). Nothing else is read from it.
    #[arg(
        long = "index-relay",
        value_name = "URL",
        env = "NGIT_USER_INDEX_RELAYS",
        value_delimiter = ','
    )]
    pub(crate) index_relays: Vec<String>,
    /// Purgatory's bare repositories (`<dir>/<npub>/<identifier>.git`):
    /// states and PRs wait until their commits are fetched from the
    /// repository's clone URLs. Omit to run without purgatory.
    #[arg(long, value_name = "DIR", env = "NGIT_PURGATORY_GIT_ROOT")]
    pub(crate) git_root: Option<PathBuf>,
    /// The repositories under `--git-root` are created by your GRASP server:
    /// purgatory does not create a missing one, its events wait (reported as
    /// not fetchable). Needs --git-root.
    #[arg(long, env = ENV_MANAGED_EXTERNALLY, value_parser = switch)]
    pub(crate) git_root_managed_externally: bool,
    /// Reconcile every repository under `--git-root` at least this often
    /// (jittered by ±10 %): its branches, tags and HEAD against the newest
    /// state of its maintainers, `refs/nostr/<id>` against its pull requests,
    /// missing objects fetched (GRASP-02 asks for at least hourly). Needs
    /// --git-root.
    #[arg(
        long,
        value_name = "SECS",
        env = "NGIT_PURGATORY_RECONCILE_INTERVAL_SECS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub(crate) reconcile_interval: Option<u64>,
    /// Git fetches in flight per host: per registrable domain (its
    /// subdomains share it) and per address block (IPv4 /24, IPv6 /48) a host
    /// name resolves to. At least 1. Needs --git-root. [default: 5]
    #[arg(
        long,
        value_name = "N",
        env = ENV_HOST_MAX_CONCURRENT,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(crate) host_max_concurrent: Option<u32>,
    /// Git fetches started per host within a minute, per registrable domain
    /// and per address block like --host-max-concurrent: a queue of n
    /// repositories on one host drains in about 60 s × ⌊(n − 1) / N⌋. At
    /// least 1. Needs --git-root. [default: 30]
    #[arg(
        long,
        value_name = "N",
        env = ENV_HOST_MAX_PER_MINUTE,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(crate) host_max_per_minute: Option<u32>,
    /// Limits of one host instead of the above (repeatable), e.g.
    /// `git.example.org=120/10` (fetches per minute / in flight) or
    /// `git.mine.example=unlimited` (no cap of its own; the 16 git fetch
    /// processes shared by all hosts still bound it). The exact host (every
    /// port, no subdomain) gets a throttle of its own and takes no slot of
    /// its address block; an override of a registrable domain covers its
    /// subdomains together. Only for servers you run or that agreed: anyone
    /// may list clone URLs on them. Needs --git-root.
    #[arg(
        long = "host-limit",
        value_name = "HOST=PER_MINUTE/CONCURRENT|HOST=unlimited",
        env = ENV_HOST_LIMITS,
        value_delimiter = ',',
        value_parser = host_override
    )]
    pub(crate) host_limits: Vec<HostOverride>,
    /// Let purgatory fetch over plain `http://` and `git://` (https only
    /// otherwise).
    #[arg(long, env = "NGIT_PURGATORY_ALLOW_INSECURE_CLONE_URLS", value_parser = switch)]
    pub(crate) allow_insecure_clone_urls: bool,
    /// Serve a status page on `/`, Prometheus `/metrics` and a JSON `/status`
    /// on this address.
    #[arg(long, value_name = "ADDR", env = "NGIT_SYNC_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Allow relays on loopback and private addresses.
    #[arg(long, env = "NGIT_SYNC_ALLOW_LOCAL_ADDRESSES", value_parser = switch)]
    pub(crate) allow_local_addresses: bool,
    /// Exit once the job is done: historic sync complete on every reachable
    /// relay and, with `--git-root`, every held event released, expired or
    /// reported not fetchable; prints a summary (exit codes below).
    #[arg(long, env = "NGIT_SYNC_ONCE", value_parser = switch)]
    pub(crate) once: bool,
    /// With `--once`: give up (exit 3, naming what is still held and why)
    /// after this many seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 600,
        env = "NGIT_SYNC_TIMEOUT_SECS"
    )]
    pub(crate) timeout: u64,
    /// With `--once`: print the summary as one JSON object on stdout (the
    /// `/status` document with `outcome`, `exit_code` and `unreachable_relays`
    /// added); the summary lines go to stderr.
    #[arg(long, env = "NGIT_SYNC_SUMMARY_JSON", value_parser = switch)]
    pub(crate) summary_json: bool,
    /// Log JSON lines instead of human-readable text (`RUST_LOG` filters).
    /// Text logs are coloured only when stderr is a terminal and `NO_COLOR`
    /// is not set.
    #[arg(long, env = "NGIT_SYNC_LOG_JSON", value_parser = switch)]
    pub(crate) log_json: bool,
}

/// One `--host-limit`: `HOST=PER_MINUTE/CONCURRENT` or `HOST=unlimited`.
fn host_override(value: &str) -> Result<HostOverride, String> {
    value
        .parse()
        .map_err(|error: HostLimitError| error.to_string())
}

/// A switch's value: `1` / `0` (any whole number: not 0 is on), or `true` /
/// `false` in any case (what clap gives a switch named on the command line, and
/// what the reference GRASP server's `NGIT_SYNC_PLUS_ENABLED` takes).
fn switch(value: &str) -> Result<bool, String> {
    match value.trim() {
        text if text.eq_ignore_ascii_case("true") => Ok(true),
        text if text.eq_ignore_ascii_case("false") || text.is_empty() => Ok(false),
        number => number
            .parse::<u64>()
            .map(|n| n != 0)
            .map_err(|_| format!("{value:?}: expected 1 (on) or 0 (off)")),
    }
}

/// The checked settings.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) own_relay: RelayUrl,
    pub(crate) git_root: Option<PathBuf>,
    pub(crate) git_root_managed_externally: bool,
    pub(crate) reconcile_interval: Option<std::time::Duration>,
    /// `None`: purgatory's default (5).
    pub(crate) host_max_concurrent: Option<u32>,
    /// `None`: purgatory's default (30).
    pub(crate) host_max_per_minute: Option<u32>,
    /// `None`: no `--host-limit` given.
    pub(crate) host_limits: Option<HostLimits>,
    pub(crate) allow_insecure_clone_urls: bool,
    pub(crate) service_urls: Vec<RelayUrl>,
    pub(crate) bootstrap_relays: Vec<RelayUrl>,
    /// `None`: the builder's (the environment's, else on).
    pub(crate) sync_plus: Option<bool>,
    /// `Some(true)`: NIP-77 off; `None`: the builder's (the environment's,
    /// else on).
    pub(crate) no_negentropy: Option<bool>,
    pub(crate) index_relays: Vec<RelayUrl>,
    pub(crate) metrics_addr: Option<SocketAddr>,
    pub(crate) allow_local_addresses: bool,
    pub(crate) once: bool,
    pub(crate) timeout: std::time::Duration,
    pub(crate) summary_json: bool,
}

/// The first per-host fetch flag given, with its variable: they set purgatory, which
/// runs only with `--git-root`.
fn purgatory_only_flag(args: &Args) -> Option<String> {
    [
        (
            args.host_max_concurrent.is_some(),
            "--host-max-concurrent",
            ENV_HOST_MAX_CONCURRENT,
        ),
        (
            args.host_max_per_minute.is_some(),
            "--host-max-per-minute",
            ENV_HOST_MAX_PER_MINUTE,
        ),
        (
            !args.host_limits.is_empty(),
            "--host-limit",
            ENV_HOST_LIMITS,
        ),
    ]
    .into_iter()
    .find(|(given, _, _)| *given)
    .map(|(_, flag, variable)| format!("{flag} ({variable})"))
}

/// Checks the flags; the error is one line for the user.
pub(crate) fn settings(args: &Args) -> Result<Settings, String> {
    if let Some(root) = &args.git_root {
        if !root.is_dir() {
            return Err(format!("--git-root {}: not a directory", root.display()));
        }
    }
    if args.git_root_managed_externally && args.git_root.is_none() {
        return Err(format!(
            "--git-root-managed-externally ({ENV_MANAGED_EXTERNALLY}) needs --git-root"
        ));
    }
    if args.reconcile_interval.is_some() && args.git_root.is_none() {
        return Err(
            "--reconcile-interval (NGIT_PURGATORY_RECONCILE_INTERVAL_SECS) needs --git-root"
                .to_owned(),
        );
    }
    if args.git_root.is_none() {
        if let Some(flag) = purgatory_only_flag(args) {
            return Err(format!("{flag} needs --git-root"));
        }
    }
    if args.summary_json && !args.once {
        return Err("--summary-json (NGIT_SYNC_SUMMARY_JSON) needs --once".to_owned());
    }
    let url = |flag: &str, value: &str| {
        RelayUrl::parse(value)
            .map_err(|error| format!("{flag} {value:?} is not a relay URL: {error}"))
    };
    let host_limits = match args.host_limits.as_slice() {
        [] => None,
        entries => Some(
            entries
                .iter()
                .try_fold(HostLimits::new(), |limits, entry| {
                    limits.with(entry.clone())
                })
                .map_err(|error| format!("--host-limit ({ENV_HOST_LIMITS}): {error}"))?,
        ),
    };
    Ok(Settings {
        own_relay: url("--own-relay", &args.own_relay)?,
        git_root: args.git_root.clone(),
        git_root_managed_externally: args.git_root_managed_externally,
        reconcile_interval: args.reconcile_interval.map(std::time::Duration::from_secs),
        host_max_concurrent: args.host_max_concurrent,
        host_max_per_minute: args.host_max_per_minute,
        host_limits,
        allow_insecure_clone_urls: args.allow_insecure_clone_urls,
        service_urls: args
            .service_urls
            .iter()
            .map(|value| url("--service-url", value))
            .collect::<Result<_, _>>()?,
        bootstrap_relays: args
            .bootstrap_relays
            .iter()
            .map(|value| url("--bootstrap-relay", value))
            .collect::<Result<_, _>>()?,
        sync_plus: args.sync_plus,
        no_negentropy: args.no_negentropy,
        index_relays: args
            .index_relays
            .iter()
            .map(|value| url("--index-relay", value))
            .collect::<Result<_, _>>()?,
        metrics_addr: args.metrics_addr,
        allow_local_addresses: args.allow_local_addresses,
        once: args.once,
        timeout: std::time::Duration::from_secs(args.timeout),
        summary_json: args.summary_json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_takes_numbers_like_the_spec_variables_and_clap_s_own_true() {
        assert_eq!(switch("1"), Ok(true));
        assert_eq!(switch(" 7 "), Ok(true));
        assert_eq!(switch("0"), Ok(false));
        assert_eq!(switch(""), Ok(false));
        assert_eq!(switch("true"), Ok(true));
        assert_eq!(switch("false"), Ok(false));
        assert_eq!(switch("FALSE"), Ok(false));
        assert_eq!(switch("True"), Ok(true));
        assert!(switch("yes please").is_err());
    }

    #[test]
    fn a_repeatable_flag_splits_on_commas_like_its_variable() {
        let args = Args::try_parse_from([
            "grasp-sync",
            "--own-relay",
            "ws://127.0.0.1:1",
            "--bootstrap-relay",
            "ws://127.0.0.1:2,ws://127.0.0.1:3",
        ])
        .unwrap();
        assert_eq!(
            args.bootstrap_relays,
            vec!["ws://127.0.0.1:2", "ws://127.0.0.1:3"]
        );
        let settings = settings(&args).unwrap();
        assert_eq!(settings.bootstrap_relays.len(), 2);
    }

    #[test]
    fn sync_plus_is_the_builder_s_unless_given_and_index_relays_are_relay_urls() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["grasp-sync", "--own-relay", "ws://127.0.0.1:1"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).map(|args| settings(&args))
        };
        let sync_plus = |extra: &[&str]| parse(extra).unwrap().unwrap().sync_plus;
        // Unless NGIT_SYNC_PLUS_ENABLED is set where the test runs.
        if std::env::var_os("NGIT_SYNC_PLUS_ENABLED").is_none() {
            assert_eq!(sync_plus(&[]), None, "left to the builder: on");
        }
        assert_eq!(sync_plus(&["--sync-plus"]), Some(true));
        assert_eq!(sync_plus(&["--sync-plus=0"]), Some(false));
        assert_eq!(sync_plus(&["--sync-plus", "false"]), Some(false));
        assert!(parse(&["--sync-plus=maybe"]).is_err());

        let no_negentropy = |extra: &[&str]| parse(extra).unwrap().unwrap().no_negentropy;
        if std::env::var_os("NGIT_SYNC_DISABLE_NEGENTROPY").is_none() {
            assert_eq!(no_negentropy(&[]), None, "left to the builder: NIP-77 on");
        }
        assert_eq!(no_negentropy(&["--no-negentropy"]), Some(true));
        assert_eq!(no_negentropy(&["--no-negentropy=0"]), Some(false));
        assert_eq!(no_negentropy(&["--no-negentropy", "true"]), Some(true));
        assert!(parse(&["--no-negentropy=maybe"]).is_err());

        let settings = parse(&["--index-relay", "wss://a.example,wss://b.example"])
            .unwrap()
            .unwrap();
        assert_eq!(settings.index_relays.len(), 2);
        let error = parse(&["--index-relay", "not a url"]).unwrap().unwrap_err();
        assert!(error.contains("--index-relay"), "{error}");
    }

    #[test]
    fn per_host_fetch_limits_are_flags_with_their_overrides() {
        let root = std::env::temp_dir();
        let root = root.to_str().unwrap();
        let parse = |extra: &[&str]| {
            let mut argv = vec!["grasp-sync", "--own-relay", "ws://127.0.0.1:1"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).map_err(|error| error.to_string())
        };
        let given = settings(
            &parse(&[
                "--git-root",
                root,
                "--host-max-concurrent",
                "8",
                "--host-max-per-minute",
                "60",
                "--host-limit",
                "git.example.org=120/10",
                "--host-limit",
                "git.mine.example=unlimited,203.0.113.7=10/1",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(given.host_max_concurrent, Some(8));
        assert_eq!(given.host_max_per_minute, Some(60));
        assert_eq!(
            given.host_limits.unwrap().to_string(),
            "git.example.org=120/10,git.mine.example=unlimited,203.0.113.7=10/1"
        );
        // Unless the variables are set where the test runs: purgatory's defaults.
        if FLAG_VARIABLES
            .iter()
            .all(|name| std::env::var_os(name).is_none())
        {
            let none = settings(&parse(&["--git-root", root]).unwrap()).unwrap();
            assert_eq!(none.host_max_concurrent, None);
            assert_eq!(none.host_max_per_minute, None);
            assert!(none.host_limits.is_none());
        }
        for bad in [
            &["--host-max-concurrent", "0"][..],
            &["--host-max-per-minute", "lots"],
            &["--host-limit", "git.example.org=fast"],
            &["--host-limit", "*.example.org=1/1"],
            &["--host-limit", "git.example.org=0/1"],
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains(bad[0]), "{error}");
        }
        let error = settings(
            &parse(&[
                "--git-root",
                root,
                "--host-limit",
                "a.example=1/1,A.example=2/2",
            ])
            .unwrap(),
        )
        .unwrap_err();
        assert!(error.contains("given twice"), "{error}");
        assert!(!error.contains('\n'), "{error}");
        let error = settings(&parse(&["--host-limit", "a.example=1/1"]).unwrap()).unwrap_err();
        assert!(error.contains("--host-limit"), "{error}");
        assert!(error.contains("needs --git-root"), "{error}");
    }

    #[test]
    fn managed_externally_and_summary_json_need_their_flags() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["grasp-sync", "--own-relay", "ws://127.0.0.1:1"];
            argv.extend_from_slice(extra);
            settings(&Args::try_parse_from(argv).unwrap())
        };
        let error = parse(&["--git-root-managed-externally"]).unwrap_err();
        assert!(error.contains("needs --git-root"), "{error}");
        let error = parse(&["--summary-json"]).unwrap_err();
        assert!(error.contains("needs --once"), "{error}");
        assert!(parse(&["--summary-json", "--once"]).is_ok());
    }
}
