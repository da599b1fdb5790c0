"""``scan``: carry a state through the elements, emitting one output per element."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.functions import annotate_error, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element, describe, normalize_output, pack_as, same_structure
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable
from feedline.sources.tensor_slices import as_leaf_arrays


def as_initial_state(initial_state: Element) -> Element:
    """The user's initial state with its leaves as NumPy values (as tf.data makes tensors;
    lists are leaves, as in ``from_tensors``).

    Example:
        >>> as_initial_state((0, [1.5, 2.5]))
        (np.int64(0), array([1.5, 2.5]))
    """
    structure, leaves = as_leaf_arrays(initial_state)
    return pack_as(structure, [leaf[()] if leaf.ndim == 0 else leaf for leaf in leaves])


class ScanDataset(UnaryDataset):
    """The node of ``Dataset.scan``: ``scan_func(state, element) -> (new_state, output)``.

    The element is passed whole (a tuple element is not spread over arguments), as tf.data
    calls ``scan_func`` with exactly two arguments.

    Example:
        >>> import feedline as fl
        >>> ds = ScanDataset(fl.Dataset.range(1, 5), 1, lambda s, x: (s * x, s * x))
        >>> [int(x) for x in ds]
        [1, 2, 6, 24]
    """

    def __init__(self, input_dataset: Dataset, initial_state: Element,
                 scan_func: Callable[[Any, Any], tuple[Any, Any]],
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.scan_func = require_callable(scan_func, "scan()", "scan_func")
        self.initial_state = as_initial_state(initial_state)
        self.name = name or f"scan({function_name(scan_func)})"

    def _element_spec(self) -> Element | None:
        return None  # the outputs are whatever scan_func returns: seen only by running it

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ScanIterator(ctx, self._make_input_iterator(ctx), self.initial_state,
                            self.scan_func, self.name)


class ScanIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, initial_state: Element,
                 scan_func: Callable[[Any, Any], tuple[Any, Any]], name: str) -> None:
        super().__init__(ctx, upstream)
        self._initial = initial_state
        self._state = initial_state
        self._fn = scan_func
        self._name = name
        self._index = 0

    def _step(self, element: Any) -> tuple[Element, Element]:
        result = normalize_output(self._fn(self._state, element))
        if not isinstance(result, tuple) or len(result) != 2:
            found = describe(result) if isinstance(result, tuple) else type(result).__name__
            raise TypeError(f"{self._name}: scan_func must return a pair (new_state, output), "
                            f"got {found}")
        new_state, output = result
        if not same_structure(self._initial, new_state):
            raise TypeError(f"{self._name}: the new state must have the structure of the "
                            f"initial state: expected {describe(self._initial)}, got "
                            f"{describe(new_state)}")
        return new_state, output

    def __next__(self) -> Any:
        element = next(self._upstream)
        index = self._index
        self._index += 1
        try:
            # On failure the state is left as it was: the element is skipped, not half-applied.
            self._state, output = self._step(element)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, index)
        return output

    def _get_state(self) -> State:
        return self._with_input_state({"index": self._index, "scan_state": encode(self._state)})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._index = state["index"]
        self._state = decode(state["scan_state"])
