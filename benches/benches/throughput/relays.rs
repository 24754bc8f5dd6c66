//! Relay processes (`bench_relay`, a nostr-relay-builder 0.44 relay over
//! LMDB; the real nostr-rs-relay 0.8.12) and the CPU time of processes,
//! read from `/proc/<pid>/stat`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The relay binary, built by cargo for this benchmark.
const RELAY_EXE: &str = env!("CARGO_BIN_EXE_bench_relay");
/// How long a relay may take to load its events and listen.
const READY_WAIT: Duration = Duration::from_secs(300);
/// The nostr-rs-relay version of `.ci/install-nostr-rs-relay`.
pub(crate) const NOSTR_RS_RELAY_VERSION: &str = "0.8.12";

/// Where cargo builds (the cached data set goes to `grasp-bench-data/` in it).
pub(crate) fn target_dir() -> PathBuf {
    // target/<profile>/bench_relay
    Path::new(RELAY_EXE)
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// A free TCP port on 127.0.0.1 (the relay binds it a moment later).
pub(crate) use grasp_sync_test_support::net::free_port;

/// How a relay process is started.
pub(crate) struct RelaySpec<'a> {
    /// A name for messages.
    pub(crate) name: &'a str,
    /// Its LMDB directory (fresh per run).
    pub(crate) db: PathBuf,
    /// Files of events stored before it listens.
    pub(crate) load: Vec<PathBuf>,
    /// Events per minute a connection may write.
    pub(crate) write_limit: Option<u32>,
    /// Refuse NIP-77 (through the proxy).
    pub(crate) no_negentropy: bool,
    /// The own relay: on the CPU of [`own_relay_cpu`], when one is set.
    pub(crate) own: bool,
}

/// A running relay process; killed and waited for on drop.
pub(crate) struct RelayProcess {
    child: Child,
    /// Events it loaded at start.
    pub(crate) loaded: usize,
}

