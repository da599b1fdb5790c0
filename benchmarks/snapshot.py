"""Snapshots: feedline's ``snapshot`` against tf.data's on the chess pipeline, in one run.

``python -m benchmarks.snapshot [--records 40000] [--kill-trials 20] [--write]``

1. **Chess pipeline** (files read, batch 512, parse, transform) through ``snapshot(path)``:
   the pass that computes and writes, the pass that reads back (median of ``--rounds``),
   a pass recomputing without a snapshot, and the bytes on disk; feedline in this process,
   tf.data in the tf environment of ``benchmarks/.venvs``. Like for like: both with
   ``compression=None`` (tf.data's own default, ``"AUTO"``, is tried first and fails on
   these 3 MB batches), and feedline's default (``"AUTO"``: zstd) beside them.
2. **What the machine allows**, measured in the same run: the disk's write rate (a file
   written and fsynced), the page cache's read rate, zstd's compression and decompression
   rates on these batches (one thread); feedline's write rate of already computed batches
   (``save``, median of ``--rounds``) is compared with the lowest of disk x ratio and
   cores x zstd (compressed), or with the disk (uncompressed).
3. **Memory**: feedline's peak RSS while snapshotting 10x more data (fresh processes).
4. **Crashes**: ``--kill-trials`` writes killed with SIGKILL at random moments, each
   followed by a run that must read every element exactly.

``--write`` keeps the tables in ``benchmarks/RESULTS-snapshot.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common, data

RESULTS = Path(__file__).resolve().parent / "RESULTS-snapshot.md"
TF_PYTHON = Path(__file__).resolve().parent / ".venvs" / "tf" / "bin" / "python"
SEED = 1234


def folder_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def timed_pass(iterable: Any) -> tuple[float, int]:
    started = time.perf_counter()
    count = 0
    for batch in iterable:
        count += len(batch["score"])
    return time.perf_counter() - started, count


# ------------------------------------------------------------------------------ feedline
def feedline_chess(files: list[str]) -> Any:
    import feedline as fl

    features = {"d": fl.FixedLenFeature([], "bytes"), "s": fl.FixedLenFeature([], "int64")}

    def parse_batch(serialized: np.ndarray) -> dict[str, np.ndarray]:
        parsed = fl.parse_example(serialized, features)
        d = np.frombuffer(b"".join(parsed["d"]), dtype=np.uint8).reshape(len(serialized), -1)
        return common.chess_transform(d, parsed["s"])

    return fl.TFRecordDataset(files).batch(common.CHESS_BATCH).map(
        parse_batch, num_parallel_calls=fl.AUTOTUNE)


def run_feedline(files: list[str], where: str, rounds: int) -> dict[str, Any]:
    """Recompute once; per compression (None, AUTO) a write pass; then ``rounds`` read
    passes of each, alternating (a burst of other work on a shared machine then slows one
    pass of each rather than every pass of one). Reads also record their CPU seconds."""
    import feedline as fl

    pipeline = feedline_chess(files)
    recompute, examples = timed_pass(fl.PipelineIterator(pipeline.prefetch(fl.AUTOTUNE)))
    result: dict[str, Any] = {"recompute_s": recompute, "examples": examples}
    snapshots = {}
    for compression in ("NONE", "AUTO"):
        folder = f"{where}-{compression.lower()}"
        snapshots[compression] = pipeline.snapshot(
            folder, compression=None if compression == "NONE" else compression
        ).prefetch(fl.AUTOTUNE)
        write, _ = timed_pass(fl.PipelineIterator(snapshots[compression]))
        result[compression] = {"write_s": write, "reads_s": [], "cpu_s": [],
                               "bytes": folder_bytes(folder)}
    for _ in range(rounds):
        for compression, snapshotted in snapshots.items():
            cpu = time.process_time()
            read, count = timed_pass(fl.PipelineIterator(snapshotted))
            assert count == examples
            result[compression]["reads_s"].append(read)
            result[compression]["cpu_s"].append(time.process_time() - cpu)
    for compression in snapshots:
        result[compression]["read_s"] = statistics.median(result[compression]["reads_s"])
    return result


def feedline_write_rate(batches: list[Any], where: str, compression: str | None,
                        rounds: int) -> tuple[float, float]:
    """MB/s (uncompressed) of saving already computed batches (median of ``rounds``), and
    their compression ratio."""
    import feedline as fl
    from feedline.core.structure import element_bytes

    raw = sum(element_bytes(b) for b in batches)
    rates = []
    for _ in range(rounds):
        shutil.rmtree(where, ignore_errors=True)
        started = time.perf_counter()
        fl.Dataset.from_tensor_slices(np.arange(len(batches))).map(
            lambda i: batches[int(i)]).save(where, compression=compression)
        rates.append(raw / (time.perf_counter() - started) / 1e6)
    return statistics.median(rates), raw / folder_bytes(where)


# ------------------------------------------------------------------------------ tf.data
TF_PART = r"""
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
from benchmarks import common
files, where = json.loads(sys.argv[1]), sys.argv[2]
features = {"d": tf.io.FixedLenFeature([], tf.string), "s": tf.io.FixedLenFeature([], tf.int64)}

