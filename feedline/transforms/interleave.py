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
from feedline.execution.executor import Executor, Strand, make_executor
from feedline.execution.positions import PositionReader, initial_position, replay_from
from feedline.execution.read_ahead import (
    ELEMENT,
    ERROR,
    BufferClosed,
    SequentialReader,
    StopSignal,
    wait_any,
)
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


class _InputError:
    """An error the input raised while the stage read ahead; raised when its turn comes."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _entry_state(index: int, element: Any, inner: State | None) -> State:
    """One opened dataset in a state: its input element (to make the dataset again) and its
    position (:mod:`feedline.execution.positions`); ``inner`` is ``None`` when ``map_func``
    failed on it (it is called again, and fails again, on restore)."""
    return {"index": index, "element": encode(element), "inner": inner}


def _future_states(futures: Any, state_of: Callable[[Any], State]) -> list[State]:
    return [{"input_error": error_record(entry.error)} if isinstance(entry, _InputError)
            else state_of(entry) for entry in futures]


class _InterleaveBase(DatasetIterator):
    """What both interleave iterators share: the cycle position and its checkpoint layout.

    The state is the same for the sequential and the parallel stage, so a checkpoint
    restores whatever ``num_parallel_calls`` or ``deterministic`` the restoring run uses::

        {"cycle_length", "cycle_index", "block_index", "end_of_input", "next_input_index",
         "slots": [None | {"index", "element", "inner"}], "futures": [...], "input"}

    ``cycle_length`` is the resolved one: a checkpoint from a machine with another CPU count
    (``cycle_length=None``) restores with the cycle it was taken with. ``futures`` are
    datasets opened ahead (parallel stage) not yet in the cycle, or input errors in their
    place. Each dataset's ``inner`` is a position, never the elements read ahead.
    """

    OPERATION = "interleave"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._opener = opener
        self._block_length = block_length
        self._name = name
        self._cycle: list[Any] = [None] * cycle_length
        self._cycle_index = 0
        self._block_index = 0
        self._end_of_input = False
        self._num_open = 0
        self._next_input_index = 0

    def _advance_to_next_in_cycle(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._cycle)

    def _position_state(self, slots: list[State | None], futures: list[State]) -> State:
        return {"cycle_length": len(self._cycle), "cycle_index": self._cycle_index,
                "block_index": self._block_index, "end_of_input": self._end_of_input,
                "next_input_index": self._next_input_index, "slots": slots,
                "futures": futures, "input": self._upstream.state_dict()}

    def _load_position(self, state: State) -> None:
        """Rewind the input and the cycle position (the caller has stopped its datasets)."""
        cycle_length = int(state["cycle_length"])
        if cycle_length < 1 or len(state["slots"]) != cycle_length:
            raise CheckpointError(f"{self._name}: the state's cycle_length {cycle_length} "
                                  f"does not match its {len(state['slots'])} slots")
        self._cycle = [None] * cycle_length
        self._upstream.load_state_dict(state["input"])
        self._cycle_index = state["cycle_index"]
        self._block_index = state["block_index"]
        self._end_of_input = state["end_of_input"]
        self._next_input_index = state["next_input_index"]
        self._num_open = 0


# ------------------------------------------------------------------ sequential
class _Open:
    """A cycle slot of the sequential stage: the input element and its dataset's iterator.

    ``replay`` re-reads after a restore from a read-ahead position; ``failure`` is a
    ``map_func`` error restored in its place (raised when the cycle reaches it).
    """

    __slots__ = ("element", "failure", "index", "iterator", "replay")

    def __init__(self, index: int, element: Any, iterator: DatasetIterator | None,
                 replay: PositionReader | None = None,
                 failure: BaseException | None = None) -> None:
        self.index = index
        self.element = element
        self.iterator = iterator
        self.replay = replay
        self.failure = failure

    def next(self) -> Any:
        replay = self.replay
        if replay is None:
            return next(self.iterator)  # type: ignore[arg-type]
        item, is_error, value, _ = replay.pull()
        replay.handed_out(item)
        if not replay.replaying:
            self.replay = None
        if is_error:
            raise value
        return value

    def state(self) -> State:
        if self.iterator is None:
            return _entry_state(self.index, self.element, None)
        inner = self.replay.inline_position() if self.replay is not None else \
            initial_position(self.iterator.state_dict())
        return _entry_state(self.index, self.element, inner)


class InterleaveIterator(_InterleaveBase):
    """The synchronous stage: tf.data's ``InterleaveDataset`` loop, step for step.

    Errors: a failing ``map_func`` consumes its input element and leaves the slot empty (the
    next call fills it from the next element); an error from an inner dataset leaves the
    position unchanged, so the next call asks that dataset again.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str) -> None:
        super().__init__(ctx, upstream, opener, cycle_length, block_length, name)
        # Datasets a parallel stage had opened ahead, from a restored checkpoint.
        self._pending: collections.deque[_Open | _InputError] = collections.deque()

    def _open_next(self) -> _Open | None:
        """The next input element's dataset (``None`` at the end of the input)."""
        if self._pending:
            entry = self._pending.popleft()
            if isinstance(entry, _InputError):
                raise entry.error
            if entry.failure is not None:
                raise entry.failure
            return entry
        try:
            element = next(self._upstream)
        except StopIteration:
            self._end_of_input = True
            return None
        index = self._next_input_index
        self._next_input_index += 1
        return _Open(index, element, self._opener(element, index))

    def __next__(self) -> Any:
        cycle = self._cycle
        while not self._end_of_input or self._num_open or self._pending:
            current = cycle[self._cycle_index]
            if current is not None:
                if current.failure is not None:
                    cycle[self._cycle_index] = None
                    self._num_open -= 1
                    raise current.failure
                try:
                    element = current.next()
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
            if self._end_of_input and not self._pending:
                self._advance_to_next_in_cycle()
                continue
            opened = self._open_next()
            if opened is None:
                continue
            cycle[self._cycle_index] = opened
            self._num_open += 1
        raise StopIteration

    def _get_state(self) -> State:
        slots = [None if s is None else s.state() for s in self._cycle]
        return self._position_state(slots, _future_states(self._pending, _Open.state))

    def _set_state(self, state: State) -> None:
        self._release()
        self._load_position(state)
        for position, saved in enumerate(state["slots"]):
            if saved is not None:
                self._cycle[position] = self._restore_open(saved)
                self._num_open += 1
        self._pending.clear()
        for saved in state["futures"]:
            self._pending.append(_InputError(restore_error(saved["input_error"]))
                                 if "input_error" in saved else self._restore_open(saved))

    def _restore_open(self, saved: State) -> _Open:
        index, element, inner = int(saved["index"]), decode(saved["element"]), saved["inner"]
        if inner is None:  # map_func failed on it: it fails again, in its place
            try:
                iterator = self._opener(element, index)
            except Exception as error:  # noqa: BLE001 - raised when the cycle reaches it
                return _Open(index, element, None, failure=error)
            return _Open(index, element, iterator)
        iterator = self._opener(element, index)
        iterator.load_state_dict(inner["input"])
        return _Open(index, element, iterator, replay_from(iterator, inner))

    def _release(self) -> None:
        entries = [*self._cycle, *self._pending]
        self._cycle = [None] * len(self._cycle)
        self._pending.clear()
        for entry in entries:
            if isinstance(entry, _Open) and entry.iterator is not None:
                entry.iterator.close()


