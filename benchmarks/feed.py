"""The ``feed`` workload's simulated trainer: what a training loop does between two batches.

Each step the trainer takes a batch with ``next()``, then

1. holds the GIL for a fixed amount of pure-Python work: the framework's dispatch (building
   the graph of kernel launches, optimizer bookkeeping). It is a fixed *amount of work*
   (iterations calibrated once, in the harness, to ``gil_ms`` on an idle interpreter), not
   a fixed time: a loader whose threads compete for the GIL slows it down, as they slow a
   real training loop;
2. releases the GIL for a fixed time with ``time.sleep``: the accelerator's compute.

What it measures: throughput (examples/s, from building the pipeline to the last step), and
the fraction of wall time the trainer waited for input (time from building the pipeline to
the first batch, plus the time blocked in every later ``next()``, over the total). The
trainer's limit, if input were free, is ``batch / (gil + sleep)``.

Pure Python and NumPy only: every system's worker imports it in its own environment.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks import common

# Default step times per source workload: (GIL ms, sleep ms). Chosen for the 2-core machine
# the suite runs on (benchmarks/README.md, "feed"): the limit is below what a good loader
# produces alone, but not so far below that any loader reaches it.
DEFAULT_STEP_MS: dict[str, tuple[float, float]] = {"chess": (2.0, 8.0), "images": (8.0, 120.0)}
FEED_SOURCES = ("chess", "images")
BATCH = {"chess": common.CHESS_BATCH, "images": common.IMAGE_BATCH}


def dispatch_work(iterations: int) -> int:
    """Pure-Python work holding the GIL: ``iterations`` rounds of integer arithmetic.

    Example:
        >>> dispatch_work(3)
        33
    """
    acc = 0
    for i in range(iterations):
        acc = (acc * 31 + i) & 0xFFFFF
    return acc


def calibrate(target_ms: float = 2.0, trials: int = 7,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Iterations of :func:`dispatch_work` per millisecond on this interpreter, idle.

    The fastest of ``trials`` timed runs of about ``target_ms`` each (the least disturbed by
    other processes on a shared machine).
    """
    probe = 2000
    start = clock()
    dispatch_work(probe)
    elapsed = max(clock() - start, 1e-9)
    iterations = max(1000, int(probe * target_ms / 1000 / elapsed))
    best = float("inf")
    for _ in range(trials):
        start = clock()
        dispatch_work(iterations)
        best = min(best, clock() - start)
    return iterations / max(best * 1000, 1e-9)


def sample_batch(source: str) -> dict[str, Any]:
    """A batch shaped like ``source``'s (for timing the digest the trainer computes)."""
    import numpy as np

    rng = np.random.default_rng(0)
    if source == "chess":
        d = rng.integers(0, 256, size=(common.CHESS_BATCH, common.CHESS_RECORD_BYTES),
                         dtype=np.uint8)
        return common.chess_transform(d, rng.integers(-3000, 3000, size=common.CHESS_BATCH))
    return {"image": rng.normal(size=(common.IMAGE_BATCH, common.CROP, common.CROP, 3))
            .astype(np.float32)}


def digest_ms(source: str, trials: int = 7,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Milliseconds of :func:`common.batch_digest` on a ``source`` batch (fastest of
    ``trials``): the part of the trainer's per-step work that the correctness check takes."""
    batch = sample_batch(source)
    best = float("inf")
    for _ in range(trials):
        start = clock()
        common.batch_digest(batch)
        best = min(best, clock() - start)
    return best * 1000


def make_step(gil_ms: float, sleep_ms: float, per_ms: float, digest: float = 0.0) -> Step:
    """The step whose Python work is the digest plus busy work for the rest of ``gil_ms``.

    Example:
        >>> make_step(2.0, 8.0, per_ms=1000.0, digest=0.5)
        Step(gil_ms=2.0, sleep_ms=8.0, iterations=1500, digest_ms=0.5)
    """
    return Step(gil_ms, sleep_ms, round(max(0.0, gil_ms - digest) * per_ms), digest)


def epochs_for(count: int, limit: float | None, seconds: float) -> int:
    """Epochs of ``count`` elements that keep a trainer at ``limit``/s busy ``seconds``.

    Example:
        >>> epochs_for(40_000, 51_200, 6), epochs_for(400_000, 51_200, 6), epochs_for(10, None, 6)
        (8, 1, 1)
    """
    if not limit or seconds <= 0 or count <= 0:
        return 1
    return max(1, math.ceil(seconds * limit / count))


def repeat_data(data: dict[str, Any], epochs: int) -> dict[str, Any]:
    """``data`` with its file list repeated ``epochs`` times (one iterator over them all).

    Example:
        >>> repeat_data({"files": ["a", "b"], "count": 2}, 3)
        {'files': ['a', 'b', 'a', 'b', 'a', 'b'], 'count': 6, 'epochs': 3}
    """
    if epochs <= 1:
        return data
    return {**data, "files": list(data["files"]) * epochs, "count": data["count"] * epochs,
            "epochs": epochs}


def parse_step_ms(text: str, option: str) -> dict[str, float]:
    """``"chess=2,images=8"`` (or one number for both) as ``{source: ms}``.

    Example:
        >>> parse_step_ms("chess=2.5", "--feed-gil-ms")
        {'chess': 2.5}
        >>> parse_step_ms("3", "--feed-gil-ms")
        {'chess': 3.0, 'images': 3.0}
    """
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" in part:
            name, value = (s.strip() for s in part.split("=", 1))
            if name not in FEED_SOURCES:
                raise ValueError(f"{option}: unknown workload {name!r}, expected any of "
                                 f"{', '.join(FEED_SOURCES)}")
            names = [name]
        else:
            names, value = list(FEED_SOURCES), part
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"{option}: {value!r} is not a number of milliseconds") from None
        if ms < 0:
            raise ValueError(f"{option}: {ms} ms is negative")
        for name in names:
            out[name] = ms
    return out


