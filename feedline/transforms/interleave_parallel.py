"""The parallel interleave iterator: every open dataset read ahead on the stage's threads.

The node and the order it defines are documented in :mod:`feedline.transforms.interleave`;
the cycle position and checkpoint layout it shares with the sequential iterator are in
:mod:`feedline.transforms.interleave_cycle`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from feedline.core.error_records import restore_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State, chunk_reader
from feedline.core.state_codec import decode
from feedline.execution.executor import Executor, Strand, make_executor
from feedline.execution.read_ahead import (
    ELEMENT,
    ERROR,
    BufferClosed,
    SequentialReader,
    StopSignal,
    wait_any,
)
from feedline.execution.stage_knobs import ThreadStageKnobs, TimedExecutor, thread_bounds
from feedline.transforms.flat_map import note_inner_error
from feedline.transforms.interleave_cycle import (
    InputError,
    InterleaveBase,
    Opener,
    entry_state,
    future_states,
)

PREFETCH_INPUT_FACTOR = 1
"""Datasets opened and read ahead before they enter the cycle, per unit of ``cycle_length``
(tf.data uses 2; opened datasets hold files, so feedline keeps fewer)."""

MIN_SLOT_BUFFER = 16
"""Fewest elements read ahead per slot; tf.data's ``2 * block_length + 1`` when larger.
Bigger than tf.data's minimum so that a worker reads a few elements per task, not one."""

MAX_SLOT_BUFFER = 2048
"""Elements a slot may read ahead when they are cheap to read (records of a file; the
reader's time bound keeps costly ones far fewer): chunks of a thousand move between threads.
A reading thread mostly gets the GIL when the consumer waits, and then fills the whole
window: the larger the window, the rarer the waits (chess feeder per record: 512 -> 1.6 µs,
2048 -> 0.95-1.0 µs)."""


class _SharedPool:
    """The stage's pool of reading threads, made by the first read; every open dataset
    reads on it through its own :class:`~feedline.execution.executor.Strand`."""

    def __init__(self, workers: int, name: str, close_timeout: float,
                 knobs: ThreadStageKnobs | None = None) -> None:
        self._args = (workers, name, close_timeout)
        self._knobs = knobs  # tuned: its gate limits the reads at once, which it times
        self._executor: Executor | None = None
        self._lock = threading.Lock()
        self._shut = False

    def strand(self) -> Strand:
        with self._lock:
            if self._shut:
                raise BufferClosed
            if self._executor is None:
                workers, name, close_timeout = self._args
                knobs = self._knobs
                if knobs is None:
                    self._executor = make_executor(workers, name, close_timeout=close_timeout)
                else:
                    self._executor = TimedExecutor(
                        make_executor(workers, name, close_timeout=close_timeout,
                                      gate=knobs.gate), knobs)
            return Strand(self._executor)

    def shutdown(self) -> None:
        with self._lock:
            self._shut = True
            executor = self._executor
        if executor is not None:
            executor.shutdown()


