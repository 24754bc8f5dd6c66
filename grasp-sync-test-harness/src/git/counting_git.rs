//! A `git` that counts: a wrapper script around the real git that appends a line when
//! each invocation starts and ends, so a test measures how many git processes ran at
//! once, for real (the service runs it as its git program). The arguments of every
//! `git fetch` are logged too, so a test sees which object ids each fetch asked for.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The wrapper, and the log it appends to.
pub struct CountingGit {
    program: PathBuf,
    log: PathBuf,
    fetch_log: PathBuf,
}

impl CountingGit {
    /// Writes the wrapper into `dir` around the `git` found on `PATH`.
    pub fn install(dir: &Path) -> CountingGit {
        std::fs::create_dir_all(dir).expect("create the wrapper's directory");
        let real = real_git();
        let program = dir.join("counting-git");
        let log = dir.join("invocations.log");
        let fetch_log = dir.join("fetches.log");
        // `$EPOCHREALTIME` (bash 5) needs no process of its own; one `echo` of a short
        // line to a file opened for appending is one write, whole.
        let script = format!(
            "#!/bin/bash\n\
             echo \"+ $EPOCHREALTIME\" >> '{log}'\n\
             for arg in \"$@\"; do [ \"$arg\" = fetch ] && echo \"$*\" >> '{fetch_log}' && break; done\n\
             '{real}' \"$@\"\n\
             status=$?\n\
             echo \"- $EPOCHREALTIME\" >> '{log}'\n\
             exit $status\n",
            log = log.display(),
            fetch_log = fetch_log.display(),
            real = real.display(),
        );
        std::fs::write(&program, script).expect("write the wrapper");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
            .expect("make the wrapper executable");
        std::fs::write(&log, "").expect("create the log");
        std::fs::write(&fetch_log, "").expect("create the fetch log");
        CountingGit {
            program,
            log,
            fetch_log,
        }
    }

    /// The program to run as git.
    pub fn program(&self) -> PathBuf {
        self.program.clone()
    }

    /// How many invocations started since the last [`CountingGit::reset`].
    pub fn invocations(&self) -> usize {
        self.events().iter().filter(|(_, start)| *start).count()
    }

    /// The most invocations running at one moment since the last [`CountingGit::reset`].
    pub fn peak(&self) -> usize {
        let mut events = self.events();
        // At the same microsecond, an end is counted before a start.
        events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut running, mut peak) = (0_i64, 0_i64);
        for (_, start) in events {
            running += if start { 1 } else { -1 };
            peak = peak.max(running);
        }
        usize::try_from(peak).unwrap_or(0)
    }

    /// Every `git fetch` since the last [`CountingGit::reset`], in order: the URL it
    /// fetched from (the argument after `--`) and the object ids it asked for (its
    /// refspecs `<oid>:refs/purgatory/<oid>`).
    pub fn fetches(&self) -> Vec<(String, Vec<String>)> {
        let text = std::fs::read_to_string(&self.fetch_log).expect("read the fetch log");
        text.lines()
            .map(|line| {
                let mut after = line
                    .split_whitespace()
                    .skip_while(|arg| *arg != "--")
                    .skip(1);
                let url = after.next().unwrap_or_default().to_owned();
                let oids = after
                    .filter_map(|arg| arg.split_once(":refs/purgatory/"))
                    .map(|(oid, _)| oid.to_owned())
                    .collect();
                (url, oids)
            })
            .collect()
    }

    /// Forgets the invocations so far.
    pub fn reset(&self) {
        std::fs::write(&self.log, "").expect("truncate the log");
        std::fs::write(&self.fetch_log, "").expect("truncate the fetch log");
    }

    /// Each logged moment in microseconds, and whether it is a start.
    fn events(&self) -> Vec<(u64, bool)> {
        let text = std::fs::read_to_string(&self.log).expect("read the log");
        text.lines()
            .filter_map(|line| {
                let (sign, time) = line.split_once(' ')?;
                let (secs, micros) = time.split_once('.')?;
                let at = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
                Some((at, sign == "+"))
            })
            .collect()
    }
}

/// The `git` on `PATH`, as an absolute path.
fn real_git() -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH is set");
    std::env::split_paths(&path)
        .map(|dir| dir.join("git"))
        .find(|candidate| candidate.is_file())
        .expect("git on PATH")
}

/// The most memory this process has used (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}
