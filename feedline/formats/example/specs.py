"""Feature specs (``FixedLenFeature``, ``VarLenFeature``, ``FixedLenSequenceFeature``), as tf.io's.

Specs are validated and canonicalised when they are built (dtype one of int64, float32 or
object for ``bytes``; shape a tuple of sizes), so the decoders never check them again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.core.validation import as_int

_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)
_BYTES = np.dtype(object)
_LIST_FIELD = {_INT64: "int64_list", _FLOAT32: "float_list", _BYTES: "bytes_list"}
_DTYPE_NAME = {_INT64: "int64", _FLOAT32: "float32", _BYTES: "string"}
_KIND_NAME = {"int64_list": "int64", "float_list": "float32", "bytes_list": "string"}


def _canonical_dtype(dtype: Any) -> np.dtype:
    if dtype in (bytes, str, object) or (isinstance(dtype, str) and dtype in (
            "string", "bytes", "str", "object")):
        return _BYTES
    try:
        canonical = np.dtype(dtype)
    except TypeError:
        canonical = None
    if canonical in (_INT64, _FLOAT32):
        return canonical
    if canonical is not None and canonical.kind in "SUO":
        return _BYTES
    raise ValueError(
        f"feature dtype must be int64, float32 or string (bytes); found {dtype!r}")


def _canonical_shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer) or (isinstance(shape, np.ndarray) and shape.ndim == 0):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ValueError(f"{what} shape must be a list of sizes; found {shape!r}") from None
    sizes = []
    for dim in dims:
        try:
            size = as_int(dim, f"{what} shape")
        except TypeError:
            size = -1  # reported below, with the whole shape
        if size < 0:
            raise ValueError(f"{what} shape must hold non-negative sizes; found {shape!r}")
        sizes.append(size)
    return tuple(sizes)


def _zero(dtype: np.dtype) -> Any:
    return b"" if dtype == _BYTES else dtype.type(0)


def _as_array(value: Any, dtype: np.dtype) -> np.ndarray:
    if dtype == _BYTES:
        array = np.asarray(value, dtype=object)
        flat = array.reshape(-1)
        for i, item in enumerate(flat):
            if isinstance(item, str):
                flat[i] = item.encode()
            elif not isinstance(item, bytes):
                raise TypeError(f"a string default value must hold bytes or str; found {item!r}")
        return array
    return np.asarray(value).astype(dtype, casting="same_kind" if dtype == _FLOAT32 else "safe")


@dataclass(frozen=True, eq=False)
class FixedLenFeature:
    """A feature with a fixed number of values, parsed into a dense array of ``shape``.

    Args:
        shape: Shape of one record's values (``[]`` for a scalar).
        dtype: ``"int64"``/``np.int64``, ``"float32"``/``np.float32`` or
            ``"string"``/``"bytes"``/``bytes``/``object``.
        default_value: Used for records without the feature; its values must fill ``shape``
            (or broadcast to it). Without one, a missing feature is an error.

    Example:
        >>> FixedLenFeature([2], "float32", default_value=[0.0, 0.0]).shape
        (2,)
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    default_value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _canonical_shape(self.shape, "FixedLenFeature"))
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))
        if self.default_value is not None:
            _default_array(self)


@dataclass(frozen=True, eq=False)
class VarLenFeature:
    """A feature with any number of values per record, parsed into :class:`RaggedValues`.

    Example:
        >>> VarLenFeature("int64").dtype
        dtype('int64')
    """

    dtype: np.dtype

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))


@dataclass(frozen=True, eq=False)
class FixedLenSequenceFeature:
    """A variable number of items of ``shape`` per record, parsed into a dense padded array.

    In an Example, the feature's values are split into items of ``shape`` (so their count must
    be a multiple of its size); in a SequenceExample's feature list, each step is one item.

    Args:
        shape: Shape of one item.
        dtype: As for :class:`FixedLenFeature`.
        allow_missing: Whether a record may lack the feature (it then has zero items).
            :func:`parse_example` requires ``True``, as TensorFlow does.
        default_value: Scalar used to pad a batch of Examples to its longest record
            (default 0 or ``b""``).

    Example:
        >>> FixedLenSequenceFeature([2], "float32", allow_missing=True).allow_missing
        True
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    allow_missing: bool = False
    default_value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape",
                           _canonical_shape(self.shape, "FixedLenSequenceFeature"))
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))
        if self.default_value is not None:
            pad = _as_array(self.default_value, self.dtype)
            if pad.size != 1:
                raise ValueError("FixedLenSequenceFeature default_value must be a scalar (the "
                                 f"padding value); found shape {pad.shape}")


def _default_array(spec: FixedLenFeature) -> np.ndarray:
    value = _as_array(spec.default_value, spec.dtype)
    size = math.prod(spec.shape)
    if value.size == size:
        return value.reshape(spec.shape)
    try:
        return np.broadcast_to(value, spec.shape)
    except ValueError:
        raise ValueError(
            f"FixedLenFeature default_value of shape {value.shape} does not fit the feature "
            f"shape {spec.shape}") from None


def _pad_value(spec: FixedLenSequenceFeature | None, dtype: np.dtype) -> Any:
    if spec is None or spec.default_value is None:
        return _zero(dtype)
    return _as_array(spec.default_value, dtype).reshape(())[()]



def _check_features(features: Mapping[str, Any], allowed: tuple[type, ...], argument: str,
                    function: str) -> None:
    if not isinstance(features, Mapping):
        raise TypeError(f"{function}(): {argument} must be a dict of feature specs; found "
                        f"{type(features).__name__}")
    for name, spec in features.items():
        if not isinstance(name, str):
            raise TypeError(f"{function}(): feature names must be str; found {name!r}")
        if not isinstance(spec, allowed):
            names = ", ".join(t.__name__ for t in allowed)
            raise TypeError(f"{function}(): {argument}[{name!r}] must be one of {names}; "
                            f"found {type(spec).__name__}")
        if argument == "features" and isinstance(spec, FixedLenSequenceFeature) \
                and not spec.allow_missing:
            raise ValueError(f"{function}(): FixedLenSequenceFeature {name!r} requires "
                             "allow_missing=True in an Example (as in TensorFlow)")
