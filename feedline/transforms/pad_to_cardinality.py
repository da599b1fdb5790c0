"""``pad_to_cardinality``: pad a dataset of dicts with zero elements up to a cardinality."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.registry import operation
from feedline.core.structure import NoneTensorSpec, TensorSpec, flatten_with_paths, pack_as
from feedline.core.validation import validate_int


def _filler_leaf(spec: Any, path: str) -> Any:
    if isinstance(spec, NoneTensorSpec):
        return None
    if not isinstance(spec, TensorSpec) or None in spec.shape:
        # tf.data: "Cannot convert a partially known TensorShape ... to a Tensor".
        raise ValueError(f"pad_to_cardinality: leaf {path} has no fully known shape ({spec}): "
                         "the padding elements are zeros of each leaf's shape")
    dtype = np.dtype(spec.dtype)
    if dtype == object:  # strings: tf.data pads with b""
        return np.full(spec.shape, b"", dtype=object) if spec.shape else b""
    zeros = np.zeros(spec.shape, dtype)
    return zeros[()] if not spec.shape else zeros


def filler_element(spec: Mapping[str, Any], mask_key: str) -> dict[str, Any]:
    """The padding element of a dict dataset's ``spec``: zeros (``b""`` for strings) of every
    leaf's shape and dtype, and ``mask_key`` False.

    Example:
        >>> filler_element({"a": TensorSpec((2,), np.int32)}, "valid")
        {'a': array([0, 0], dtype=int32), 'valid': np.False_}
    """
    leaves = [_filler_leaf(leaf, path) for path, leaf in flatten_with_paths(dict(spec))]
    element = pack_as(dict(spec), leaves)
    element[mask_key] = np.False_
    return element


@operation("pad_to_cardinality")
def pad_to_cardinality(dataset: Dataset, cardinality: int, mask_key: str = "valid",
                       name: str | None = None) -> Dataset:
    """``dataset``'s elements with ``mask_key`` True, then padding elements (zeros, with
    ``mask_key`` False) up to ``cardinality`` elements (tf.data's
    ``tf.data.experimental.pad_to_cardinality``).

    The elements must be dicts, and the dataset's cardinality known and at most
    ``cardinality`` (tf.data's ``ValueError``\\s, in its words). Built of ``map``,
    ``from_tensors``, ``repeat`` and ``concatenate``, so it checkpoints as they do.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_tensor_slices({"a": np.array([1, 2], np.int32)})
        >>> [(int(e["a"]), bool(e["valid"])) for e in pad_to_cardinality(ds, 3)]
        [(1, True), (2, True), (0, False)]
    """
    cardinality = validate_int(cardinality, "pad_to_cardinality(cardinality)", minimum=0)
    current = dataset.cardinality()
    if current < 0:
        raise ValueError("The dataset passed into `pad_to_cardinality` must have a known "
                         f"cardinalty, but has cardinality {current}")
    if current > cardinality:
        raise ValueError("The dataset passed into `pad_to_cardinality` must have a cardinalty "
                         f"less than the target cardinality ({cardinality}), but has "
                         f"cardinality {current}")
    spec = dataset.element_spec
    if not isinstance(spec, Mapping):
        raise ValueError("`pad_to_cardinality` requires its input dataset to be a dictionary "
                         f"(its elements are {spec})")
    filler = filler_element(spec, mask_key)
    stage = name or "pad_to_cardinality"

    def mark_valid(element: dict[str, Any]) -> dict[str, Any]:
        return {**element, mask_key: np.True_}

    marked = dataset.map(mark_valid, name=f"{stage}(mark {mask_key})")
    padding = Dataset.from_tensors(filler).repeat(cardinality - current)
    return marked.concatenate(padding, name=stage)

