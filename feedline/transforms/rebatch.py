"""``rebatch``: re-cut already batched elements into batches of other sizes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import StructureError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import (
    Element,
    NoneTensorSpec,
    batched_spec,
    describe,
    flatten,
    flatten_with_paths,
    pack_as,
    same_structure,
    unbatched_spec,
)
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import as_int, validate_int
from feedline.transforms.unbatch import check_static_batched, split_leaves


def validate_batch_sizes(batch_size: int | Sequence[int]) -> list[int]:
    """``batch_size`` as a non-empty list of sizes (``ValueError`` when malformed).

    An int must be >= 1; a list may hold zeros (empty batches, as tf.data allows) but needs
    at least one positive size, or the dataset would never end.

    Example:
        >>> validate_batch_sizes(3), validate_batch_sizes([2, 0, 1])
        ([3], [2, 0, 1])
    """
    what = "rebatch(batch_size)"
    if isinstance(batch_size, np.ndarray) and batch_size.ndim not in (0, 1):
        raise ValueError(f"{what} must be an int or a list of ints, got an array of shape "
                         f"{batch_size.shape}")
    if not isinstance(batch_size, list | tuple | np.ndarray) or (
            isinstance(batch_size, np.ndarray) and batch_size.ndim == 0):
        return [validate_int(batch_size, what, minimum=1)]
    if not len(batch_size):
        raise ValueError(f"{what} must be an int or a non-empty list of ints, got "
                         f"{batch_size!r}")
    sizes = [as_int(size, f"{what}[{i}]") for i, size in enumerate(batch_size)]
    if min(sizes) < 0 or max(sizes) < 1:
        raise ValueError(f"rebatch(batch_size) sizes must be >= 0 with at least one > 0, "
                         f"got {sizes}")
    return sizes


def concatenate_pieces(pieces: list[list[np.ndarray]], paths: list[str], stage: str,
                       index: int) -> list[np.ndarray]:
    """Join row slices leaf by leaf (a single piece is returned as it is: no copy)."""
    if len(pieces) == 1:
        return pieces[0]
    out = []
    for column, path in zip(zip(*pieces), paths):
        if column[0] is None:  # a None component stays None (tf.data's NoneTensorSpec)
            out.append(None)
            continue
        try:
            out.append(np.concatenate(column))
        except ValueError:
            shapes = ", ".join(str(piece.shape[1:]) for piece in column)
            raise StructureError(
                f"{stage}: cannot join rows of leaf {path} for output batch {index}: the "
                f"input batches have rows of different shapes ({shapes})") from None
    return out


def _rows(leaf: np.ndarray | None, start: int, stop: int) -> np.ndarray | None:
    """Rows ``start:stop`` of a leaf; a ``None`` leaf has ``None`` for any rows."""
    return None if leaf is None else leaf[start:stop]


@operation("rebatch")
class RebatchDataset(UnaryDataset):
    """The node of ``Dataset.rebatch``: ``unbatch().batch(n)`` in one copy, where ``n`` cycles
    through ``batch_size`` when it is a list (tf.data's ``rebatch``).

    Example:
        >>> import feedline as fl
        >>> ds = RebatchDataset(fl.Dataset.range(8).batch(4), [2, 1, 1])
        >>> [b.tolist() for b in ds]
        [[0, 1], [2], [3], [4, 5], [6], [7]]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, batch_size: int | Sequence[int],
                 drop_remainder: bool = False, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.batch_sizes = validate_batch_sizes(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self.name = name or "rebatch"
        check_static_batched(input_dataset._element_spec(), self.name)

    def _static_batch_dim(self, inner: Element) -> int | None:
        # tf.data's rule: fixed only for one size that never leaves a partial batch.
        if len(set(self.batch_sizes)) != 1:
            return None
        size = self.batch_sizes[0]
        if self.drop_remainder:
            return size
        dims = [leaf.shape[0] for leaf in flatten(inner)
                if leaf.shape and leaf.shape[0] is not None]  # None components have no rows
        if not dims or len(set(dims)) != 1 or dims[0] % size:
            return None
        return size

    def _element_spec(self) -> Element | None:
        inner = self._inputs[0]._element_spec()
        if inner is None:
            return None
        return batched_spec(unbatched_spec(inner), self._static_batch_dim(inner))

    def cardinality(self) -> int:
        # As tf.data: not computed (it depends on every input batch's size).
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RebatchIterator(ctx, self._make_input_iterator(ctx), self.batch_sizes,
                               self.drop_remainder, self.name,
                               self._inputs[0]._element_spec())


class RebatchIterator(UnaryIterator):
    """Holds the current input batch and an offset into it; output batches are slices of it,
    joined with slices of the following input batches when one is not enough."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, sizes: list[int],
                 drop_remainder: bool, name: str, input_spec: Element | None) -> None:
        super().__init__(ctx, upstream)
        self._sizes = sizes
        self._drop_remainder = drop_remainder
        self._name = name
        self._input_spec = input_spec
        self._size_index = 0
        self._inputs_taken = 0
        self._batches = 0
        self._exhausted = False
        self._structure: Element = None
        self._leaves: list[np.ndarray] = []
        self._offset = 0
        self._rows = 0

    def _pull(self) -> bool:
        """Hold the next input batch; False at the end of the input."""
        try:
            element = next(self._upstream)
        except StopIteration:
            self._exhausted = True
            return False
        index = self._inputs_taken
        self._inputs_taken += 1
        self._hold(element, index)
        return True

    def _hold(self, element: Element, index: int) -> None:
        leaves, rows = split_leaves(element, self._name, index)
        if self._structure is not None and not same_structure(self._structure, element):
            raise StructureError(f"{self._name}: input element {index} is {describe(element)}, "
                                 f"earlier ones are {describe(self._structure)}")
        self._structure, self._leaves, self._rows, self._offset = element, leaves, rows, 0

    def _empty_batch(self) -> Element:
        """A batch of zero rows, shaped like the input's rows."""
        if self._structure is None:
            if self._input_spec is not None:
                # Unknown dimensions become 0: there is no data in them anyway (as tf.data).
                return pack_as(self._input_spec, [
                    None if isinstance(leaf, NoneTensorSpec) else
                    np.empty((0, *(d or 0 for d in leaf.shape[1:])), dtype=leaf.dtype)
                    for leaf in flatten(self._input_spec)])
            if self._exhausted or not self._pull():
                raise StopIteration
        return pack_as(self._structure, [_rows(leaf, self._offset, self._offset)
                                         for leaf in self._leaves])

    def __next__(self) -> Any:
        if self._exhausted and self._offset >= self._rows:
            raise StopIteration
        desired = self._sizes[self._size_index]
        if desired == 0:
            batch = self._empty_batch()
            self._size_index = (self._size_index + 1) % len(self._sizes)
            self._batches += 1
            return batch
        pieces: list[list[np.ndarray]] = []
        have = 0
        while have < desired:
            if self._offset >= self._rows and (self._exhausted or not self._pull()):
                break
            end = min(self._offset + desired - have, self._rows)
            pieces.append([_rows(leaf, self._offset, end) for leaf in self._leaves])
            have += end - self._offset
            self._offset = end
        self._size_index = (self._size_index + 1) % len(self._sizes)
        if have == 0 or (self._drop_remainder and have < desired):
            raise StopIteration
        index = self._batches
        self._batches += 1
        paths = [path for path, _ in flatten_with_paths(self._structure)]
        return pack_as(self._structure, concatenate_pieces(pieces, paths, self._name, index))

    def _get_state(self) -> State:
        # The rows of the held input batch not yet handed out (a list: one shape at every step).
        held = []
        if self._offset < self._rows:
            held = [encode(pack_as(self._structure,
                                   [_rows(leaf, self._offset, self._rows)
                                    for leaf in self._leaves]))]
        return self._with_input_state({
            "size_index": self._size_index, "inputs_taken": self._inputs_taken,
            "batches": self._batches, "exhausted": self._exhausted, "held": held})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._size_index = state["size_index"]
        self._inputs_taken = state["inputs_taken"]
        self._batches = state["batches"]
        self._exhausted = state["exhausted"]
        self._structure, self._leaves, self._rows, self._offset = None, [], 0, 0
        if state["held"]:
            self._hold(decode(state["held"][0]), self._inputs_taken - 1)