class _SlotReads:
    """Where one open dataset is read: its own strand on the stage's pool (made by the
    first read), counting the reads running on it, so that the dataset is closed only once
    none is pulling from it.

    When the consumer takes a dataset's end, a task queued behind the one that saw the end
    may be running ``next()`` on the dataset again (a read after the end). Closing the
    dataset then, on the consumer's thread, would put two threads in one iterator at once
    (a generator raises "generator already executing"; a file is closed under its read).
    :meth:`close_when_idle` closes it at once when no read runs, else leaves the close to
    the last read running, on its thread, when that read returns. Tasks that had not
    started then never touch the dataset: taking the end cancelled their futures (the
    reader's window), and a task stops at its first cancelled future.
    """

    __slots__ = ("_close", "_lock", "_name", "_pool", "_running", "_strand")

    def __init__(self, pool: _SharedPool, name: str) -> None:
        self._pool = pool
        self._name = name
        self._strand: Strand | None = None
        self._lock = threading.Lock()
        self._running = 0  # reads running now (on the strand: at most one)
        self._close: Callable[[], None] | None = None  # left to the last read running

    def start(self) -> _SlotReads:
        """This executor, its strand made now (the reader's first read)."""
        self._strand = self._pool.strand()
        return self

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future[Any]:
        assert self._strand is not None
        return self._strand.submit(self._read, fn, args)

    def _read(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        with self._lock:
            self._running += 1
        try:
            return fn(*args)
        finally:
            with self._lock:
                self._running -= 1
                close = None if self._running else self._close
                if close is not None:
                    self._close = None
            if close is not None:
                try:
                    close()
                except Exception as error:  # noqa: BLE001 - no consumer waits on this thread
                    warnings.warn(f"feedline: {self._name}: closing a dataset that ended "
                                  f"failed: {error!r}", RuntimeWarning, stacklevel=1)

    def shutdown(self) -> None:
        """Cancel the reads not started (the reader's shutdown)."""
        if self._strand is not None:
            self._strand.shutdown()

    def close_when_idle(self, close: Callable[[], None]) -> None:
        """Run ``close`` now if no read is running (its errors are the caller's), else when
        the last one returns."""
        with self._lock:
            if self._running:
                self._close = close
                return
        close()


class _Slot:
    """One input element's dataset, opened on the consumer's thread (in input order, like
    the sequential stage, so ``map_func`` needs no locking) and read ahead by a
    :class:`~feedline.execution.read_ahead.SequentialReader`. A ``map_func`` failure is kept
    as ``failure`` and raised when the cycle reaches the slot."""

    __slots__ = ("element", "failure", "index", "iterator", "reader", "reads")

    def __init__(self, index: int, element: Any, iterator: DatasetIterator | None,
                 reader: SequentialReader | None, failure: BaseException | None = None,
                 reads: _SlotReads | None = None) -> None:
        self.index = index
        self.element = element
        self.iterator = iterator
        self.reader = reader
        self.failure = failure
        self.reads = reads

    def state(self) -> State:
        inner = None if self.reader is None else self.reader.position()
        return entry_state(self.index, self.element, inner)

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

    def end(self) -> None:
        """The dataset ended: stop reading it, and close it once no read is pulling from it
        (see :class:`_SlotReads`), without waiting for that read."""
        reader, iterator, reads = self.reader, self.iterator, self.reads
        self.reader = self.iterator = None
        if reader is not None:
            reader.shutdown(stop_all=False)
        if iterator is not None:
            if reads is None:
                iterator.close()
            else:
                reads.close_when_idle(iterator.close)


class ParallelInterleaveIterator(InterleaveBase):
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

    With ``tune`` (``num_parallel_calls=AUTOTUNE`` and a pipeline tuner) the pipeline's
    tuner (:mod:`feedline.autotune.tuner`) sets how many reads run at once, through the
    stage's :attr:`knobs` (:class:`~feedline.execution.stage_knobs.ThreadStageKnobs`, whose
    gate the pool's threads pass), from one up to the open datasets
    (``cycle_length * (1 + PREFETCH_INPUT_FACTOR)``: each reads on its strand, one read at a
    time, so more threads would idle), within the CPU, thread and RAM bounds of
    :func:`~feedline.execution.stage_knobs.thread_bounds` (reads may wait for files, so
    past the cores). The stage counts its reading tasks' wall and CPU time, the elements it
    hands out, the ``next()`` calls that found nothing read, and the time it pulls input
    elements and opens their datasets. The order, errors and checkpoints do not depend on
    the setting. ``stage_key`` identifies the stage across its iterators (its dataset node).
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str, workers: int,
                 deterministic: bool, tune: bool = False, stage_key: object = None) -> None:
        super().__init__(ctx, upstream, opener, cycle_length, block_length, name)
        self._deterministic = deterministic
        self._capacity = max(2 * block_length + 1, MIN_SLOT_BUFFER)
        # Datasets waiting to enter the cycle read only tf.data's 2 * block_length + 1 ahead:
        # enough to hide opening them, without holding a full buffer each.
        self._future_capacity = min(self._capacity, 2 * block_length + 1)
        options = ctx.options
        threading_options = options.threading
        self._timeout = threading_options.element_timeout
        self._max_open = cycle_length * (1 + PREFETCH_INPUT_FACTOR)
        workers = max(1, workers)
        self._tuner = ctx.autotuner() if tune else None
        self._knobs: ThreadStageKnobs | None = None
        self._counters: Any = None  # the tuner's counters (tuned only)
        threads = workers
        if self._tuner is not None:
            cpu_workers, threads = thread_bounds(options, workers, useful=self._max_open,
                                                 waits=True)
            knobs = self._knobs = ThreadStageKnobs(name, workers, threads, cpu_workers,
                                                   options.autotune_ram_budget())
            self._counters = knobs.counters = self._tuner.register(
                knobs, stage_key if stage_key is not None else name)
        self._pool = _SharedPool(threads, name, threading_options.close_timeout, self._knobs)
        self._stop = StopSignal()
        self._futures: collections.deque[_Slot | InputError] = collections.deque()
        self._started = False

    @property
    def replay_exact(self) -> bool:
        return self._deterministic and super().replay_exact

    @property
    def knobs(self) -> ThreadStageKnobs | None:
        """What the tuner sets and reads of this stage (``None``: not tuned)."""
        return self._knobs

    def read_aheads(self) -> list[Any]:
        # The open datasets' readers (sampled on the consumer's thread, which alone
        # changes the cycle).
        return [slot.reader.window for slot in self._cycle
                if isinstance(slot, _Slot) and slot.reader is not None]

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
        reads = _SlotReads(self._pool, self._name)
        # Only a dataset that reads in chunks (a file reader) grows its read-ahead.
        grows = chunk_reader(iterator) is not None
        reader = SequentialReader(self._name, iterator, reads.start, capacity, self._timeout,
                                  self._stop,
                                  max_capacity=max(capacity, MAX_SLOT_BUFFER) if grows else None)
        if inner is not None:
            reader.restore(inner)
        return _Slot(index, element, iterator, reader, reads=reads)

    def _top_up(self) -> None:
        """Open input elements ahead until ``cycle_length * (1 + factor)`` are open."""
        counters = self._counters
        if counters is None:
            self._open_ahead()
            return
        started = time.perf_counter()
        try:
            self._open_ahead()
        finally:
            counters.input += time.perf_counter() - started

    def _open_ahead(self) -> None:
        futures = self._futures
        while not self._end_of_input and self._num_open + len(futures) < self._max_open:
            try:
                element = next(self._upstream)
            except StopIteration:
                self._end_of_input = True
                break
            except Exception as error:  # noqa: BLE001 - delivered in its turn
                futures.append(InputError(error))
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
        if isinstance(entry, InputError):
            raise entry.error
        self._cycle[position] = entry
        self._num_open += 1
        if entry.reader is not None:  # in the cycle now: read further ahead
            entry.reader.capacity = self._capacity
            entry.reader.prime()
        return entry

    # ---------------------------------------------------------------- iteration
    def __next__(self) -> Any:
        counters = self._counters
        if counters is None:
            return self._next_element()
        counters.calls += 1
        if not self._element_ready():
            counters.waits += 1
        element = self._next_element()
        count = counters.elements
        counters.elements = count + 1
        self._knobs.sample(element, count)  # type: ignore[union-attr]
        return element

    def _element_ready(self) -> bool:
        """Whether the next element is read (or the next outcome needs no read): the slot
        at the cycle position's, or, unordered, any slot's."""
        cycle, futures = self._cycle, self._futures
        if not cycle:
            return True
        start, filled = self._cycle_index, 0
        for offset in range(len(cycle)):
            slot = cycle[(start + offset) % len(cycle)]
            if slot is None:  # filled from the next future dataset
                if filled == len(futures):
                    if self._end_of_input:
                        continue  # nothing left to fill it: the outcome is another slot's
                    if self._deterministic:
                        return False  # one still to open: nothing read yet
                    continue
                entry = futures[filled]
                filled += 1
                if not isinstance(entry, _Slot):
                    return True  # the input's error
                slot = entry
            if slot.reader is None or slot.reader.ready():
                return True
            if self._deterministic:
                return False
        # Every slot empty with nothing left to open: the end, no wait.
        return self._end_of_input and not futures and all(s is None for s in cycle)

    def _next_element(self) -> Any:
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
                    return self._dtypes.check(value, slot.index)
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

    def next_chunk(self, limit: int) -> list[Any]:
        # Whole blocks from every dataset of the cycle at once while each has them in hand
        # (merged in cycle order: the order of ``limit`` calls of __next__); anything else
        # (a wait, an error, a dataset's end, an empty slot) is the per-element path's.
        if not self._deterministic or not self._started or self._stop.is_set():
            return [self.__next__()]
        cycle, block = self._cycle, self._block_length
        out: list[Any] = []
        while len(out) < limit:
            position = self._cycle_index
            slot = cycle[position]
            if slot is None or slot.reader is None:
                break
            if self._block_index == 0 and position == 0 and \
                    limit - len(out) >= 2 * block * len(cycle):
                rounds = self._whole_rounds((limit - len(out)) // (block * len(cycle)))
                if rounds:
                    self._merge_rounds(rounds, out)
                    continue
            want = min(block - self._block_index, limit - len(out))
            count = slot.reader.elements_in_hand(want)
            if not count:
                break
            check, index = self._dtypes.check, slot.index
            out.extend([check(element, index) for element in slot.reader.take_elements(count)])
            self._block_index += count
            if self._block_index == block:
                self._block_index = 0
                self._cycle_index = (position + 1) % len(cycle)
        if not out:
            return [self.__next__()]
        counters = self._counters
        if counters is not None:  # in hand: no wait
            counters.calls += 1
            count = counters.elements
            counters.elements = count + len(out)
            self._knobs.sample(out[0], count)  # type: ignore[union-attr]
        return out

    def _whole_rounds(self, most: int) -> int:
        """Rounds of the whole cycle (a block from each dataset) in hand, up to ``most``."""
        block, rounds = self._block_length, most
        for slot in self._cycle:
            if slot is None or slot.reader is None:
                return 0
            rounds = min(rounds, slot.reader.elements_in_hand(rounds * block) // block)
            if not rounds:
                return 0
        return rounds

    def _merge_rounds(self, rounds: int, out: list[Any]) -> None:
        block = self._block_length
        check = self._dtypes.check
        taken = [[check(element, slot.index)
                  for element in slot.reader.take_elements(rounds * block)]
                 for slot in self._cycle]
        if block == 1:
            merged: list[Any] = [None] * (rounds * len(taken))
            for offset, elements in enumerate(taken):  # one strided copy per dataset
                merged[offset::len(taken)] = elements
            out += merged
        else:
            for start in range(0, rounds * block, block):
                for elements in taken:
                    out.extend(elements[start:start + block])

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
            return True, self._dtypes.check(value, slot.index)
        self._after_item(position, slot, tag, value)
        return False, None

    def _after_item(self, position: int, slot: _Slot, tag: int, value: Any) -> None:
        """An error or the end from ``slot``: raise the error; at the end free the slot."""
        if tag == ERROR:
            raise note_inner_error(value, self._name, slot.index)
        # The dataset is done: free the slot for the next input element. A read queued
        # behind the one that saw the end may still be pulling from the dataset: it closes
        # the dataset when it returns (issue 39).
        self._cycle[position] = None
        self._num_open -= 1
        slot.end()
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
        return self._position_state(slots, future_states(self._futures, _Slot.state))

    def _set_state(self, state: State) -> None:
        self._stop_slots(wait=True)
        self._load_position(state)
        for position, saved in enumerate(state["slots"]):
            if saved is not None:
                self._cycle[position] = self._restore_slot(saved, self._capacity)
                self._num_open += 1
        for saved in state["futures"]:
            if "input_error" in saved:
                self._futures.append(InputError(restore_error(saved["input_error"])))
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
        if self._knobs is not None:
            self._knobs.done = True  # closed: the tuner forgets it
        self._pool.shutdown()
        self._stop_slots(wait=False)
