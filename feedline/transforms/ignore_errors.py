"""``ignore_errors``: drop the elements whose production raised an exception.

It drops an *element's* error, and never turns a broken stream into a normal end: an error
marked fatal (:func:`~feedline.core.error_records.mark_fatal`: a stage that cannot go on,
such as worker processes that cannot start, or a ``multiprocess`` worker that keeps dying
at the same element) is raised through it. An element whose computation kills its worker
process is that element's error (see :mod:`feedline.placement.process_executor` and
:mod:`feedline.placement.multiprocess`), and is dropped like any other.
"""

from __future__ import annotations

import logging
from typing import Any

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.error_records import is_fatal
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.runner import RunningPipeline
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator

logger = logging.getLogger(__name__)


@operation("ignore_errors")
class IgnoreErrorsDataset(UnaryDataset):
    """The node of ``Dataset.ignore_errors``.

    Any ``Exception`` raised while producing an element (by a map function, a parser, a reader
    of a damaged record, a worker process that died computing it, ...) drops that element;
    ``StopIteration`` still ends the dataset, ``KeyboardInterrupt``/``SystemExit`` still
    stop the program, and an error marked fatal (the stream cannot go on) is raised. The
    iterator of this stage counts what it dropped in ``errors_ignored`` (see
    :func:`errors_ignored`).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_tensor_slices([1, 0, 2]).map(lambda x: 10 // int(x))
        >>> [int(x) for x in IgnoreErrorsDataset(ds)]
        [10, 5]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, log_warning: bool = False,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.log_warning = bool(log_warning)
        self.name = name or "ignore_errors"

    def cardinality(self) -> int:
        # tf.data's: UNKNOWN whatever the input, since an error may drop any element.
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return IgnoreErrorsIterator(ctx, self._make_input_iterator(ctx), self.log_warning,
                                    self.name)


class IgnoreErrorsIterator(UnaryIterator):
    """Asks its input again after each failure; upstream stages continue past a failed
    element (parallel map and prefetch hand failures over as items of their buffers).

    Attributes:
        errors_ignored: Elements dropped so far (kept across checkpoints).
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, log_warning: bool,
                 name: str) -> None:
        super().__init__(ctx, upstream)
        self._log_warning = log_warning
        self._name = name
        self.errors_ignored = 0

    def __next__(self) -> Any:
        while True:
            try:
                return next(self._upstream)
            except StopIteration:
                raise
            except Exception as error:  # noqa: BLE001 -- dropping failed elements is the point
                if is_fatal(error):
                    raise  # not an element's error: the stream cannot go on
                self.errors_ignored += 1
                if self._log_warning:
                    logger.warning("%s: ignored an error (%d so far): %s: %s", self._name,
                                   self.errors_ignored, type(error).__name__, error)
                # The traceback holds the frames of the stages it passed through, and some of
                # them hold the error (a parallel map's future): dropping it breaks that cycle,
                # so an abandoned pipeline is freed (and its threads end) without waiting
                # for the garbage collector.
                error.__traceback__ = None

    def _get_state(self) -> State:
        return self._with_input_state({"errors_ignored": self.errors_ignored})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self.errors_ignored = state["errors_ignored"]


def errors_ignored(iterator: RunningPipeline | DatasetIterator) -> int:
    """How many elements every ``ignore_errors`` stage of a running pipeline has dropped.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_tensor_slices([1, 0, 2]).map(lambda x: 1 // int(x))
        >>> it = iter(ds.ignore_errors())
        >>> _ = list(it); errors_ignored(it)
        1
    """
    root = getattr(iterator, "_root", iterator)
    total, stack = 0, [root]
    while stack:
        stage = stack.pop()
        if isinstance(stage, IgnoreErrorsIterator):
            total += stage.errors_ignored
        stack.extend(stage._inputs)
    return total
