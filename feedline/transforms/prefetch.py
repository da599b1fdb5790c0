"""``prefetch``: overlap producing elements with consuming them (software pipelining)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.options import AUTOTUNE_FIXED_BUFFER
from feedline.core.random_access import RandomAccessReader
from feedline.core.registry import operation
from feedline.core.structure import Element
from feedline.core.traits import ONE_TO_ONE
from feedline.core.validation import validate_int
from feedline.execution.buffer_tuning import BufferTuning
from feedline.execution.executor import make_executor
from feedline.execution.read_ahead import SequentialReader


@operation("prefetch")
class PrefetchDataset(Dataset):
    """The node of ``Dataset.prefetch``: ``buffer_size`` ``AUTOTUNE`` or ``None`` (tf.data's
    meaning: ``AUTOTUNE``) is tuned, 0 reads nothing ahead.

    Example:
        >>> import feedline as fl
        >>> PrefetchDataset(fl.Dataset.range(3), None).buffer_size == fl.AUTOTUNE
        True
    """

    # Read-ahead changes when elements are made, never which: checkpoints ignore it.
    TRAITS = replace(ONE_TO_ONE, random_access_from_input=True, execution_only=True)

    def __init__(self, input_dataset: Dataset, buffer_size: int | None,
                 name: str | None = None) -> None:
        super().__init__([input_dataset])
        if buffer_size is None:
            buffer_size = AUTOTUNE  # tf.data's reading of None
        self.buffer_size = validate_int(buffer_size, "prefetch(buffer_size)", minimum=0,
                                        special=(AUTOTUNE,), hint="AUTOTUNE or >= 0")
        self.name = name or "prefetch"

    def _element_spec(self) -> Element | None:
        return self._inputs[0]._element_spec()

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        if self.buffer_size == 0:
            return upstream
        return PrefetchIterator(ctx, upstream, self.buffer_size, self.name, stage_key=self)

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return self._inputs[0]._random_reader(ctx)  # read-ahead changes no element


class PrefetchIterator(DatasetIterator):
    """Reads its input ahead on one daemon thread, started by the first ``next()``.

    ``AUTOTUNE`` sizes the buffer by the tuner's rule for buffers
    (:class:`feedline.execution.buffer_tuning.BufferTuning`): it grows when the consumer drains it
    and the input keeps up on average, within the RAM budget, and the size reached carries
    over to the stage's next iterator in the same pipeline run (``stage_key``: each epoch
    of a ``repeat`` builds one). Errors of the input are read ahead in their places and
    raised in their turn.

    The state is a position (:mod:`feedline.execution.positions`), never the buffered
    elements: the input's state taken by the reading thread after some element, and how
    many elements the consumer has received since. Restoring re-reads from there; an
    input error read ahead but not yet raised is stored as a record, raised in its place.
    """

    OPERATION = "prefetch"
    STATE_VERSION = 3

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, buffer_size: int,
                 name: str, stage_key: object = None) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        options = ctx.options
        tuning = options.autotune
        # The grown size, shared with the stage's other iterators of this pipeline run.
        grown: list[int] = ctx.remembered.setdefault(
            ("prefetch capacity", stage_key if stage_key is not None else name), [1])
        self._tuning: BufferTuning | None = None
        if buffer_size == AUTOTUNE and tuning.enabled:
            # Its changes are logged with the tuner's (made now: its clock starts with the run).
            self._tuning = BufferTuning(name, grown, options.autotune_ram_budget(),
                                        ctx.autotuner())
            capacity = self._tuning.start_capacity
        else:
            capacity = AUTOTUNE_FIXED_BUFFER if buffer_size == AUTOTUNE else buffer_size
        self._name = name
        threading_options = options.threading
        self._reader = SequentialReader(
            name, upstream,
            lambda: make_executor(1, name, close_timeout=threading_options.close_timeout),
            capacity, threading_options.element_timeout)

    def __next__(self) -> Any:
        if self._tuning is None:
            return self._reader.next()
        return self._tuning.next(self._reader)

    def read_aheads(self) -> list[Any]:
        return [self._reader.window]

    @property
    def capacity(self) -> int:
        """How many elements may be read ahead now (grows under ``AUTOTUNE``)."""
        return self._reader.capacity

    def _get_state(self) -> State:
        return self._reader.position()

    def _set_state(self, state: State) -> None:
        self._reader.discard()
        self._reader.restore(state)

    def _release(self) -> None:
        self._reader.shutdown()
