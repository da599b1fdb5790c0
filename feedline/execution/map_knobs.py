"""The knobs and measurements of a parallel ``map``, as the tuner sees them.

A tuned map (``num_parallel_calls=AUTOTUNE``) hands the tuner one :class:`MapKnobs`
(a :class:`~feedline.autotune.stage.TunableStage`), not itself: its setting (threads working at
once, through a :class:`~feedline.execution.gate.WorkerGate`, and the window of tasks that
follows it), its bounds (CPU workers, threads, RAM), its counters, the sizes of its elements
in flight and the measurement of its calls (the executor choice's, see
:mod:`feedline.placement.map_executor`). The iterator only counts into it and follows the
setting; what the tuner may change and read is all here.

The knobs are the stage's own, so they live at the stage's layer: the tuner above turns the
setters, and placement above hands in its executor choice, which the knobs read through
:class:`MeasuringChoice` and :class:`MeasuredDecision` rather than by importing placement.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from feedline.core.structure import element_bytes
from feedline.execution.gate import WorkerGate

THREAD_BYTES = 64 << 10
"""Memory counted per thread of a tuned map against ``Options.autotune.ram_budget``
(its stack's touched pages and the interpreter's thread state, rounded up)."""

SIZE_EVERY = 16
"""Sizes of a parallel map's elements are taken from one task in this many (the first
always): what its elements in flight hold, for the RAM budget of its threads."""


@dataclass(frozen=True)
class CallMeasurement:
    """How a stage's calls ran on threads, as its executor choice measured them.

    Attributes:
        gil_share: About 1 when the GIL serializes the calls, about 0 when they release it.
        busy_together: Share of their time the calls running together spent on a CPU.
        concurrency: Calls that could run at once, on average, while measured.
        busy_alone: Share of its time a call running alone spent on a CPU.
        rate: Elements per second while the calls ran together.
        seconds_per_call: Wall time of one element's call, alone (``None``: not measured).
        idle_cpus: CPUs the machine left idle while the calls ran together (``None``: not
            measured).
    """

    gil_share: float
    busy_together: float
    concurrency: float
    busy_alone: float = 1.0
    rate: float = 0.0
    seconds_per_call: float | None = None
    idle_cpus: float | None = None


class TuningCounters:
    """What a stage counts for the tuner, shared by its iterators (each epoch of a
    ``repeat`` builds one) so that the tuner sees one stage whatever the epochs' length.

    Attributes:
        elements: Elements handed out.
        calls: ``next()`` calls.
        waits: Calls that had to wait for a result.
        busy: Seconds the stage's tasks took, summed over its workers (their occupied time:
            computing, reading files, waiting for the GIL).
        input: Seconds the stage spent pulling elements from its input (on its consumer's
            thread).
        cpu: CPU seconds of its tasks' threads while they ran (``cpu / busy``: the share
            of its calls' time on a CPU; small for calls that wait).
        inline: Whether the stage calls its function on its consumer's thread (a ``map``
            of calls that hold the GIL, at one worker): its calls then never wait for a
            worker, and are judged on its rate alone (they are not timed).
    """

    __slots__ = ("busy", "calls", "cpu", "elements", "inline", "input", "waits")

    def __init__(self) -> None:
        self.elements = self.calls = self.waits = 0
        self.busy = self.input = self.cpu = 0.0
        self.inline = False


class MeasuredDecision(Protocol):
    """What the knobs read of where a map's calls run and why
    (:class:`feedline.placement.policy.ExecutorDecision`)."""

    @property
    def kind(self) -> str: ...
    @property
    def gil_share(self) -> float | None: ...
    @property
    def busy_alone(self) -> float | None: ...
    @property
    def busy_together(self) -> float | None: ...
    @property
    def concurrency(self) -> float | None: ...
    @property
    def seconds_per_element(self) -> float | None: ...
    @property
    def thread_rate(self) -> float | None: ...
    @property
    def idle_cpus(self) -> float | None: ...


class MeasuringChoice(Protocol):
    """What the knobs read of a map's executor choice while it measures and decides
    (:class:`feedline.placement.map_executor.ExecutorChoice`)."""

    @property
    def measuring(self) -> bool: ...
    @property
    def decision(self) -> MeasuredDecision | None: ...


class StageKnobs:
    """What every tuned stage's knobs share: its budgets and its counters, as the tuner
    reads them (``_parallelism``, ``_cpu_workers``, ``_ram_budget``, ``counters`` and
    ``done`` are set by the subclass)."""

    _parallelism: int
    _cpu_workers: int
    _ram_budget: int
    counters: TuningCounters
    done: bool

    @property
    def cpu_workers(self) -> int:
        """Workers its CPU budget gives calls that compute."""
        return self._cpu_workers

    @property
    def cores(self) -> int:
        """CPUs its budget gives it (its ``AUTOTUNE`` parallelism): what the CPU time of
        its tasks, waiting or not, should add up to at most."""
        return self._parallelism

    @property
    def ram_budget(self) -> int:
        """Bytes its elements in flight and its threads may hold."""
        return self._ram_budget

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        """(elements handed out, ``next()`` calls, calls that waited for a task, seconds its
        tasks took, seconds spent pulling its input, CPU seconds of its tasks)."""
        counters = self.counters
        return (counters.elements, counters.calls, counters.waits, counters.busy,
                counters.input, counters.cpu)

    @property
    def tuning_done(self) -> bool:
        """Closed (or, a map, moved to processes: the tuner sets threads only)."""
        return self.done


class MapKnobs(StageKnobs):
    """What the tuner sets and reads of one parallel map (see the module doc).

    Args:
        name: The stage's name.
        parallelism: Its workers at start (its ``AUTOTUNE`` parallelism: the CPU budget).
        ceiling: The most threads it may have (more than ``parallelism`` when the tuner may
            grow it past the cores, for calls that wait).
        cpu_workers: The most workers its CPU budget gives calls that compute.
        ram_budget: Bytes its elements in flight and its threads may hold.

    Example:
        >>> knobs = MapKnobs("map(f)", parallelism=2, ceiling=8, cpu_workers=4,
        ...                  ram_budget=1 << 20)
        >>> knobs.tuned_workers = 20  # at most its threads
        >>> knobs.tuned_workers, knobs.gate.limit
        (8, 8)
    """

    def __init__(self, name: str, parallelism: int, ceiling: int, cpu_workers: int,
                 ram_budget: int) -> None:
        self.name = name
        self._parallelism = parallelism
        self._ceiling = ceiling
        self._cpu_workers = cpu_workers
        self._ram_budget = ram_budget
        self.window: Any = None
        """The stage's window of tasks (a :class:`~feedline.execution.read_ahead.ReadAhead`),
        whose limit follows the setting: two tasks per worker. Not the stage itself: the
        knobs would keep it alive in a cycle."""
        self.gate = WorkerGate(parallelism if ceiling > parallelism else None)
        """Threads allowed to work at once (no limit: all of them)."""
        self.counters = TuningCounters()
        """What the stage counts (shared with its earlier iterators once registered)."""
        self.chunk_size = 1
        """Elements per task now (the stage sets it)."""
        self.done = False
        """Set by the stage when closed or moved to processes (the tuner sets threads)."""
        self.choice: MeasuringChoice | None = None
        """The stage's executor choice while it measures and decides (it measures the calls
        whose figures :attr:`measured_calls` gives)."""
        self.decided: MeasuredDecision | None = None
        """The choice an earlier iterator of the stage made (this pipeline run's)."""
        self._input_bytes: float | None = None
        self._output_bytes: float | None = None
        self._tasks = self._results = 0
        self.on_setting: Any = None
        """A weak reference to what the stage calls when the tuner sets it (or ``None``):
        an inline stage on its plain path goes back to its window."""
        self.counting_from: Any = None
        """The position reader whose items the stage hands out uncounted (its plain path:
        :meth:`count_from`), or ``None``."""
        self._counted_at = 0
        # The consumer folds the uncounted elements in while the tuner may read them.
        self._count_lock = threading.Lock()

    def count_from(self, reader: Any) -> None:
        """From now on the stage hands out ``reader``'s items (its ``pulled`` count) without
        counting them (a count per element costs what a cheap call does): they are counted
        here. ``None``: those handed out so far are added to the counters, and the stage
        counts again (on the consumer's thread)."""
        with self._count_lock:
            if self.counting_from is not None:
                handed = self.counting_from.pulled - self._counted_at
                counters = self.counters
                counters.elements += handed
                counters.calls += handed
            self.counting_from = reader
            if reader is not None:
                self._counted_at = reader.pulled

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        """As :meth:`StageKnobs.tuning_counters`, with the elements handed out uncounted."""
        with self._count_lock:
            counters = self.counters
            reader = self.counting_from
            uncounted = 0 if reader is None else reader.pulled - self._counted_at
            return (counters.elements + uncounted, counters.calls + uncounted, counters.waits,
                    counters.busy, counters.input, counters.cpu)

    # ------------------------------------------------------------------ the setting
    @property
    def tuned_workers(self) -> int:
        """Threads allowed to work at once (the tuner sets it; at most :attr:`max_workers`)."""
        limit = self.gate.limit
        return self._parallelism if limit is None else limit

    @tuned_workers.setter
    def tuned_workers(self, value: int) -> None:
        workers = max(1, min(int(value), self._ceiling))
        self.gate.limit = workers
        follow = self.on_setting() if self.on_setting is not None else None
        if follow is not None:
            follow()
        # Two tasks per worker, as for a fixed parallelism: one running, one queued behind
        # it. A deeper window only reads the input further ahead on the consumer's thread.
        if self.window is not None:
            self.window.limit = 2 * workers

    # ------------------------------------------------------------------ bounds
    @property
    def max_workers(self) -> int:
        """Its threads: ``parallelism``, or more when tuned (for calls that wait)."""
        return self._ceiling

    @property
    def bytes_per_worker(self) -> float:
        """Bytes one more worker holds: its tasks in the window (two, of ``chunk_size``
        elements, each its input and its result, at their sampled sizes) and its thread
        (:data:`THREAD_BYTES`)."""
        element = (self._input_bytes or 0.0) + (self._output_bytes or 0.0)
        return 2 * self.chunk_size * element + THREAD_BYTES

    # ------------------------------------------------------------------ measurements
    def sample_input(self, element: Any) -> None:
        """A task was submitted with ``element`` first: one in :data:`SIZE_EVERY` is sized."""
        if self._tasks % SIZE_EVERY == 0:
            self._input_bytes = _mean_bytes(self._input_bytes, element)
        self._tasks += 1

    def sample_output(self, result: Any) -> None:
        """A task's first result: the first and one in :data:`SIZE_EVERY` are sized."""
        if self._output_bytes is None or self._results % SIZE_EVERY == 0:
            self._output_bytes = _mean_bytes(self._output_bytes, result)
        self._results += 1

    @property
    def tuning_paused(self) -> bool:
        """While the executor choice measures its first tasks (one at a time, then whole
        windows), the workers' idleness is the measurement's, not the stage's."""
        return self.choice is not None and self.choice.measuring

    @property
    def executor_decision(self) -> MeasuredDecision | None:
        """Where the stage's calls run, with the measurement behind it (``None`` while
        measuring, or when the executor was not chosen automatically)."""
        return self.decided if self.choice is None else self.choice.decision

    @property
    def measured_calls(self) -> CallMeasurement | None:
        """How its calls ran on threads, from its executor choice (``None``: not measured,
        or the stage moved to processes)."""
        decision = self.executor_decision
        if (decision is None or decision.kind != "thread" or decision.gil_share is None
                or decision.busy_together is None or decision.concurrency is None
                or decision.busy_alone is None or decision.thread_rate is None):
            return None
        return CallMeasurement(decision.gil_share, decision.busy_together,
                               decision.concurrency, decision.busy_alone,
                               decision.thread_rate, decision.seconds_per_element,
                               decision.idle_cpus)

    def inline_figures(self) -> dict[str, float]:
        """The measurement behind a switch to or from inline calls, for the tuner's record."""
        measured = self.measured_calls
        return {} if measured is None else {
            "gil_share": measured.gil_share, "busy_alone": measured.busy_alone,
            "busy_together": measured.busy_together, "concurrency": measured.concurrency,
            "rate": measured.rate}


def _mean_bytes(mean: float | None, element: Any) -> float:
    """``mean`` moved towards ``element``'s size (a moving mean over the sampled tasks)."""
    size = float(element_bytes(element))
    return size if mean is None else mean + (size - mean) / 8
