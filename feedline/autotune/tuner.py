"""The tuner: sets each ``AUTOTUNE`` stage's parallelism from what the stage measures.

Every ``map(num_parallel_calls=AUTOTUNE)`` on threads registers its knobs
(:class:`~feedline.autotune.map_knobs.MapKnobs`) with its pipeline's
:class:`Tuner` (one per pipeline, on a thread of its own, ``feedline-autotune``, started by
the first registration and ended with the pipeline). Every :data:`PERIOD` seconds the tuner
reads each stage's counters: elements handed out, how many of its consumer's ``next()``
calls had to wait for a result, the time its tasks took, and the time it spent pulling its
input. Its model of a stage is Plumber's: the stage needs as many workers as its tasks keep
busy at the pipeline's current rate, plus headroom; more only help while its consumer waits
for it and its input is not what holds it back. A stage measuring where its function should
run (threads or processes) is left alone meanwhile. These figures, over the looks since a
stage's setting began, are a :class:`~feedline.profiling.model.StageWindow`: the model of the
pipeline :func:`feedline.profile` builds (:mod:`feedline.profiling.model`), in which a tuned
stage's workers are a segment of their own and its *load* is their busy share.

The setting is how many of the stage's threads work at once (a
:class:`~feedline.execution.gate.WorkerGate`), with two tasks per worker in its window:
one running, one queued, so a worker does not idle while the consumer is away. A stage
starts at its CPU budget. How far it may grow, its **bound**, is measured at every look:

* calls that compute get up to its *CPU workers*: its budget, or, with no budget set
  (``Options.autotune.cpu_budget`` and ``ThreadingOptions.max_parallelism`` unset),
  :data:`feedline.transforms.map.OVERSUBSCRIPTION` threads per CPU, used only when measured
  faster (a function holding the GIL part of the time leaves its core idle meanwhile);
* **calls that wait** (files, the network, a sleep: their threads' CPU time, measured per
  task, is a small share of their wall time) get as many threads as it takes for their CPU
  time to add up to the cores the budget gives the stage (``cores / share``), past the
  core count: calls on a CPU 1% of their time, on 2 cores, up to 200 threads. An explicit
  ``cpu_budget=k`` keeps its meaning: the stage's CPU time stays within ``k`` cores, so
  calls that compute keep ``k`` workers, and calls that wait may have more than ``k``
  threads (they use no CPU while they wait). Within the RAM budget
  (``Options.autotune.ram_budget``: what a worker holds, two tasks' elements, inputs and
  results at their sampled sizes, and its thread, times the workers) and a hard cap
  (:data:`feedline.transforms.map.MAX_THREADS`, or ``ThreadingOptions.max_parallelism``
  when set). The bound only limits what is tried: every step is kept on the rate it
  measures, so calls that hold the GIL (which, contended, look like waiting ones) do not
  keep threads that do not help.

The rules, at each look:

* **Grow** (the consumer waits for the stage, its workers are busy, its input takes less
  than :data:`INPUT_BOUND` of the time), within its bound: twice the workers while each
  step raises the rate clearly (an *ascent*: by at least :data:`SCALING` of the rise in
  workers; a step that scales almost linearly, :data:`LINEAR_SCALING`, makes the next one
  twice as large, up to :data:`MAX_FACTOR` times the workers; judged after
  :data:`ASCENT_TRIAL_TICKS` looks, the next rule applied in the same look), then steps
  of an eighth (:data:`FINE_STEP`: one worker below 16). A step is kept if the stage's
  rate rises by :data:`GAIN`, or if its consumer hardly waited for it since and the rate
  held (the consumer, not the stage, set it). Otherwise it is undone: a large step of an
  ascent is tried again half as large; else the stage is left alone for a while, twice as
  long after each failure (at most :data:`MAX_EXPLORE_BACKOFF` times :data:`PAUSE_TICKS`),
  then tries fewer workers, an eighth at a time while as fast (calls that came to hold the
  GIL on threads grown for calls that waited). Calls that wait 4 ms on 2 cores: 4 (the
  fill), 32, then 256 threads by 1.7 s, trimmed to those kept busy at 2.5 s.
* **Trim** (its workers are idle part of the time): the workers running at once go down
  to those its tasks keep busy (times :data:`HEADROOM`), in one step. Fewer threads
  leave cores, and the GIL, to the stages that limit the pipeline; on a few cores this is
  what beats "one thread per core" (benchmarks/profiling.py). Threads of calls that wait
  cost nothing while idle, and too few cost the rate whenever the consumer speeds up
  again: past its CPU workers, a stage is sized for :data:`WAIT_HEADROOM` times the most
  its tasks kept busy over the last :data:`PEAK_TICKS` looks (the 200 threads above, read
  at 10,000 elements/s: 40 busy, 80 kept), and is not explored down. A trim that leaves
  the consumer waiting and the rate lower is undone.
* **Explore** (its workers are busy and its consumer rarely waits for it, or its input
  takes more than :data:`INPUT_BOUND` of the time): an eighth fewer workers (one below
  16), kept unless the rate falls by more than :data:`GAIN` (busy workers may be busy
  waiting for each other: the GIL, memory bandwidth; and their GIL time slows the thread
  pulling the input); first tried :data:`EXPLORE_TICKS` looks after the stage began (at
  once for a stage its input holds back), then every :data:`EXPLORE_TICKS` looks, so the setting
  follows a workload that changes, and half as often after each try that was undone (down
  to one in :data:`MAX_EXPLORE_BACKOFF` times that).
* **Over its bound** (its elements grew: the RAM budget now holds fewer workers, by more
  than :data:`BOUND_SLACK`): down to the bound at once.
* **Start from the executor choice's measurement** (:class:`CallMeasurement`, once, as
  soon as the choice kept the stage on threads, if its calls did run about as many at
  once as the stage has workers, :data:`RELIABLE_CONCURRENCY`): short calls that hold the
  GIL at least :data:`SERIAL_GIL_SHARE` of their time (of their CPU time, times their share
  of time on a CPU alone) run one worker, inline (they run one at a time however many
  threads there are), kept unless slower than the rate measured meanwhile (a busy machine
  can make parallel calls look serial: then how the rate scaled gives the GIL share, and
  the stage goes to the threads that fill the GIL, or back to the workers measured when
  they ran more than that many times as fast); longer calls that hold it keep their
  workers and grow one at a time (their threads overlap their GIL-free parts and the
  input's reads); calls that left
  their CPUs idle part of the time when running together (below :data:`FILL_BUSY`:
  waiting for the GIL, files, the network) get, at once, as many threads as it takes for
  their GIL time to fill the GIL (:data:`HEADROOM` over the share of a call's time
  holding it, within its CPU workers and the CPUs the machine left idle meanwhile), rather
  than one more per trial; for calls that mostly wait (below :data:`WAITING_BUSY`) that
  fill is the first step of an ascent four times as large, judged as one. The other
  rules go on from there, and undo a start the measurement misled (a grow is tried while
  the consumer waits on busy workers).
* **One grows at a look** (several tuned stages): when the grow rule fires for two or more
  stages at one look, only the most loaded grows (the model's bottleneck among them,
  :func:`~feedline.profiling.model.most_loaded`; ties to the earlier registered). The
  others change nothing and are considered again at the next look, while the one that grew
  is on trial: more workers for a stage that does not limit the pipeline take cores, and
  the GIL, from the one that does. A pipeline of one tuned stage is tuned as above.
* Decisions are judged over the looks since the setting began (at most
  :data:`WINDOW_TICKS`); changes on the rate over :data:`TRIAL_TICKS` looks after them.
* Settings carry over to the stage's next iterator (each epoch of a ``repeat``).

This adapts when the work changes mid-run (heavier elements use more cores: the consumer
starts waiting, the stage grows). Each change is kept as a :class:`TuningDecision` with its
reason and the figures behind it (``PipelineIterator.statistics().tuning``,
:func:`feedline.profile`'s report) and logged (logger ``feedline.autotune``, ``INFO``).
The stages' buffers stay within the RAM budget as before (``prefetch`` grows only within
``Options.autotune.ram_budget``).
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Protocol

from feedline.core.interpreter import gil_disabled
from feedline.placement.policy import INLINE_MAX_CALL_SECONDS
from feedline.profiling.model import Snapshot, StageWindow, most_loaded
from feedline.profiling.records import TuningDecision

_log = logging.getLogger("feedline.autotune")

PERIOD = 0.25
"""Seconds between two looks at the stages."""

HEADROOM = 1.3
"""Workers kept per core of measured work when trimming; threads per GIL of measured GIL
time when starting from the executor choice's measurement."""

