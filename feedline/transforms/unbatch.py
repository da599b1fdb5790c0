"""``unbatch``: split every element into the rows of its leading dimension.

Random access, as in tf.data: when the input has random access and its element spec gives
every leaf the same, statically known leading dimension ``b`` (``batch(b,
drop_remainder=True)``, ``from_tensor_slices`` of a 2-D array), element ``i`` is row
``i % b`` of input element ``i // b``. Without a static batch size there is none (tf.data:
"unknown cardinality"): where element ``i`` lies would take reading every batch before it.
An input element whose actual size differs from its spec's is a ``StructureError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError, StructureError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import DerivedReader, RandomAccessReader
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import (
    DatasetSpec,
    Element,
    NoneTensorSpec,
    flatten,
    flatten_with_paths,
    pack_as,
    unbatched_spec,
)
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.formats.example.ragged import RaggedValues
from feedline.formats.example.sparse import SparseRows, SparseValues


class RaggedRows:
    """A :class:`RaggedValues` batch seen as rows (``rows[i]``, ``rows[i:]``, ``shape``) for
    the stages that split a batch: row ``i`` is an array, or :class:`RaggedValues` where the
    batch has more than one ragged level (tf.data's rows of a ``RaggedTensor``).

    Example:
        >>> rows = RaggedRows(RaggedValues(np.array([1, 2, 3]), np.array([0, 0, 2, 3])))
        >>> rows.shape, rows[1].tolist(), rows[1:].to_list()
        ((3,), [1, 2], [[1, 2], [3]])
    """

    __slots__ = ("ragged",)

    def __init__(self, ragged: RaggedValues) -> None:
        self.ragged = ragged

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.ragged),)

    @property
    def ndim(self) -> int:
        return 1

    def __getitem__(self, key: int | slice) -> Any:
        if not isinstance(key, slice):
            return self.ragged[key]
        start, stop, step = key.indices(len(self.ragged))
        if step != 1:
            raise ValueError("RaggedRows: only contiguous rows can be sliced")
        # Each level keeps the split points of the rows kept, shifted to start at 0.
        levels = [self.ragged.row_splits[start:max(start, stop) + 1]]
        for level in self.ragged.nested_row_splits[1:]:
            levels.append(level[levels[-1][0]:levels[-1][-1] + 1])
        values = self.ragged.values[levels[-1][0]:levels[-1][-1]]
        return RaggedValues(values, [level - level[0] for level in levels])


def check_static_batched(spec: Element | None, stage: str) -> None:
    """Raise ``ValueError`` if a statically known spec has a scalar leaf (nothing to split).

    ``None`` components are not split (they stay ``None``, as in tf.data); a single dataset
    (what ``window`` yields) cannot be, as tf.data says: "Slicing dataset elements is not
    supported for rank 0".
    """
    if spec is None:
        return
    for path, leaf in flatten_with_paths(spec):
        if isinstance(leaf, NoneTensorSpec) or leaf.shape:
            continue
        if isinstance(leaf, DatasetSpec):
            raise ValueError(f"{stage}: Slicing dataset elements is not supported for rank 0: "
                             f"the input's leaf {path} is one dataset ({leaf}), not a batch "
                             "of datasets")
        raise ValueError(f"{stage}: the input's leaf {path} is a scalar ({leaf}); every "
                         "leaf needs a leading (batch) dimension")


def split_leaves(element: Element, stage: str,
                 index: int) -> tuple[list[np.ndarray | None], int]:
    """The leaves of a batched element and their common number of rows.

    ``None`` leaves are returned as ``None``: every row has ``None`` there. An element of
    ``None`` leaves only has no rows to give.

    Raises:
        StructureError: A leaf has no leading dimension, or leaves disagree on its size.

    Example:
        >>> leaves, rows = split_leaves((np.arange(3), np.zeros((3, 2))), "unbatch", 0)
        >>> rows
        3
    """
    paths_and_leaves = flatten_with_paths(element)
    leaves: list[np.ndarray | None] = []
    rows = -1
    first_path = ""
    for path, leaf in paths_and_leaves:
        if leaf is None:
            leaves.append(None)
            continue
        if isinstance(leaf, SparseValues) and leaf.ndim:
            leaf = SparseRows(leaf)  # tf.data unbatches a SparseTensor row by row
        elif isinstance(leaf, RaggedValues):
            leaf = RaggedRows(leaf)  # and a RaggedTensor too (ragged_batch's batches)
        elif not isinstance(leaf, np.ndarray) or leaf.ndim == 0:
            what = ("one dataset (Slicing dataset elements is not supported for rank 0)"
                    if isinstance(leaf, Dataset) else f"a scalar ({type(leaf).__name__})")
            raise StructureError(
                f"{stage}: leaf {path} of input element {index} is {what}; every leaf needs "
                "a leading (batch) dimension")
        if rows == -1:
            rows, first_path = leaf.shape[0], path
        elif leaf.shape[0] != rows:
            raise StructureError(
                f"{stage}: leaves of input element {index} have different batch sizes: "
                f"{first_path} has {rows} rows, {path} has {leaf.shape[0]}")
        leaves.append(leaf)
    if rows == -1:
        raise StructureError(f"{stage}: input element {index} has only None components: "
                             "there is no batch dimension to split")
    return leaves, rows


def static_batch_size(spec: Element | None) -> int | None:
    """The leading dimension shared by every leaf of a spec, if it is known statically
    (``None`` components have none and do not count)."""
    if spec is None:
        return None
    dims = {leaf.shape[0] if leaf.shape else None for leaf in flatten(spec)
            if not isinstance(leaf, NoneTensorSpec)}
    if len(dims) != 1:
        return None
    return dims.pop()


@operation("unbatch")
class UnbatchDataset(UnaryDataset):
    """The node of ``Dataset.unbatch``.

    Example:
        >>> import feedline as fl
        >>> ds = UnbatchDataset(fl.Dataset.from_tensors(([1, 2], [b"a", b"b"])))
        >>> [(int(a), b) for a, b in ds]
        [(1, b'a'), (2, b'b')]
    """

    TRAITS = replace(INDEPENDENT, random_access_from_input=True)

    def __init__(self, input_dataset: Dataset, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.name = name or "unbatch"
        check_static_batched(input_dataset._element_spec(), self.name)

    def _element_spec(self) -> Element | None:
        inner = self._inputs[0]._element_spec()
        return None if inner is None else unbatched_spec(inner)

    def cardinality(self) -> int:
        # tf.data's rule: known only when every leaf's batch dimension is known statically.
        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        batch = static_batch_size(self._inputs[0]._element_spec())
        return UNKNOWN if batch is None else n * batch

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        spec = self._inputs[0]._element_spec()
        # An input known to hold no datasets is never asked for its position before a batch.
        holds_datasets = spec is None or any(isinstance(leaf, DatasetSpec)
                                             for leaf in flatten(spec))
        return UnbatchIterator(ctx, self._make_input_iterator(ctx), self.name, holds_datasets)

    def _offers_random_access(self) -> bool:
        return (self._inputs[0]._offers_random_access()
                and static_batch_size(self._inputs[0]._element_spec()) is not None)

    def _no_random_access_reason(self) -> str | None:
        """Why this unbatch has no random access while its input has (for error messages)."""
        if not self._inputs[0]._offers_random_access():
            return None
        return ("its input's batch size is not known statically (its element spec has no "
                "common, fixed leading dimension: batch with drop_remainder=True), so where "
                "element i lies would take reading every batch before it")

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        batch = static_batch_size(self._inputs[0]._element_spec())
        assert batch is not None  # _offers_random_access said so
        return UnbatchReader(self._inputs[0]._random_reader(ctx), batch, self.name)


def row_of(element: Element, leaves: list[np.ndarray | None], row: int) -> Element:
    """Row ``row`` of a batched element whose leaves :func:`split_leaves` gave.

    Example:
        >>> element = {"a": np.arange(3), "b": None}
        >>> leaves, _ = split_leaves(element, "unbatch", 0)
        >>> row_of(element, leaves, 2)
        {'a': np.int64(2), 'b': None}
    """
    if not isinstance(element, tuple | dict):
        return leaves[0][row]  # type: ignore[index]
    return pack_as(element, [None if leaf is None else leaf[row] for leaf in leaves])


class UnbatchReader(DerivedReader):
    """Element ``i`` is row ``i % batch`` of input element ``i // batch``.

    Example:
        >>> import feedline as fl
        >>> from feedline.core.random_access import open_reader
        >>> batches = fl.Dataset.range(10).batch(4, drop_remainder=True)
        >>> reader = UnbatchReader(open_reader(batches), 4, "unbatch")
        >>> len(reader), int(reader.get(5)), [int(x) for x in reader.get_many([7, 0, 6])]
        (8, 5, [7, 0, 6])
    """

    def __init__(self, input_reader: RandomAccessReader, batch: int, name: str) -> None:
        super().__init__(input_reader)
        self._batch, self._name = batch, name
        self._length = len(input_reader) * batch

    def __len__(self) -> int:
        return self._length

    def _rows(self, element: Element, index: int) -> list[np.ndarray | None]:
        leaves, rows = split_leaves(element, self._name, index)
        if rows != self._batch:
            raise StructureError(
                f"{self._name}: input element {index} has {rows} rows, but its element spec "
                f"says every element has {self._batch} (random access relies on it)")
        return leaves

    def get(self, index: int) -> Any:
        position, row = divmod(index, self._batch)
        element = self.input.get(position)
        return row_of(element, self._rows(element, position), row)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        batch = self._batch
        wanted = sorted({int(i) // batch for i in indices})
        held = {}
        for position, element in zip(wanted, self.input.get_many(wanted)):
            held[position] = (element, self._rows(element, position))
        out = []
        for i in indices:
            position, row = divmod(int(i), batch)
            element, leaves = held[position]
            out.append(row_of(element, leaves, row))
        return out


class UnbatchIterator(UnaryIterator):
    """Hands out the rows of one input element at a time.

    The state stores the rows still to come. A batch of datasets (other than ``window``'s)
    cannot be stored: the input's position before that batch is kept instead, and a restore
    reads it again from there, as ``flat_map`` does. Only an input whose spec may hold
    datasets is asked for those positions, and plain iteration never needs one: an input that
    cannot give its position leaves an error that only a checkpoint raises.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, name: str,
                 holds_datasets: bool = False) -> None:
        super().__init__(ctx, upstream)
        self._name = name
        self._index = 0  # input elements taken
        self._structure: Element = None
        self._leaves: list[np.ndarray | None] = []
        self._single = True
        self._has_none = False
        self._row = 0
        self._rows = 0
        # Whether held batches are re-read from the input's earlier position on restore;
        # None until the first batch says (only for inputs that may hold datasets).
        self._reread: bool | None = None if holds_datasets else False
        # The input's state before the held batch (or why it could not give one).
        self._before: State | CheckpointError | None = None

    def _hold(self, element: Element, index: int) -> None:
        leaves, rows = split_leaves(element, self._name, index)
        self._structure = element
        self._single = not isinstance(element, tuple | dict)
        self._has_none = any(leaf is None for leaf in leaves)
        self._leaves, self._rows, self._row = leaves, rows, 0

    def _input_state_before(self) -> State | CheckpointError | None:
        if self._reread is False:
            return None
        try:
            return self._upstream.state_dict()
        except CheckpointError as error:
            return error

    def __next__(self) -> Any:
        while self._row >= self._rows:
            before = self._input_state_before()
            element = next(self._upstream)
            index = self._index
            self._index += 1
            self._hold(element, index)
            if self._reread is None:
                self._reread = not _storable(element)
            self._before = before if self._reread else None
        row = self._row
        self._row += 1
        if self._single:
            return self._leaves[0][row]
        if self._has_none:
            return pack_as(self._structure,
                           [None if leaf is None else leaf[row] for leaf in self._leaves])
        return pack_as(self._structure, [leaf[row] for leaf in self._leaves])

    def _get_state(self) -> State:
        # Only the rows still to come are stored; a list keeps one state shape at every step:
        # [], [rows], or [input state before the batch, next row, "reread"].
        held: list[Any] = []
        if self._row < self._rows:
            row = self._row
            if isinstance(self._before, CheckpointError):
                raise CheckpointError(
                    f"{self._name}: cannot checkpoint while rows of input element "
                    f"{self._index - 1} are held: they hold datasets, which a state cannot "
                    "store, and the input could not give its position before that element "
                    f"either ({self._before})") from self._before
            if self._before is not None:
                held = [self._before, row, "reread"]
            else:
                rest = pack_as(self._structure, [None if leaf is None else leaf[row:]
                                                 for leaf in self._leaves])
                try:
                    held = [encode(rest)]
                except CheckpointError as error:
                    raise CheckpointError(
                        f"{self._name}: cannot checkpoint while rows of input element "
                        f"{self._index - 1} are held: {error}") from error
        return self._with_input_state({"index": self._index, "held": held})

    def _set_state(self, state: State) -> None:
        self._index = state["index"]
        self._leaves, self._rows, self._row = [], 0, 0
        self._before = None
        held = state["held"]
        if len(held) == 3:  # the batch is read again from the input's earlier position
            before, row, _ = held
            self._upstream.load_state_dict(before)
            self._hold(next(self._upstream), self._index - 1)
            self._row = int(row)
            self._reread, self._before = True, before
            return
        self._load_input_state(state)
        if held:
            self._hold(decode(held[0]), self._index - 1)


def _storable(element: Any) -> bool:
    """Whether ``element`` can be stored in a state (datasets other than ``window``'s cannot).

    Only leaves that may hold datasets are tried: encoding a large batch of numbers to learn
    that it can be stored would cost as much as a state.
    """
    leaves = [leaf for leaf in flatten(element)
              if isinstance(leaf, Dataset) or (isinstance(leaf, np.ndarray)
                                               and leaf.dtype == object)]
    try:
        encode(leaves)
    except CheckpointError:
        return False
    return True
