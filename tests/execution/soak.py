"""A soak of ``multiprocess`` worker processes: their memory must stay flat.

A pipeline of arrays (through shared memory), elements that fail (dropped by
``ignore_errors``) and statistics on runs for a while on worker processes; each worker's
resident memory (RSS) is sampled as it goes. After a warm-up (interpreter, NumPy, shared
buffers, the statistics timeline filling up to its bound), it must stay flat: a leak of a
few bytes an element, or a sample, shows up as growth between the first and the last third
of the samples after warm-up.

Found by it (issue 29): workers grew 50.9 -> 53.0 MB in 10 minutes with statistics on. The
statistics collector kept every timeline sample and buffer-fill reading (a sample every
``interval``), and each worker sent its whole, growing, timeline every 0.5 s.

The test suite runs a short soak (``test_soak.py``); the long one is this script::

    python tests/execution/soak.py --seconds 600          # exit status 1 if memory grows
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics as stats
import sys
import time
from typing import Any

import numpy as np
import psutil

import feedline as fl

ALLOWED_GROWTH = 512 * 1024
"""Bytes a worker's RSS may grow between the first and the last third of the samples after
warm-up (noise: pages of the allocator, a shared buffer mapped late)."""


def _element(x: Any) -> dict[str, Any]:
    if int(x) % 997 == 0:
        raise ValueError(f"element {int(x)} fails, as some do in a long run")
    return {"pixels": np.full((64, 64, 3), int(x) % 251, np.uint8), "label": np.int64(x)}


@dataclasses.dataclass
class Sample:
    """One sampling of the run."""

    seconds: float
    elements: int
    worker_rss: list[int]
    consumer_rss: int


@dataclasses.dataclass
class SoakReport:
    """What a soak measured.

    Attributes:
        samples: The samples, in time order.
        warmup: Seconds of warm-up, whose samples the verdict leaves out.
        pids: The worker processes sampled.
    """

    samples: list[Sample]
    warmup: float
    pids: list[int]

    def growth(self) -> list[int]:
        """Per worker: median RSS of the last third of the samples after warm-up minus
        that of the first third (bytes)."""
        after = [s for s in self.samples if s.seconds >= self.warmup]
        third = max(1, len(after) // 3)
        first, last = after[:third], after[-third:]
        return [int(stats.median(s.worker_rss[w] for s in last)
                    - stats.median(s.worker_rss[w] for s in first))
                for w in range(len(self.pids))]

    def flat(self, allowed: int = ALLOWED_GROWTH) -> bool:
        return all(g <= allowed for g in self.growth())

    def table(self) -> str:
        rows = [f"{s.seconds:8.1f} s {s.elements:10d} elements  workers "
                + " ".join(f"{rss / 2**20:8.2f}" for rss in s.worker_rss)
                + f" MB  consumer {s.consumer_rss / 2**20:8.2f} MB" for s in self.samples]
        growth = ", ".join(f"{g / 1024:+.0f} kB" for g in self.growth())
        return "\n".join([*rows, f"growth after {self.warmup:.0f} s of warm-up: {growth}"])


def soak(seconds: float, warmup: float, samples: int = 40, workers: int = 2,
         interval: float = 0.1) -> SoakReport:
    """Run the soak pipeline for ``seconds``, sampling RSS ``samples`` times.

    Args:
        seconds: How long to run.
        warmup: Seconds left out of the verdict.
        samples: Samplings, evenly spread.
        workers: Worker processes.
        interval: The statistics' sampling interval (shorter: more timeline samples per
            second, so a short run puts as much in it as a long one).
    """
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=interval))
    # Batches of 8 x 12 kB: through shared memory (SHARED_MEMORY_THRESHOLD), and many a
    # second, for as many statistics samples.
    ds = (fl.Dataset.range(10**15).map(_element).batch(8).multiprocess(workers)
          .ignore_errors().with_options(options))
    consumer = psutil.Process()
    taken: list[Sample] = []
    with iter(ds) as it:
        next(it)
        pids = _worker_pids(it)
        processes = [psutil.Process(pid) for pid in pids]
        start = time.monotonic()
        every = seconds / samples
        due, count = start, 1
        while True:
            now = time.monotonic()
            if now >= due:
                taken.append(Sample(now - start, count,
                                    [p.memory_info().rss for p in processes],
                                    consumer.memory_info().rss))
                due += every
                if now - start >= seconds:
                    break
            batch = next(it)
            count += 1
            del batch  # its shared buffer goes back to the worker
        assert _worker_pids(it) == pids, "a worker was restarted during the soak"
    return SoakReport(taken, warmup, pids)


def _worker_pids(it: Any) -> list[int]:
    stack = [it._root]
    while stack:
        node = stack.pop()
        if hasattr(node, "worker_pids"):
            return list(node.worker_pids)
        stack.extend(getattr(node, "_inputs", []))
    raise AssertionError("no multiprocess stage")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds left out of the verdict (default: a fifth of the run, "
                        "at least 150 s of timeline filling)")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    warmup = args.warmup if args.warmup is not None else min(
        args.seconds / 2, max(args.seconds / 5, 150.0))
    report = soak(args.seconds, warmup, args.samples, args.workers)
    print(report.table())
    flat = report.flat()
    print("flat" if flat else f"GROWS by more than {ALLOWED_GROWTH // 1024} kB")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