GAIN = 1.03
"""Workers added are kept when the stage's rate rises at least this much; fewer are kept
unless it falls by more."""

WAITS_TO_GROW = 0.15
"""Share of the consumer's ``next()`` calls that waited above which the stage grows."""

PAUSE_TICKS = 12
"""Looks without changing a stage after a change of it was undone."""

TRIAL_TICKS = 4
"""Looks after a change before it is judged (a second: rates are noisy), on the rate since
the change."""

SETTLE_SECONDS = 0.75
"""Seconds a setting runs before the tuner acts on what it measured."""

WINDOW_TICKS = 8
"""Looks a decision is judged over at most (two seconds): enough that a hiccup of a shared
machine does not decide, few enough to follow a workload that changes."""

EXPLORE_TICKS = 40
"""Looks between two tries of one worker fewer (ten seconds)."""

MAX_EXPLORE_BACKOFF = 8
"""The interval between tries of one worker fewer (or one more) doubles while they fail,
up to this many times :data:`EXPLORE_TICKS` (or :data:`PAUSE_TICKS`)."""

INPUT_BOUND = 0.5
"""Share of the time a stage spends pulling its input above which the input, not its
workers, limits it: it does not grow, and it tries one worker fewer even while its
consumer waits."""

BUSY_TO_GROW = 0.6
"""Share of its workers' time a stage must be computing to get one more: idle workers
mean its input, not its work, holds it back."""

SERIAL_GIL_SHARE = 0.8
"""Share of its calls' time holding the GIL (measured by the stage's executor choice) from
which a stage of short calls (:attr:`CallMeasurement.short`) starts at one worker, inline:
its calls run one at a time however many threads it has, and each hands off to a thread
(the tokenizer: 2.5x faster inline). Longer calls keep the workers measured: their
threads overlap the calls' GIL-free parts (NumPy) and the input's reads (chess, a 2 ms
parse judged 100% serialized: one worker 194k records/s, two 310k), and the tuner's trials
decide from there."""

RELIABLE_CONCURRENCY = 0.9
"""Calls running at once while measured, per worker of the stage, needed for the tuner to
start from the measurement. Fewer, and the shares mean little: the first calls of a
process (its imports, lazy set-ups) measured images, which release the GIL 70% of the
time, as serialized (1.65 calls at once of 2)."""

SCALING = 0.5
"""Share of a step's rise in workers the rate must rise by for the ascent to go on (twice
the workers: 1.5 times the rate); less, and steps of :data:`FINE_STEP` follow."""

