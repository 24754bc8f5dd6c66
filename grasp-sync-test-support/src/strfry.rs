//! [`Strfry`]: the real strfry relay as a process on 127.0.0.1, driven with blocking
//! calls (no async runtime: the benchmarks use it as it is, and async tests call it
//! between their awaits).
//!
//! strfry is the most deployed Nostr relay and the one GRASP servers are most often
//! synced from; what it does at its limits is in `../shared/ECOSYSTEM.md` (128 KiB
//! incoming frames, `limit` clamped to 500, NIP-77 `NEG-MSG` answers built with a
//! 500 000-byte frame limit, hex-encoded: up to ~1 MB on the wire). It is in no package
//! registry we reach: `$STRFRY_BIN` names it, else the first caller of
//! [`strfry_binary`] runs `.ci/install-strfry`, which puts the build beside the
//! checkout (`../shared/peers/strfry.gz`) into the CI cache and installs its runtime
//! libraries.
//!
//! Unlike nostr-rs-relay (which any machine with cargo can build), strfry may be missing:
//! [`strfry_binary`] then prints one `skipped: …` line and returns `None`, and the test
//! returns early, except under CI (`CI` set), where it panics with the reason.
//!
//! The relay runs with strfry's defaults (what public relays run) except the database
//! directory, the listening address and `nofiles = 0`; [`Strfry::start_with`] appends
//! more configuration. Test data is loaded with `strfry import` ([`Strfry::import`]),
//! far faster than publishing over WebSocket, and read back exactly with `strfry
//! export` ([`Strfry::ids`]): a REQ would be clamped to 500 events. strfry rejects
//! events more than 3 years old or more than 900 s in the future.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nostr::prelude::{Event, EventId, RelayUrl};

use crate::ids::unique;

/// The version `.ci/install-strfry` installs (`../shared/peers/README.md`).
pub const STRFRY_VERSION: &str = "1.1.1-144-gf8a56a8";

/// How long a started relay may take to accept its first connection.
const STARTUP: Duration = Duration::from_secs(30);

/// The strfry binary: `$STRFRY_BIN` (it must exist), else the one `.ci/install-strfry`
/// installs (run once per process; it waits on a lock while another installs).
///
/// `None` when it cannot be had, after printing one line
/// `skipped: strfry not available (<reason>); set STRFRY_BIN or see .ci/install-strfry`
/// to stderr and stdout (past the test harness's capture, so the README's test command
/// shows it). Under CI (`CI` set, not empty, `0` or `false`) it panics with the reason
/// instead: a CI run never passes by skipping. Tests begin with
/// `let Some(bin) = strfry_binary() else { return };`.
pub fn strfry_binary() -> Option<PathBuf> {
    match find_strfry() {
        Ok(path) => Some(path),
        Err(reason) => {
            let why = format!(
                "strfry not available ({reason}); set STRFRY_BIN or see .ci/install-strfry"
            );
            assert!(!under_ci(), "{why} (CI is set: a CI run needs strfry)");
            let line = format!("skipped: {why}");
            // Straight to the file descriptors: libtest captures `print!`, and a
            // skipped test must say so in the run's output.
            let _ = writeln!(std::io::stderr(), "{line}");
            let _ = writeln!(std::io::stdout(), "{line}");
            None
        }
    }
}

/// The strfry binary, or why it cannot be had (never panics, prints nothing): what
/// [`strfry_binary`] looks for, for callers that report a missing strfry their own way.
pub fn find_strfry() -> Result<PathBuf, String> {
    match std::env::var_os("STRFRY_BIN") {
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!("STRFRY_BIN={} does not exist", path.display()))
            }
        }
        _ => {
            static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
            INSTALLED.get_or_init(install).clone()
        }
    }
}

/// Whether `CI` says this is a CI run (set, not empty, not `0` or `false`).
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| {
        let value = value.trim();
        !value.is_empty() && value != "0" && !value.eq_ignore_ascii_case("false")
    })
}

/// The workspace root: the first ancestor of this crate's directory holding
/// `.ci/install-strfry`.
fn workspace_root() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join(".ci/install-strfry").is_file())
        .map(Path::to_path_buf)
}

/// Runs `.ci/install-strfry` and returns the path it prints, or why it could not.
fn install() -> Result<PathBuf, String> {
    let root = workspace_root().ok_or("no .ci/install-strfry above this crate")?;
    let script = root.join(".ci/install-strfry");
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("running {}: {error}", script.display()))?;
    let printed = String::from_utf8_lossy(&output.stdout);
    let path = PathBuf::from(printed.lines().last().unwrap_or_default().trim());
    if output.status.success() && path.is_file() {
        return Ok(path);
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let last = said.lines().rev().find(|line| !line.trim().is_empty());
    Err(last.map_or_else(
        || format!("{} failed ({})", script.display(), output.status),
        |line| line.trim().to_owned(),
    ))
}

/// A running strfry relay; killed and waited for on drop, its directory (database,
/// config, logs) removed.
#[derive(Debug)]
pub struct Strfry {
    child: Child,
    bin: PathBuf,
    url: RelayUrl,
    port: u16,
    dir: PathBuf,
}

/// What a `strfry sync` run did ([`Strfry::sync_down`]).
#[derive(Debug)]
pub struct StrfrySync {
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Its log (stderr), for the numbers it prints.
    pub log: String,
}

impl Strfry {
    /// Starts `bin` with strfry's defaults on a free port of 127.0.0.1 with an empty
    /// database in the temporary directory, and waits (bounded) until it accepts a
    /// connection.
    pub fn start(bin: &Path) -> Strfry {
        Strfry::start_with(bin, "")
    }

