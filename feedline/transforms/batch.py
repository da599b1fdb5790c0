"""``batch``: stack consecutive elements leaf by leaf."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.constants import AUTOTUNE, INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import StructureError
from feedline.core.functions import annotate_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State, chunk_reader
from feedline.core.random_access import DerivedReader, RandomAccessReader
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    batched_spec,
    describe,
    flatten,
    flatten_with_paths,
    pack_as,
    same_structure,
)
from feedline.core.traits import BATCHING
from feedline.core.validation import resolve_parallelism, validate_int, validate_parallelism
from feedline.execution.executor import make_executor
from feedline.execution.positions import PositionReader, initial_position, replay_from
from feedline.execution.read_ahead import ReadAhead
from feedline.execution.stage_knobs import ThreadStageKnobs, thread_bounds
from feedline.execution.window import PositionedWindow
from feedline.formats.example.sparse import SparseValues


def stack_leaves(values: Sequence[Any], path: str = "<element>") -> Any:
    """Stack one leaf of every element of a batch into an array with a leading batch dimension.

    ``bytes``/``str`` leaves give object arrays, datasets (``window``'s) an object array of
    datasets (tf.data's batch of datasets), and ``None`` leaves ``None`` (tf.data's
    ``NoneTensorSpec`` component). Shapes must agree.

    Example:
        >>> stack_leaves([np.int64(1), np.int64(2)]).tolist()
        [1, 2]
        >>> stack_leaves([None, None]) is None
        True
    """
    first = values[0]
    if isinstance(first, bytes | str):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    if isinstance(first, np.ndarray):
        return _stack_arrays(values, path)
    if first is None:
        for i, value in enumerate(values):
            if value is not None:
                raise StructureError(f"cannot batch: leaf {path} of batch element {i} is "
                                     f"{type(value).__name__}, but element 0 has None there")
        return None
    if isinstance(first, SparseValues):  # tf.data batches SparseTensors of any lengths
        if not all(isinstance(value, SparseValues) for value in values):
            raise StructureError(f"cannot batch leaf {path}: element 0 is sparse, not all are")
        try:
            return SparseValues.stack(list(values))
        except ValueError as error:
            raise StructureError(f"cannot batch leaf {path}: {error}") from None
    if isinstance(first, Dataset):
        out = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):  # one by one: NumPy would read a dataset's items
            if not isinstance(value, Dataset):
                raise StructureError(f"cannot batch: leaf {path} of batch element {i} is "
                                     f"{type(value).__name__}, but element 0 has a dataset "
                                     "there")
            out[i] = value
        return out
    try:
        out = np.asarray(values)
    except ValueError as error:
        raise StructureError(f"cannot batch leaf {path}: {error}") from None
    if out.dtype == object:  # scalars mixed with None, datasets or arrays
        for i, value in enumerate(values):
            if value is None or isinstance(value, Dataset | np.ndarray):
                raise StructureError(f"cannot batch: leaf {path} of batch element {i} is "
                                     f"{type(value).__name__}, but element 0 has "
                                     f"{type(first).__name__} there")
    return out


def _stack_arrays(values: Sequence[Any], path: str) -> np.ndarray:
    """``values``, arrays of one shape, stacked along a new leading batch dimension."""
    first = values[0]
    shape = first.shape
    for i, value in enumerate(values):
        if not isinstance(value, np.ndarray) or value.shape != shape:
            found = "None" if value is None else f"shape {np.shape(value)}"
            raise StructureError(
                f"cannot batch: leaf {path} of batch element {i} has {found}, "
                f"but element 0 has shape {shape}; use padded_batch() for varying shapes")
    if first.dtype == object:
        out = np.empty((len(values), *shape), dtype=object)
        for i, value in enumerate(values):
            out[i] = value
        return out
    return np.stack(values)


def stack_elements(elements: Sequence[Element]) -> Element:
    """Batch a list of elements that share one structure.

    Example:
        >>> stack_elements([(1, b"a"), (2, b"b")])
        (array([1, 2]), array([b'a', b'b'], dtype=object))
    """
    first = elements[0]
    if not isinstance(first, tuple | dict):
        # Types checked once each (a batch of records has one): per element, an isinstance
        # call cost a tenth of the serial path's budget per record.
        if any(issubclass(kind, tuple | dict) for kind in set(map(type, elements))):
            for i, element in enumerate(elements):
                if isinstance(element, tuple | dict):
                    raise StructureError(f"cannot batch: element {i} is {describe(element)}, "
                                         "element 0 is a single leaf")
        return stack_leaves(elements)
    for i, element in enumerate(elements):
        if not same_structure(first, element):
            raise StructureError(f"cannot batch: element {i} is {describe(element)}, "
                                 f"element 0 is {describe(first)}")
    paths = [path for path, _ in flatten_with_paths(first)]
    columns = zip(*(flatten(e) for e in elements))
    return pack_as(first, [stack_leaves(list(col), path) for col, path in zip(columns, paths)])


def batched_cardinality(n: int, batch_size: int, drop_remainder: bool) -> int:
    """Number of batches of ``batch_size`` from ``n`` elements (INFINITE/UNKNOWN pass through)."""
    if n in (INFINITE, UNKNOWN):
        return n
    return n // batch_size if drop_remainder else -(-n // batch_size)


def validate_batch_size(batch_size: Any, what: str = "batch(batch_size)") -> int:
    """``batch_size`` as a positive ``int`` (NumPy integers included); errors name ``what``.

    Example:
        >>> import numpy as np
        >>> validate_batch_size(np.int64(32))
        32
    """
    return validate_int(batch_size, what, minimum=1, hint="a positive int")


@operation("batch")
class BatchDataset(Dataset):
    """The node of ``Dataset.batch``."""

    TRAITS = BATCHING

    def __init__(self, input_dataset: Dataset, batch_size: int, drop_remainder: bool = False,
                 num_parallel_calls: int | None = None, deterministic: bool | None = None,
                 name: str | None = None) -> None:
        super().__init__([input_dataset])
        self.batch_size = validate_batch_size(batch_size)
        num_parallel_calls = validate_parallelism(num_parallel_calls, "batch(num_parallel_calls)")
        self.drop_remainder = bool(drop_remainder)
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
        self.name = name or "batch"

    def _element_spec(self) -> Element | None:
        inner = self._inputs[0]._element_spec()
        if inner is None:
            return None
        return batched_spec(inner, self.batch_size if self.drop_remainder else None)

    def cardinality(self) -> int:
        return batched_cardinality(self._inputs[0].cardinality(), self.batch_size,
                                   self.drop_remainder)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        if self.num_parallel_calls is None:
            return BatchIterator(ctx, upstream, self.batch_size, self.drop_remainder, self.name)
        autotune = ctx.options.autotune
        tune = self.num_parallel_calls == AUTOTUNE and autotune.enabled and autotune.tune
        return ParallelBatchIterator(
            ctx, upstream, self.batch_size, self.drop_remainder, self.name,
            resolve_parallelism(self.num_parallel_calls, ctx),
            ctx.deterministic(self.deterministic),
            tune=tune, stage_key=self)


    _RANDOM_ACCESS_FROM_INPUT = True

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return BatchReader(self._inputs[0]._random_reader(ctx), self.batch_size,
                           self.drop_remainder)


class BatchReader(DerivedReader):
    """Batch ``i`` stacks input elements ``i * batch_size`` up to the next batch's first.

    Example:
        >>> import feedline as fl
        >>> from feedline.core.random_access import open_reader
        >>> reader = BatchReader(open_reader(fl.Dataset.range(5)), 2, drop_remainder=False)
        >>> len(reader), reader.get(2).tolist()
        (3, [4])
    """

    def __init__(self, input_reader: RandomAccessReader, batch_size: int,
                 drop_remainder: bool) -> None:
        super().__init__(input_reader)
        self._batch_size = batch_size
        self._length = batched_cardinality(len(input_reader), batch_size, drop_remainder)
        self._input_length = len(input_reader)

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> Any:
        start = index * self._batch_size
        stop = min(start + self._batch_size, self._input_length)
        return stack_elements(self.input.get_many(range(start, stop)))

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        get = self.get
        return [get(int(i)) for i in indices]


def pull_batch(upstream: DatasetIterator, batch_size: int, drop_remainder: bool) -> list[Any]:
    """Up to ``batch_size`` elements; raises StopIteration when there is no full-enough batch."""
    elements: list[Any] = []
    chunk = chunk_reader(upstream)
    if chunk is not None:  # whole chunks from a stage that moves them (an error ends it)
        try:
            while len(elements) < batch_size:
                elements += chunk(batch_size - len(elements))
        except StopIteration:
            pass
    else:
        append = elements.append
        for _ in range(batch_size):
            try:
                append(next(upstream))
            except StopIteration:
                break
    if not elements or (drop_remainder and len(elements) < batch_size):
        raise StopIteration
    return elements


class BatchIterator(DatasetIterator):
    """Collects and stacks each batch on the consumer's thread.

    Its state has the layout every batch iterator writes (:mod:`feedline.execution.positions`,
    one item per batch), so a checkpoint of a parallel batch restores here and back.
    """

    OPERATION = "batch"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, batch_size: int,
                 drop_remainder: bool, name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._batch_size = batch_size
        self._drop_remainder = drop_remainder
        self._name = name
        self._batches = 0
        # Set while re-reading after a restore from a parallel batch's position.
        self._replay: PositionReader | None = None

    def _pull(self) -> list[Any]:
        return pull_batch(self._upstream, self._batch_size, self._drop_remainder)

    def __next__(self) -> Any:
        if self._replay is not None:
            replay = self._replay
            item, is_error, elements, _ = replay.pull()
            replay.handed_out(item)
            self._batches = item
            if not replay.replaying:
                self._replay = None
            if is_error:
                self._batches += 1
                raise elements  # the input's error (or its record), in its place
        else:
            elements = self._pull()
        index = self._batches
        self._batches += 1
        try:
            return stack_elements(elements)
        except StructureError as error:
            raise annotate_error(error, self._name, index)

    def _get_state(self) -> State:
        if self._replay is not None:
            return self._replay.inline_position()
        return initial_position(self._upstream.state_dict(), self._batches)

    def _set_state(self, state: State) -> None:
        self._upstream.load_state_dict(state["input"])
        self._batches = int(state["at"])
        self._replay = replay_from(self._upstream, state, self._pull)


def _stack(elements: list[Any]) -> Any:
    return stack_elements(elements)


class ParallelBatchIterator(DatasetIterator):
    """Collects elements on the consumer's thread and stacks several batches at once, on a
    :class:`~feedline.execution.window.PositionedWindow` of ``parallelism`` tasks.

    An error of the upstream ends the batch being collected, whose elements are dropped,
    and takes that batch's place: the batches before it come out first, then the error,
    then a batch starting after the failed element (tf.data's ``batch``, parallel or not).
    The state is a position in batches (:mod:`feedline.execution.positions`): batches in
    flight are collected and stacked again after a restore.

    With ``tune`` (``num_parallel_calls=AUTOTUNE`` and a pipeline tuner) the pipeline's
    tuner (:mod:`feedline.autotune.tuner`) sets how many of its threads stack at once, and
    the window follows (one batch per worker), through the stage's :attr:`knobs`
    (:class:`~feedline.execution.stage_knobs.ThreadStageKnobs`), between one and its CPU
    workers (:func:`~feedline.execution.stage_knobs.thread_bounds`: stacking computes). The
    stage counts its stacking tasks' wall and CPU time, the time it pulls its input, and
    the ``next()`` calls that waited. Batches, their order, errors and checkpoints do not
    depend on the setting. ``stage_key`` identifies the stage across its iterators (its
    dataset node): the next epoch starts at the setting reached.
    """

    OPERATION = "batch"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, batch_size: int,
                 drop_remainder: bool, name: str, parallelism: int, deterministic: bool,
                 tune: bool = False, stage_key: object = None) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._batch_size = batch_size
        self._drop_remainder = drop_remainder
        self._name = name
        self._deterministic = deterministic
        options = ctx.options
        threading_options = options.threading
        self._tuner = ctx.autotuner() if tune else None
        self._knobs: ThreadStageKnobs | None = None
        threads, gate = parallelism, None
        if self._tuner is not None:
            cpu_workers, threads = thread_bounds(options, parallelism)
            self._knobs = ThreadStageKnobs(name, parallelism, threads, cpu_workers,
                                           options.autotune_ram_budget(), tasks_per_worker=1)
            # A task holds its input elements and their batch: about twice the batch.
            self._knobs.held_per_task = 2.0
            gate = self._knobs.gate
        close_timeout = threading_options.close_timeout
        self._window = PositionedWindow(
            name, upstream,
            lambda: make_executor(threads, name, close_timeout=close_timeout, gate=gate),
            limit=parallelism, deterministic=deterministic,
            element_timeout=threading_options.element_timeout,
            describe=lambda item: f"batch {item}", pull=self._pull)
        if self._knobs is not None and self._tuner is not None:
            self._knobs.window = self._window  # its limit follows the tuner's setting
            self._knobs.counters = self._tuner.register(
                self._knobs, stage_key if stage_key is not None else name)

    @property
    def replay_exact(self) -> bool:
        return self._deterministic and super().replay_exact

    def hold_order(self, hold: bool) -> None:
        self._window.set_ordered(self._deterministic or hold)
        super().hold_order(hold)

    def read_aheads(self) -> list[ReadAhead]:
        return [self._window]

    @property
    def knobs(self) -> ThreadStageKnobs | None:
        """What the tuner sets and reads of this stage (``None``: not tuned)."""
        return self._knobs

    def _pull(self) -> list[Any]:
        return pull_batch(self._upstream, self._batch_size, self._drop_remainder)

    def __next__(self) -> Any:
        knobs = self._knobs
        if knobs is None:
            return self._next_batch()
        counters = knobs.counters
        counters.calls += 1
        batch = self._next_batch(knobs)
        knobs.sample(batch, counters.elements)
        counters.elements += 1
        return batch

    def _next_batch(self, knobs: ThreadStageKnobs | None = None) -> Any:
        window = self._window
        window.mark_start()
        pulling = time.perf_counter() if knobs is not None else 0.0
        while not window.exhausted and window.has_room():
            try:
                item, is_error, value = window.pull()
            except StopIteration:
                break
            if is_error:
                window.add_failed(item, value)
            elif knobs is not None:
                window.submit(item, knobs.run_task, _stack, value)
            else:
                window.submit(item, _stack, value)
        if not len(window):
            raise StopIteration
        if knobs is not None:
            knobs.counters.input += time.perf_counter() - pulling
            # Unordered, take() hands back any finished batch: counted by the head, a wait
            # may be one it did not have to make.
            if not window.head_ready():
                knobs.counters.waits += 1
        item, future = window.take()
        window.handed_out(item)
        error = future.exception()
        if error is None:
            return future.result()
        if isinstance(error, StructureError):
            raise annotate_error(error, self._name, item)
        raise error  # the upstream's error, already annotated by its stage

    def _get_state(self) -> State:
        return self._window.position()

    def _set_state(self, state: State) -> None:
        self._window.restore(state)

    def _release(self) -> None:
        if self._knobs is not None:
            self._knobs.done = True  # closed: the tuner forgets it
        self._window.shutdown()
