"""``ragged_batch``: batch elements whose leaves differ in shape into :class:`RaggedValues`.

As tf.data's ``ragged_batch``, leaf by leaf, from the input's element spec:

* a leaf whose shape is fully known (scalars included) is stacked as ``batch`` stacks it;
* an array leaf with unknown (``None``) dimensions becomes :class:`RaggedValues`, ragged in
  the batch dimension and in every dimension up to the last unknown one; the dimensions
  after it stay uniform (the values' own dimensions), as ``tf.RaggedTensor.from_tensor(leaf,
  ragged_rank)`` batched;
* a :class:`RaggedValues` leaf gains one ragged level (the batch).

tf.data knows every spec from tracing; feedline knows the input's spec only where the graph
says it without running (sources, ``from_generator``'s ``output_signature``, ``batch`` ...).
Where it does not (after a ``map``), the shapes the function gives stand for its traced
spec: a leaf is stacked as long as every element has the first element's shape (tf.data's
dense batch of a ``map`` returning, say, ``np.zeros(3)``); from the first batch where one
differs, that leaf is ragged in all its dimensions, in that batch and every later one (the
state keeps which leaves are). Row splits are int64 (tf.data's default ``row_splits_dtype``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import StructureError
from feedline.core.functions import annotate_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    NoneTensorSpec,
    RaggedTensorSpec,
    TensorSpec,
    batched_spec,
    describe,
    flatten,
    flatten_with_paths,
    pack_as,
    same_structure,
)
from feedline.core.traits import BATCHING
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.formats.example.ragged import RaggedValues, stack_rows
from feedline.transforms.batch import (
    batched_cardinality,
    pull_batch,
    stack_leaves,
    validate_batch_size,
)

LeafPlan = int | None
"""Per leaf: ``None`` stacks it densely; ``r >= 0`` makes it ragged with ``r`` ragged
dimensions after the batch's; ``-1``: decide from the values (the spec is not known)."""

_FROM_VALUES = -1


def leaf_plans(spec: Element | None) -> list[LeafPlan] | None:
    """How each leaf of elements of ``spec`` is batched (``None`` when the spec is unknown).

    Example:
        >>> leaf_plans((TensorSpec((), np.int64), TensorSpec((None, 3), np.float32),
        ...             TensorSpec((2, None), np.int64), TensorSpec((4,), np.int64)))
        [None, 0, 1, None]
    """
    if spec is None:
        return None
    plans: list[LeafPlan] = []
    for leaf in flatten(spec):
        if not isinstance(leaf, TensorSpec) or None not in leaf.shape:
            plans.append(None)
        else:
            plans.append(max(axis for axis, size in enumerate(leaf.shape) if size is None))
    return plans


def batch_leaf(values: list[Any], plan: LeafPlan, path: str) -> Any:
    """One leaf of a ragged batch: stacked, or :class:`RaggedValues` as ``plan`` says.

    Example:
        >>> batch_leaf([np.arange(2), np.arange(3)], 0, "<element>").to_list()
        [[0, 1], [0, 1, 2]]
        >>> batch_leaf([np.int64(1), np.int64(2)], _FROM_VALUES, "<element>")
        array([1, 2])
    """
    if isinstance(values[0], RaggedValues):
        return stack_rows(values, f"ragged_batch: leaf {path}")
    if plan == _FROM_VALUES:
        rank = np.ndim(values[0])
        plan = None if rank == 0 else rank - 1
        check_ranks(values, rank, path)
    if plan is None:
        return stack_leaves(values, path)
    try:
        return stack_rows(values, f"ragged_batch: leaf {path}", ragged_rank=plan)
    except ValueError as error:
        raise StructureError(str(error)) from None


