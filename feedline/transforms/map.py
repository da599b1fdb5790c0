"""``map``: apply a function to every element, inline or on parallel workers."""

from __future__ import annotations

import collections
import dataclasses
import functools
import pickle
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.autotune.map_knobs import MapKnobs
from feedline.autotune.stage_knobs import thread_bounds
from feedline.autotune.tuner import CallMeasurement, holds_the_gil
from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.functions import (
    annotate_error,
    bind_free_variables,
    call_with_element,
    function_name,
)
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import DerivedReader, RandomAccessReader
from feedline.core.structure import normalize_output
from feedline.core.traits import ONE_TO_ONE
from feedline.core.validation import resolve_parallelism, validate_parallelism
from feedline.execution.executor import make_executor
from feedline.execution.positions import (
    PositionReader,
    PositionTracker,
    initial_position,
    replay_from,
)
from feedline.execution.read_ahead import ReadAhead
from feedline.placement.map_executor import ExecutorChoice, Probe, ProbeClock, transport_cost
from feedline.placement.policy import PROCESS_TARGET_TASK_SECONDS, ExecutorDecision, runs_inline


class MapDataset(Dataset):
    """The node of ``Dataset.map``."""

    TRAITS = ONE_TO_ONE

    _RANDOM_ACCESS_FROM_INPUT = True

    def __init__(self, input_dataset: Dataset, map_func: Callable[..., Any],
                 num_parallel_calls: int | None = None, deterministic: bool | None = None,
                 name: str | None = None, executor: str | None = None,
                 unpack_tuples: bool = True) -> None:
        super().__init__([input_dataset])
        if not callable(map_func):
            raise TypeError(f"map() needs a callable, got {type(map_func).__name__}")
        num_parallel_calls = validate_parallelism(num_parallel_calls, "map(num_parallel_calls)")
        if executor not in (None, "thread", "process"):
            raise ValueError(f"map(executor) must be 'thread' or 'process', got {executor!r}")
        self.map_func = bind_free_variables(map_func)
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
        # None: threads, or, with AUTOTUNE, chosen from measurement (placement.map_executor).
        self.executor = executor
        # Rewrites pass whole elements to functions they compose themselves.
        self.unpack_tuples = unpack_tuples
        self.name = name or f"map({function_name(map_func)})"

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        fn = self.map_func
        if not self.unpack_tuples:
            fn = _Unsplit(self.map_func)
        if self.num_parallel_calls is None:
            return MapIterator(ctx, upstream, fn, self.name)
        autotune = ctx.options.autotune
        tune = (self.num_parallel_calls == AUTOTUNE and autotune.enabled and autotune.tune
                and self.executor != "process")
        # Measured whenever tuned (where the tuner starts it), moved to processes only with
        # choose_executor.
        choose = (self.executor is None and self.num_parallel_calls == AUTOTUNE
                  and autotune.enabled and (autotune.choose_executor or tune))
        parallelism = resolve_parallelism(self.num_parallel_calls, ctx)
        cpu_workers = threads = parallelism
        if tune:
            # No budget set: the tuner may try threads beyond the cores for calls that
            # compute (kept only where they measure faster); calls that wait (files, the
            # network, a sleep) use no CPU meanwhile and may have threads past the budget,
            # within the RAM budget (``thread_bounds``: the rule every tuned stage shares).
            cpu_workers, threads = thread_bounds(ctx.options, parallelism, waits=True)
        return ParallelMapIterator(
            ctx, upstream, fn, self.name, parallelism,
            ctx.deterministic(self.deterministic), self.executor or "thread",
            choose_executor=choose, tune=tune, stage_key=self, max_parallelism=threads,
            cpu_workers=cpu_workers, allow_processes=autotune.choose_executor)


    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        fn = self.map_func if self.unpack_tuples else _Unsplit(self.map_func)
        return MapReader(self._inputs[0]._random_reader(ctx), fn, self.name)


class MapReader(DerivedReader):
    """Element ``i`` is the function of input element ``i`` (called as the iterators call it).

    Example:
        >>> import feedline as fl
        >>> from feedline.core.random_access import open_reader
        >>> with MapReader(open_reader(fl.Dataset.range(5)), lambda x: x * 10, "map") as r:
        ...     [int(x) for x in r.get_many([4, 1])]
        [40, 10]
    """

    def __init__(self, input_reader: RandomAccessReader, fn: Callable[..., Any],
                 name: str) -> None:
        super().__init__(input_reader)
        self._fn = fn
        self._call = _caller(fn)
        self._name = name

    def get(self, index: int) -> Any:
        return self._apply(self.input.get(index), index)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        apply = self._apply
        return [apply(element, int(index))
                for element, index in zip(self.input.get_many(indices), indices)]

    def _apply(self, element: Any, index: int) -> Any:
        try:
            return normalize_output(self._call(self._fn, element))
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, index)


