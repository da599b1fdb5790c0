"""``map``: apply a function to every element, inline or on parallel workers."""

from __future__ import annotations

import collections
import functools
import time
import traceback
from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.functions import annotate_error, call_with_element, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import normalize_output
from feedline.core.validation import resolve_parallelism, validate_parallelism
from feedline.execution.executor import make_executor
from feedline.execution.positions import (
    PositionReader,
    PositionTracker,
    initial_position,
    replay_from,
)
from feedline.execution.read_ahead import ReadAhead


class MapDataset(Dataset):
    """The node of ``Dataset.map``."""

    def __init__(self, input_dataset: Dataset, map_func: Callable[..., Any],
                 num_parallel_calls: int | None = None, deterministic: bool | None = None,
                 name: str | None = None, executor: str = "thread",
                 unpack_tuples: bool = True) -> None:
        super().__init__([input_dataset])
        if not callable(map_func):
            raise TypeError(f"map() needs a callable, got {type(map_func).__name__}")
        num_parallel_calls = validate_parallelism(num_parallel_calls, "map(num_parallel_calls)")
        if executor not in ("thread", "process"):
            raise ValueError(f"map(executor) must be 'thread' or 'process', got {executor!r}")
        self.map_func = map_func
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
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
        return ParallelMapIterator(
            ctx, upstream, fn, self.name,
            resolve_parallelism(self.num_parallel_calls, ctx),
            ctx.deterministic(self.deterministic), self.executor)


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


TARGET_TASK_SECONDS = {"thread": 0.0005, "process": 0.005}
"""How long one task should run: long enough that hand-off costs are small beside it."""
MAX_CHUNK = 64


class _ChunkRunner:
    """Runs the map function over a chunk of elements on a worker; never raises.

    Each outcome is ``(True, result)`` or ``(False, exception)`` so one bad element does not
    cost the others. In a worker process the traceback would be lost in pickling, so it is
    attached to the exception as a note.
    """

    def __init__(self, fn: Callable[..., Any], in_subprocess: bool) -> None:
        self.fn = fn
        self.call = _caller(fn)
        self.in_subprocess = in_subprocess

    def __call__(self, chunk: list[Any]) -> tuple[list[tuple[bool, Any]], float]:
        started = time.perf_counter()
        outcomes: list[tuple[bool, Any]] = []
        fn, call = self.fn, self.call
        for element in chunk:
            try:
                outcomes.append((True, normalize_output(call(fn, element))))
            except Exception as error:  # noqa: BLE001 - raised on the consumer's thread
                if self.in_subprocess:
                    error.add_note("worker traceback:\n" + "".join(traceback.format_exception(error)))
                outcomes.append((False, error))
        return outcomes, time.perf_counter() - started


class ParallelMapIterator(DatasetIterator):
    """Runs the function on ``parallelism`` workers; pulls inputs on the consumer's thread.

    Pulling on the consumer's thread keeps the upstream single-threaded (no locks there).
    Elements travel to workers in chunks sized from measured call times, so cheap functions
    do not pay a thread hand-off per element; the chunks run on a
    :class:`~feedline.execution.read_ahead.ReadAhead` window of ``2 * parallelism`` tasks.

    An error of the upstream takes its place in the window: the elements pulled before it
    come out first, in order, then the error, then the elements after it (as in tf.data;
    nothing is dropped).

    The state is a position (:mod:`feedline.execution.positions`): the input's state at or
    before the first element not handed out, plus which later ones went out already
    (``deterministic=False``). Elements in flight are computed again after a restore; an
    input error pulled but not raised yet is stored as a record.
    """

    OPERATION = "map"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str, parallelism: int,
                 deterministic: bool, executor_kind: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._name = name
        self._deterministic = deterministic
        self._executor_kind = executor_kind
        self._runner = _ChunkRunner(map_func, executor_kind == "process")
        threading_options = ctx.options.threading
        self._window = ReadAhead(
            name, lambda: make_executor(parallelism, name, executor_kind,
                                        threading_options.close_timeout),
            limit=2 * parallelism, deterministic=deterministic,
            element_timeout=threading_options.element_timeout, describe=_describe_chunk)
        self._positions = PositionReader(upstream.__next__, upstream.state_dict,
                                         upstream.replay_exact)
        self._tracker = PositionTracker()
        # Computed but not yet handed out: (item, ok, result or error).
        self._ready: collections.deque[tuple[int, bool, Any]] = collections.deque()
        self._exhausted = False
        self._chunk_size = 1
        self._seconds_per_element: float | None = None

    @property
    def replay_exact(self) -> bool:
        return self._deterministic and super().replay_exact

    def _fill(self) -> None:
        window, positions, tracker = self._window, self._positions, self._tracker
        if not tracker.has_snapshot:
            tracker.add_snapshot((positions.pulled, self._upstream.state_dict()))
        while not self._exhausted and window.has_room():
            items: list[int] = []
            values: list[Any] = []
            failure: tuple[int, BaseException] | None = None
            for _ in range(self._chunk_size):
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
            if items:
                window.submit(items, self._runner, values)
            if failure is not None:
                # After the chunk pulled before it; the upstream goes on past a failure.
                window.add_failed(failure[0], failure[1])

    def _adapt_chunk_size(self, elements: int, seconds: float) -> None:
        per_element = seconds / elements
        previous = self._seconds_per_element
        self._seconds_per_element = per_element if previous is None else \
            0.8 * previous + 0.2 * per_element
        target = TARGET_TASK_SECONDS[self._executor_kind]
        self._chunk_size = max(1, min(MAX_CHUNK, int(target / max(self._seconds_per_element,
                                                                    1e-9))))

    def _handed_out(self, item: int) -> None:
        self._tracker.handed_out(item)
        self._positions.handed_out(item)

    def __next__(self) -> Any:
        if not self._ready:
            self._fill()
            if not len(self._window):
                raise StopIteration
            tag, future = self._window.take()
            if isinstance(tag, int):  # the upstream's error, already annotated by its stage
                self._handed_out(tag)
                error = future.exception()
                assert error is not None
                raise error
            outcomes, seconds = future.result()  # the runner never raises; a dead worker does
            self._adapt_chunk_size(len(tag), seconds)
            self._ready.extend((item, ok, value) for item, (ok, value) in zip(tag, outcomes))
        item, ok, value = self._ready.popleft()
        self._handed_out(item)
        if ok:
            return value
        raise annotate_error(value, self._name, item)

    def _get_state(self) -> State:
        if not self._tracker.has_snapshot:  # nothing pulled yet: the upstream is here
            return initial_position(self._upstream.state_dict(), self._positions.pulled)
        return self._tracker.state(self._positions.pending_errors(self._tracker))

    def _set_state(self, state: State) -> None:
        # Tasks never touch the upstream: what they compute is simply no longer wanted.
        self._window.discard()
        self._ready.clear()
        self._exhausted = False
        self._upstream.load_state_dict(state["input"])
        self._positions.restore(state)
        self._tracker.restore(state)

    def _release(self) -> None:
        self._ready.clear()
        self._window.shutdown()


def _describe_chunk(tag: Any) -> str:
    first = tag if isinstance(tag, int) else tag[0]
    return f"input element {first}"
