"""Map fusion: a run of inline ``map`` and ``filter`` stages becomes one stage.

Each stage of a pull pipeline costs a ``next()`` hop per element; a fused run costs one hop
in all and calls the user functions in a tight loop. Errors still name the original stage
and the element index that stage saw, and the output is identical element for element.

A map with ``num_parallel_calls`` (``AUTOTUNE`` included) keeps its stage: fused into this
loop it would lose its threads (and ``AUTOTUNE``'s choice of threads, processes or inline
calls, made from measuring it), and two of them fused into one parallel stage would share
one placement and write one stage's checkpoint where the graph has two. Where fusing them
is surely right, elementwise functions over a ``range``,
:mod:`~feedline.optimize.map_vectorization` takes the chain whole, parallel or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.functions import annotate_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import Element, normalize_output
from feedline.core.traits import INDEPENDENT, ONE_TO_ONE, OperationTraits
from feedline.execution.positions import initial_position
from feedline.optimize.graph import rewrite_graph
from feedline.transforms.filter import FilterDataset, FilterIterator, predicate_result
from feedline.transforms.map import MapDataset, MapIterator, _Unsplit

_TRUE, _FALSE = np.True_, np.False_


class FusedStage:
    """One original stage inside a fused chain."""

    def __init__(self, is_filter: bool, fn: Callable[..., Any], name: str, unpack: bool) -> None:
        self.is_filter = is_filter
        self.fn = fn
        self.name = name
        self.unpack = unpack


class FusedInlineDataset(Dataset):
    """A chain of inline maps and filters run as one stage (built only by :func:`fuse_maps`)."""

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, stages: Sequence[FusedStage]) -> None:
        super().__init__([input_dataset])
        self.stages = tuple(stages)
        self.name = " -> ".join(stage.name for stage in stages)
        self._all_maps = not any(stage.is_filter for stage in stages)

    def traits(self) -> OperationTraits:
        """One-to-one when every fused stage is a map; a filter makes it independent."""
        return ONE_TO_ONE if self._all_maps else INDEPENDENT

    def cardinality(self) -> int:
        from feedline.core.constants import UNKNOWN

        return self._inputs[0].cardinality() if self._all_maps else UNKNOWN

    def _element_spec(self) -> Element | None:
        return None

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return FusedInlineIterator(ctx, self._inputs[0]._make_iterator(ctx), self.stages)


class FusedInlineIterator(DatasetIterator):
    """Runs the chain in one loop, and checkpoints as the unfused chain does.

    Its state is exactly the nested states the separate ``map`` and ``filter`` iterators
    would write, so a checkpoint taken with ``map_fusion`` on loads with it off and the other
    way round. A state that needs re-reading (from a read-ahead map, see
    :mod:`feedline.execution.positions`) is run by the unfused chain until it is caught up.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 stages: Sequence[FusedStage]) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._stages = stages
        # Each map's elements keep its first one's dtypes, as the unfused map checks them.
        self._plan = [(s.is_filter, s.fn, s.unpack, None if s.is_filter else DtypeGuard(s.name))
                      for s in stages]
        # Elements each stage has received: the index its errors report.
        self._seen = [0] * len(stages)
        # The unfused chain, while it runs a restored state that needs re-reading.
        self._chain: list[DatasetIterator] | None = None

    def __next__(self) -> Any:
        if self._chain is not None:
            return self._next_unfused()
        upstream, plan, seen = self._upstream, self._plan, self._seen
        while True:
            element = next(upstream)
            for position, (is_filter, fn, unpack, dtypes) in enumerate(plan):
                seen[position] += 1
                try:
                    out = fn(*element) if unpack and type(element) is tuple else fn(element)
                    if dtypes is not None:
                        # Inside the try: a result that is no element is this stage's error.
                        out = dtypes.check(normalize_output(out), seen[position] - 1)
                except Exception as error:  # noqa: BLE001 - re-raised with the stage named
                    raise annotate_error(error, self._stages[position].name, seen[position] - 1)
                if is_filter:
                    if out is True or out is _TRUE:
                        continue
                    if out is False or out is _FALSE or not predicate_result(
                            out, self._stages[position].name, seen[position] - 1):
                        break
                else:
                    element = out
            else:
                return element

    def _next_unfused(self) -> Any:
        chain = self._chain
        assert chain is not None
        try:
            return next(chain[-1])
        finally:
            if not any(isinstance(it, MapIterator) and it._replay is not None for it in chain):
                # Caught up: back to the fused loop, at the chain's counts.
                self._seen = [it._index for it in chain]  # type: ignore[attr-defined]
                self._chain = None

    def _unfused_chain(self) -> list[DatasetIterator]:
        """The separate iterators of the stages, reading this stage's upstream."""
        chain: list[DatasetIterator] = []
        below = self._upstream
        for stage in self._stages:
            if stage.is_filter:
                below = FilterIterator(self._ctx, below, stage.fn, stage.name)
            else:
                fn = stage.fn if stage.unpack else _Unsplit(stage.fn)
                below = MapIterator(self._ctx, below, fn, stage.name)
            chain.append(below)
        return chain

    def state_dict(self) -> State:
        if self._chain is not None:
            return self._chain[-1].state_dict()
        state = self._upstream.state_dict()
        for stage, seen in zip(self._stages, self._seen):
            if stage.is_filter:
                state = {"type": FilterIterator.state_type(),
                         "version": FilterIterator.STATE_VERSION, "index": seen, "input": state}
            else:
                state = {"type": MapIterator.state_type(), "version": MapIterator.STATE_VERSION,
                         **initial_position(state, seen)}
        return state

    def load_state_dict(self, state: State) -> None:
        # The separate iterators check and load the nested states; when none of them has
        # anything to re-read, the fused loop takes over at their counts.
        chain = self._unfused_chain()
        chain[-1].load_state_dict(state)
        if any(isinstance(it, MapIterator) and it._replay is not None for it in chain):
            self._chain = chain
        else:
            self._chain = None
            self._seen = [it._index for it in chain]  # type: ignore[attr-defined]

    def _get_state(self) -> State:  # unused: state_dict() writes the chain's layout
        return {}

    def _set_state(self, state: State) -> None:  # unused: load_state_dict() is overridden
        return None


def _as_stage(node: Dataset) -> FusedStage | None:
    if isinstance(node, MapDataset) and node.num_parallel_calls is None:
        return FusedStage(False, node.map_func, node.name, node.unpack_tuples)
    if isinstance(node, FilterDataset):
        return FusedStage(True, node.predicate, node.name, True)
    return None


def fuse_maps(dataset: Dataset) -> Dataset:
    """Rewrite the graph so that runs of two or more inline maps/filters are one stage."""

    def replace(node: Dataset, rewrite: Callable[[Dataset], Dataset]) -> Dataset | None:
        chain: list[FusedStage] = []
        bottom = node
        while (stage := _as_stage(bottom)) is not None:
            chain.append(stage)
            bottom = bottom._inputs[0]
        if len(chain) < 2:
            return None
        return FusedInlineDataset(rewrite(bottom), list(reversed(chain)))

    return rewrite_graph(dataset, replace)
