"""Snapshots: feedline's ``snapshot`` against tf.data's on the chess pipeline, in one run.

``python -m benchmarks.snapshot [--records 40000] [--kill-trials 20] [--write]``

1. **Chess pipeline** (files read, batch 512, parse, transform) through ``snapshot(path)``:
   the pass that computes and writes, the pass that reads back, a pass recomputing without
   a snapshot, and the bytes on disk; feedline in this process, tf.data (``snapshot`` with
   ``compression="AUTO"``, its default) in the tf environment of ``benchmarks/.venvs``.
2. **What the machine allows**, measured in the same run: the disk's write rate (a file
   written and fsynced), the page cache's read rate, zstd's compression rate on this data;
   feedline's write rate of already computed batches is compared with the lowest.
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


def run_feedline(files: list[str], where: str) -> dict[str, Any]:
    import feedline as fl

    pipeline = feedline_chess(files)
    recompute, examples = timed_pass(fl.PipelineIterator(pipeline.prefetch(fl.AUTOTUNE)))
    snapshotted = pipeline.snapshot(where).prefetch(fl.AUTOTUNE)
    write, _ = timed_pass(fl.PipelineIterator(snapshotted))
    read, count = timed_pass(fl.PipelineIterator(snapshotted))
    assert count == examples
    return {"recompute_s": recompute, "write_s": write, "read_s": read,
            "bytes": folder_bytes(where), "examples": examples}


def feedline_write_rate(files: list[str], where: str) -> tuple[float, float]:
    """MB/s (uncompressed) of writing already computed batches, and their compression ratio."""
    import feedline as fl
    from feedline.transforms.prefetch import element_bytes

    batches = list(fl.PipelineIterator(feedline_chess(files)))
    raw = sum(element_bytes(b) for b in batches)
    started = time.perf_counter()
    fl.Dataset.from_tensor_slices(np.arange(len(batches))).map(
        lambda i: batches[int(i)]).save(where, compression="AUTO")
    seconds = time.perf_counter() - started
    return raw / seconds / 1e6, raw / folder_bytes(where)


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

recompute, examples = timed(pipeline.prefetch(tf.data.AUTOTUNE))
compression, note = "AUTO", ""
try:
    snap = pipeline.snapshot(where + "-auto", compression="AUTO").prefetch(tf.data.AUTOTUNE)
    write, _ = timed(snap)
    time.sleep(1.0)  # tf.data finishes its snapshot files on background threads
    read, count = timed(snap)
except tf.errors.OpError as error:  # its AUTO (snappy) reader fails on large elements
    compression, note = None, type(error).__name__ + ": " + str(error).split("[Op")[0][-160:]
    snap = pipeline.snapshot(where, compression=None).prefetch(tf.data.AUTOTUNE)
    write, _ = timed(snap)
    time.sleep(1.0)
    read, count = timed(snap)
print(json.dumps({"recompute_s": recompute, "write_s": write, "read_s": read,
                  "examples": count, "version": tf.__version__,
                  "compression": compression or "NONE", "note": note}))
"""


