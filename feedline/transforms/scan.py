"""``scan``: carry a state through the elements, emitting one output per element."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.functions import annotate_error, bind_free_variables, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import (
    Element,
    describe,
    flatten,
    flatten_with_paths,
    normalize_output,
    same_structure,
)
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable
from feedline.sources.tensors import as_element


def as_initial_state(initial_state: Element) -> Element:
    """The user's initial state with its leaves as NumPy values (as tf.data makes tensors;
    lists are leaves, as in ``from_tensors``).

    Example:
        >>> as_initial_state((0, [1.5, 2.5]))
        (np.int32(0), array([1.5, 2.5], dtype=float32))
    """
    return as_element(initial_state)


def _leaf_kind(leaf: Any) -> Any:
    """What a state leaf's type is compared by: its NumPy dtype (``object`` for ``bytes``),
    ``None`` for a ``None`` leaf, or the dataset class for a dataset."""
    if leaf is None:
        return None
    if isinstance(leaf, np.ndarray | np.generic):
        return leaf.dtype
    if isinstance(leaf, bytes):
        return np.dtype(object)
    if isinstance(leaf, Dataset):
        return Dataset
    return np.asarray(leaf).dtype  # a Python number


def _kind_name(kind: Any) -> str:
    if kind is None:
        return "None"
    if kind is Dataset:
        return "a dataset"
    return kind.name if kind != np.dtype(object) else "bytes (object)"


@operation("scan")
class ScanDataset(UnaryDataset):
    """The node of ``Dataset.scan``: ``scan_func(state, element) -> (new_state, output)``.

    The element is passed whole (a tuple element is not spread over arguments), as tf.data
    calls ``scan_func`` with exactly two arguments.

    The new state must have the initial state's structure and, leaf by leaf, its dtype
    (tf.data: "The element types for the new state must match the initial state", a
    ``TypeError``); a Python number returned takes tf.data's dtype first (``1.5`` is float32,
    ``1`` int32, ``1j`` complex128), whatever the state's dtype, as tf.data converts it
    before it compares. Shapes may change
    from step to step: tf.data relaxes the state's shape to what stays the same (a growing
    vector is a state of shape ``(None,)``).

    Example:
        >>> import feedline as fl
        >>> ds = ScanDataset(fl.Dataset.range(1, 5), np.int64(1), lambda s, x: (s * x, s * x))
        >>> [int(x) for x in ds]
        [1, 2, 6, 24]
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, initial_state: Element,
                 scan_func: Callable[[Any, Any], tuple[Any, Any]],
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.scan_func = bind_free_variables(
            require_callable(scan_func, "scan()", "scan_func"))
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
        self._kinds = [_leaf_kind(leaf) for leaf in flatten(initial_state)]
        self._state = initial_state
        self._fn = scan_func
        self._name = name
        self._index = 0
        self._dtypes = DtypeGuard(name)  # its outputs keep the first one's dtypes

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
        return self._conform(new_state), self._dtypes.check(output, self._index - 1)

    def _conform(self, new_state: Element) -> Element:
        """The new state, when each leaf has its initial dtype; else a ``TypeError`` saying
        which leaf's dtype differs (Python numbers took tf.data's dtypes already, in
        :func:`~feedline.core.structure.normalize_output`, as tf.data converts them before it
        compares)."""
        for i, (leaf, kind) in enumerate(zip(flatten(new_state), self._kinds)):
            found = _leaf_kind(leaf)
            if found != kind:
                path = flatten_with_paths(new_state)[i][0]
                where = "the state" if path == "<element>" else f"leaf {path} of the state"
                raise TypeError(
                    f"{self._name}: Invalid `scan_func`. The element types for the new "
                    f"state must match the initial state. Expected {_kind_name(kind)}, "
                    f"got {_kind_name(found)} ({where})")
        return new_state

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
