"""``RaggedValues``: rows of different lengths (what ``VarLenFeature`` parses into)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from feedline.core.state_codec import decode, encode, register_state_type
from feedline.core.structure import RaggedTensorSpec, register_leaf_type

if TYPE_CHECKING:
    from feedline.formats.example.sparse import SparseValues


class RaggedValues:
    """Rows of different lengths: flat ``values`` split by one or more levels of row splits.

    Like ``tf.RaggedTensor``: row ``i`` of the outer level spans
    ``row_splits[i]:row_splits[i + 1]`` of the next level (or of ``values`` for the innermost).
    ``values`` is always the flat array (``tf.RaggedTensor.flat_values``).

    Args:
        values: Array of all values, row after row, along its first dimension (further
            dimensions are uniform: ``tf.RaggedTensor``'s ``flat_values`` of rank > 1).
        row_splits: One int64 array of ``nrows + 1`` split points, or a sequence of them, outer
            level first.

    Instances may be held in iterator states (a shuffle buffer of parsed batches): they are
    stored as their flat values and row splits.

    Example:
        >>> import numpy as np
        >>> tokens = RaggedValues(np.array([1, 2, 3]), np.array([0, 0, 2, 3]))
        >>> tokens.to_list()
        [[], [1, 2], [3]]
        >>> tokens.to_padded(0)
        array([[0, 0],
               [1, 2],
               [3, 0]])
    """

    __slots__ = ("nested_row_splits", "values")

    def __init__(self, values: Any, row_splits: Any) -> None:
        self.values = np.asarray(values)
        if isinstance(row_splits, np.ndarray) or (
                isinstance(row_splits, list | tuple) and row_splits
                and isinstance(row_splits[0], int | np.integer)):
            row_splits = [row_splits]
        nested = tuple(np.asarray(s, dtype=np.int64) for s in row_splits)
        if not nested:
            raise ValueError("RaggedValues needs at least one level of row_splits")
        inner_size = len(self.values)
        for level in reversed(nested):
            # In range first: steps near 2**63 wrap, and would read as never decreasing.
            if level.ndim != 1 or len(level) < 1 or level[0] != 0 or level[-1] != inner_size \
                    or level.min() < 0 or level.max() > inner_size or np.any(np.diff(level) < 0):
                raise ValueError(
                    "row_splits must start at 0, never decrease and end at the size of the "
                    f"level below ({inner_size}); found {level.tolist()}")
            inner_size = len(level) - 1
        self.nested_row_splits = nested

    @classmethod
    def from_row_lengths(cls, values: Any, row_lengths: Any) -> RaggedValues:
        """Build one ragged level from the length of each row.

        Example:
            >>> RaggedValues.from_row_lengths([5, 6, 7], [1, 2]).to_list()
            [[5], [6, 7]]
        """
        lengths = np.asarray(row_lengths, dtype=np.int64)
        return cls(values, np.concatenate([[0], np.cumsum(lengths)]))

    @property
    def row_splits(self) -> np.ndarray:
        """Split points of the outer level (``nrows + 1`` values)."""
        return self.nested_row_splits[0]

    @property
    def flat_values(self) -> np.ndarray:
        """Same as :attr:`values` (the name ``tf.RaggedTensor`` uses)."""
        return self.values

    @property
    def ragged_rank(self) -> int:
        """Number of ragged levels."""
        return len(self.nested_row_splits)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def _leaf_spec(self) -> RaggedTensorSpec:
        """Its spec as an element's leaf: ``(rows, None per ragged level, *inner dims)``.

        Example:
            >>> RaggedValues(np.array([1, 2, 3]), np.array([0, 0, 2, 3]))._leaf_spec()
            RaggedTensorSpec(shape=(3, None), dtype=int64, ragged_rank=1)
        """
        shape = (len(self.row_splits) - 1, *[None] * self.ragged_rank, *self.values.shape[1:])
        return RaggedTensorSpec(shape, self.values.dtype, self.ragged_rank)

    def row_lengths(self) -> np.ndarray:
        """Length of each outer row."""
        return np.diff(self.row_splits)

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def __getitem__(self, index: int) -> np.ndarray | RaggedValues:
        n = len(self)
        if not isinstance(index, int | np.integer):
            raise TypeError(f"RaggedValues rows are indexed by an integer; found {index!r}")
        if not -n <= index < n:
            raise IndexError(f"row {index} out of range for {n} rows")
        index = int(index) % n
        start, stop = self.row_splits[index], self.row_splits[index + 1]
        if self.ragged_rank == 1:
            return self.values[start:stop]
        inner = self.nested_row_splits[1:]
        splits = [inner[0][start:stop + 1]]
        for level in inner[1:]:
            splits.append(level[splits[-1][0]:splits[-1][-1] + 1])
        lo = splits[-1][0]
        values = self.values[lo:splits[-1][-1]]
        return RaggedValues(values, [s - s[0] for s in splits])

    def __iter__(self) -> Iterator[np.ndarray | RaggedValues]:
        return (self[i] for i in range(len(self)))

    def to_list(self) -> list[Any]:
        """Nested Python lists of the values (``bytes`` for strings)."""
        items: list[Any] = self.values.tolist()
        for splits in reversed(self.nested_row_splits):
            items = [items[a:b] for a, b in zip(splits[:-1].tolist(), splits[1:].tolist())]
        return items

    def _coordinates(self) -> tuple[list[np.ndarray], list[int]]:
        """Where each value (row of ``values``) sits in the padded array: one index array per
        ragged dimension, outer first, and the longest row of each of those dimensions."""
        # Position of every value along each dimension, found level by level from the inside.
        index = np.arange(len(self.values), dtype=np.int64)
        coords: list[np.ndarray] = []
        dims: list[int] = []
        for splits in reversed(self.nested_row_splits):
            lengths = np.diff(splits)
            rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
            within = np.arange(splits[-1], dtype=np.int64) - np.repeat(splits[:-1], lengths)
            coords.insert(0, within[index])
            dims.insert(0, int(lengths.max()) if len(lengths) else 0)
            index = rows[index]
        return [index, *coords], [len(self), *dims]

    def to_padded(self, pad_value: Any = None) -> np.ndarray:
        """A dense array padded to the longest row at every level.

        Args:
            pad_value: Fill value; default 0 (numbers) or ``b""`` (strings).

        Returns:
            An array of shape ``[nrows, longest row, ..., *values.shape[1:]]`` (one dimension
            per level, then the values' own uniform dimensions).
        """
        if pad_value is None:
            pad_value = b"" if self.values.dtype == object else 0
        coords, dims = self._coordinates()
        out = np.full((*dims, *self.values.shape[1:]), pad_value, dtype=self.values.dtype)
        out[tuple(coords)] = self.values
        return out

    def to_sparse(self) -> SparseValues:
        """The same values as :class:`SparseValues` (``tf.RaggedTensor.to_sparse``): one index
        row per value, in row-major order, and the padded array's shape as ``dense_shape``.

        Example:
            >>> sparse = RaggedValues([7, 8, 9], [0, 2, 2, 3]).to_sparse()
            >>> sparse.indices.tolist(), sparse.values.tolist(), sparse.dense_shape.tolist()
            ([[0, 0], [0, 1], [2, 0]], [7, 8, 9], [3, 2])
        """
        from feedline.formats.example.sparse import SparseValues

        coords, dims = self._coordinates()
        base = np.stack(coords, axis=1) if coords[0].size else np.zeros((0, len(coords)),
                                                                         np.int64)
        inner_shape = self.values.shape[1:]
        if not inner_shape:
            return SparseValues(base, self.values, dims)
        # Uniform inner dimensions: every value row spreads over all their positions.
        inner = np.indices(inner_shape).reshape(len(inner_shape), -1).T
        indices = np.concatenate([np.repeat(base, len(inner), axis=0),
                                  np.tile(inner, (len(base), 1))], axis=1)
        return SparseValues(indices, self.values.reshape(-1), [*dims, *inner_shape])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RaggedValues):
            return NotImplemented
        return (self.ragged_rank == other.ragged_rank
                and np.array_equal(self.values, other.values)
                and all(np.array_equal(a, b) for a, b in
                        zip(self.nested_row_splits, other.nested_row_splits)))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RaggedValues({self.to_list()!r}, dtype={self.values.dtype})"

    def __feedline_encode__(self) -> Any:
        """The state form: values and every level of row splits, as encoded arrays."""
        return {"values": encode(self.values),
                "splits": [encode(splits) for splits in self.nested_row_splits]}

    @classmethod
    def __feedline_decode__(cls, value: Any) -> RaggedValues:
        """Inverse of :meth:`__feedline_encode__` (the splits are checked again)."""
        values = decode(value["values"])
        if not isinstance(values, np.ndarray):
            raise TypeError(f"RaggedValues values must be an array; found {type(values)}")
        return cls(values, [decode(splits) for splits in value["splits"]])


def stack_rows(rows: list[Any], what: str = "rows", ragged_rank: int = 0) -> RaggedValues:
    """A ragged level over ``rows``: row ``i`` of the result is ``rows[i]``.

    Rows are arrays of rank >= 1 (their first dimension becomes ragged, and so do the next
    ``ragged_rank`` ones; further dimensions must agree: ``tf.RaggedTensor.from_tensor(row,
    ragged_rank)`` batched) or :class:`RaggedValues` of one ragged rank (the result has one
    level more), as batching ``tf.RaggedTensor`` rows does.

    Args:
        rows: At least one row.
        what: Names the rows in errors (``"leaf [1] of the batch"``).
        ragged_rank: For array rows: how many dimensions after the first are ragged too.

    Raises:
        ValueError: The rows disagree in kind, ragged rank or uniform dimensions.

    Example:
        >>> stack_rows([np.array([1, 2]), np.array([], np.int64), np.array([3])]).to_list()
        [[1, 2], [], [3]]
        >>> nested = stack_rows([RaggedValues([1, 2], [0, 2]), RaggedValues([3], [0, 0, 1])])
        >>> nested.to_list(), nested.ragged_rank
        ([[[1, 2]], [[], [3]]], 2)
        >>> grids = stack_rows([np.zeros((1, 2)), np.ones((2, 1))], ragged_rank=1)
        >>> grids.to_list(), [s.tolist() for s in grids.nested_row_splits]
        ([[[0.0, 0.0]], [[1.0], [1.0]]], [[0, 1, 3], [0, 2, 3, 4]])
    """
    first = rows[0]
    if isinstance(first, RaggedValues):
        for i, row in enumerate(rows):
            if not isinstance(row, RaggedValues) or row.ragged_rank != first.ragged_rank \
                    or row.values.shape[1:] != first.values.shape[1:]:
                found = (f"ragged rank {row.ragged_rank}, values {row.values.shape[1:]}"
                         if isinstance(row, RaggedValues) else type(row).__name__)
                raise ValueError(
                    f"{what}: row {i} is {found}, but row 0 has ragged rank "
                    f"{first.ragged_rank}, values {first.values.shape[1:]}")
        outer = _splits_of_lengths([len(row) for row in rows])
        levels = [outer]
        for level in range(first.ragged_rank):
            parts = [row.nested_row_splits[level] for row in rows]
            levels.append(_joined_splits(parts))
        return RaggedValues(_concatenated([row.values for row in rows], what), levels)
    ragged = ragged_rank + 1  # dimensions of each row that may differ between rows
    arrays = []
    for i, row in enumerate(rows):
        array = None if isinstance(row, RaggedValues) else np.asarray(row)
        if array is None or array.ndim < ragged or (
                arrays and array.shape[ragged:] != arrays[0].shape[ragged:]):
            found = "ragged values" if array is None else f"shape {array.shape}"
            first = f"shape {arrays[0].shape}" if arrays else f"rank >= {ragged}"
            raise ValueError(f"{what}: row {i} has {found}, but rows need {first} (rows may "
                             f"differ in their first {ragged} dimensions only)")
        arrays.append(array)
    levels = [_splits_of_lengths([len(array) for array in arrays])]
    for dim in range(1, ragged):
        # Within a row, dimension ``dim`` is uniform: one length per row of the level above.
        levels.append(_splits_of_lengths([length for array in arrays for length in
                                          [array.shape[dim]] * int(np.prod(array.shape[:dim]))]))
    flat = [array.reshape(int(np.prod(array.shape[:ragged])), *array.shape[ragged:])
            for array in arrays]
    return RaggedValues(_concatenated(flat, what), levels)


def _splits_of_lengths(lengths: list[int]) -> np.ndarray:
    splits = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=splits[1:])
    return splits


def _joined_splits(parts: list[np.ndarray]) -> np.ndarray:
    """Row splits of several consecutive blocks as the splits of their concatenation."""
    ends = np.cumsum([int(part[-1]) for part in parts])
    offsets = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return np.concatenate([[0]] + [part[1:] + offset for part, offset in zip(parts, offsets)]
                          ).astype(np.int64)


def _concatenated(arrays: list[np.ndarray], what: str) -> np.ndarray:
    if any(array.dtype == object for array in arrays):
        out = np.empty((sum(len(a) for a in arrays), *arrays[0].shape[1:]), dtype=object)
        start = 0
        for array in arrays:
            out[start:start + len(array)] = array
            start += len(array)
        return out
    try:
        return np.concatenate(arrays)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what}: cannot join the rows' values: {error}") from None


# The name it had before feedline/formats/example.py became a package: states, pickles and
# fingerprints name the class by it.
RaggedValues.__module__ = "feedline.formats.example"
register_state_type(RaggedValues)
register_leaf_type(RaggedValues)  # a function's result may hold it, as parse_example's does

# Doctest finds the class's own docstring through the package; its methods' through here.
__test__ = {"RaggedValues.from_row_lengths": RaggedValues.from_row_lengths,
            "RaggedValues.to_sparse": RaggedValues.to_sparse}
