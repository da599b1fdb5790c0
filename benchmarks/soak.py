"""Soak: does a long run in worker processes hold its memory flat (issue 41.8)?

Runs the chess pipeline (TFRecord files -> interleave -> shuffle -> batch -> map(parse), data
repeated) for ``--seconds`` in a feeder process (``multiprocess(1)``) or in two worker
processes (``multiprocess(2)``), a consumer taking batches as fast as they come, and samples
the RSS of the consumer and of every worker process every ``--interval`` seconds. After
``--warmup`` seconds, memory should stay flat: the goal is a growth (largest sample after the
warm-up minus the sample at its end) within 5 MiB per process. The rate per interval is
printed too (a process that slows while its memory grows is what a leak looks like).

Run: ``python -m benchmarks.soak --setup feeder --seconds 1800`` (and ``--setup workers2``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil

import feedline as fl
from feedline.demo.chess import transform, write_records

GOAL_MIB = 5.0
"""Largest RSS growth after the warm-up, per process, that counts as flat."""


def pipeline(files: list[str], workers: int, parallel: int = fl.AUTOTUNE) -> fl.Dataset:
    """The chess pipeline, repeated, in ``workers`` worker processes."""
    return (fl.Dataset.from_tensor_slices(files)
            .interleave(fl.TFRecordDataset, cycle_length=4, block_length=16)
            .shuffle(10_000, seed=0)
            .batch(512)
            .map(transform, num_parallel_calls=parallel)
            .repeat()
            .multiprocess(workers))


def _rss_mib(pids: list[int]) -> list[float | None]:
    out: list[float | None] = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid).memory_info().rss / 2**20)
        except psutil.NoSuchProcess:
            out.append(None)
    return out


def _rss_parts_mib() -> dict[str, float]:
    """This process's resident memory by kind (Linux): anonymous (heaps), file-backed
    (libraries, mapped files) and shared memory (batches mapped from the workers)."""
    parts: dict[str, float] = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("RssAnon", "RssFile", "RssShmem")):
                    name, value = line.split(":")
                    parts[name] = int(value.split()[0]) / 1024
    except FileNotFoundError:
        pass
    return parts


def soak(setup: str, seconds: float, warmup: float, interval: float,
         parallel: int = fl.AUTOTUNE) -> dict:
    """Run one setup and return its samples and verdict per process."""
    workers = {"feeder": 1, "workers2": 2}[setup]
    with tempfile.TemporaryDirectory(prefix="feedline-soak-") as folder:
        files = write_records(folder, 100_000, 8)
        it = iter(pipeline(files, workers, parallel))
        next(it)
        started = time.monotonic()
        samples: list[dict] = []
        batches = 0
        next_sample = started
        worker_pids: list[int] = []
        while True:
            now = time.monotonic()
            if now >= next_sample:
                if not worker_pids:
                    worker_pids = _worker_pids()
                samples.append({"t": round(now - started, 1), "batches": batches,
                                "consumer": _rss_mib([psutil.Process().pid])[0],
                                "consumer_parts": _rss_parts_mib(),
                                "workers": _rss_mib(worker_pids)})
                next_sample += interval
                if now - started >= seconds:
                    break
            next(it)
            batches += 1
        it.close()
    return {"setup": setup, "seconds": seconds, "warmup": warmup, "samples": samples,
            "verdict": verdict(samples, warmup)}


def _worker_pids() -> list[int]:
    """This process's worker processes (direct children, the feeder's own map workers
    included as grandchildren)."""
    return [p.pid for p in psutil.Process().children(recursive=True)]


def verdict(samples: list[dict], warmup: float) -> dict:
    """Per process: RSS at the end of the warm-up, the largest after it, the growth, and
    the rate (batches/s) in the first and last quarter after the warm-up."""
    after = [s for s in samples if s["t"] >= warmup]
    if len(after) < 2:
        return {"error": "the run was shorter than its warm-up"}
    result: dict = {}
    names = ["consumer"] + [f"worker{i}" for i in range(len(after[0]["workers"]))]
    for index, name in enumerate(names):
        values = [s["consumer"] if index == 0 else s["workers"][index - 1] for s in after]
        values = [v for v in values if v is not None]
        if not values:
            continue
        growth = max(values) - values[0]
        result[name] = {"at_warmup_mib": round(values[0], 1), "max_mib": round(max(values), 1),
                        "last_mib": round(values[-1], 1), "growth_mib": round(growth, 1),
                        "flat": growth <= GOAL_MIB}
    quarter = max(1, len(after) // 4)

    def rate(part: list[dict]) -> float:
        return (part[-1]["batches"] - part[0]["batches"]) / max(part[-1]["t"] - part[0]["t"],
                                                               1e-9)

    result["rate_first_quarter"] = round(rate(after[:quarter + 1]), 1)
    result["rate_last_quarter"] = round(rate(after[-quarter - 1:]), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", choices=["feeder", "workers2"], default="feeder")
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--parallel", type=int, default=fl.AUTOTUNE,
                        help="the map's num_parallel_calls (default AUTOTUNE, which follows the "
                        "machine's load: its memory moves with the parallelism it picks)")
    parser.add_argument("--out", type=Path, help="write the samples as JSON here")
    args = parser.parse_args()
    result = soak(args.setup, args.seconds, args.warmup, args.interval, args.parallel)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["verdict"], indent=1))


if __name__ == "__main__":
    main()