# ------------------------------------------------------------------ parallel
class _SharedPool:
    """The stage's pool of reading threads, made by the first read; every open dataset
    reads on it through its own :class:`~feedline.execution.executor.Strand`."""

    def __init__(self, workers: int, name: str, close_timeout: float) -> None:
        self._args = (workers, name, close_timeout)
        self._executor: Executor | None = None
        self._lock = threading.Lock()
        self._shut = False

    def strand(self) -> Strand:
        with self._lock:
            if self._shut:
                raise BufferClosed
            if self._executor is None:
                workers, name, close_timeout = self._args
                self._executor = make_executor(workers, name, close_timeout=close_timeout)
            return Strand(self._executor)

    def shutdown(self) -> None:
        with self._lock:
            self._shut = True
            executor = self._executor
        if executor is not None:
            executor.shutdown()


class _Slot:
    """One input element's dataset, opened on the consumer's thread (in input order, like
    the sequential stage, so ``map_func`` needs no locking) and read ahead by a
    :class:`~feedline.execution.read_ahead.SequentialReader`. A ``map_func`` failure is kept
    as ``failure`` and raised when the cycle reaches the slot."""

    __slots__ = ("element", "failure", "index", "iterator", "reader")

    def __init__(self, index: int, element: Any, iterator: DatasetIterator | None,
                 reader: SequentialReader | None, failure: BaseException | None = None) -> None:
        self.index = index
        self.element = element
        self.iterator = iterator
        self.reader = reader
        self.failure = failure

    def state(self) -> State:
        inner = None if self.reader is None else self.reader.position()
        return _entry_state(self.index, self.element, inner)

    def stop(self, wait: bool) -> None:
        """Stop reading and close the dataset; ``wait`` for a read in progress first."""
        reader, iterator = self.reader, self.iterator
        self.reader = self.iterator = None
        if reader is not None:
            if wait:
                reader.discard()
            reader.shutdown(stop_all=False)
        if iterator is not None:
            iterator.close()


