"""AUTOTUNE for a map whose calls hold the GIL (issue 25): inline, AUTOTUNE and processes.

The pipeline is ``from_tensor_slices(lines).map(tokenize, ...).batch(128)`` over the
python-heavy text (:func:`benchmarks.common.tokenize`: ~40 µs of pure Python a line, the
GIL held throughout). Settings, run in alternating rounds so that a shared, loaded machine
slows them alike:

- ``inline``: ``map(tokenize)``;
- ``autotune-threads``: ``map(tokenize, num_parallel_calls=AUTOTUNE)`` with
  ``Options(autotune=AutotuneOptions(processes=False))``;
- ``autotune``: the same with the default options;
- ``process2``: ``map(tokenize, num_parallel_calls=2, executor="process")``.

Printed: each setting's lines/s (median of its rounds), its ratio to ``inline`` and, for the
AUTOTUNE settings, where the map's calls ran (the executor choice, and whether the stage
went inline). Run it with ``python -m benchmarks.gil_map`` (``--lines 20000 --rounds 3``:
about a minute on 2 loaded cores).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import feedline as fl
from benchmarks import common

SETTINGS = ("inline", "autotune-threads", "autotune", "process2")


def make_lines(count: int, seed: int = 0) -> np.ndarray:
    """``count`` lines of 70 random words (as :func:`benchmarks.data.text` writes them).

    Example:
        >>> lines = make_lines(2)
        >>> len(lines), len(lines[0].split())
        (2, 70)
    """
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 10, 5000)]
    picks = rng.integers(0, len(vocab), size=(count, 70))
    return np.array([" ".join(vocab[i] for i in row).capitalize() + "." for row in picks],
                    dtype=object)


def pipeline(setting: str, lines: np.ndarray) -> fl.Dataset:
    """The pipeline of ``setting`` (one of :data:`SETTINGS`).

    Example:
        >>> ds = pipeline("inline", make_lines(3))
        >>> next(iter(ds)).shape
        (3, 64)
    """
    ds = fl.Dataset.from_tensor_slices(lines)
    if setting == "inline":
        ds = ds.map(common.tokenize)
    elif setting == "process2":
        ds = ds.map(common.tokenize, num_parallel_calls=2, executor="process")
    else:
        ds = ds.map(common.tokenize, num_parallel_calls=fl.AUTOTUNE)
        if setting == "autotune-threads":
            ds = ds.with_options(fl.Options(autotune=fl.AutotuneOptions(processes=False)))
    return ds.batch(common.TEXT_BATCH)


def run_once(setting: str, lines: np.ndarray) -> tuple[float, str]:
    """Lines per second of one full pass, and where the map ran."""
    ds = pipeline(setting, lines)
    started = time.perf_counter()
    count = 0
    where = ""
    with iter(ds) as it:
        for batch in it:
            count += len(batch)
        where = _where(it)
    return count / (time.perf_counter() - started), where


def _where(it: Any) -> str:
    from feedline.transforms.map import ParallelMapIterator

    found: list[str] = []

    def visit(node: Any, depth: int = 0) -> None:
        if depth > 20 or node is None:
            return
        if isinstance(node, ParallelMapIterator):
            decision = node.executor_decision
            kind = decision.kind if decision is not None else node.executor_kind
            found.append(kind + (" (inline)" if getattr(node, "runs_inline", False) else ""))
        for child in getattr(node, "_inputs", None) or ():
            visit(child, depth + 1)
        visit(getattr(node, "_root", None), depth + 1)

    visit(it)
    return ", ".join(found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    args = parser.parse_args(argv)
    settings = args.settings.split(",")
    lines = make_lines(args.lines)
    rates: dict[str, list[float]] = {s: [] for s in settings}
    where: dict[str, set[str]] = {s: set() for s in settings}
    for round_ in range(args.rounds):
        order = settings if round_ % 2 == 0 else settings[::-1]
        for setting in order:
            rate, ran = run_once(setting, lines)
            rates[setting].append(rate)
            if ran:
                where[setting].add(ran)
            print(f"round {round_ + 1} {setting:18s} {rate:10,.0f} lines/s {ran}", flush=True)
    base = statistics.median(rates["inline"]) if "inline" in rates else None
    print(f"\n{args.lines} lines, batch {common.TEXT_BATCH}, {args.rounds} rounds (median)")
    for setting in settings:
        rate = statistics.median(rates[setting])
        ratio = f"{rate / base:5.2f}x inline" if base else ""
        # Per-round ratios to the inline run of the same round: the load moves between rounds.
        per_round = ""
        if base and setting != "inline":
            per_round = " rounds: " + " ".join(
                f"{a / b:.2f}" for a, b in zip(rates[setting], rates["inline"]))
        print(f"{setting:18s} {rate:10,.0f} lines/s {ratio}{per_round} "
              f"[{'; '.join(sorted(where[setting]))}]")


if __name__ == "__main__":
    main()
