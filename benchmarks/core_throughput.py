"""Core engine throughput: ``range(n).map(f).batch(256)`` with a small NumPy ``f``.

Measures elements per second with ``map`` inline and with ``num_parallel_calls=AUTOTUNE``
(issue 2). Run it with ``./dev bench core`` or ``python -m benchmarks.core_throughput``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

from benchmarks.common import emit


def small_numpy_function(x: Any) -> np.ndarray:
    """About a microsecond of NumPy work on one scalar element (a typical per-element map).

    Example:
        >>> float(small_numpy_function(np.int64(4)))
        3.0
    """
    return np.sqrt(np.float64(x) * 2.0 + 1.0)


def run_once(n: int, parallel: bool) -> tuple[float, float]:
    """(elements per second, CPU seconds per element) of one pass of
    ``range(n).map(f[, AUTOTUNE]).batch(256)``. The CPU time is the process's (every
    thread's): what a busy machine moves least, unlike the wall clock."""
    import feedline as fl

    ds = fl.Dataset.range(n).map(small_numpy_function,
                                 num_parallel_calls=fl.AUTOTUNE if parallel else None)
    ds = ds.batch(256)
    start, cpu_start = time.perf_counter(), time.process_time()
    count = 0
    for batch in ds:
        count += len(batch)
    elapsed = time.perf_counter() - start
    if count != n:
        raise RuntimeError(f"the pipeline produced {count} elements, expected {n}")
    return n / elapsed, (time.process_time() - cpu_start) / n


def summary(runs: list[tuple[float, float]]) -> dict[str, Any]:
    """Median, min and max rate and the median CPU µs per element of ``runs``."""
    rates = [rate for rate, _ in runs]
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
            "runs": len(runs), "cpu_us": statistics.median(cpu for _, cpu in runs) * 1e6}


def measure(n: int, parallel: bool, repeats: int) -> dict[str, Any]:
    """Elements per second of ``range(n).map(f[, AUTOTUNE]).batch(256)``, median of repeats."""
    return summary([run_once(n, parallel) for _ in range(repeats)])


def function_cost(repeats: int = 20_000) -> float:
    """Seconds per call of the function alone (the floor of per-element cost)."""
    x = np.int64(3)
    start = time.perf_counter()
    for _ in range(repeats):
        small_numpy_function(x)
    return (time.perf_counter() - start) / repeats


def markdown(results: dict[str, Any]) -> str:
    n = results["n"]
    title = (f"### core — `range({n:,}).map(f).batch(256)`, f a small NumPy function "
             f"({results['function_us']:.1f} µs a call alone)")
    lines = [title, "",
             "| map | elements/s (median) | min–max | CPU µs/element (median) | × inline |",
             "|---|---|---|---|---|"]
    inline = results["inline"]
    for label, key in (("inline", "inline"), ("num_parallel_calls=AUTOTUNE", "autotune")):
        r = results[key]
        lines.append(f"| {label} | {r['median']:,.0f} | {r['min']:,.0f}–{r['max']:,.0f} | "
                     f"{r['cpu_us']:.3f} | {r['median'] / inline['median']:.2f} (wall), "
                     f"{inline['cpu_us'] / r['cpu_us']:.2f} (CPU) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core_throughput",
                                     description=__doc__)
    parser.add_argument("--n", type=int, default=10**6, help="elements (default 10**6)")
    parser.add_argument("--small", action="store_true", help="10**5 elements")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)
    n = 10**5 if args.small else args.n
    # Interleaved (inline, AUTOTUNE, inline, ...): a machine whose load drifts moves both.
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.repeats):
        for parallel in (False, True):
            runs[parallel].append(run_once(n, parallel))
    results = {"n": n, "function_us": function_cost() * 1e6,
               "inline": summary(runs[False]), "autotune": summary(runs[True])}
    return emit(results, markdown(results), args.json)


if __name__ == "__main__":
    sys.exit(main())
