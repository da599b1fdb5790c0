"""The tuner: sets each ``AUTOTUNE`` stage's parallelism from what the stage measures.

Every ``map(num_parallel_calls=AUTOTUNE)`` on threads registers with its pipeline's
:class:`Tuner` (one per pipeline, on a thread of its own, ``feedline-autotune``, started by
the first registration and ended with the pipeline). Every :data:`PERIOD` seconds the tuner
reads each stage's counters: elements handed out, how many of its consumer's ``next()``
calls had to wait for a result, the time its tasks took, and the time it spent pulling its
input. Its model of a stage is Plumber's: the stage needs as many workers as its tasks keep
busy at the pipeline's current rate, plus headroom; more only help while its consumer waits
for it and its input is not what holds it back. A stage measuring where its function should
run (threads or processes) is left alone meanwhile.

The setting is how many of the stage's threads work at once (a
:class:`~feedline.execution.gate.WorkerGate`), with two tasks per worker in its window:
one running, one queued, so a worker does not idle while the consumer is away. A stage
starts at its CPU budget; with no budget set (``Options.autotune.cpu_budget`` and
``ThreadingOptions.max_parallelism`` unset) it has threads for up to
:data:`feedline.transforms.map.OVERSUBSCRIPTION` per CPU, used only when measured faster
(a function holding the GIL part of the time leaves its core idle meanwhile).

* **Trim** (its workers are idle part of the time): the workers running at once go down
  to those its tasks keep busy (times :data:`HEADROOM`), in one step. Fewer threads
  leave cores, and the GIL, to the stages that limit the pipeline; on a few cores this is
  what beats "one thread per core" (benchmarks/profiling.py).
* **Grow** (the consumer waits for the stage, its workers are busy, its input takes less
  than :data:`INPUT_BOUND` of the time): one more worker, kept only if the stage's rate
  rises by :data:`GAIN`; otherwise undone, and the stage is left alone for a while.
* **Explore** (its workers are busy and its consumer rarely waits for it, or its input
  takes more than :data:`INPUT_BOUND` of the time): one worker fewer, kept unless the rate
  falls by more than :data:`GAIN` (busy workers may be busy waiting for each other: the
  GIL, memory bandwidth; and their GIL time slows the thread pulling the input); tried
  again every :data:`EXPLORE_TICKS` looks, so the setting follows a workload that changes,
  and half as often after each try that was undone (down to one in
  :data:`MAX_EXPLORE_BACKOFF` times that).
* **Start from the executor choice's measurement** (:class:`CallMeasurement`, once, as
  soon as the choice kept the stage on threads, if its calls did run about as many at
  once as the stage has workers, :data:`RELIABLE_CONCURRENCY`): calls that hold the GIL
  at least :data:`SERIAL_GIL_SHARE` of their time run one worker (they run one at a time
  however many threads there are), kept unless slower than the rate measured meanwhile
  (a busy machine can make parallel calls look serial: then how the rate scaled gives
  the GIL share, and the stage goes to the threads that fill the GIL); calls that left
  their CPUs idle part of the time when running together (below :data:`FILL_BUSY`:
  waiting for the GIL, files, the network) get, at once, as many threads as it takes for
  their GIL time to fill the GIL (:data:`HEADROOM` over the share of a call's time
  holding it, within the stage's threads), rather than one more per trial. The other
  rules go on from there, and undo a start the measurement misled (a grow is tried while
  the consumer waits on busy workers).
* A trim that leaves the consumer waiting and the rate lower is undone; a grow that did not
  help is not tried again for a while, twice as long after each failure (at most
  :data:`MAX_EXPLORE_BACKOFF` times :data:`PAUSE_TICKS`).
* Decisions are judged over the looks since the setting began (at most
  :data:`WINDOW_TICKS`); changes on the rate over :data:`TRIAL_TICKS` looks after them.
* Settings carry over to the stage's next iterator (each epoch of a ``repeat``).

This adapts when the work changes mid-run (heavier elements use more cores: the consumer
starts waiting, the stage grows). Each change is kept as a :class:`TuningDecision` with its
reason (``PipelineIterator.statistics().tuning``, :func:`feedline.profile`'s report).
The stages' buffers stay within the RAM budget as before (``prefetch`` grows only within
``Options.autotune.ram_budget``).
"""

from __future__ import annotations

import collections
import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Protocol

from feedline.profiling.records import TuningDecision

