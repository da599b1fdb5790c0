"""``sparse_batch``: batch arrays of varying shape into one :class:`SparseValues` per batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError, InvalidArgumentError
from feedline.core.functions import annotate_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import Element, SparseTensorSpec, TensorSpec
from feedline.core.traits import BATCHING
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.formats.example.sparse import SparseValues
from feedline.transforms.batch import batched_cardinality, pull_batch, validate_batch_size


def as_row_shape(row_shape: Any) -> tuple[int | None, ...]:
    """``row_shape`` as dims, ``None`` (or -1) for 'the largest in the batch'.

    Raises:
        ValueError: A dimension below -1 (tf.data's "Dimension -2 must be >= 0").

    Example:
        >>> as_row_shape([5, None, -1])
        (5, None, None)
    """
    dims: list[int | None] = []
    for dim in np.atleast_1d(np.asarray(row_shape, dtype=object)).tolist() \
            if np.ndim(row_shape) else list(row_shape):
        if dim is None or int(dim) == -1:
            dims.append(None)
        elif int(dim) < 0:
            raise ValueError(f"sparse_batch(row_shape): Dimension {int(dim)} must be >= 0")
        else:
            dims.append(int(dim))
    return tuple(dims)


def sparse_rows(rows: Sequence[np.ndarray], row_shape: tuple[int | None, ...], stage: str,
                first_index: int) -> SparseValues:
    """One batch as tf.data's ``dense_to_sparse_batch`` makes it: every value of element
    ``i`` at ``[i, *its index]``, the dense shape ``[len(rows), *row_shape]`` with each
    ``None`` dim the largest in the batch.

    Raises:
        InvalidArgumentError: An element's rank differs from the row shape's.
        DataLossError: An element is larger than the row shape (tf.data's DataLossError).

    Example:
        >>> sparse_rows([np.array([7]), np.array([8, 9])], (3,), "sparse_batch", 0)
        SparseValues(indices=[[0, 0], [1, 0], [1, 1]], values=[7, 8, 9], dense_shape=[2, 3])
    """
    rank = len(row_shape)
    dense = [0 if dim is None else dim for dim in row_shape]
    indices, values = [], []
    for i, row in enumerate(rows):
        row = np.asarray(row)
        shown = ",".join(str(d) for d in row.shape)
        wanted = ",".join("-1" if d is None else str(d) for d in row_shape)
        if row.ndim != rank:
            raise InvalidArgumentError(
                f"{stage}: Input element had shape ([{shown}]) that is incompatible with the "
                f"row shape ([{wanted}]) (input element {first_index + i})")
        for axis, (size, dim) in enumerate(zip(row.shape, row_shape)):
            if dim is not None and size > dim:
                raise DataLossError(
                    f"{stage}: Input element had shape ([{shown}]) that is larger than the "
                    f"row shape ([{wanted}]) (input element {first_index + i})")
            if dim is None:
                dense[axis] = max(dense[axis], size)
        where = np.argwhere(np.ones(row.shape, dtype=bool)) if rank else \
            np.zeros((1, 0), np.int64)
        indices.append(np.concatenate([np.full((len(where), 1), i, np.int64),
                                       where.astype(np.int64)], axis=1))
        values.append(row.reshape(-1))
    return SparseValues(np.concatenate(indices), np.concatenate(values),
                        [len(rows), *dense])


@operation("sparse_batch")
class SparseBatchDataset(UnaryDataset):
    """The node of ``Dataset.sparse_batch(batch_size, row_shape)`` (tf.data's, formerly
    ``dense_to_sparse_batch``): each batch of ``batch_size`` elements (arrays of the rank of
    ``row_shape``, each dim at most its ``row_shape`` dim) is one :class:`SparseValues`.

    Example:
        >>> import feedline as fl, numpy as np
        >>> ds = fl.Dataset.range(1, 4).map(lambda n: np.full(n, n)).sparse_batch(2, [3])
        >>> [b.to_dense().tolist() for b in ds]
        [[[1, 0, 0], [2, 2, 0]], [[3, 3, 3]]]
    """

    TRAITS = BATCHING

    def __init__(self, input_dataset: Dataset, batch_size: int, row_shape: Any,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.batch_size = validate_batch_size(batch_size, "sparse_batch(batch_size)")
        self.row_shape = as_row_shape(row_shape)
        self.name = name or "sparse_batch"
        spec = input_dataset._element_spec()
        if isinstance(spec, TensorSpec) and len(spec.shape) != len(self.row_shape):
            raise ValueError(f"{self.name}: the input's elements have shape {spec.shape}, of "
                             f"another rank than row_shape {list(self.row_shape)}")
        if spec is not None and not isinstance(spec, TensorSpec):
            raise TypeError(f"{self.name}: the input's elements must be single arrays, got "
                            f"{spec}")

    def _element_spec(self) -> Element | None:
        """tf.data's ``SparseTensorSpec([None, *row_shape], the input's dtype)``: the batch
        dimension is unknown (the last batch may be smaller), as are ``row_shape``'s
        ``None`` dimensions (the largest in each batch)."""
        inner = self._inputs[0]._element_spec()
        if not isinstance(inner, TensorSpec):
            return None  # after a map: found from its spec (feedline.core.spec_inference)
        return SparseTensorSpec((None, *self.row_shape), inner.dtype)

    def cardinality(self) -> int:
        return batched_cardinality(self._inputs[0].cardinality(), self.batch_size, False)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return SparseBatchIterator(ctx, self._make_input_iterator(ctx), self.batch_size,
                                   self.row_shape, self.name)


class SparseBatchIterator(UnaryIterator):
    """Collects and converts each batch on the consumer's thread (its state: counts only)."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, batch_size: int,
                 row_shape: tuple[int | None, ...], name: str) -> None:
        super().__init__(ctx, upstream)
        self._batch_size = batch_size
        self._row_shape = row_shape
        self._name = name
        self._batches = 0
        self._elements = 0

    def __next__(self) -> Any:
        elements = pull_batch(self._upstream, self._batch_size, False)
        first_index = self._elements
        index = self._batches
        self._elements += len(elements)
        self._batches += 1
        try:
            return sparse_rows(elements, self._row_shape, self._name, first_index)
        except (InvalidArgumentError, DataLossError) as error:
            raise annotate_error(error, self._name, index)

    def _get_state(self) -> State:
        return self._with_input_state({"batches": self._batches, "elements": self._elements})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._batches = int(state["batches"])
        self._elements = int(state["elements"])
