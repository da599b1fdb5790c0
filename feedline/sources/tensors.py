"""``Dataset.from_tensors``: a single element."""

from __future__ import annotations

from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    detached,
    flatten,
    is_registered_leaf,
    map_structure,
    pack_as,
    spec_of,
)
from feedline.core.traits import IN_MEMORY_SOURCE
from feedline.sources.tensor_slices import as_leaf_arrays, check_dataset_leaves


def as_element(structure: Element) -> Element:
    """A user-given structure as an element, as tf.data makes tensors of it: leaves become
    NumPy arrays (0-d ones NumPy scalars or ``bytes``); a dataset stays itself, a list of
    datasets becomes an object array of them (a batch of datasets); ``None`` stays ``None``;
    :class:`~feedline.RaggedValues` stay ragged values (tf.data's ``from_tensors`` of a
    ``tf.RaggedTensor`` yields it whole, spec ``RaggedTensorSpec``).

    Example:
        >>> as_element((1, [2.5, 3.5], "a", None))
        (np.int32(1), array([2.5, 3.5], dtype=float32), b'a', None)
    """
    structure, leaves = as_leaf_arrays(structure, keep_ragged=True)
    # Ragged values have no ndim: they are never 0-d (a ragged tensor has rank 2 or more).
    return pack_as(structure, [leaf[()] if leaf is not None and getattr(leaf, "ndim", 1) == 0
                               else leaf for leaf in leaves])


def _fresh(element: Element) -> Element:
    """A copy of ``element`` to hand out, as :func:`~feedline.core.structure.detached`
    makes it, whose ragged values have their own values array too (an in-place update of
    one epoch's ``values`` must not reach the next)."""
    element = detached(element)
    if not any(is_registered_leaf(leaf) and hasattr(leaf, "nested_row_splits")
               for leaf in flatten(element)):
        return element
    return map_structure(
        lambda leaf: type(leaf)(leaf.values.copy(), leaf.nested_row_splits)
        if is_registered_leaf(leaf) and hasattr(leaf, "nested_row_splits") else leaf,
        element)


@operation("from_tensors")
class TensorsDataset(Dataset):
    """The node of ``Dataset.from_tensors``: its one element is the structure, leaves as arrays.

    Example:
        >>> import feedline as fl
        >>> ds = TensorsDataset([fl.Dataset.range(2), fl.Dataset.range(3)])
        >>> ds.element_spec
        DatasetSpec(TensorSpec(shape=(), dtype=int64), shape=(2,))
        >>> [[int(x) for x in d] for d in ds.unbatch()]
        [[0, 1], [0, 1, 2]]
    """

    TRAITS = IN_MEMORY_SOURCE  # every worker process may read all of it

    def __init__(self, structure: Element, name: str | None = None) -> None:
        super().__init__()
        self.name = name  # shown in errors and profiles; not part of the fingerprint
        self.element = as_element(structure)
        check_dataset_leaves(self.element, "from_tensors()")

    def _element_spec(self) -> Element:
        return spec_of(self.element)

    def cardinality(self) -> int:
        return 1

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return TensorsIterator(ctx, self.element)


class TensorsIterator(DatasetIterator):
    def __init__(self, ctx: IteratorContext, element: Element) -> None:
        super().__init__(ctx)
        self._element = element
        self._done = False

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        self._done = True
        # A copy: the same element is handed out again by the next iterator (repeat), and
        # the user's function may update it in place (tf.data's tensors are immutable).
        return _fresh(self._element)

    def _get_state(self) -> State:
        return {"done": self._done}

    def _set_state(self, state: State) -> None:
        self._done = state["done"]
