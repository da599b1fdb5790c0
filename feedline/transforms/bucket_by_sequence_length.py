"""``bucket_by_sequence_length``: batch elements of similar length together, padded per bucket.

As tf.data builds it: a ``group_by_window`` whose key is the bucket of the element's length
(bucket ``i`` holds lengths in ``[bucket_boundaries[i - 1], bucket_boundaries[i])``, the first
from -2**31, the last up to 2**31 - 1), whose window size is the bucket's batch size and
whose reduction is one ``padded_batch`` (or ``batch`` with ``no_padding``) of the window. So
the batches come out as buckets fill up, and the buckets left over at the end come out in
bucket order.

Padding follows ``padded_shapes`` when given, else the input's shapes: dimensions the input's
spec leaves unknown (``None``) pad to the longest in the batch, or with
``pad_to_bucket_boundary`` to the bucket's boundary minus one. tf.data knows every shape from
tracing; feedline knows the input's spec only where the graph says it without running
(sources, ``from_generator``'s ``output_signature``, ``batch`` ...): after a ``map``, every
dimension of every leaf counts as unknown, so give ``padded_shapes`` to keep a fixed
dimension (a feature size) from being padded to the boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.functions import bind_free_variables, call_with_element, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext
from feedline.core.registry import operation
from feedline.core.structure import Element, TensorSpec, batched_spec, flatten, pack_as, spec_of
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, require_callable
from feedline.core.validation import as_int
from feedline.transforms.batch import BatchDataset, validate_batch_size
from feedline.transforms.group_by_window import (
    GroupByWindowIterator,
    as_key,
    group_cardinality,
)
from feedline.transforms.padded_batch import PaddedBatchDataset, as_padded_shape, flatten_up_to
from feedline.transforms.window import ElementListDataset

_INT32_MIN, _INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


@operation("bucket_by_sequence_length")
class BucketBySequenceLengthDataset(UnaryDataset):
    """The node of ``Dataset.bucket_by_sequence_length``.

    Args:
        input_dataset: The elements.
        element_length_func: ``element -> int`` (a tuple's components as arguments).
        bucket_boundaries: Upper length boundaries of the buckets.
        bucket_batch_sizes: Batch size per bucket, ``len(bucket_boundaries) + 1`` of them.
        padded_shapes: As ``padded_batch``'s (default: the input's shapes).
        padding_values: As ``padded_batch``'s (default 0, ``b""``).
        pad_to_bucket_boundary: Pad unknown dimensions to the bucket's boundary minus one
            instead of the longest in the batch; every length must then be below the last
            boundary (an element that is not raises ``ValueError`` and is dropped).
        no_padding: ``batch`` instead of ``padded_batch`` (elements of one bucket must then
            have one shape).
        drop_remainder: Drop batches smaller than their bucket's batch size.
        name: Shown in errors.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(1, 7).map(lambda n: np.arange(n))
        >>> ds = BucketBySequenceLengthDataset(ds, len, [3], [2, 3])
        >>> [b.shape for b in ds]
        [(2, 2), (3, 5), (1, 6)]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, element_length_func: Callable[..., Any],
                 bucket_boundaries: Sequence[int], bucket_batch_sizes: Sequence[int],
                 padded_shapes: Element = None, padding_values: Element = None,
                 pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                 drop_remainder: bool = False, name: str | None = None) -> None:
        super().__init__(input_dataset)
        what = "bucket_by_sequence_length"
        self.element_length_func = bind_free_variables(
            require_callable(element_length_func, f"{what}()", "element_length_func"))
        if isinstance(bucket_boundaries, str | bytes) or not isinstance(
                bucket_boundaries, Sequence | np.ndarray):
            raise TypeError(f"{what}(bucket_boundaries) must be a list of ints, got "
                            f"{bucket_boundaries!r}")
        if isinstance(bucket_batch_sizes, str | bytes) or not isinstance(
                bucket_batch_sizes, Sequence | np.ndarray):
            raise TypeError(f"{what}(bucket_batch_sizes) must be a list of ints, got "
                            f"{bucket_batch_sizes!r}")
        self.bucket_boundaries = tuple(as_int(b, f"{what}(bucket_boundaries)")
                                       for b in bucket_boundaries)
        self.bucket_batch_sizes = tuple(validate_batch_size(b, f"{what}(bucket_batch_sizes)")
                                        for b in bucket_batch_sizes)
        if len(self.bucket_batch_sizes) != len(self.bucket_boundaries) + 1:
            raise ValueError(
                f"{what}(): len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1, but "
                f"len(bucket_batch_sizes)={len(self.bucket_batch_sizes)} and "
                f"len(bucket_boundaries)={len(self.bucket_boundaries)}")
        self.padded_shapes = padded_shapes
        self.padding_values = padding_values
        self.pad_to_bucket_boundary = bool(pad_to_bucket_boundary)
        self.no_padding = bool(no_padding)
        self.drop_remainder = bool(drop_remainder)
        self.name = name or f"{what}({function_name(element_length_func)})"
        if not self.no_padding and input_dataset._element_spec() is not None:
            # Mistakes in padded_shapes/padding_values show up here, as padded_batch's do.
            PaddedBatchDataset(input_dataset, 1, padded_shapes, padding_values)

    def _element_spec(self) -> Element | None:
        spec = self._inputs[0]._element_spec()
        if spec is None:
            return None
        if self.no_padding:
            return batched_spec(spec, None)
        if self.padded_shapes is None:
            shapes = [leaf.shape for leaf in flatten(spec)]
        else:
            given = flatten_up_to(spec, self.padded_shapes, "padded_shapes")
            shapes = [leaf.shape if shape is None else as_padded_shape(shape, "")
                      for shape, leaf in zip(given, flatten(spec))]
        # Unknown dimensions stay unknown: the longest in the batch, or the bucket's boundary.
        return pack_as(spec, [TensorSpec((None, *shape), leaf.dtype)
                              for shape, leaf in zip(shapes, flatten(spec))])

    def cardinality(self) -> int:
        return group_cardinality(self._inputs[0].cardinality())

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return BucketIterator(ctx, self._make_input_iterator(ctx), self._bucket,
                              self._batch_size, self._batch, self.name)

    # The group_by_window functions tf.data builds for this operation.
    def _bucket(self, element: Any) -> int:
        length = as_key(call_with_element(self.element_length_func, element),
                        "element_length_func")
        lows = (_INT32_MIN, *self.bucket_boundaries)
        highs = (*self.bucket_boundaries, _INT32_MAX)
        bucket = next((i for i, (low, high) in enumerate(zip(lows, highs))
                       if low <= length < high), None)
        if bucket is None:
            raise ValueError(f"element length {length} is in no bucket of the boundaries "
                             f"{list(self.bucket_boundaries)}")
        if self.pad_to_bucket_boundary and bucket == len(self.bucket_boundaries):
            raise ValueError(
                f"element length {length}: when pad_to_bucket_boundary=True, elements must "
                f"have length < max(bucket_boundaries) ({max(self.bucket_boundaries, default=0)})")
        return bucket

    def _batch_size(self, bucket: int) -> int:
        return self.bucket_batch_sizes[bucket]

    def _batch(self, bucket: int, window: Dataset) -> Dataset:
        batch_size = self.bucket_batch_sizes[bucket]
        if self.no_padding:
            return BatchDataset(window, batch_size, self.drop_remainder, name=self.name)
        return PaddedBatchDataset(window, batch_size, self._padded_shapes(bucket, window),
                                  self.padding_values, self.drop_remainder, name=self.name)

    def _padded_shapes(self, bucket: int, window: Dataset) -> Element:
        if not self.pad_to_bucket_boundary:
            return self.padded_shapes  # None: every unknown dimension to the longest
        filler = self.bucket_boundaries[bucket] - 1
        spec = self._inputs[0]._element_spec()
        if spec is None:
            # Not known without running: every dimension counts as unknown.
            assert isinstance(window, ElementListDataset)
            first = spec_of(window.elements[0])
            spec = pack_as(first, [TensorSpec((None,) * len(leaf.shape), leaf.dtype)
                                   for leaf in flatten(first)])
        leaves = flatten(spec)
        if self.padded_shapes is None:
            shapes = [leaf.shape for leaf in leaves]
        else:
            given = flatten_up_to(spec, self.padded_shapes, "padded_shapes")
            shapes = [leaf.shape if shape is None else as_padded_shape(shape, "")
                      for shape, leaf in zip(given, leaves)]
        return pack_as(spec, [[filler if d is None else d for d in shape] for shape in shapes])


class BucketIterator(GroupByWindowIterator):
    """``group_by_window``'s iterator with the bucketing functions (its own state type)."""

    OPERATION = "bucket_by_sequence_length"