LINEAR_SCALING = 0.8
"""Share of a step's rise in workers from which the rate scaled almost linearly: the next
step of the ascent is twice as large (calls that wait, far from any limit)."""

MAX_FACTOR = 8
"""Largest step of an ascent: this many times the workers."""

FINE_STEP = 8
"""Out of the ascent, workers change by ``workers // FINE_STEP`` (at least one): a step
whose effect on the rate stands out of its noise, whatever the workers."""

ASCENT_TRIAL_TICKS = 3
"""Looks after a step of an ascent before it is judged (half a second on the rate since
the look after it): it is expected to raise the rate by half or more, far above the noise."""

WAIT_HEADROOM = 2.0
"""Workers kept per worker its tasks kept busy at most lately, past its CPU workers, for
calls that wait: a call's wall time grows with the machine's load and the GIL's hand-offs
(a 4 ms sleep took 4.8 ms on a loaded machine, more while the consumer held the GIL), and
a thread that waits for work costs nothing."""

PEAK_TICKS = 40
"""Looks over which a stage of calls that wait is sized for the most workers its tasks
kept busy (ten seconds): its idle threads cost nothing, too few cost the rate whenever
its consumer speeds up again."""

SHARE_FLOOR = 1e-3
"""Least share of their wall time calls are taken to spend on a CPU (a measurement of
zero would give no bound)."""

BOUND_SLACK = 1.125
"""A stage is brought down to its RAM bound once over it by this factor: the elements'
sizes are sampled, and a bound that moves with them must not move the setting each look."""

FILL_BUSY = 0.9
"""Share of their time calls running together spent on a CPU below which the cores they
leave idle are filled with more threads (images on 2 cores: 77%; 4 threads read 20% more
than 2)."""

WAITING_BUSY = 0.25
"""Share of their time calls running together spent on a CPU below which they are calls
that wait (on I/O, a sleep): their fill is the first step of an ascent, judged as one, and
the next step is four times the workers (their measurement showed them overlapping freely,
so each step is expected to scale about linearly)."""


def _filling(stage: TunableStage, holding: float) -> int:
    """Threads whose GIL time fills the GIL, with :data:`HEADROOM`, within the stage's CPU
    workers: ``holding`` is the share of a call's time it holds the GIL. (Past those, calls
    that wait grow by measured steps: a jump to hundreds of threads on two calls' figures
    would be a guess.)"""
    return min(stage.cpu_workers, math.ceil(HEADROOM / max(holding, 1e-3) - 1e-9))


def _idle_filling(workers: int, busy: float, idle_cpus: float | None) -> int:
    """Threads that fill the CPUs the machine left idle: ``workers`` plus as many more as
    ``idle_cpus`` holds at ``busy`` CPU each (rounded; unmeasured: no limit).

    Example:
        >>> _idle_filling(2, 0.81, 0.15), _idle_filling(2, 0.5, 0.9), _idle_filling(2, 0.01, 1.9)
        (2, 4, 192)
    """
    if idle_cpus is None:
        return 1 << 30
    return workers + round(max(idle_cpus, 0.0) / max(busy, 1e-2))


@dataclass(frozen=True)
class Bound:
    """How many workers a stage may have now, and why (see the module doc).

    Attributes:
        workers: The bound.
        share: Share of its calls' wall time on a CPU, as last measured (``None``: not yet).
        by_cpu: Workers whose CPU time adds up to the stage's cores.
        by_ram: Workers whose elements in flight and threads fit the RAM budget.
        limit: What holds it: ``"threads"`` (its hard cap), ``"cpu workers"``, ``"cpu"``
            or ``"ram"``.
    """

    workers: int
    share: float | None
    by_cpu: int
    by_ram: int
    limit: str

    def figures(self) -> dict[str, float]:
        """Its numbers, as a :class:`TuningDecision` keeps them.

        Example:
            >>> Bound(8, 0.25, 8, 100, "cpu").figures()
            {'bound': 8.0, 'by_cpu': 8.0, 'by_ram': 100.0, 'cpu_share': 0.25}
        """
        numbers = {"bound": float(self.workers), "by_cpu": float(self.by_cpu),
                   "by_ram": float(self.by_ram)}
        if self.share is not None:
            numbers["cpu_share"] = self.share
        return numbers