def run_tf(files: list[str], where: str) -> dict[str, Any]:
    if not TF_PYTHON.exists():
        return {"unavailable": f"no tf environment at {TF_PYTHON} (./dev bench creates it)"}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([str(TF_PYTHON), "-c", TF_PART, json.dumps(files), where],
                          capture_output=True, text=True, env=env, timeout=1800, check=False)
    if done.returncode:
        return {"unavailable": f"tf.data run failed: {done.stderr.strip()[-400:]}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["bytes"] = folder_bytes(where if result["compression"] == "NONE" else where + "-auto")
    return result


# ------------------------------------------------------------------------------ machine
def machine_rates(work: str, sample: bytes) -> dict[str, float]:
    import zstandard

    size = 256 << 20
    block = os.urandom(1 << 20)
    path = os.path.join(work, "disk-probe")
    started = time.perf_counter()
    with open(path, "wb") as out:
        for _ in range(size >> 20):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    disk_write = size / (time.perf_counter() - started) / 1e6
    started = time.perf_counter()
    with open(path, "rb") as file:
        while file.read(1 << 24):
            pass
    cache_read = size / (time.perf_counter() - started) / 1e6
    os.remove(path)
    compressor = zstandard.ZstdCompressor(level=1)
    started = time.perf_counter()
    for _ in range(3):
        compressor.compress(sample)
    zstd = 3 * len(sample) / (time.perf_counter() - started) / 1e6
    return {"disk_write_mbs": disk_write, "cache_read_mbs": cache_read, "zstd_mbs": zstd}


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
    parser.add_argument("--kill-trials", type=int, default=20)
    parser.add_argument("--memory-elements", type=int, default=400,
                        help="elements of 256 KiB for the memory check (then 10x more)")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args(argv)
    meta = data.chess(args.records, args.files, SEED)
    work = tempfile.mkdtemp(prefix="feedline-snapshot-bench-")
    try:
        ours = run_feedline(meta["files"], os.path.join(work, "feedline"))
        theirs = run_tf(meta["files"], os.path.join(work, "tf"))
        rate, ratio = feedline_write_rate(meta["files"], os.path.join(work, "saved"))
        sample = Path(next(Path(work, "saved").rglob("*.flchunk"))).read_bytes()
        import zstandard

        raw_sample = zstandard.ZstdDecompressor().decompress(
            sample[12 + int.from_bytes(sample[8:12], "little"):],
            max_output_size=1 << 30)
        machine = machine_rates(work, raw_sample)
        small = peak_memory(args.memory_elements, os.path.join(work, "mem-small"))
        large = peak_memory(10 * args.memory_elements, os.path.join(work, "mem-large"))
        exact, trials = kill_trials(args.kill_trials, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, ours, theirs, rate, ratio, machine, small, large, exact, trials)
    print(text)
    if args.write:
        RESULTS.write_text(
            "# Snapshot: feedline vs tf.data, and what the machine allows\n\n"
            f"`python -m benchmarks.snapshot --records {args.records}` on {platform.machine()}, "
            f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}.\n\n{text}\n")


def report(args: Any, ours: dict[str, Any], theirs: dict[str, Any], rate: float, ratio: float,
           machine: dict[str, float], small: int, large: int, exact: int, trials: int) -> str:
    n = ours["examples"]
    lines = [f"Chess pipeline, {n:,} examples (batch 512, parse, transform).", "",
             "| | feedline | tf.data | feedline / tf.data |", "|---|---|---|---|"]

    def row(label: str, key: str, per_second: bool = True) -> None:
        mine = n / ours[key] if per_second else ours[key] / 1e6
        if "unavailable" in theirs:
            lines.append(f"| {label} | {mine:,.0f} | {theirs['unavailable']} | |")
            return
        other = theirs["examples"] / theirs[key] if per_second else theirs[key] / 1e6
        ratio_text = f"**{mine / other:.2f}x**" if per_second else f"{mine / other:.2f}x"
        lines.append(f"| {label} | {mine:,.0f} | {other:,.0f} | {ratio_text} |")

    row("recompute, examples/s", "recompute_s")
    row("first pass (compute + write), examples/s", "write_s")
    row("later pass (read the snapshot), examples/s", "read_s")
    row("bytes on disk, MB", "bytes", per_second=False)
    allowed = min(machine["disk_write_mbs"] * ratio, machine["zstd_mbs"] * 2)
    lines += ["", "| what the machine allows (this run) | MB/s |", "|---|---|",
              f"| disk write (256 MB, fsync) | {machine['disk_write_mbs']:,.0f} |",
              f"| page cache read | {machine['cache_read_mbs']:,.0f} |",
              f"| zstd level 1, one thread, on these batches | {machine['zstd_mbs']:,.0f} |",
              (f"| feedline writing computed batches (uncompressed MB/s, ratio {ratio:.1f}x) | "
              f"{rate:,.0f} = **{rate / allowed:.0%}** of min(disk x ratio, 2 x zstd) = "
              f"{allowed:,.0f} |"),
              "", (f"Peak memory snapshotting {args.memory_elements} vs "
              f"{10 * args.memory_elements} elements of 256 KiB: {small / 2**20:,.0f} MiB vs "
              f"{large / 2**20:,.0f} MiB ({large / small:.2f}x for 10x the data)."), "",
              (f"kill -9 at random moments during a snapshot write, then read: {exact} of "
              f"{trials} trials exact.")]
    if theirs.get("note"):
        lines += ["", (f"tf.data {theirs['version']}: `snapshot(compression=\"AUTO\")` failed "
                  f"on these batches ({theirs['note'].strip()}); its rows use "
                  "`compression=None`.")]
    return "\n".join(lines)


_ = resource  # the subprocess parts use it

if __name__ == "__main__":
    main()
