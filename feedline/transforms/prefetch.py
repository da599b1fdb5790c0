"""``prefetch``: overlap producing elements with consuming them (software pipelining)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.error_records import error_record, restore_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.options import AUTOTUNE_FIXED_BUFFER
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element, flatten
from feedline.core.validation import validate_int
from feedline.execution.buffer import BufferClosed
from feedline.execution.producer import BackgroundProducer

AUTOTUNE_MAX_BUFFER = 16
"""Largest buffer ``prefetch(AUTOTUNE)`` grows to."""


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
    """The node of ``Dataset.prefetch``."""

    # Read-ahead changes when elements are made, never which: checkpoints ignore it.
    _FINGERPRINT_TRANSPARENT = True

    def __init__(self, input_dataset: Dataset, buffer_size: int, name: str | None = None) -> None:
        super().__init__([input_dataset])
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
        return PrefetchIterator(ctx, upstream, self.buffer_size, self.name)


def encode_results(results: list[tuple[bool, Any]]) -> list[list[Any]]:
    """Buffered ``(True, element)`` / ``(False, error)`` results as JSON-safe state entries."""
    return [["element", encode(value)] if ok else ["error", error_record(value)]
            for ok, value in results]


def decode_results(saved: list[list[Any]]) -> list[tuple[bool, Any]]:
    """The results :func:`encode_results` stored (errors as restored feedline errors)."""
    results: list[tuple[bool, Any]] = []
    for kind, value in saved:
        if kind not in ("element", "error"):
            raise ValueError(f"unknown buffered entry {kind!r}")
        results.append((True, decode(value)) if kind == "element"
                       else (False, restore_error(value)))
    return results


class PrefetchIterator(DatasetIterator):
    """Starts its thread on the first ``next()``; ``AUTOTUNE`` grows the buffer by one each time
    the consumer finds it empty, up to :data:`AUTOTUNE_MAX_BUFFER`.

    Errors of the upstream are buffered in their places, and a checkpoint stores them there
    (version 2 of the state): after a restore they are raised where they would have been.
    """

    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, buffer_size: int,
                 name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        tuning = ctx.options.autotune
        self._autotune = buffer_size == AUTOTUNE and tuning.enabled
        if buffer_size == AUTOTUNE:
            self._capacity = 1 if tuning.enabled else AUTOTUNE_FIXED_BUFFER
        else:
            self._capacity = buffer_size
        self._ram_budget = ctx.options.autotune_ram_budget() if self._autotune else 0
        self._name = name
        self._producer: BackgroundProducer | None = None
        # Starting, stopping and replacing the producer: two consumers (or a consumer and
        # close() on another thread) must never start two threads, or one nobody stops.
        self._producer_lock = threading.Lock()
        self._restored: list[tuple[bool, Any]] = []
        self._restored_exhausted = False

    def _start(self) -> BackgroundProducer:
        with self._producer_lock:
            if self._producer is None:
                if self._closed:
                    raise BufferClosed
                self._producer = BackgroundProducer(
                    self._upstream, self._capacity, self._name, self._restored,
                    self._restored_exhausted)
                self._restored, self._restored_exhausted = [], False
            return self._producer

    def __next__(self) -> Any:
        producer = self._producer if self._producer is not None else self._start()
        if self._autotune and not len(producer.buffer) and self._capacity < AUTOTUNE_MAX_BUFFER:
            element = producer.get()
            # Grow only while the buffer, at this element's size, stays within the RAM budget.
            if (self._capacity + 1) * element_bytes(element) <= self._ram_budget:
                self._capacity += 1
                producer.buffer.set_capacity(self._capacity)
            return element
        return producer.get()

    @property
    def capacity(self) -> int:
        """How many elements the buffer may hold now (grows under ``AUTOTUNE``)."""
        return self._capacity

    def _get_state(self) -> State:
        producer = self._producer
        if producer is None:
            results, exhausted = self._restored, self._restored_exhausted
            upstream = self._upstream.state_dict()
        else:
            with producer.lock:
                results, exhausted = producer.snapshot()
                upstream = self._upstream.state_dict()
        return {"buffered": encode_results(results), "exhausted": exhausted,
                "input": upstream}

    def _set_state(self, state: State) -> None:
        with self._producer_lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.stop()
        self._upstream.load_state_dict(state["input"])
        self._restored = decode_results(state["buffered"])
        self._restored_exhausted = bool(state["exhausted"])

    def _release(self) -> None:
        with self._producer_lock:
            producer = self._producer
        if producer is not None:
            producer.stop()