def parse(serialized):
    parsed = tf.io.parse_example(serialized, features)
    d = tf.reshape(tf.io.decode_raw(parsed["d"], tf.uint8), [-1, common.CHESS_RECORD_BYTES])
    board, flags, score = tf.numpy_function(
        lambda d, s: tuple(common.chess_transform(d, s)[k] for k in ("board", "flags", "score")),
        [d, parsed["s"]], [tf.float32, tf.float32, tf.float32])
    return {"board": board, "flags": flags, "score": score}

pipeline = tf.data.TFRecordDataset(files).batch(common.CHESS_BATCH).map(
    parse, num_parallel_calls=tf.data.AUTOTUNE)

def timed(ds):
    started, count = time.perf_counter(), 0
    for batch in ds:
        count += int(batch["score"].shape[0])
    return time.perf_counter() - started, count

rounds = int(sys.argv[3])
recompute, examples = timed(pipeline.prefetch(tf.data.AUTOTUNE))
compression, note = "AUTO", ""

def write_and_read(folder, compression):
    snap = pipeline.snapshot(folder, compression=compression).prefetch(tf.data.AUTOTUNE)
    write, _ = timed(snap)
    time.sleep(1.0)  # tf.data finishes its snapshot files on background threads
    reads = [timed(snap) for _ in range(rounds)]
    return write, [r[0] for r in reads], reads[-1][1]

try:
    write, reads, count = write_and_read(where + "-auto", "AUTO")
except tf.errors.OpError as error:  # its AUTO (snappy) reader fails on large elements
    compression, note = None, type(error).__name__ + ": " + str(error).split("[Op")[0][-160:]
    write, reads, count = write_and_read(where, None)
