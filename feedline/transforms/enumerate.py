"""``enumerate``: pair each element with its index."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import Element, TensorSpec
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import as_int


@operation("enumerate")
class EnumerateDataset(UnaryDataset):
    """The node of ``Dataset.enumerate``: ``(np.int64 index, element)`` pairs.

    Example:
        >>> import feedline as fl
        >>> [(int(i), int(x)) for i, x in EnumerateDataset(fl.Dataset.range(10, 12), 3)]
        [(3, 10), (4, 11)]
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, start: int = 0, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.start = as_int(start, "enumerate(start)")
        self.name = name or "enumerate"

    def _element_spec(self) -> Element | None:
        inner = self._inputs[0]._element_spec()
        if inner is None:
            return None
        return (TensorSpec((), np.dtype(np.int64)), inner)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return EnumerateIterator(ctx, self._make_input_iterator(ctx), self.start)


class EnumerateIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, start: int) -> None:
        super().__init__(ctx, upstream)
        self._next = start

    def __next__(self) -> Any:
        index = self._next
        try:
            element = next(self._upstream)
        except StopIteration:
            raise
        except Exception:
            # tf.data enumerates by zipping with a counter, so a failed element uses up its
            # index: indices stay the input positions.
            self._next += 1
            raise
        self._next += 1
        return np.int64(index), element

    def _get_state(self) -> State:
        return self._with_input_state({"next": self._next})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._next = state["next"]
