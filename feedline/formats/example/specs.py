"""Feature specs (``FixedLenFeature``, ``VarLenFeature``, ``FixedLenSequenceFeature``,
``RaggedFeature``, ``SparseFeature``), as tf.io's.

Specs are validated and canonicalised when they are built (dtype one of int64, float32 or
object for ``bytes``; shape a tuple of sizes), so the decoders never check them again.
"""

from __future__ import annotations

import math
from collections import namedtuple
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


class _Partition:
    """Base of the partition specs of :class:`RaggedFeature` (one level of row partitioning)."""

    __slots__ = ()


def _partition_class(kind: str, field: str, doc: str) -> type:
    # Namedtuples, as tf.io's: RaggedFeature.RowSplits("s") == ("s",) and unpacks the same.
    base = namedtuple(kind, [field])  # type: ignore[misc]  # noqa: PYI024

    def __new__(cls: type, value: Any) -> Any:
        if field == "key":
            if not isinstance(value, str) or not value:
                raise ValueError(f"RaggedFeature.{kind} needs a feature key (a non-empty "
                                 f"str); found {value!r}")
        else:
            value = as_int(value, f"RaggedFeature.{kind}(length)")
            if value < 1:
                raise ValueError(f"RaggedFeature.{kind}(length) must be >= 1; found {value}")
        return base.__new__(cls, value)

    return type(kind, (base, _Partition), {
        "__new__": __new__, "__slots__": (), "__doc__": doc, "__module__": __name__,
        "__qualname__": f"RaggedFeature.{kind}"})  # pickled as an attribute of RaggedFeature


@dataclass(frozen=True, eq=False)
class RaggedFeature:
    """Values (and optional row partitions) parsed into :class:`RaggedValues`, as tf.io's.

    ``value_key`` names the feature holding the flat values (default: the feature's own name);
    ``partitions`` (outermost first) name features that split them into rows, as
    ``tf.io.RaggedFeature``'s: :attr:`RowSplits`, :attr:`RowLengths`, :attr:`RowStarts`,
    :attr:`RowLimits`, :attr:`ValueRowIds` (each with a feature key of int64 values) and
    :attr:`UniformRowLength` (a length). Without partitions, :func:`parse_single_example` gives
    a 1-D array and :func:`parse_example` a :class:`RaggedValues` with one row per record;
    each partition adds a ragged level, except trailing ``UniformRowLength`` partitions, which
    reshape the values instead (an array ``[-1, length]``, as TensorFlow does). A missing
    feature has no values (no rows).

    Args:
        dtype: ``"int64"``, ``"float32"`` or ``"string"``, as for :class:`FixedLenFeature`.
        value_key: The feature holding the values; ``None``: the key of this feature.
        partitions: Row partitions, outermost first.
        row_splits_dtype: ``"int32"`` (TensorFlow's default) or ``"int64"``; accepted for
            compatibility, feedline's row splits are always int64.
        validate: Accepted for compatibility: feedline always checks that the partitions fit
            the values and raises :class:`ExampleParseError` (naming the record) where they
            do not; TensorFlow builds an invalid tensor unless ``validate=True``.

    Example:
        >>> spec = RaggedFeature("int64", "v", [RaggedFeature.RowLengths("lens")])
        >>> spec.partitions
        (RowLengths(key='lens'),)
    """

    dtype: np.dtype
    value_key: str | None = None
    partitions: tuple[Any, ...] = ()
    row_splits_dtype: np.dtype = np.dtype(np.int32)
    validate: bool = False

    RowSplits = _partition_class("RowSplits", "key", "Row ``i`` spans values "
                                 "``splits[i]:splits[i + 1]`` (``nrows + 1`` values from 0).")
    RowLengths = _partition_class("RowLengths", "key", "Row ``i`` has ``lengths[i]`` values.")
    RowStarts = _partition_class("RowStarts", "key", "Row ``i`` starts at ``starts[i]`` (and "
                                 "ends where the next starts).")
    RowLimits = _partition_class("RowLimits", "key", "Row ``i`` ends at ``limits[i]``.")
    ValueRowIds = _partition_class("ValueRowIds", "key", "Value ``k`` belongs to row "
                                   "``rowids[k]`` (sorted; ``max + 1`` rows, at most 65,536 "
                                   "more than the values: more is taken as damage).")
    UniformRowLength = _partition_class("UniformRowLength", "length", "Rows of ``length`` "
                                        "values each.")

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))
        if self.value_key is not None and (not isinstance(self.value_key, str)
                                           or not self.value_key):
            raise ValueError(f"RaggedFeature value_key must be a non-empty str; found "
                             f"{self.value_key!r}")
        if not isinstance(self.partitions, list | tuple):
            raise TypeError(f"RaggedFeature partitions must be a list or tuple; found "
                            f"{type(self.partitions).__name__}")
        for partition in self.partitions:
            if not isinstance(partition, _Partition):
                raise TypeError(
                    "RaggedFeature partitions must be RaggedFeature.RowSplits, RowLengths, "
                    f"RowStarts, RowLimits, ValueRowIds or UniformRowLength; found {partition!r}")
        object.__setattr__(self, "partitions", tuple(self.partitions))
        try:
            splits_dtype = np.dtype(self.row_splits_dtype)
        except TypeError:
            splits_dtype = None
        if splits_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError(f"RaggedFeature row_splits_dtype must be int32 or int64; found "
                             f"{self.row_splits_dtype!r}")
        object.__setattr__(self, "row_splits_dtype", splits_dtype)
        if not isinstance(self.validate, bool):
            raise TypeError(f"RaggedFeature validate must be a bool; found {self.validate!r}")


