"""``take``: the first ``count`` elements of the input."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader, WindowReader
from feedline.core.registry import operation
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import validate_count


@operation("take")
class TakeDataset(UnaryDataset):
    """The node of ``Dataset.take``: at most ``count`` elements (any negative count: all of
    them, as tf.data; stored as -1).

    Example:
        >>> import feedline as fl
        >>> ds = TakeDataset(fl.Dataset.range(10), 3)
        >>> [int(x) for x in ds], ds.cardinality()
        ([0, 1, 2], 3)
    """

    TRAITS = replace(POSITIONAL, random_access_from_input=True)

    def __init__(self, input_dataset: Dataset, count: int, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.count = validate_count(count, "take(count)")
        self.name = name or "take"

    def cardinality(self) -> int:
        # tf.data's rule, including its choice to keep an unknown input unknown.
        n = self._inputs[0].cardinality()
        if n == UNKNOWN:
            return UNKNOWN
        if n == INFINITE:
            return self.count
        if self.count == -1:
            return n
        return min(n, self.count)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return TakeIterator(ctx, self._make_input_iterator(ctx), self.count)

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return WindowReader(self._inputs[0]._random_reader(ctx), 0, self.count)


class TakeIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, count: int) -> None:
        super().__init__(ctx, upstream)
        self._count = count
        self._taken = 0

    def __next__(self) -> Any:
        if self._count != -1 and self._taken >= self._count:
            # Never pull beyond the limit: the input may be expensive or infinite.
            raise StopIteration
        # An element whose production failed is not counted (as in tf.data), so
        # ``take(n).ignore_errors()`` still yields n good elements when there are that many.
        element = next(self._upstream)
        self._taken += 1
        return element

    def _get_state(self) -> State:
        return self._with_input_state({"taken": self._taken})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._taken = state["taken"]
