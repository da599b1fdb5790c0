"""``Dataset.from_tensors``: a single element."""

from __future__ import annotations

from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import Element, pack_as, spec_of
from feedline.sources.tensor_slices import as_leaf_arrays


class TensorsDataset(Dataset):
    """The node of ``Dataset.from_tensors``: its one element is the structure, leaves as arrays."""

    _CHEAP_TO_REREAD = True  # in memory: every worker process may read all of it

    def __init__(self, structure: Element) -> None:
        super().__init__()
        structure, leaves = as_leaf_arrays(structure)
        self.element = pack_as(structure, [leaf[()] if leaf.ndim == 0 else leaf for leaf in leaves])

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
        return self._element

    def _get_state(self) -> State:
        return {"done": self._done}

    def _set_state(self, state: State) -> None:
        self._done = state["done"]
