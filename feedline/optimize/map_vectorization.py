"""Map vectorization: ``range`` followed by elementwise ``map``/``filter`` runs on whole chunks.

tf.data's map vectorization rewrite runs a map once per batch on the stacked input when the
function allows it. For Python functions "allows" must be proven, never guessed: a function
qualifies only when its bytecode is one arithmetic or comparison expression of its single
argument and numeric constants (``lambda x: x + 1``, ``lambda x: x % 2 == 0``,
``lambda x: (x * 3 - 1) / 2``): no calls, attributes, globals, closures, branches or
subscripts. NumPy evaluates such an expression on an array exactly as on each of its scalars
(NEP 50 promotion: an ``int64`` with a Python ``int`` stays ``int64``, on scalars and arrays
alike), so the elements are identical, element for element, dtype for dtype.

The rewrite applies to ``range(...)`` followed by a run of such maps and filters (and the
``batch`` after them): a few NumPy calls per chunk of 1,024 inputs instead of a Python call
per stage per element. Anything unusual falls back to the element-by-element path for that
chunk, which then behaves exactly as without the rewrite: a NumPy floating-point condition
(division by zero, overflow into ``inf``, invalid values), an exception, or a result that is
not an array of the input's shape (a predicate returning integers is then the usual
``TypeError``). One difference remains, documented: integer overflow in an array wraps
silently where the scalar path also prints NumPy's overflow ``RuntimeWarning``.

Whatever ``num_parallel_calls`` (``AUTOTUNE``, as tf.data programs are written, or a number)
and ``deterministic`` say: such a function is a sub-microsecond expression on a scalar that
holds the GIL and touches nothing else, so threads only add hand-offs to it (``x + 1``
with ``AUTOTUNE``: ~1M elements/s on threads, ~77M on chunks); input order is one that
``deterministic=False`` allows. Only ``executor="process"`` is kept as written (a function
that does not pickle is that graph's error).

A checkpoint is the one the element-by-element graph writes (the range position and each
stage's element count; a map or batch on threads writes its inline form's layout), so it
loads with the rewrite on or off, and a read-ahead state is re-read element by element.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import Element
from feedline.core.traits import IN_MEMORY_SOURCE
from feedline.optimize.graph import rewrite_graph
from feedline.optimize.map_fusion import FusedInlineDataset, FusedStage
from feedline.sources.range import RangeDataset, RangeIterator
from feedline.transforms.batch import BatchDataset, stack_elements
from feedline.transforms.filter import FilterDataset
from feedline.transforms.map import MapDataset

CHUNK = 1024
"""Inputs evaluated at once: large enough to amortize NumPy's per-call cost (~1 µs), small
enough that a chunk's arrays stay in cache and the first element comes quickly."""

# Operators whose NumPy scalar and array forms agree element for element (``@`` does not).
_BINARY_OPS = frozenset({"+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>"})
_COMPARISONS = frozenset({"<", "<=", "==", "!=", ">", ">="})
_NEUTRAL_OPCODES = frozenset({"RESUME", "NOP", "CACHE", "RETURN_VALUE", "LOAD_FAST",
                              "LOAD_FAST_CHECK", "LOAD_CONST", "RETURN_CONST",
                              "UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_POSITIVE"})
_INT64 = (-2**63, 2**63 - 1)


def _numeric_constant(value: Any) -> bool:
    if type(value) is int:
        return _INT64[0] <= value <= _INT64[1]
    return type(value) in (float, bool) or value is None  # None: the code object's docstring


