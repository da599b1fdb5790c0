"""The knobs and measurements of a read-ahead stage of threads, as the tuner sees them.

``batch(num_parallel_calls=AUTOTUNE)`` (its stacking tasks) and
``interleave(num_parallel_calls=AUTOTUNE)`` (its reading tasks, one per open dataset at a
time) run on a pool of threads, as a parallel ``map`` does, but call no user function the
executor choice would measure. Each hands the tuner one :class:`ThreadStageKnobs` (a
:class:`~feedline.autotune.stage.TunableStage`): how many of its threads work at once (a
:class:`~feedline.execution.gate.WorkerGate`, and the window of tasks that follows it, if
it has one), its bounds (CPU workers, threads, RAM), its counters and the sizes of what its
tasks hold. The iterator counts into it and follows the setting, like
:class:`~feedline.execution.map_knobs.MapKnobs`'s map.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from feedline.core.interpreter import gil_disabled
from feedline.core.options import Options
from feedline.execution.gate import WorkerGate
from feedline.execution.map_knobs import (
    SIZE_EVERY,
    THREAD_BYTES,
    CallMeasurement,
    StageKnobs,
    TuningCounters,
    _mean_bytes,
)

OVERSUBSCRIPTION = 2
"""Threads per CPU a tuned threaded ``map`` whose calls compute may grow to when
``Options.autotune.cpu_budget`` and ``ThreadingOptions.max_parallelism`` are unset: its
function may hold the GIL part of the time, leaving its cores idle meanwhile. The tuner
keeps a thread only when the stage measures faster with it (images on 2 cores: 3-4 threads
beat 2). Calls that wait may have more (:data:`MAX_THREADS`)."""

MAX_THREADS = 256
"""Most threads a tuned threaded ``map`` may have, whatever its calls wait for (unless
``ThreadingOptions.max_parallelism`` sets another bound): the tuner gives calls that wait
(files, the network, a sleep) threads past the CPU count while the stage measures faster
with them (:mod:`feedline.autotune.tuner`), and each thread costs its stack and a share of
the GIL's hand-offs (a 4 ms sleep on 2 cores: 64 threads ran 58x faster than one)."""


def thread_bounds(options: Options, parallelism: int, useful: int | None = None,
                  waits: bool = False) -> tuple[int, int]:
    """``(cpu_workers, max_workers)`` of a tuned stage of threads starting at
    ``parallelism``, by the rule of a tuned ``map``.

    Tasks that compute get up to ``parallelism`` workers, or
    :data:`OVERSUBSCRIPTION` times that with no CPU budget or
    thread limit set (tasks holding the GIL part of the time leave cores idle). Tasks that
    may wait (``waits``: reading files) may have threads up to
    ``ThreadingOptions.max_parallelism`` or :data:`MAX_THREADS`.
    Both stay within ``useful``: the most tasks the stage can ever run at once.

    Example:
        >>> import feedline as fl
        >>> options = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2))
        >>> thread_bounds(options, 2, useful=8, waits=True)
        (2, 8)
        >>> thread_bounds(options, 2)
        (2, 2)
    """
    thread_limit = options.threading.max_parallelism
    cpu_workers = parallelism
    if options.autotune.cpu_budget is None and thread_limit is None and not gil_disabled():
        # Threads past the cores fill those a held GIL leaves idle; with no GIL, one a core
        # keeps every core busy.
        cpu_workers = OVERSUBSCRIPTION * parallelism
    threads = max(cpu_workers, thread_limit or MAX_THREADS) if waits else cpu_workers
    if useful is not None:
        threads = min(threads, max(1, useful))
    return min(cpu_workers, threads), max(threads, 1)


