"""``repeat``: run the input again and again."""

from __future__ import annotations

from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import validate_count


class RepeatDataset(UnaryDataset):
    """The node of ``Dataset.repeat``; ``count`` None or negative repeats forever (as tf.data,
    stored as -1), 0 gives nothing.

    Example:
        >>> import feedline as fl, numpy as np
        >>> ds = RepeatDataset(fl.Dataset.range(2), np.int64(-2))
        >>> ds.count, ds.cardinality(), [int(x) for x in ds.take(5)]
        (-1, -1, [0, 1, 0, 1, 0])
    """

    def __init__(self, input_dataset: Dataset, count: int | None = None,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.count = -1 if count is None else validate_count(count, "repeat(count)")
        self.name = name or "repeat"

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        if self.count == 0 or n == 0:
            return 0
        if self.count == -1:
            return INFINITE if n != UNKNOWN else UNKNOWN
        if n in (INFINITE, UNKNOWN):
            return n
        return n * self.count

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RepeatIterator(ctx, self._inputs[0], self.count)


class RepeatIterator(UnaryIterator):
    """Builds a fresh input iterator per epoch (so per-epoch behaviour, like reshuffling, applies).

    The finished iterator keeps its last input iterator, so the state has the same shape at
    every step.
    """

    def __init__(self, ctx: IteratorContext, source: Dataset, count: int) -> None:
        super().__init__(ctx, source._make_iterator(ctx))
        self._source = source
        self._count = count
        self._epoch = 0
        self._done = count == 0

    def _new_epoch(self) -> None:
        self._upstream.close()
        self._set_upstream(self._source._make_iterator(self._ctx))

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        fresh_epoch = False
        while True:
            try:
                return next(self._upstream)
            except StopIteration:
                self._epoch += 1
                # A whole epoch that gave nothing means an empty input: stop rather than
                # loop forever under repeat().
                if fresh_epoch or (self._count != -1 and self._epoch >= self._count):
                    self._done = True
                    raise
                self._new_epoch()
                fresh_epoch = True

    def _get_state(self) -> State:
        return self._with_input_state({"epoch": self._epoch, "done": self._done})

    def _set_state(self, state: State) -> None:
        self._epoch = state["epoch"]
        self._done = state["done"]
        self._new_epoch()
        self._load_input_state(state)
