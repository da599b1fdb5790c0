"""Threads or processes for a parallel ``map``, chosen from measurement.

``map(f, num_parallel_calls=AUTOTUNE)`` with no ``executor`` starts on threads, measures
whether ``f`` is held back by the GIL, and moves the stage's remaining calls to worker
processes (:class:`~feedline.placement.process_executor.ProcessExecutor`) when it is and processes
would pay. The evidence, gathered over the stage's first tasks (chunks of elements):

1. **Alone.** The first :data:`SOLO_TASKS` tasks run one at a time. Each measures its
   wall time, its thread's CPU time (``time.thread_time``) and, where Linux reports it
   (``/proc/thread-self/schedstat``), the time it sat runnable waiting for a CPU. Their
   *busy* fraction ``(cpu + run-queue wait) / wall`` is how much of a call is computing
   rather than waiting on I/O or a sleep.
2. **Together.** The next tasks run concurrently on the stage's threads, measured the same
   way, until :data:`CONCURRENT_SECONDS` of them have run (and :data:`CONCURRENT_TASKS`).
   Each task also records when it was submitted, so the measurement knows how many calls
   *could* have run at once (tasks submitted and not finished, at most one per worker):
   the concurrency ``c``. A function that releases the GIL (NumPy, codecs, I/O) keeps
   ``c`` CPUs as busy as one call alone keeps one. One that holds it keeps one CPU busy,
   whatever ``c`` and the number of cores: long calls overlap and take turns, short ones
   run one after the other. The run-queue term keeps a machine loaded by other processes
   from looking like GIL contention (that is CPU starvation: processes would not help).
   Where the calls alone already rule processes out (cheap calls whose transport costs
   more: :func:`~feedline.placement.policy.processes_cannot_pay`), the tasks together are
   measured only for how they share the GIL, over :data:`THREADS_ONLY_SECONDS` instead of
   :data:`CONCURRENT_SECONDS` (the idle CPUs are then unmeasured).

From these (:class:`~feedline.placement.policy.MapCallFigures`): ``slowdown = busy alone /
(CPUs used together / c)`` and the **GIL share** ``(slowdown - 1) / (c - 1)``, about 1 for a
function serialized by the GIL and 0 for one that is not. Each element is also charged the
measured cost of pickling its input and result (the solo tasks pickle theirs once, off the
clock) and its array bytes through shared memory, and the machine's idle CPUs are read
meanwhile. Whether the stage switches is the placement policy's rule
(:func:`~feedline.placement.policy.place_map_calls`); when the evidence is missing (the input
ends first, the calls never overlap) the stage stays on threads.

The switch changes where calls run, nothing else: tasks already running on threads finish
there and keep their place, and checkpoints are positions
(:mod:`feedline.execution.positions`), so order, errors in place and states are those of
a thread-only run. The decision is logged (logger ``feedline.placement.map_executor``,
level ``DEBUG``) and kept as an :class:`ExecutorDecision` (the map iterator's
``executor_decision``). ``executor="thread"`` or ``"process"`` is always obeyed, and
``Options(autotune=AutotuneOptions(choose_executor=False))`` keeps ``AUTOTUNE`` maps on
threads.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feedline.core.validation import schedulable_cpus
from feedline.execution.executor import Executor, ThreadExecutor
from feedline.execution.gate import WorkerGate
from feedline.placement.policy import (
    SHARED_MEMORY_BYTES_PER_SECOND,
    ExecutorDecision,
    MapCallFigures,
    map_stays_on_threads,
    place_map_calls,
    processes_cannot_pay,
)

logger = logging.getLogger(__name__)

SOLO_TASKS = 2
"""Tasks run one at a time first, to measure how busy the function is alone."""
CONCURRENT_TASKS = 6
"""Fewest concurrent tasks measured before deciding."""
CONCURRENT_SECONDS = 0.2
"""Fewest seconds of wall time the concurrent tasks measured must span (long enough for
the machine's idle time, counted in 10 ms ticks, to mean something), unless the calls
alone ruled processes out (then :data:`THREADS_ONLY_SECONDS`)."""
THREADS_ONLY_SECONDS = 0.02
"""Fewest seconds the concurrent tasks span where the calls alone ruled processes out: only
their overlap is measured, which a few tasks of a cheap map, on a busy machine, measured
as about one call at once (the tuner then left it on two threads for half a second)."""
try:
    with open("/proc/thread-self/schedstat", "rb") as _file:
        _file.read()
    _SCHEDSTAT: str | None = "/proc/thread-self/schedstat"
except OSError:  # not Linux, or /proc hidden: CPU time only
    _SCHEDSTAT = None


def _idle_cpu_seconds() -> float | None:
    """CPU-seconds the whole machine has been idle since boot (``None`` where unknown)."""
    try:
        with open("/proc/stat", "rb") as file:
            fields = file.readline().split()
        # cpu user nice system idle iowait ...: in USER_HZ ticks.
        return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _run_queue_wait() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (0 where unknown)."""
    if _SCHEDSTAT is None:
        return 0.0
    try:
        with open(_SCHEDSTAT, "rb") as file:
            return int(file.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass(frozen=True)
class Probe:
    """What one task measured on the thread that ran it.

    Attributes:
        submitted: ``time.perf_counter()`` when the consumer submitted it.
        start: ``time.perf_counter()`` when it began.
        wall: Seconds it took.
        cpu: CPU seconds of its thread meanwhile.
        waited: Seconds its thread was runnable but waiting for a CPU (0 where unknown).
        elements: Elements it computed.
        transport: Seconds pickling its inputs and results took, or ``None`` when not
            measured (only tasks run alone measure it) or they do not pickle.
        payload: Bytes of array payload in its inputs and results (out-of-band buffers).
    """

    submitted: float
    start: float
    wall: float
    cpu: float
    waited: float
    elements: int
    transport: float | None = None
    payload: int = 0


class ProbeClock:
    """Started on a worker thread before a task; :meth:`stop` makes its :class:`Probe`.

    Args:
        submitted: ``time.perf_counter()`` when the task was submitted.

    Example:
        >>> clock = ProbeClock(time.perf_counter())
        >>> probe = clock.stop(elements=1)
        >>> probe.wall >= 0 and probe.cpu >= 0
        True
    """

    __slots__ = ("_cpu", "_start", "_submitted", "_waited")

    def __init__(self, submitted: float) -> None:
        self._submitted = submitted
        self._waited = _run_queue_wait()
        self._cpu = time.thread_time()
        self._start = time.perf_counter()

    def stop(self, elements: int) -> Probe:
        end = time.perf_counter()
        cpu = time.thread_time() - self._cpu
        wall = end - self._start
        # The kernel books a run-queue wait when the thread next runs: a wait from before
        # the task may land inside it. A task cannot have waited longer than it did not run.
        waited = min(max(0.0, _run_queue_wait() - self._waited), max(0.0, wall - cpu))
        return Probe(self._submitted, self._start, wall, cpu, waited, elements)


def transport_cost(inputs: Any, results: Any) -> tuple[float | None, int]:
    """Seconds to pickle ``inputs`` and ``results`` as the process channel does, and their
    array bytes; ``(None, 0)`` if they do not pickle.

    Example:
        >>> seconds, payload = transport_cost([1, 2], [3, 4])
        >>> seconds > 0 and payload == 0
        True
    """
    buffers: list[pickle.PickleBuffer] = []
    started = time.perf_counter()
    try:
        pickle.dumps(inputs, protocol=5, buffer_callback=buffers.append)
        pickle.dumps(results, protocol=5, buffer_callback=buffers.append)
    except Exception:  # noqa: BLE001 - whatever does not pickle stays on threads
        return None, 0
    return time.perf_counter() - started, sum(buffer.raw().nbytes for buffer in buffers)


class SwitchingExecutor:
    """A stage's executor that starts on threads and may move to worker processes.

    Calls submitted before :meth:`switch_to_processes` finish on their threads; calls
    after it run in processes. :meth:`shutdown` ends both.

    Example:
        >>> executor = SwitchingExecutor(2, "doc")
        >>> executor.submit(pow, 2, 5).result(), executor.kind
        (32, 'thread')
        >>> executor.shutdown()
    """

    def __init__(self, workers: int, name: str, close_timeout: float | None = None,
                 threads: int | None = None, gate: WorkerGate | None = None) -> None:
        self._workers = workers
        self._name = name
        self._close_timeout = close_timeout
        kwargs = {} if close_timeout is None else {"close_timeout": close_timeout}
        # ``threads`` beyond ``workers``: a tuned stage may grow past its CPU count on
        # threads (its gate lets ``workers`` of them work until the tuner says otherwise).
        self._threads = ThreadExecutor(max(workers, threads or workers), name, gate=gate,
                                       **kwargs)
        self._processes: Executor | None = None
        self._current: Executor = self._threads
        self.kind = "thread"

    def switch_to_processes(self) -> None:
        """Run every later call in worker processes."""
        if self._processes is None:
            from feedline.placement.process_executor import ProcessExecutor

            kwargs = {} if self._close_timeout is None else {"close_timeout": self._close_timeout}
            self._processes = ProcessExecutor(self._workers, self._name, **kwargs)
            self._current = self._processes
            self.kind = "process"

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        return self._current.submit(fn, *args)

    @property
    def workers(self) -> int:
        """Calls that may run at once."""
        return self._workers

    def threads(self) -> list[threading.Thread]:
        """The thread executor's threads (for statistics)."""
        return self._threads.threads()

    def shutdown(self) -> None:
        """Shut down the thread pool and, if started, the process pool. Idempotent."""
        self._threads.shutdown()
        if self._processes is not None:
            self._processes.shutdown()

    def keep_processes(self) -> Executor | None:
        """Shut down the thread pool and hand over the process pool, if started (the caller
        owns it now); ``None`` otherwise."""
        self._threads.shutdown()
        processes, self._processes = self._processes, None
        return processes


class ExecutorChoice:
    """Measures an ``AUTOTUNE`` map's first tasks and decides threads or processes.

    Used by the map iterator on its consumer's thread: :meth:`may_submit` says whether a
    task may start now (one at a time during the solo phase; none while the last measured
    tasks finish, so that every task of the window is measured whole),
    :meth:`submitted` counts each measured task started, and :meth:`record` takes its
    measurement and returns ``"process"`` once, when the stage should switch (the caller
    then swaps its runner; :meth:`make_executor`'s executor is switched here).
    :meth:`reset` starts over (the stage dropped its tasks in flight, as on a restore).

    Args:
        stage: The stage's name.
        workers: The stage's parallelism.
        fn: The function (checked for pickling before a switch).
        close_timeout: Passed to the executors.
        threads: Threads of its executor, if more than ``workers`` (a tuned stage that may
            grow on threads).

    Example:
        >>> choice = ExecutorChoice("map(f)", 2, abs)
        >>> choice.measuring, choice.may_submit(tasks_in_window=1)
        (True, False)
    """

    def __init__(self, stage: str, workers: int, fn: Callable[..., Any],
                 close_timeout: float | None = None, threads: int | None = None,
                 allow_processes: bool = True) -> None:
        self.stage = stage
        # False: measure only (``AutotuneOptions(choose_executor=False)``): the figures still
        # tell the tuner where to start (one worker for calls the GIL serializes).
        self._allow_processes = allow_processes
        self.workers = workers
        self._threads = threads
        self._fn = fn
        self._close_timeout = close_timeout
        self._executor: SwitchingExecutor | None = None
        self._solo: list[Probe] = []
        self._together: list[Probe] = []
        self._idle_since: tuple[float | None, float] = (None, 0.0)
        self._in_flight = 0  # measured tasks submitted, not recorded yet
        self._closing = False  # enough measured: waiting for the last ones to finish
        # The calls alone ruled processes out: no span needed for the idle CPUs.
        self._threads_only = False
        self.decision: ExecutorDecision | None = None
        unmeasured = map_stays_on_threads(schedulable_cpus(), workers, _pipeline_workers())
        if unmeasured is not None:
            self._settle(ExecutorDecision(stage, "thread", unmeasured))

    @property
    def measuring(self) -> bool:
        """Whether tasks should still be measured."""
        return self.decision is None

    def may_submit(self, tasks_in_window: int) -> bool:
        """Whether the stage may start a task now, with ``tasks_in_window`` in its window."""
        if self.decision is not None:
            return True
        if len(self._solo) < SOLO_TASKS:
            return tasks_in_window == 0
        return not self._closing

    def solo_phase(self) -> bool:
        """Whether the next task runs alone (and measures its transport cost)."""
        return self.decision is None and len(self._solo) < SOLO_TASKS

    def submitted(self) -> None:
        """A measured task was started."""
        self._in_flight += 1

    def carry_on(self) -> None:
        """Go on measuring in the stage's next iterator (the next epoch of a ``repeat``): the
        tasks measured so far count, those in flight were dropped with the last iterator.
        Starting over instead, an epoch shorter than the measurement would never decide,
        and would run every task of every epoch under the measurement's limits."""
        self._in_flight, self._closing = 0, False

    def reset(self) -> None:
        """Forget the measurement in progress (its tasks in flight were dropped)."""
        if self.decision is None:
            self._solo, self._together = [], []
            self._in_flight, self._closing = 0, False
            self._threads_only = False

    def make_executor(self, gate: WorkerGate | None = None) -> SwitchingExecutor:
        """The stage's executor (made on its first task); ``gate``: how many of its threads
        work at once (the tuner's setting)."""
        self._executor = SwitchingExecutor(self.workers, self.stage, self._close_timeout,
                                           self._threads, gate)
        return self._executor

    def record(self, probe: Probe | None) -> str | None:
        """Take one task's measurement; ``"process"`` when the stage switches now."""
        if probe is None or self.decision is not None:
            return None
        self._in_flight = max(0, self._in_flight - 1)
        if len(self._solo) < SOLO_TASKS:
            self._solo.append(probe)
            if len(self._solo) == SOLO_TASKS:  # tasks run together from now on
                self._idle_since = (_idle_cpu_seconds(), time.perf_counter())
                solo = self._solo
                elements = max(1, sum(p.elements for p in solo))
                self._threads_only = processes_cannot_pay(
                    sum(p.wall for p in solo) / elements, self._transport(),
                    self.workers, schedulable_cpus())
            return None
        self._together.append(probe)
        together = self._together
        span = max(p.start + p.wall for p in together) - min(p.submitted for p in together)
        least = min(THREADS_ONLY_SECONDS, CONCURRENT_SECONDS) if self._threads_only \
            else CONCURRENT_SECONDS
        if len(together) >= CONCURRENT_TASKS and span >= least:
            self._closing = True  # no new task until those in flight are measured
        if not self._closing or self._in_flight:
            return None
        # Calls that could have run at once: tasks submitted and not finished, at most one
        # per worker. Whether they did run at once is what the GIL decides.
        concurrency = min(float(self.workers), sum(p.start + p.wall - p.submitted
                                                   for p in together) / max(span, 1e-9))
        return self._decide(concurrency, span)

    def _decide(self, concurrency: float, span: float) -> str | None:
        solo, together = self._solo, self._together
        elements_alone = sum(p.elements for p in solo)
        transport = self._transport()
        # CPUs the calls used while up to ``concurrency`` could run: as many as that, each
        # running as much as one alone, unless they serialize. Short GIL-bound calls do not
        # even overlap (each runs to its end before the next starts): they count the same.
        # CPU time only, alone and together: run-queue waits together include a GIL
        # waiter's periodic wake-ups (every switch interval), which would look like demand.
        figures = MapCallFigures(
            busy_alone=_busy(solo),
            running_alone=sum(p.cpu for p in solo) / max(sum(p.wall for p in solo), 1e-9),
            cores_together=sum(p.cpu for p in together) / max(span, 1e-9),
            concurrency=concurrency,
            seconds_per_element=sum(p.wall for p in solo) / max(1, elements_alone),
            thread_rate=sum(p.elements for p in together) / max(span, 1e-9),
            transport_per_element=transport, workers=self.workers,
            # Over a shorter span, 10 ms ticks of idle time would read as 0 or as many CPUs.
            cpus=schedulable_cpus(),
            idle_cpus=self._idle_cpus() if span >= CONCURRENT_SECONDS else None,
            cpu_per_element=sum(p.cpu for p in (*solo, *together)) / max(
                1, sum(p.elements for p in (*solo, *together))))
        if span < CONCURRENT_SECONDS and not processes_cannot_pay(
                figures.work_per_element, transport, self.workers, figures.cpus):
            # The calls together cost more than alone said: processes may pay after all,
            # which takes the idle CPUs over the whole span to decide.
            self._threads_only = self._closing = False
            return None
        return self._settle(place_map_calls(self.stage, figures, self._allow_processes,
                                            self._pickles))

    def _transport(self) -> float | None:
        """Seconds to send one element of the solo tasks to a process and back (pickling
        and its array bytes through shared memory); ``None`` if they do not pickle."""
        solo = self._solo
        transports = [p.transport for p in solo]
        if any(t is None for t in transports):
            return None
        return (sum(t or 0.0 for t in transports)
                + sum(p.payload for p in solo) / SHARED_MEMORY_BYTES_PER_SECOND
                ) / max(1, sum(p.elements for p in solo))

    def _idle_cpus(self) -> float | None:
        """CPUs the machine left idle, on average, since the tasks began to run together."""
        idle_then, then = self._idle_since
        idle_now = _idle_cpu_seconds()
        if idle_then is None or idle_now is None:
            return None
        return (idle_now - idle_then) / max(time.perf_counter() - then, 1e-9)

    def _pickles(self) -> bool:
        # The process executor's own pickling: what passes here is what it sends.
        try:
            from feedline.core import pickling

            pickling.dumps(self._fn, protocol=5, buffer_callback=lambda _: None)
        except Exception:  # noqa: BLE001 - whatever does not pickle stays on threads
            return False
        return True

    def _settle(self, decision: ExecutorDecision) -> str | None:
        self.decision = decision
        self._solo, self._together = [], []
        logger.debug("feedline: %s", decision)
        if decision.kind == "process":
            if self._executor is not None:
                self._executor.switch_to_processes()
            return "process"
        return None

    def settle_unmeasured(self, reason: str) -> None:
        """Stop measuring without evidence (the stage stays on threads)."""
        if self.decision is None:
            self._settle(ExecutorDecision(self.stage, "thread", reason))


def _pipeline_workers() -> int | None:
    """How many whole-pipeline worker processes share the CPUs with this one, if it is one
    (:func:`feedline.placement.worker_loop.pipeline_workers`)."""
    from feedline.placement.worker_loop import pipeline_workers

    return pipeline_workers()


def _busy(probes: list[Probe]) -> float:
    wall = sum(p.wall for p in probes)
    return sum(p.cpu + p.waited for p in probes) / max(wall, 1e-9)
