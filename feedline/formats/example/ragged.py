"""``RaggedValues``: rows of different lengths (what ``VarLenFeature`` parses into)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from feedline.core.state_codec import decode, encode, register_state_type
from feedline.core.structure import register_leaf_type


class RaggedValues:
    """Rows of different lengths: flat ``values`` split by one or more levels of row splits.

    Like ``tf.RaggedTensor``: row ``i`` of the outer level spans
    ``row_splits[i]:row_splits[i + 1]`` of the next level (or of ``values`` for the innermost).
    ``values`` is always the flat array (``tf.RaggedTensor.flat_values``).

    Args:
        values: 1-D array of all values, row after row.
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
            if level.ndim != 1 or len(level) < 1 or level[0] != 0 or level[-1] != inner_size \
                    or np.any(np.diff(level) < 0):
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

    def to_padded(self, pad_value: Any = None) -> np.ndarray:
        """A dense array padded to the longest row at every level.

        Args:
            pad_value: Fill value; default 0 (numbers) or ``b""`` (strings).

        Returns:
            An array of shape ``[nrows, longest row, ...]`` (one dimension per level).
        """
        if pad_value is None:
            pad_value = b"" if self.values.dtype == object else 0
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
        out = np.full((len(self), *dims), pad_value, dtype=self.values.dtype)
        out[(index, *coords)] = self.values
        return out

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


# The name it had before feedline/formats/example.py became a package: states, pickles and
# fingerprints name the class by it.
RaggedValues.__module__ = "feedline.formats.example"
register_state_type(RaggedValues)
register_leaf_type(RaggedValues)  # a function's result may hold it, as parse_example's does

# Doctest finds the class's own docstring through the package; its methods' through here.
__test__ = {"RaggedValues.from_row_lengths": RaggedValues.from_row_lengths}
