"""``filter``: keep the elements for which a predicate is true."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.functions import annotate_error, bind_free_variables, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable


def predicate_result(value: Any, stage: str, index: int) -> bool:
    """``value`` as a Python bool; it must be a bool or a scalar bool array, as in tf.data.

    Args:
        value: What the predicate returned.
        stage: Stage name for the error message.
        index: Input element index for the error message.

    Raises:
        TypeError: ``value`` is anything else (ints and non-scalar arrays included).

    Example:
        >>> predicate_result(np.bool_(True), "filter", 0)
        True
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.shape == ():
        return bool(value)
    if isinstance(value, np.ndarray | np.generic):
        found = f"a {value.dtype} array of shape {np.shape(value)}"
    else:
        found = f"{type(value).__name__} {value!r}"[:200]
    raise TypeError(f"{stage}: the predicate must return a bool or a scalar bool array, "
                    f"got {found} for input element {index}")


_TRUE, _FALSE = np.True_, np.False_


@operation("filter")
class FilterDataset(UnaryDataset):
    """The node of ``Dataset.filter``.

    Example:
        >>> import feedline as fl
        >>> [int(x) for x in FilterDataset(fl.Dataset.range(5), lambda x: x > 2)]
        [3, 4]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, predicate: Callable[..., Any],
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.predicate = bind_free_variables(
            require_callable(predicate, "filter()", "predicate"))
        self.name = name or f"filter({function_name(predicate)})"

    def cardinality(self) -> int:
        # tf.data reports UNKNOWN for filter whatever its input: how many pass is unknowable.
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return FilterIterator(ctx, self._make_input_iterator(ctx), self.predicate, self.name)


class FilterIterator(UnaryIterator):
    """Pulls input elements until one passes; a failing predicate consumes its element."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 predicate: Callable[..., Any], name: str) -> None:
        super().__init__(ctx, upstream)
        self._predicate = predicate
        self._name = name
        self._index = 0

    def __next__(self) -> Any:
        upstream, predicate = self._upstream, self._predicate
        while True:
            element = next(upstream)
            self._index += 1
            try:
                # Inlined call_with_element: this loop runs once per element.
                keep = predicate(*element) if type(element) is tuple else predicate(element)
            except Exception as error:  # noqa: BLE001 - re-raised with a note
                raise annotate_error(error, self._name, self._index - 1)
            if keep is True or keep is _TRUE:
                return element
            if keep is not False and keep is not _FALSE and \
                    predicate_result(keep, self._name, self._index - 1):
                return element

    def _get_state(self) -> State:
        return self._with_input_state({"index": self._index})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._index = state["index"]
