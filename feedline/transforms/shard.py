"""``shard``: every ``num_shards``-th element, starting at ``index``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader, StrideReader
from feedline.core.registry import operation
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import as_int


@operation("shard")
class ShardDataset(UnaryDataset):
    """The node of ``Dataset.shard``: keeps the elements at positions ``index``,
    ``index + num_shards``, ``index + 2 * num_shards``, ... of the input.

    Example:
        >>> import feedline as fl
        >>> ds = ShardDataset(fl.Dataset.range(10), 4, 1)
        >>> [int(x) for x in ds], ds.cardinality()
        ([1, 5, 9], 3)
    """

    TRAITS = replace(POSITIONAL, random_access_from_input=True)

    def __init__(self, input_dataset: Dataset, num_shards: int, index: int,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        num_shards = as_int(num_shards, "shard(num_shards)")
        index = as_int(index, "shard(index)")
        if num_shards < 1:
            raise ValueError(f"shard(num_shards) must be >= 1, got {num_shards}")
        if not 0 <= index < num_shards:
            raise ValueError(f"shard(index) must be in [0, num_shards) = [0, {num_shards}), "
                             f"got {index}")
        self.num_shards = num_shards
        self.index = index
        self.name = name or "shard"

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return n // self.num_shards + (1 if self.index < n % self.num_shards else 0)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ShardIterator(ctx, self._make_input_iterator(ctx), self.num_shards,
                             self.index)

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return StrideReader(self._inputs[0]._random_reader(ctx), self.index, self.num_shards)


class ShardIterator(UnaryIterator):
    """Pulls the elements of other shards only when asked for the next one of its own, so
    the input is never read past the last element this shard yields."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, num_shards: int,
                 index: int) -> None:
        super().__init__(ctx, upstream)
        self._num_shards = num_shards
        self._index = index
        self._position = 0  # position in the input of the next element to pull

    def __next__(self) -> Any:
        while True:
            position = self._position
            # A failing element still occupies its position, so that every shard of the
            # same input agrees on who owns which element whatever fails.
            try:
                element = next(self._upstream)
            except StopIteration:
                raise
            except Exception:
                self._position += 1
                raise
            self._position += 1
            if position % self._num_shards == self._index:
                return element

    def _get_state(self) -> State:
        return self._with_input_state({"position": self._position})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._position = state["position"]