def is_elementwise(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is provably one elementwise expression of its single argument.

    Such a function gives, on a NumPy array, the array of what it gives on each element.

    Example:
        >>> is_elementwise(lambda x: x % 2 == 0), is_elementwise(lambda x: abs(x))
        (True, False)
    """
    if not isinstance(fn, types.FunctionType) or fn.__closure__ or fn.__defaults__ \
            or fn.__kwdefaults__:
        return False
    code = fn.__code__
    if (code.co_argcount != 1 or code.co_kwonlyargcount or code.co_posonlyargcount > 1
            or code.co_flags & (0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200)  # */** gen async
            or code.co_names or code.co_freevars or code.co_cellvars):
        return False
    uses_argument = False
    for instruction in dis.get_instructions(code):
        name = instruction.opname
        if name == "BINARY_OP":
            if instruction.argrepr not in _BINARY_OPS:
                return False
        elif name == "COMPARE_OP":
            if instruction.argrepr.replace("bool(", "").rstrip(")") not in _COMPARISONS:
                return False
        elif name not in _NEUTRAL_OPCODES:
            return False
        if name.startswith("LOAD_FAST"):
            if instruction.arg != 0:
                return False
            uses_argument = True
        if name in ("LOAD_CONST", "RETURN_CONST") and not _numeric_constant(instruction.argval):
            return False
    return uses_argument


class VectorizedRangeDataset(Dataset):
    """``range`` and a run of elementwise maps and filters, evaluated per chunk, optionally
    with the ``batch`` that follows (batches are then sliced from the chunk's results: no
    element is boxed).

    Built only by :func:`vectorize_maps`. ``replaced`` is the inline form of the nodes it
    stands for (a map, a filter or a fused chain of them over the range, or a batch of
    that): its iterator runs the chunks that fall back, and its states are the ones written
    and read.
    """

    TRAITS = IN_MEMORY_SOURCE  # every worker process may read all of it

    def __init__(self, replaced: Dataset, source: RangeDataset,
                 plan: Sequence[tuple[bool, Callable[[Any], Any]]],
                 batch: tuple[int, bool] | None = None) -> None:
        super().__init__()
        self.replaced = replaced
        self.source = source
        self.plan = tuple(plan)
        self.batch = batch

    def cardinality(self) -> int:
        return self.replaced.cardinality()

    def _element_spec(self) -> Element | None:
        return self.replaced._element_spec()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return VectorizedRangeIterator(ctx, self)


class _Counts:
    """Reads and sets the counters of the element-by-element iterators, whose states this
    rewrite writes: the range position, each stage's count of received elements (a fused
    chain keeps a list, a lone map or filter an index) and the batches handed out."""

    def __init__(self, scalar: DatasetIterator, batched: bool, stages: int) -> None:
        self.batch = scalar if batched else None
        self.chain = scalar._inputs[0] if batched else scalar
        self.range = self.chain._inputs[0]
        if not isinstance(self.range, RangeIterator):
            raise TypeError(f"expected a range below {type(self.chain).__name__}")
        self.fused = stages > 1

    def stages(self) -> list[int]:
        chain = self.chain
        return list(chain._seen) if self.fused else [chain._index]  # type: ignore[attr-defined]

    def set_stages(self, counts: list[int]) -> None:
        if self.fused:
            self.chain._seen = list(counts)  # type: ignore[attr-defined]
        else:
            self.chain._index = counts[0]  # type: ignore[attr-defined]

    def catching_up(self) -> bool:
        """Whether a restored state is still being re-read element by element (a state of a
        read-ahead map or batch): until it is, only the element-by-element iterators run."""
        return any(getattr(it, "_replay", None) is not None or getattr(it, "_chain", None)
                   is not None for it in (self.batch, self.chain) if it is not None)

    def batches(self) -> int:
        return self.batch._batches if self.batch is not None else 0  # type: ignore[attr-defined]

    def set_batches(self, count: int) -> None:
        if self.batch is not None:
            self.batch._batches = count  # type: ignore[attr-defined]


class VectorizedRangeIterator(DatasetIterator):
    """Evaluates a chunk of the range through every stage with NumPy and hands out its
    surviving elements (or batches sliced from them); a chunk whose vectorized result could
    differ from the element-by-element one runs element by element instead.

    Invariant: the element-by-element iterators' counters stand at the start of the current
    chunk; :meth:`state_dict` moves them to just after the last element handed out (where
    they would be had they produced it) for the time of taking their state.
    """

    def __init__(self, ctx: IteratorContext, dataset: VectorizedRangeDataset) -> None:
        self._scalar = dataset.replaced._make_iterator(ctx)
        super().__init__(ctx, [self._scalar])
        self._counts = _Counts(self._scalar, dataset.batch is not None, len(dataset.plan))
        self._chain = self._counts.chain
        self._range = self._counts.range
        values = dataset.source.range
        self._start, self._step, self._length = values.start, values.step, len(values)
        self._dtype = dataset.source.dtype
        self._plan = dataset.plan
        self._batch_size, self._drop_remainder = dataset.batch or (0, False)
        self._fallback_until = 0  # range position up to which inputs run element by element
        self._catching_up = False
        self._clear_chunk()

    def _clear_chunk(self) -> None:
        self._values: np.ndarray | None = None  # the current chunk's surviving elements
        self._items: list[Any] = []  # the same as NumPy scalars (element mode)
        self._taken = 0  # how many of them went out
        self._chunk_end = 0
        self._chunk_stage_counts: list[int] = []
        self._offsets: np.ndarray | None = None  # each survivor's input offset in the chunk
        self._received: list[np.ndarray] = []  # per stage: offsets of the inputs it received

    # ------------------------------------------------------------------ elements
    def __next__(self) -> Any:
        if self._batch_size:
            if self._catching_up:
                return self._next_caught_up(self._scalar)
            return self._next_batch()
        while self._taken >= len(self._items):
            if not self._next_chunk():
                if self._catching_up:
                    return self._next_caught_up(self._chain)
                return next(self._chain)
        index = self._taken
        self._taken = index + 1
        return self._items[index]

    def _next_chunk(self) -> bool:
        """Move to the next chunk; False when the next input must run element by element."""
        if self._values is not None:  # the finished chunk: counters to its end
            self._range._position = self._chunk_end
            self._counts.set_stages([c + len(r) for c, r in
                                     zip(self._chunk_stage_counts, self._received)])
            self._clear_chunk()
        if self._catching_up:
            return False
        position = self._range._position
        return position >= self._fallback_until and self._evaluate_chunk(position)

    def _next_caught_up(self, iterator: DatasetIterator) -> Any:
        """The next element (or batch) of a restored iterator still re-reading."""
        try:
            return next(iterator)
        finally:
            self._catching_up = self._counts.catching_up()

    def _evaluate_chunk(self, position: int) -> bool:
        end = min(position + CHUNK, self._length)
        if end <= position:
            return False
        values = (self._start + self._step * np.arange(position, end, dtype=np.int64)) \
            .astype(self._dtype, copy=False)
        offsets = np.arange(end - position)
        received: list[np.ndarray] = []
        try:
            with np.errstate(all="raise"):
                for is_filter, fn in self._plan:
                    received.append(offsets)
                    result = fn(values)
                    if type(result) is not np.ndarray or result.shape != values.shape:
                        raise TypeError("not elementwise on this input")
                    if is_filter:
                        if result.dtype != np.bool_:
                            raise TypeError("the predicate's result is not boolean")
                        values, offsets = values[result], offsets[result]
                    else:
                        values = result
        except Exception:  # noqa: BLE001 - this chunk runs element by element, exactly
            self._fallback_until = end
            return False
        self._values, self._offsets, self._received = values, offsets, received
        self._items = [] if self._batch_size else list(values)
        self._chunk_end = end
        self._chunk_stage_counts = self._counts.stages()
        return True

    # ------------------------------------------------------------------ batches
    def _next_batch(self) -> Any:
        size = self._batch_size
        pieces: list[np.ndarray] = []
        singles: list[Any] | None = None  # elements from the element-by-element path
        have = 0
        while have < size:
            values = self._values
            if values is not None and self._taken < len(values):
                piece = values[self._taken:self._taken + size - have]
                self._taken += len(piece)
                have += len(piece)
                if singles is None:
                    pieces.append(piece)
                else:
                    singles.extend(piece)
                continue
            if self._next_chunk():
                continue
            try:
                element = next(self._chain)
            except StopIteration:
                break
            if singles is None:
                singles = [item for piece in pieces for item in piece]
            singles.append(element)
            have += 1
        if not have or (self._drop_remainder and have < size):
            raise StopIteration
        self._counts.set_batches(self._counts.batches() + 1)
        if singles is not None:
            return stack_elements(singles)
        return pieces[0].copy() if len(pieces) == 1 else np.concatenate(pieces)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> State:
        if self._values is None or not self._taken:
            return self._scalar.state_dict()  # the counters are exact
        chunk_start = self._range._position
        last = self._taken - 1
        offset = int(self._offsets[last])  # type: ignore[index]
        self._range._position = chunk_start + offset + 1
        self._counts.set_stages([
            count + int(np.searchsorted(received, offset, side="right"))
            for count, received in zip(self._chunk_stage_counts, self._received)])
        try:
            return self._scalar.state_dict()
        finally:
            self._range._position = chunk_start
            self._counts.set_stages(self._chunk_stage_counts)

    def load_state_dict(self, state: State) -> None:
        self._scalar.load_state_dict(state)
        self._clear_chunk()
        self._fallback_until = 0
        self._catching_up = self._counts.catching_up()

    def _get_state(self) -> State:
        # Not called: state_dict() above is the element-by-element graph's own.
        return self._scalar.state_dict()

    def _set_state(self, state: State) -> None:
        self._scalar.load_state_dict(state)


def _stages_over_range(node: Dataset) -> tuple[RangeDataset, list[FusedStage]] | None:
    """The range under ``node`` and the maps and filters between them, first stage first,
    when ``node`` is such a chain (of maps on threads, whatever their ``num_parallel_calls``,
    filters and fused chains of them) directly over a ``range``."""
    stages: list[FusedStage] = []
    while True:
        if isinstance(node, FusedInlineDataset):
            stages.extend(reversed(node.stages))
        elif isinstance(node, MapDataset) and node.executor != "process":
            stages.append(FusedStage(False, node.map_func, node.name, node.unpack_tuples))
        elif isinstance(node, FilterDataset):
            stages.append(FusedStage(True, node.predicate, node.name, True))
        elif type(node) is RangeDataset and stages:
            return node, stages[::-1]
        else:
            return None
        node = node._inputs[0]


def _element_by_element(node: Dataset, source: RangeDataset,
                        stages: list[FusedStage]) -> Dataset:
    """``node``'s chain as inline stages: the graph whose iterator runs the chunks that
    fall back and writes (and reads) the states. A map on threads and its inline form write
    one state layout (:mod:`feedline.execution.positions`), as a fused chain and its
    separate stages do, so the states are those of ``node`` as written."""
    if isinstance(node, FusedInlineDataset) and node._inputs[0] is source:
        return node
    if len(stages) > 1:
        return FusedInlineDataset(source, stages)
    if isinstance(node, MapDataset) and node.num_parallel_calls is None:
        return node
    if isinstance(node, FilterDataset):
        return node
    stage = stages[0]
    return MapDataset(source, stage.fn, name=stage.name, unpack_tuples=stage.unpack)


def _plan_of(node: Dataset) -> tuple[Dataset, RangeDataset, list[tuple[bool, Any]]] | None:
    """``(element-by-element graph, range, [(is_filter, fn), ...])`` when ``node`` is a
    chain of maps and filters over a range (see :func:`_stages_over_range`) whose functions
    are all elementwise, and the range's values fit its dtype."""
    found = _stages_over_range(node)
    if found is None:
        return None
    source, stages = found
    if not all(is_elementwise(stage.fn) for stage in stages):
        return None
    dtype, values = source.dtype, source.range
    if dtype.kind not in "iu":
        return None
    info = np.iinfo(dtype)
    if len(values) and not info.min <= min(values[0], values[-1]) <= max(
            values[0], values[-1]) <= info.max:
        return None  # the scalar path raises OverflowError for such values; keep it
    return (_element_by_element(node, source, stages), source,
            [(stage.is_filter, stage.fn) for stage in stages])