def _call_whole(fn: Callable[[Any], Any], element: Any) -> Any:
    return fn(element)


class _Unsplit(functools.partial):
    """A function that receives the whole element even when it is a tuple."""


def _caller(fn: Callable[..., Any]) -> Callable[[Callable[..., Any], Any], Any]:
    return _call_whole if isinstance(fn, _Unsplit) else call_with_element


class MapIterator(DatasetIterator):
    """Calls the function inline: no thread hand-off, the cheapest way for light functions.

    Its state has the layout every map iterator writes (:mod:`feedline.execution.positions`),
    so a checkpoint of a parallel or fused map restores here and the other way round.
    """

    OPERATION = "map"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._fn = map_func
        self._call = _caller(map_func)
        self._name = name
        self._index = 0  # input elements received: the index errors report
        # Set while re-reading after a restore from a read-ahead map's position.
        self._replay: PositionReader | None = None

    def __next__(self) -> Any:
        if self._replay is not None:
            element = self._next_replayed()
        else:
            element = next(self._upstream)
            self._index += 1
        try:
            # Inside the try: a result that is no element is this stage's error.
            return normalize_output(self._call(self._fn, element))
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, self._index - 1)

    def _next_replayed(self) -> Any:
        replay = self._replay
        assert replay is not None
        item, is_error, value, _ = replay.pull()
        replay.handed_out(item)
        self._index = item + 1
        if not replay.replaying:
            self._replay = None
        if is_error:
            raise value  # the input's error (or its record), in its place
        return value

    def _get_state(self) -> State:
        if self._replay is not None:
            return self._replay.inline_position()
        return initial_position(self._upstream.state_dict(), self._index)

    def _set_state(self, state: State) -> None:
        self._upstream.load_state_dict(state["input"])
        self._index = int(state["at"])
        self._replay = replay_from(self._upstream, state)


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


MAX_FILL_SECONDS = 0.001
"""Longest a task's chunk for worker processes waits for its input: past it (or when the
input's measured time per element says it would be), the elements pulled go out as they
are. A chunk is sized from the function's time per call, for its work to outweigh its
hand-off; an input that gives elements slowly (a remote read, a generator, a stage upstream that is behind) must not
hold back the elements it gave already, nor leave the workers idle while the consumer waits
for more: with a slow input, chunks shrink to one element. Only where chunks end changes:
elements, errors and positions are the same."""


class _ChunkRunner:
    """Runs the map function over a chunk of elements on a worker; never raises.

    Each outcome is ``(True, result)`` or ``(False, exception)`` so one bad element does not
    cost the others. In a worker process the traceback would be lost in pickling, so it is
    attached to the exception as a note. While an ``AUTOTUNE`` stage chooses its executor,
    runners with ``probe`` measure each task (:mod:`feedline.placement.map_executor`),
    and with ``transport`` also what pickling its inputs and results costs.
    """

    def __init__(self, fn: Callable[..., Any], in_subprocess: bool, probe: bool = False,
                 transport: bool = False) -> None:
        self.fn = fn
        self.call = _caller(fn)
        self.in_subprocess = in_subprocess
        self.probe = probe
        self.transport = transport

    def __call__(self, chunk: list[Any], submitted: float = 0.0
                 ) -> tuple[list[tuple[bool, Any]], float, float, Probe | None]:
        """Outcomes, seconds the task took, CPU seconds of its thread meanwhile (calls that
        wait use little: the tuner gives those threads past the cores), and its probe."""
        clock = ProbeClock(submitted) if self.probe else None
        cpu = time.thread_time()
        started = time.perf_counter()
        outcomes: list[tuple[bool, Any]] = []
        fn, call = self.fn, self.call
        for element in chunk:
            try:
                outcomes.append((True, normalize_output(call(fn, element))))
            except Exception as error:  # noqa: BLE001 - raised on the consumer's thread
                if self.in_subprocess:
                    error.add_note("worker traceback:\n" + "".join(traceback.format_exception(error)))
                    error = _sendable(error)
                outcomes.append((False, error))
        seconds = time.perf_counter() - started
        cpu = time.thread_time() - cpu
        if clock is None:
            if self.in_subprocess:
                return _pack(outcomes), seconds, cpu, None
            return outcomes, seconds, cpu, None
        probe = clock.stop(len(chunk))
        if self.transport:  # off the clock: the call's own time is measured above
            # As a process would send them back (stacked where they can be), timed warm: a
            # first pickling of a type fills pickle's and NumPy's caches (~5x slower for a
            # 1-element chunk), which made the estimate of processes flip from run to run.
            results = _pack([outcome for outcome in outcomes if outcome[0]])
            transport_cost(chunk, results)
            cost, payload = transport_cost(chunk, results)
            probe = dataclasses.replace(probe, transport=cost, payload=payload)
        return outcomes, seconds, cpu, probe

    def split_call(self, chunk: list[Any], submitted: float = 0.0) -> list[tuple[Any, ...]]:
        """A process executor whose worker died running this chunk runs it again one
        element per call, so only the element that kills its worker fails."""
        return [([element],) for element in chunk] if len(chunk) > 1 else []

    def combine_call(self, parts: list[tuple[bool, Any]]
                     ) -> tuple[list[tuple[bool, Any]], float, float, Probe | None]:
        """The chunk's result (as ``__call__`` returns it) from its one-element calls' (a
        death is its element's error)."""
        outcomes: list[tuple[bool, Any]] = []
        seconds = cpu = 0.0
        for ok, value in parts:
            if ok:
                outcomes.extend(unpack_outcomes(value[0]))
                seconds += value[1]
                cpu += value[2]
            else:
                outcomes.append((False, value))
        return outcomes, seconds, cpu, None


