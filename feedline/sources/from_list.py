"""``Dataset.from_list``: one element per item of a list (tf.data's ``from_list``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.errors import StructureError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    describe,
    detached,
    most_specific_common_spec,
    same_structure,
    spec_of,
)
from feedline.core.traits import IN_MEMORY_SOURCE
from feedline.sources.tensors import as_element


def list_elements(elements: list[Any]) -> tuple[list[Element], Element]:
    """The items of ``elements`` as elements (leaves as arrays, as ``from_tensors`` makes
    them) and their common spec: items may differ in shape (non-rectangular lists), not in
    structure or dtype.

    Raises:
        ValueError: ``elements`` is not a list, or is empty (tf.data's words).
        StructureError: Two items differ in structure or in a leaf's dtype or rank.

    Example:
        >>> items, spec = list_elements([[[1]], [[2, 3]]])
        >>> spec
        TensorSpec(shape=(1, None), dtype=int32)
    """
    if not isinstance(elements, list):
        raise ValueError("from_list: Invalid `elements`. `elements` must be a list, got "
                         f"{type(elements).__name__}.")
    if not elements:
        raise ValueError("from_list: Invalid `elements`. `elements` should not be empty. If "
                         "you want an empty dataset, use `Dataset.range(0)`.")
    items = [as_element(item) for item in elements]
    spec = spec_of(items[0])
    for i, item in enumerate(items[1:], start=1):
        if not same_structure(items[0], item):
            raise StructureError(f"from_list: element {i} is {describe(item)}, but element 0 "
                                 f"is {describe(items[0])}: the elements must have the same "
                                 "structure")
        try:
            spec = most_specific_common_spec(spec, spec_of(item))
        except StructureError as error:
            raise StructureError(f"from_list: element {i} does not match the elements before "
                                 f"it: {error}") from None
    return items, spec


@operation("from_list")
class ListDataset(Dataset):
    """The node of ``Dataset.from_list``: the items of a list, in order, with random access.

    Example:
        >>> import feedline as fl
        >>> ds = ListDataset([(1, b"a"), (2, b"b")])
        >>> [(int(a), b) for a, b in ds], ds.cardinality(), int(ds[1][0])
        ([(1, b'a'), (2, b'b')], 2, 2)
    """

    TRAITS = IN_MEMORY_SOURCE  # every worker process may read all of it

    def __init__(self, elements: list[Any], name: str | None = None) -> None:
        super().__init__()
        self.name = name  # shown in errors and profiles; not part of the fingerprint
        self.elements, self.spec = list_elements(elements)

    def _element_spec(self) -> Element:
        return self.spec

    def cardinality(self) -> int:
        return len(self.elements)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ListIterator(ctx, self.elements)

    def _offers_random_access(self) -> bool:
        return True

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return ListReader(self.elements)


class ListReader(RandomAccessReader):
    """Element ``i`` is item ``i`` (a copy: a user's function may change it in place)."""

    def __init__(self, elements: Sequence[Element]) -> None:
        super().__init__()
        self._elements = elements

    def __len__(self) -> int:
        return len(self._elements)

    def get(self, index: int) -> Any:
        return detached(self._elements[index])


class ListIterator(DatasetIterator):
    def __init__(self, ctx: IteratorContext, elements: Sequence[Element]) -> None:
        super().__init__(ctx)
        self._elements = elements
        self._position = 0

    def __next__(self) -> Any:
        if self._position >= len(self._elements):
            raise StopIteration
        self._position += 1
        return detached(self._elements[self._position - 1])

    def _get_state(self) -> State:
        return {"position": self._position}

    def _set_state(self, state: State) -> None:
        position = int(state["position"])
        if not 0 <= position <= len(self._elements):
            raise ValueError(f"position {position} outside [0, {len(self._elements)}]")
        self._position = position