PERIOD = 0.25
"""Seconds between two looks at the stages."""

HEADROOM = 1.3
"""Workers kept per core of measured work when trimming; threads per GIL of measured GIL
time when starting from the executor choice's measurement."""

GAIN = 1.03
"""A worker added is kept when the stage's rate rises at least this much."""

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
which a stage starts at one worker: its calls run one at a time however many threads it
has, and each more thread only takes the GIL from its input's thread (chess on 2 cores:
one worker 25% faster than two)."""

RELIABLE_CONCURRENCY = 0.9
"""Calls running at once while measured, per worker of the stage, needed for the tuner to
start from the measurement. Fewer, and the shares mean little: the first calls of a
process (its imports, lazy set-ups) measured images, which release the GIL 70% of the
time, as serialized (1.65 calls at once of 2)."""

FILL_BUSY = 0.9
"""Share of their time calls running together spent on a CPU below which the cores they
leave idle are filled with more threads (images on 2 cores: 77%; 4 threads read 20% more
than 2)."""


def _filling(stage: TunableStage, holding: float) -> int:
    """Threads whose GIL time fills the GIL, with :data:`HEADROOM`, within the stage's
    threads: ``holding`` is the share of a call's time it holds the GIL."""
    return min(stage.max_workers, math.ceil(HEADROOM / max(holding, 1e-3) - 1e-9))


