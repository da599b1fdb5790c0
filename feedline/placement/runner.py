"""Where a parallel ``map``'s calls run: inline, on threads or in worker processes.

A :class:`MapRunner` is the one place that makes this choice for a map stage, and it may
change it while the stage runs:

* **threads** (the default), a pool of ``parallelism`` threads, or more for a tuned stage
  whose calls wait (the tuner's gate lets as many work at once as it sets);
* **processes** (``executor="process"``, or ``AUTOTUNE`` from the measurement of its first
  tasks, :mod:`feedline.placement.map_executor`): while its worker processes start, the
  consumer maps elements inline rather than wait;
* **inline**, on the consumer's thread: a tuned stage whose calls the measurement finds held
  by the GIL (:func:`~feedline.placement.policy.runs_inline`) once the tuner has it at one
  worker, and back on threads when it sets more.

The stage (:class:`~feedline.transforms.map.ParallelMapIterator`, its runner made by
:func:`map_runner` from the stage's arguments and options) asks :meth:`MapRunner.
inline_now` before each element and otherwise runs chunks of elements, sized here
(:class:`ChunkSizer`), as tasks of its :class:`~feedline.execution.window.PositionedWindow`.
Where calls run changes no element, order, error or position.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

from feedline.core.constants import AUTOTUNE
from feedline.core.iterator import IteratorContext
from feedline.core.validation import resolve_parallelism
from feedline.execution.executor import Executor, make_executor
from feedline.execution.map_knobs import CallMeasurement, MapKnobs, MeasuredDecision
from feedline.execution.map_runner import MAX_FILL_SECONDS
from feedline.execution.stage_knobs import MAX_THREADS, OVERSUBSCRIPTION, thread_bounds
from feedline.execution.window import PositionedWindow
from feedline.placement import process_executor  # noqa: F401 - registers kind "process"
from feedline.placement.chunks import ChunkRunner, unpack_outcomes
from feedline.placement.map_executor import ExecutorChoice, Probe
from feedline.placement.policy import (
    PROCESS_TARGET_TASK_SECONDS,
    ExecutorDecision,
    holds_the_gil,
    runs_inline,
    thread_task_seconds,
)

TARGET_TASK_SECONDS = {"thread": 0.0005, "process": PROCESS_TARGET_TASK_SECONDS}
"""How long one task should run: long enough that hand-off costs are small beside it (on
processes, the executor choice's estimate of their rate assumes this target)."""

MAX_CHUNK = 64
"""Most elements of one task on threads (a task's elements wait for its last one)."""

MAX_PROCESS_CHUNK = 1024
"""Most elements of one task on processes: each task pays a send, a receive and a wake-up
of the collector, which chunks of :data:`MAX_CHUNK` left large beside calls of a few
microseconds (the identity on 2 processes: 29,000 elements/s with 64 a task, 46,000 with
1024); the chunk stays within :data:`TARGET_TASK_SECONDS` of work."""


class ChunkSizer:
    """How many elements the next task takes: about :data:`TARGET_TASK_SECONDS` of calls
    (on threads of a free-threaded interpreter at least :data:`~feedline.placement.policy.
    FREE_THREADED_TASK_SECONDS`), within :data:`MAX_CHUNK` (threads) or
    :data:`MAX_PROCESS_CHUNK` (processes), and, on processes, only what a slow input gives
    within :data:`MAX_FILL_SECONDS`.

    Example:
        >>> sizer = ChunkSizer(MapKnobs("map(f)", 1, 1, 1, 0))
        >>> sizer.measured(1, 0.0001, "thread"); sizer.chunk_size
        5
    """

    def __init__(self, knobs: MapKnobs) -> None:
        self._knobs = knobs
        self.chunk_size = 1
        self._seconds_per_element: float | None = None
        # Seconds pulling one input element takes (a moving mean over chunks).
        self._pull_seconds: float | None = None

    def measured(self, elements: int, seconds: float, kind: str) -> None:
        """A task of ``elements`` took ``seconds`` on ``kind``: the next ones' size."""
        per_element = seconds / elements
        previous = self._seconds_per_element
        self._seconds_per_element = per_element if previous is None else \
            0.8 * previous + 0.2 * per_element
        self.resize(kind)

    def resize(self, kind: str) -> None:
        """The chunk size for tasks on ``kind`` from the calls' measured time."""
        if self._seconds_per_element is None:
            return
        if kind == "process":
            most, target = MAX_PROCESS_CHUNK, TARGET_TASK_SECONDS[kind]
        else:
            most, target = MAX_CHUNK, thread_task_seconds(TARGET_TASK_SECONDS[kind])
        self.chunk_size = self._knobs.chunk_size = max(1, min(most, int(
            target / max(self._seconds_per_element, 1e-9))))

    def next_size(self, bounded: bool) -> int:
        """The next chunk's size; ``bounded`` (processes): shrunk for a slow input. On
        threads a pull also waits for the GIL the workers hold, which would read as a slow
        input and cut every chunk short."""
        size = self.chunk_size
        if size > 1 and bounded and self._pull_seconds is not None:
            size = max(1, min(size, int(MAX_FILL_SECONDS / max(self._pull_seconds, 1e-9))))
        return size

    def pulled(self, elements: int, seconds: float) -> None:
        """A whole chunk of ``elements`` took ``seconds`` to pull (processes only)."""
        per_element = seconds / elements
        self._pull_seconds = per_element if self._pull_seconds is None else \
            0.8 * self._pull_seconds + 0.2 * per_element


class MapRunner:
    """Where one map stage's calls run, switchable while it runs (see the module doc).

    Args:
        ctx: The pipeline's context (its tuner, its remembered choices, its kept pools).
        fn: The map function.
        name: The stage's name.
        parallelism: Its workers.
        kind: ``"thread"`` or ``"process"`` (where its tasks run unless chosen).
        choose: Choose threads or processes from measurement (``AUTOTUNE``, no executor).
        tune: The pipeline's tuner sets its threads.
        stage_key: The stage across its iterators (its dataset node): what one iterator
            learned (the choice, the setting, its worker processes) carries on.
        max_parallelism, cpu_workers: The most threads a tuned stage may grow to, and the
            workers its CPU budget gives calls that compute.
        allow_processes: Whether the choice may move it to processes.
    """

    def __init__(self, ctx: IteratorContext, fn: Callable[..., Any], name: str,
                 parallelism: int, kind: str, *, choose: bool = False, tune: bool = False,
                 stage_key: object = None, max_parallelism: int | None = None,
                 cpu_workers: int | None = None, allow_processes: bool = True) -> None:
        self._ctx, self._fn, self._name = ctx, fn, name
        self._parallelism = parallelism
        self._key = stage_key if stage_key is not None else name
        self._pool_key = stage_key  # its kept worker processes, by its dataset node
        # Threads: more than ``parallelism`` when the tuner may grow the stage past it.
        self._ceiling = max(parallelism, max_parallelism or parallelism)
        self.knobs = MapKnobs(name, parallelism, self._ceiling,
                              min(self._ceiling, max(parallelism, cpu_workers or parallelism)),
                              ctx.options.autotune_ram_budget() if tune else 0)
        self.gate = self.knobs.gate
        self.counters = self.knobs.counters
        self.busy_seconds = 0.0
        self.choice: ExecutorChoice | None = None
        decided = self._remembered_choice(allow_processes) if choose else None
        if decided is not None:
            kind = decided.kind
        self.knobs.choice, self.knobs.decided = self.choice, decided
        self.knobs.done = kind == "process"
        self.kind = kind
        # Calls on the consumer's thread (GIL-held calls at one worker), and whether the
        # measurement found them so (tuned stages only).
        self.inline = self._serial = False
        # Worker processes starting (an empty call each) while the consumer maps elements;
        # ``None``: not started, ``[]``: started. Only where AUTOTUNE chose processes (its
        # first calls ran here already; ``executor="process"``'s function may not).
        self._warming: list[Any] | None = None if (
            decided is not None or self.choice is not None) else []
        self._runner = ChunkRunner(fn, kind == "process")
        if self.choice is not None:
            # Measuring runners: alone (with the transport cost), then together.
            self._solo_runner: ChunkRunner = ChunkRunner(fn, False, probe=True, transport=True)
            self._probe_runner: ChunkRunner = ChunkRunner(fn, False, probe=True)
        self.sizer = ChunkSizer(self.knobs)
        self.tuner = ctx.autotuner() if tune else None
        if self.tuner is not None:
            self.counters = self.knobs.counters = self.tuner.register(self.knobs, self._key)
            if (measured := self.knobs.measured_calls) is not None:
                self._serial = self._inline_pays(measured)  # measured by an earlier epoch

    def _remembered_choice(self, allow_processes: bool) -> ExecutorDecision | None:
        """The stage's executor choice, one per pipeline run, kept across its iterators (a
        short epoch would otherwise measure anew and never decide): its decision if made,
        else measuring on (:attr:`choice`)."""
        remembered = self._ctx.remembered
        key = ("executor choice", self._key)
        choice = remembered.get(key)
        if choice is None:
            choice = remembered[key] = ExecutorChoice(
                self._name, self._parallelism, self._fn,
                self._ctx.options.threading.close_timeout, threads=self._ceiling,
                allow_processes=allow_processes)
        else:
            choice.carry_on()
        if choice.decision is not None:
            return choice.decision
        self.choice = choice
        return None

    # ------------------------------------------------------------------ executors
    def make_executor(self) -> Executor:
        """The executor of the stage's window (made by its first task)."""
        close_timeout = self._ctx.options.threading.close_timeout
        if self.choice is not None:
            return self.choice.make_executor(self.gate)
        if self.kind == "process":
            kept = kept_pool(self._ctx, self._pool_key, self._parallelism)
            if kept is not None:
                return kept
            return make_executor(self._parallelism, self._name, "process", close_timeout)
        return make_executor(self._ceiling, self._name, "thread", close_timeout, self.gate)

    def release(self, window: PositionedWindow) -> None:
        """Close the stage's window; keep its worker processes for its next iterator (the
        next epoch of a repeat: the pipeline's close ends them, ``ctx.close_kept``)."""
        self.knobs.done = True  # closed: the tuner forgets it
        if self._warming and not all(future.done() for future in self._warming):
            # Closed while its workers start: ending them mid-start is expected, not a
            # call that failed to stop (the executor warns of those).
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=RuntimeWarning,
                                        message=r"feedline: .* did not stop within")
                window.shutdown()
            return
        ctx = self._ctx
        if self.kind != "process" or self._pool_key is None or ctx.closing:
            window.shutdown()
            return
        # Calls of this iterator still running there finish unread.
        executor = window.shutdown(keep_executor=True)
        keep_processes = getattr(executor, "keep_processes", None)
        if keep_processes is not None:  # AUTOTUNE's: threads, then processes
            executor = keep_processes()
        if getattr(executor, "reusable", False):
            ctx.keep(self._pool_key, executor)
        elif executor is not None:
            executor.shutdown()

    # ------------------------------------------------------------------ inline or tasks
    def inline_now(self, window: PositionedWindow, holding: bool) -> bool:
        """Whether the next element is mapped on the consumer's thread rather than taken
        from ``window`` (``holding``: results computed and not handed out yet). Follows the
        tuner's setting and the worker processes' start, between elements."""
        if not (window.direct or self._serial or self._warming != []):
            return False  # on its workers for good: the common case, first
        idle = not holding and not len(window)
        if window.direct:
            if self.inline:
                if self.gate.limit == 1:
                    return True
                self._follow_setting(window)  # the tuner set more workers: the window
            elif self._workers_starting(window):
                return True
        if self._serial:
            self._follow_setting(window)
            if self.inline and idle:
                return True
        return self._warming != [] and self.kind == "process" \
            and self._workers_starting(window) and idle

    @property
    def warming(self) -> bool:
        """Worker processes are starting: the consumer maps elements inline meanwhile."""
        return bool(self._warming)

    def _workers_starting(self, window: PositionedWindow) -> bool:
        """Whether its worker processes are still starting: starts them on the first call.
        A worker takes seconds to start on a loaded machine (its interpreter, imports, the
        function), during which the consumer maps the elements inline."""
        warming = self._warming
        if warming is None:
            executor = window._executor_or_start()
            self._warming = warming = [executor.submit(self._runner, [])
                                       for _ in range(self._parallelism)]
        if warming and all(future.done() for future in warming):
            self._warming = warming = []
            window.leave_direct()
        return bool(warming)

    def _follow_setting(self, window: PositionedWindow) -> None:
        """Inline at one worker for calls that hold the GIL, back on threads when the tuner
        sets more (on the consumer's thread, between elements)."""
        wanted = self.gate.limit == 1
        if wanted == self.inline:
            return
        if not wanted:
            window.leave_direct()
        self.inline = wanted
        counters = self.counters
        if counters.inline == wanted:
            return  # the stage's earlier iterator (epoch) recorded it
        counters.inline = wanted
        if self.tuner is not None:
            self.tuner.record(
                self._name, "inline", int(not wanted), int(wanted),
                "its calls hold the GIL and it runs one worker: a worker thread would only "
                "add a hand-off per element, so they run on its consumer's thread" if wanted
                else "the tuner set it more workers: back on its threads",
                self.knobs.inline_figures())

    def _inline_pays(self, measured: CallMeasurement) -> bool:
        return runs_inline(self.knobs.executor_decision, holds_the_gil(measured))

    def called_inline(self, seconds: float) -> None:
        """A call on the consumer's thread took ``seconds`` (all on a CPU: GIL-held calls)."""
        counters = self.counters
        counters.busy += seconds
        counters.cpu += seconds
        self.busy_seconds += seconds
        if self._warming:
            self.sizer.measured(1, seconds, self.kind)

    # ------------------------------------------------------------------ tasks
    def may_submit(self, tasks_in_window: int) -> bool:
        """Whether a task may start now (measuring: one alone, then whole windows)."""
        return self.choice is None or self.choice.may_submit(tasks_in_window)

    def submit(self, window: PositionedWindow, items: list[int], values: list[Any]) -> None:
        """Run the chunk ``values`` (input ``items``) as a task of ``window``."""
        if self.tuner is not None:
            self.knobs.sample_input(values[0])
        choice = self.choice
        if choice is None or not choice.measuring:
            window.submit(items, self._runner, values)
            return
        runner = self._solo_runner if choice.solo_phase() else self._probe_runner
        choice.submitted()
        window.submit(items, runner, values, time.perf_counter())

    def finished(self, items: list[int], result: tuple[Any, float, float, Probe | None]
                 ) -> list[tuple[bool, Any]]:
        """The outcomes of the task of input ``items`` that gave ``result`` (what its
        :class:`~feedline.placement.chunks.ChunkRunner` returned), its measurement taken."""
        packed, seconds, cpu, probe = result
        outcomes = unpack_outcomes(packed)
        first = outcomes[0] if outcomes else None
        self.busy_seconds += seconds
        counters = self.counters
        counters.busy += seconds
        counters.cpu += cpu
        if self.tuner is not None and first is not None and first[0]:
            self.knobs.sample_output(first[1])
        choice = self.choice
        if choice is not None and choice.measuring:
            if choice.record(probe) == "process":
                self._switch_to_processes()
            elif choice.decision is not None and self.tuner is not None:
                measured = self.knobs.measured_calls
                self._serial = measured is not None and self._inline_pays(measured)
                self.tuner.wake()  # it starts the stage from the measurement
        self.sizer.measured(len(items), seconds, self.kind)
        return outcomes

    def _switch_to_processes(self) -> None:
        # The choice has switched the executor; tasks submitted from now on run there.
        self.kind = "process"
        self.knobs.done = True  # the tuner sets threads only
        self._runner = ChunkRunner(self._fn, True)
        self.sizer.resize("process")

    def restored(self) -> None:
        """The stage dropped its tasks in flight: a measurement in progress starts over."""
        if self.choice is not None:
            self.choice.reset()

    @property
    def decision(self) -> MeasuredDecision | None:
        """The automatic choice and its measurement (``None``: measuring, or not chosen)."""
        return self.knobs.executor_decision