class StackedResults:
    """A chunk's results sent back from a worker process as one array: every element's
    result was an array of one dtype and shape (a tokenizer's ids, an image), stacked.

    Pickling a NumPy array costs a few microseconds whatever its size: a chunk of 60
    results of 256 bytes took ~270 us to pickle in the worker and ~150 us to unpickle on the
    collector thread, against ~10 us for the one array. :func:`unpack_outcomes` gives the
    results back as the rows of that array (views: they share its memory, as a chunk's
    results shared one transport buffer already), with the dtype, shape and values the
    function returned.

    Example:
        >>> packed = _pack([(True, np.arange(3)), (True, np.arange(3) + 3)])
        >>> [row.tolist() for _, row in unpack_outcomes(packed)]
        [[0, 1, 2], [3, 4, 5]]
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Any, ...]:
        return StackedResults, (self.array,)


def _pack(outcomes: list[tuple[bool, Any]]) -> list[tuple[bool, Any]] | StackedResults:
    """``outcomes`` as one :class:`StackedResults` when they are two or more results, each a
    C-contiguous array (no subclass, no Python objects) of one dtype and shape; else as
    they are."""
    if len(outcomes) < 2:
        return outcomes
    ok, first = outcomes[0]
    if not ok or type(first) is not np.ndarray or first.dtype.hasobject or not first.ndim \
            or not first.flags.c_contiguous:
        return outcomes
    dtype, shape = first.dtype, first.shape
    values = []
    for ok, value in outcomes:
        if not ok or type(value) is not np.ndarray or value.dtype != dtype \
                or value.shape != shape or not value.flags.c_contiguous:
            return outcomes
        values.append(value)
    return StackedResults(np.stack(values))


def unpack_outcomes(outcomes: list[tuple[bool, Any]] | StackedResults
                    ) -> list[tuple[bool, Any]]:
    """A chunk's ``(ok, result or error)`` pairs, from what its runner returned.

    Example:
        >>> unpack_outcomes([(True, 1)])
        [(True, 1)]
    """
    if type(outcomes) is StackedResults:
        return [(True, row) for row in outcomes.array]
    return outcomes  # type: ignore[return-value]


def _sendable(error: Exception) -> Exception:
    """``error``, or a ``RuntimeError`` with its text if it does not pickle: one
    unpicklable exception must not cost the other elements of its chunk their results."""
    try:
        pickle.dumps(error, protocol=5)
    except Exception as failure:  # noqa: BLE001 - whatever pickling raises
        replacement = RuntimeError(
            f"{type(error).__name__}: {error} (the exception raised in a worker process "
            f"cannot be sent back: {type(failure).__name__}: {failure})")
        for note in getattr(error, "__notes__", ()):
            replacement.add_note(note)
        return replacement
    return error


class ParallelMapIterator(DatasetIterator):
    """Runs the function on ``parallelism`` workers; pulls inputs on the consumer's thread.

    Pulling on the consumer's thread keeps the upstream single-threaded (no locks there).
    Elements travel to workers in chunks sized from measured call times (a task is worth
    :data:`TARGET_TASK_SECONDS` of calls; one element when a call takes that long), so cheap
    functions do not pay a hand-off per element; a chunk takes only what its input gives
    without making it wait (:data:`MAX_FILL_SECONDS`). The chunks run on a
    :class:`~feedline.execution.read_ahead.ReadAhead` window of ``2 * parallelism`` tasks. On
    worker processes, a chunk is one message each way, and its results, when they are arrays
    of one dtype and shape, one array (:class:`StackedResults`). Chunks change no result,
    error or position: each element's outcome is kept in its place.

    An error of the upstream takes its place in the window: the elements pulled before it
    come out first, in order, then the error, then the elements after it (as in tf.data;
    nothing is dropped).

    The state is a position (:mod:`feedline.execution.positions`): the input's state at or
    before the first element not handed out, plus which later ones went out already
    (``deterministic=False``). Elements in flight are computed again after a restore; an
    input error pulled but not raised yet is stored as a record.

    ``stage_key`` identifies the stage across its iterators (its dataset node): what one
    iterator learned (the executor choice, the tuner's setting) carries on to the next.

    With ``tune`` (an ``AUTOTUNE`` map on threads) the pipeline's tuner
    (:mod:`feedline.autotune.tuner`) sets how many of its workers run at once, through the
    stage's :attr:`knobs` (:class:`~feedline.autotune.map_knobs.MapKnobs`: its setting,
    bounds, counters, sampled element sizes and measured calls), between one and
    ``max_parallelism`` threads (:data:`MAX_THREADS` for calls that wait). Threads start as
    the setting lets them work and end when it falls
    (:class:`~feedline.execution.executor.ThreadExecutor`).

    With ``choose_executor`` (an ``AUTOTUNE`` map given no executor) the stage starts on
    threads and may move its later tasks to worker processes, once, from what its first
    tasks measured (:mod:`feedline.placement.map_executor`); positions, order and errors
    do not depend on where a task ran. :attr:`executor_decision` tells what was chosen.
    ``allow_processes=False`` (``AutotuneOptions(choose_executor=False)``) measures the same
    first tasks for the tuner and keeps them all on threads.

    Tuned and chosen (an ``AUTOTUNE`` map on threads), a stage whose calls the measurement
    finds held by the GIL (:func:`~feedline.autotune.tuner.holds_the_gil`) and that the
    tuner has at one worker calls its function inline on the consumer's thread
    (:attr:`runs_inline`): its tasks in flight are handed out first, in order, then each
    element is pulled and mapped in ``next()``, as :class:`MapIterator` does, without a
    task, a future or a wake-up. Errors come out in their places with the same notes, and
    the state keeps the layout of every map iterator, so a checkpoint restores across the
    switch. The tuner goes on reading its counters (its rate; no waits, since the consumer
    never waits for a worker, and the calls are not timed); should it set more workers (its trial
    of one worker ran slower than the threads measured: the measurement misled), the
    stage goes back to its threads. The stage's later iterators (a ``repeat``'s epochs)
    start from the tuner's setting, inline.

    When ``AUTOTUNE`` moves the stage to processes, the consumer maps the elements inline
    while the worker processes start (seconds on a loaded machine: an interpreter, its
    imports, the function), instead of waiting for their first results; tasks go to the
    workers once each has run an empty one. Not for ``executor="process"``, whose function
    may be one that must not run in the consumer's process.
    """

    OPERATION = "map"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str, parallelism: int,
                 deterministic: bool, executor_kind: str, choose_executor: bool = False,
                 tune: bool = False, stage_key: object = None,
                 max_parallelism: int | None = None, cpu_workers: int | None = None,
                 allow_processes: bool = True) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._name = name
        self.name = name
        self._parallelism = parallelism
        # Threads: more than ``parallelism`` when the tuner may grow the stage past it.
        self._ceiling = max(parallelism, max_parallelism or parallelism)
        # What the tuner sets and reads of this stage (only counted into when untuned).
        self._knobs = MapKnobs(
            name, parallelism, self._ceiling,
            min(self._ceiling, max(parallelism, cpu_workers or parallelism)),
            ctx.options.autotune_ram_budget() if tune else 0)
        self._gate = self._knobs.gate
        self._counters = self._knobs.counters
        self.busy_seconds = 0.0
        """Seconds its tasks took, summed (statistics: the workers' occupied time, which
        counts waiting for files, sleeps and the GIL, unlike their CPU time)."""
        self._deterministic = deterministic
        # One choice per stage and pipeline run, kept across its iterators (the epochs of a
        # repeat): a short epoch would otherwise measure anew and never decide.
        decided: ExecutorDecision | None = None
        choice: ExecutorChoice | None = None
        if choose_executor:
            key = ("executor choice", stage_key if stage_key is not None else name)
            choice = ctx.remembered.get(key)
            if choice is None:
                choice = ctx.remembered[key] = ExecutorChoice(
                    name, parallelism, map_func, ctx.options.threading.close_timeout,
                    threads=self._ceiling, allow_processes=allow_processes)
            else:
                choice.carry_on()
            if choice.decision is not None:
                decided, choice = choice.decision, None
                choose_executor = False
                executor_kind = decided.kind
        self._knobs.choice, self._knobs.decided = choice, decided
        self._knobs.done = executor_kind == "process"
        self._executor_kind = executor_kind
        # Calls made on the consumer's thread (calls that hold the GIL, at one worker: see
        # the class doc), and whether the measurement found them so (tuned stages only).
        self._inline = self._serial = False
        # Inline with nothing in flight, re-read or pending: each ``next()`` pulls and maps
        # one element and counts it, no more (see ``_next_fast``).
        self._fast = False
        # Worker processes starting (a call each with no element: done once a worker has
        # started and loaded the function); meanwhile the consumer maps the elements
        # itself. ``None``: not started; ``[]``: started. Only where AUTOTUNE chose
        # processes: its first calls ran on the consumer's process already, whereas a
        # function given ``executor="process"`` may be one that must not (it may exit,
        # crash, or set up process-wide state).
        self._warming: list[Any] | None = None if (
            decided is not None or choice is not None) else []
        self._fn = map_func
        self._runner = _ChunkRunner(map_func, executor_kind == "process")
        threading_options = ctx.options.threading
        close_timeout = threading_options.close_timeout
        self._choice = choice
        make: Callable[[], Any]
        if choice is not None:
            # Measuring runners: alone (with the transport cost), then together (the gate
            # lets ``parallelism`` threads work at once: the choice measures as many).
            self._solo_runner = _ChunkRunner(map_func, False, probe=True, transport=True)
            self._probe_runner = _ChunkRunner(map_func, False, probe=True)
            make = functools.partial(choice.make_executor, self._gate)
        else:
            threads = self._ceiling if executor_kind == "thread" else parallelism
            gate = self._gate if executor_kind == "thread" else None

            def make() -> Any:
                if executor_kind == "process":
                    kept = _kept_pool(ctx, stage_key, parallelism)
                    if kept is not None:
                        return kept
                return make_executor(threads, name, executor_kind, close_timeout, gate)
        # Its worker processes, kept for the stage's next iterator (the next epoch of a
        # repeat) by its dataset node: their start-up is paid once per pipeline run.
        self._pool_key = stage_key
        self._window = ReadAhead(
            name, make,
            limit=2 * parallelism, deterministic=deterministic,
            element_timeout=threading_options.element_timeout, describe=_describe_chunk)
        self._knobs.window = self._window  # its limit follows the tuner's setting
        self._positions = PositionReader(upstream.__next__, upstream.state_dict,
                                         upstream.replay_exact, hold_order=upstream.hold_order)
        self._tracker = PositionTracker()
        # Computed but not yet handed out: (item, ok, result or error).
        self._ready: collections.deque[tuple[int, bool, Any]] = collections.deque()
        self._exhausted = False
        self._chunk_size = 1
        self._seconds_per_element: float | None = None
        # Seconds pulling one input element takes (a moving mean over chunks).
        self._pull_seconds: float | None = None
        self._tuner = ctx.autotuner() if tune else None
        if self._tuner is not None:
            self._counters = self._knobs.counters = self._tuner.register(
                self._knobs, stage_key if stage_key is not None else name)
        self._call = _caller(map_func)
        if self._tuner is not None and (measured := self._knobs.measured_calls) is not None:
            self._serial = self._inline_pays(measured)  # measured by an earlier epoch

    @property
    def replay_exact(self) -> bool:
        return self._deterministic and super().replay_exact

    def hold_order(self, hold: bool) -> None:
        self._window.set_ordered(self._deterministic or hold)
        super().hold_order(hold)

    def read_aheads(self) -> list[ReadAhead]:
        return [self._window]

    # ------------------------------------------------------------------ tuning
    @property
    def knobs(self) -> MapKnobs:
        """What the tuner sets and reads of this stage (:mod:`feedline.autotune.map_knobs`)."""
        return self._knobs

    @property
    def runs_inline(self) -> bool:
        """Whether its function is called on the consumer's thread (calls that hold the
        GIL, at one worker: see the class doc)."""
        return self._inline

    def _workers_starting(self) -> bool:
        """Whether its worker processes are still starting (see :meth:`_next_inline`):
        starts them on the first call. A worker takes seconds to start on a loaded machine
        (its interpreter, imports, the function), during which the consumer would wait,
        idle, for the first tasks; it maps the elements inline meanwhile instead."""
        warming = self._warming
        if warming is None:
            executor = self._window._executor_or_start()
            self._warming = warming = [executor.submit(self._runner, [])
                                       for _ in range(self._parallelism)]
        if warming and all(future.done() for future in warming):
            self._warming = warming = []
            self._back_to_the_window()
        return bool(warming)

    def _back_to_the_window(self) -> None:
        """Tasks again after inline calls: the window's positions start where they left
        off (on the fast path, which keeps no snapshots, every element pulled went out)."""
        position = (self._positions.pulled, self._upstream.state_dict())
        if self._fast:
            self._fast = False
            self._tracker.restore(initial_position(position[1], position[0]))
        else:
            self._tracker.add_snapshot(position)

    def _check_inline(self) -> None:
        """Follow the tuner's setting: inline at one worker for calls that hold the GIL,
        back on threads when it sets more (on the consumer's thread, between elements)."""
        wanted = self._gate.limit == 1
        if wanted == self._inline:
            return
        if not wanted:
            self._back_to_the_window()
        self._inline = wanted
        counters = self._counters
        if counters.inline == wanted:
            return  # the stage's earlier iterator (epoch) recorded it
        counters.inline = wanted
        if self._tuner is not None:
            figures = self._knobs.inline_figures()
            self._tuner.record(
                self._name, "inline", int(not wanted), int(wanted),
                "its calls hold the GIL and it runs one worker: a worker thread would only "
                "add a hand-off per element, so they run on its consumer's thread" if wanted
                else "the tuner set it more workers: back on its threads", figures)

    def _inline_pays(self, measured: CallMeasurement) -> bool:
        """Whether calls measured so run better inline at one worker (the placement
        policy's :func:`~feedline.placement.policy.runs_inline`)."""
        return runs_inline(self.executor_decision, holds_the_gil(measured))

    @property
    def executor_kind(self) -> str:
        """Where new tasks run: ``"thread"`` or ``"process"``."""
        return self._executor_kind

    @property
    def executor_decision(self) -> ExecutorDecision | None:
        """The automatic choice and its measurement (``None`` while measuring, or when the
        stage's executor was not chosen automatically); made once per pipeline run, by the
        stage's first iterator."""
        return self._knobs.executor_decision

    def _runner_for_next_task(self) -> _ChunkRunner:
        choice = self._choice
        if choice is None or not choice.measuring:
            return self._runner
        return self._solo_runner if choice.solo_phase() else self._probe_runner

    def _switch_to_processes(self) -> None:
        # The choice has switched the executor; tasks submitted from now on run there.
        self._executor_kind = "process"
        self._knobs.done = True  # the tuner sets threads only
        self._runner = _ChunkRunner(self._fn, True)
        if self._seconds_per_element is not None:
            self._adapt_chunk_size(1, self._seconds_per_element)

    def _fill(self) -> None:
        window, positions, tracker = self._window, self._positions, self._tracker
        if not tracker.has_snapshot:
            tracker.add_snapshot((positions.pulled, self._upstream.state_dict()))
        choice = self._choice
        clock = time.perf_counter
        if self._warming != [] and self._executor_kind == "process":
            return  # its workers are starting: the consumer maps the elements meanwhile
        while not self._exhausted and not self._inline and window.has_room():
            if choice is not None and not choice.may_submit(len(window)):
                break  # measuring: one task at a time alone, then whole tasks only
            items: list[int] = []
            values: list[Any] = []
            failure: tuple[int, BaseException] | None = None
            pulling_since = clock()
            size = self._chunk_size
            # Processes only: on threads, a pull also waits for the GIL the workers hold,
            # which would read as a slow input and cut every chunk short.
            bounded = self._executor_kind == "process"
            if size > 1 and bounded and self._pull_seconds is not None:
                # An input slow to give elements fills smaller chunks (see MAX_FILL_SECONDS).
                size = max(1, min(size, int(MAX_FILL_SECONDS / max(self._pull_seconds, 1e-9))))
            deadline = 0.0
            for _ in range(size):
                try:
                    item, is_error, value, snapshot = positions.pull()
                except StopIteration:
                    self._exhausted = True
                    break
                tracker.add_snapshot(snapshot)
                if is_error:
                    failure = (item, value)
                    break
                items.append(item)
                values.append(value)
                if size > 1 and bounded:
                    now = clock()
                    if not deadline:  # from the first element: waiting for it is no choice
                        deadline = now + MAX_FILL_SECONDS
                    elif now >= deadline:
                        break  # the input gives elements slowly: the workers get these now
            pulled = clock() - pulling_since
            self._counters.input += pulled
            if bounded and items and failure is None and not self._exhausted:
                per_element = pulled / len(items)
                self._pull_seconds = per_element if self._pull_seconds is None else \
                    0.8 * self._pull_seconds + 0.2 * per_element
            if items:
                if self._tuner is not None:
                    self._knobs.sample_input(values[0])
                runner = self._runner_for_next_task()
                if runner.probe:
                    assert choice is not None
                    choice.submitted()
                    window.submit(items, runner, values, time.perf_counter())
                else:
                    window.submit(items, runner, values)
            if failure is not None:
                # After the chunk pulled before it; the upstream goes on past a failure.
                window.add_failed(failure[0], failure[1])

    def _adapt_chunk_size(self, elements: int, seconds: float) -> None:
        per_element = seconds / elements
        previous = self._seconds_per_element
        self._seconds_per_element = per_element if previous is None else \
            0.8 * previous + 0.2 * per_element
        kind = self._executor_kind
        target = TARGET_TASK_SECONDS[kind]
        most = MAX_PROCESS_CHUNK if kind == "process" else MAX_CHUNK
        self._chunk_size = self._knobs.chunk_size = max(1, min(most, int(
            target / max(self._seconds_per_element, 1e-9))))

    def _handed_out(self, item: int) -> None:
        self._tracker.handed_out(item)
        self._positions.handed_out(item)

    def __next__(self) -> Any:
        counters = self._counters
        counters.calls += 1
        if self._fast:
            if self._inline:
                if self._gate.limit == 1:
                    return self._next_fast()
                self._check_inline()  # the tuner set more workers: back to the window
            elif self._workers_starting():  # on the window once they have started
                return self._next_fast()
        if self._serial:
            self._check_inline()
            if self._inline and not self._ready and not len(self._window):
                return self._next_inline()
        if self._warming != [] and self._executor_kind == "process" \
                and self._workers_starting() and not self._ready and not len(self._window):
            return self._next_inline()
        if not self._ready:
            self._fill()
            if not len(self._window):
                raise StopIteration
            if not self._window.head_ready():
                counters.waits += 1
            tag, future = self._window.take()
            if isinstance(tag, int):  # the upstream's error, already annotated by its stage
                self._handed_out(tag)
                error = future.exception()
                assert error is not None
                raise error
            # The runner never raises; a dead worker does.
            outcomes, seconds, cpu, probe = future.result()
            outcomes = unpack_outcomes(outcomes)
            self.busy_seconds += seconds
            counters.busy += seconds
            counters.cpu += cpu
            if self._tuner is not None and outcomes and outcomes[0][0]:
                self._knobs.sample_output(outcomes[0][1])
            choice = self._choice
            if choice is not None and choice.measuring:
                if choice.record(probe) == "process":
                    self._switch_to_processes()
                elif choice.decision is not None and self._tuner is not None:
                    measured = self._knobs.measured_calls
                    self._serial = measured is not None and self._inline_pays(measured)
                    self._tuner.wake()  # it starts the stage from the measurement
            self._adapt_chunk_size(len(tag), seconds)
            self._ready.extend((item, ok, value) for item, (ok, value) in zip(tag, outcomes))
        item, ok, value = self._ready.popleft()
        self._handed_out(item)
        counters.elements += 1
        if ok:
            return value
        raise annotate_error(value, self._name, item)

    def _next_fast(self) -> Any:
        """:meth:`_next_inline` with nothing to re-read, in flight or pending: the input's
        state is the stage's position (``_get_state``), so only the pulled count is kept."""
        positions = self._positions
        item = positions.pulled
        counters = self._counters
        try:
            value = next(self._upstream)
        except StopIteration:
            raise
        except Exception:
            positions.pulled = item + 1
            counters.elements += 1
            raise  # the input's error, already annotated by the stage that raised it
        positions.pulled = item + 1
        counters.elements += 1
        if self._warming:
            started = time.perf_counter()
            try:
                return normalize_output(self._call(self._fn, value))
            except Exception as error:  # noqa: BLE001 - re-raised with the stage named
                raise annotate_error(error, self._name, item)
            finally:
                # The first tasks' size, when the workers have started.
                self._adapt_chunk_size(1, time.perf_counter() - started)
        # Untimed: the tuner judges an inline stage on its rate (its consumer never waits
        # for a worker), and a clock read on each side costs what a cheap call does.
        try:
            # Inside the try: a result that is no element is this stage's error.
            return normalize_output(self._call(self._fn, value))
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, item)

    def _next_inline(self) -> Any:
        """The next element, its function called here (every earlier one handed out)."""
        positions = self._positions
        if not (positions.replaying or positions.errors):
            self._fast = True
            return self._next_fast()
        # Re-reading after a restore (or an input error's record pending): the reader
        # skips what went out before the checkpoint and raises restored errors.
        item, is_error, value, snapshot = positions.pull()
        self._tracker.add_snapshot(snapshot)
        self._handed_out(item)
        counters = self._counters
        counters.elements += 1
        if is_error:
            raise value  # already annotated by the stage that raised it
        started = time.perf_counter()
        try:
            # Inside the try: a result that is no element is this stage's error.
            return normalize_output(self._call(self._fn, value))
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, item)
        finally:
            # The tuner's busy time; on a CPU all along (calls that hold the GIL).
            seconds = time.perf_counter() - started
            counters.busy += seconds
            counters.cpu += seconds
            self.busy_seconds += seconds
            if self._warming:
                self._adapt_chunk_size(1, seconds)  # the first tasks' size, when they start

    def _get_state(self) -> State:
        if self._fast or (self._inline or self._warming) and not self._ready \
                and not len(self._window) and not self._positions.replaying \
                and not self._positions.errors:
            # Everything pulled was handed out: the position is exact.
            return initial_position(self._upstream.state_dict(), self._positions.pulled)
        if not self._tracker.has_snapshot:  # nothing pulled yet: the upstream is here
            return initial_position(self._upstream.state_dict(), self._positions.pulled)
        return self._tracker.state(self._positions.pending_errors(self._tracker))

    def _set_state(self, state: State) -> None:
        # Tasks never touch the upstream: what they compute is simply no longer wanted.
        self._window.discard()
        self._fast = False  # the restored position may have items to skip
        if self._choice is not None:
            self._choice.reset()  # its measured tasks in flight will never be recorded
        self._ready.clear()
        self._exhausted = False
        self._upstream.load_state_dict(state["input"])
        self._positions.restore(state)
        self._tracker.restore(state)

    def _release(self) -> None:
        self._knobs.done = True  # closed: the tuner forgets it
        self._ready.clear()
        if self._warming and not all(future.done() for future in self._warming):
            # Closed while its workers start: ending them mid-start is expected, not a
            # call that failed to stop (the executor warns of those).
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=RuntimeWarning,
                                        message=r"feedline: .* did not stop within")
                self._window.shutdown()
            return
        ctx = self._ctx
        if self._executor_kind != "process" or self._pool_key is None or ctx.closing:
            self._window.shutdown()
            return
        # The next iterator of this stage (the next epoch of a repeat) takes the worker
        # processes over; the pipeline's close ends them (ctx.close_kept). Calls of this
        # iterator still running there finish unread.
        executor = self._window.shutdown(keep_executor=True)
        keep_processes = getattr(executor, "keep_processes", None)
        if keep_processes is not None:  # AUTOTUNE's: threads, then processes
            executor = keep_processes()
        if getattr(executor, "reusable", False):
            ctx.keep(self._pool_key, executor)
        elif executor is not None:
            executor.shutdown()


def _kept_pool(ctx: IteratorContext, node: object, workers: int) -> Any:
    """The worker processes an earlier iterator of the map ``node`` kept (see
    ``ParallelMapIterator._release``), if they are ``workers`` and still usable; else ``None``
    (anything kept for it is shut down)."""
    if node is None:
        return None
    kept = ctx.kept.pop(node, None)
    if kept is None:
        return None
    if getattr(kept, "reusable", False) and getattr(kept, "workers", None) == workers:
        return kept
    kept.shutdown()
    return None


def _describe_chunk(tag: Any) -> str:
    first = tag if isinstance(tag, int) else tag[0]
    return f"input element {first}"
