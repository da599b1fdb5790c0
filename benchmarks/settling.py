"""AUTOTUNE settles fast and stays put (issue 25): every tuned knob's changes over a long run.

Each workload runs under ``AUTOTUNE`` (threads only: ``AutotuneOptions(processes=False)``,
so that every change is the tuner's and is listed) for ``--seconds``, data repeated, with
statistics on. Printed per workload and run:

* **settled at**: the seconds after which the rate over every later two seconds stayed
  within 90% of the run's rate over its second half (:func:`settled_at`, the same reading
  as ``benchmarks.waiting_map``; a second's hiccup of a shared machine does not count).
  Goal: within 3 s.
* **last move**: when the tuner last changed a knob for good. A change put back by the
  next change of the same knob (a worker more or fewer tried, and undone: the tuner's
  trials, :mod:`feedline.autotune.tuner`) is a *trial*; any other change is a *move*.
  Counted after 3 s: moves (goal: none on a steady pipeline) and trials (each costs about
  a second at the setting tried).

Workloads: ``chess`` and ``images`` (``benchmarks.profiling``'s pipelines), ``waiting``
(a map whose calls sleep 4 ms, ``benchmarks.waiting_map``) and ``gil`` (the tokenizer of
``python_heavy``, pure Python). Run with ``python -m benchmarks.settling`` (about
``rounds x 4 x seconds``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks import common, data, profiling
from benchmarks.waiting_map import fetch_after, settled_at

SETTLE_GOAL = 3.0
"""Seconds within which AUTOTUNE should settle."""

GOAL_SHARE = 0.9
"""Share of the second half's rate that counts as settled."""

@dataclass
class Settling:
    """One run: when it settled and what changed after.

    Attributes:
        workload: Its name.
        settled: Seconds after which it stayed within :data:`GOAL_SHARE` (``None``: never).
        last_move: Seconds of the last change that was not a trial (``None``: none).
        trials: Changes after :data:`SETTLE_GOAL` put back by the next change of their knob
            (each pair counts once).
        moves: Other changes after :data:`SETTLE_GOAL`.
        rate: Rows per second over the second half.
        changes: Every change, as ``"stage setting old->new at seconds"``.
        executors: Where each parallel stage ran at the end (``"map(f): processes"``): a
            map's calls moved to worker processes are tuned no more.
    """

    workload: str
    settled: float | None
    last_move: float | None
    trials: int
    moves: int
    rate: float
    changes: list[str]
    executors: str = ""


def _pipelines() -> dict[str, Callable[[], Any]]:
    import feedline as fl

    files = data.chess(40_000, 8, profiling.SEED)["files"]
    image_meta = {**data.images(200, profiling.SEED), "decoder": data.available_decoder()}
    lines = np.array(data.read_lines(data.text(20_000, profiling.SEED)), dtype=object)

    def waiting() -> Any:
        return (fl.Dataset.range(10**8).map(fetch_after(0.004), num_parallel_calls=fl.AUTOTUNE)
                .batch(16).prefetch(fl.AUTOTUNE))

    def gil() -> Any:
        return (fl.Dataset.from_tensor_slices(lines)
                .map(common.tokenize, num_parallel_calls=fl.AUTOTUNE)
                .batch(common.TEXT_BATCH).prefetch(fl.AUTOTUNE))

    return {"chess": lambda: profiling.chess(files),
            "images": lambda: profiling.images(image_meta),
            "waiting": waiting, "gil": gil}


def trial_pairs(decisions: list[Any]) -> list[bool]:
    """For each change, whether it is half of a trial: a change and the next change of the
    same knob that puts it back.

    Example:
        >>> from feedline.profiling.records import TuningDecision as D
        >>> trial_pairs([D(1, "m", "workers", 2, 3, ""), D(2, "m", "workers", 3, 2, ""),
        ...              D(3, "m", "workers", 2, 4, ""), D(4, "p", "buffer", 1, 2, "")])
        [True, True, False, False]
    """
    paired = [False] * len(decisions)
    last: dict[tuple[str, str], int] = {}
    for index, decision in enumerate(decisions):
        knob = (decision.stage, decision.setting)
        before = last.get(knob)
        if (before is not None and not paired[before]
                and decisions[before].old == decision.new
                and decisions[before].new == decision.old):
            paired[before] = paired[index] = True
        last[knob] = index
    return paired


def run_once(workload: str, make: Callable[[], Any], seconds: float) -> Settling:
    """Read ``make()``'s pipeline, repeated, for ``seconds`` under AUTOTUNE."""
    import feedline as fl

    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True),
                         autotune=fl.AutotuneOptions(processes=False))
    marks: list[tuple[float, int]] = []
    count = 0
    started = time.perf_counter()
    with iter(make().repeat().with_options(options)) as iterator:
        while (now := time.perf_counter() - started) < seconds:
            count += profiling._rows(next(iterator))
            marks.append((now, count))
        statistics = iterator.statistics()
        decisions = [d for d in statistics.tuning if d.new != d.old]
        executors = ", ".join(f"{stage.name}: {stage.executor}" for stage in statistics.stages
                              if stage.asynchronous and stage.executor)
    per_second = []
    for second in range(int(seconds)):
        low = max((c for t, c in marks if t <= second), default=0)
        high = max((c for t, c in marks if t <= second + 1), default=0)
        per_second.append(float(high - low))
    half = per_second[len(per_second) // 2:]
    rate = sum(half) / max(len(half), 1)
    trial = trial_pairs(decisions)
    late = [(d, is_trial) for d, is_trial in zip(decisions, trial) if d.seconds > SETTLE_GOAL]
    moves = [d for d, is_trial in zip(decisions, trial) if not is_trial]
    return Settling(workload, settled_at(per_second, GOAL_SHARE * rate),
                    moves[-1].seconds if moves else None,
                    sum(1 for _, is_trial in late if is_trial) // 2,
                    sum(1 for _, is_trial in late if not is_trial), rate,
                    [f"{d.stage} {d.setting} {d.old}->{d.new} at {d.seconds:.2f} s: {d.reason[:140]}"
                     for d in decisions], executors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="seconds of each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="chess,images,waiting,gil")
    parser.add_argument("--verbose", action="store_true", help="list every change")
    args = parser.parse_args(argv)
    pipelines = _pipelines()
    chosen = args.workloads.split(",")
    runs: list[Settling] = []
    for _ in range(args.rounds):
        for workload in chosen:
            runs.append(run_once(workload, pipelines[workload], args.seconds))
            run = runs[-1]
            print(f"{workload}: {run.rate:,.0f} rows/s, settled at {run.settled}, "
                  f"{len(run.changes)} changes", flush=True)
            if args.verbose:
                print("  " + "\n  ".join(run.changes))
    print(f"\n`python -m benchmarks.settling {' '.join(sys.argv[1:] if argv is None else argv)}`"
          f": {args.rounds} round(s) of {args.seconds:g} s per workload\n")
    print("| workload | rows/s (second half) | settled at (s) | last move (s) | moves after "
          f"{SETTLE_GOAL:g} s | trials after {SETTLE_GOAL:g} s | stages ran on |")
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        settled = "never" if run.settled is None else f"{run.settled:.0f}"
        last = "none" if run.last_move is None else f"{run.last_move:.2f}"
        print(f"| {run.workload} | {run.rate:,.0f} | {settled} | {last} | {run.moves} | "
              f"{run.trials} | {run.executors} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
