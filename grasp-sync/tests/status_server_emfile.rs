//! The status server out of file descriptors: while `accept` fails with `EMFILE` it
//! pauses between attempts instead of spinning on the error. Its own test binary,
//! because it lowers the whole process's descriptor limit (with `prlimit`, which
//! purgatory needs anyway) and then uses every descriptor left.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use grasp_sync::http::{serve, Statuses};
use grasp_sync_tokio::SyncStatus;
use tokio::sync::watch;

/// The process's CPU time so far (user and system), in clock ticks, read from
/// `/proc/self/stat` opened beforehand (no descriptor is free when it is needed).
fn cpu_ticks(stat: &File) -> u64 {
    let mut buffer = vec![0u8; 4096];
    let read = stat.read_at(&mut buffer, 0).unwrap();
    let text = String::from_utf8_lossy(&buffer[..read]).into_owned();
    let after_name = text.rsplit_once(')').unwrap().1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime, fields 14 and 15 of the whole line.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Opens `/dev/null` until no descriptor is left.
fn use_every_descriptor(files: &mut Vec<File>) {
    while let Ok(file) = File::open("/dev/null") {
        files.push(file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_accept_loop_pauses_instead_of_spinning() {
    let pid = std::process::id().to_string();
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=256:256"])
        .status()
        .expect("prlimit runs");
    assert!(limited.success());
    let (_stop, stopped) = watch::channel(false);
    let (_sync, sync) = watch::channel(SyncStatus::default());
    let statuses = Statuses {
        sync,
        purgatory: None,
    };
    let addr = serve(
        "127.0.0.1:0".parse().unwrap(),
        prometheus::Registry::new(),
        statuses,
        stopped,
    )
    .await
    .unwrap();
    let stat = File::open("/proc/self/stat").unwrap();
    let mut files = Vec::new();
    use_every_descriptor(&mut files);
    files.truncate(files.len().saturating_sub(2));
    // A client connects with one of the last descriptors; the server cannot accept it.
    let client = std::net::TcpStream::connect(addr).unwrap();
    use_every_descriptor(&mut files);
    let before = cpu_ticks(&stat);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = cpu_ticks(&stat) - before;
    drop(files);
    drop(client);
    // Spinning on the error takes a whole core (about 190 ticks of 10 ms in these 3 s
    // when measured); pausing up to a second between attempts next to nothing.
    assert!(
        used < 50,
        "{used} ticks of CPU in 3 s while accept failed: spinning"
    );
}
