"""AUTOTUNE against the obvious fixed setting on the cases of issue 42, in one process, two
rounds: ``python -m benchmarks.autotune_cases`` (ratios within one run; see
benchmarks/RESULTS-autotune.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import feedline as fl

NEVER = fl.Options(autotune=fl.AutotuneOptions(processes=False))


def rate(ds: fl.Dataset, per_item: int, limit: int | None = None) -> tuple[float, str]:
    """Elements per second of ``ds`` (``per_item`` elements an item, at most ``limit``
    items), and the placement AUTOTUNE chose (``-``: none)."""
    started = time.perf_counter()
    count = 0
    with iter(ds) as it:
        for _ in it:
            count += 1
            if limit and count >= limit:
                break
        decision = it.process_decision
    return count * per_item / (time.perf_counter() - started), (
        decision.mode if decision else "-")


def sleeper(seconds: float) -> Callable[[Any], Any]:
    """A map function whose calls wait ``seconds`` (I/O, the network)."""
    def fetch(x: Any) -> Any:
        time.sleep(seconds)
        return x
    return fetch


def small(x: Any) -> Any:
    """benchmarks/core_throughput.py's function: about a microsecond of NumPy."""
    return np.sqrt(np.float64(x) * 2.0 + 1.0)


def one_round() -> None:
    """Each case once, AUTOTUNE beside its obvious fixed setting."""
    for ms, size in ((2, 32), (4, 16)):
        fetch = sleeper(ms / 1000)
        tuned, mode = rate(fl.Dataset.range(6000).map(fetch, num_parallel_calls=fl.AUTOTUNE)
                           .batch(size).prefetch(fl.AUTOTUNE), size)
        fixed, _ = rate(fl.Dataset.range(6000).map(fetch, num_parallel_calls=16).batch(size)
                        .prefetch(fl.AUTOTUNE).with_options(NEVER), size)
        print(f"waiting {ms} ms, batch {size}: AUTOTUNE {tuned:,.0f}/s ({mode}) / 16 threads "
              f"{fixed:,.0f}/s = {tuned / fixed:.2f}")
    vectorized = fl.Dataset.range(10**9).map(lambda x: x + 1).batch(256)
    tuned, mode = rate(vectorized.prefetch(fl.AUTOTUNE), 256, 20000)
    fixed, _ = rate(vectorized.prefetch(2), 256, 20000)
    print(f"vectorized: AUTOTUNE {tuned / 1e6:.2f}M/s ({mode}) / prefetch(2) "
          f"{fixed / 1e6:.2f}M/s = {tuned / fixed:.2f}")
    # The process's CPU time per element beside the wall rate: on a busy machine the wall
    # clock of two passes differs by the load, the CPU time by the work.
    cpu = time.process_time()
    inline, _ = rate(fl.Dataset.range(300_000).map(small).batch(256), 256)
    inline_cpu = (time.process_time() - cpu) / 300_000
    cpu = time.process_time()
    tuned, _ = rate(fl.Dataset.range(300_000).map(small, num_parallel_calls=fl.AUTOTUNE)
                    .batch(256), 256)
    tuned_cpu = (time.process_time() - cpu) / 300_000
    print(f"cheap map: AUTOTUNE {tuned:,.0f}/s / inline {inline:,.0f}/s = {tuned / inline:.2f}"
          f"; CPU {tuned_cpu * 1e6:.2f} / {inline_cpu * 1e6:.2f} µs an element, inline's "
          f"{inline_cpu / tuned_cpu:.2f}x")


if __name__ == "__main__":
    for _ in range(2):
        one_round()
