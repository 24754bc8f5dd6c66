#!/usr/bin/env python3
"""Where the sync's CPU goes, from a `perf record --call-graph dwarf` of the
throughput benchmark: the shares behind BENCHMARKS.md section 7, "What the CPU
targets would need".

    GRASP_BENCH_EVENTS=20000 GRASP_BENCH_PATHS="a'" perf record -F 1999 \
        --call-graph dwarf target/release/deps/throughput-<hash> --bench
    perf script -F comm,pid,tid,ip,sym | python3 benches/profile_shares.py

Only the sync's runtime threads count (`tokio-rt-worker` of the process whose
stacks run grasp-sync's code; the relay processes of a sidecar run have
threads of that name too). Each sample goes to the first part below that a
frame of its stack names, so a part holds what it calls. Prints each part's
share, the work apart from the engine, and that work ÷ the Schnorr check: the
sync's CPU per event, in checks, if the engine cost nothing.
"""

import collections
import re
import sys

# (part, text a frame names, counted apart from the engine?), in the order
# they are tried: a part the engine calls (frames sent) comes before the
# engine, the loops that call the engine (the store task, the manager) after.
PARTS = [
    ("Schnorr check", "schnorrsig_verify", True),
    ("parsing, id check, verified-lately cache", "grasp_sync_tokio::decode::", True),
    ("store: EVENT frames written", "grasp_sync_core::engine::frames::event_frame", True),
    ("store: own relay's connections", "grasp_sync_tokio::store::ingest::", True),
    ("store: listings", "grasp_sync_tokio::store::query::", True),
    ("remote's connection: frames sent", "grasp_sync_tokio::connection::WsTransport::send", True),
    ("engine", "grasp_sync_core::engine::", False),
    ("store: the store task (and the embedder's database)", "store_worker", True),
    ("remote's connection", "grasp_sync_tokio::connection::", True),
    ("runtime and the manager's loop", "grasp_sync_tokio::manager::", True),
    ("runtime and the manager's loop", "tokio::", True),
]

HEADER = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)")


def samples(lines):
    """(comm, pid, frames) of each sample of `perf script` output."""
    comm = pid = None
    frames = []
    for line in lines:
        if not line.strip():
            if comm is not None:
                yield comm, pid, frames
            comm, frames = None, []
        elif not line.startswith((" ", "\t")):
            match = HEADER.match(line)
            comm, pid = (match.group(1), match.group(2)) if match else (None, None)
            frames = []
        elif comm is not None:
            parts = line.split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else "?")
    if comm is not None:
        yield comm, pid, frames


def part_of(frames):
    """The part a sample's stack belongs to, and whether it is engine-free."""
    for name, needle, apart in PARTS:
        if any(needle in frame for frame in frames):
            return name, apart
    return "other", True


def main():
    workers = [
        (pid, frames)
        for comm, pid, frames in samples(sys.stdin)
        if comm == "tokio-rt-worker"
    ]
    ours = collections.Counter(
        pid for pid, frames in workers if any("grasp_sync" in f for f in frames)
    )
    if not ours:
        sys.exit("no sample of grasp-sync's runtime threads in the input")
    sync_pid = ours.most_common(1)[0][0]
    shares = collections.Counter()
    apart = set()
    total = 0
    for pid, frames in workers:
        if pid != sync_pid:
            continue
        total += 1
        name, free = part_of(frames)
        shares[name] += 1
        if free:
            apart.add(name)
    print(f"sync process {sync_pid}: {total} samples of its runtime threads")
    for name, count in shares.most_common():
        print(f"{100 * count / total:6.2f} %  {name}")
    check = shares["Schnorr check"]
    without_engine = sum(count for name, count in shares.items() if name in apart)
    print(f"{100 * without_engine / total:6.2f} %  everything but the engine")
    if check:
        print(f"everything but the engine ÷ the check: {without_engine / check:.2f}")


if __name__ == "__main__":
    main()
