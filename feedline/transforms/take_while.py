"""``take_while``: elements up to (not including) the first that fails a predicate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.functions import (
    annotate_error,
    bind_free_variables,
    call_with_element,
    function_name,
)
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable
from feedline.transforms.filter import predicate_result


@operation("take_while")
class TakeWhileDataset(UnaryDataset):
    """The node of ``Dataset.take_while``.

    Example:
        >>> import feedline as fl
        >>> [int(x) for x in TakeWhileDataset(fl.Dataset.range(10), lambda x: x * x < 10)]
        [0, 1, 2, 3]
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, predicate: Callable[..., Any],
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.predicate = bind_free_variables(
            require_callable(predicate, "take_while()", "predicate"))
        self.name = name or f"take_while({function_name(predicate)})"

    def cardinality(self) -> int:
        # Where the predicate first fails cannot be known without running it (tf.data's rule).
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return TakeWhileIterator(ctx, self._make_input_iterator(ctx), self.predicate,
                                 self.name)


class TakeWhileIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 predicate: Callable[..., Any], name: str) -> None:
        super().__init__(ctx, upstream)
        self._predicate = predicate
        self._name = name
        self._index = 0
        self._done = False

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        element = next(self._upstream)
        index = self._index
        self._index += 1
        try:
            keep = predicate_result(call_with_element(self._predicate, element), self._name, index)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, index)
        if not keep:
            # Stop for good: the input is not read any further.
            self._done = True
            raise StopIteration
        return element

    def _get_state(self) -> State:
        return self._with_input_state({"index": self._index, "done": self._done})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._index = state["index"]
        self._done = state["done"]