print(json.dumps({"recompute_s": recompute, "write_s": write,
                  "read_s": sorted(reads)[len(reads) // 2], "reads_s": reads,
                  "examples": count, "version": tf.__version__,
                  "compression": compression or "NONE", "note": note}))
"""


def run_tf(files: list[str], where: str, rounds: int) -> dict[str, Any]:
    if not TF_PYTHON.exists():
        return {"unavailable": f"no tf environment at {TF_PYTHON} (./dev bench creates it)"}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([str(TF_PYTHON), "-c", TF_PART, json.dumps(files), where,
                           str(rounds)],
                          capture_output=True, text=True, env=env, timeout=1800, check=False)
    if done.returncode:
        return {"unavailable": f"tf.data run failed: {done.stderr.strip()[-400:]}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["bytes"] = folder_bytes(where if result["compression"] == "NONE" else where + "-auto")
    return result


# ------------------------------------------------------------------------------ machine
def machine_rates(work: str, frames: list[bytes], rounds: int) -> dict[str, float]:
    """Disk write, page cache read, and zstd level 1 (one thread) on ``frames`` (what the
    writer compresses), each the median of ``rounds``."""
    import zstandard

    size = 256 << 20
    block = os.urandom(1 << 20)
    path = os.path.join(work, "disk-probe")
    writes, reads, packs, unpacks = [], [], [], []
    raw = sum(map(len, frames))
    for _ in range(rounds):
        started = time.perf_counter()
        with open(path, "wb") as out:
            for _ in range(size >> 20):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        writes.append(size / (time.perf_counter() - started) / 1e6)
        started = time.perf_counter()
        with open(path, "rb") as file:
            while file.read(1 << 24):
                pass
        reads.append(size / (time.perf_counter() - started) / 1e6)
        os.remove(path)
        compressor = zstandard.ZstdCompressor(level=1)
        started = time.perf_counter()
        packed = [compressor.compress(frame) for frame in frames]
        packs.append(raw / (time.perf_counter() - started) / 1e6)
        decompressor = zstandard.ZstdDecompressor()
        started = time.perf_counter()
        for frame in packed:
            decompressor.decompress(frame)
        unpacks.append(raw / (time.perf_counter() - started) / 1e6)
    median = statistics.median
    return {"disk_write_mbs": median(writes), "cache_read_mbs": median(reads),
            "zstd_mbs": median(packs), "unzstd_mbs": median(unpacks)}


# ------------------------------------------------------------------------------ memory
MEMORY_PART = r"""
import resource, sys
import numpy as np
import feedline as fl
count, where = int(sys.argv[1]), sys.argv[2]
rows = np.random.default_rng(0).integers(0, 255, size=(64, 4096), dtype=np.uint8)
ds = fl.Dataset.range(count).map(lambda i: {"x": np.roll(rows, int(i), axis=1), "i": i})
for _ in ds.snapshot(where):
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak_memory(count: int, where: str) -> int:
    done = subprocess.run([sys.executable, "-c", MEMORY_PART, str(count), where],
                          capture_output=True, text=True, timeout=1800, check=True)
    return int(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ crashes
KILL_PART = r"""
import sys, time
import numpy as np
import feedline as fl
from feedline.transforms.snapshot import SnapshotDataset

def slow(x):
    time.sleep(0.0003)
    return {"x": np.full(32, x, dtype=np.int64), "tag": b"%d" % x}

ds = SnapshotDataset(fl.Dataset.range(3000).map(slow), sys.argv[1], round_bytes=8000)
for _ in ds:
    pass
"""


def kill_trials(trials: int, work: str) -> tuple[int, int]:
    """Writes killed at random moments, then a run reading everything: (exact, trials)."""
    import feedline as fl
    from feedline.transforms.snapshot import SnapshotDataset

    namespace: dict[str, Any] = {}
    exec(compile(KILL_PART.split("ds = ")[0], "kill_part", "exec"), namespace)  # noqa: S102
    rng = random.Random(SEED)
    exact = 0
    for trial in range(trials):
        where = os.path.join(work, f"kill-{trial}")
        process = subprocess.Popen([sys.executable, "-c", KILL_PART, where])
        time.sleep(rng.uniform(0.3, 1.5))  # interpreter start, then somewhere in the write
        process.send_signal(signal.SIGKILL)
        process.wait()
        ds = SnapshotDataset(fl.Dataset.range(3000).map(namespace["slow"]), where,
                             round_bytes=8000)
        got = [int(e["x"][0]) for e in ds]
        again = [int(e["x"][0]) for e in ds]
        exact += got == again == list(range(3000))
        shutil.rmtree(where)
    return exact, trials


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5,
                        help="repetitions of each read and write-rate measurement (medians)")
    parser.add_argument("--kill-trials", type=int, default=20)
    parser.add_argument("--memory-elements", type=int, default=400,
                        help="elements of 256 KiB for the memory check (then 10x more)")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args(argv)
    meta = data.chess(args.records, args.files, SEED)
    work = tempfile.mkdtemp(prefix="feedline-snapshot-bench-")
    try:
        import feedline as fl
        from feedline.snapshot.codec import byte_view, element_parts

        ours = run_feedline(meta["files"], os.path.join(work, "feedline"), args.rounds)
        theirs = run_tf(meta["files"], os.path.join(work, "tf"), args.rounds)
        batches = list(fl.PipelineIterator(feedline_chess(meta["files"])))
        rates = {name: feedline_write_rate(batches, os.path.join(work, f"saved-{name}"),
                                           compression, args.rounds)
                 for name, compression in (("AUTO", "AUTO"), ("NONE", None))}
        # What the writer compresses: one frame per batch (each is over 256 KiB).
        frames = [b"".join(bytes(byte_view(p)) for p in element_parts(b)[0]) for b in batches[:8]]
        del batches
        machine = machine_rates(work, frames, args.rounds)
        small = peak_memory(args.memory_elements, os.path.join(work, "mem-small"))
        large = peak_memory(10 * args.memory_elements, os.path.join(work, "mem-large"))
        exact, trials = kill_trials(args.kill_trials, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, ours, theirs, rates, machine, small, large, exact, trials)
    print(text)
    if args.write:
        command = (f"python -m benchmarks.snapshot --records {args.records} --rounds "
                   f"{args.rounds} --kill-trials {args.kill_trials} --write")
        RESULTS.write_text(
            "# Snapshot: feedline vs tf.data, and what the machine allows\n\n"
            f"`{command}` on {platform.machine()}, {os.cpu_count()} CPUs, "
            f"{time.strftime('%Y-%m-%d')}.\n\n{text}\n")


def report(args: Any, ours: dict[str, Any], theirs: dict[str, Any],
           rates: dict[str, tuple[float, float]], machine: dict[str, float], small: int,
           large: int, exact: int, trials: int) -> str:
    n = ours["examples"]
    tf_name = "tf.data" if "unavailable" in theirs else (
        f"tf.data ({'uncompressed' if theirs['compression'] == 'NONE' else 'AUTO'})")
    lines = [(f"Chess pipeline, {n:,} examples (batch 512, parse, transform); reads are "
              f"medians of {args.rounds}."), "",
             f"| | feedline | {tf_name} | feedline / tf.data |", "|---|---|---|---|"]

    def row(label: str, mine: float, key: str, scale: str = "rate", goal: str = "") -> None:
        if "unavailable" in theirs:
            lines.append(f"| {label} | {mine:,.0f} | {theirs['unavailable']} | |")
            return
        other = theirs["examples"] / theirs[key] if scale == "rate" else theirs[key] / 1e6
        ratio = mine / other
        text = f"**{ratio:.2f}x**" if scale == "rate" else f"{ratio:.2f}x"
        lines.append(f"| {label} | {mine:,.0f} | {other:,.0f} | {text}{goal} |")

    none, auto = ours["NONE"], ours["AUTO"]
    row("recompute, examples/s", n / ours["recompute_s"], "recompute_s")
    row("first pass (compute + write), uncompressed, examples/s", n / none["write_s"],
        "write_s")
    row("first pass (compute + write), feedline AUTO (zstd), examples/s",
        n / auto["write_s"], "write_s")
    read_goal = ""
    if "unavailable" not in theirs:
        met = (n / none["read_s"]) / (theirs["examples"] / theirs["read_s"]) >= 1.5
        read_goal = f" (goal >= 1.5x: {'met' if met else 'not met'})"
    row("**later pass (read the snapshot), uncompressed, examples/s**", n / none["read_s"],
        "read_s", goal=read_goal)
    row("later pass (read the snapshot), feedline AUTO (zstd), examples/s",
        n / auto["read_s"], "read_s")
    row("bytes on disk, uncompressed, MB", none["bytes"] / 1e6, "bytes", scale="bytes")
    row("bytes on disk, feedline AUTO (zstd), MB", auto["bytes"] / 1e6, "bytes",
        scale="bytes")
    cores = os.cpu_count() or 1
    auto_rate, ratio = rates["AUTO"]
    none_rate, _ = rates["NONE"]
    allowed = min(machine["disk_write_mbs"] * ratio, machine["zstd_mbs"] * cores)
    disk = machine["disk_write_mbs"]
    lines += ["", "| what the machine allows (this run, medians) | MB/s |", "|---|---|",
              f"| disk write (256 MB, fsync) | {disk:,.0f} |",
              f"| page cache read | {machine['cache_read_mbs']:,.0f} |",
              (f"| zstd level 1 compression, one thread, on these batches | "
               f"{machine['zstd_mbs']:,.0f} |"),
              (f"| zstd decompression, one thread, on these batches | "
               f"{machine['unzstd_mbs']:,.0f} |"),
              (f"| **feedline saving computed batches, AUTO (zstd; uncompressed MB/s, ratio "
               f"{ratio:.1f}x)** | {auto_rate:,.0f} = **{auto_rate / allowed:.0%}** of "
               f"min(disk x ratio, {cores} x zstd) = {allowed:,.0f} (goal >= 70%: "
               f"{'met' if auto_rate >= 0.7 * allowed else 'not met'}) |"),
              (f"| feedline saving computed batches, uncompressed | {none_rate:,.0f} = "
               f"{none_rate / disk:.0%} of the disk write rate |"),
              (f"| feedline reading its AUTO (zstd) snapshot (decompressed MB/s) | "
               f"{none['bytes'] / auto['read_s'] / 1e6:,.0f} = "
               f"{none['bytes'] / auto['read_s'] / 1e6 / (cores * machine['unzstd_mbs']):.0%}"
               f" of {cores} x zstd decompression |"),
              "", (f"Peak memory snapshotting {args.memory_elements} vs "
              f"{10 * args.memory_elements} elements of 256 KiB: {small / 2**20:,.0f} MiB vs "
              f"{large / 2**20:,.0f} MiB ({large / small:.2f}x for 10x the data)."), "",
              (f"kill -9 at random moments during a snapshot write, then read: {exact} of "
              f"{trials} trials exact.")]
    if "unavailable" not in theirs:
        lines += ["", ("Read passes, seconds each: feedline uncompressed "
                  f"{', '.join(f'{t:.3f}' for t in none['reads_s'])}; feedline AUTO "
                  f"{', '.join(f'{t:.3f}' for t in auto['reads_s'])}; tf.data "
                  f"{', '.join(f'{t:.3f}' for t in theirs['reads_s'])}. CPU seconds of "
                  "feedline's read passes (all threads): uncompressed "
                  f"{statistics.median(none['cpu_s']):.3f}, AUTO "
                  f"{statistics.median(auto['cpu_s']):.3f} (zstd decompression of "
                  f"{none['bytes'] / 1e6:,.0f} MB at {machine['unzstd_mbs']:,.0f} MB/s alone "
                  f"is {none['bytes'] / 1e6 / machine['unzstd_mbs']:.3f}).")]
    if theirs.get("note"):
        lines += ["", (f"tf.data {theirs['version']}: `snapshot(compression=\"AUTO\")` failed "
                  f"on these batches ({theirs['note'].strip()}); its rows use "
                  "`compression=None`.")]
    return "\n".join(lines)


_ = resource  # the subprocess parts use it

if __name__ == "__main__":
    main()
