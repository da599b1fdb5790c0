"""``interleave``: map input elements to datasets and read several of them in turn.

The order is tf.data's, element for element. ``cycle_length`` slots each hold a dataset
made by ``map_func``; the stage takes ``block_length`` elements from the slot at the cycle
position, then moves to the next slot. A slot whose dataset ends is emptied and the cycle
moves on; when the cycle comes back to an empty slot it is filled, in place, from the next
input element. Once the input is exhausted empty slots are skipped, and the stage ends when
every slot is empty.

With ``num_parallel_calls`` set, each open slot (and up to ``cycle_length`` datasets that
will enter the cycle next) is read ahead on the stage's own thread pool, so reading many
files overlaps; the output order stays exactly the same unless ``deterministic=False``,
which lets the stage take from whichever slot has an element ready. That is the main way
to read many files in parallel. With ``num_parallel_calls=AUTOTUNE`` it starts with
``min(CPUs, cycle_length)`` reading threads and the pipeline's tuner sets how many read at
once, up to one per open dataset (:class:`ParallelInterleaveIterator`).

The iterators live beside this module: :mod:`~feedline.transforms.interleave_cycle` (the
cycle position and checkpoint layout both share, and the sequential iterator) and
:mod:`~feedline.transforms.interleave_parallel` (the parallel one).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from feedline.core.constants import AUTOTUNE, INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.functions import annotate_error, bind_free_variables, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext
from feedline.core.registry import operation
from feedline.core.traits import READER_OF_NAMES
from feedline.core.validation import (
    resolve_parallelism,
    schedulable_cpus,
    validate_int,
    validate_optional_int,
    validate_parallelism,
)
from feedline.transforms.flat_map import make_inner_dataset, traced_inner_spec
from feedline.transforms.interleave_cycle import InterleaveIterator
from feedline.transforms.interleave_parallel import (
    MIN_SLOT_BUFFER,
    PREFETCH_INPUT_FACTOR,
    ParallelInterleaveIterator,
)

__all__ = [
    "MIN_SLOT_BUFFER",
    "PREFETCH_INPUT_FACTOR",
    "InterleaveDataset",
    "InterleaveIterator",
    "ParallelInterleaveIterator",
    "resolve_cycle_length",
    "schedulable_cpus",
]


def resolve_cycle_length(cycle_length: int | None, num_parallel_calls: int | None) -> int:
    """The cycle length tf.data uses for these arguments.

    ``None``/``AUTOTUNE`` means: the number of CPUs for the sequential stage; with a fixed
    ``num_parallel_calls``, that number capped at the CPUs; with ``AUTOTUNE`` parallelism,
    a third of the CPUs rounded up (tf.data leaves room for its read-ahead threads).

    Example:
        >>> resolve_cycle_length(4, None)
        4
    """
    if cycle_length is not None and cycle_length != AUTOTUNE:
        return cycle_length
    cpus = schedulable_cpus()
    if num_parallel_calls is None:
        return cpus
    if num_parallel_calls != AUTOTUNE:
        return min(num_parallel_calls, cpus)
    return math.ceil(cpus / 3)


def _open_inner(map_func: Callable[..., Any], ctx: IteratorContext, stage: str, element: Any,
                index: int) -> DatasetIterator:
    dataset = make_inner_dataset(map_func, element, stage, index)
    try:
        return ctx.make_inner_iterator(dataset, stage)
    except Exception as error:  # noqa: BLE001 - re-raised with a note
        raise annotate_error(error, stage, index)


@operation("interleave")
class InterleaveDataset(Dataset):
    """The node of ``Dataset.interleave``.

    Args:
        input_dataset: Elements to make datasets from.
        map_func: ``element -> Dataset`` (tuple components become positional arguments).
        cycle_length: Datasets read in turn; ``None``/``AUTOTUNE`` lets the runtime choose
            (see :func:`resolve_cycle_length`).
        block_length: Consecutive elements taken from one dataset before moving on.
        num_parallel_calls: ``None`` reads synchronously; an int or ``AUTOTUNE`` reads the
            open datasets ahead on that many threads.
        deterministic: ``False`` (parallel only) lets elements come from whichever dataset
            has one ready; ``None`` defers to ``Options.deterministic`` (default: ordered).
        name: Shown in errors, thread names and profiles.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(1, 6).interleave(
        ...     lambda x: fl.Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
        >>> [int(x) for x in ds]  # tf.data's documented example
        [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]
    """

    TRAITS = READER_OF_NAMES

    def __init__(self, input_dataset: Dataset, map_func: Callable[..., Dataset],
                 cycle_length: int | None = None, block_length: int | None = 1,
                 num_parallel_calls: int | None = None, deterministic: bool | None = None,
                 name: str | None = None) -> None:
        super().__init__([input_dataset])
        if not callable(map_func):
            raise TypeError(
                f"interleave() needs a callable map_func, got {type(map_func).__name__}")
        cycle_length = validate_optional_int(
            cycle_length, "interleave(cycle_length)", minimum=1, special=(AUTOTUNE,),
            hint="None, AUTOTUNE or a positive int")
        block_length = validate_int(1 if block_length is None else block_length,
                                    "interleave(block_length)", minimum=1, hint="a positive int")
        num_parallel_calls = validate_parallelism(num_parallel_calls,
                                                  "interleave(num_parallel_calls)")
        self.map_func = bind_free_variables(map_func)
        self.cycle_length = cycle_length
        self.block_length = block_length
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
        self.name = name or f"interleave({function_name(map_func)})"

    def _traced_element_spec(self) -> Any:
        # The inner datasets' spec, as flat_map's (see feedline.core.spec_inference).
        return traced_inner_spec(self._inputs[0], self.map_func, self.name)

    def cardinality(self) -> int:
        # tf.data: the parallel stage passes an infinite input on; otherwise unknown.
        if self.num_parallel_calls is not None and self._inputs[0].cardinality() == INFINITE:
            return INFINITE
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        cycle_length = resolve_cycle_length(self.cycle_length, self.num_parallel_calls)
        opener = functools.partial(_open_inner, self.map_func, ctx, self.name)
        if self.num_parallel_calls is None:
            return InterleaveIterator(ctx, upstream, opener, cycle_length, self.block_length,
                                      self.name)
        autotune = ctx.options.autotune
        tune = False
        if self.num_parallel_calls == AUTOTUNE:
            workers = min(resolve_parallelism(AUTOTUNE, ctx), cycle_length)
            # The pipeline's tuner sets how many reads run at once (see the iterator).
            tune = autotune.enabled and autotune.tune
        else:
            workers = self.num_parallel_calls
        return ParallelInterleaveIterator(
            ctx, upstream, opener, cycle_length, self.block_length, self.name, workers,
            ctx.deterministic(self.deterministic), tune=tune, stage_key=self)
