"""The one placement decision: when work leaves this process's threads, and where it goes.

Two measurements feed it, and every rule that reads them is here, so that they cannot
disagree:

* **A map's calls** (:mod:`~feedline.placement.map_executor` measures an ``AUTOTUNE`` map's
  first tasks alone and together, unless :func:`map_stays_on_threads`): :func:`place_map_calls`
  keeps them on threads unless the GIL serializes them and worker processes would pay after
  transport; :func:`runs_inline` says when calls held by the GIL are better called on the
  consumer's thread. In a feeder process the same rules hold: the feeder runs the
  order-defining part once and feeds its maps' worker processes.
* **A whole pipeline** (:mod:`~feedline.placement.auto` runs it briefly on threads and reads
  the cores it kept busy): :func:`place_pipeline` says, before any trial, whether it may
  move at all and how (shards in several processes, or whole in one feeder process), and
  :func:`place_shards` / :func:`place_feeder` decide from the trial's figures.

The two never stack: a pipeline whose map calls already run in worker processes (asked for,
or moved there during the trial) stays, since its own process is idle only because the work
is elsewhere (:func:`maps_in_processes`). Every decision is a record with its figures and its
reason in words (:class:`ExecutorDecision`, :class:`ProcessDecision`), logged and reported by
``statistics()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from feedline.core.interpreter import FREE_THREADED_REASON, gil_disabled
from feedline.execution.map_knobs import CallMeasurement, MeasuredDecision

# ---------------------------------------------------------------- a map's calls
MIN_BUSY = 0.4
"""CPU fraction of a call alone (``running_alone``: CPU time over wall time) below which the
function mostly waits (I/O, sleep): threads."""
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
MAP_MIN_GAIN = 1.3
"""Estimated process throughput over measured thread throughput needed to switch a map."""
PROCESS_TASK_SECONDS = 300e-6
"""Fixed cost of one task on a worker process (two messages and wake-ups), an upper bound
of what a round trip costs on Linux."""
SHARED_MEMORY_BYTES_PER_SECOND = 1e9
"""A conservative rate for an array payload through shared memory (written once, page
faults on both sides)."""
PROCESS_TARGET_TASK_SECONDS = 0.005
"""Work per task on processes (the map's chunking target): what the fixed cost divides by."""
FREE_THREADED_TASK_SECONDS = 0.002
"""Least work per task on threads on a free-threaded interpreter (the map's chunking
target). Its consumer runs beside its workers, and each task costs it a wait, a future and a
hand-off that free threading makes dearer (the 3.13t tokenizer, 2 threads: 20-36 µs of the
consumer's CPU a line with tasks of 0.5 ms, 11-14 with 2 ms)."""


def thread_task_seconds(target: float) -> float:
    """Work per task on threads for a chunking ``target`` (seconds): the target under the
    GIL, at least :data:`FREE_THREADED_TASK_SECONDS` without it.

    Example:
        >>> thread_task_seconds(0.0005) in (0.0005, FREE_THREADED_TASK_SECONDS)
        True
    """
    return max(target, FREE_THREADED_TASK_SECONDS) if gil_disabled() else target
INLINE_MAX_CALL_SECONDS = 200e-6
"""Longest call (alone, per element) that a map whose calls hold the GIL makes inline, on its
consumer's thread, once the tuner has it at one worker. A hand-off to a worker thread costs
20-30 µs: for the tokenizer's 40 µs calls that is most of the work (inline ran 2.5x faster),
while a 2 ms batch parse on one worker overlaps with the reading of its input (chess: 154k
records/s inline, 205k on one worker thread)."""
SERIAL_GIL_SHARE = 0.8
"""Share of its calls' time holding the GIL (measured by the stage's executor choice) from
which a stage of short calls (:func:`~feedline.autotune.stage.short_calls`) starts at one
worker, inline: its calls run one at a time however many threads it has, and each hands off
to a thread (the tokenizer: 2.5x faster inline). Longer calls keep the workers measured:
their threads overlap the calls' GIL-free parts (NumPy) and the input's reads (chess, a 2 ms
parse judged 100% serialized: one worker 194k records/s, two 310k), and the tuner's trials
decide from there. Placement's inline rule and the tuner's start share it
(:mod:`feedline.autotune.rules` names it too)."""

# ---------------------------------------------------------------- a whole pipeline
PIPELINE_MIN_GAIN = 1.5
"""Least predicted speed-up (CPU budget / cores busy on threads) that moves a pipeline into
shards in worker processes."""
FEEDER_MIN_BUSY = 0.5
"""Least cores the pipeline keeps busy on threads for it to move to a feeder process."""
FEEDER_SPARE_CORES = 1.5
"""Cores the budget must hold beyond those the pipeline keeps busy on threads for a feeder
process to pay: the training loop's own core, and the transport's share. With fewer, the
feeder and the training loop compete for the same cores and the feeder runs slower than the
threads did (measured on 2 cores: the chess pipeline at 1.2 cores busy fed a trainer 18%
slower from a feeder than from threads)."""
FEEDER_MIN_GAIN = 2.0
"""Least ratio of the CPU an element costs this process on threads to what receiving it
from a feeder would cost (:data:`RECEIVE_BYTES_PER_SECOND`) for the move to pay."""
RECEIVE_BYTES_PER_SECOND = 4e9
"""What receiving an element from another process costs here, in its bytes per CPU second
(its arrays are views of shared memory; the figure is deliberately pessimistic)."""
RECEIVE_SECONDS_PER_ELEMENT = 100e-6
"""What receiving an element from another process costs here whatever its bytes: its
message, its unpickling, the wake-ups (deliberately optimistic: ``multiprocess(2)`` of
``range(n).map(lambda x: x + 1).batch(256)`` delivered 850 batches a second on 2 loaded
cores, 1.2 ms each, against 33,000 a second inline)."""
SHARDS_MIN_RECEIVE_GAIN = 2.0
"""Least ratio of the CPU an element costs this process on threads to what receiving it
from a worker process costs (:func:`receive_seconds`) for shards in worker processes to pay:
the training loop's process receives every element, so processes that make cheap elements
only move the cost here, and add their hand-offs (a vectorized map ran 0.25M elements/s in
processes against 43.8M on threads)."""
WAITING_SHARE = 0.25
"""Share of their wall time a stage's calls spend on a CPU below which they mostly wait
(I/O, the network, a sleep): more threads overlap them, worker processes are never needed
(a map sleeping 2 ms a call ran 0.37x of 16 threads when moved to processes)."""
WAITING_MIN_SECONDS = 0.02
"""Least seconds of a stage's calls measured for their CPU share to say they wait."""
WAITING_MAX_BUSY = 1.0
"""Cores a pipeline with a stage whose calls wait may keep busy on threads and still be held
back by the waits (more threads for them) rather than by the GIL (processes may pay for its
other stages: a slow read feeding a GIL-bound parse keeps a core busy)."""
FEEDER_TRY_MAX_WAITED = 0.5
"""Where the budget holds too few spare cores for a feeder process to be chosen from the trial
alone: the most share of its time the training loop may wait in ``next()`` on threads for
AUTOTUNE to try one beside it. A loop that waits more runs at the pipeline's speed, which a
feeder on these cores does not raise; one that waits less is slowed, if at all, by the
pipeline's share of this process's CPU and GIL, which a feeder takes away."""
FEEDER_TRY_SPARE_CORES = 0.4
"""Least cores the budget must hold beyond those the pipeline keeps busy on threads for a
feeder to be tried beside the training loop at all: a pipeline that keeps the cores busy on
threads runs its work in parallel already (not held back by the GIL), and leaves no core for
a feeder to start and catch up on (measured on 2 cores: the images pipeline, 1.9 cores busy,
fed the loop 5-10% slower with a feeder tried; chess, 1.2-1.5 busy, as fast)."""
FEEDER_MEMORY_FACTOR = 2.0
"""Least memory the system must have available, as a multiple of what the training loop's
process holds resident, for a feeder to be tried beside it: the feeder holds its own copy of
the pipeline (at most this process's memory) and receives the pipeline's position, which
carries its shuffle buffers, while the threads' copy still runs."""
FEEDER_KEEP_SHARE = 0.95
"""Least rate the training loop keeps from the tried feeder process, as a share of its rate
on threads, for the feeder to stay. On 2 cores, chess: a loop holding the GIL 1.5 ms per
batch then sleeping 6.5 ms ran at the same rate from either (the feeder freed 2.2 ms of this
process's CPU per batch); one holding it 1 ms then sleeping 2 ms ran 5-8% slower from the
feeder; one holding it longer than it sleeps ran faster from the feeder."""


# ---------------------------------------------------------------- a map's calls
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
        seconds_per_element: Seconds of one element's call with the GIL its own
            (:attr:`MapCallFigures.work_per_element`).
        thread_rate: Elements per second measured on threads.
        process_rate: Elements per second estimated on processes.
        idle_cpus: CPUs the machine left idle while the calls ran together (``None``: not
            measured).
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
    idle_cpus: float | None = None

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


@dataclass(frozen=True)
class MapCallFigures:
    """What the measurement of a map's first tasks found (see
    :mod:`~feedline.placement.map_executor`).

    Attributes:
        busy_alone: Busy fraction of a call alone (CPU and run-queue wait over wall time).
        running_alone: CPU fraction of a call alone (CPU time over wall time).
        cores_together: CPUs the calls used while running together.
        concurrency: Calls that could run at once meanwhile.
        seconds_per_element: Wall time of one element's call, alone.
        thread_rate: Elements per second while the calls ran together.
        transport_per_element: Seconds to pickle an element's input and result plus its
            array bytes through shared memory, or ``None`` if they do not pickle.
        workers: The stage's parallelism.
        cpus: CPUs this process may run on.
        idle_cpus: CPUs the machine left idle while the calls ran together (``None`` where
            the system does not say).
        cpu_per_element: CPU seconds of the calls per element, over every call measured
            (``None``: not measured).
    """

    busy_alone: float
    running_alone: float
    cores_together: float
    concurrency: float
    seconds_per_element: float
    thread_rate: float
    transport_per_element: float | None
    workers: int
    cpus: int
    idle_cpus: float | None = None
    cpu_per_element: float | None = None

    @property
    def work_per_element(self) -> float:
        """Seconds one element's call takes with the GIL its own: in a worker process, or
        made inline.

        Its CPU time per element over every call measured, over the share of its time a
        call alone ran (what is left waits on I/O, which a process waits too). Not the wall
        time of the calls alone: those are a few, made while the pipeline starts, and pay
        what first calls pay; thousands of calls measure it steadily.
        """
        if self.cpu_per_element is None:
            return self.seconds_per_element
        return self.cpu_per_element / max(self.running_alone, 1e-9)

    @property
    def busy_together(self) -> float:
        """CPU each call that could run kept busy while they ran together."""
        return self.cores_together / max(self.concurrency, 1e-9)

    @property
    def slowdown(self) -> float:
        """How much less of a CPU a call got together than alone (about the number of calls
        for calls serialized by the GIL, about 1 for calls that release it)."""
        return self.running_alone / max(self.busy_together, 1e-9)

    @property
    def gil_share(self) -> float | None:
        """``(slowdown - 1) / (concurrency - 1)`` in [0, 1]: about 1 for calls serialized
        by the GIL (``None`` if the calls never overlapped)."""
        if self.concurrency <= 1:
            return None
        return max(0.0, min(1.0, (self.slowdown - 1) / (self.concurrency - 1)))

    def process_rate(self) -> float | None:
        """Elements per second estimated on worker processes: each element's call plus its
        transport both ways and its share of a task's fixed cost, on as many processes as
        the stage has workers and CPUs, capped by the consumer's serial half of the transport
        (``None`` if the elements do not pickle)."""
        if self.transport_per_element is None:
            return None
        per_element = self.work_per_element
        transport = self.transport_per_element
        per_task = PROCESS_TASK_SECONDS / max(1.0, PROCESS_TARGET_TASK_SECONDS / max(
            per_element, 1e-9))
        return min(min(self.cpus, self.workers) / (per_element + 2 * transport + per_task),
                   1 / max(2 * transport + per_task, 1e-9))


def map_stays_on_threads(cpus: int, workers: int, pipeline_workers: int | None) -> str | None:
    """Why a map's calls stay on threads without being measured, or ``None`` (measure them).

    Processes cannot run more calls at once than the stage's workers and the CPUs; and in
    one of several whole-pipeline worker processes (``multiprocess(n)``, ``n > 1``), the CPUs
    are shared out between the shards already. A feeder (the whole pipeline in one worker
    process, ``n == 1``) holds the whole CPU budget: its maps whose calls hold the GIL may
    move them to worker processes of their own, fed by the feeder (issue "Exact order on
    every core": the order-defining part in one process, the GIL-bound work fanned out).

    Example:
        >>> map_stays_on_threads(16, 16, None) is None, map_stays_on_threads(16, 16, 1) is None
        (True, True)
        >>> map_stays_on_threads(16, 4, 4)
        'runs in one of 4 worker processes of multiprocess() (the CPUs are shared out between them)'
        >>> map_stays_on_threads(1, 4, None)
        '1 worker(s) only'
    """
    if cpus < 2 or workers < 2:
        return f"{min(cpus, workers)} worker(s) only"
    if pipeline_workers is not None and pipeline_workers > 1:
        return (f"runs in one of {pipeline_workers} worker processes of multiprocess() (the "
                "CPUs are shared out between them)")
    return None


def place_map_calls(stage: str, figures: MapCallFigures, allow_processes: bool = True,
                    function_pickles: Callable[[], bool] = lambda: True) -> ExecutorDecision:
    """Threads or worker processes for a map's calls, from their measurement.

    Processes only when the function is on a CPU alone (:data:`MIN_BUSY`), its calls overlapped
    (:data:`MIN_CONCURRENCY`) and serialized (:data:`MIN_SLOWDOWN`, :data:`MIN_GIL_SHARE`),
    the machine left CPUs idle (:data:`MIN_IDLE_CPUS`: otherwise other processes hold them),
    the elements and the function pickle, and the estimated process rate beats the better of
    the threads and one call at a time by :data:`MAP_MIN_GAIN`. The margins are wide on
    purpose, so that a noisy machine does not flip the decision.

    Example:
        >>> held = MapCallFigures(busy_alone=1.0, running_alone=1.0, cores_together=1.0,
        ...                       concurrency=2.0, seconds_per_element=0.002,
        ...                       thread_rate=500.0, transport_per_element=1e-5, workers=2,
        ...                       cpus=2, idle_cpus=1.0)
        >>> place_map_calls("map(f)", held).kind
        'process'
        >>> import dataclasses
        >>> free = dataclasses.replace(held, cores_together=2.0, thread_rate=1000.0)
        >>> place_map_calls("map(f)", free).reason
        'the calls run in parallel on threads (the GIL is released)'
    """
    gil_share = figures.gil_share
    measured: dict[str, Any] = {
        "gil_share": gil_share, "busy_alone": figures.busy_alone,
        "busy_together": figures.busy_together, "concurrency": figures.concurrency,
        "seconds_per_element": figures.work_per_element,
        "thread_rate": figures.thread_rate, "idle_cpus": figures.idle_cpus}
    if gil_disabled():
        reason = FREE_THREADED_REASON
    elif figures.concurrency < MIN_CONCURRENCY:
        reason = "the calls rarely ran at once (the map is not the bottleneck)"
    elif figures.running_alone < MIN_BUSY:
        # CPU time alone, not with run-queue waits: on a loaded machine a 2 ms sleep
        # measured 70% "busy" alone, and would have gone to processes.
        reason = "the function mostly waits (I/O, sleep), which threads overlap"
    elif figures.slowdown < MIN_SLOWDOWN or (gil_share or 0.0) < MIN_GIL_SHARE:
        reason = "the calls run in parallel on threads (the GIL is released)"
    elif not allow_processes:
        reason = ("held back by the GIL; kept on threads "
                  "(AutotuneOptions(choose_executor=False))")
    elif figures.idle_cpus is not None and figures.idle_cpus < MIN_IDLE_CPUS:
        reason = (f"held back by the GIL, but the machine had {figures.idle_cpus:.1f} CPU "
                  "idle (other processes use them): processes would not run faster")
    elif (process_rate := figures.process_rate()) is None:
        reason = "held back by the GIL, but its inputs or results do not pickle"
    else:
        measured["process_rate"] = process_rate
        # Against the better of the threads and one call at a time: calls that hold the
        # GIL run inline when they stay (the tuner's serial setting), often faster than
        # threads that take turns at the GIL.
        if process_rate < MAP_MIN_GAIN * max(figures.thread_rate,
                                             1 / max(figures.work_per_element, 1e-9)):
            reason = ("held back by the GIL, but moving its elements between processes "
                      "would cost more than it gains")
        elif not function_pickles():
            reason = "held back by the GIL, but the function does not pickle"
        else:
            return ExecutorDecision(stage, "process", "the calls are serialized by the GIL",
                                    **measured)
    return ExecutorDecision(stage, "thread", reason, **measured)


def processes_cannot_pay(seconds_per_element: float, transport_per_element: float | None,
                         workers: int, cpus: int) -> bool:
    """Whether worker processes cannot pay for a map's calls whatever the GIL does with them:
    even with every call in parallel, the processes' estimated rate (as
    :meth:`MapCallFigures.process_rate` estimates it) stays below :data:`MAP_MIN_GAIN` times
    one call at a time, or the elements do not pickle. :func:`place_map_calls` would then keep
    the calls on threads whatever the calls together measure, so the measurement needs its
    tasks together only for how they share the GIL (where the tuner starts the stage), not
    for the machine's idle CPUs over :data:`~feedline.placement.map_executor.CONCURRENT_SECONDS`
    (a cheap map spent them on threads at half its inline rate, then longer at two workers).

    Slow first calls (``seconds_per_element`` from the calls alone) only make it answer
    ``False`` more often: a smaller time per call keeps the answer ``True``.

    Example:
        >>> processes_cannot_pay(1e-6, 5e-6, workers=2, cpus=2)  # 1 µs calls, 5 µs to send
        True
        >>> processes_cannot_pay(2e-3, 5e-6, workers=2, cpus=2)  # 2 ms calls
        False
    """
    if transport_per_element is None or gil_disabled():
        return True  # free-threaded: threads run the calls in parallel already
    per_element = max(seconds_per_element, 1e-9)
    figures = MapCallFigures(
        busy_alone=1.0, running_alone=1.0, cores_together=0.0, concurrency=1.0,
        seconds_per_element=per_element, thread_rate=0.0,
        transport_per_element=transport_per_element, workers=workers, cpus=cpus)
    best = figures.process_rate()
    return best is None or best < MAP_MIN_GAIN / per_element


def holds_the_gil(measured: CallMeasurement) -> bool:
    """Whether calls measured so hold the GIL at least :data:`SERIAL_GIL_SHARE` of their
    time (the GIL share of their CPU time, times their share of time on a CPU alone): they
    run one at a time however many threads run them. Once the tuner has such a stage at
    one worker (from the measurement, or trimmed there), a tuned ``map`` calls its function
    inline on its consumer's thread: one worker thread would only add a hand-off per task
    (issue 25: the tokenizer, 40 µs of Python a line, ran 2.5x slower on AUTOTUNE's
    threads than inline). Should the tuner set it more workers again (the measurement
    misled: one worker was slower than the threads measured), the map goes back to its
    threads.

    Example:
        >>> holds_the_gil(CallMeasurement(gil_share=0.95, busy_together=0.5,
        ...                               concurrency=2.0, busy_alone=1.0))
        True
        >>> holds_the_gil(CallMeasurement(gil_share=0.95, busy_together=0.5,
        ...                               concurrency=2.0, busy_alone=0.1))
        False
    """
    # Without a GIL (a free-threaded interpreter) calls that looked serialized were slowed
    # by something threads share (the machine, memory): more threads may still help.
    return measured.gil_share * measured.busy_alone >= SERIAL_GIL_SHARE and not gil_disabled()


def runs_inline(decision: MeasuredDecision | None, holds_the_gil: bool) -> bool:
    """Whether a map at one worker calls its function on its consumer's thread: its calls
    hold the GIL (``holds_the_gil``, the tuner's reading of the same measurement) and are
    short enough (:data:`INLINE_MAX_CALL_SECONDS`) that a hand-off to a worker thread costs
    more than overlapping them with the reading of the input gains.

    Example:
        >>> short = ExecutorDecision("map(f)", "thread", "", seconds_per_element=40e-6)
        >>> runs_inline(short, holds_the_gil=True), runs_inline(short, holds_the_gil=False)
        (True, False)
    """
    seconds = None if decision is None else decision.seconds_per_element
    return holds_the_gil and seconds is not None and seconds < INLINE_MAX_CALL_SECONDS


# ---------------------------------------------------------------- a whole pipeline
@dataclass(frozen=True)
class ProcessDecision:
    """What AUTOTUNE chose for a pipeline, and why.

    Attributes:
        mode: ``"threads"``, ``"processes"`` (shards of the pipeline in ``workers``
            processes) or ``"feeder"`` (the whole pipeline in one process, in its order).
        workers: Worker processes (0 on threads).
        cores_busy: CPU seconds per wall second during the trial (``None`` without one).
        cpu_budget: Cores the pipeline may use.
        reason: Why, in words.
        provisional: On threads until AUTOTUNE has compared the training loop's rate on
            threads with its rate from a feeder process (:func:`try_feeder_beside`,
            :func:`keep_feeder`); the comparison's outcome replaces this decision.
    """

    mode: str
    workers: int
    cores_busy: float | None
    cpu_budget: int
    reason: str
    provisional: bool = False


@dataclass(frozen=True)
class PipelinePlan:
    """What :func:`place_pipeline` allows before a trial.

    Attributes:
        move: ``None`` (stay on threads: ``reason`` says why), ``"shards"`` (the pipeline may
            be split among worker processes, in the single-process order or where
            ``deterministic=False`` allows another) or ``"feeder"`` (it may only move whole,
            to one feeder process: ``reason`` says why it cannot be split).
        reason: Why, in words.
    """

    move: str | None
    reason: str


def place_pipeline(budget: int, processes: bool | None, maps_in_processes: Iterable[str],
                   policy: str, source_cheap_to_reread: bool, exact_order: bool,
                   deterministic: bool, describe_source: Callable[[], str] = lambda: "it",
                   writes_files: Iterable[str] = ()) -> PipelinePlan:
    """Whether a whole pipeline may leave this process, and how, before any trial.

    Args:
        budget: Cores the pipeline may use.
        processes: ``AutotuneOptions.processes``: ``False`` never, ``True`` forces a move
            (no trial), ``None`` decides from a trial.
        maps_in_processes: Stages whose calls already run in worker processes.
        policy: The sharding plan's policy (:func:`feedline.distribute.autoshard.plan_sharding`).
        source_cheap_to_reread: Whether every worker may read the sharded source whole.
        exact_order: Whether the sharding keeps the single-process order.
        deterministic: Whether the pipeline must keep its order.
        describe_source: The sharded source in words (asked only for the reason).
        writes_files: Stages that write files (a ``cache(filename)``): the pipeline stays
            here, forced or not, since a copy in another process would write them too.

    Example:
        >>> place_pipeline(2, None, [], "file", False, True, True)
        PipelinePlan(move='shards', reason='')
        >>> place_pipeline(2, None, [], "file", False, False, True).move
        'feeder'
        >>> place_pipeline(1, None, [], "file", False, True, True).reason
        'one CPU to run on'
    """
    forced = processes is True
    if processes is False:
        return PipelinePlan(None, "AutotuneOptions(processes=False)")
    if budget < 2:
        return PipelinePlan(None, "one CPU to run on")
    if gil_disabled() and not forced:
        # What processes buy under the GIL (its work on every core) threads give here,
        # without a feeder's start-up, transport or second copy of the pipeline.
        return PipelinePlan(None, f"{FREE_THREADED_REASON} (the pipeline stays in this "
                            "process; AutotuneOptions(processes=True) or multiprocess(n) "
                            "move it)")
    in_processes = list(maps_in_processes)
    if in_processes and not forced:
        # Their calls already spread over worker processes; a trial on threads would see
        # this process idle and move the pipeline into processes that each start their
        # own pool (python_heavy: 2.3 s to the first batch instead of 0.4).
        return PipelinePlan(None, f"{', '.join(in_processes)}: calls already in worker "
                            "processes (executor='process')")
    writers = list(writes_files)
    if writers:
        return PipelinePlan(None, f"{', '.join(writers)} writes files, which a worker "
                            "process would write too: the pipeline stays in this process")
    if policy == "output":
        return PipelinePlan("feeder", "no stage boundary to shard the input at")
    if policy in ("data", "batch") and not source_cheap_to_reread and not forced:
        return PipelinePlan("feeder", f"sharding by {policy} would make every worker read "
                            f"all of {describe_source()} (only in-memory sources are worth it)")
    if not exact_order and deterministic:
        return PipelinePlan("feeder", f"sharding by {policy} would change the element order "
                            "(allow it with Options(deterministic=False))")
    return PipelinePlan("shards", "")


def maps_in_processes(decisions: Iterable[ExecutorDecision]) -> list[str]:
    """The stages among ``decisions`` whose calls moved to worker processes: a pipeline
    measured while they did stays where it is (its process's CPU no longer counts their
    work, which a whole-pipeline move would start again in every worker)."""
    return [decision.stage for decision in decisions if decision.kind == "process"]


def receive_seconds(bytes_per_element: float) -> float:
    """CPU seconds receiving one element of ``bytes_per_element`` bytes from another process
    costs this process (:data:`RECEIVE_SECONDS_PER_ELEMENT` plus its bytes at
    :data:`RECEIVE_BYTES_PER_SECOND`).

    Example:
        >>> round(receive_seconds(4e6) * 1e6)  # a 4 MB batch: 100 µs + 1 ms
        1100
    """
    return RECEIVE_SECONDS_PER_ELEMENT + bytes_per_element / RECEIVE_BYTES_PER_SECOND


@dataclass(frozen=True)
class TrialCosts:
    """What a pipeline's elements cost this process during its trial on threads.

    Attributes:
        cpu_per_element: CPU seconds of this process per element (every thread's).
        bytes_per_element: Bytes of an element (its arrays and scalars).
    """

    cpu_per_element: float
    bytes_per_element: float


def maps_that_wait(cpu_shares: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """The stages whose calls mostly wait, with the share of their time on a CPU, from each
    tuned stage's ``(CPU seconds, wall seconds)`` of its calls (thread time against wall
    time, per task): below :data:`WAITING_SHARE`, over at least
    :data:`WAITING_MIN_SECONDS` of calls.

    Example:
        >>> maps_that_wait({"map(fetch)": (0.004, 0.4), "map(parse)": (0.3, 0.35),
        ...                 "map(new)": (0.0, 0.001)})
        {'map(fetch)': 0.01}
    """
    return {stage: cpu / wall for stage, (cpu, wall) in cpu_shares.items()
            if wall >= WAITING_MIN_SECONDS and cpu < WAITING_SHARE * wall}


def place_shards(budget: int, busy: float | None, costs: TrialCosts | None = None,
                 waiting: Mapping[str, float] | None = None) -> ProcessDecision:
    """Shards in worker processes, or threads, for a pipeline that kept ``busy`` cores busy
    on threads (``None``: forced, no trial). It stays on threads when

    * a stage's calls mostly wait (``waiting``: :func:`maps_that_wait`) and the pipeline
      keeps less than :data:`WAITING_MAX_BUSY` cores busy: the tuner gives them more
      threads, which overlap the waits as well as processes would, without their start-up
      and transport;
    * the budget is less than :data:`PIPELINE_MIN_GAIN` times ``busy``;
    * an element costs this process less than :data:`SHARDS_MIN_RECEIVE_GAIN` times what
      receiving it from a worker would (``costs``; :func:`receive_seconds`).

    Otherwise it moves to ``budget / busy`` workers.

    Example:
        >>> place_shards(8, 1.0).workers, place_shards(2, 1.6).mode
        (8, 'threads')
        >>> place_shards(2, 0.2, waiting={"map(fetch)": 0.02}).reason
        'map(fetch): calls on a CPU 2% of their time: they wait, and more threads overlap them (processes would not be faster)'
        >>> print(place_shards(2, 1.0, TrialCosts(6e-6, 2048)).reason)
        an element costs 6 µs of CPU here on threads; receiving it from a worker process would cost 101 µs
    """
    if busy is not None:
        stay = None
        if waiting and busy < WAITING_MAX_BUSY:
            stay = "; ".join(f"{stage}: calls on a CPU {share:.0%} of their time"
                             for stage, share in waiting.items()) + \
                ": they wait, and more threads overlap them (processes would not be faster)"
        elif budget < PIPELINE_MIN_GAIN * busy:
            stay = f"threads keep {busy:.2f} of {budget} cores busy"
        elif costs is not None and costs.cpu_per_element < SHARDS_MIN_RECEIVE_GAIN * (
                receive := receive_seconds(costs.bytes_per_element)):
            stay = (f"an element costs {costs.cpu_per_element * 1e6:,.0f} µs of CPU here on "
                    f"threads; receiving it from a worker process would cost "
                    f"{receive * 1e6:,.0f} µs")
        if stay is not None:
            return ProcessDecision("threads", 0, busy, budget, stay)
    workers = max(2, min(budget, round(budget / max(busy or 1.0, 1.0))))
    reason = "forced by AutotuneOptions(processes=True)" if busy is None else \
        f"threads kept {busy:.2f} of {budget} cores busy"
    return ProcessDecision("processes", workers, busy, budget, reason)


def place_feeder(budget: int, busy: float | None, unshardable: str,
                 seconds_per_element: float = 0.0, bytes_per_element: float = 0.0,
                 replay_exact: bool = True) -> ProcessDecision:
    """One feeder process, or threads, for a pipeline that cannot be split
    (``unshardable`` says why): it moves when that frees this process (the training loop's)
    of enough CPU: the trial kept at least :data:`FEEDER_MIN_BUSY` cores busy, an element
    costs this process :data:`FEEDER_MIN_GAIN` times what receiving it would, and the budget
    holds :data:`FEEDER_SPARE_CORES` more. Where only the spare cores are missing, and
    :data:`FEEDER_TRY_SPARE_CORES` are left, the threads decision is provisional: a feeder
    is tried beside the training loop (:func:`try_feeder_beside`, :func:`keep_feeder`),
    taking over at a position, which needs an order that re-reads the same
    (``replay_exact``: not under ``deterministic=False``). ``busy=None``: forced.

    Example:
        >>> place_feeder(8, 1.2, "no stage boundary", 40e-6, 4000).mode
        'feeder'
        >>> place_feeder(2, 1.2, "no stage boundary", 40e-6, 4000).mode
        'threads'
    """
    if busy is not None:
        receive = bytes_per_element / RECEIVE_BYTES_PER_SECOND
        stay = None
        if busy < FEEDER_MIN_BUSY:
            stay = f"threads keep only {busy:.2f} cores busy here (a feeder process would " \
                   "not pay)"
        elif seconds_per_element < FEEDER_MIN_GAIN * receive:
            stay = (f"an element costs {seconds_per_element * 1e6:.0f} µs here, not much more "
                    f"than receiving its {bytes_per_element:,.0f} bytes would")
        elif budget - busy < FEEDER_SPARE_CORES:
            # What a feeder gives here depends on the training loop beside it, which the
            # trial did not run: AUTOTUNE measures it with the loop (keep_feeder), where a
            # core is left for the feeder to start on.
            return ProcessDecision("threads", 0, busy, budget, f"{unshardable}; and threads "
                                   f"keep {busy:.2f} of {budget} cores busy, too few left "
                                   "for a feeder process beside the training loop",
                                   provisional=(budget - busy >= FEEDER_TRY_SPARE_CORES
                                                and replay_exact))
        if stay is not None:
            return ProcessDecision("threads", 0, busy, budget, f"{unshardable}; and {stay}")
    reason = "forced by AutotuneOptions(processes=True)" if busy is None else \
        f"threads kept {busy:.2f} of {budget} cores busy in this process"
    return ProcessDecision("feeder", 1, busy, budget, f"{unshardable}; the whole pipeline "
                           f"runs in one feeder process, in its order ({reason})")


@dataclass(frozen=True)
class LoopRate:
    """The training loop's pace over a window: elements taken per second, and the share of
    the window it spent waiting in ``next()``."""

    elements_per_second: float
    waited: float

    def __str__(self) -> str:
        return f"{self.elements_per_second:,.0f} elements/s, waiting {self.waited:.0%}"


def try_feeder_beside(provisional: ProcessDecision, on_threads: LoopRate,
                      memory: tuple[int, int] | None = (0, 1)) -> ProcessDecision | None:
    """After a window on threads: ``None`` to try a feeder process beside the training loop,
    or the final decision (threads) when the loop waits on the pipeline
    (:data:`FEEDER_TRY_MAX_WAITED`) or a second copy of the pipeline may not fit in memory
    (``memory``: this process's resident bytes and the system's available bytes, ``None``
    where the system does not say; :data:`FEEDER_MEMORY_FACTOR`).

    Example:
        >>> first = ProcessDecision("threads", 0, 1.2, 2, "…", provisional=True)
        >>> try_feeder_beside(first, LoopRate(60_000, 0.02)) is None
        True
        >>> print(try_feeder_beside(first, LoopRate(150_000, 0.8)).reason)
        …; the training loop waits on the pipeline on threads (150,000 elements/s, waiting 80%), which a feeder process beside it would not feed faster here
        >>> print(try_feeder_beside(first, LoopRate(60_000, 0.02), (6 << 30, 8 << 30)).reason)
        …; a feeder process beside the training loop could need up to 12.0 GiB (twice this process's 6.0 GiB), and 8.0 GiB are available
    """
    budget, busy = provisional.cpu_budget, provisional.cores_busy
    if on_threads.waited > FEEDER_TRY_MAX_WAITED:
        return ProcessDecision(
            "threads", 0, busy, budget, f"{provisional.reason}; the training loop waits on "
            f"the pipeline on threads ({on_threads}), which a feeder process beside it would "
            "not feed faster here")
    if memory is None:
        return ProcessDecision("threads", 0, busy, budget, f"{provisional.reason}; the memory "
                               "a feeder process would have is not known here")
    resident, available = memory
    if available < FEEDER_MEMORY_FACTOR * resident:
        gib = 1 << 30
        return ProcessDecision(
            "threads", 0, busy, budget, f"{provisional.reason}; a feeder process beside the "
            f"training loop could need up to {FEEDER_MEMORY_FACTOR * resident / gib:.1f} GiB "
            f"(twice this process's {resident / gib:.1f} GiB), and {available / gib:.1f} GiB "
            "are available")
    return None


def keep_feeder(provisional: ProcessDecision, on_threads: LoopRate,
                from_feeder: LoopRate) -> ProcessDecision:
    """The decision after the training loop ran a window on threads and one from a feeder
    process: the feeder stays if the loop keeps :data:`FEEDER_KEEP_SHARE` of its rate (the
    loop's process then spends its CPU and GIL on the loop alone).

    Example:
        >>> first = ProcessDecision("threads", 0, 1.2, 2, "…", provisional=True)
        >>> keep_feeder(first, LoopRate(64_000, 0.01), LoopRate(63_000, 0.03)).mode
        'feeder'
        >>> keep_feeder(first, LoopRate(156_000, 0.03), LoopRate(141_000, 0.11)).mode
        'threads'
    """
    figures = f"the training loop ran {on_threads} on threads and {from_feeder} from a " \
              "feeder process"
    budget, busy = provisional.cpu_budget, provisional.cores_busy
    if from_feeder.elements_per_second >= FEEDER_KEEP_SHARE * on_threads.elements_per_second:
        return ProcessDecision("feeder", 1, busy, budget,
                               f"{provisional.reason.split('; and ')[0]}; the whole pipeline "
                               f"runs in one feeder process, in its order ({figures})")
    return ProcessDecision("threads", 0, busy, budget, f"{provisional.reason} ({figures})")

