"""AUTOTUNE for a map whose calls wait (issue 25): a sweep of fixed settings against AUTOTUNE.

The pipeline is ``Dataset.range(10**8).map(fetch, num_parallel_calls=N).batch(16)
.prefetch(AUTOTUNE)``, where ``fetch`` sleeps (4 ms by default, the GIL released), as a
call that reads a file or waits on the network does. Each setting of ``N`` (1, 2, 4, 16,
32, 64) and ``AUTOTUNE`` runs for a few seconds; the rounds alternate the settings, so that
a machine shared with other work slows them alike, and each setting's figure is the median
of its rounds. Printed: elements per second of each setting (over the last part of its
run), AUTOTUNE's ratio to the best fixed setting, when AUTOTUNE came within 90% of it and
stayed there (seconds from ``iter()``, on rates over two seconds; the goal: within 10 s),
and when the tuner last
changed the map's workers (``statistics().tuning``; in worker processes, AUTOTUNE's
processes tune themselves and are not listed).

The calls sleep, so the map's own figures hardly depend on the machine's load; the thread
that pulls, batches and hands out the elements is Python and does (on 2 shared cores the
best rate moved between 15,000 and 30,000 elements/s from one minute to the next).

Run it with ``python -m benchmarks.waiting_map`` (about 90 seconds; ``--processes off``
keeps the pipeline on threads, as ``AutotuneOptions(processes=False)`` does, about 45
seconds; ``--rounds``, ``--seconds``, ``--settings 1,2,4,16,32,64,128,256``). By default
AUTOTUNE may move a pipeline that ends with ``prefetch(AUTOTUNE)`` to worker processes
(:mod:`feedline.placement.auto`), fixed settings too: a trial on threads keeps few
cores busy while its calls wait.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

GOAL_RATIO = 0.9
"""Share of the best fixed setting's rate AUTOTUNE should reach."""


def fetch_after(seconds: float) -> Any:
    """A map function that waits ``seconds`` (a sleep releases the GIL, as I/O does).

    Example:
        >>> fetch_after(0.0)(3)
        3
    """

    def fetch(x: Any) -> Any:
        time.sleep(seconds)
        return x

    return fetch


@dataclass
class Run:
    """One run of one setting.

    Attributes:
        setting: ``"N=4"`` or ``"AUTOTUNE"``.
        rate: Elements per second over the last ``measured`` seconds of the run.
        per_second: Elements per second in each whole second since ``iter()``.
        last_change: Seconds since the tuner started when it last changed the map's
            workers (``None``: no change listed).
        workers: The map's workers at the end, as the tuner last set them (``None``: not
            listed).
        mode: Where the pipeline ran (``"threads"`` or ``"processes xK"``).
    """

    setting: str
    rate: float
    per_second: list[float] = field(default_factory=list)
    last_change: float | None = None
    workers: int | None = None
    mode: str = "threads"


def run_once(parallel: int | None, seconds: float, measured: float, sleep: float,
             processes: bool | None) -> Run:
    """Read the pipeline for ``seconds``; its rate over the last ``measured`` of them."""
    import feedline as fl

    calls = fl.AUTOTUNE if parallel is None else parallel
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True),
                         autotune=fl.AutotuneOptions(processes=processes))
    ds = (fl.Dataset.range(10**8).map(fetch_after(sleep), num_parallel_calls=calls,
                                      name="fetch")
          .batch(16).prefetch(fl.AUTOTUNE).with_options(options))
    marks: list[tuple[float, int]] = []
    count = 0
    started = time.perf_counter()
    with iter(ds) as it:
        while (now := time.perf_counter() - started) < seconds:
            count += len(next(it))
            marks.append((now, count))
        decisions = [d for d in it.statistics().tuning
                     if d.stage == "fetch" and d.setting == "workers" and d.new != d.old]
        decision = getattr(it._root, "decision", None)
    mode = "threads" if decision is None or decision.mode == "threads" else \
        f"processes x{decision.workers}"
    begin = seconds - measured
    before = max((c for t, c in marks if t <= begin), default=0)
    start_t = max((t for t, c in marks if t <= begin), default=0.0)
    rate = (count - before) / max(marks[-1][0] - start_t, 1e-9) if marks else 0.0
    per_second = []
    for second in range(int(seconds)):
        lo = max((c for t, c in marks if t <= second), default=0)
        hi = max((c for t, c in marks if t <= second + 1), default=0)
        per_second.append(float(hi - lo))
    setting = "AUTOTUNE" if parallel is None else f"N={parallel}"
    return Run(setting, rate, per_second,
               decisions[-1].seconds if decisions else None,
               decisions[-1].new if decisions else None, mode)


