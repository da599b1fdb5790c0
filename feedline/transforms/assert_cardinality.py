"""``assert_cardinality``: the input's elements, with a cardinality the user vouches for."""

from __future__ import annotations

from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import InvalidArgumentError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.traits import ONE_TO_ONE
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import validate_int


def _elements(n: int) -> str:
    return f"{n} element" if n == 1 else f"{n} elements"


def _expected(n: int) -> str:
    return "an infinite number of elements" if n == INFINITE else _elements(n)


@operation("assert_cardinality")
class AssertCardinalityDataset(UnaryDataset):
    """The node of ``Dataset.assert_cardinality`` (tf.data's
    ``tf.data.experimental.assert_cardinality``): reports ``expected_cardinality`` and checks
    it while reading: an input that ends early, or gives one element more, is tf.data's
    ``FailedPreconditionError`` (an :class:`InvalidArgumentError` here) in tf.data's words.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(10).filter(lambda x: x < 20).assert_cardinality(10)
        >>> ds.cardinality(), len(list(ds))
        (10, 10)
    """

    TRAITS = ONE_TO_ONE

    def __init__(self, input_dataset: Dataset, expected_cardinality: int,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        # Any int, as tf.data: INFINITE (-1) and UNKNOWN (-2) are cardinalities too.
        self.expected_cardinality = validate_int(
            expected_cardinality, "assert_cardinality(expected_cardinality)")
        self.name = name or "assert_cardinality"

    def cardinality(self) -> int:
        return self.expected_cardinality

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return AssertCardinalityIterator(ctx, self._make_input_iterator(ctx),
                                         self.expected_cardinality, self.name)


class AssertCardinalityIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, expected: int,
                 name: str) -> None:
        super().__init__(ctx, upstream)
        self._expected = expected
        self._name = name
        self._count = 0

    def __next__(self) -> Any:
        try:
            element = next(self._upstream)
        except StopIteration:
            if self._expected == INFINITE or (self._expected >= 0
                                              and self._count < self._expected):
                raise InvalidArgumentError(
                    f"{self._name}: Input dataset was expected to contain "
                    f"{_expected(self._expected)} but contained only "
                    f"{_elements(self._count)}.") from None
            raise
        self._count += 1
        if self._expected not in (INFINITE, UNKNOWN) and self._count > self._expected:
            raise InvalidArgumentError(
                f"{self._name}: Input dataset was expected to contain "
                f"{_expected(self._expected)} but contained at least "
                f"{_elements(self._count)}.")
        return element

    def _get_state(self) -> State:
        return self._with_input_state({"count": self._count})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._count = int(state["count"])
