"""``pack_sequences``: pack variable-length token sequences into fixed-length rows.

LLM training feeds rows of a fixed length; packing several short examples into one row (with
segment ids so attention stays within an example, and positions restarting per example) wastes
far fewer tokens than padding each. tf.data has no packer (seqio and Grain build one by hand);
this one checkpoints exactly: the open rows are part of the state, so a resume neither drops
nor repeats a token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import InvalidArgumentError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element, TensorSpec
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator

Method = Literal["first_fit", "concat_and_split"]
Overflow = Literal["split", "truncate", "error"]

SEGMENT_IDS = "_segment_ids"
POSITIONS = "_positions"
_INDEX_DTYPE = np.dtype(np.int32)


class _Row:
    """One output row being filled: per feature, its tokens, segment ids and positions."""

    def __init__(self, lengths: Mapping[str, int], dtypes: Mapping[str, np.dtype],
                 padding_value: int | float) -> None:
        self.tokens = {k: np.full(n, padding_value, dtypes[k]) for k, n in lengths.items()}
        self.segment_ids = {k: np.zeros(n, _INDEX_DTYPE) for k, n in lengths.items()}
        self.positions = {k: np.zeros(n, _INDEX_DTYPE) for k, n in lengths.items()}
        self.fill = dict.fromkeys(lengths, 0)
        self.segments = 0

    def fits(self, piece: Mapping[str, np.ndarray]) -> bool:
        return all(self.fill[k] + len(v) <= len(self.tokens[k]) for k, v in piece.items())

    def is_full(self) -> bool:
        return all(self.fill[k] == len(self.tokens[k]) for k in self.fill)

    def add(self, piece: Mapping[str, np.ndarray]) -> None:
        """Append ``piece`` (it fits) as a new segment."""
        self.segments += 1
        for k, values in piece.items():
            start, n = self.fill[k], len(values)
            self.tokens[k][start:start + n] = values
            self.segment_ids[k][start:start + n] = self.segments
            self.positions[k][start:start + n] = np.arange(n, dtype=_INDEX_DTYPE)
            self.fill[k] = start + n

    def output(self) -> dict[str, np.ndarray]:
        row: dict[str, np.ndarray] = {}
        for k in self.tokens:
            row[k] = self.tokens[k]
            row[k + SEGMENT_IDS] = self.segment_ids[k]
            row[k + POSITIONS] = self.positions[k]
        return row

    def to_state(self) -> dict[str, Any]:
        # Only the filled prefix: the rest is padding, rebuilt from the node's settings.
        return {"segments": self.segments, "fill": dict(self.fill),
                "tokens": encode({k: v[:self.fill[k]] for k, v in self.tokens.items()}),
                "segment_ids": encode({k: v[:self.fill[k]]
                                       for k, v in self.segment_ids.items()}),
                "positions": encode({k: v[:self.fill[k]] for k, v in self.positions.items()})}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.segments = int(state["segments"])
        for name, arrays in (("tokens", self.tokens), ("segment_ids", self.segment_ids),
                             ("positions", self.positions)):
            for k, values in decode(state[name]).items():
                arrays[k][:len(values)] = values
        self.fill = {k: int(n) for k, n in state["fill"].items()}


def held_rows(state: State, padding_value: int | float = 0) -> list[Any]:
    """The rows a packer's state holds, encoded as its ``ready`` rows are: the open ones
    closed as they stand (padded with ``padding_value``), then the ready ones.

    An elastic resume (:func:`feedline.resume.merge_states`) hands them to the packers of
    other replicas as ready rows: every token once, and never more than ``num_bins`` open.

    Example:
        >>> row = _Row({"t": 4}, {"t": np.dtype(np.int64)}, 0)
        >>> row.add({"t": np.array([7, 8])})
        >>> state = {"features": [["t", 4, "<i8"]], "open": [row.to_state()], "ready": []}
        >>> decode(held_rows(state)[0])["t"].tolist()
        [7, 8, 0, 0]
    """
    lengths = {k: int(n) for k, n, _ in state["features"]}
    dtypes = {k: np.dtype(dtype) for k, _, dtype in state["features"]}
    rows = []
    for saved in state["open"]:
        row = _Row(lengths, dtypes, padding_value)
        row.load_state(saved)
        rows.append(encode(row.output()))
    return rows + list(state["ready"])


@operation("pack_sequences")
class PackSequencesDataset(UnaryDataset):
    """The node of ``Dataset.pack_sequences``.

    Each input element is a dict of 1-D arrays (e.g. ``{"inputs": ..., "targets": ...}``);
    each output is a dict with, per feature ``k`` of length ``L_k``: ``k`` (the tokens, padded
    with ``padding_value``), ``k + "_segment_ids"`` (1, 2, ... per example in the row, 0 on
    padding) and ``k + "_positions"`` (0, 1, ... within each example), the names seqio and
    Grain use. An example with no tokens at all occupies nothing and is not seen.

    Methods:
        ``"first_fit"``: up to ``num_bins`` rows are open; an example goes into the first open
        row where every feature fits. When none has room and ``num_bins`` rows are open, the
        oldest row is emitted and a new one opened. A row every feature of which is full is
        emitted at once. At the end of the input the open rows are emitted, oldest first.
        ``"concat_and_split"``: examples are concatenated into rows; an example that crosses
        the end of a row continues in the next as a new segment with positions restarting at
        0 (a position never reaches the row length, so a learned position table of that size
        suffices). Every feature of an example must have the same length.

    ``overflow`` says what ``first_fit`` does with a feature longer than its row: ``"split"``
    (the default: nothing is dropped) packs it as consecutive pieces of at most the row
    length, ``"truncate"`` keeps its first tokens (seqio's behaviour), ``"error"`` raises.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_list([{"t": [1, 2]}, {"t": [3]}, {"t": [4, 5, 6]}])
        >>> [row["t"].tolist() for row in ds.pack_sequences(4)]
        [[1, 2, 3, 0], [4, 5, 6, 0]]
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, length: int | Mapping[str, int],
                 method: Method = "first_fit", num_bins: int = 16,
                 overflow: Overflow = "split", padding_value: int | float = 0) -> None:
        super().__init__(input_dataset)
        if method not in ("first_fit", "concat_and_split"):
            raise ValueError(f"pack_sequences: method must be 'first_fit' or "
                             f"'concat_and_split', got {method!r}")
        if overflow not in ("split", "truncate", "error"):
            raise ValueError(f"pack_sequences: overflow must be 'split', 'truncate' or "
                             f"'error', got {overflow!r}")
        if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
            raise ValueError(f"pack_sequences: num_bins must be a positive int, got {num_bins!r}")
        lengths = dict(length) if isinstance(length, Mapping) else None
        for value in (lengths.values() if lengths is not None else [length]):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"pack_sequences: a row length must be a positive int, "
                                 f"got {value!r}")
        if method == "concat_and_split" and lengths is not None \
                and len(set(lengths.values())) > 1:
            raise ValueError("pack_sequences: concat_and_split cuts every feature at the same "
                             f"token, so the features need one row length, got {lengths}")
        self.length = length if lengths is None else lengths
        self.method = method
        self.num_bins = num_bins
        self.overflow = overflow
        self.padding_value = padding_value

    def cardinality(self) -> int:
        return UNKNOWN

    def _element_spec(self) -> Element | None:
        spec = self._inputs[0]._element_spec()
        if not isinstance(spec, dict) or not all(isinstance(v, TensorSpec) for v in spec.values()):
            return None
        out: dict[str, TensorSpec] = {}
        for k, leaf in spec.items():
            n = self.length[k] if isinstance(self.length, dict) else self.length
            if isinstance(self.length, dict) and k not in self.length:
                continue
            out[k] = TensorSpec((int(n),), np.dtype(leaf.dtype))
            out[k + SEGMENT_IDS] = TensorSpec((int(n),), _INDEX_DTYPE)
            out[k + POSITIONS] = TensorSpec((int(n),), _INDEX_DTYPE)
        return out

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return PackSequencesIterator(ctx, self._make_input_iterator(ctx), self)


