"""Kill trials: outside kills of a feeder or of worker processes never end a run (issue 41.3).

Each trial runs ``range(N).map(f).batch(B)`` in one feeder process (``multiprocess(1)``) or
two workers (``multiprocess(2)``), and a killer thread sends ``SIGKILL`` to a random worker
one to three times (at most ``MAX_RESTARTS``: more in a row is the documented end) at random
moments, the second kill often while the restarted worker re-computes the element its
predecessor died on. A trial passes when every batch arrives exactly once and in order, and
the only errors are the deaths themselves (never a fatal "poison element" verdict).

Run: ``python -m benchmarks.kill_trials --trials 500`` (about a second a trial).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import threading
import time
from collections import Counter

import numpy as np

import feedline as fl
from feedline.core.error_records import is_fatal


def slow_square(x):
    """A map call of about a millisecond, so that kills land inside calls."""
    time.sleep(0.001)
    return x * x


def trial(seed: int, workers: int, elements: int = 240, batch: int = 8) -> str:
    """One trial; returns its outcome: ``"ok"``, ``"fatal: ..."`` or ``"wrong: ..."``."""
    rng = random.Random(seed)
    ds = fl.Dataset.range(elements).map(slow_square).batch(batch).multiprocess(workers)
    expected = [list(range(i, min(i + batch, elements))) for i in range(0, elements, batch)]
    expected = [[x * x for x in b] for b in expected]
    kills = rng.randint(1, 3)
    got: list[list[int]] = []
    stop = threading.Event()
    with iter(ds) as it:
        first = next(it)
        got.append(np.asarray(first).tolist())
        stage = _multiprocess_stage(it)

        def killer() -> None:
            for _ in range(kills):
                if stop.wait(rng.uniform(0.02, 0.25)):
                    return
                pids = [p for p in stage.worker_pids if p is not None]
                if pids:
                    try:
                        os.kill(rng.choice(pids), signal.SIGKILL)
                    except ProcessLookupError:
                        pass

        thread = threading.Thread(target=killer, name="feedline-bench-killer", daemon=True)
        thread.start()
        outcome = "ok"
        try:
            while True:
                try:
                    got.append(np.asarray(next(it)).tolist())
                except StopIteration:
                    break
                except fl.WorkerProcessError as error:
                    if is_fatal(error):
                        outcome = "fatal: " + str(error).splitlines()[0] + " | " + \
                            " ".join(getattr(error, "__notes__", []))[:300]
                        break
        finally:
            stop.set()
            thread.join(10)
    if outcome == "ok" and got != expected:
        outcome = f"wrong: {len(got)} of {len(expected)} batches, order or values differ"
    return outcome


def _multiprocess_stage(it):
    from feedline.placement.multiprocess import MultiprocessIterator

    stack = [getattr(it, "_root", it)]
    while stack:
        node = stack.pop()
        if isinstance(node, MultiprocessIterator):
            return node
        stack.extend(getattr(node, "_inputs", []))
    raise RuntimeError("no multiprocess stage")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    outcomes: Counter[str] = Counter()
    started = time.monotonic()
    for index in range(args.trials):
        workers = 1 if index % 2 == 0 else 2
        outcome = trial(args.seed + index, workers)
        outcomes["ok" if outcome == "ok" else outcome.split(":")[0]] += 1
        if outcome != "ok":
            print(f"trial {index} ({workers} worker(s)): {outcome}", flush=True)
    print(f"{args.trials} trials in {time.monotonic() - started:.0f} s: {dict(outcomes)}")


if __name__ == "__main__":
    main()