def stage_bound(stage: TunableStage, share: float | None) -> Bound:
    """The most workers ``stage`` may have, its calls spending ``share`` of their wall time
    on a CPU (``None``: not measured yet: its CPU workers).

    Example:
        >>> class Stage:
        ...     max_workers, cpu_workers, cores = 256, 4, 2
        ...     ram_budget, bytes_per_worker = 1 << 30, 65536.0
        >>> stage_bound(Stage(), 0.01).workers  # 2 cores / 0.01: 200 threads' CPU fills 2
        200
        >>> stage_bound(Stage(), 0.2)  # doctest: +NORMALIZE_WHITESPACE
        Bound(workers=10, share=0.2, by_cpu=10, by_ram=16384, limit='cpu')
        >>> stage_bound(Stage(), 1.0).workers, stage_bound(Stage(), None).workers
        (4, 4)
    """
    floor, hard = stage.cpu_workers, stage.max_workers
    by_ram = int(stage.ram_budget // max(stage.bytes_per_worker, 1.0))
    if share is None:
        return Bound(min(floor, hard), None, floor, by_ram, "cpu workers")
    by_cpu = math.floor(stage.cores / max(share, SHARE_FLOOR) + 1e-9)
    workers, limit = min((hard, "threads"), (by_cpu, "cpu"), (by_ram, "ram"),
                         key=lambda pair: pair[0])
    if workers <= floor:
        workers, limit = min(floor, hard), "cpu workers" if floor <= hard else "threads"
    return Bound(workers, share, by_cpu, by_ram, limit)


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

    @property
    def short(self) -> bool:
        """Whether a call is short enough that a hand-off to a worker thread is much of its
        cost (:data:`~feedline.placement.policy.INLINE_MAX_CALL_SECONDS`; unmeasured counts
        as short)."""
        return self.seconds_per_call is None or self.seconds_per_call < INLINE_MAX_CALL_SECONDS


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


class TunableStage(Protocol):
    """What a stage offers the tuner."""

    name: str

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        """(elements handed out, ``next()`` calls, calls that waited, seconds its tasks
        took, seconds spent pulling its input, CPU seconds of its tasks), over every
        iterator of the stage so far."""

    @property
    def tuned_workers(self) -> int:
        """Workers allowed to run at once now."""

    @tuned_workers.setter
    def tuned_workers(self, value: int) -> None: ...

    @property
    def max_workers(self) -> int:
        """The most threads the stage may have, whatever its calls (its hard cap)."""

    @property
    def cpu_workers(self) -> int:
        """The most workers its CPU budget gives calls that compute."""

    @property
    def cores(self) -> int:
        """CPUs its budget gives it: what its calls' CPU time may add up to."""

    @property
    def ram_budget(self) -> int:
        """Bytes its workers may hold."""

    @property
    def bytes_per_worker(self) -> float:
        """Bytes one more worker holds (its tasks' elements, its thread)."""

    @property
    def tuning_paused(self) -> bool:
        """Whether the stage's figures mean nothing for now (it is measuring something)."""

    @property
    def tuning_done(self) -> bool:
        """Whether the tuner should forget the stage (closed, or moved to processes)."""

    @property
    def measured_calls(self) -> CallMeasurement | None:
        """How its calls ran on threads, as its executor choice measured them (``None``
        when not measured, or when they run in processes)."""


_Look = Snapshot
"""(time, elements, calls, waits, busy seconds, input seconds, CPU seconds) at one look: the
snapshot a :class:`~feedline.profiling.model.StageWindow` is measured between."""


class _Control:
    """The tuner's memory of one stage: kept across the stage's iterators (each epoch of a
    ``repeat`` builds a new one), which start at the setting the last one had."""

    def __init__(self, stage: TunableStage) -> None:
        self.stage = weakref.ref(stage)
        self.name = stage.name
        self.last: _Look | None = None
        self.trial: tuple[str, int, float, int] | None = None  # kind, previous, rate, due
        self.paused_until = 0
        self.explore_at = 0
        # Busy workers its consumer rarely waits for are first tried one fewer after
        # EXPLORE_TICKS looks, as later (the tuner's look count when it registered is
        # added): the setting it starts from is measured (its executor choice), and a try
        # costs a second at the slower setting (chess: a try at 2.2 s, 20% slower, cost a
        # 3 s run 7%). A stage its input holds back tries at once.
        self.first_explore = EXPLORE_TICKS
        self.explore_every = EXPLORE_TICKS  # looks between tries of one worker fewer
        self.grow_pause = PAUSE_TICKS  # looks without a grow after one that did not help
        self.measurement_used = False  # whether its executor choice's figures were used
        # Growing by steps of ``factor`` times the workers (an ascent), or by FINE_STEP.
        self.ascending = True
        self.factor = 2
        self.share: float | None = None  # its calls' CPU share, as last measured
        # Trying fewer workers while as fast (after more did not help).
        self.descending = False
        # Workers its tasks kept busy, at each of the last PEAK_TICKS looks.
        self.peaks: collections.deque[float] = collections.deque(maxlen=PEAK_TICKS)
        # Looks since the setting began, the last WINDOW_TICKS of them.
        self.history: collections.deque[_Look] = collections.deque(maxlen=WINDOW_TICKS)
        self.setting = stage.tuned_workers
        self.counters = TuningCounters()
        self.registered = 0  # its place in the order the stages registered
        # When it registered, and the elements it had handed out then: the rate its
        # consumer saw while its executor choice measured its calls.
        self.since = (time.perf_counter(), stage.tuning_counters()[0])


@dataclass(frozen=True)
class _Grow:
    """A grow a stage's rule calls for at one look: made only if the stage is the most
    loaded of those whose grow rule fired at that look."""

    control: _Control
    stage: TunableStage
    window: StageWindow
    workers: int
    trial: tuple[str, int, float, int]  # kind, previous, rate, due
    reason: str
    figures: dict[str, float]


def _rate_since(control: _Control, stage: TunableStage) -> float:
    """Elements per second the stage handed out since it registered (infinite before any:
    nothing measured)."""
    started, elements = control.since
    handed_out = stage.tuning_counters()[0] - elements
    seconds = time.perf_counter() - started
    return handed_out / seconds if handed_out > 0 and seconds > 0 else math.inf


def _workers(count: int) -> str:
    return "one worker" if count == 1 else f"{count} workers"


def _fine(workers: int) -> int:
    """A step out of the ascent: an eighth of the workers, at least one."""
    return max(1, workers // FINE_STEP)


class Tuner:
    """Tunes the registered stages of one pipeline (see the module doc).

    Args:
        period: Seconds between two looks.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(2000).map(lambda x: x * 2, num_parallel_calls=fl.AUTOTUNE)
        >>> with iter(ds) as it:
        ...     total = sum(int(x) for x in it)
        >>> total
        3998000
    """

    def __init__(self, period: float = PERIOD) -> None:
        self._period = period
        self._controls: list[_Control] = []
        # By stage key: survives the stage's epochs. A dataset node is held weakly: an
        # interleave's function makes a tuned stage per element, whose node, once dropped,
        # is never seen again (held strongly, one control per element would pile up).
        self._known: dict[object, _Control] = {}
        self._known_nodes: weakref.WeakKeyDictionary[object, _Control] = \
            weakref.WeakKeyDictionary()
        self._registered = itertools.count()
        self._decisions: list[TuningDecision] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and wake(): look now
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()
        self._ticks = 0

    def register(self, stage: TunableStage, key: object = None) -> TuningCounters:
        """Tune ``stage`` from now on (the tuner's thread starts with the first stage).

        Args:
            stage: The stage's knobs (:class:`~feedline.autotune.map_knobs.MapKnobs`).
            key: What identifies the stage across its iterators (its dataset node;
                default: its name).

        Returns:
            The counters the stage keeps: shared with the stage's earlier iterators (the
            previous epoch's), whose setting the new one starts from.
        """
        key = stage.name if key is None else key
        try:
            weakref.ref(key)
        except TypeError:  # a name: kept as long as the tuner
            known_by = self._known
        else:
            known_by = self._known_nodes
        with self._lock:
            known = known_by.get(key)
            if known is not None:
                # The same stage in a new epoch: carry on from where its tuning was.
                stage.tuned_workers = known.setting
                known.stage = weakref.ref(stage)
                if known not in self._controls:
                    self._controls.append(known)
                control = known
            else:
                control = known_by[key] = _Control(stage)
                control.first_explore += self._ticks
                control.registered = next(self._registered)
                self._controls.append(control)
            if self._stop.is_set():
                return control.counters
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="feedline-autotune")
                self._thread.start()
            return control.counters

    def settings(self) -> dict[str, int]:
        """Each stage's current setting (threads working at once), by stage name, in the
        order the stages registered (the live status line shows them)."""
        with self._lock:
            controls = sorted([*self._known.values(), *self._known_nodes.values()],
                              key=lambda control: control.registered)
            return {control.name: control.setting for control in controls}

    def call_times(self) -> dict[str, tuple[float, float]]:
        """Each stage's ``(CPU seconds, wall seconds)`` of its calls so far (its tasks'
        thread time and wall time), by stage name: what says whether its calls compute or
        wait (:func:`~feedline.placement.policy.maps_that_wait`).

        Example:
            >>> Tuner().call_times()
            {}
        """
        with self._lock:
            controls = [*self._known.values(), *self._known_nodes.values()]
        return {control.name: (control.counters.cpu, control.counters.busy)
                for control in controls}

    def decisions(self) -> tuple[TuningDecision, ...]:
        """Every change made so far, oldest first."""
        with self._lock:
            return tuple(self._decisions)

    def wake(self) -> None:
        """Look at the stages now, not at the end of the period: a stage has something new
        to act on (its executor choice has just measured its calls)."""
        self._wake.set()

    def stop(self) -> None:
        """End the tuner's thread. Idempotent."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        # Ends with the pipeline (stop()), or once every stage it tuned is gone.
        while True:
            self._wake.wait(self._period)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.tick()
            with self._lock:
                if not self._controls:
                    self._thread = None
                    return

    def tick(self) -> None:
        """Look at every stage once (the tuner's thread calls this every period).

        Each stage's window is taken first; then each stage's rules run on it. Of the
        stages whose grow rule fires, only the most loaded grows (see the module doc)."""
        self._ticks += 1
        with self._lock:
            controls = list(self._controls)
        looked: list[tuple[_Control, TunableStage, StageWindow]] = []
        for control in controls:
            stage = control.stage()
            if stage is None or stage.tuning_done:
                with self._lock:
                    # Unless the stage's next iterator (an epoch of repeat()) registered
                    # meanwhile: that one is tuned on.
                    if control.stage() is stage:
                        self._controls.remove(control)
                continue
            window = self._look(control, stage)
            if window is not None:
                looked.append((control, stage, window))
        grows = [grow for control, stage, window in looked
                 if (grow := self._step(control, stage, window)) is not None]
        if grows:
            # The model's bottleneck among them (ties to the earlier registered): more
            # workers elsewhere would take cores, and the GIL, from the stage that limits
            # the pipeline. The others are considered again at the next look.
            self._grow(grows[most_loaded([grow.window for grow in grows])])

    def _look(self, control: _Control, stage: TunableStage) -> StageWindow | None:
        """Take a snapshot of the stage's counters: its window since its setting began
        (at most the last :data:`WINDOW_TICKS` looks), or ``None`` when there is nothing
        to judge yet (or the stage was just set from its executor choice's measurement)."""
        if stage.tuning_paused:
            control.last = None  # start afresh once it means something
            control.history.clear()
            return None
        if not control.measurement_used:
            control.measurement_used = True
            measured = stage.measured_calls
            if measured is not None and self._start_from(stage, control, measured):
                return None
        now = time.perf_counter()
        last = control.last
        control.last = (now, *stage.tuning_counters())
        history = control.history
        if last is None or not history:
            history.append(control.last)
            return None
        if control.last[2] - last[2] <= 0 or now <= last[0]:
            return None  # the consumer is not reading: nothing to learn
        # Judged over the looks since the setting began (at most the last WINDOW_TICKS):
        # one look, a quarter of a second, is too short; a hiccup of the machine would
        # trim a busy stage. The window lets a long-held setting follow a workload change.
        since = history[0]
        history.append(control.last)
        return StageWindow.between(since, control.last, stage.tuned_workers)

    def _step(self, control: _Control, stage: TunableStage, window: StageWindow
              ) -> _Grow | None:
        """Apply the rules to the stage's ``window``; a grow its rule calls for is returned,
        not made: :meth:`tick` chooses which stage grows."""
        held, rate, waited = window.seconds, window.rate, window.waited
        occupied, pulling = window.occupied, window.pulling
        if window.share is not None:  # else its tasks took no time: the last share holds
            control.share = window.share
        workers = window.workers
        bound = stage_bound(stage, control.share)
        figures = {"rate": rate, "waited": waited, "occupied": occupied, "pulling": pulling,
                   **bound.figures()}
        # Calls that wait, on more threads than its CPU workers: idle threads cost them
        # nothing (a thread waiting for work takes no CPU), too few cost the rate. Such a
        # stage is sized for the most its tasks kept busy lately, not for the last look.
        waiting = workers > stage.cpu_workers and bound.workers > stage.cpu_workers
        control.peaks.append(occupied)
        judged = False  # a grow was just kept: the next rule may act at once
        trial = control.trial
        if trial is not None:
            kind, previous, rate_before, due = trial
            if self._ticks < due:
                return
            control.trial = None
            figures["rate_before"] = rate_before
            if kind == "grow":
                judged = self._judge_grow(stage, control, previous, workers, rate,
                                          rate_before, waited, figures)
                if not judged:
                    return
                figures.pop("rate_before")
            elif kind == "trim" and waited > WAITS_TO_GROW and rate < rate_before / GAIN:
                self._set(stage, control, previous,
                          f"fewer workers left its consumer waiting {waited:.0%} of calls and "
                          f"the rate fell ({rate:,.0f} vs {rate_before:,.0f} elements/s)",
                          figures)
                control.paused_until = self._ticks + PAUSE_TICKS
                return
            elif kind == "explore" and rate < rate_before / GAIN:
                self._set(stage, control, previous,
                          f"fewer workers were slower ({rate:,.0f} vs {rate_before:,.0f} "
                          "elements/s)", figures)
                if control.descending:
                    # Neither more nor fewer: this is its setting, until the pause ends.
                    control.descending = False
                    control.paused_until = self._ticks + control.grow_pause
                # Each try costs a second at the slower setting: try less often while
                # trying keeps failing.
                control.explore_every = min(control.explore_every * 2,
                                            EXPLORE_TICKS * MAX_EXPLORE_BACKOFF)
                control.explore_at = self._ticks + control.explore_every
                return
            elif kind == "serial" and rate < rate_before / GAIN:
                self._undo_serial(stage, control, previous, rate, rate_before, figures)
                return
            elif kind == "explore":
                control.explore_every = EXPLORE_TICKS
                control.descending = control.descending and workers > 1
                self._note(control, f"{_workers(workers)} {'was' if workers == 1 else 'were'} "
                                    f"as fast as {previous} ({rate:,.0f} vs {rate_before:,.0f} "
                                    "elements/s): kept", figures)
                return
            else:
                return
        if not judged and (self._ticks < control.paused_until or held < SETTLE_SECONDS):
            return
        busy = window.load
        figures["busy"] = busy
        if waiting:
            figures["peak"] = max(control.peaks)
            needed = max(stage.cpu_workers, math.ceil(max(control.peaks) * WAIT_HEADROOM))
        else:
            needed = max(1, math.ceil(occupied * HEADROOM))
        # Its input, pulled on its consumer's thread, is what the consumer waits for: more
        # workers cannot help, and their GIL time slows that thread.
        input_bound = pulling > INPUT_BOUND
        if (waited > WAITS_TO_GROW and busy > BUSY_TO_GROW and not input_bound
                and workers < bound.workers and not control.descending):
            target = min(bound.workers, workers * control.factor if control.ascending
                         else workers + _fine(workers))
            ticks = ASCENT_TRIAL_TICKS if control.ascending else TRIAL_TICKS
            return _Grow(control, stage, window, target,
                         ("grow", workers, rate, self._ticks + ticks),
                         f"its consumer waited for {waited:.0%} of calls while its "
                         f"{_workers(workers)} {'was' if workers == 1 else 'were'} "
                         f"{busy:.0%} busy{self._why_bound(bound, target)}",
                         figures)
        elif workers > bound.workers * BOUND_SLACK and bound.limit == "ram":
            self._set(stage, control, bound.workers,
                      f"{workers} workers hold more than the RAM budget allows "
                      f"({stage.bytes_per_worker:,.0f} bytes each: {bound.by_ram} fit)",
                      figures)
        elif needed < workers:
            # Fewer workers are enough now; should its consumer come to wait again, the
            # stage grows back by an ascent (a trim says the demand moved, not the knee).
            control.ascending, control.factor = True, 2
            control.trial = ("trim", workers, rate, self._ticks + TRIAL_TICKS)
            kept = (f"at most {max(control.peaks):.1f} workers busy lately" if waiting
                    else f"{occupied:.1f} workers busy")
            self._set(stage, control, needed,
                      f"its tasks kept {kept} at {rate:,.0f} elements/s: "
                      f"{workers} workers were {busy:.0%} busy", figures)
        elif judged:
            return  # fewer are tried once the new setting has run a while
        elif workers > 1 and (control.descending or (
                (input_bound or (waited < WAITS_TO_GROW
                                 and self._ticks >= control.first_explore))
                and not waiting and self._ticks >= control.explore_at)):
            # Busy workers may be busy waiting for each other (the GIL, a lock, memory
            # bandwidth): only trying tells. Fewer is kept unless clearly slower. After
            # more workers did not help a stage its consumer waits for, fewer are tried at
            # once, and again while as fast (calls that came to hold the GIL, on threads
            # grown for calls that waited). Not for the threads of calls that wait
            # otherwise: idle, they cost nothing, and are trimmed to those kept busy.
            control.explore_at = self._ticks + control.explore_every
            control.trial = ("explore", workers, rate, self._ticks + TRIAL_TICKS)
            why = ("more did not help" if control.descending
                   else f"its input took {pulling:.0%} of the time" if input_bound
                   else f"its consumer waited for {waited:.0%} of calls")
            step = _fine(workers)
            self._set(stage, control, workers - step,
                      f"trying {_workers(step)} fewer ({rate:,.0f} elements/s with {workers}; "
                      f"{why})", figures)

    def _grow(self, grow: _Grow) -> None:
        grow.control.trial = grow.trial
        self._set(grow.stage, grow.control, grow.workers, grow.reason, grow.figures)

    def _judge_grow(self, stage: TunableStage, control: _Control, previous: int,
                    workers: int, rate: float, rate_before: float, waited: float,
                    figures: dict[str, float]) -> bool:
        """Keep or undo a grow from ``previous`` to ``workers`` on the rate each measured
        (``waited``: share of the consumer's calls that waited since the grow); whether it
        was kept (the other rules may then act at once: the next step of an ascent, or a
        trim of what the last step overshot)."""
        rise = workers / max(previous, 1) - 1
        gain = rate / max(rate_before, 1e-9) - 1
        step = workers - previous
        if gain < GAIN - 1:
            if waited < WAITS_TO_GROW and rate >= rate_before / GAIN:
                # As fast, and its consumer hardly waited for it since: the consumer (or
                # the machine) set the rate, which says nothing of the workers. They stay;
                # those its tasks do not keep busy are trimmed later.
                control.ascending, control.factor = True, 2
                return False
            self._set(stage, control, previous,
                      f"{'one more worker' if step == 1 else f'{step} more workers'} did not "
                      f"help ({rate:,.0f} vs {rate_before:,.0f} elements/s, its consumer "
                      f"waiting for {waited:.0%} of calls)", figures)
            if control.ascending and control.factor > 2:
                # The step overshot: one half as large, from where it was, next.
                control.factor //= 2
                return False
            control.ascending, control.factor = False, 2
            # Its consumer waits for it, yet more workers did not help: fewer may do as
            # well (calls that wait for each other: the GIL); tried after the pause.
            control.descending = previous > 1
            # Each try costs a second at the slower setting: try less often while trying
            # keeps failing.
            control.paused_until = self._ticks + control.grow_pause
            control.grow_pause = min(control.grow_pause * 2, PAUSE_TICKS * MAX_EXPLORE_BACKOFF)
            return False
        control.grow_pause = PAUSE_TICKS
        control.descending = False
        if gain < SCALING * rise:
            # Kept (faster), but past the knee: finer steps from here.
            control.ascending, control.factor = False, 2
        else:
            if gain >= LINEAR_SCALING * rise and control.ascending:
                control.factor = min(control.factor * 2, MAX_FACTOR)
            control.ascending = True
        return True

    @staticmethod
    def _why_bound(bound: Bound, target: int) -> str:
        if target < bound.workers:
            return ""
        if bound.limit == "cpu":
            return (f"; its calls on a CPU {bound.share:.1%} of their time: "
                    f"{bound.workers} threads' CPU fills its cores")
        if bound.limit == "ram":
            return f"; the RAM budget holds {bound.workers} workers"
        return f"; at most {bound.workers} ({bound.limit})"

    def _start_from(self, stage: TunableStage, control: _Control,
                    measured: CallMeasurement) -> bool:
        """Set the stage from its executor choice's measurement; whether it changed."""
        workers = stage.tuned_workers
        share, busy = measured.gil_share, measured.busy_together
        if measured.concurrency < RELIABLE_CONCURRENCY * workers:
            return False
        figures = {"gil_share": share, "busy_together": busy, "busy_alone": measured.busy_alone,
                   "concurrency": measured.concurrency, "rate": measured.rate}
        # A call's GIL time: the share of its CPU time that holds the GIL, of the time it
        # is on a CPU at all. A call that mostly waits (files, a sleep) holds it little,
        # whatever share of its few CPU microseconds the measurement gave the GIL (a 4 ms
        # sleep measured 80-100%, and ran one at a time instead of 64).
        holding = 0.0 if gil_disabled() else share * measured.busy_alone
        if holding >= SERIAL_GIL_SHARE and workers > 1 and measured.short:
            # Judged on the rate measured with ``workers``: a machine busy with other work,
            # or the first calls' set-up, can make calls that run in parallel look serial.
            # The rate its consumer saw meanwhile where lower: the measurement's counts its
            # tasks' elements over their span, not what its consumer took (a cheap map:
            # 300k elements/s measured, 60k taken on threads, 140k inline, judged slower).
            rate = min(measured.rate, _rate_since(control, stage))
            figures["rate"] = rate
            control.trial = ("serial", workers, rate, self._ticks + TRIAL_TICKS)
            self._set(stage, control, 1,
                      f"its calls hold the GIL {share:.0%} of their time: they run one at a "
                      "time however many workers it has, and more take the GIL from its input",
                      figures)
            return True
        if holding >= SERIAL_GIL_SHARE:
            # Longer calls that hold the GIL keep their workers; more would mostly wait for
            # it, so they grow one at a time, each step judged (chess: 4 workers 15%
            # slower than 2, an ascent's trial of them a quarter of a 3 s run).
            control.ascending = False
            return False
        # Threads whose GIL time adds up to the whole GIL, with headroom (calls hold it in
        # bursts): more would only wait for it. Within the CPUs the machine left idle: calls
        # off a CPU part of the time may be waiting for one (the consumer's thread, other
        # processes), and more threads would only take turns (images on 2 busy cores: 81%
        # on a CPU, 0.15 CPU idle; 4 threads 14% slower than 2).
        if busy < WAITING_BUSY:
            # Calls that mostly wait: their fill is their CPU workers, whatever CPUs a busy
            # machine left idle (they take none while they wait) and whatever GIL share a
            # busy machine's run queue gave them alone (a 2 ms sleep measured with 0.0 CPU
            # idle, or "holding the GIL 52%", stayed at 2 or 3 threads for a second).
            filling = stage.cpu_workers
        else:
            filling = min(_filling(stage, holding),
                          _idle_filling(workers, busy, measured.idle_cpus))
        if busy < FILL_BUSY and filling > workers:
            if busy < WAITING_BUSY:
                # Past the CPU workers such calls grow by measured steps; starting them from
                # the fill, judged at once, settles hundreds of threads a step sooner.
                control.ascending, control.factor = True, 4
                control.trial = ("grow", workers, measured.rate,
                                 self._ticks + ASCENT_TRIAL_TICKS)
            why = (f"they wait: {filling} threads, its CPU workers, are an ascent's first "
                   "step" if busy < WAITING_BUSY else
                   f"and each alone held the GIL {holding:.0%} of its time: {filling} threads "
                   "fill the CPUs they leave idle")
            self._set(stage, control, filling, f"its calls, running {workers} at once, were "
                      f"on a CPU {busy:.0%} of their time, {why}", figures)
            return True
        return False

    def _undo_serial(self, stage: TunableStage, control: _Control, previous: int, rate: float,
                     rate_before: float, figures: dict[str, float]) -> None:
        """One worker was slower than ``previous`` measured: the calls do not serialize.
        How the rate scaled says how much of a call holds the GIL, and so how many threads
        fill it (a busy machine, or a batching thread hungry for the CPUs, measured images
        as serialized in one warm run in four; going back to two workers and growing one
        at a time from there cost a whole run)."""
        speedup = rate_before / max(rate, 1e-9)
        # Amdahl over the GIL: ``previous`` workers run ``previous / (1 + share *
        # (previous - 1))`` times as fast as one.
        share = min(1.0, max(0.0, (previous / speedup - 1) / (previous - 1)))
        measured = stage.measured_calls
        busy_alone = measured.busy_alone if measured is not None else 1.0
        # ``previous`` workers ran clearly more than ``previous`` times as fast as one:
        # something other than the GIL slowed the one (running inline, a machine busy
        # meanwhile), and the scaling says nothing of the GIL: back to what was measured,
        # the grow rule goes on from there (chess, 2.6x: a fill target of every CPU worker,
        # 4, ran 15% slower than 2).
        superlinear = speedup > previous * GAIN
        target = previous if superlinear else max(previous, _filling(stage, share * busy_alone))
        scaling = (f"{speedup:.1f}x as fast as one, more than {previous} workers can: "
                   f"something else slowed the one; back to {previous}" if superlinear else
                   f"{speedup:.1f}x as fast as one, so its calls hold the GIL about {share:.0%} "
                   f"of their time: {target} threads")
        self._set(stage, control, target,
                  f"one worker was slower ({rate:,.0f} elements/s) than {previous} measured "
                  f"({rate_before:,.0f}): the measurement misled (a busy machine, the first "
                  f"calls' set-up); {previous} ran {scaling}", {**figures, "gil_share": share})

    def record(self, stage: str, setting: str, old: int, new: int, reason: str,
               figures: dict[str, float] | None = None) -> None:
        """Keep a change made elsewhere in the pipeline (a ``prefetch(AUTOTUNE)`` buffer
        grown) with the tuner's own: one log of what AUTOTUNE did, and why. Logged too
        (logger ``feedline.autotune``, ``INFO``).

        Example:
            >>> tuner = Tuner()
            >>> tuner.record("prefetch", "buffer", 1, 2, "its consumer drained it")
            >>> [(d.setting, d.old, d.new) for d in tuner.decisions()]
            [('buffer', 1, 2)]
        """
        decision = TuningDecision(time.perf_counter() - self._started, stage, setting, old,
                                  new, reason, dict(figures or {}))
        with self._lock:
            self._decisions.append(decision)
        _log.info("feedline AUTOTUNE: %s: %s %d -> %d at %.2f s (%s)", stage, setting, old,
                  new, decision.seconds, reason)

    def _note(self, control: _Control, reason: str, figures: dict[str, float]) -> None:
        stage = control.stage()
        workers = stage.tuned_workers if stage is not None else control.setting
        self.record(control.name, "workers", workers, workers, reason, figures)

    def _set(self, stage: TunableStage, control: _Control, workers: int, reason: str,
             figures: dict[str, float]) -> None:
        old = stage.tuned_workers
        if workers == old:
            return
        stage.tuned_workers = workers
        control.setting = workers
        control.history.clear()  # the new setting is measured from the next look
        self.record(control.name, "workers", old, workers, reason, figures)