def map_runner(ctx: IteratorContext, fn: Callable[..., Any], name: str,
              num_parallel_calls: int, executor: str | None,
              stage_key: object = None) -> MapRunner:
    """The runner of a ``map(fn, num_parallel_calls, executor=executor)`` stage:
    ``AUTOTUNE`` with no executor measures its calls and may choose processes (with
    ``AutotuneOptions.choose_executor``); ``AUTOTUNE`` on threads is tuned.

    Example:
        >>> map_runner(IteratorContext(), abs, "map(abs)", 2, "process").kind
        'process'
    """
    autotune = ctx.options.autotune
    auto = num_parallel_calls == AUTOTUNE and autotune.enabled
    tune = auto and autotune.tune and executor != "process"
    # Measured whenever tuned (where the tuner starts it), moved to processes only with
    # choose_executor.
    choose = auto and executor is None and (autotune.choose_executor or tune)
    parallelism = resolve_parallelism(num_parallel_calls, ctx)
    cpu_workers = threads = parallelism
    if tune:
        # No budget set: the tuner may try threads beyond the cores for calls that
        # compute (kept only where they measure faster); calls that wait (files, the
        # network, a sleep) use no CPU meanwhile and may have threads past the budget,
        # within the RAM budget (``thread_bounds``: the rule every tuned stage shares).
        cpu_workers, threads = thread_bounds(ctx.options, parallelism, waits=True)
    return MapRunner(ctx, fn, name, parallelism, executor or "thread", choose=choose,
                     tune=tune, stage_key=stage_key, max_parallelism=threads,
                     cpu_workers=cpu_workers, allow_processes=autotune.choose_executor)


def kept_pool(ctx: IteratorContext, node: object, workers: int) -> Any:
    """The worker processes an earlier iterator of the map ``node`` kept
    (:meth:`MapRunner.release`), if they are ``workers`` and still usable; else ``None``
    (anything kept for it is shut down).

    Example:
        >>> kept_pool(IteratorContext(), None, 2) is None
        True
    """
    if node is None:
        return None
    kept = ctx.kept.pop(node, None)
    if kept is None:
        return None
    if getattr(kept, "reusable", False) and getattr(kept, "workers", None) == workers:
        return kept
    kept.shutdown()
    return None


__all__ = ["MAX_CHUNK", "MAX_FILL_SECONDS", "MAX_PROCESS_CHUNK", "MAX_THREADS",
           "OVERSUBSCRIPTION", "TARGET_TASK_SECONDS", "ChunkSizer", "MapRunner", "kept_pool",
           "map_runner"]