class ParallelInterleaveIterator(_InterleaveBase):
    """Reads every open dataset ahead on a pool of ``workers`` threads.

    The consumer's thread runs the same cycle as :class:`InterleaveIterator`, but takes each
    element from the dataset's read-ahead. Input elements are pulled, and ``map_func``
    makes their datasets, on the consumer's thread in input order; they wait in a queue of
    *future* datasets (up to ``PREFETCH_INPUT_FACTOR * cycle_length``) that start reading
    at once, and an empty cycle slot takes the next one from that queue. Since slots are
    refilled in exactly the order the sequential cycle refills them, the output order is the
    same. Each dataset reads on the shared pool through its own strand (one read at a time),
    a few elements per task, and stops when its read-ahead is full, so ``workers`` threads
    serve any number of datasets.

    With ``deterministic=False`` the consumer takes from the first slot, in cycle order from
    the current position, that has an item ready, and only waits when none has.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str, workers: int,
                 deterministic: bool) -> None:
        super().__init__(ctx, upstream, opener, cycle_length, block_length, name)
        self._deterministic = deterministic
        self._capacity = max(2 * block_length + 1, MIN_SLOT_BUFFER)
        # Datasets waiting to enter the cycle read only tf.data's 2 * block_length + 1 ahead:
        # enough to hide opening them, without holding a full buffer each.
        self._future_capacity = min(self._capacity, 2 * block_length + 1)
        threading_options = ctx.options.threading
        self._timeout = threading_options.element_timeout
        self._pool = _SharedPool(max(1, workers), name, threading_options.close_timeout)
        self._stop = StopSignal()
        self._futures: collections.deque[_Slot | _InputError] = collections.deque()
        self._max_open = cycle_length * (1 + PREFETCH_INPUT_FACTOR)
        self._started = False

    @property
    def replay_exact(self) -> bool:
        return self._deterministic and super().replay_exact

    def _load_position(self, state: State) -> None:
        super()._load_position(state)
        self._max_open = len(self._cycle) * (1 + PREFETCH_INPUT_FACTOR)

    def _all_slots(self) -> list[_Slot]:
        slots = [s for s in self._cycle if s is not None]
        slots.extend(f for f in self._futures if isinstance(f, _Slot))
        return slots

    def _new_slot(self, index: int, element: Any, capacity: int,
                  inner: State | None = None) -> _Slot:
        """A slot for input element ``index``, its dataset made (and restored) now."""
        try:
            iterator = self._opener(element, index)
        except Exception as error:  # raised in its turn
            if inner is not None:
                raise  # a checkpoint that cannot be restored fails load_state_dict()
            # A map_func failure is raised when the cycle reaches this element, as in the
            # sequential stage.
            return _Slot(index, element, None, None, error)
        pool = self._pool
        reader = SequentialReader(self._name, iterator, pool.strand, capacity, self._timeout,
                                  self._stop)
        if inner is not None:
            reader.restore(inner)
        return _Slot(index, element, iterator, reader)

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
            if slot.reader is not None:
                slot.reader.prime()

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
        if entry.reader is not None:  # in the cycle now: read further ahead
            entry.reader.capacity = self._capacity
            entry.reader.prime()
        return entry

    # ---------------------------------------------------------------- iteration
    def __next__(self) -> Any:
        if self._stop.is_set():
            raise StopIteration
        if not self._started:
            self._started = True
            for slot in self._all_slots():  # restored from a checkpoint: start reading now
                if slot.reader is not None:
                    slot.reader.prime()
        if not self._end_of_input and self._num_open + len(self._futures) < self._max_open:
            self._top_up()
        if self._deterministic:
            # The common case inlined: the slot at the cycle position has an element in hand.
            position = self._cycle_index
            slot = self._cycle[position]
            if slot is not None and slot.reader is not None:
                tag, value = slot.reader.next_item()
                if tag == ELEMENT:
                    self._block_index += 1
                    if self._block_index == self._block_length:
                        self._block_index = 0
                        self._cycle_index = (position + 1) % len(self._cycle)
                    return value
                self._after_item(position, slot, tag, value)  # raises, or the dataset ended
        while self._num_open or self._futures or not self._end_of_input:
            position = self._cycle_index if self._deterministic else self._ready_position()
            if position is None:
                if not self._num_open and not self._futures and self._end_of_input:
                    break
                self._wait_for_any()
                continue
            if position != self._cycle_index:
                self._cycle_index, self._block_index = position, 0
            slot = self._cycle[position]
            if slot is None:
                slot = self._fill_slot(position)
                if slot is None:
                    self._advance_to_next_in_cycle()
                    continue
            produced, element = self._take(position, slot)
            if produced:
                return element
        raise StopIteration

    def _take(self, position: int, slot: _Slot) -> tuple[bool, Any]:
        """Take from ``slot``: ``(True, element)``, or ``(False, None)`` when its dataset
        ended; raises its errors."""
        if slot.failure is not None:
            self._cycle[position] = None
            self._num_open -= 1
            raise slot.failure  # already names the stage and input element
        assert slot.reader is not None
        tag, value = slot.reader.next_item()
        if tag == ELEMENT:
            self._block_index += 1
            if self._block_index == self._block_length:
                self._advance_to_next_in_cycle()
            return True, value
        self._after_item(position, slot, tag, value)
        return False, None

    def _after_item(self, position: int, slot: _Slot, tag: int, value: Any) -> None:
        """An error or the end from ``slot``: raise the error; at the end free the slot."""
        if tag == ERROR:
            raise note_inner_error(value, self._name, slot.index)
        # The dataset is done: free the slot for the next input element.
        self._cycle[position] = None
        self._num_open -= 1
        slot.stop(wait=False)
        self._advance_to_next_in_cycle()

    def _ready_position(self) -> int | None:
        """The first slot, in cycle order from the current one, with an item ready."""
        cycle, length = self._cycle, len(self._cycle)
        for offset in range(length):
            position = (self._cycle_index + offset) % length
            slot = cycle[position]
            if slot is None:
                slot = self._fill_slot(position)
                if slot is None:
                    continue
            if slot.failure is not None or slot.reader.ready():  # type: ignore[union-attr]
                return position
        return None

    def _wait_for_any(self) -> None:
        windows = [s.reader.window for s in self._cycle if s is not None and s.reader is not None]
        if not wait_any(windows, self._stop, self._timeout):
            raise TimeoutError(f"{self._name}: no element ready within {self._timeout} s "
                               "(Options().threading.element_timeout)")
        if self._stop.is_set():
            raise BufferClosed

    # ---------------------------------------------------------------- checkpoints
    def _get_state(self) -> State:
        slots = [None if s is None else s.state() for s in self._cycle]
        return self._position_state(slots, _future_states(self._futures, _Slot.state))

    def _set_state(self, state: State) -> None:
        self._stop_slots(wait=True)
        self._load_position(state)
        for position, saved in enumerate(state["slots"]):
            if saved is not None:
                self._cycle[position] = self._restore_slot(saved, self._capacity)
                self._num_open += 1
        for saved in state["futures"]:
            if "input_error" in saved:
                self._futures.append(_InputError(restore_error(saved["input_error"])))
            else:
                self._futures.append(self._restore_slot(saved, self._future_capacity))
        if self._started:  # else they start reading with the first next()
            for slot in self._all_slots():
                if slot.reader is not None:
                    slot.reader.prime()

    def _restore_slot(self, saved: State, capacity: int) -> _Slot:
        return self._new_slot(int(saved["index"]), decode(saved["element"]), capacity,
                              saved["inner"])

    def _stop_slots(self, wait: bool) -> None:
        slots = self._all_slots()
        self._cycle = [None] * len(self._cycle)
        self._futures.clear()
        for slot in slots:
            slot.stop(wait)

    def _release(self) -> None:
        # Wake a consumer waiting on any dataset, stop the pool (a bounded wait for running
        # reads), then close the datasets.
        self._stop.set()
        self._pool.shutdown()
        self._stop_slots(wait=False)