@dataclass(frozen=True)
class CallMeasurement:
    """How a stage's calls ran on threads, as its executor choice measured them.

    Attributes:
        gil_share: About 1 when the GIL serializes the calls, about 0 when they release it.
        busy_together: Share of their time the calls running together spent on a CPU.
        concurrency: Calls that could run at once, on average, while measured.
        busy_alone: Share of its time a call running alone spent on a CPU.
        rate: Elements per second while the calls ran together.
    """

    gil_share: float
    busy_together: float
    concurrency: float
    busy_alone: float = 1.0
    rate: float = 0.0


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
    """

    __slots__ = ("busy", "calls", "elements", "input", "waits")

    def __init__(self) -> None:
        self.elements = self.calls = self.waits = 0
        self.busy = self.input = 0.0


class TunableStage(Protocol):
    """What a stage offers the tuner."""

    name: str

    def tuning_counters(self) -> tuple[int, int, int, float, float]:
        """(elements handed out, ``next()`` calls, calls that waited, seconds its tasks
        took, seconds spent pulling its input), over every iterator of the stage so far."""

    @property
    def tuned_workers(self) -> int:
        """Workers allowed to run at once now."""

    @tuned_workers.setter
    def tuned_workers(self, value: int) -> None: ...

    @property
    def max_workers(self) -> int:
        """The most workers the stage may have (its ``AUTOTUNE`` parallelism)."""

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


class _Control:
    """The tuner's memory of one stage: kept across the stage's iterators (each epoch of a
    ``repeat`` builds a new one), which start at the setting the last one had."""

    def __init__(self, stage: TunableStage) -> None:
        self.stage = weakref.ref(stage)
        self.name = stage.name
        self.last: tuple[float, int, int, int, float, float] | None = None
        self.trial: tuple[str, int, float, int] | None = None  # kind, previous, rate, due
        self.paused_until = 0
        self.explore_at = 0
        self.explore_every = EXPLORE_TICKS  # looks between tries of one worker fewer
        self.grow_pause = PAUSE_TICKS  # looks without a grow after one that did not help
        self.measurement_used = False  # whether its executor choice's figures were used
        # Looks since the setting began, the last WINDOW_TICKS of them: (time, elements,
        # calls, waits, busy seconds, input seconds) at each.
        self.history: collections.deque[tuple[float, int, int, int, float, float]] = \
            collections.deque(maxlen=WINDOW_TICKS)
        self.setting = stage.tuned_workers
        self.counters = TuningCounters()


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
        self._known: dict[object, _Control] = {}  # by stage key: survives the stage's epochs
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
            stage: The stage's iterator.
            key: What identifies the stage across its iterators (its dataset node;
                default: its name).

        Returns:
            The counters the stage keeps: shared with the stage's earlier iterators (the
            previous epoch's), whose setting the new one starts from.
        """
        key = stage.name if key is None else key
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                # The same stage in a new epoch: carry on from where its tuning was.
                stage.tuned_workers = known.setting
                known.stage = weakref.ref(stage)
                if known not in self._controls:
                    self._controls.append(known)
                control = known
            else:
                control = self._known[key] = _Control(stage)
                self._controls.append(control)
            if self._stop.is_set():
                return control.counters
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="feedline-autotune")
                self._thread.start()
            return control.counters

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
        """Look at every stage once (the tuner's thread calls this every period)."""
        self._ticks += 1
        with self._lock:
            controls = list(self._controls)
        for control in controls:
            stage = control.stage()
            if stage is None or stage.tuning_done:
                with self._lock:
                    self._controls.remove(control)
                continue
            self._step(control, stage)

    def _step(self, control: _Control, stage: TunableStage) -> None:
        if stage.tuning_paused:
            control.last = None  # start afresh once it means something
            control.history.clear()
            return
        if not control.measurement_used:
            control.measurement_used = True
            measured = stage.measured_calls
            if measured is not None and self._start_from(stage, control, measured):
                return
        now = time.perf_counter()
        elements, calls, waits, busy_seconds, input_seconds = stage.tuning_counters()
        last = control.last
        control.last = (now, elements, calls, waits, busy_seconds, input_seconds)
        history = control.history
        if last is None or not history:
            history.append(control.last)
            return
        if calls - last[2] <= 0 or now <= last[0]:
            return  # the consumer is not reading: nothing to learn
        # Judged over the looks since the setting began (at most the last WINDOW_TICKS):
        # one look, a quarter of a second, is too short; a hiccup of the machine would
        # trim a busy stage. The window lets a long-held setting follow a workload change.
        since = history[0]
        history.append(control.last)
        held = now - since[0]
        rate = (elements - since[1]) / held if held > 0 else 0.0
        waited = (waits - since[3]) / max(1, calls - since[2])
        occupied = max(0.0, (busy_seconds - since[4]) / held) if held > 0 else 0.0
        pulling = max(0.0, (input_seconds - since[5]) / held) if held > 0 else 0.0
        workers = stage.tuned_workers
        trial = control.trial
        if trial is not None:
            kind, previous, rate_before, due = trial
            if self._ticks < due:
                return
            control.trial = None
            if kind == "grow" and rate < rate_before * GAIN:
                self._set(stage, control, previous,
                          f"one more worker did not help ({rate:,.0f} vs {rate_before:,.0f} "
                          "elements/s)")
                # Each try costs a second at the slower setting: try less often while
                # trying keeps failing.
                control.paused_until = self._ticks + control.grow_pause
                control.grow_pause = min(control.grow_pause * 2,
                                         PAUSE_TICKS * MAX_EXPLORE_BACKOFF)
            elif kind == "trim" and waited > WAITS_TO_GROW and rate < rate_before / GAIN:
                self._set(stage, control, previous,
                          f"fewer workers left its consumer waiting {waited:.0%} of calls and "
                          f"the rate fell ({rate:,.0f} vs {rate_before:,.0f} elements/s)")
                control.paused_until = self._ticks + PAUSE_TICKS
            elif kind == "explore" and rate < rate_before / GAIN:
                self._set(stage, control, previous,
                          f"one worker fewer was slower ({rate:,.0f} vs {rate_before:,.0f} "
                          "elements/s)")
                # Each try costs a second at the slower setting: try less often while
                # trying keeps failing.
                control.explore_every = min(control.explore_every * 2,
                                            EXPLORE_TICKS * MAX_EXPLORE_BACKOFF)
                control.explore_at = self._ticks + control.explore_every
            elif kind == "serial" and rate < rate_before / GAIN:
                self._undo_serial(stage, control, previous, rate, rate_before)
            elif kind == "grow":
                control.grow_pause = PAUSE_TICKS
            elif kind == "explore":
                control.explore_every = EXPLORE_TICKS
                self._note(control, f"one worker fewer ({workers}) was as fast "
                                    f"({rate:,.0f} vs {rate_before:,.0f} elements/s): kept")
            return
        if self._ticks < control.paused_until or held < SETTLE_SECONDS:
            return
        busy = occupied / workers
        needed = max(1, math.ceil(occupied * HEADROOM))
        # Its input, pulled on its consumer's thread, is what the consumer waits for: more
        # workers cannot help, and their GIL time slows that thread.
        input_bound = pulling > INPUT_BOUND
        if (waited > WAITS_TO_GROW and busy > BUSY_TO_GROW and not input_bound
                and workers < stage.max_workers):
            control.trial = ("grow", workers, rate, self._ticks + TRIAL_TICKS)
            self._set(stage, control, workers + 1,
                      f"its consumer waited for {waited:.0%} of calls while its {workers} "
                      f"workers were {busy:.0%} busy")
        elif needed < workers:
            control.trial = ("trim", workers, rate, self._ticks + TRIAL_TICKS)
            self._set(stage, control, needed,
                      f"its tasks kept {occupied:.1f} workers busy at {rate:,.0f} elements/s: "
                      f"{workers} workers were {busy:.0%} busy")
        elif ((waited < WAITS_TO_GROW or input_bound) and workers > 1
              and self._ticks >= control.explore_at):
            # Busy workers may be busy waiting for each other (the GIL, a lock, memory
            # bandwidth): only trying tells. Fewer is kept unless clearly slower.
            control.explore_at = self._ticks + control.explore_every
            control.trial = ("explore", workers, rate, self._ticks + TRIAL_TICKS)
            why = (f"its input took {pulling:.0%} of the time" if input_bound
                   else f"its consumer waited for {waited:.0%} of calls")
            self._set(stage, control, workers - 1,
                      f"trying one worker fewer ({rate:,.0f} elements/s with {workers}; {why})")

    def _start_from(self, stage: TunableStage, control: _Control,
                    measured: CallMeasurement) -> bool:
        """Set the stage from its executor choice's measurement; whether it changed."""
        workers = stage.tuned_workers
        share, busy = measured.gil_share, measured.busy_together
        if measured.concurrency < RELIABLE_CONCURRENCY * workers:
            return False
        if share >= SERIAL_GIL_SHARE and workers > 1:
            # Judged on the rate measured with ``workers``: a machine busy with other work,
            # or the first calls' set-up, can make calls that run in parallel look serial.
            control.trial = ("serial", workers, measured.rate, self._ticks + TRIAL_TICKS)
            self._set(stage, control, 1,
                      f"its calls hold the GIL {share:.0%} of their time: they run one at a "
                      "time however many workers it has, and more take the GIL from its input")
            return True
        # Threads whose GIL time adds up to the whole GIL, with headroom (calls hold it in
        # bursts): more would only wait for it. A call's GIL time: the share of its CPU time
        # that holds the GIL, of the time it is on a CPU at all (a call that mostly waits
        # for files holds it little).
        holding = share * measured.busy_alone
        filling = _filling(stage, holding)
        if busy < FILL_BUSY and filling > workers:
            self._set(stage, control, filling,
                      f"its calls, running {workers} at once, were on a CPU {busy:.0%} of "
                      f"their time, and each alone held the GIL {holding:.0%} of its time: "
                      f"{filling} threads fill the CPUs they leave idle")
            return True
        return False

    def _undo_serial(self, stage: TunableStage, control: _Control, previous: int, rate: float,
                     rate_before: float) -> None:
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
        target = max(previous, _filling(stage, share * busy_alone))
        self._set(stage, control, target,
                  f"one worker was slower ({rate:,.0f} elements/s) than {previous} measured "
                  f"({rate_before:,.0f}): the measurement misled (a busy machine, the first "
                  f"calls' set-up); {previous} ran {speedup:.1f}x as fast as one, so its calls "
                  f"hold the GIL about {share:.0%} of their time: {target} threads")

    def record(self, stage: str, setting: str, old: int, new: int, reason: str) -> None:
        """Keep a change made elsewhere in the pipeline (a ``prefetch(AUTOTUNE)`` buffer
        grown) with the tuner's own: one log of what AUTOTUNE did, and why.

        Example:
            >>> tuner = Tuner()
            >>> tuner.record("prefetch", "buffer", 1, 2, "its consumer drained it")
            >>> [(d.setting, d.old, d.new) for d in tuner.decisions()]
            [('buffer', 1, 2)]
        """
        with self._lock:
            self._decisions.append(TuningDecision(time.perf_counter() - self._started,
                                                  stage, setting, old, new, reason))

    def _note(self, control: _Control, reason: str) -> None:
        stage = control.stage()
        workers = stage.tuned_workers if stage is not None else control.setting
        self.record(control.name, "workers", workers, workers, reason)

    def _set(self, stage: TunableStage, control: _Control, workers: int, reason: str) -> None:
        old = stage.tuned_workers
        if workers == old:
            return
        stage.tuned_workers = workers
        control.setting = workers
        control.history.clear()  # the new setting is measured from the next look
        self.record(control.name, "workers", old, workers, reason)
