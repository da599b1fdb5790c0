"""``RaggedFeature`` and ``SparseFeature`` results, built from their keys parsed as var-len.

TensorFlow parses the features a ``RaggedFeature`` or ``SparseFeature`` names (values,
partitions, indices) as plain variable-length features, then assembles them
(``parsing_config._construct_tensors_for_composite_features``). So does feedline: a
:class:`CompositePlan` adds those keys to the specs as :class:`VarLenFeature` (so the C fast
path parses them with the rest), then :meth:`CompositePlan.build` assembles each composite
from the parsed :class:`RaggedValues`, record by record, checking what TensorFlow checks only
with ``validate=True`` (partitions that do not fit the values are an
:class:`ExampleParseError` naming the feature and the record).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.formats.example.errors import ExampleParseError
from feedline.formats.example.ragged import RaggedValues, stack_rows
from feedline.formats.example.sparse import SparseValues
from feedline.formats.example.specs import (
    _DTYPE_NAME,
    _INT64,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    VarLenFeature,
)

Where = Callable[[int], str]

#: A ``ValueRowIds`` partition may make at most this many more rows than it has values (the
#: rows between ids are empty): a row costs 8 bytes of row splits, so a damaged row id near
#: 2**63 would otherwise ask for exabytes. More is an :class:`ExampleParseError`.
MAX_EMPTY_ROWS = 1 << 16


@dataclass(frozen=True)
class CompositePlan:
    """What to parse for a spec dict holding ``RaggedFeature``/``SparseFeature`` entries.

    Attributes:
        merged: The plain specs plus one :class:`VarLenFeature` per key the composites read.
        order: Every feature name of the user's specs, in their order.
        composites: ``{name: spec}`` of the ``RaggedFeature``/``SparseFeature`` entries.
    """

    merged: dict[str, Any]
    order: tuple[str, ...]
    composites: dict[str, RaggedFeature | SparseFeature]

    def build(self, parsed: Mapping[str, Any], where: Where, single: bool) -> dict[str, Any]:
        """The results, in the order of the user's specs, from ``parsed`` (a batch's results
        for :attr:`merged`); ``single``: one record, without the batch dimension."""
        name, spec = next(iter(self.composites.items()))
        key = spec.value_key if isinstance(spec, SparseFeature) else _value_key(spec, name)
        batch = len(parsed[key])
        built: dict[str, Any] = {}
        for name, spec in self.composites.items():
            if isinstance(spec, SparseFeature):
                built[name] = _sparse(parsed, name, spec, batch, where, single)
            else:
                rows = [_ragged_row(parsed, name, spec, r, where) for r in range(batch)]
                built[name] = rows[0] if single else (
                    stack_rows(rows, f"RaggedFeature {name!r}") if rows else _empty(spec))
        return {name: built[name] if name in built else parsed[name] for name in self.order}


def plan_composites(features: Mapping[str, Any], function: str) -> CompositePlan | None:
    """The plan for ``features``, or ``None`` when it has no composite spec.

    Keys are checked as TensorFlow checks them: a key read with two dtypes, or read both as a
    dense feature and by a composite (or by a ``RaggedFeature`` and as var-len), is a
    ``ValueError``.

    Example:
        >>> plan = plan_composites({"r": RaggedFeature("int64", "v")}, "parse_example")
        >>> sorted(plan.merged), plan.order
        (['v'], ('r',))
    """
    composites = {name: spec for name, spec in features.items()
                  if isinstance(spec, RaggedFeature | SparseFeature)}
    if not composites:
        return None
    dense = {name for name, spec in features.items()
             if isinstance(spec, FixedLenFeature | FixedLenSequenceFeature)}
    sparse: dict[str, np.dtype] = {name: spec.dtype for name, spec in features.items()
                                   if isinstance(spec, VarLenFeature)}
    ragged: dict[str, np.dtype] = {}
    for name, spec in composites.items():
        table = ragged if isinstance(spec, RaggedFeature) else sparse
        for key, dtype in _keys_read(name, spec).items():
            known = table.setdefault(key, dtype)
            if known != dtype:
                raise ValueError(f"{function}(): conflicting types {_DTYPE_NAME[known]} and "
                                 f"{_DTYPE_NAME[dtype]} for feature key {key!r} (read by "
                                 f"{name!r})")
    for first, second, what in ((dense, sparse, "dense and sparse"),
                                (dense, ragged, "dense and ragged"),
                                (set(ragged), set(sparse), "ragged and sparse")):
        both = sorted(set(first) & set(second))
        if both:
            raise ValueError(f"{function}(): {what} keys must not intersect (as in "
                             f"TensorFlow); both read {both}")
    merged = {name: spec for name, spec in features.items() if name not in composites}
    for key, dtype in {**sparse, **ragged}.items():
        merged.setdefault(key, VarLenFeature(dtype))
    return CompositePlan(merged=merged, order=tuple(features), composites=composites)


def _keys_read(name: str, spec: RaggedFeature | SparseFeature) -> dict[str, np.dtype]:
    """The keys the composite spec of feature ``name`` reads, with their values' dtype."""
    if isinstance(spec, SparseFeature):
        return {**dict.fromkeys(spec.index_keys, _INT64), spec.value_key: spec.dtype}
    keys = {_value_key(spec, name): spec.dtype}
    for partition in spec.partitions:
        if not isinstance(partition, RaggedFeature.UniformRowLength):
            if keys.setdefault(partition.key, _INT64) != _INT64:
                raise ValueError(f"RaggedFeature {name!r} reads key {partition.key!r} as its "
                                 f"{_DTYPE_NAME[spec.dtype]} values and as an int64 partition")
    return keys