@dataclass(frozen=True, eq=False)
class SparseFeature:
    """Indices and values in separate features parsed into :class:`SparseValues`, as tf.io's.

    Value ``k`` of the ``value_key`` feature sits at index ``[index_key[0][k],
    index_key[1][k], ...]`` of an array of shape ``size``; :func:`parse_example` adds the
    record as the first index (shape ``[batch, *size]``). Entries are sorted by index unless
    ``already_sorted`` (then they keep the features' order).

    Args:
        index_key: One feature key, or a list of them (one per dimension), of int64 values.
        value_key: The feature holding the values.
        dtype: Of the values, as for :class:`FixedLenFeature`.
        size: The dense shape: an int for one ``index_key``, a list for a list of them.
        already_sorted: Skip sorting.

    Example:
        >>> SparseFeature(["row", "col"], "weight", "float32", [10, 4]).size
        (10, 4)
    """

    index_key: str | tuple[str, ...]
    value_key: str
    dtype: np.dtype
    size: int | tuple[int, ...]
    already_sorted: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))
        if not isinstance(self.value_key, str) or not self.value_key:
            raise ValueError(f"SparseFeature value_key must be a non-empty str; found "
                             f"{self.value_key!r}")
        keys = self.index_key
        several = isinstance(keys, list | tuple)
        if not several:
            keys = (keys,)
        if not keys or not all(isinstance(key, str) and key for key in keys):
            raise ValueError(f"SparseFeature index_key must be a feature key or a non-empty "
                             f"list of them; found {self.index_key!r}")
        size = self.size
        if several != isinstance(size, list | tuple | np.ndarray):
            raise ValueError("SparseFeature size must be a list exactly when index_key is a "
                             f"list; found index_key={self.index_key!r}, size={size!r}")
        sizes = _canonical_shape(size, "SparseFeature size")
        if len(sizes) != len(keys):
            raise ValueError(f"SparseFeature size {list(sizes)} needs one size per index_key "
                             f"{list(keys)}")
        object.__setattr__(self, "index_key", tuple(keys) if several else keys[0])
        object.__setattr__(self, "size", sizes if several else sizes[0])
        object.__setattr__(self, "already_sorted", bool(self.already_sorted))

    @property
    def index_keys(self) -> tuple[str, ...]:
        """``index_key`` as a tuple (one key per dimension)."""
        return self.index_key if isinstance(self.index_key, tuple) else (self.index_key,)

    @property
    def sizes(self) -> tuple[int, ...]:
        """``size`` as a tuple."""
        return self.size if isinstance(self.size, tuple) else (self.size,)


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
