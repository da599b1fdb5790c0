"""The pure-Python (protobuf) decoder: every record, every spec, every error.

A batch is decoded with one call into the C (upb) protobuf implementation (the records framed
as one message), then each feature is gathered into one NumPy array with C-level iteration
(``np.fromiter`` over the repeated fields). This path decides every error and every unusual
record: the C fast path (:mod:`.cbridge`) steps aside to it whenever it is unsure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from feedline.formats import example_proto
from feedline.formats.example.errors import ExampleParseError
from feedline.formats.example.ragged import RaggedValues
from feedline.formats.example.specs import (
    _BYTES,
    _DTYPE_NAME,
    _KIND_NAME,
    _LIST_FIELD,
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    _check_features,
    _default_array,
    _pad_value,
    _zero,
)

_FEATURE_MAP = attrgetter("features.feature")
_VALUES = {dtype: attrgetter(f"{field}.value") for dtype, field in _LIST_FIELD.items()}


@functools.lru_cache(maxsize=65536)
def _field_head(length: int) -> bytes:
    """Tag of field 1 (length-delimited) followed by ``length`` as a varint."""
    out = bytearray(b"\n")
    while length >= 0x80:
        out.append((length & 0x7F) | 0x80)
        length >>= 7
    out.append(length)
    return bytes(out)


def _records(serialized: Any, function: str) -> list[bytes]:
    if isinstance(serialized, (bytes, str, bytearray)):
        raise TypeError(f"{function}() needs a batch (a list or 1-D array of serialized "
                         "records); parse one record with the parse_single_* function")
    if isinstance(serialized, np.ndarray):
        if serialized.ndim != 1:
            raise ValueError(f"{function}() needs a 1-D batch of serialized records; found an "
                             f"array of shape {serialized.shape}")
        records = serialized.tolist()
    else:
        records = list(serialized)
    for i, record in enumerate(records):
        if type(record) is not bytes:
            if isinstance(record, bytes | bytearray | memoryview):
                records[i] = bytes(record)
            else:
                raise TypeError(f"{function}(): record {i} of the batch must be bytes; found "
                                f"{type(record).__name__}")
    return records


_UNDECODABLE = (DecodeError, UnicodeDecodeError)
"""What protobuf raises for a damaged record: its pure-Python parser (the one on free-threaded
builds) raises ``UnicodeDecodeError`` for a string that is not UTF-8, where upb says
``DecodeError``."""


def _decode(records: list[bytes], sequence: bool, where: Any) -> list[Any]:
    """Decode every record with one call into the C protobuf parser (a framed batch)."""
    batch_class = example_proto.SequenceExampleBatch if sequence else example_proto.ExampleBatch
    parts: list[bytes] = []
    for record in records:
        parts.append(_field_head(len(record)))
        parts.append(record)
    try:
        return list(batch_class.FromString(b"".join(parts)).examples)
    except _UNDECODABLE:
        pass
    # Find the damaged record to name it.
    single = example_proto.SequenceExample if sequence else example_proto.Example
    what = "tf.train.SequenceExample" if sequence else "tf.train.Example"
    for i, record in enumerate(records):
        try:
            single.FromString(record)
        except _UNDECODABLE as error:
            raise ExampleParseError(
                f"{where(i)} is not a valid serialized {what} ({len(record)} bytes): {error}",
                record_index=i, expected=what, found="undecodable bytes") from None
    raise ExampleParseError(f"the batch is not a valid sequence of serialized {what}s")


def _batch_where(i: int) -> str:
    return f"record {i} of the batch"


def _single_where(i: int) -> str:
    return "the record"


def _kind_error(name: str, spec: Any, kind: str | None, i: int, where: Any,
                step: int | None = None) -> ExampleParseError:
    expected = _DTYPE_NAME[spec.dtype]
    found = _KIND_NAME.get(kind or "", "no values")
    at = f"{where(i)}" + (f", step {step}" if step is not None else "")
    return ExampleParseError(
        f"feature {name!r} in {at}: expected {expected} values ({_LIST_FIELD[spec.dtype]}), "
        f"found {found} ({kind or 'an empty Feature'})", feature=name, record_index=i,
        expected=expected, found=found)


def _to_array(lists: list[Any], total: int, dtype: np.dtype) -> np.ndarray:
    """Concatenate repeated fields into one flat array (C-level iteration)."""
    if dtype == _BYTES:
        out = np.empty(total, dtype=object)
        if total:
            out[:] = list(chain.from_iterable(lists))
        return out
    return np.fromiter(chain.from_iterable(lists), dtype=dtype, count=total)


def _values_of(features: list[Any], indices: list[int] | None, name: str, spec: Any,
               where: Any) -> list[Any]:
    """The value lists of ``features`` (none of them None), checking each one's type.

    ``indices[k]`` is the record index of ``features[k]`` (``None``: the same).
    """
    field = _LIST_FIELD[spec.dtype]
    kinds = [feature.WhichOneof("kind") for feature in features]
    if kinds.count(field) != len(kinds):
        for k, kind in enumerate(kinds):
            if kind != field and kind is not None:
                raise _kind_error(name, spec, kind, k if indices is None else indices[k], where)
    return list(map(_VALUES[spec.dtype], features))


def _parse_fixed(maps: list[Any], name: str, spec: FixedLenFeature, where: Any) -> np.ndarray:
    batch = len(maps)
    size = math.prod(spec.shape)
    getter = _VALUES[spec.dtype]
    features = list(map(methodcaller("get", name), maps))
    if size and None not in features:
        # Fast path: a list of the wrong type reads as empty, so checking every length is
        # enough to know every record is right.
        lists = list(map(getter, features))
        if list(map(len, lists)).count(size) == batch:
            return _to_array(lists, batch * size, spec.dtype).reshape(batch, *spec.shape)
    field = _LIST_FIELD[spec.dtype]
    present: list[int] = []
    missing: list[int] = []
    lists = []
    for i, feature in enumerate(features):
        if feature is None:
            if spec.default_value is None:
                raise ExampleParseError(
                    f"feature {name!r} is missing in {where(i)} and its FixedLenFeature has no "
                    f"default_value (expected {size} {_DTYPE_NAME[spec.dtype]} values of shape "
                    f"{list(spec.shape)})", feature=name, record_index=i,
                    expected=f"{size} values", found="missing")
            missing.append(i)
            continue
        kind = feature.WhichOneof("kind")
        if kind != field and kind is not None:
            raise _kind_error(name, spec, kind, i, where)
        values = getter(feature)
        if len(values) != size:
            raise ExampleParseError(
                f"feature {name!r} in {where(i)}: expected {size} {_DTYPE_NAME[spec.dtype]} "
                f"values for shape {list(spec.shape)}, found {len(values)}", feature=name,
                record_index=i, expected=f"{size} values", found=f"{len(values)} values")
        present.append(i)
        lists.append(values)
    out = np.empty((batch, *spec.shape), dtype=spec.dtype)
    if present:
        out[present] = _to_array(lists, len(present) * size, spec.dtype).reshape(
            len(present), *spec.shape)
    if missing:
        out[missing] = _default_array(spec)
    return out


def _parse_var_len(maps: list[Any], name: str, spec: VarLenFeature, where: Any
                   ) -> RaggedValues:
    features = list(map(methodcaller("get", name), maps))
    if None in features:
        # A missing feature has no values (as TensorFlow's SparseTensor has none there).
        indices = [i for i, f in enumerate(features) if f is not None]
        lists: list[Any] = [()] * len(features)
        present = [features[i] for i in indices]
        for i, values in zip(indices, _values_of(present, indices, name, spec, where)):
            lists[i] = values
    else:
        lists = _values_of(features, None, name, spec, where)
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    splits = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=splits[1:])
    return RaggedValues(_to_array(lists, int(splits[-1]), spec.dtype), splits)


def _dense_items(values: np.ndarray, counts: np.ndarray, item_shape: tuple[int, ...],
                 pad: Any, dtype: np.dtype) -> np.ndarray:
    """Scatter ``counts[i]`` items of ``item_shape`` per record into ``[batch, longest, ...]``."""
    batch = len(counts)
    longest = int(counts.max()) if batch else 0
    out = np.full((batch, longest, *item_shape), pad, dtype=dtype)
    total = int(counts.sum())
    if total:
        rows = np.repeat(np.arange(batch), counts)
        starts = np.cumsum(counts) - counts
        within = np.arange(total) - np.repeat(starts, counts)
        out[rows, within] = values.reshape(total, *item_shape)
    return out


def _parse_sequence_in_example(maps: list[Any], name: str, spec: FixedLenSequenceFeature,
                               where: Any) -> np.ndarray:
    size = math.prod(spec.shape)
    ragged = _parse_var_len(maps, name, VarLenFeature(spec.dtype), where)
    lengths = ragged.row_lengths()
    if size == 0:
        if lengths.any():
            i = int(np.flatnonzero(lengths)[0])
            raise ExampleParseError(
                f"feature {name!r} in {where(i)}: expected no values for items of shape "
                f"{list(spec.shape)}, found {lengths[i]}", feature=name, record_index=i,
                expected="0 values", found=f"{lengths[i]} values")
        counts = np.zeros(len(maps), dtype=np.int64)
    else:
        bad = np.flatnonzero(lengths % size)
        if len(bad):
            i = int(bad[0])
            raise ExampleParseError(
                f"feature {name!r} in {where(i)}: expected a multiple of {size} "
                f"{_DTYPE_NAME[spec.dtype]} values (items of shape {list(spec.shape)}), found "
                f"{lengths[i]}", feature=name, record_index=i,
                expected=f"a multiple of {size} values", found=f"{lengths[i]} values")
        counts = lengths // size
    return _dense_items(ragged.values, counts, spec.shape, _pad_value(spec, spec.dtype),
                        spec.dtype)



def _parse_features(maps: list[Any], features: Mapping[str, Any], where: Any
                    ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in features.items():
        if isinstance(spec, FixedLenFeature):
            out[name] = _parse_fixed(maps, name, spec, where)
        elif isinstance(spec, VarLenFeature):
            out[name] = _parse_var_len(maps, name, spec, where)
        else:
            out[name] = _parse_sequence_in_example(maps, name, spec, where)
    return out



def _parse_feature_lists(lists: list[Any], features: Mapping[str, Any], where: Any
                         ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    out: dict[str, Any] = {}
    lengths: dict[str, np.ndarray] = {}
    for name, spec in features.items():
        getter = _VALUES[spec.dtype]
        field = _LIST_FIELD[spec.dtype]
        size = math.prod(spec.shape) if isinstance(spec, FixedLenSequenceFeature) else None
        step_counts = np.zeros(len(lists), dtype=np.int64)
        value_lists: list[Any] = []
        for i, feature_lists in enumerate(lists):
            feature_list = feature_lists.get(name)
            if feature_list is None:
                if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
                    raise ExampleParseError(
                        f"feature list {name!r} is missing in {where(i)} (its "
                        "FixedLenSequenceFeature has allow_missing=False)", feature=name,
                        record_index=i, expected="a feature list", found="missing")
                continue
            steps = feature_list.feature
            step_counts[i] = len(steps)
            values = list(map(getter, steps))
            if size is not None and size and list(map(len, values)).count(size) == len(values):
                value_lists.extend(values)  # every step is right (see _parse_fixed)
                continue
            for t, step in enumerate(steps):
                kind = step.WhichOneof("kind")
                if kind != field and kind is not None:
                    raise _kind_error(name, spec, kind, i, where, step=t)
                if size is not None and len(values[t]) != size:
                    raise ExampleParseError(
                        f"feature list {name!r} in {where(i)}, step {t}: expected {size} "
                        f"{_DTYPE_NAME[spec.dtype]} values for shape {list(spec.shape)}, found "
                        f"{len(values[t])}", feature=name, record_index=i,
                        expected=f"{size} values", found=f"{len(values[t])} values")
            value_lists.extend(values)
        value_lengths = np.fromiter(map(len, value_lists), dtype=np.int64,
                                    count=len(value_lists))
        values = _to_array(value_lists, int(value_lengths.sum()), spec.dtype)
        if isinstance(spec, FixedLenSequenceFeature):
            # Padded with zeros: TensorFlow ignores default_value for SequenceExamples.
            out[name] = _dense_items(values, step_counts, spec.shape, _zero(spec.dtype),
                                     spec.dtype)
            lengths[name] = step_counts
        else:
            outer = np.zeros(len(lists) + 1, dtype=np.int64)
            np.cumsum(step_counts, out=outer[1:])
            inner = np.zeros(len(value_lists) + 1, dtype=np.int64)
            np.cumsum(value_lengths, out=inner[1:])
            out[name] = RaggedValues(values, [outer, inner])
    return out, lengths


def _parse_sequences(records: list[bytes], context_features: Mapping[str, Any] | None,
                     sequence_features: Mapping[str, Any] | None, where: Any, function: str
                     ) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    context_features = context_features or {}
    sequence_features = sequence_features or {}
    _check_features(context_features, (FixedLenFeature, VarLenFeature), "context_features",
                    function)
    _check_features(sequence_features, (FixedLenSequenceFeature, VarLenFeature),
                    "sequence_features", function)
    if not context_features and not sequence_features:
        raise ValueError(f"{function}(): give context_features, sequence_features or both")
    messages = _decode(records, True, where)
    context = _parse_features([m.context.feature for m in messages], context_features, where)
    lists, lengths = _parse_feature_lists(
        [m.feature_lists.feature_list for m in messages], sequence_features, where)
    return context, lists, lengths
