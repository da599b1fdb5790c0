"""``concatenate``: the elements of one dataset followed by those of another (chains of
concatenations are one node reading each input in turn)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError, StructureError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    TensorSpec,
    describe,
    flatten,
    flatten_with_paths,
    pack_as,
    same_structure,
)
from feedline.core.traits import POSITIONAL


def common_spec(first: Element, second: Element, what: str) -> Element | None:
    """The element spec admitting the elements of both specs (differing dims become ``None``).

    Raises :class:`StructureError` naming ``what`` when the nests or a leaf's dtype differ, as
    tf.data refuses to mix them. ``None`` (not known statically) when either spec is ``None``
    or a leaf's rank differs (feedline specs cannot say "any rank").

    Example:
        >>> a = (TensorSpec((2,), np.dtype("int64")), TensorSpec((), np.dtype(object)))
        >>> b = (TensorSpec((3,), np.dtype("int64")), TensorSpec((), np.dtype(object)))
        >>> common_spec(a, b, "concatenate()")
        (TensorSpec(shape=(None,), dtype=int64), TensorSpec(shape=(), dtype=object))
    """
    if first is None or second is None:
        return None
    if not same_structure(first, second):
        raise StructureError(f"{what}: the datasets' elements have different structures: "
                             f"{describe(first)} vs {describe(second)}")
    leaves: list[TensorSpec] = []
    for (path, a), b in zip(flatten_with_paths(first), flatten(second)):
        if np.dtype(a.dtype) != np.dtype(b.dtype):
            raise StructureError(f"{what}: leaf {path} has dtype {np.dtype(a.dtype).name} in one "
                                 f"dataset and {np.dtype(b.dtype).name} in the other")
        if len(a.shape) != len(b.shape):
            return None
        leaves.append(a.most_specific_common(b))
    return pack_as(first, leaves)


@operation("concatenate")
class ConcatenateDataset(Dataset):
    """The node of ``first.concatenate(second)``: the elements of its inputs, one after the other.

    Chained concatenations are one node: an input that is itself a concatenation contributes
    its inputs, so ``a.concatenate(b).concatenate(c)`` reads ``[a, b, c]``. A pipeline that
    concatenates thousands of datasets (one per file, say) then stays one level deep, and
    nothing that walks it (iteration, cardinality, checkpoints, graph rewrites,
    fingerprints) recurses once per dataset.

    The element specs must have the same structure and dtypes (checked when the dataset is
    built if they are known statically); the result's cardinality is the sum of the inputs'
    (``INFINITE`` if one is infinite, else ``UNKNOWN`` if one is unknown).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).concatenate(fl.Dataset.range(10, 12))
        >>> [int(x) for x in ds], ds.cardinality()
        ([0, 1, 2, 10, 11], 5)
        >>> len(ds.concatenate(fl.Dataset.range(1))._inputs)
        3
    """

    TRAITS = POSITIONAL

    # Derived from the inputs, which the fingerprint covers already.
    _NOT_FINGERPRINTED = frozenset({"_spec"})

    def __init__(self, first: Dataset, second: Dataset, name: str | None = None) -> None:
        if not isinstance(second, Dataset):
            raise TypeError(f"concatenate() needs a Dataset, got {type(second).__name__}")
        inputs: list[Dataset] = []
        inherited = None
        for part in (first, second):
            # Exactly this class: a subclass may behave differently and stays a node.
            if type(part) is ConcatenateDataset:
                inputs.extend(part._inputs)
                inherited = inherited or (part.name if part.name != "concatenate" else None)
            else:
                inputs.append(part)
        super().__init__(inputs)
        # The name is not part of the graph's meaning (fingerprints leave it out), so merging
        # does not depend on it; a name given to a merged concatenation is kept.
        self.name = name or inherited or "concatenate"
        # Each side's spec is known in O(1) (a merged input keeps its folded spec), so a chain
        # of n concatenations costs O(n) spec merges, not O(n^2). Fails early on a mismatch.
        self._spec = common_spec(first._element_spec(), second._element_spec(), self.name)

    def _fold_specs(self) -> Element | None:
        spec = self._inputs[0]._element_spec()
        for part in self._inputs[1:]:
            spec = common_spec(spec, part._element_spec(), self.name)
        return spec

    def _with_inputs(self, inputs: Sequence[Dataset]) -> Dataset:
        clone = super()._with_inputs(inputs)
        assert isinstance(clone, ConcatenateDataset)
        clone._spec = clone._fold_specs()  # rewritten inputs may declare other specs
        return clone

    def _element_spec(self) -> Element | None:
        return self._spec

    def cardinality(self) -> int:
        total, unknown = 0, False
        for part in self._inputs:
            n = part.cardinality()
            if n == INFINITE:
                return INFINITE
            if n == UNKNOWN:
                unknown = True
            else:
                total += n
        return UNKNOWN if unknown else total

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ConcatenateIterator(ctx, self._inputs, self.name)


class ConcatenateIterator(DatasetIterator):
    """Reads the inputs one after the other: the next input's iterator is built when the
    current one ends (and the current one closed), as tf.data does.

    The state is ``{"index": i, "input": [state of input i]}``. The state of input ``i`` sits
    in a one-element list: the inputs' states may differ in shape, and a list keeps this
    stage's own keys and kinds of value the same whichever input is running.
    """

    # 2: one node for a chain of concatenations ({"index", "input"}, was {"phase", "inputs"}).
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, sources: Sequence[Dataset], name: str) -> None:
        super().__init__(ctx, [sources[0]._make_iterator(ctx)])
        self._sources = tuple(sources)
        self._name = name
        self._index = 0

    def _switch_to(self, index: int) -> DatasetIterator:
        # Built before the current one is closed: if building fails, this iterator still
        # stands on its (finished) input and the next call tries again.
        upstream = self._sources[index]._make_iterator(self._ctx)
        self._inputs[0].close()
        self._index = index
        self._inputs = [upstream]
        return upstream

    def __next__(self) -> Any:
        # A loop, not a recursion, over inputs that are empty.
        while True:
            try:
                return next(self._inputs[0])
            except StopIteration:
                if self._index + 1 >= len(self._sources):
                    raise
            self._switch_to(self._index + 1)

    def _get_state(self) -> State:
        return {"index": self._index, "input": [self._inputs[0].state_dict()]}

    def _set_state(self, state: State) -> None:
        index, inner = state["index"], state["input"]
        if isinstance(index, bool) or not isinstance(index, int) \
                or not 0 <= index < len(self._sources):
            raise CheckpointError(f"{self._name}: input {index!r} in the state is not one of "
                                  f"the {len(self._sources)} inputs")
        if not isinstance(inner, list) or len(inner) != 1:
            raise CheckpointError(f"{self._name}: the state should hold the state of one "
                                  f"input; found {inner!r:.80}")
        self._switch_to(index).load_state_dict(inner[0])
