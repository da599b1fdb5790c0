"""``interleave``: map input elements to datasets and read several of them in turn.

The order is tf.data's, element for element. ``cycle_length`` slots each hold a dataset
made by ``map_func``; the stage takes ``block_length`` elements from the slot at the cycle
position, then moves to the next slot. A slot whose dataset ends is emptied and the cycle
moves on; when the cycle comes back to an empty slot it is filled, in place, from the next
input element. Once the input is exhausted empty slots are skipped, and the stage ends when
every slot is empty.

With ``num_parallel_calls`` set, each open slot (and up to ``cycle_length`` datasets that
will enter the cycle next) is read ahead on the stage's own thread pool, so reading many
files overlaps; the output order stays exactly the same unless ``deterministic=False``,
which lets the stage take from whichever slot has an element ready. That is the main way
to read many files in parallel.
"""

from __future__ import annotations

import collections
import functools
import math
import threading
from collections.abc import Callable
from typing import Any

from feedline.core.constants import AUTOTUNE, INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.error_records import error_record, restore_error
from feedline.core.errors import CheckpointError
from feedline.core.functions import annotate_error, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import decode, encode
from feedline.core.validation import (
    resolve_parallelism,
    schedulable_cpus,
    validate_int,
    validate_optional_int,
    validate_parallelism,
)
from feedline.execution.executor import Executor, make_executor
from feedline.transforms.flat_map import make_inner_dataset, note_inner_error

PREFETCH_INPUT_FACTOR = 1
"""Datasets opened and read ahead before they enter the cycle, per unit of ``cycle_length``
(tf.data uses 2; opened datasets hold files, so feedline keeps fewer)."""

MIN_SLOT_BUFFER = 16
"""Fewest elements read ahead per slot; tf.data's ``2 * block_length + 1`` when larger.
Bigger than tf.data's minimum so that a worker reads a few elements per task, not one."""


def resolve_cycle_length(cycle_length: int | None, num_parallel_calls: int | None) -> int:
    """The cycle length tf.data uses for these arguments.

    ``None``/``AUTOTUNE`` means: the number of CPUs for the sequential stage; with a fixed
    ``num_parallel_calls``, that number capped at the CPUs; with ``AUTOTUNE`` parallelism,
    a third of the CPUs rounded up (tf.data leaves room for its read-ahead threads).

    Example:
        >>> resolve_cycle_length(4, None)
        4
    """
    if cycle_length is not None and cycle_length != AUTOTUNE:
        return cycle_length
    cpus = schedulable_cpus()
    if num_parallel_calls is None:
        return cpus
    if num_parallel_calls != AUTOTUNE:
        return min(num_parallel_calls, cpus)
    return math.ceil(cpus / 3)


def _open_inner(map_func: Callable[..., Any], ctx: IteratorContext, stage: str, element: Any,
                index: int) -> DatasetIterator:
    dataset = make_inner_dataset(map_func, element, stage, index)
    try:
        return dataset._make_iterator(ctx)
    except Exception as error:  # noqa: BLE001 - re-raised with a note
        raise annotate_error(error, stage, index)


# ------------------------------------------------------------------ the dataset node
def load_cycle_position(iterator: Any, state: State, stop_cycle: Callable[[], None]) -> None:
    """The part of restoring shared by both interleave iterators: check the cycle length,
    stop the open datasets (``stop_cycle``), rewind the input and the cycle position.

    The caller then reopens the saved slots.
    """
    if len(state["slots"]) != len(iterator._cycle):
        raise CheckpointError(
            f"{iterator._name}: the state has {len(state['slots'])} cycle slots but this "
            f"pipeline's cycle_length is {len(iterator._cycle)}")
    stop_cycle()
    iterator._upstream.load_state_dict(state["input"])
    iterator._cycle_index = state["cycle_index"]
    iterator._block_index = state["block_index"]
    iterator._end_of_input = state["end_of_input"]
    iterator._next_input_index = state["next_input_index"]
    iterator._num_open = 0