def vectorize_maps(dataset: Dataset) -> Dataset:
    """Rewrite every chain of maps and filters (fused or not, inline or on threads) over a
    ``range`` whose functions are all elementwise, with the ``batch`` after it if there is
    one, into a :class:`VectorizedRangeDataset`.

    Runs after :func:`~feedline.optimize.map_fusion.fuse_maps`; a chain that fusion left
    apart (maps on threads, or fusion switched off) is vectorized whole all the same, and
    its chunks that fall back run as one inline fused stage (same elements and states).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(10).map(lambda x: x * 3).filter(lambda x: x % 2 == 0)
        >>> from feedline.optimize.map_fusion import fuse_maps
        >>> rewritten = vectorize_maps(fuse_maps(ds))
        >>> type(rewritten).__name__, [int(x) for x in rewritten]
        ('VectorizedRangeDataset', [0, 6, 12, 18, 24])
    """

    def replace(node: Dataset, rewrite: Callable[[Dataset], Dataset]) -> Dataset | None:
        found = _plan_of(node)
        if found is not None:
            return VectorizedRangeDataset(*found)
        if isinstance(node, BatchDataset) and (batched := _plan_of(node._inputs[0])) is not None:
            scalar, source, plan = batched
            inline_batch = node if node.num_parallel_calls is None and scalar is node._inputs[0] \
                else BatchDataset(scalar, node.batch_size, node.drop_remainder, name=node.name)
            return VectorizedRangeDataset(inline_batch, source, plan,
                                          batch=(node.batch_size, node.drop_remainder))
        return None

    return rewrite_graph(dataset, replace)
