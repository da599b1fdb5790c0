"""``SparseValues``: a sparse array as indices, values and a dense shape (``tf.SparseTensor``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.state_codec import decode, encode, register_state_type
from feedline.core.structure import SparseTensorSpec, register_leaf_type


class SparseValues:
    """A sparse array: ``values[k]`` sits at ``indices[k]`` of an array of ``dense_shape``.

    The layout of ``tf.SparseTensor``, which is what ``tf.io`` parses a ``SparseFeature``
    into (and a ``VarLenFeature``, with ``var_len_as_sparse=True`` in feedline).

    Args:
        indices: int64 array ``[n, rank]``, one row per value.
        values: 1-D array of the ``n`` values.
        dense_shape: int64 array ``[rank]``; every index lies within it.

    Raises:
        ValueError: The three do not fit together or an index is out of the shape.

    Example:
        >>> import numpy as np
        >>> sparse = SparseValues([[0, 1], [2, 0]], np.array([5, 6]), [3, 2])
        >>> sparse.to_dense().tolist()
        [[0, 5], [0, 0], [6, 0]]
    """

    __slots__ = ("dense_shape", "indices", "values")

    def __init__(self, indices: Any, values: Any, dense_shape: Any) -> None:
        shape = np.asarray(dense_shape, dtype=np.int64).reshape(-1)
        self.values = np.asarray(values)
        index_array = np.asarray(indices, dtype=np.int64)
        if index_array.size == 0:
            index_array = index_array.reshape(0, len(shape))
        if self.values.ndim != 1:
            raise ValueError(f"SparseValues values must be 1-D; found shape {self.values.shape}")
        if index_array.shape != (len(self.values), len(shape)):
            raise ValueError(
                f"SparseValues indices must have shape [{len(self.values)}, {len(shape)}] (one "
                f"row per value, one column per dimension); found {index_array.shape}")
        if np.any(shape < 0):
            raise ValueError(f"SparseValues dense_shape must be >= 0; found {shape.tolist()}")
        outside = np.flatnonzero(np.any((index_array < 0) | (index_array >= shape), axis=1))
        if len(outside):
            k = int(outside[0])
            raise ValueError(f"SparseValues index {index_array[k].tolist()} (value {k}) is "
                             f"outside the dense shape {shape.tolist()}")
        self.indices = index_array
        self.dense_shape = shape

    @property
    def shape(self) -> tuple[int, ...]:
        """The dense shape as a tuple."""
        return tuple(int(d) for d in self.dense_shape)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return len(self.dense_shape)

    def _leaf_spec(self) -> SparseTensorSpec:
        """Its spec as an element's leaf: the dense shape and the values' dtype.

        Example:
            >>> SparseValues([[0, 1]], np.array([5.0]), [3, 2])._leaf_spec()
            SparseTensorSpec(shape=(3, 2), dtype=float64)
        """
        return SparseTensorSpec(self.shape, self.values.dtype)

    def rows(self, key: int | slice) -> SparseValues:
        """Row ``key`` (one dimension less) or rows ``key`` (a slice) of the leading dimension,
        as ``unbatch`` of a batched ``tf.SparseTensor`` gives them.

        (Not ``__getitem__``: NumPy would take a sparse array for a sequence of its rows.)

        Example:
            >>> batch = SparseValues([[0, 0], [0, 2], [1, 1]], np.array([1, 2, 3]), [2, 3])
            >>> batch.rows(1), batch.rows(slice(0, 1)).shape
            (SparseValues(indices=[[1]], values=[3], dense_shape=[3]), (1, 3))
        """
        if not self.ndim:
            raise TypeError("rows of a 0-d SparseValues")
        rows = int(self.dense_shape[0])
        first = self.indices[:, 0]
        if isinstance(key, slice):
            start, stop, step = key.indices(rows)
            if step != 1:
                raise ValueError("SparseValues rows: only contiguous slices (step 1)")
            keep = (first >= start) & (first < max(start, stop))
            indices = self.indices[keep].copy()
            indices[:, 0] -= start
            return SparseValues(indices, self.values[keep],
                                [max(0, stop - start), *self.dense_shape[1:]])
        row = int(key) + rows if int(key) < 0 else int(key)
        if not 0 <= row < rows:
            raise IndexError(f"SparseValues row {key} out of {rows}")
        keep = first == row
        return SparseValues(self.indices[keep, 1:], self.values[keep], self.dense_shape[1:])

    @classmethod
    def stack(cls, values: list[SparseValues]) -> SparseValues:
        """A batch of sparse arrays of one rank (``batch`` of ``tf.SparseTensor``s): indices
        prefixed with the element's place, a dense shape of the largest of each dimension.

        Raises:
            ValueError: The ranks differ.

        Example:
            >>> a = SparseValues([[0], [2]], np.array([1, 2]), [3])
            >>> b = SparseValues([[0]], np.array([4]), [1])
            >>> SparseValues.stack([a, b])
            SparseValues(indices=[[0, 0], [0, 2], [1, 0]], values=[1, 2, 4], dense_shape=[2, 3])
        """
        rank = values[0].ndim
        for i, value in enumerate(values):
            if value.ndim != rank:
                raise ValueError(f"cannot batch sparse values of rank {value.ndim} (element "
                                 f"{i}) with rank {rank} (element 0)")
        shape = np.max([v.dense_shape for v in values], axis=0) if rank else \
            np.zeros(0, np.int64)
        indices = np.concatenate([
            np.concatenate([np.full((len(v.values), 1), i, np.int64), v.indices], axis=1)
            for i, v in enumerate(values)]) if values else np.zeros((0, rank + 1), np.int64)
        return cls(indices, np.concatenate([v.values for v in values]),
                   [len(values), *shape.tolist()])

    def to_dense(self, default_value: Any = None) -> np.ndarray:
        """The dense array (``tf.sparse.to_dense``): ``default_value`` where no value is.

        Args:
            default_value: Fill value; default 0 (numbers) or ``b""`` (strings).

        Example:
            >>> SparseValues([[1]], np.array([b"x"], dtype=object), [3]).to_dense(b"-").tolist()
            [b'-', b'x', b'-']
        """
        if default_value is None:
            default_value = b"" if self.values.dtype == object else 0
        out = np.full(self.shape, default_value, dtype=self.values.dtype)
        out[tuple(self.indices.T)] = self.values
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SparseValues):
            return NotImplemented
        return (np.array_equal(self.dense_shape, other.dense_shape)
                and np.array_equal(self.indices, other.indices)
                and np.array_equal(self.values, other.values))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"SparseValues(indices={self.indices.tolist()!r}, "
                f"values={self.values.tolist()!r}, dense_shape={self.dense_shape.tolist()!r})")

    def __feedline_encode__(self) -> Any:
        """The state form: the three arrays, encoded."""
        return {"indices": encode(self.indices), "values": encode(self.values),
                "dense_shape": encode(self.dense_shape)}

    @classmethod
    def __feedline_decode__(cls, value: Any) -> SparseValues:
        """Inverse of :meth:`__feedline_encode__` (checked again)."""
        return cls(decode(value["indices"]), decode(value["values"]), decode(value["dense_shape"]))


class SparseRows:
    """A batched :class:`SparseValues` seen as rows (``rows[i]``, ``rows[i:]``, ``shape``),
    for the stages that split a batch (``unbatch``), never handed to NumPy.

    Example:
        >>> rows = SparseRows(SparseValues([[0, 1], [1, 0]], np.array([7, 8]), [2, 2]))
        >>> rows.shape[0], rows[1].values.tolist()
        (2, [8])
    """

    __slots__ = ("sparse",)

    def __init__(self, sparse: SparseValues) -> None:
        self.sparse = sparse

    @property
    def shape(self) -> tuple[int, ...]:
        return self.sparse.shape

    @property
    def ndim(self) -> int:
        return self.sparse.ndim

    def __getitem__(self, key: int | slice) -> SparseValues:
        return self.sparse.rows(key)


# Named by the package it is imported from, as RaggedValues is (states and fingerprints).
SparseValues.__module__ = "feedline.formats.example"
register_state_type(SparseValues)
register_leaf_type(SparseValues)  # parse_example's results hold it, inside map functions too

__test__ = {"SparseValues.to_dense": SparseValues.to_dense,
            "SparseValues.rows": SparseValues.rows,
            "SparseValues.stack": SparseValues.stack}