class InterleaveDataset(Dataset):
    """The node of ``Dataset.interleave``.

    Args:
        input_dataset: Elements to make datasets from.
        map_func: ``element -> Dataset`` (tuple components become positional arguments).
        cycle_length: Datasets read in turn; ``None``/``AUTOTUNE`` lets the runtime choose
            (see :func:`resolve_cycle_length`).
        block_length: Consecutive elements taken from one dataset before moving on.
        num_parallel_calls: ``None`` reads synchronously; an int or ``AUTOTUNE`` reads the
            open datasets ahead on that many threads.
        deterministic: ``False`` (parallel only) lets elements come from whichever dataset
            has one ready; ``None`` defers to ``Options.deterministic`` (default: ordered).
        name: Shown in errors, thread names and profiles.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(1, 6).interleave(
        ...     lambda x: fl.Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
        >>> [int(x) for x in ds]  # tf.data's documented example
        [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]
    """

    def __init__(self, input_dataset: Dataset, map_func: Callable[..., Dataset],
                 cycle_length: int | None = None, block_length: int | None = 1,
                 num_parallel_calls: int | None = None, deterministic: bool | None = None,
                 name: str | None = None) -> None:
        super().__init__([input_dataset])
        if not callable(map_func):
            raise TypeError(
                f"interleave() needs a callable map_func, got {type(map_func).__name__}")
        cycle_length = validate_optional_int(
            cycle_length, "interleave(cycle_length)", minimum=1, special=(AUTOTUNE,),
            hint="None, AUTOTUNE or a positive int")
        block_length = validate_int(1 if block_length is None else block_length,
                                    "interleave(block_length)", minimum=1, hint="a positive int")
        num_parallel_calls = validate_parallelism(num_parallel_calls,
                                                  "interleave(num_parallel_calls)")
        self.map_func = map_func
        self.cycle_length = cycle_length
        self.block_length = block_length
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
        self.name = name or f"interleave({function_name(map_func)})"

    def cardinality(self) -> int:
        # tf.data: the parallel stage passes an infinite input on; otherwise unknown.
        if self.num_parallel_calls is not None and self._inputs[0].cardinality() == INFINITE:
            return INFINITE
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        cycle_length = resolve_cycle_length(self.cycle_length, self.num_parallel_calls)
        opener = functools.partial(_open_inner, self.map_func, ctx, self.name)
        if self.num_parallel_calls is None:
            return InterleaveIterator(ctx, upstream, opener, cycle_length, self.block_length,
                                      self.name)
        if self.num_parallel_calls == AUTOTUNE:
            workers = min(resolve_parallelism(AUTOTUNE, ctx), cycle_length)
        else:
            workers = self.num_parallel_calls
        return ParallelInterleaveIterator(
            ctx, upstream, opener, cycle_length, self.block_length, self.name, workers,
            ctx.deterministic(self.deterministic))


Opener = Callable[[Any, int], DatasetIterator]


# ------------------------------------------------------------------ sequential
class _Open:
    """A cycle slot of the sequential stage: the input element and its dataset's iterator."""

    __slots__ = ("element", "index", "iterator")

    def __init__(self, index: int, element: Any, iterator: DatasetIterator) -> None:
        self.index = index
        self.element = element
        self.iterator = iterator