impl RelayProcess {
    /// Starts `spec` on a free port and waits for its `ready` line.
    pub(crate) fn start(spec: &RelaySpec<'_>, port: u16) -> RelayProcess {
        let mut command = if spec.own {
            own_relay_command(RELAY_EXE)
        } else {
            Command::new(RELAY_EXE)
        };
        command
            .arg("--port")
            .arg(port.to_string())
            .arg("--db")
            .arg(&spec.db)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for file in &spec.load {
            command.arg("--load").arg(file);
        }
        if let Some(limit) = spec.write_limit {
            command.arg("--write-limit").arg(limit.to_string());
        }
        if spec.no_negentropy {
            command.arg("--no-negentropy");
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {RELAY_EXE}: {e}"));
        let stdout = child.stdout.take().expect("the relay's stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep reading so the relay never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(READY_WAIT) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("relay {} did not get ready: {other:?}", spec.name);
            }
        };
        let loaded = line
            .strip_prefix("ready ")
            .and_then(|count| count.trim().parse().ok())
            .unwrap_or_else(|| panic!("relay {} said {line:?}, not ready", spec.name));
        RelayProcess { child, loaded }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds it used so far.
    pub(crate) fn cpu(&self) -> f64 {
        cpu_seconds(&format!("/proc/{}/stat", self.pid()))
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on
/// Linux unless told otherwise).
fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User + system CPU seconds of the process whose `stat` file is `path`.
pub(crate) fn cpu_seconds(path: &str) -> f64 {
    // After ')': state is field 3, so utime (14) and stime (15) are at 11, 12.
    stat_seconds(path, 11)
}

/// The sum of the two tick counts at `first` (counted from the field after the
/// command name, `state`, as 0) of the `stat` file `path`, in seconds.
pub(crate) fn stat_seconds(path: &str, first: usize) -> f64 {
    stat_field_seconds(path, first) + stat_field_seconds(path, first + 1)
}

/// The tick count at `index` (counted as for [`stat_seconds`]) of the `stat` file
/// `path`, in seconds: `utime` is 11, `stime` 12, `cutime` 13, `cstime` 14.
pub(crate) fn stat_field_seconds(path: &str, index: usize) -> f64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    // The command name (field 2) may hold spaces: count from its ')'.
    let after = text.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let ticks: f64 = after
        .split_whitespace()
        .nth(index)
        .and_then(|field| field.parse().ok())
        .expect("a CPU tick count");
    ticks / ticks_per_second()
}

/// CPU seconds of this process so far.
pub(crate) fn own_cpu() -> f64 {
    cpu_seconds("/proc/self/stat")
}

/// The CPU the own relay runs on, alone: `GRASP_BENCH_OWN_RELAY_CPU` (a CPU
/// number below the machine's count), else none (every process on every
/// CPU). With it, the own relay of every path and of the ceilings runs on
/// that CPU ([`own_relay_command`]) and this process, with the sync, the
/// publisher of the blasts, and the relays it starts otherwise, on the
/// others ([`pin_away_from_own_relay`]): a relay with a core of its own,
/// as on a server with more cores than this machine's two, so that "how
/// close to the relay's ceiling" measures how well the sync feeds it, not
/// how much CPU the three processes take from each other.
pub(crate) fn own_relay_cpu() -> Option<usize> {
    // Read once: once this process is pinned, it sees fewer CPUs.
    static CPU: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CPU.get_or_init(|| {
        let cpus = machine_cpus();
        std::env::var("GRASP_BENCH_OWN_RELAY_CPU")
            .ok()
            .and_then(|cpu| cpu.trim().parse().ok())
            .filter(|cpu| *cpu < cpus && cpus > 1)
    })
}

/// The CPUs this process may run on at its start.
fn machine_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// A command that runs `program` on the own relay's CPU if one is set
/// (under `taskset`), else as it is.
fn own_relay_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    match own_relay_cpu() {
        Some(cpu) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpu.to_string()).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Moves this process (every thread it has and will start, and the
/// processes it starts) off the own relay's CPU, if one is set; returns the
/// CPUs it runs on, for the report.
pub(crate) fn pin_away_from_own_relay() -> Option<String> {
    let own = own_relay_cpu()?;
    let cpus = machine_cpus();
    let others: Vec<String> = (0..cpus)
        .filter(|cpu| *cpu != own)
        .map(|cpu| cpu.to_string())
        .collect();
    let list = others.join(",");
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &list, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("running taskset");
    assert!(status.success(), "taskset could not pin the benchmark");
    Some(list)
}

/// A fresh directory for one run, removed on drop.
pub(crate) struct RunDir(pub(crate) PathBuf);

impl RunDir {
    /// Creates `<base>/grasp-bench-<pid>-<label>`, where base is
    /// `GRASP_BENCH_DIR`, else `/dev/shm` (tmpfs: the relays' LMDB commits
    /// do not wait for the disk, so the sync is measured, not the disk),
    /// else the temporary directory.
    pub(crate) fn new(label: &str) -> RunDir {
        let dir = run_base().join(format!("grasp-bench-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating a run directory");
        RunDir(dir)
    }
}

/// Where run directories go (see [`RunDir::new`]).
pub(crate) fn run_base() -> PathBuf {
    if let Some(dir) = std::env::var_os("GRASP_BENCH_DIR") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The nostr-rs-relay binary: `NOSTR_RS_RELAY`, else the cache of
/// `.ci/install-nostr-rs-relay` (`GRASP_CI_CACHE`, else
/// `~/.cache/grasp-sync-ci`). `None` when neither exists.
pub(crate) fn nostr_rs_relay_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NOSTR_RS_RELAY") {
        return Some(PathBuf::from(path));
    }
    let cache = std::env::var_os("GRASP_CI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/grasp-sync-ci")));
    cache
        .map(|c| {
            c.join(format!(
                "nostr-rs-relay-{NOSTR_RS_RELAY_VERSION}/bin/nostr-rs-relay"
            ))
        })
        .filter(|p| p.is_file())
}

/// nostr-rs-relay with its defaults (SQLite, no write limit) on
/// 127.0.0.1:`port`, data in its own directory; killed on drop.
pub(crate) struct NostrRsRelay {
    child: Child,
}

impl NostrRsRelay {
    /// Starts it with its data in `dir` (created); returns once it was
    /// spawned; [`wait_listening`] tells when it accepts connections.
    pub(crate) fn start(dir: &Path, port: u16) -> NostrRsRelay {
        let binary = nostr_rs_relay_binary().unwrap_or_else(|| {
            panic!("nostr-rs-relay is not installed: run .ci/install-nostr-rs-relay")
        });
        std::fs::create_dir_all(dir).expect("relay directory");
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[info]\nrelay_url = \"ws://127.0.0.1:{port}/\"\n\n[database]\n\
                 data_directory = \"{}\"\n\n[network]\naddress = \"127.0.0.1\"\nport = {port}\n",
                dir.display()
            ),
        )
        .expect("relay config");
        let child = own_relay_command(binary)
            .arg("--config")
            .arg(&config)
            .arg("--db")
            .arg(dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting nostr-rs-relay");
        NostrRsRelay { child }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds it used so far.
    pub(crate) fn cpu(&self) -> f64 {
        cpu_seconds(&format!("/proc/{}/stat", self.pid()))
    }
}

impl Drop for NostrRsRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