def check_ranks(values: list[Any], rank: int, path: str) -> None:
    """Raise ``StructureError`` unless every value of a leaf is an array of rank ``rank``."""
    for i, value in enumerate(values):
        if isinstance(value, RaggedValues) or np.ndim(value) != rank:
            found = "ragged values" if isinstance(value, RaggedValues) else \
                f"rank {np.ndim(value)}"
            raise StructureError(f"ragged_batch: leaf {path} of batch element {i} has "
                                 f"{found}, but element 0's has rank {rank}")


def _ragged_batched_leaf(spec: Any, batch_dim: int | None) -> Any:
    """A leaf's spec batched by ``ragged_batch`` (tf.data's ``to_ragged_spec``, then
    ``batch``): an array of unknown dimensions becomes ragged up to its last unknown one.

    Example:
        >>> _ragged_batched_leaf(TensorSpec((2, None, 3), np.dtype(np.int64)), None)
        RaggedTensorSpec(shape=(None, 2, None, 3), dtype=int64, ragged_rank=2)
    """
    plan = leaf_plans(spec)
    if isinstance(spec, TensorSpec) and plan and plan[0] is not None:
        return RaggedTensorSpec((batch_dim, *spec.shape), spec.dtype, plan[0] + 1)
    return batched_spec(spec, batch_dim)


def _with_batch_dim(spec: Any, batch_dim: int | None) -> Any:
    """A batch's leaf spec with its first dimension ``batch_dim``."""
    if isinstance(spec, NoneTensorSpec):
        return spec
    return dataclasses.replace(spec, shape=(batch_dim, *spec.shape[1:]))


class ShapesSeen:
    """Which leaves of a dataset without a spec are ragged: those whose elements have not all
    had the first element's shape (the others are stacked, as tf.data stacks a leaf whose
    traced shape is known).

    Example:
        >>> seen = ShapesSeen()
        >>> seen.plan([np.zeros(3), np.ones(3)], 0, "<element>")  # stacked
        >>> seen.plan([np.zeros(2), np.ones(1)], 0, "<element>")  # ragged from now on
        0
        >>> seen.plan([np.zeros(2), np.ones(2)], 0, "<element>"), seen.ragged
        (0, [0])
    """

    def __init__(self) -> None:
        self.shapes: dict[int, tuple[int, ...]] = {}  # leaf -> the first element's shape
        self.ragged: list[int] = []  # leaves found to vary, in the order found

    def plan(self, values: list[Any], leaf: int, path: str) -> LeafPlan:
        """The plan of one leaf for this batch (``None``: stack), learning from ``values``."""
        first = values[0]
        if isinstance(first, RaggedValues):
            return None  # batch_leaf adds the batch's level
        rank = np.ndim(first)
        if rank == 0:
            return None
        check_ranks(values, rank, path)
        if leaf not in self.ragged:
            shape = self.shapes.setdefault(leaf, np.shape(first))
            if all(np.shape(value) == shape for value in values):
                return None
            self.ragged.append(leaf)
        return rank - 1

    def to_state(self) -> list[Any]:
        """The leaves found ragged and the shapes the others have had, JSON-safe."""
        return [list(self.ragged), [[leaf, list(shape)] for leaf, shape in self.shapes.items()]]

    def restore(self, state: list[Any]) -> None:
        """Continue from what :meth:`to_state` gave."""
        ragged, shapes = state
        self.ragged = [int(leaf) for leaf in ragged]
        self.shapes = {int(leaf): tuple(int(d) for d in shape) for leaf, shape in shapes}


