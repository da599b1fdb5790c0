"""``Dataset.from_tensor_slices``: one element per row of every leaf."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import StructureError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    RaggedListError,
    flatten,
    flatten_with_paths,
    is_datasets_array,
    is_registered_leaf,
    most_specific_common_spec,
    pack_as,
    spec_of,
    to_leaf_array,
    unbatched_spec,
)
from feedline.core.traits import IN_MEMORY_SOURCE


def as_leaf_arrays(structure: Element, keep_ragged: bool = False
                   ) -> tuple[Element, list[np.ndarray | None]]:
    """Convert every leaf of a user-given structure to a NumPy array (lists included), as
    tf.data makes tensors of them; ``None`` leaves stay ``None`` (tf.data's
    ``NoneTensorSpec`` components).

    Strings become object arrays of ``bytes``, ``str`` items of object arrays included (a
    pandas text column); a (nested) list of datasets becomes an object array of them.
    With ``keep_ragged``, :class:`~feedline.RaggedValues` stay as they are (their rows are
    sliced as ``tf.RaggedTensor``'s are).

    Returns:
        The structure (a list given as the whole structure becomes one array) and its
        leaves converted, in :func:`~feedline.core.structure.flatten` order.

    Example:
        >>> as_leaf_arrays({"name": np.array(["a", "b"], dtype=object), "none": None})[1]
        [array([b'a', b'b'], dtype=object), None]
    """
    if isinstance(structure, list):
        structure = to_leaf_array(structure)
    leaves = [None if leaf is None else leaf if keep_ragged and _is_ragged(leaf)
              else to_leaf_array(leaf) for leaf in flatten(structure)]
    return structure, leaves


def _is_ragged(leaf: Any) -> bool:
    """Whether ``leaf`` is a :class:`~feedline.RaggedValues` (known by its registered type
    and its row splits: sources do not import the formats)."""
    return is_registered_leaf(leaf) and hasattr(leaf, "nested_row_splits")



def _row(leaf: Any, index: int) -> Any:
    """Row ``index`` of ``leaf``: a scalar, or a copy of a row (a view would let an in-place
    update of the element change the source, and so later epochs; tf.data's are immutable).
    A row of ragged values is an array (one ragged level) or ragged values, as tf.data's."""
    row = leaf[index]
    if type(row) is np.ndarray:
        return row.copy()
    if _is_ragged(row):
        return type(row)(row.values.copy(), row.nested_row_splits)
    return row


def _rows(leaf: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of ``leaf`` (fancy indexing; ragged values row by row)."""
    if _is_ragged(leaf):
        return [_row(leaf, int(i)) for i in rows]
    return leaf[rows]

@operation("from_tensor_slices")
class TensorSlicesDataset(Dataset):
    """The node of ``Dataset.from_tensor_slices``."""

    TRAITS = IN_MEMORY_SOURCE  # every worker process may read all of it

    def __init__(self, structure: Element, name: str | None = None) -> None:
        super().__init__()
        self.name = name  # shown in errors and profiles; not part of the fingerprint
        try:
            structure, leaves = as_leaf_arrays(structure, keep_ragged=True)
        except RaggedListError as error:
            raise RaggedListError(f"from_tensor_slices(): {error}") from None
        if all(leaf is None for leaf in leaves):
            raise StructureError("from_tensor_slices() needs at least one leaf that is not None")
        paths = [path for path, _ in flatten_with_paths(structure)]
        for path, leaf in zip(paths, leaves):
            if leaf is not None and not _is_ragged(leaf) and leaf.ndim == 0:
                what = ("one dataset: Slicing dataset elements is not supported for rank 0"
                        if is_datasets_array(leaf[None]) else "a scalar")
                raise StructureError(
                    f"from_tensor_slices(): leaf {path} is {what}; every leaf needs a "
                    "leading dimension to slice")
        rows = {len(leaf) for leaf in leaves if leaf is not None}
        if len(rows) != 1:
            sizes = ", ".join(f"{p}: {len(leaf)}" for p, leaf in zip(paths, leaves)
                              if leaf is not None)
            raise StructureError(
                f"from_tensor_slices(): leaves have different first dimensions ({sizes})")
        check_dataset_leaves(pack_as(structure, leaves), "from_tensor_slices()")
        self.structure = structure
        self.leaves = leaves
        self.length = rows.pop()

    def _element_spec(self) -> Element:
        return unbatched_spec(spec_of(pack_as(self.structure, self.leaves)))

    def cardinality(self) -> int:
        return self.length

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return TensorSlicesIterator(ctx, self.structure, _row_sources(self.leaves), self.length)

    def _offers_random_access(self) -> bool:
        return True

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return TensorSlicesReader(self.structure, _row_sources(self.leaves), self.length)


class _NoneRows:
    """The rows of a ``None`` leaf: ``None`` at every index; a selection of rows is again
    the rows of a ``None`` leaf.

    Example:
        >>> rows = _NoneRows()
        >>> rows[1] is None and rows[np.array([0, 2])][0] is None
        True
    """

    def __getitem__(self, index: Any) -> Any:
        return None if isinstance(index, int | np.integer) else self


def _row_sources(leaves: list[np.ndarray | None]) -> list[Any]:
    """What iterators index rows of: the leaves, a ``None`` leaf as :class:`_NoneRows`."""
    return [_NoneRows() if leaf is None else leaf for leaf in leaves]


def check_dataset_leaves(structure: Element, what: str) -> None:
    """Check that the datasets of each dataset-holding leaf of a source's structure have
    compatible elements, where their specs are known without running anything (as tf.data
    refuses ``from_tensor_slices([range(2), from_tensors(1.0)])`` when it is built).

    Raises:
        StructureError: Two datasets of one leaf have elements of different structures or
            dtypes.

    Example:
        >>> import feedline as fl
        >>> check_dataset_leaves([fl.Dataset.range(2), fl.Dataset.from_tensors(1.0)], "f()")
        Traceback (most recent call last):
        ...
        feedline.core.errors.StructureError: f(): the datasets of leaf <element> have incompatible elements: dataset 1: leaf <element> has dtype int64 in one spec and float32 in the other
    """
    for path, leaf in flatten_with_paths(structure):
        if isinstance(leaf, list):  # a list given as the whole structure
            leaf = to_leaf_array(leaf)
        if not is_datasets_array(leaf):
            continue
        spec = None
        for i, dataset in enumerate(leaf.ravel().tolist()):
            try:
                spec = most_specific_common_spec(spec, dataset._element_spec())
            except StructureError as error:
                raise StructureError(f"{what}: the datasets of leaf {path} have incompatible "
                                     f"elements: dataset {i}: {error}") from None


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
            return _row(self._leaves[0], index)
        return pack_as(self._structure, [_row(leaf, index) for leaf in self._leaves])

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        rows = np.asarray(indices, dtype=np.intp)
        columns = [_rows(leaf, rows) for leaf in self._leaves]
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
            return _row(self._leaves[0], i)
        return pack_as(self._structure, [_row(leaf, i) for leaf in self._leaves])

    def _get_state(self) -> State:
        return {"position": self._position}

    def _set_state(self, state: State) -> None:
        self._position = state["position"]