    /// [`Strfry::start`] with `extra_config` appended to the minimal configuration:
    /// dotted keys or blocks override strfry's defaults, e.g.
    /// `events.maxEventSize = 262144`.
    pub fn start_with(bin: &Path, extra_config: &str) -> Strfry {
        Strfry::start_in(bin, &std::env::temp_dir(), extra_config)
    }

    /// [`Strfry::start_with`] with its directory made under `parent` (a tmpfs such as
    /// `/dev/shm` keeps LMDB's commits off the disk).
    pub fn start_in(bin: &Path, parent: &Path, extra_config: &str) -> Strfry {
        Strfry::start_at(bin, parent, crate::net::free_port(), extra_config)
    }

    /// [`Strfry::start_in`] on `port`: a relay started again at the same URL (the
    /// URL announcements list), once the one before was dropped.
    pub fn start_at(bin: &Path, parent: &Path, port: u16, extra_config: &str) -> Strfry {
        let dir = parent.join(format!("strfry-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(dir.join("db")).expect("strfry directory");
        let config = format!(
            "db = \"{}/\"\nrelay {{\n    bind = \"127.0.0.1\"\n    port = {port}\n    \
             nofiles = 0\n}}\n{extra_config}\n",
            dir.join("db").display()
        );
        std::fs::write(dir.join("strfry.conf"), config).expect("strfry config");
        let log = std::fs::File::create(dir.join("relay.log")).expect("strfry log");
        let child = Command::new(bin)
            .arg(format!("--config={}", dir.join("strfry.conf").display()))
            .arg("relay")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("strfry log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let url = RelayUrl::parse(&format!("ws://127.0.0.1:{port}")).expect("relay url");
        let mut relay = Strfry {
            child,
            bin: bin.to_path_buf(),
            url,
            port,
            dir,
        };
        relay.wait_until_ready();
        relay
    }

    /// `ws://127.0.0.1:<port>`.
    pub fn url(&self) -> RelayUrl {
        self.url.clone()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The relay's process id (its CPU time is in `/proc/<pid>/stat`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the relay logged so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("relay.log")).unwrap_or_default()
    }

    /// A `strfry` command on this relay's configuration (and so its database).
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command.arg(format!(
            "--config={}",
            self.dir.join("strfry.conf").display()
        ));
        command
    }

    /// Stores `events` with `strfry import --no-verify` (JSON lines on stdin) while the
    /// relay runs; returns how many were new. Panics if strfry rejected any (a `created_at`
    /// over 3 years old or 900 s ahead, an event over `events.maxEventSize`).
    pub fn import(&self, events: &[Event]) -> usize {
        let log_path = self.dir.join(format!("import-{}.log", unique()));
        let log = std::fs::File::create(&log_path).expect("import log");
        let mut child = self
            .command()
            .args(["import", "--no-verify"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting strfry import");
        let mut stdin = child.stdin.take().expect("strfry import's stdin");
        let mut lines = String::with_capacity(events.len() * 600);
        for event in events {
            lines.push_str(&event.as_json());
            lines.push('\n');
        }
        stdin
            .write_all(lines.as_bytes())
            .expect("writing to strfry import");
        drop(stdin);
        let status = child.wait().expect("strfry import");
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let _ = std::fs::remove_file(&log_path);
        assert!(status.success(), "strfry import failed ({status}): {log}");
        // "Done. Processed N lines. A added, R rejected, D dups"
        let done = log
            .lines()
            .find_map(|line| line.split_once("Done. Processed ").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("strfry import printed no summary: {log}"));
        let numbers: Vec<usize> = done
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        let [processed, added, rejected, dups] = numbers[..] else {
            panic!("strfry import's summary is not `N lines. A added, R rejected, D dups`: {done}");
        };
        assert!(
            processed == events.len() && rejected == 0 && added + dups == processed,
            "strfry import of {} events: {done}",
            events.len()
        );
        added
    }

    /// Every event in the relay's database (`strfry export`), in `created_at` order.
    pub fn export(&self) -> Vec<Event> {
        let output = self
            .command()
            .arg("export")
            .stdin(Stdio::null())
            .output()
            .expect("running strfry export");
        assert!(
            output.status.success(),
            "strfry export failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                Event::from_json(line).unwrap_or_else(|e| panic!("strfry export: {e}: {line}"))
            })
            .collect()
    }

    /// The ids of every event in the relay's database (exact; no `limit` clamp).
    pub fn ids(&self) -> BTreeSet<EventId> {
        self.export().into_iter().map(|event| event.id).collect()
    }

    /// Runs `strfry sync <from> --dir=down` (NIP-77, strfry's own client: it takes
    /// every event `from` holds that this database lacks) into this relay's database
    /// and returns how long it took; panics if it fails.
    pub fn sync_down(&self, from: &RelayUrl) -> StrfrySync {
        let started = Instant::now();
        let output = self
            .command()
            .args(["sync", from.as_str(), "--dir=down"])
            .stdin(Stdio::null())
            .output()
            .expect("running strfry sync");
        let elapsed = started.elapsed();
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            output.status.success(),
            "strfry sync {from} --dir=down failed ({}): {log}",
            output.status
        );
        StrfrySync { elapsed, log }
    }

    /// Waits (bounded) until the relay accepts a TCP connection.
    fn wait_until_ready(&mut self) {
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("strfry exited at start ({status}): {}", self.log());
            }
            if TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "strfry did not accept a connection within {STARTUP:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Strfry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
