"""Does the malloc tuning pay for itself in the training process (issue 41.9)?

``feedline.execution.allocator`` raises glibc's mmap and trim thresholds so that a process
freeing and allocating megabytes per batch stops returning pages to the kernel and faulting
them back (measured: half the images feeder's CPU). The price is memory kept. This runs the
chess and images pipelines on threads *in the training process* (where the user's own
memory lives), each in a fresh interpreter with the tuning on and off, alternating, and
reports per setting:

* CPU seconds per 1,000 rows (the process's user + system time over the rows: less noisy
  than a rate on a shared machine) and rows per second;
* the RSS after 60 pipelines were built, read for a few batches and closed, over the RSS
  before the first.

Run: ``python -m benchmarks.malloc_tuning --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

from benchmarks import data, profiling

SEED = 1234


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _make(workload: str) -> Any:
    if workload == "chess":
        meta = data.chess_meta(None, small=True)
        return lambda: profiling.chess(meta["files"]).with_options(profiling._options("off"))
    meta = data.images(2000, SEED)
    return lambda: profiling.images(meta).with_options(profiling._options("off"))


def child(workload: str, seconds: float) -> dict[str, float]:
    """In a fresh process: the rate and CPU per row, then the RSS after 60 closed
    pipelines."""
    make = _make(workload)
    rows = 0
    with iter(make().repeat()) as it:  # warm-up: the tuner settles, the heap grows
        warm_end = time.perf_counter() + 2.0
        for element in it:
            if time.perf_counter() >= warm_end:
                break
        cpu, started = _cpu(), time.perf_counter()
        for element in it:
            rows += profiling._rows(element)
            if time.perf_counter() - started >= seconds:
                break
        wall, cpu = time.perf_counter() - started, _cpu() - cpu
    before = psutil.Process().memory_info().rss
    for _ in range(60):
        with iter(make()) as it:
            for _, _element in zip(range(3), it, strict=False):
                pass
    after = psutil.Process().memory_info().rss
    return {"rows_per_s": rows / wall, "cpu_ms_per_1000_rows": 1e6 * cpu / rows,
            "rss_growth_mib": (after - before) / 2**20, "rss_mib": after / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workloads", default="chess,images")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "SECONDS"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], float(args.child[1]))))
        return
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for workload in args.workloads.split(","):
        _make(workload)  # the data, once, outside the timed children
        results[workload] = {"on": [], "off": []}
        for _ in range(args.rounds):
            for setting in ("on", "off"):
                env = dict(os.environ, FEEDLINE_MALLOC_TUNING="1" if setting == "on" else "0")
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.malloc_tuning", "--child", workload,
                     str(args.seconds)], env=env, capture_output=True, text=True, check=True)
                results[workload][setting].append(json.loads(out.stdout.splitlines()[-1]))
    for workload, settings in results.items():
        print(f"{workload}:")
        for setting, runs in settings.items():
            summary = {key: round(statistics.median(r[key] for r in runs), 2)
                       for key in runs[0]}
            print(f"  tuning {setting}: {summary}")
        on = statistics.median(r["cpu_ms_per_1000_rows"] for r in settings["on"])
        off = statistics.median(r["cpu_ms_per_1000_rows"] for r in settings["off"])
        print(f"  CPU per row, on/off: {on / off:.3f}")


if __name__ == "__main__":
    main()