def _value_key(spec: RaggedFeature, name: str) -> str:
    return name if spec.value_key is None else spec.value_key


def _ragged_row(parsed: Mapping[str, Any], name: str, spec: RaggedFeature, record: int,
                where: Where) -> np.ndarray | RaggedValues:
    """Record ``record``'s value of a RaggedFeature, as ``tf.io.parse_single_example``'s."""
    current: np.ndarray | RaggedValues = parsed[_value_key(spec, name)][record]
    for partition in reversed(spec.partitions):  # innermost first, as TensorFlow
        current = _partitioned(current, partition, parsed, name, record, where)
    return current


def _partitioned(current: np.ndarray | RaggedValues, partition: Any, parsed: Mapping[str, Any],
                 name: str, record: int, where: Where) -> np.ndarray | RaggedValues:
    rows = len(current)
    kind = type(partition).__name__

    def fail(problem: str) -> ExampleParseError:
        return ExampleParseError(
            f"feature {name!r} in {where(record)}: partition {kind}"
            f"({getattr(partition, 'key', getattr(partition, 'length', ''))!r}) {problem}",
            feature=name, record_index=record, expected=f"a {kind} partition of {rows} values",
            found=problem)

    if isinstance(partition, RaggedFeature.UniformRowLength):
        length = partition.length
        if rows % length:
            raise fail(f"does not divide the {rows} values into rows of {length}")
        if isinstance(current, RaggedValues):
            return RaggedValues(current.values, [np.arange(0, rows + 1, length, dtype=np.int64),
                                                 *current.nested_row_splits])
        return current.reshape(-1, length, *current.shape[1:])
    given = np.asarray(parsed[partition.key][record], dtype=np.int64)
    # Every check keeps the values within [0, rows] before it adds or subtracts them: in
    # int64 arithmetic, lengths near 2**63 add up to anything and steps wrap "upwards".
    if isinstance(partition, RaggedFeature.RowSplits):
        # A missing feature is no rows (TensorFlow's batched parse reads it so).
        splits = given if len(given) else np.zeros(1, np.int64)
        if splits[0] != 0 or splits[-1] != rows or _outside(splits, rows) \
                or np.any(np.diff(splits) < 0):
            raise fail(f"must start at 0, never decrease and end at {rows}; found "
                       f"{given.tolist()}")
    elif isinstance(partition, RaggedFeature.RowLengths):
        if _outside(given, rows) or int(given.sum()) != rows:
            raise fail(f"must be >= 0 and add up to {rows}; found {given.tolist()}")
        splits = np.concatenate([[0], np.cumsum(given)]).astype(np.int64)
    elif isinstance(partition, RaggedFeature.RowStarts):
        splits = np.concatenate([given, [rows]]).astype(np.int64)
        if (len(given) and given[0] != 0) or (not len(given) and rows) \
                or _outside(given, rows) or np.any(np.diff(splits) < 0):
            raise fail(f"must start at 0 and never decrease up to {rows}; found "
                       f"{given.tolist()}")
    elif isinstance(partition, RaggedFeature.RowLimits):
        splits = np.concatenate([[0], given]).astype(np.int64)
        if splits[-1] != rows or _outside(given, rows) or np.any(np.diff(splits) < 0):
            raise fail(f"must be >= 0, never decrease and end at {rows}; found "
                       f"{given.tolist()}")
    else:  # ValueRowIds
        if len(given) != rows or np.any(given < 0) or np.any(np.diff(given) < 0):
            raise fail(f"must hold one sorted row id >= 0 per value ({rows}); found "
                       f"{given.tolist()}")
        nrows = int(given[-1]) + 1 if rows else 0
        if nrows - rows > MAX_EMPTY_ROWS:
            # Each row costs 8 bytes of row splits: a few bytes of row id must not ask
            # for gigabytes.
            raise fail(f"asks for {nrows} rows for {rows} values: more than "
                       f"{MAX_EMPTY_ROWS} empty rows (row id {nrows - 1}), taken as damage")
        splits = np.concatenate([[0], np.cumsum(np.bincount(given, minlength=nrows))]
                                ).astype(np.int64)
    if isinstance(current, RaggedValues):
        return RaggedValues(current.values, [splits, *current.nested_row_splits])
    return RaggedValues(current, splits)


