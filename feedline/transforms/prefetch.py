"""``prefetch``: overlap producing elements with consuming them (software pipelining)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.options import AUTOTUNE_FIXED_BUFFER
from feedline.core.random_access import RandomAccessReader
from feedline.core.structure import Element, flatten
from feedline.core.traits import ONE_TO_ONE
from feedline.core.validation import validate_int
from feedline.execution.executor import make_executor
from feedline.execution.read_ahead import SequentialReader

AUTOTUNE_MAX_BUFFER = 16
"""Largest buffer ``prefetch(AUTOTUNE)`` grows to."""

CALL_SECONDS_WEIGHT = 1 / 8
"""Weight of the newest interval in the consumer's moving time between calls."""


def element_bytes(element: Element) -> int:
    """Approximate memory of one element: array buffers and byte strings, 64 bytes per scalar.

    Example:
        >>> element_bytes((np.zeros(10, np.float32), b"abc"))
        43
    """
    total = 0
    for leaf in flatten(element):
        if isinstance(leaf, np.ndarray):
            total += leaf.nbytes
        elif isinstance(leaf, bytes | str):
            total += len(leaf)
        else:
            total += 64
    return total


class PrefetchDataset(Dataset):
    """The node of ``Dataset.prefetch``: ``buffer_size`` ``AUTOTUNE`` or ``None`` (tf.data's
    meaning: ``AUTOTUNE``) is tuned, 0 reads nothing ahead.

    Example:
        >>> import feedline as fl
        >>> PrefetchDataset(fl.Dataset.range(3), None).buffer_size == fl.AUTOTUNE
        True
    """

    TRAITS = ONE_TO_ONE

    # Read-ahead changes when elements are made, never which: checkpoints ignore it.
    _FINGERPRINT_TRANSPARENT = True

    def __init__(self, input_dataset: Dataset, buffer_size: int | None,
                 name: str | None = None) -> None:
        super().__init__([input_dataset])
        if buffer_size is None:
            buffer_size = AUTOTUNE  # tf.data's reading of None
        self.buffer_size = validate_int(buffer_size, "prefetch(buffer_size)", minimum=0,
                                        special=(AUTOTUNE,), hint="AUTOTUNE or >= 0")
        self.name = name or "prefetch"

    def _element_spec(self) -> Element | None:
        return self._inputs[0]._element_spec()

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        if self.buffer_size == 0:
            return upstream
        return PrefetchIterator(ctx, upstream, self.buffer_size, self.name, stage_key=self)

    _RANDOM_ACCESS_FROM_INPUT = True

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return self._inputs[0]._random_reader(ctx)  # read-ahead changes no element


