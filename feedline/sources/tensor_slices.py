"""``Dataset.from_tensor_slices``: one element per row of every leaf."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import StructureError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader
from feedline.core.structure import (
    Element,
    flatten,
    flatten_with_paths,
    pack_as,
    spec_of,
    to_leaf_array,
    unbatched_spec,
)


def as_leaf_arrays(structure: Element) -> tuple[Element, list[np.ndarray]]:
    """Convert every leaf of a user-given structure to a NumPy array (lists included)."""
    if isinstance(structure, list):
        structure = to_leaf_array(structure)
    leaves = [to_leaf_array(leaf) for leaf in flatten(structure)]
    return structure, leaves


class TensorSlicesDataset(Dataset):
    """The node of ``Dataset.from_tensor_slices``."""

    _CHEAP_TO_REREAD = True  # in memory: every worker process may read all of it

    def __init__(self, structure: Element) -> None:
        super().__init__()
        structure, leaves = as_leaf_arrays(structure)
        if not leaves:
            raise StructureError("from_tensor_slices() needs at least one leaf")
        paths = [path for path, _ in flatten_with_paths(structure)]
        for path, leaf in zip(paths, leaves):
            if leaf.ndim == 0:
                raise StructureError(
                    f"from_tensor_slices(): leaf {path} is a scalar; every leaf needs a "
                    "leading dimension to slice")
        rows = {leaf.shape[0] for leaf in leaves}
        if len(rows) != 1:
            sizes = ", ".join(f"{p}: {leaf.shape[0]}" for p, leaf in zip(paths, leaves))
            raise StructureError(
                f"from_tensor_slices(): leaves have different first dimensions ({sizes})")
        self.structure = structure
        self.leaves = leaves
        self.length = rows.pop()

    def _element_spec(self) -> Element:
        return unbatched_spec(spec_of(pack_as(self.structure, self.leaves)))

    def cardinality(self) -> int:
        return self.length

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return TensorSlicesIterator(ctx, self.structure, self.leaves, self.length)

    def _offers_random_access(self) -> bool:
        return True

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return TensorSlicesReader(self.structure, self.leaves, self.length)


class TensorSlicesReader(RandomAccessReader):
    """Row ``i`` of every leaf; ``get_many`` slices each leaf once (NumPy fancy indexing).

    Example:
        >>> reader = TensorSlicesReader(None, [np.array([5, 6, 7])], 3)
        >>> [int(x) for x in reader.get_many([2, 0])]
        [7, 5]
    """

    def __init__(self, structure: Element, leaves: list[np.ndarray], length: int) -> None:
        super().__init__()
        self._structure = structure
        self._leaves = leaves
        self._single = not isinstance(structure, tuple | dict)
        self._length = length

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> Any:
        if self._single:
            return self._leaves[0][index]
        return pack_as(self._structure, [leaf[index] for leaf in self._leaves])

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        rows = np.asarray(indices, dtype=np.intp)
        columns = [leaf[rows] for leaf in self._leaves]
        if self._single:
            return list(columns[0])
        structure = self._structure
        return [pack_as(structure, [column[i] for column in columns]) for i in range(len(rows))]


class TensorSlicesIterator(DatasetIterator):
    def __init__(self, ctx: IteratorContext, structure: Element, leaves: list[np.ndarray],
                 length: int) -> None:
        super().__init__(ctx)
        self._structure = structure
        self._leaves = leaves
        self._single = not isinstance(structure, tuple | dict)
        self._length = length
        self._position = 0

    def __next__(self) -> Any:
        i = self._position
        if i >= self._length:
            raise StopIteration
        self._position = i + 1
        if self._single:
            return self._leaves[0][i]
        return pack_as(self._structure, [leaf[i] for leaf in self._leaves])

    def _get_state(self) -> State:
        return {"position": self._position}

    def _set_state(self, state: State) -> None:
        self._position = state["position"]
