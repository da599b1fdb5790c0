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


def measure(n: int, parallel: bool, repeats: int) -> dict[str, Any]:
    """Elements per second of ``range(n).map(f[, AUTOTUNE]).batch(256)``, median of repeats."""
    import feedline as fl

    rates = []
    for _ in range(repeats):
        ds = fl.Dataset.range(n).map(small_numpy_function,
                                     num_parallel_calls=fl.AUTOTUNE if parallel else None)
        ds = ds.batch(256)
        start = time.perf_counter()
        count = 0
        for batch in ds:
            count += len(batch)
        elapsed = time.perf_counter() - start
        if count != n:
            raise RuntimeError(f"the pipeline produced {count} elements, expected {n}")
        rates.append(n / elapsed)
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
            "runs": repeats}


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
             "| map | elements/s (median) | min–max |", "|---|---|---|"]
    for label, key in (("inline", "inline"), ("num_parallel_calls=AUTOTUNE", "autotune")):
        r = results[key]
        lines.append(f"| {label} | {r['median']:,.0f} | {r['min']:,.0f}–{r['max']:,.0f} |")
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
    results = {"n": n, "function_us": function_cost() * 1e6,
               "inline": measure(n, False, args.repeats),
               "autotune": measure(n, True, args.repeats)}
    return emit(results, markdown(results), args.json)


if __name__ == "__main__":
    sys.exit(main())