class PrefetchIterator(DatasetIterator):
    """Reads its input ahead on one daemon thread, started by the first ``next()``.

    ``AUTOTUNE`` sizes the buffer from a model of its two sides: the input's time per
    element (measured on the reading thread, excluding its waits for room) and the
    consumer's time between calls (its own work), moving averages both. An input slower
    than its consumer on average sets the pipeline's rate whatever the depth: the buffer
    stays at its size (a parallel map delivering in bursts drains any buffer again and
    again, and depth would buy nothing but memory). An input that keeps up on average
    but is bursty (files, batches, pauses) needs depth to cover its bursts: the buffer
    grows by one each time the consumer drains it (finds it empty after finding an element
    ready), up to :data:`AUTOTUNE_MAX_BUFFER`, within the RAM budget. The size
    reached carries over to the stage's next iterator in the same pipeline run
    (``stage_key``: each epoch of a ``repeat`` builds one), which would otherwise start
    again from one element and find its buffer empty at every epoch's start. Errors of the
    input are read ahead in their places and raised in their turn.

    The state is a position (:mod:`feedline.execution.positions`), never the buffered
    elements: the input's state taken by the reading thread after some element, and how
    many elements the consumer has received since. Restoring re-reads from there; an
    input error read ahead but not yet raised is stored as a record, raised in its place.
    """

    OPERATION = "prefetch"
    STATE_VERSION = 3

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, buffer_size: int,
                 name: str, stage_key: object = None) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        options = ctx.options
        tuning = options.autotune
        self._autotune = buffer_size == AUTOTUNE and tuning.enabled
        # The grown size, shared with the stage's other iterators of this pipeline run.
        self._grown: list[int] = ctx.remembered.setdefault(
            ("prefetch capacity", stage_key if stage_key is not None else name), [1])
        if buffer_size == AUTOTUNE:
            capacity = self._grown[0] if tuning.enabled else AUTOTUNE_FIXED_BUFFER
        else:
            capacity = buffer_size
        self._ram_budget = options.autotune_ram_budget() if self._autotune else 0
        self._sized = False  # whether the first element was checked against the budget
        self._found_empty = False  # whether the last call found the buffer empty
        self._returned_at: float | None = None  # when the last call returned
        self._call_seconds: float | None = None  # the consumer's moving time between calls
        self._name = name
        # Its changes are logged with the tuner's (made now: its clock starts with the run).
        self._tuner = ctx.autotuner() if self._autotune else None
        threading_options = options.threading
        self._reader = SequentialReader(
            name, upstream,
            lambda: make_executor(1, name, close_timeout=threading_options.close_timeout),
            capacity, threading_options.element_timeout)

    def __next__(self) -> Any:
        reader = self._reader
        if not self._autotune:
            return reader.next()
        called = time.perf_counter()
        if self._returned_at is not None:
            interval = called - self._returned_at
            previous = self._call_seconds
            self._call_seconds = interval if previous is None else \
                previous + (interval - previous) * CALL_SECONDS_WEIGHT
        waited = not reader.ready()
        drained, self._found_empty = not self._found_empty, waited
        element = reader.next()
        self._returned_at = time.perf_counter()
        may_grow = (waited and drained and reader.capacity < AUTOTUNE_MAX_BUFFER
                    and self._input_keeps_up())
        if self._sized and not may_grow:
            return element  # the common case: no element's size to estimate
        size = element_bytes(element)
        if not self._sized:
            # A size carried over from the last epoch was within the budget at its
            # elements' size; these may be bigger.
            self._sized = True
            if reader.capacity > 1 and reader.capacity * size > self._ram_budget:
                carried = reader.capacity
                reader.capacity = self._grown[0] = max(1, self._ram_budget // max(size, 1))
                self._log(carried, f"{carried} elements of {size:,} bytes, carried from the "
                                   f"last epoch, exceed the RAM budget ({self._ram_budget:,} "
                                   "bytes)")
        # Grow when the consumer drained the buffer (it had found an element ready, or
        # this is the first), not when it finds it empty call after call: then the input
        # is simply slower than the consumer, and a deeper buffer would stay as empty
        # (measured on chess: 16 batches deep, 15% slower than 1). Only while the buffer,
        # at this element's size, stays within the RAM budget.
        if may_grow and (reader.capacity + 1) * size <= self._ram_budget:
            reader.capacity += 1
            self._grown[0] = max(self._grown[0], reader.capacity)
            producing, consuming = self._reader.seconds_per_item, self._call_seconds
            self._log(reader.capacity - 1,
                      f"its consumer drained it, and its input keeps up on average "
                      f"({(producing or 0.0) * 1e3:.2f} ms per element, the consumer "
                      f"{(consuming or 0.0) * 1e3:.2f} ms between calls)")
        return element

    def _log(self, old: int, reason: str) -> None:
        if self._tuner is not None:
            self._tuner.record(self._name, "buffer", old, self._reader.capacity, reason)

    def _input_keeps_up(self) -> bool:
        """Whether the input produces an element in no more time than the consumer takes
        between calls, on average (unknown until both were measured: no)."""
        producing, consuming = self._reader.seconds_per_item, self._call_seconds
        return producing is not None and consuming is not None and producing <= consuming

    def read_aheads(self) -> list[Any]:
        return [self._reader.window]

    @property
    def capacity(self) -> int:
        """How many elements may be read ahead now (grows under ``AUTOTUNE``)."""
        return self._reader.capacity

    def _get_state(self) -> State:
        return self._reader.position()

    def _set_state(self, state: State) -> None:
        self._reader.discard()
        self._reader.restore(state)

    def _release(self) -> None:
        self._reader.shutdown()