class PackSequencesIterator(UnaryIterator):
    """Reads examples, fills rows, and hands out finished rows in order."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 node: PackSequencesDataset) -> None:
        super().__init__(ctx, upstream)
        self._node = node
        self._lengths: dict[str, int] | None = None
        self._dtypes: dict[str, np.dtype] = {}
        self._open: list[_Row] = []
        self._ready: deque[dict[str, np.ndarray]] = deque()
        self._index = 0  # input examples read
        self._ended = False

    def __next__(self) -> dict[str, np.ndarray]:
        while not self._ready:
            if self._ended:
                raise StopIteration
            try:
                example = next(self._upstream)
            except StopIteration:
                self._ended = True
                self._ready.extend(row.output() for row in self._open)
                self._open.clear()
                continue
            index = self._index
            self._index += 1
            self._pack(self._features(example, index), index)
        return self._ready.popleft()

    def _features(self, example: Any, index: int) -> dict[str, np.ndarray]:
        """The example's 1-D features (in the node's feature order), checked."""
        where = f"pack_sequences: input element {index}"
        if not isinstance(example, Mapping):
            raise InvalidArgumentError(
                f"{where} is a {type(example).__name__}; expected a dict of 1-D token arrays "
                "(wrap a bare sequence: .map(lambda x: {'tokens': x}))", record_index=index)
        lengths = self._lengths or self._resolve_lengths(example, where, index)
        features: dict[str, np.ndarray] = {}
        for k in lengths:
            if k not in example:
                raise InvalidArgumentError(f"{where} has no feature {k!r} (features: "
                                           f"{sorted(example)})", record_index=index)
            values = np.asarray(example[k])
            if values.ndim != 1:
                raise InvalidArgumentError(f"{where}: feature {k!r} has shape {values.shape}; "
                                           "expected a 1-D sequence", record_index=index)
            expected = self._dtypes.get(k, values.dtype)
            if values.dtype != expected:
                raise InvalidArgumentError(f"{where}: feature {k!r} is {values.dtype}, earlier "
                                           f"elements were {expected}", record_index=index)
            features[k] = values
        # Fixed by the first valid example (a failing one, skipped by ignore_errors, fixes none).
        self._lengths = lengths
        self._dtypes = {k: v.dtype for k, v in features.items()}
        return features

    def _resolve_lengths(self, example: Mapping[str, Any], where: str,
                         index: int) -> dict[str, int]:
        length = self._node.length
        if isinstance(length, dict):
            return {k: int(n) for k, n in length.items()}
        if not example:
            raise InvalidArgumentError(f"{where} is an empty dict", record_index=index)
        return dict.fromkeys(example, int(length))

    def _pack(self, features: dict[str, np.ndarray], index: int) -> None:
        if self._node.method == "concat_and_split":
            self._concat(features, index)
            return
        assert self._lengths is not None
        too_long = {k: len(v) for k, v in features.items() if len(v) > self._lengths[k]}
        if too_long and self._node.overflow == "error":
            raise InvalidArgumentError(
                f"pack_sequences: input element {index} is longer than a row: "
                + ", ".join(f"{k!r} has {n} tokens, the row {self._lengths[k]}"
                            for k, n in too_long.items()), record_index=index)
        if too_long and self._node.overflow == "truncate":
            features = {k: v[:self._lengths[k]] for k, v in features.items()}
        pieces = max(-(-len(v) // self._lengths[k]) for k, v in features.items())
        for p in range(pieces):
            self._place({k: v[p * self._lengths[k]:(p + 1) * self._lengths[k]]
                         for k, v in features.items()})

    def _place(self, piece: dict[str, np.ndarray]) -> None:
        """First fit over the open rows."""
        if not any(len(v) for v in piece.values()):
            return
        for i, row in enumerate(self._open):
            if row.fits(piece):
                row.add(piece)
                if row.is_full():
                    self._ready.append(self._open.pop(i).output())
                return
        if len(self._open) == self._node.num_bins:
            self._ready.append(self._open.pop(0).output())
        row = self._new_row()
        row.add(piece)
        if row.is_full():
            self._ready.append(row.output())
        else:
            self._open.append(row)

    def _concat(self, features: dict[str, np.ndarray], index: int) -> None:
        sizes = {len(v) for v in features.values()}
        if len(sizes) > 1:
            raise InvalidArgumentError(
                f"pack_sequences: input element {index}: concat_and_split needs every feature "
                f"to have the same length, got {({k: len(v) for k, v in features.items()})}",
                record_index=index)
        (size,) = sizes
        start = 0
        while start < size:
            if not self._open:
                self._open.append(self._new_row())
            row = self._open[0]
            room = min(len(row.tokens[k]) - row.fill[k] for k in row.fill)
            take = min(room, size - start)
            row.add({k: v[start:start + take] for k, v in features.items()})
            start += take
            if row.is_full():
                self._ready.append(self._open.pop(0).output())

    def _new_row(self) -> _Row:
        assert self._lengths is not None
        return _Row(self._lengths, self._dtypes, self._node.padding_value)

    def _get_state(self) -> State:
        return self._with_input_state({
            "index": self._index, "ended": self._ended,
            # [name, row length, dtype] per feature; empty until the first example.
            "features": [[k, n, self._dtypes[k].str] for k, n in (self._lengths or {}).items()],
            "open": [row.to_state() for row in self._open],
            "ready": [encode(row) for row in self._ready]})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._index = int(state["index"])
        self._ended = bool(state["ended"])
        self._lengths = {k: int(n) for k, n, _ in state["features"]} or None
        self._dtypes = {k: np.dtype(dtype) for k, _, dtype in state["features"]}
        self._open = []
        for saved in state["open"]:
            row = self._new_row()
            row.load_state(saved)
            self._open.append(row)
        self._ready = deque(decode(row) for row in state["ready"])
