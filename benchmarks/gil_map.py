"""AUTOTUNE for a map whose calls hold the GIL (issue 25): inline, AUTOTUNE and processes.

The pipeline is ``from_tensor_slices(lines).map(tokenize, ...).batch(128)`` over the
python-heavy text (:func:`benchmarks.common.tokenize`: ~40 µs of pure Python a line, the
GIL held throughout). Settings, run in alternating rounds so that a shared, loaded machine
slows them alike:

- ``inline``: ``map(tokenize)``;
- ``autotune-threads``: ``map(tokenize, num_parallel_calls=AUTOTUNE)`` with
  ``Options(autotune=AutotuneOptions(processes=False, choose_executor=False))`` (threads
  only: ``processes=False`` alone still let the map's executor choice move it to processes);
- ``autotune``: the same with the default options;
- ``process2``: ``map(tokenize, num_parallel_calls=2, executor="process")``.

Printed: each setting's lines/s (median of its rounds), its ratio to ``inline`` and, for the
AUTOTUNE settings, where the map's calls ran (the executor choice, and whether the stage
went inline); then the same from the first batch on (``after start``), which leaves out
what starting costs (worker processes: ~0.3 s of an interpreter and NumPy each, on a
loaded machine), so that a short run's figures can be told apart from the steady rate;
and the CPU each setting spent per line (median): in this process (the consumer: pulling,
batching, its threads) and in its worker processes (their start included), with the rate they predict on 2 cores
(``min(1 / consumer, 2 / (consumer + workers))``: the consumer's share is serial), a figure
that a loaded machine's wall clock moves far less than the rates.
Run it with ``python -m benchmarks.gil_map`` (``--lines 20000 --rounds 3``: about a minute
on 2 loaded cores).
"""

from __future__ import annotations

import argparse
import resource
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


def pipeline(setting: str, lines: np.ndarray, epochs: int = 1) -> fl.Dataset:
    """The pipeline of ``setting`` (one of :data:`SETTINGS`), over ``lines`` ``epochs``
    times (a ``repeat``: a map's worker processes stay from one epoch to the next).

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
            ds = ds.with_options(fl.Options(autotune=fl.AutotuneOptions(
                processes=False, choose_executor=False)))
    ds = ds.batch(common.TEXT_BATCH)
    return ds if epochs == 1 else ds.repeat(epochs)


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its ended (waited for) child processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def run_once(setting: str, lines: np.ndarray, epochs: int = 1
             ) -> tuple[float, str, float, float, float]:
    """Lines per second of one full pass, where the map ran, lines per second from the
    first batch on (the steady rate, without what starting costs), and the CPU seconds per
    line of this process and of the worker processes (ended when the pass is)."""
    ds = pipeline(setting, lines, epochs)
    cpu_before = _cpu()
    started = time.perf_counter()
    count = 0
    where = ""
    first: tuple[float, int] | None = None
    with iter(ds) as it:
        for batch in it:
            count += len(batch)
            if first is None:
                first = (time.perf_counter(), count)
        where = _where(it)
    ended = time.perf_counter()
    cpu_after = _cpu()
    steady = 0.0
    if first is not None and count > first[1]:
        steady = (count - first[1]) / max(ended - first[0], 1e-9)
    per_line = max(count, 1)
    return (count / (ended - started), where, steady,
            (cpu_after[0] - cpu_before[0]) / per_line, (cpu_after[1] - cpu_before[1]) / per_line)


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
    parser.add_argument("--epochs", type=int, default=1,
                        help="passes over the lines in one run (a repeat)")
    args = parser.parse_args(argv)
    settings = args.settings.split(",")
    lines = make_lines(args.lines)
    rates: dict[str, list[float]] = {s: [] for s in settings}
    steady: dict[str, list[float]] = {s: [] for s in settings}
    cpu: dict[str, list[tuple[float, float]]] = {s: [] for s in settings}
    where: dict[str, set[str]] = {s: set() for s in settings}
    for round_ in range(args.rounds):
        order = settings if round_ % 2 == 0 else settings[::-1]
        for setting in order:
            rate, ran, after_start, own, workers = run_once(setting, lines, args.epochs)
            rates[setting].append(rate)
            cpu[setting].append((own, workers))
            steady[setting].append(after_start)
            if ran:
                where[setting].add(ran)
            print(f"round {round_ + 1} {setting:18s} {rate:10,.0f} lines/s "
                  f"({after_start:,.0f} after start) {ran}", flush=True)
    for title, table in (("", rates), (" after start (from the first batch)", steady)):
        base = statistics.median(table["inline"]) if "inline" in table else None
        print(f"\n{args.lines} lines x {args.epochs} epoch(s), batch {common.TEXT_BATCH}, "
              f"{args.rounds} rounds (median){title}")
        for setting in settings:
            rate = statistics.median(table[setting])
            ratio = f"{rate / base:5.2f}x inline" if base else ""
            # Per-round ratios to the inline run of the same round: the load moves between
            # rounds.
            per_round = ""
            if base and setting != "inline":
                per_round = " rounds: " + " ".join(
                    f"{a / b:.2f}" for a, b in zip(table[setting], table["inline"]))
            print(f"{setting:18s} {rate:10,.0f} lines/s {ratio}{per_round} "
                  f"[{'; '.join(sorted(where[setting]))}]")
    print("\nCPU per line (median, us): consumer + workers = total; the lines/s that predicts "
          "on 2 cores")
    for setting in settings:
        own = statistics.median(c[0] for c in cpu[setting])
        workers = statistics.median(c[1] for c in cpu[setting])
        total = own + workers
        predicted = min(1 / max(own, 1e-12), 2 / max(total, 1e-12))
        print(f"{setting:18s} {own * 1e6:7.1f} + {workers * 1e6:7.1f} = {total * 1e6:7.1f}   "
              f"{predicted:10,.0f}")


if __name__ == "__main__":
    main()