@operation("ragged_batch")
class RaggedBatchDataset(UnaryDataset):
    """The node of ``Dataset.ragged_batch(batch_size, drop_remainder)``.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(5).map(lambda n: (n, np.arange(n)))
        >>> [(n.tolist(), r.to_list()) for n, r in RaggedBatchDataset(ds, 3)]
        [([0, 1, 2], [[], [0], [0, 1]]), ([3, 4], [[0, 1, 2], [0, 1, 2, 3]])]
    """

    TRAITS = BATCHING

    def __init__(self, input_dataset: Dataset, batch_size: int, drop_remainder: bool = False,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.batch_size = validate_batch_size(batch_size, "ragged_batch(batch_size)")
        self.drop_remainder = bool(drop_remainder)
        self.name = name or "ragged_batch"

    def _element_spec(self) -> Element | None:
        return None  # found by _traced_element_spec: only the real input says how

    def _traced_element_spec(self) -> Element | None:
        """tf.data's spec: from the input's spec where the graph knows it (each leaf of
        unknown dimensions a :class:`~feedline.RaggedTensorSpec`), else from the first
        batch as its leaves come out; the batch dimension is ``None`` unless
        ``drop_remainder`` (the last batch may be smaller), as ``batch``'s.

        Example:
            >>> import feedline as fl
            >>> fl.Dataset.range(5).ragged_batch(2).element_spec
            TensorSpec(shape=(None,), dtype=int64)
        """
        batch_dim = self.batch_size if self.drop_remainder else None
        inner = self._inputs[0]._element_spec()
        if inner is not None:
            return pack_as(inner, [_ragged_batched_leaf(leaf, batch_dim)
                                   for leaf in flatten(inner)])
        from feedline.core.spec_inference import first_element_spec  # imports transforms

        first = first_element_spec(self)
        if first is None:
            return None
        return pack_as(first, [_with_batch_dim(leaf, batch_dim) for leaf in flatten(first)])

    def cardinality(self) -> int:
        return batched_cardinality(self._inputs[0].cardinality(), self.batch_size,
                                   self.drop_remainder)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RaggedBatchIterator(ctx, self._make_input_iterator(ctx), self.batch_size,
                                   self.drop_remainder,
                                   leaf_plans(self._inputs[0]._element_spec()), self.name)


class RaggedBatchIterator(UnaryIterator):
    """Collects and batches each batch on the consumer's thread (its state: counts, and
    without a spec the leaves found ragged)."""

    OPERATION = "ragged_batch"
    STATE_VERSION = 2  # 2: the leaves found ragged (version 1 made every array leaf ragged)

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, batch_size: int,
                 drop_remainder: bool, plans: list[LeafPlan] | None, name: str) -> None:
        super().__init__(ctx, upstream)
        self._batch_size = batch_size
        self._drop_remainder = drop_remainder
        self._plans = plans
        self._name = name
        self._batches = 0
        self._elements = 0
        self._seen = ShapesSeen()

    def __next__(self) -> Any:
        elements = pull_batch(self._upstream, self._batch_size, self._drop_remainder)
        first_index = self._elements
        index = self._batches
        self._elements += len(elements)
        self._batches += 1
        try:
            return self._batch(elements, first_index)
        except (StructureError, TypeError, ValueError) as error:
            raise annotate_error(error, self._name, index)

    def _batch(self, elements: list[Element], first_index: int) -> Element:
        first = elements[0]
        for i, element in enumerate(elements):
            if not same_structure(first, element):
                raise StructureError(f"ragged_batch: input element {first_index + i} is "
                                     f"{describe(element)}, but the elements are "
                                     f"{describe(first)}")
        paths = [path for path, _ in flatten_with_paths(first)]
        columns = [list(column) for column in zip(*(flatten(element) for element in elements))]
        if self._plans is None:
            plans = [self._seen.plan(column, leaf, path)
                     for leaf, (column, path) in enumerate(zip(columns, paths))]
        else:
            plans = self._plans
        if len(plans) != len(paths):
            raise StructureError(f"ragged_batch: input element {first_index} is "
                                 f"{describe(first)}, which does not match the input's spec")
        return pack_as(first, [batch_leaf(column, plan, path)
                               for column, plan, path in zip(columns, plans, paths)])

    def _get_state(self) -> State:
        return self._with_input_state({"batches": self._batches, "elements": self._elements,
                                       "leaves": self._seen.to_state()})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._batches = int(state["batches"])
        self._elements = int(state["elements"])
        self._seen.restore(state["leaves"])
