"""``skip``: everything after the first ``count`` elements of the input."""

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


@operation("skip")
class SkipDataset(UnaryDataset):
    """The node of ``Dataset.skip``: drops the first ``count`` elements (any negative count:
    all of them, as tf.data; stored as -1).

    Example:
        >>> import feedline as fl
        >>> ds = SkipDataset(fl.Dataset.range(5), 2)
        >>> [int(x) for x in ds], ds.cardinality()
        ([2, 3, 4], 3)
    """

    TRAITS = replace(POSITIONAL, random_access_from_input=True)

    def __init__(self, input_dataset: Dataset, count: int, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.count = validate_count(count, "skip(count)")
        self.name = name or "skip"

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return 0 if self.count == -1 else max(0, n - self.count)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return SkipIterator(ctx, self._make_input_iterator(ctx), self.count)

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        reader = self._inputs[0]._random_reader(ctx)
        start = len(reader) if self.count == -1 else self.count
        return WindowReader(reader, start, -1)


class SkipIterator(UnaryIterator):
    """Skips lazily, on the first ``next()``, as tf.data does."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, count: int) -> None:
        super().__init__(ctx, upstream)
        self._count = count
        self._skipped = 0

    def __next__(self) -> Any:
        while self._count == -1 or self._skipped < self._count:
            # A failing element is reported and not counted (as in tf.data's take/skip).
            next(self._upstream)
            self._skipped += 1
        return next(self._upstream)

    def _get_state(self) -> State:
        return self._with_input_state({"skipped": self._skipped})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._skipped = state["skipped"]
