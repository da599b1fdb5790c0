"""``map``: apply a function to every element, inline or on parallel workers."""

from __future__ import annotations

import collections
import functools
import time
import traceback
from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.error_records import error_record, restore_error
from feedline.core.functions import annotate_error, call_with_element, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import decode, encode
from feedline.core.structure import normalize_output
from feedline.core.validation import resolve_parallelism, validate_parallelism
from feedline.execution.buffer import BufferClosed
from feedline.execution.executor import make_executor
from feedline.execution.parallel_calls import FailedInput, ParallelCalls


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
    """Calls the function inline: no thread hand-off, the cheapest way for light functions."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._fn = map_func
        self._call = _caller(map_func)
        self._name = name
        self._index = 0

    def __next__(self) -> Any:
        element = next(self._upstream)
        self._index += 1
        try:
            # Inside the try: a result that is no element is this stage's error.
            return normalize_output(self._call(self._fn, element))
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, self._index - 1)

    def _get_state(self) -> State:
        return {"index": self._index, "input": self._upstream.state_dict()}

    def _set_state(self, state: State) -> None:
        self._upstream.load_state_dict(state["input"])
        self._index = state["index"]


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

    def __call__(self, chunk: list[tuple[int, Any]]) -> tuple[list[tuple[bool, Any]], float]:
        started = time.perf_counter()
        outcomes: list[tuple[bool, Any]] = []
        fn, call = self.fn, self.call
        for _, element in chunk:
            try:
                outcomes.append((True, normalize_output(call(fn, element))))
            except Exception as error:  # noqa: BLE001 - raised on the consumer's thread
                if self.in_subprocess:
                    error.add_note("worker traceback:\n" + "".join(traceback.format_exception(error)))
                outcomes.append((False, error))
        return outcomes, time.perf_counter() - started


class ParallelMapIterator(DatasetIterator):
    """Runs the function on ``parallelism`` workers; pulls inputs on the consumer's thread.

    Pulling on the consumer's thread keeps the upstream single-threaded (no locks there) and
    makes the state exact: the upstream position plus the inputs not yet handed out.
    Elements travel to workers in chunks sized from measured call times, so cheap functions
    do not pay a thread hand-off per element.

    An error of the upstream takes its place in the window of calls: the elements pulled
    before it come out first, in order, then the error, then the elements after it (as in
    tf.data; nothing is dropped). A checkpoint stores it in its place too.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str, parallelism: int,
                 deterministic: bool, executor_kind: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._fn = map_func
        self._name = name
        self._parallelism = parallelism
        self._deterministic = deterministic
        self._executor_kind = executor_kind
        self._calls: ParallelCalls | None = None
        # Computed but not yet handed out: (index, input, ok, result or error).
        self._ready: collections.deque[tuple[int, Any, bool, Any]] = collections.deque()
        # In-flight inputs from a checkpoint, submitted by _start(): (index, input) pairs
        # and the upstream's failures in their places.
        self._restored_inputs: list[tuple[int, Any] | FailedInput] = []
        self._next_index = 0
        self._exhausted = False
        self._chunk_size = 1
        self._seconds_per_element: float | None = None

    def _start(self) -> ParallelCalls:
        runner = _ChunkRunner(self._fn, self._executor_kind == "process")
        calls = self._calls = ParallelCalls(
            runner, make_executor(self._parallelism, self._name, self._executor_kind),
            2 * self._parallelism, self._deterministic)
        if self._closed:
            # close() from another thread ran before self._calls was set: it could not
            # shut these workers down, so this thread does.
            calls.shutdown()
            raise BufferClosed
        self._submit_in_chunks(self._restored_inputs)
        self._restored_inputs = []
        return calls

    def _submit_in_chunks(self, items: list[tuple[int, Any] | FailedInput]) -> None:
        calls = self._calls
        assert calls is not None
        run: list[tuple[int, Any]] = []
        for item in [*items, None]:
            if isinstance(item, tuple):
                run.append(item)
                continue
            for start in range(0, len(run), self._chunk_size):
                calls.submit(run[start:start + self._chunk_size])
            run = []
            if item is not None:
                calls.add_failed(item.error)

    def _fill(self, calls: ParallelCalls) -> None:
        upstream = self._upstream
        while not self._exhausted and calls.has_room():
            chunk: list[tuple[int, Any]] = []
            failure: Exception | None = None
            for _ in range(self._chunk_size):
                try:
                    element = next(upstream)
                except StopIteration:
                    self._exhausted = True
                    break
                except Exception as error:  # noqa: BLE001 - handed out in its turn
                    failure = error
                    break
                chunk.append((self._next_index, element))
                self._next_index += 1
            if chunk:
                calls.submit(chunk)
            if failure is not None:
                # After the chunk pulled before it; the upstream goes on past a failure.
                calls.add_failed(failure)

    def _adapt_chunk_size(self, elements: int, seconds: float) -> None:
        per_element = seconds / elements
        previous = self._seconds_per_element
        self._seconds_per_element = per_element if previous is None else \
            0.8 * previous + 0.2 * per_element
        target = TARGET_TASK_SECONDS[self._executor_kind]
        self._chunk_size = max(1, min(MAX_CHUNK, int(target / max(self._seconds_per_element,
                                                                    1e-9))))

    def __next__(self) -> Any:
        if not self._ready:
            calls = self._calls if self._calls is not None else self._start()
            self._fill(calls)
            if not len(calls):
                raise StopIteration
            chunk, future = calls.take()
            if isinstance(chunk, FailedInput):
                raise chunk.error  # the upstream's error, already annotated by its stage
            outcomes, seconds = future.result()  # the runner never raises; a dead worker does
            self._adapt_chunk_size(len(chunk), seconds)
            self._ready.extend((index, element, ok, value)
                               for (index, element), (ok, value) in zip(chunk, outcomes))
        index, _, ok, value = self._ready.popleft()
        if ok:
            return value
        raise annotate_error(value, self._name, index)

    def _pending_inputs(self) -> list[tuple[int, Any] | FailedInput]:
        if self._calls is None:
            return self._restored_inputs
        pending: list[tuple[int, Any] | FailedInput] = [
            (index, element) for index, element, _, _ in self._ready]
        for chunk in self._calls.pending_inputs():
            if isinstance(chunk, FailedInput):
                pending.append(chunk)
            else:
                pending.extend(chunk)
        return pending

    def _get_state(self) -> State:
        # Inputs are re-run on restore (a failing call fails again); the upstream's own
        # failures cannot be re-run (the upstream is past them), so they are stored.
        in_flight = [{"input_error": error_record(item.error)} if isinstance(item, FailedInput)
                     else [item[0], encode(item[1])] for item in self._pending_inputs()]
        return {"next_index": self._next_index, "exhausted": self._exhausted,
                "in_flight": in_flight, "input": self._upstream.state_dict()}

    def _set_state(self, state: State) -> None:
        self._ready.clear()
        if self._calls is not None:
            self._calls.discard()
        self._upstream.load_state_dict(state["input"])
        self._next_index = state["next_index"]
        self._exhausted = state["exhausted"]
        items: list[tuple[int, Any] | FailedInput] = [
            FailedInput(restore_error(saved["input_error"])) if isinstance(saved, dict)
            else (int(saved[0]), decode(saved[1])) for saved in state["in_flight"]]
        if self._calls is not None:
            self._submit_in_chunks(items)
        else:
            self._restored_inputs = items

    def _release(self) -> None:
        self._ready.clear()
        calls = self._calls
        if calls is not None:
            calls.shutdown()
