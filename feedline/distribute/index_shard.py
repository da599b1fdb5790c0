"""One data-parallel replica's share of a random-access pipeline, with elastic checkpoints.

:class:`IndexShardDataset` is what ``Dataset.distribute`` puts on top of a pipeline that has
random access (:mod:`feedline.core.random_access`): shard ``index`` of ``num_shards`` reads
the elements at global positions ``index``, ``index + num_shards``, ... -- only those, by
index, never reading the others' -- on a few threads ahead of its consumer.

**Every shard yields the same number of elements**: ``len(input) // num_shards`` per epoch.
Only full *rounds* (``num_shards`` consecutive positions, one per shard) are read; the
``len(input) % num_shards`` positions after the last full round are dropped. So no replica
of a data-parallel job ever waits for a batch another will never send (the classic hang of
uneven data). Under a ``global_shuffle`` reshuffled each epoch, the dropped elements are
different ones each epoch.

**Checkpoints are one global position.** The state of a shard is the number of global
positions its epoch has consumed (a multiple of ``num_shards`` when all replicas are at the
same step) and what the elements depend on (the epoch and keys of a ``global_shuffle``
below): never ``num_shards`` or ``index``, which are not part of the pipeline's fingerprint.
Every replica's checkpoint taken at the same step is the same, and it restores on any
number of replicas: shard ``j`` of ``M`` continues at positions ``P + j``, ``P + j + M``,
... from the saved position ``P``, so the epoch still yields each element exactly once
across replicas (elastic resume). Stages *after* the shard that hold elements (a
``shuffle`` buffer) are per replica: their state is not elastic, so put ``global_shuffle``
before the shard instead.

The stages below the shard run inside its reads, on its threads: their own execution settings
(a ``map``'s ``num_parallel_calls`` or ``executor="process"``, a ``prefetch``) give way to the
shard's ``num_parallel_calls``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from collections.abc import Sequence
from typing import Any

from feedline.core.constants import AUTOTUNE, INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import (
    DerivedReader,
    RandomAccessReader,
    StrideReader,
    require_random_access,
)
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.core.validation import as_int, resolve_parallelism, validate_parallelism
from feedline.execution.executor import make_executor
from feedline.execution.read_ahead import ReadAhead

TARGET_TASK_SECONDS = 0.0005
"""How long one read task should run: long enough that the thread hand-off is small beside it."""
MAX_CHUNK = 64
INLINE_CHUNK = 16
"""Elements read at once without threads (recomputed, not stored, if a checkpoint comes)."""


class IndexShardDataset(UnaryDataset):
    """Shard ``index`` of ``num_shards`` of a random-access dataset, in full rounds.

    Args:
        input_dataset: A dataset with random access.
        num_shards: Number of shards (data-parallel input pipelines).
        index: This shard, in ``[0, num_shards)``.
        num_parallel_calls: Threads reading elements ahead (``AUTOTUNE``: the CPU budget;
            ``None``: read on the consumer's thread).
        full_rounds: Drop the positions after the last full round, so every shard has the
            same length (data-parallel replicas); ``False`` keeps them, as ``shard`` does
            (worker processes, whose outputs are merged back into one stream).

    Example:
        >>> import feedline as fl
        >>> ds = IndexShardDataset(fl.Dataset.range(10), 3, 1, num_parallel_calls=None)
        >>> [int(x) for x in ds], len(ds)
        ([1, 4, 7], 3)
    """

    # Its input is read by index: rewrites must leave it as written.
    TRAITS = replace(POSITIONAL, random_access_from_input=True, keeps_input_as_written=True)

    # Which shard a pipeline is changes neither what a checkpoint means nor whether it
    # fits: one replica's checkpoint restores on any replica, with any number of them.
    _NOT_FINGERPRINTED = frozenset({"num_shards", "index", "num_parallel_calls"})

    def __init__(self, input_dataset: Dataset, num_shards: int, index: int,
                 num_parallel_calls: int | None = AUTOTUNE, name: str | None = None,
                 full_rounds: bool = True) -> None:
        super().__init__(input_dataset)
        require_random_access(input_dataset, "an index shard")
        self.num_shards = as_int(num_shards, "index shard (num_shards)")
        self.index = as_int(index, "index shard (index)")
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}")
        if not 0 <= self.index < self.num_shards:
            raise ValueError(f"index must be in [0, {self.num_shards}), got {self.index}")
        self.num_parallel_calls = validate_parallelism(num_parallel_calls,
                                                       "index shard (num_parallel_calls)")
        self.full_rounds = bool(full_rounds)
        self.name = name or f"index shard {self.index} of {self.num_shards}"

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        if self.full_rounds:
            return n // self.num_shards
        return n // self.num_shards + (1 if self.index < n % self.num_shards else 0)

    def _offers_random_access(self) -> bool:
        return True

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        reader = self._inputs[0]._random_reader(ctx)
        if self.full_rounds:
            return _FullRoundsReader(reader, self.num_shards, self.index)
        return StrideReader(reader, self.index, self.num_shards)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        workers = None if self.num_parallel_calls is None else resolve_parallelism(
            self.num_parallel_calls, ctx)
        return IndexShardIterator(ctx, self._inputs[0]._random_reader(ctx), self.num_shards,
                                  self.index, workers, self.name, self.full_rounds)


class _FullRoundsReader(DerivedReader):
    """Element ``i`` is input element ``index + i * num_shards``, in full rounds only."""

    def __init__(self, input_reader: RandomAccessReader, num_shards: int, index: int) -> None:
        super().__init__(input_reader)
        self._num_shards, self._index = num_shards, index

    def __len__(self) -> int:
        return len(self.input) // self._num_shards

    def get(self, index: int) -> Any:
        return self.input.get(self._index + index * self._num_shards)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        shards, first = self._num_shards, self._index
        return self.input.get_many([first + int(i) * shards for i in indices])


class IndexShardIterator(DatasetIterator):
    """Reads this shard's positions by index, ahead of the consumer on ``workers`` threads.

    Tasks read chunks of consecutive own positions, sized so a task runs about
    :data:`TARGET_TASK_SECONDS`. A chunk whose reading fails is read again element by
    element, so each error comes in its place (and occupies it: the next ``next()`` goes on
    with the next position).
    """

    OPERATION = "index_shard"

    def __init__(self, ctx: IteratorContext, reader: RandomAccessReader, num_shards: int,
                 index: int, workers: int | None, name: str, full_rounds: bool = True) -> None:
        super().__init__(ctx)
        self._full_rounds = full_rounds
        self._reader = reader
        self._length = len(reader)
        self._num_shards, self._index = num_shards, index
        self._workers, self._name = workers, name
        self._base = 0  # the global position this shard's count starts from
        self._taken = 0  # own elements handed out since _base
        self._submitted = 0  # own elements submitted for reading since _base
        self._chunk = 1
        self._ready: list[tuple[bool, Any]] = []  # outcomes of the chunk being handed out
        self._window = self._new_window()

    def _new_window(self) -> ReadAhead | None:
        if self._workers is None:
            return None
        threading_options = self._ctx.options.threading
        return ReadAhead(
            self._name,
            lambda: make_executor(self._workers, self._name,
                                  close_timeout=threading_options.close_timeout),
            limit=2 * self._workers, element_timeout=threading_options.element_timeout,
            describe=lambda tag: f"positions from {tag}")

    def _own_elements(self) -> int:
        """Own elements in this epoch from ``_base`` on (in full rounds only, if so)."""
        left = self._length - self._base
        if self._full_rounds:
            return max(0, left // self._num_shards)
        return max(0, -(-(left - self._index) // self._num_shards))

    def _positions(self, first: int, count: int) -> list[int]:
        start = self._base + self._index + first * self._num_shards
        return list(range(start, start + count * self._num_shards, self._num_shards))

    def _read_chunk(self, positions: list[int]) -> tuple[list[tuple[bool, Any]], float]:
        started = time.perf_counter()
        try:
            outcomes = [(True, element) for element in self._reader.get_many(positions)]
        except Exception:  # noqa: BLE001 - one by one, so each error stays in its place
            outcomes = []
            for position in positions:
                try:
                    outcomes.append((True, self._reader.get(position)))
                except Exception as error:  # noqa: BLE001 - handed out in its turn
                    outcomes.append((False, error))
        return outcomes, time.perf_counter() - started

    def __next__(self) -> Any:
        if not self._ready:
            total = self._own_elements()
            if self._taken >= total:
                raise StopIteration
            if self._window is None:
                count = min(INLINE_CHUNK, total - self._taken)
                self._ready = self._read_chunk(self._positions(self._taken, count))[0]
            else:
                self._fill(total)
                _, future = self._window.take()
                outcomes, seconds = future.result()
                per_element = seconds / max(1, len(outcomes))
                self._chunk = max(1, min(MAX_CHUNK, int(TARGET_TASK_SECONDS / max(
                    per_element, 1e-9))))
                self._ready = outcomes
                self._fill(total)
            self._ready.reverse()
        ok, value = self._ready.pop()
        self._taken += 1
        if not ok:
            raise value
        return value

    def _fill(self, total: int) -> None:
        window = self._window
        assert window is not None
        while window.has_room() and self._submitted < total:
            count = min(self._chunk, total - self._submitted)
            positions = self._positions(self._submitted, count)
            window.submit(positions[0], self._read_chunk, positions)
            self._submitted += count

    def read_aheads(self) -> list[ReadAhead]:
        return [] if self._window is None else [self._window]

    def _get_state(self) -> State:
        return {"position": self._base + self._taken * self._num_shards,
                "num_shards": self._num_shards, "reader": self._reader.state()}

    def rewound_state(self, count: int) -> State | None:
        if not 0 <= count <= self._taken:
            return None
        state = self.state_dict()
        state["position"] = self._base + (self._taken - count) * self._num_shards
        return state

    def _set_state(self, state: State) -> None:
        position = int(state["position"])
        if position < 0:
            raise CheckpointError(f"{self._name}: negative position {position} in the state")
        self._reader.load_state(state.get("reader", {}))
        self._length = len(self._reader)
        if self._window is not None:
            self._window.shutdown()
            self._window = self._new_window()
        self._base, self._taken, self._submitted, self._ready = position, 0, 0, []

    def _release(self) -> None:
        if self._window is not None:
            self._window.shutdown()
        self._reader.close()
