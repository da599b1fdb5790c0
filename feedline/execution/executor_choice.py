"""Threads or processes for a parallel ``map``, chosen from measurement.

``map(f, num_parallel_calls=AUTOTUNE)`` with no ``executor`` starts on threads, measures
whether ``f`` is held back by the GIL, and moves the stage's remaining calls to worker
processes (:class:`~feedline.execution.processes.ProcessExecutor`) when it is and processes
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

From these: ``slowdown = busy alone / (CPUs used together / c)`` and the **GIL share**
``(slowdown - 1) / (c - 1)``, about 1 for a function serialized by the GIL and 0 for one
that is not. The stage switches to processes when the function is busy
(:data:`MIN_BUSY`), the calls overlapped (:data:`MIN_CONCURRENCY`), the slowdown is large
(:data:`MIN_SLOWDOWN`), the machine has two CPUs or more, the stage has two workers or
more, the function pickles with cloudpickle, and the machine left CPUs idle meanwhile
(:data:`MIN_IDLE_CPUS`: with every CPU busy, other processes hold them and processes
would not run faster), and the estimated process throughput beats the measured thread
throughput by :data:`MIN_GAIN`. The process estimate charges each
element the measured cost of pickling its input and result (the solo tasks pickle theirs
once, off the clock), their array bytes through shared memory, and a fixed cost per task
(:data:`PROCESS_TASK_SECONDS`); the consumer's own share of that transport caps it too.
Margins are wide on purpose (a GIL-bound function measures a slowdown near the number of
threads; one that is not, near 1), so the decision does not flip on a noisy machine; when
the evidence is missing (the input ends first, the calls never overlap) the stage stays on
threads.

The switch changes where calls run, nothing else: tasks already running on threads finish
there and keep their place, and checkpoints are positions
(:mod:`feedline.execution.positions`), so order, errors in place and states are those of
a thread-only run. The decision is logged (logger ``feedline.execution.executor_choice``,
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

logger = logging.getLogger(__name__)

SOLO_TASKS = 2
"""Tasks run one at a time first, to measure how busy the function is alone."""
CONCURRENT_TASKS = 6
"""Fewest concurrent tasks measured before deciding."""
CONCURRENT_SECONDS = 0.2
"""Fewest seconds of wall time the concurrent tasks measured must span (long enough for
the machine's idle time, counted in 10 ms ticks, to mean something)."""
MIN_BUSY = 0.4
"""Busy fraction alone below which the function mostly waits (I/O, sleep): threads."""
MIN_CONCURRENCY = 1.5
"""Average calls running at once needed for the measurement to say anything."""
MIN_SLOWDOWN = 1.7
"""Running alone / running together from which the calls serialize (two GIL-bound threads
measure about 2; two that release it, about 1, and 1.5 when another process keeps one of
two CPUs busy)."""
MIN_GIL_SHARE = 0.5
"""GIL share from which the calls serialize (with many workers, where the slowdown of a
function that holds the GIL half its time is large yet threads still scale)."""
MIN_IDLE_CPUS = 0.5
"""CPUs the machine must have left idle while the calls ran together: with none idle
(other processes use them), processes would not run faster than threads."""
MIN_GAIN = 1.3
"""Estimated process throughput over measured thread throughput needed to switch."""
PROCESS_TASK_SECONDS = 300e-6
"""Fixed cost of one task on a worker process (two messages and wake-ups), an upper bound
of what a round trip costs on Linux."""
SHARED_MEMORY_BYTES_PER_SECOND = 1e9
"""A conservative rate for an array payload through shared memory (written once, page
faults on both sides)."""
PROCESS_TARGET_TASK_SECONDS = 0.005
"""Work per task on processes (the map's chunking target): what the fixed cost divides by."""

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


@dataclass(frozen=True)
class ExecutorDecision:
    """Where an ``AUTOTUNE`` map's calls run, and the measurement behind it.

    Attributes:
        stage: The stage's name.
        kind: ``"process"`` or ``"thread"``.
        reason: Why, in words.
        gil_share: ``(slowdown - 1) / (concurrency - 1)``: about 1 when the GIL serializes
            the calls, about 0 when it does not (``None`` when not measured).
        busy_alone: Busy fraction of the calls run one at a time (CPU time and run-queue
            wait over wall time).
        busy_together: CPU time of the calls run together over wall time and concurrency.
        concurrency: Average number of calls that could run at once while measured (tasks
            submitted and not finished, at most one per worker).
        seconds_per_element: Wall time of one element's call, alone.
        thread_rate: Elements per second measured on threads.
        process_rate: Elements per second estimated on processes.
    """

    stage: str
    kind: str
    reason: str
    gil_share: float | None = None
    busy_alone: float | None = None
    busy_together: float | None = None
    concurrency: float | None = None
    seconds_per_element: float | None = None
    thread_rate: float | None = None
    process_rate: float | None = None

    def __str__(self) -> str:
        numbers = []
        if self.gil_share is not None:
            numbers.append(f"GIL share {self.gil_share:.2f}")
        if self.busy_alone is not None and self.busy_together is not None:
            numbers.append(f"busy {self.busy_alone:.2f} alone, {self.busy_together:.2f} "
                           f"with {self.concurrency:.1f} calls at once")
        if self.thread_rate is not None and self.process_rate is not None:
            numbers.append(f"{self.thread_rate:.0f} elements/s on threads, "
                           f"~{self.process_rate:.0f} estimated on processes")
        measured = f" ({'; '.join(numbers)})" if numbers else ""
        where = "processes" if self.kind == "process" else "threads"
        return f"{self.stage}: {where}: {self.reason}{measured}"


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
            from feedline.execution.processes import ProcessExecutor

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
        self.decision: ExecutorDecision | None = None
        cpus = schedulable_cpus()
        if cpus < 2 or workers < 2:  # nothing to measure: processes could not run more
            self._settle("thread", f"{min(cpus, workers)} worker(s) only", {})
        elif _in_multiprocess_worker():  # the CPUs are shared out between those workers
            self._settle("thread", "runs in a worker process of multiprocess()", {})

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
            return None
        self._together.append(probe)
        together = self._together
        span = max(p.start + p.wall for p in together) - min(p.submitted for p in together)
        if len(together) >= CONCURRENT_TASKS and span >= CONCURRENT_SECONDS:
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
        busy_alone = _busy(solo)
        # CPUs the calls used while up to ``concurrency`` could run: as many as that, each
        # running as much as one alone, unless they serialize. Short GIL-bound calls do not
        # even overlap (each runs to its end before the next starts): they count the same.
        # CPU time only, alone and together: run-queue waits together include a GIL
        # waiter's periodic wake-ups (every switch interval), which would look like demand.
        running_alone = sum(p.cpu for p in solo) / max(sum(p.wall for p in solo), 1e-9)
        cores = sum(p.cpu for p in together) / max(span, 1e-9)
        busy_together = cores / max(concurrency, 1e-9)
        slowdown = running_alone / max(busy_together, 1e-9)
        gil_share = max(0.0, min(1.0, (slowdown - 1) / (concurrency - 1))) \
            if concurrency > 1 else None
        elements_alone = sum(p.elements for p in solo)
        per_element = sum(p.wall for p in solo) / max(1, elements_alone)
        thread_rate = sum(p.elements for p in together) / max(span, 1e-9)
        measured = {"gil_share": gil_share, "busy_alone": busy_alone,
                    "busy_together": busy_together, "concurrency": concurrency,
                    "seconds_per_element": per_element, "thread_rate": thread_rate}
        transports = [p.transport for p in solo]
        if concurrency < MIN_CONCURRENCY:
            reason = "the calls rarely ran at once (the map is not the bottleneck)"
        elif busy_alone < MIN_BUSY:
            reason = "the function mostly waits (I/O, sleep), which threads overlap"
        elif slowdown < MIN_SLOWDOWN or (gil_share or 0.0) < MIN_GIL_SHARE:
            reason = "the calls run in parallel on threads (the GIL is released)"
        elif not self._allow_processes:
            reason = ("held back by the GIL; kept on threads "
                      "(AutotuneOptions(choose_executor=False))")
        elif (idle := self._idle_cpus()) is not None and idle < MIN_IDLE_CPUS:
            reason = (f"held back by the GIL, but the machine had {idle:.1f} CPU idle (other "
                      "processes use them): processes would not run faster")
        elif any(t is None for t in transports):
            reason = "held back by the GIL, but its inputs or results do not pickle"
        else:
            transport = (sum(t or 0.0 for t in transports)
                         + sum(p.payload for p in solo) / SHARED_MEMORY_BYTES_PER_SECOND
                         ) / max(1, elements_alone)
            # Pickling and unpickling on each side: the consumer's half is serial.
            per_task = PROCESS_TASK_SECONDS / max(1.0, PROCESS_TARGET_TASK_SECONDS / max(
                per_element, 1e-9))
            process_rate = min(min(schedulable_cpus(), self.workers) / (per_element
                                                                       + 2 * transport
                                                         + per_task),
                               1 / max(2 * transport + per_task, 1e-9))
            measured["process_rate"] = process_rate
            # Against the better of the threads and one call at a time: calls that hold the
            # GIL run inline when they stay (the tuner's serial setting), often faster than
            # threads that take turns at the GIL.
            if process_rate < MIN_GAIN * max(thread_rate, 1 / max(per_element, 1e-9)):
                reason = ("held back by the GIL, but moving its elements between processes "
                          "would cost more than it gains")
            elif not self._pickles():
                reason = "held back by the GIL, but the function does not pickle"
            else:
                return self._settle("process", "the calls are serialized by the GIL",
                                    measured)
        return self._settle("thread", reason, measured)

    def _idle_cpus(self) -> float | None:
        """CPUs the machine left idle, on average, since the tasks began to run together."""
        idle_then, then = self._idle_since
        idle_now = _idle_cpu_seconds()
        if idle_then is None or idle_now is None:
            return None
        return (idle_now - idle_then) / max(time.perf_counter() - then, 1e-9)

    def _pickles(self) -> bool:
        try:
            import cloudpickle

            cloudpickle.dumps(self._fn, protocol=5, buffer_callback=lambda _: None)
        except Exception:  # noqa: BLE001 - whatever does not pickle stays on threads
            return False
        return True

    def _settle(self, kind: str, reason: str, measured: dict[str, Any]) -> str | None:
        self.decision = ExecutorDecision(self.stage, kind, reason, **measured)
        self._solo, self._together = [], []
        logger.debug("feedline: %s", self.decision)
        if kind == "process":
            if self._executor is not None:
                self._executor.switch_to_processes()
            return "process"
        return None

    def settle_unmeasured(self, reason: str) -> None:
        """Stop measuring without evidence (the stage stays on threads)."""
        if self.decision is None:
            self._settle("thread", reason, {})


def _in_multiprocess_worker() -> bool:
    try:
        from feedline.execution.worker_pool import in_worker_process
    except ImportError:  # pragma: no cover - multiprocess() not available
        return False
    return in_worker_process()


def _busy(probes: list[Probe]) -> float:
    wall = sum(p.wall for p in probes)
    return sum(p.cpu + p.waited for p in probes) / max(wall, 1e-9)