class InterleaveIterator(DatasetIterator):
    """The synchronous stage: tf.data's ``InterleaveDataset`` loop, step for step.

    Errors: a failing ``map_func`` consumes its input element and leaves the slot empty (the
    next call fills it from the next element); an error from an inner dataset leaves the
    position unchanged, so the next call asks that dataset again.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._opener = opener
        self._block_length = block_length
        self._name = name
        self._cycle: list[_Open | None] = [None] * cycle_length
        self._cycle_index = 0
        self._block_index = 0
        self._end_of_input = False
        self._num_open = 0
        self._next_input_index = 0

    def _advance_to_next_in_cycle(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._cycle)

    def __next__(self) -> Any:
        cycle = self._cycle
        while not self._end_of_input or self._num_open:
            current = cycle[self._cycle_index]
            if current is not None:
                try:
                    element = next(current.iterator)
                except StopIteration:
                    current.iterator.close()
                    cycle[self._cycle_index] = None
                    self._num_open -= 1
                    self._advance_to_next_in_cycle()
                    continue
                except Exception as error:  # noqa: BLE001 - re-raised with a note
                    raise note_inner_error(error, self._name, current.index)
                self._block_index += 1
                if self._block_index == self._block_length:
                    self._advance_to_next_in_cycle()
                return element
            if self._end_of_input:
                self._advance_to_next_in_cycle()
                continue
            try:
                element = next(self._upstream)
            except StopIteration:
                self._end_of_input = True
                continue
            index = self._next_input_index
            self._next_input_index += 1
            cycle[self._cycle_index] = _Open(index, element, self._opener(element, index))
            self._num_open += 1
        raise StopIteration

    def _get_state(self) -> State:
        slots = [None if s is None else [s.index, encode(s.element), s.iterator.state_dict()]
                 for s in self._cycle]
        return {"cycle_index": self._cycle_index, "block_index": self._block_index,
                "end_of_input": self._end_of_input, "next_input_index": self._next_input_index,
                "slots": slots, "input": self._upstream.state_dict()}

    def _set_state(self, state: State) -> None:
        load_cycle_position(self, state, self._release)
        for position, saved in enumerate(state["slots"]):
            if saved is None:
                continue
            index, encoded, inner_state = saved
            element = decode(encoded)
            iterator = self._opener(element, index)
            self._cycle[position] = _Open(index, element, iterator)
            self._num_open += 1
            iterator.load_state_dict(inner_state)

    def _release(self) -> None:
        for position, slot in enumerate(self._cycle):
            if slot is not None:
                self._cycle[position] = None
                slot.iterator.close()


# ------------------------------------------------------------------ parallel
_ELEMENT, _END, _ERROR, _FAILED = 0, 1, 2, 3
"""Items of a slot's read-ahead buffer: an element, the end of its dataset, an error from
its dataset (reading may continue after it), or a failure to make the dataset at all."""


class _Slot:
    """One input element's dataset, opened and read ahead by tasks on the stage's executor.

    At most one task per slot runs at a time. A task holds ``pull_lock`` while it opens or
    advances the inner iterator and appends the result, so whoever holds ``pull_lock`` sees
    the inner iterator's position and the buffer agree (what a checkpoint needs). The buffer
    and the flags are guarded by ``cond``, shared by all slots of a stage so that the
    consumer can wait for "any slot has an item".

    The inner iterator is made on the consumer's thread, in input order, like the sequential
    stage does (so ``map_func`` needs no locking and per-node epoch counts stay the same);
    a failure to make it is stored as the slot's only item. A slot refers to its executor,
    ``cond`` and inner iterator only, never to the stage iterator, so an abandoned pipeline
    can still be garbage-collected (and so closed) while tasks run.
    """

    def __init__(self, index: int, element: Any, iterator: DatasetIterator | None,
                 capacity: int, executor: Executor, cond: threading.Condition,
                 preloaded: tuple[tuple[int, Any], ...] = ()) -> None:
        self.index = index
        self.element = element
        self.items: collections.deque[tuple[int, Any]] = collections.deque(preloaded)
        self.capacity = capacity
        self.low_water = capacity // 2
        # The dataset has ended or could not be made: nothing more will be read.
        self.ended = any(kind in (_END, _FAILED) for kind, _ in preloaded)
        self.running = False
        self.stopped = False
        self.iterator = iterator
        self.executor = executor
        self._cond = cond
        self.pull_lock = threading.Lock()

    def request(self) -> None:
        """Start a read-ahead task unless one runs or nothing is left; hold ``cond``."""
        if not self.running and not self.ended and not self.stopped \
                and len(self.items) < self.capacity:
            self.running = True
            self.executor.submit(self._fill)

    def _fill(self) -> None:
        cond, items = self._cond, self.items
        try:
            while True:
                with self.pull_lock:
                    # Reads of ``stopped`` and ``len(items)`` without ``cond`` are hints only:
                    # the decisions that matter are taken again under ``cond`` below.
                    if self.stopped:
                        with cond:
                            self.running = False
                        return
                    # Pull several items per hand-off (fewer lock round trips), but hand
                    # over at once when the consumer has run dry.
                    batch = [self._pull()]
                    room = self.capacity - len(items) - 1
                    while room > 0 and batch[-1][0] == _ELEMENT and items \
                            and not self.stopped:
                        batch.append(self._pull())
                        room -= 1
                    with cond:
                        if self.stopped:
                            self.running = False
                            return
                        items.extend(batch)
                        kind = batch[-1][0]
                        if kind in (_END, _FAILED):
                            self.ended = True
                        done = self.ended or kind == _ERROR or len(items) >= self.capacity
                        if done:
                            self.running = False
                        cond.notify_all()
                if done:
                    return
        except BaseException as error:  # noqa: BLE001 - a bug must not leave the consumer waiting
            with cond:
                self.items.append((_ERROR, error))
                self.running = False
                cond.notify_all()

    def _pull(self) -> tuple[int, Any]:
        """Read one item (call with ``pull_lock`` held)."""
        try:
            return (_ELEMENT, next(self.iterator))  # type: ignore[arg-type]
        except StopIteration:
            return (_END, None)
        except BaseException as error:  # noqa: BLE001 - handed over; reading may go on after it
            return (_ERROR, error)

    def state(self) -> dict[str, Any]:
        """This slot's part of a checkpoint; call on the consumer's thread, ``cond`` not held."""
        with self.pull_lock:
            with self._cond:
                items = list(self.items)
            if self.ended or self.iterator is None:
                inner = None  # never read again: nothing to reopen
            else:
                inner = self.iterator.state_dict()
        return {"index": self.index, "element": encode(self.element), "inner": [inner],
                "items": [_encode_item(item) for item in items]}

    def stop(self) -> None:
        """Stop reading, wait for a read in progress, close the inner iterator. Idempotent."""
        with self._cond:
            self.stopped = True
        with self.pull_lock:
            iterator, self.iterator = self.iterator, None
        if iterator is not None:
            iterator.close()


def _encode_item(item: tuple[int, Any]) -> list[Any]:
    kind, value = item
    if kind == _ELEMENT:
        return ["element", encode(value)]
    if kind == _END:
        return ["end"]
    return ["error" if kind == _ERROR else "failed", error_record(value)]


def _decode_item(saved: list[Any]) -> tuple[int, Any]:
    kind = saved[0]
    if kind == "element":
        return (_ELEMENT, decode(saved[1]))
    if kind == "end":
        return (_END, None)
    if kind not in ("error", "failed"):
        raise CheckpointError(f"unknown interleave buffer entry {kind!r}")
    return (_ERROR if kind == "error" else _FAILED, restore_error(saved[1]))


class _InputError:
    """An error the input raised while the stage read ahead; raised when its turn comes."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ParallelInterleaveIterator(DatasetIterator):
    """Reads every open dataset ahead on a pool of ``workers`` threads.

    The consumer's thread runs the same cycle as :class:`InterleaveIterator`, but takes each
    element from the slot's read-ahead buffer. Input elements are pulled, and ``map_func``
    makes their datasets, on the consumer's thread in input order (the input stays
    single-threaded and ``map_func`` needs no locking); they wait in a queue of *future*
    slots (up to ``PREFETCH_INPUT_FACTOR * cycle_length``) that start reading at once, and
    an empty cycle slot takes the next one from that queue. Since slots are refilled in
    exactly the order the sequential cycle refills them, the output order is the same.
    Workers read one slot at a time each, a few elements per task, and stop when the
    slot's buffer is full, so ``workers`` threads serve any number of slots.

    With ``deterministic=False`` the consumer takes from the first slot, in cycle order from
    the current position, that has an item ready, and only waits when none has.

    State: the input's state, the cycle position, and for each cycle slot and future slot
    its input element, its inner iterator's state and its buffered items (elements, end
    marks and errors, encoded), all taken while the slot's reader is paused.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str, workers: int,
                 deterministic: bool) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._opener = opener
        self._block_length = block_length
        self._name = name
        self._workers = max(1, workers)
        self._deterministic = deterministic
        self._capacity = max(2 * block_length + 1, MIN_SLOT_BUFFER)
        # Datasets waiting to enter the cycle read only tf.data's 2 * block_length + 1 ahead:
        # enough to hide opening them, without holding a full buffer each.
        self._future_capacity = min(self._capacity, 2 * block_length + 1)
        self._max_open = cycle_length * (1 + PREFETCH_INPUT_FACTOR)
        self._cond = threading.Condition(threading.Lock())
        self._executor: Executor | None = None
        self._cycle: list[_Slot | None] = [None] * cycle_length
        self._futures: collections.deque[_Slot | _InputError] = collections.deque()
        self._cycle_index = 0
        self._block_index = 0
        self._end_of_input = False
        self._num_open = 0
        self._next_input_index = 0
        self._closing = False

    # ---------------------------------------------------------------- helpers
    def _executor_or_start(self) -> Executor:
        if self._executor is None:
            executor = self._executor = make_executor(self._workers, self._name)
            with self._cond:  # slots restored from a checkpoint start reading now
                for slot in self._all_slots():
                    slot.executor = executor
                    slot.request()
        return self._executor

    def _all_slots(self) -> list[_Slot]:
        slots = [s for s in self._cycle if s is not None]
        slots.extend(f for f in self._futures if isinstance(f, _Slot))
        return slots

    def _new_slot(self, index: int, element: Any, capacity: int,
                  inner_state: State | None = None,
                  preloaded: tuple[tuple[int, Any], ...] = ()) -> _Slot:
        """A slot for input element ``index``, its dataset made (and restored) now."""
        executor = self._executor or _DeferredExecutor()
        iterator = None
        if not any(kind in (_END, _FAILED) for kind, _ in preloaded):
            try:
                iterator = self._opener(element, index)
                if inner_state is not None:
                    iterator.load_state_dict(inner_state)
            except Exception as error:  # raised in its turn, or re-raised
                if iterator is not None:
                    iterator.close()
                if inner_state is not None:
                    raise  # a checkpoint that cannot be restored fails load_state_dict()
                # A map_func failure is raised when the cycle reaches this element, as in
                # the sequential stage.
                iterator, preloaded = None, ((_FAILED, error),)
        return _Slot(index, element, iterator, capacity, executor, self._cond, preloaded)

    def _top_up(self) -> None:
        """Open input elements ahead until ``cycle_length * (1 + factor)`` are open."""
        futures = self._futures
        while not self._end_of_input and self._num_open + len(futures) < self._max_open:
            try:
                element = next(self._upstream)
            except StopIteration:
                self._end_of_input = True
                break
            except Exception as error:  # noqa: BLE001 - delivered in its turn
                futures.append(_InputError(error))
                continue
            index = self._next_input_index
            self._next_input_index += 1
            slot = self._new_slot(index, element, self._future_capacity)
            futures.append(slot)
            with self._cond:
                slot.request()

    def _fill_slot(self, position: int) -> _Slot | None:
        """Move the next future into the empty slot ``position``; ``None`` at end of input.

        Raises the input's error when that is next, leaving the slot empty, as the
        sequential stage does.
        """
        self._top_up()
        if not self._futures:
            return None
        entry = self._futures.popleft()
        if isinstance(entry, _InputError):
            raise entry.error
        self._cycle[position] = entry
        self._num_open += 1
        with self._cond:  # in the cycle now: read further ahead
            entry.capacity, entry.low_water = self._capacity, self._capacity // 2
            entry.request()
        return entry

    def _advance_to_next_in_cycle(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._cycle)

    def _consume(self, position: int, slot: _Slot, item: tuple[int, Any]) -> tuple[bool, Any]:
        """Act on an item taken from ``slot``: ``(True, element)`` to return it, ``(False,
        None)`` when the slot's dataset ended; raises the slot's errors."""
        kind, value = item
        if kind == _ELEMENT:
            self._block_index += 1
            if self._block_index == self._block_length:
                self._advance_to_next_in_cycle()
            return True, value
        # The dataset is done (ended or never made): free the slot for the next input element.
        self._cycle[position] = None
        self._num_open -= 1
        slot.stop()
        if kind == _END:
            self._advance_to_next_in_cycle()
            return False, None
        if kind == _FAILED:
            raise value  # already names the stage and input element
        raise AssertionError("unexpected item kind")

    def _refill_soon(self, slot: _Slot) -> None:
        """After taking from ``slot``: ask for more once it is half empty.

        ``running``/``ended`` read without ``cond`` are hints; ``request()`` re-checks under
        it, and a slot found empty is always requested by the waiting code.
        """
        if len(slot.items) <= slot.low_water and not slot.running and not slot.ended:
            with self._cond:
                slot.request()

    # ---------------------------------------------------------------- iteration
    def __next__(self) -> Any:
        if self._closing:
            raise StopIteration
        if self._executor is None:
            self._executor_or_start()
        if not self._end_of_input and self._num_open + len(self._futures) < self._max_open:
            self._top_up()
        if self._deterministic:
            return self._next_in_order()
        return self._next_ready()

    def _next_in_order(self) -> Any:
        cond = self._cond
        while self._num_open or self._futures or not self._end_of_input:
            position = self._cycle_index
            slot = self._cycle[position]
            if slot is None:
                slot = self._fill_slot(position)
                if slot is None:
                    self._advance_to_next_in_cycle()
                    continue
            items = slot.items
            try:
                # Fast path without ``cond``: only this thread removes items, and a deque's
                # popleft/extend are atomic, so the worker's appends cannot interleave badly.
                item = items.popleft()
            except IndexError:
                with cond:
                    while not items:
                        if self._closing:
                            raise StopIteration
                        slot.request()
                        cond.wait()
                    item = items.popleft()
            if len(items) <= slot.low_water and not slot.running and not slot.ended:
                self._refill_soon(slot)
            kind = item[0]
            if kind == _ELEMENT:  # the common case, inlined from _consume()
                self._block_index += 1
                if self._block_index == self._block_length:
                    self._block_index = 0
                    self._cycle_index = (position + 1) % len(self._cycle)
                return item[1]
            if kind == _ERROR:
                raise note_inner_error(item[1], self._name, slot.index)
            self._consume(position, slot, item)
        raise StopIteration

    def _next_ready(self) -> Any:
        cond = self._cond
        cycle = self._cycle
        length = len(cycle)
        while self._num_open or self._futures or not self._end_of_input:
            found: tuple[int, _Slot, tuple[int, Any]] | None = None
            for offset in range(length):
                position = (self._cycle_index + offset) % length
                slot = cycle[position]
                if slot is None:
                    slot = self._fill_slot(position)
                    if slot is None:
                        continue
                if slot.items:  # only this thread removes items: a non-empty deque stays so
                    found = (position, slot, slot.items.popleft())
                    break
            if found is None:
                if not self._num_open and not self._futures and self._end_of_input:
                    break
                with cond:
                    for slot in cycle:
                        if slot is not None:
                            slot.request()
                    while not self._closing and not any(s is not None and s.items for s in cycle):
                        cond.wait()
                    if self._closing:
                        raise StopIteration
                continue
            position, slot, item = found
            self._refill_soon(slot)
            if position != self._cycle_index:
                self._cycle_index, self._block_index = position, 0
            if item[0] == _ERROR:
                raise note_inner_error(item[1], self._name, slot.index)
            produced, element = self._consume(position, slot, item)
            if produced:
                return element
        raise StopIteration

    # ---------------------------------------------------------------- checkpoints
    def _get_state(self) -> State:
        futures: list[Any] = []
        for entry in self._futures:
            if isinstance(entry, _InputError):
                futures.append({"input_error": error_record(entry.error)})
            else:
                futures.append(entry.state())
        return {"cycle_index": self._cycle_index, "block_index": self._block_index,
                "end_of_input": self._end_of_input, "next_input_index": self._next_input_index,
                "slots": [None if s is None else s.state() for s in self._cycle],
                "futures": futures, "input": self._upstream.state_dict()}

    def _set_state(self, state: State) -> None:
        load_cycle_position(self, state, self._stop_slots)
        for position, saved in enumerate(state["slots"]):
            if saved is not None:
                self._cycle[position] = self._restore_slot(saved, self._capacity)
                self._num_open += 1
        for saved in state["futures"]:
            if "input_error" in saved:
                self._futures.append(_InputError(restore_error(saved["input_error"])))
            else:
                self._futures.append(self._restore_slot(saved, self._future_capacity))
        if self._executor is not None:  # else they start with the executor
            with self._cond:
                for slot in self._all_slots():
                    slot.request()

    def _restore_slot(self, saved: dict[str, Any], capacity: int) -> _Slot:
        items = tuple(_decode_item(item) for item in saved["items"])
        return self._new_slot(saved["index"], decode(saved["element"]), capacity,
                              saved["inner"][0], items)

    def _stop_slots(self) -> None:
        slots = self._all_slots()
        self._cycle = [None] * len(self._cycle)
        self._futures.clear()
        with self._cond:
            for slot in slots:
                slot.stopped = True
        for slot in slots:
            slot.stop()

    def _release(self) -> None:
        with self._cond:
            self._closing = True
            for slot in self._all_slots():
                slot.stopped = True
            self._cond.notify_all()
        if self._executor is not None:
            # Cancels queued reads and waits for running ones (each ends after one item).
            self._executor.shutdown()
        self._stop_slots()


class _DeferredExecutor:
    """Stands in for the executor before the first ``next()``: slots made while restoring a
    checkpoint must not start threads until the stage is used (and closed) for real."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        raise AssertionError("a slot read before its stage started")

    def shutdown(self) -> None:
        """Nothing ever started."""
