"""The tuned knob of ``prefetch(AUTOTUNE)``: how many elements its buffer reads ahead.

Its rule works from a model of the buffer's two sides: the input's time per element
(measured on the reading thread, excluding its waits for room) and the consumer's time
between calls (its own work), moving averages both. An input slower than its consumer on
average sets the pipeline's rate whatever the depth: the buffer stays at its size (a parallel
map delivering in bursts drains any buffer again and again, and depth would buy nothing but
memory). An input that keeps up on average but is bursty (files, batches, pauses) needs depth
to cover its bursts: the buffer grows by one each time the consumer drains it (finds it empty
after finding an element ready), up to :data:`AUTOTUNE_MAX_BUFFER`, within the RAM budget.
The size reached carries over to the stage's next iterator in the same pipeline run (each
epoch of a ``repeat`` builds one), which would otherwise start again from one element and
find its buffer empty at every epoch's start.

The rule runs on the consumer's ``next()`` (a drain is an event of that call, not a rate the
tuner's thread could sample), and every change is recorded with the pipeline's tuner
(:meth:`feedline.autotune.tuner.Tuner.record`), with its reason, as the map knobs' are.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from feedline.core.structure import element_bytes

AUTOTUNE_MAX_BUFFER = 16
"""Largest buffer ``prefetch(AUTOTUNE)`` grows to."""

CALL_SECONDS_WEIGHT = 1 / 8
"""Weight of the newest interval in the consumer's moving time between calls."""

HANDOFF_SECONDS = 200e-6
"""Time per element of an input, and wait of its consumer, below which depth pays even where
the input is the slower side: such a wait is a wake-up of both threads and a hand-off of
the GIL, which a deeper buffer spares (the reader runs ahead in groups, the consumer takes
what is ready without waiting). A vectorized map's 256-element batch, 20 µs each: 1.2M
elements/s at one element deep, 5.9M at 16."""


class BufferedReader(Protocol):
    """What the rule needs of the buffer's reader
    (:class:`~feedline.execution.read_ahead.SequentialReader`)."""

    capacity: int

    @property
    def seconds_per_item(self) -> float | None:
        """The input's moving time per element, on the reading thread."""

    def ready(self) -> bool:
        """Whether the next element is ready."""

    def next(self) -> Any:
        """The next element (waits for it)."""


class BufferTuning:
    """The rule of one ``prefetch(AUTOTUNE)`` iterator (see the module doc).

    Args:
        name: The stage's name (in the tuner's records).
        grown: The size reached, shared with the stage's other iterators of this pipeline run
            (a one-element list).
        ram_budget: Bytes the buffer may hold.
        tuner: The pipeline's tuner, which records each change (``None``: not recorded).

    Example:
        >>> class Reader:
        ...     capacity, seconds_per_item = 1, 0.001
        ...     def ready(self): return False  # the consumer always finds it empty
        ...     def next(self): return b"x" * 100
        >>> tuning, reader = BufferTuning("prefetch", [1], 1 << 20), Reader()
        >>> for _ in range(3):
        ...     _ = tuning.next(reader)
        >>> reader.capacity  # empty each time: the input is slower, depth would not help
        1
    """

    def __init__(self, name: str, grown: list[int], ram_budget: int, tuner: Any = None) -> None:
        self.name = name
        self._grown = grown
        self._ram_budget = ram_budget
        self._tuner = tuner
        self._sized = False  # whether the first element was checked against the budget
        self._found_empty = False  # whether the last call found the buffer empty
        self._returned_at: float | None = None  # when the last call returned
        self.call_seconds: float | None = None
        """The consumer's moving time between calls (its own work)."""
        self.wait_seconds: float | None = None
        """The consumer's moving time in the calls that found the buffer empty."""

    @property
    def start_capacity(self) -> int:
        """The size to start at: the one reached by the stage's earlier iterators."""
        return self._grown[0]

    def next(self, reader: BufferedReader) -> Any:
        """The next element of ``reader``, measuring both sides and growing its buffer when
        the consumer drained it and the input keeps up."""
        called = time.perf_counter()
        if self._returned_at is not None:
            interval = called - self._returned_at
            previous = self.call_seconds
            self.call_seconds = interval if previous is None else \
                previous + (interval - previous) * CALL_SECONDS_WEIGHT
        waited = not reader.ready()
        drained, self._found_empty = not self._found_empty, waited
        element = reader.next()
        self._returned_at = time.perf_counter()
        # Short waits for cheap elements are hand-offs, which depth spares, drained or not
        # (at one element deep, a consumer faster than its input finds it empty at every
        # call); long ones are the input's pace (a parallel map's bursts).
        if waited:
            wait, previous = self._returned_at - called, self.wait_seconds
            self.wait_seconds = wait if previous is None else \
                previous + (wait - previous) * CALL_SECONDS_WEIGHT
        handoff = (self.wait_seconds is not None and self.wait_seconds < HANDOFF_SECONDS
                   and self._cheap(reader))
        may_grow = (waited and reader.capacity < AUTOTUNE_MAX_BUFFER
                    and (drained and self._input_keeps_up(reader) or handoff))
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
                self._record(reader, carried, f"{carried} elements of {size:,} bytes, carried "
                             f"from the last epoch, exceed the RAM budget "
                             f"({self._ram_budget:,} bytes)")
        # Grow when the consumer drained the buffer (it had found an element ready, or
        # this is the first), not when it finds it empty call after call: then the input
        # is simply slower than the consumer, and a deeper buffer would stay as empty
        # (measured on chess: 16 batches deep, 15% slower than 1). Only while the buffer,
        # at this element's size, stays within the RAM budget.
        if may_grow and (reader.capacity + 1) * size <= self._ram_budget:
            reader.capacity += 1
            self._grown[0] = max(self._grown[0], reader.capacity)
            producing, consuming = reader.seconds_per_item, self.call_seconds
            figures = (f"{(producing or 0.0) * 1e3:.2f} ms per element, the consumer "
                       f"{(consuming or 0.0) * 1e3:.2f} ms between calls")
            self._record(reader, reader.capacity - 1,
                         f"its consumer drained it, and its input keeps up on average "
                         f"({figures})" if drained and self._input_keeps_up(reader) else
                         f"its consumer waited for elements that take under "
                         f"{HANDOFF_SECONDS * 1e6:.0f} µs each: depth spares the hand-offs "
                         f"({figures})")
        return element

    def _record(self, reader: BufferedReader, old: int, reason: str) -> None:
        if self._tuner is not None:
            self._tuner.record(self.name, "buffer", old, reader.capacity, reason)

    def _input_keeps_up(self, reader: BufferedReader) -> bool:
        """Whether the input produces an element in no more time than the consumer takes
        between calls, on average (unknown until both were measured: no)."""
        producing, consuming = reader.seconds_per_item, self.call_seconds
        return producing is not None and consuming is not None and producing <= consuming

    @staticmethod
    def _cheap(reader: BufferedReader) -> bool:
        """Whether the input's elements take less than :data:`HANDOFF_SECONDS` each (unknown
        until measured: no)."""
        producing = reader.seconds_per_item
        return producing is not None and producing < HANDOFF_SECONDS
