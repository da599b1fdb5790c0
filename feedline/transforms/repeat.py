"""``repeat``: run the input again and again.

A finite ``repeat(count)`` of a random-access input has random access too (as in tf.data):
element ``i`` is input element ``i % n``. An infinite one has none (no length; tf.data's
``at`` refuses it too), except over an empty input, whose repetition is empty. Neither
has it over an input whose elements change from epoch to epoch (a ``global_shuffle`` that
reshuffles each iteration): each epoch is another order, which one reader cannot give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import DerivedReader, RandomAccessReader, reads_vary_by_epoch
from feedline.core.registry import operation
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import validate_count


@operation("repeat")
class RepeatDataset(UnaryDataset):
    """The node of ``Dataset.repeat``; ``count`` None or negative repeats forever (as tf.data,
    stored as -1), 0 gives nothing.

    Example:
        >>> import feedline as fl, numpy as np
        >>> ds = RepeatDataset(fl.Dataset.range(2), np.int64(-2))
        >>> ds.count, ds.cardinality(), [int(x) for x in ds.take(5)]
        (-1, -1, [0, 1, 0, 1, 0])
    """

    TRAITS = replace(INDEPENDENT, random_access_from_input=True)

    def __init__(self, input_dataset: Dataset, count: int | None = None,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.count = -1 if count is None else validate_count(count, "repeat(count)")
        self.name = name or "repeat"

    def cardinality(self) -> int:
        # tf.data's rule: forever over an input of unknown size is INFINITE, although the
        # iterator ends if that input turns out to be empty.
        n = self._inputs[0].cardinality()
        if self.count == 0 or n == 0:
            return 0
        if self.count == -1:
            return INFINITE
        if n in (INFINITE, UNKNOWN):
            return n
        return n * self.count

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RepeatIterator(ctx, self._inputs[0], self.count)

    def _offers_random_access(self) -> bool:
        source = self._inputs[0]
        if not source._offers_random_access() or reads_vary_by_epoch(source):
            return False
        return self.count != -1 or source.cardinality() == 0

    def _no_random_access_reason(self) -> str | None:
        """Why this repeat has no random access while its input has (for error messages)."""
        source = self._inputs[0]
        if not source._offers_random_access():
            return None
        if reads_vary_by_epoch(source):
            return ("its input reshuffles each epoch (a global_shuffle with "
                    "reshuffle_each_iteration), so its epochs differ; put global_shuffle "
                    "after repeat, or pass reshuffle_each_iteration=False")
        return "it repeats forever: there is no length to index (tf.data's at() refuses it too)"

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return RepeatReader(self._inputs[0]._random_reader(ctx), max(self.count, 0))


class RepeatReader(DerivedReader):
    """Element ``i`` is input element ``i % n``, for ``count`` epochs.

    Example:
        >>> import feedline as fl
        >>> from feedline.core.random_access import open_reader
        >>> reader = RepeatReader(open_reader(fl.Dataset.range(3)), 2)
        >>> len(reader), [int(x) for x in reader.get_many([0, 4, 5])]
        (6, [0, 1, 2])
    """

    def __init__(self, input_reader: RandomAccessReader, count: int) -> None:
        super().__init__(input_reader)
        self._n = len(input_reader)
        self._length = self._n * count

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> Any:
        return self.input.get(index % self._n)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        n = self._n
        return self.input.get_many([int(i) % n for i in indices])


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