class ThreadStageKnobs(StageKnobs):
    """What the tuner sets and reads of one read-ahead stage of threads (see the module doc).

    Args:
        name: The stage's name.
        parallelism: Its workers at start (its ``AUTOTUNE`` parallelism).
        max_workers: The most threads it may have (its pool's size).
        cpu_workers: The most workers its CPU budget gives tasks that compute.
        ram_budget: Bytes its tasks and threads may hold.
        tasks_per_worker: Tasks its window holds per worker (its limit follows the setting;
            ``0``: no window follows it).

    Example:
        >>> knobs = ThreadStageKnobs("batch", parallelism=2, max_workers=4, cpu_workers=4,
        ...                          ram_budget=1 << 20, tasks_per_worker=1)
        >>> knobs.tuned_workers = 9  # at most its threads
        >>> knobs.tuned_workers, knobs.gate.limit
        (4, 4)
        >>> knobs.run_task(sum, [1, 2, 3]), knobs.tuning_counters()[0], knobs.tasks
        (6, 0, 1)
    """

    def __init__(self, name: str, parallelism: int, max_workers: int, cpu_workers: int,
                 ram_budget: int, tasks_per_worker: int = 0) -> None:
        self.name = name
        self._max_workers = max(1, max_workers)
        self._parallelism = max(1, min(parallelism, self._max_workers))
        self._cpu_workers = max(1, min(cpu_workers, self._max_workers))
        self._ram_budget = ram_budget
        self._tasks_per_worker = tasks_per_worker
        self.window: Any = None
        """The stage's window of tasks (a :class:`~feedline.execution.read_ahead.ReadAhead`)
        whose limit is ``tasks_per_worker`` times the setting, or ``None``."""
        self.gate = WorkerGate(self._parallelism)
        """Threads allowed to work at once."""
        self._counters = TuningCounters()
        self._elements_before = 0  # counted by the stage's earlier iterators (epochs)
        self.held_per_task: float | None = None
        """Sampled values one task holds (a batch: its input elements and the stacked
        batch, 2); ``None``: the elements handed out per task so far (an interleave's read:
        the elements it reads), at least one."""
        self.tasks = 0
        """Tasks run through :meth:`run_task`."""
        self.done = False
        """Set by the stage when closed (the tuner forgets it)."""
        self._sampled: float | None = None
        self._lock = threading.Lock()  # tasks on several threads add to the counters

    @property
    def counters(self) -> TuningCounters:
        """What the stage counts (shared with its earlier iterators once registered)."""
        return self._counters

    @counters.setter
    def counters(self, counters: TuningCounters) -> None:
        # Shared with the stage's earlier iterators: their elements are not this one's
        # tasks' (bytes_per_worker divides this iterator's elements by its tasks).
        self._counters = counters
        self._elements_before = counters.elements

    # ------------------------------------------------------------------ the setting
    @property
    def tuned_workers(self) -> int:
        """Threads allowed to work at once (the tuner sets it; at most :attr:`max_workers`)."""
        return self.gate.limit or self._parallelism

    @tuned_workers.setter
    def tuned_workers(self, value: int) -> None:
        workers = max(1, min(int(value), self._max_workers))
        self.gate.limit = workers
        if self.window is not None and self._tasks_per_worker:
            self.window.limit = self._tasks_per_worker * workers

    # ------------------------------------------------------------------ bounds
    @property
    def max_workers(self) -> int:
        """Its threads (the most tasks it can run at once usefully)."""
        return self._max_workers

    @property
    def bytes_per_worker(self) -> float:
        """Bytes one more worker holds: its tasks (``held_per_task`` values each, at their
        sampled size; at least one, a reading task's) and its thread (:data:`THREAD_BYTES`)."""
        tasks = max(1, self._tasks_per_worker)
        held = self.held_per_task
        if held is None:
            held = max(1.0, (self.counters.elements - self._elements_before)
                       / max(1, self.tasks))
        return tasks * held * (self._sampled or 0.0) + THREAD_BYTES

    # ------------------------------------------------------------------ measurements
    def sample(self, value: Any, count: int) -> None:
        """``value`` is the ``count``-th a task held: the first and one in
        :data:`SIZE_EVERY` are sized (a moving mean)."""
        if self._sampled is None or count % SIZE_EVERY == 0:
            self._sampled = _mean_bytes(self._sampled, value)

    def run_task(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        """Run one task on the calling worker, counting its wall and thread CPU time."""
        cpu = time.thread_time()
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            seconds = time.perf_counter() - started
            cpu = time.thread_time() - cpu
            with self._lock:
                counters = self.counters
                counters.busy += seconds
                counters.cpu += cpu
                self.tasks += 1

    @property
    def tuning_paused(self) -> bool:
        """Never: it measures nothing of its own."""
        return False

    @property
    def measured_calls(self) -> CallMeasurement | None:
        """``None``: no executor choice measures its tasks."""
        return None


class TimedExecutor:
    """An executor whose calls count their time into ``knobs`` (:meth:`ThreadStageKnobs.
    run_task`): what the strands of a shared pool submit are the stage's tasks.

    Example:
        >>> from feedline.execution.executor import ThreadExecutor
        >>> knobs = ThreadStageKnobs("doc", 1, 1, 1, 1 << 20)
        >>> pool = ThreadExecutor(1, "doc")
        >>> TimedExecutor(pool, knobs).submit(pow, 2, 5).result(), knobs.tasks
        (32, 1)
        >>> pool.shutdown()
    """

    def __init__(self, executor: Any, knobs: ThreadStageKnobs) -> None:
        self._executor = executor
        self._knobs = knobs

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        return self._executor.submit(self._knobs.run_task, fn, *args)

    def threads(self) -> list[threading.Thread]:
        return self._executor.threads()

    def shutdown(self) -> None:
        self._executor.shutdown()