@dataclass(frozen=True)
class Step:
    """One trainer step's cost.

    Attributes:
        gil_ms: Python work per step, in milliseconds of an idle interpreter: the batch's
            digest (for the correctness check) plus busy work for the rest.
        sleep_ms: GIL released per step (``time.sleep``), in milliseconds.
        iterations: :func:`dispatch_work` iterations of the busy work.
        digest_ms: What the digest takes of ``gil_ms`` (measured once by the harness).
    """

    gil_ms: float
    sleep_ms: float
    iterations: int
    digest_ms: float = 0.0

    def limit(self, batch: int) -> float | None:
        """Examples/s if input were free: ``batch / (gil + sleep)``.

        Example:
            >>> Step(2.0, 8.0, 0).limit(512)
            51200.0
        """
        total = (self.gil_ms + self.sleep_ms) / 1000
        return batch / total if total > 0 else None

    def run(self) -> None:
        """One step: the dispatch work, then the accelerator's time with the GIL released."""
        if self.iterations:
            dispatch_work(self.iterations)
        if self.sleep_ms > 0:
            time.sleep(self.sleep_ms / 1000)


@dataclass
class FeedResult:
    """What the trainer saw over one run (times in seconds)."""

    elements: int = 0
    batches: int = 0
    digest: float = 0.0
    total_s: float = 0.0
    first_batch_s: float | None = None
    waited_s: float = 0.0  # building the pipeline + first batch + blocked in next()
    steps_s: float = 0.0  # in trainer steps (digest included)
    capped: bool = False
    last: Any = None  # the last batch, for :func:`trainer_alone`

    @property
    def waited(self) -> float | None:
        """Fraction of wall time the trainer waited for input."""
        return self.waited_s / self.total_s if self.total_s > 0 else None

    @property
    def steady_waited(self) -> float | None:
        """The same after the first batch (start-up excluded)."""
        if self.first_batch_s is None:
            return None
        span = self.total_s - self.first_batch_s
        return (self.waited_s - self.first_batch_s) / span if span > 0 else None


def train(make_iterator: Callable[[], Iterator[Any]], step: Step,
          size_of: Callable[[Any], int], digest_of: Callable[[Any], float],
          max_seconds: float | None = None,
          clock: Callable[[], float] = time.perf_counter) -> FeedResult:
    """Consume every batch of ``make_iterator()`` with the simulated trainer.

    The clock starts before ``make_iterator`` (building the pipeline counts as waiting).
    The order-free digest of each batch, for the correctness check, is computed inside the
    step, as part of the trainer's Python work.
    """
    result = FeedResult()
    t0 = clock()
    iterator = make_iterator()
    while True:
        before = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            result.waited_s += clock() - before
            break
        got = clock()
        if result.first_batch_s is None:
            result.first_batch_s = got - t0
            result.waited_s += got - t0
        else:
            result.waited_s += got - before
        result.batches += 1
        result.last = batch
        result.elements += size_of(batch)
        result.digest += digest_of(batch)
        step.run()
        done = clock()
        result.steps_s += done - got
        if max_seconds and done - t0 > max_seconds:
            result.capped = True
            break
    result.total_s = clock() - t0
    return result


def trainer_alone(batch: Any, step: Step, digest_of: Callable[[Any], float],
                  seconds: float = 0.3, min_steps: int = 5,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """Steps per second of the trainer fed one ready batch over and over (input free).

    At least ``min_steps`` steps and ``seconds`` of them. Times the batch size, this is the
    trainer's limit as measured, next to the nominal :meth:`Step.limit`.
    """
    step_s = (step.gil_ms + step.sleep_ms) / 1000
    steps = max(min_steps, int(seconds / step_s) + 1 if step_s > 0 else min_steps)
    start = clock()
    for _ in range(steps):
        digest_of(batch)
        step.run()
    elapsed = clock() - start
    return steps / elapsed if elapsed > 0 else 0.0