def _outside(values: np.ndarray, rows: int) -> bool:
    """Whether any of ``values`` (positions or lengths of rows) lies outside ``[0, rows]``."""
    return bool(len(values)) and (int(values.min()) < 0 or int(values.max()) > rows)


def _empty(spec: RaggedFeature) -> RaggedValues:
    """A RaggedFeature's result for a batch of no records."""
    uniform_tail: list[int] = []
    levels = 1
    for partition in reversed(spec.partitions):
        if isinstance(partition, RaggedFeature.UniformRowLength) and levels == 1:
            uniform_tail.insert(0, partition.length)
        else:
            levels += 1
    values = np.empty((0, *uniform_tail), dtype=spec.dtype)
    return RaggedValues(values, [np.zeros(1, np.int64)] * levels)


def _sparse(parsed: Mapping[str, Any], name: str, spec: SparseFeature, batch: int,
            where: Where, single: bool) -> SparseValues:
    """A SparseFeature's result (``tf.sparse`` merge of its index and value features)."""
    values: RaggedValues = parsed[spec.value_key]
    value_counts = values.row_lengths()
    columns = [np.repeat(np.arange(batch, dtype=np.int64), value_counts)]
    for key, size in zip(spec.index_keys, spec.sizes):
        ids: RaggedValues = parsed[key]
        counts = ids.row_lengths()
        if not np.array_equal(counts, value_counts):
            r = int(np.flatnonzero(counts != value_counts)[0])
            raise ExampleParseError(
                f"feature {name!r} in {where(r)}: SparseFeature index feature {key!r} has "
                f"{counts[r]} values, its value feature {spec.value_key!r} has "
                f"{value_counts[r]} (they must have as many)", feature=name, record_index=r,
                expected=f"{value_counts[r]} indices", found=f"{counts[r]} indices")
        column = ids.values.astype(np.int64)
        outside = np.flatnonzero((column < 0) | (column >= size))
        if len(outside):
            k = int(outside[0])
            r = int(columns[0][k])
            raise ExampleParseError(
                f"feature {name!r} in {where(r)}: SparseFeature index {int(column[k])} in "
                f"feature {key!r} is outside [0, {size})", feature=name, record_index=r,
                expected=f"indices in [0, {size})", found=str(int(column[k])))
        columns.append(column)
    flat = values.values
    if not spec.already_sorted:
        # tf.sparse.reorder: row-major order of the whole index (stable for equal indices).
        order = np.lexsort(columns[::-1])
        columns = [column[order] for column in columns]
        flat = flat[order]
    if single:
        return SparseValues(np.stack(columns[1:], axis=1), flat, spec.sizes)
    return SparseValues(np.stack(columns, axis=1), flat, (batch, *spec.sizes))


def var_len_as_sparse(value: RaggedValues | np.ndarray) -> SparseValues:
    """A ``VarLenFeature`` result as TensorFlow's ``SparseTensor`` layout.

    Example:
        >>> var_len_as_sparse(np.array([4, 5])).indices.tolist()
        [[0], [1]]
    """
    if isinstance(value, RaggedValues):
        return value.to_sparse()
    return SparseValues(np.arange(len(value), dtype=np.int64)[:, None], value, [len(value)])