def settled_at(per_second: list[float], target: float) -> float | None:
    """Seconds after which the rate over every later two seconds reached ``target``
    (``None``: never): a second's hiccup of a shared machine does not count.

    Example:
        >>> settled_at([10, 50, 95, 85, 96, 97], 90)  # one second at 85: 2.0 all the same
        2.0
        >>> settled_at([10, 50], 90) is None
        True
    """
    at = None
    means = [(a + b) / 2 for a, b in zip(per_second, per_second[1:])]
    for second, rate in enumerate(means):
        if rate >= target:
            if at is None:
                at = float(second)
        else:
            at = None
    return at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds over every setting")
    parser.add_argument("--seconds", type=float,
                        help="seconds of a fixed setting's run, the last half measured "
                             "(default 5; 10 with --processes auto: the move to processes "
                             "takes 2-8 s)")
    parser.add_argument("--autotune-seconds", type=float,
                        help="seconds of an AUTOTUNE run, the last 4 measured (default 12; "
                             "16 with --processes auto)")
    parser.add_argument("--settings", default="1,2,4,16,32,64",
                        help="fixed num_parallel_calls to compare, comma-separated")
    parser.add_argument("--sleep-ms", type=float, default=4.0, help="the call's wait")
    parser.add_argument("--processes", choices=("auto", "off"), default="auto",
                        help="auto: AUTOTUNE may move the pipeline to processes (the "
                             "default); off: AutotuneOptions(processes=False)")
    parser.add_argument("--json", help="also write the runs here")
    args = parser.parse_args(argv)
    processes = None if args.processes == "auto" else False
    fixed_seconds = args.seconds or (10.0 if processes is None else 5.0)
    autotune_seconds = args.autotune_seconds or (16.0 if processes is None else 12.0)
    settings: list[int | None] = [int(n) for n in args.settings.split(",")] + [None]
    runs: dict[str, list[Run]] = {}
    for round_number in range(args.rounds):
        for parallel in settings:
            seconds = fixed_seconds if parallel is not None else autotune_seconds
            measured = seconds / 2 if parallel is not None else 4.0
            run = run_once(parallel, seconds, measured, args.sleep_ms / 1e3, processes)
            runs.setdefault(run.setting, []).append(run)
            print(f"round {round_number + 1}: {run.setting:>8}: {run.rate:9,.0f} elements/s"
                  f"  ({run.mode})", flush=True)
    rates = {setting: statistics.median(r.rate for r in group)
             for setting, group in runs.items()}
    fixed = {s: v for s, v in rates.items() if s != "AUTOTUNE"}
    best_setting = max(fixed, key=fixed.__getitem__)
    best = fixed[best_setting]
    print(f"\nmap(sleep {args.sleep_ms:g} ms).batch(16).prefetch(AUTOTUNE), processes="
          f"{args.processes}, median of {args.rounds} round(s):")
    print("| setting | elements/s |")
    print("|---|---|")
    for setting, rate in rates.items():
        print(f"| {setting} | {rate:,.0f} |")
    ratio = rates["AUTOTUNE"] / best if best else 0.0
    print(f"\nAUTOTUNE / best fixed ({best_setting}): {ratio:.2f}")
    for number, run in enumerate(runs["AUTOTUNE"], 1):
        at = settled_at(run.per_second, GOAL_RATIO * best)
        reached = "never" if at is None else f"{at:.0f} s"
        change = ("none listed" if run.last_change is None
                  else f"{run.last_change:.2f} s (workers {run.workers})")
        print(f"AUTOTUNE run {number} ({run.mode}): within {GOAL_RATIO:.0%} of the best from "
              f"{reached}; tuner's last change at {change}; per second: "
              + ", ".join(f"{r:,.0f}" for r in run.per_second))
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"rates": rates, "ratio": ratio,
                       "runs": {s: [asdict(r) for r in group] for s, group in runs.items()}},
                      file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
