"""``unique``: drop elements equal to one seen before."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element, TensorSpec, describe
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator

_SUPPORTED = "integer or bytes elements (scalars or arrays of any shape)"
UniqueKey = int | bytes | str | tuple[tuple[int, ...], tuple[int | bytes | str, ...]]


def _check_spec(spec: Element | None, stage: str) -> None:
    if spec is None:
        return
    if not isinstance(spec, TensorSpec):
        raise TypeError(f"{stage}: supports only {_SUPPORTED} (as tf.data), but the elements "
                        f"are {describe(spec)}")
    kind = np.dtype(spec.dtype).kind
    if kind not in "iuO":
        raise TypeError(f"{stage}: supports only {_SUPPORTED} (as tf.data), but the elements "
                        f"are {spec}")


def unique_key(element: Any, stage: str, index: int) -> UniqueKey:
    """The hashable value identifying an element; ``TypeError`` for unsupported elements.

    A scalar is its value; an array (tf.data compares whole tensors: shape and contents) is
    ``(shape, items)``, so ``[1, 2]`` and ``[[1, 2]]`` differ.

    Example:
        >>> unique_key(np.int32(7), "unique", 0), unique_key(b"a", "unique", 1)
        (7, b'a')
        >>> unique_key(np.array([[1, 2]]), "unique", 2)
        ((1, 2), (1, 2))
    """
    if isinstance(element, bytes | str):
        return element
    if isinstance(element, np.ndarray):
        if element.ndim == 0:
            element = element[()]
        elif element.dtype.kind in "iu" or (element.dtype.kind == "O" and all(
                isinstance(item, bytes | str) for item in element.flat)):
            return tuple(element.shape), tuple(element.ravel().tolist())
    if isinstance(element, int | np.integer) and not isinstance(element, bool | np.bool_):
        return int(element)
    if isinstance(element, bytes | str):
        return element
    found = describe(element) if isinstance(element, tuple | dict) else (
        f"an array of shape {element.shape} and dtype {element.dtype}"
        if isinstance(element, np.ndarray | np.generic) else type(element).__name__)
    raise TypeError(f"{stage}: supports only {_SUPPORTED} (as tf.data), but input element "
                    f"{index} is {found}")


@operation("unique")
class UniqueDataset(UnaryDataset):
    """The node of ``Dataset.unique``: the first occurrence of each value, in input order.

    Example:
        >>> import feedline as fl
        >>> list(UniqueDataset(fl.Dataset.from_tensor_slices([b"b", b"a", b"b"])))
        [b'b', b'a']
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.name = name or "unique"
        _check_spec(input_dataset._element_spec(), self.name)

    def cardinality(self) -> int:
        return UNKNOWN  # as tf.data: how many repeat is not known in advance

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return UniqueIterator(ctx, self._make_input_iterator(ctx), self.name)


class UniqueIterator(UnaryIterator):
    """Remembers every distinct value seen, so its memory and state grow with them."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, name: str) -> None:
        super().__init__(ctx, upstream)
        self._name = name
        self._index = 0
        # A dict rather than a set: insertion order makes saved states reproducible.
        self._seen: dict[UniqueKey, None] = {}

    def __next__(self) -> Any:
        while True:
            element = next(self._upstream)
            index = self._index
            self._index += 1
            key = unique_key(element, self._name, index)
            if key not in self._seen:
                self._seen[key] = None
                return element

    def _get_state(self) -> State:
        return self._with_input_state({"index": self._index,
                                       "seen": [encode(key) for key in self._seen]})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._index = state["index"]
        self._seen = dict.fromkeys(_hashable(decode(key)) for key in state["seen"])


def _hashable(key: Any) -> UniqueKey:
    """A key as :func:`unique_key` made it (a state may hold its tuples as lists)."""
    if isinstance(key, list | tuple):
        shape, items = key
        return tuple(int(d) for d in shape), tuple(items)
    return key
