"""Epochs of seeded stages that reshuffle each iteration, continued across ``iter(ds)`` calls.

A stage that draws a new order every iteration (``shuffle``, ``global_shuffle``,
``sample_from_datasets`` and ``random`` with ``rerandomize_each_iteration=True``) seeds
epoch ``e`` from ``(seed, e)``. Within one pipeline run the epoch counts the iterators the
stage has built (``repeat`` builds one per epoch, :meth:`IteratorContext.start_iteration`).

Across runs, tf.data gives each such stage a seed generator owned by the dataset object:
every iterator built from that object -- the next epoch of a ``repeat`` or a new
``iter(ds)`` -- draws the next seeds, so two ``list(ds)`` of
``range(10).shuffle(10, seed=42)`` differ, while a rerun of the program repeats both. Here
each such node holds an :class:`EpochCounter`, the epoch after the last one its iterators
used; a run started by ``iter(ds)`` (``IteratorContext.continue_epochs``) begins the node at
that epoch. Runs with a pinned epoch (``PipelineIterator(ds, epoch=e)``: training loops that
number their epochs, worker processes, a spec read from the first element) neither read
nor advance it, so looking at a dataset does not change its next order.

Checkpoints stay exact: an iterator's state holds its epoch, and restoring it in a run
started by ``iter(ds)`` sets the counter after it, as tf.data's restore sets the seed
generator, so the iterators made next continue the run the state came from.

Example:
    >>> import feedline as fl
    >>> ds = fl.Dataset.range(6).shuffle(6, seed=1)
    >>> first, second = [int(x) for x in ds], [int(x) for x in ds]
    >>> first != second, sorted(first) == sorted(second)
    (True, True)
    >>> again = fl.Dataset.range(6).shuffle(6, seed=1)  # a new object starts at epoch 0
    >>> [int(x) for x in again] == first
    True
"""

from __future__ import annotations

import threading
from typing import Any

from feedline.core.errors import CheckpointError
from feedline.core.iterator import IteratorContext


class EpochCounter:
    """The next epoch of one dataset node, shared by all its iterators in this process.

    Graph rewrites copy a node's attributes, so the copies they make share the counter. A
    pickled copy (sent to another process) and a deep copy start at 0: they are other
    dataset objects, as in tf.data.

    Example:
        >>> import copy
        >>> counter = EpochCounter()
        >>> counter.advance_past(2); counter.next
        3
        >>> copy.deepcopy(counter).next
        0
    """

    __slots__ = ("_lock", "_next")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    @property
    def next(self) -> int:
        """The epoch the next run started by ``iter(ds)`` begins the node at."""
        return self._next

    def claim(self, earliest: int) -> int:
        """Take the next epoch, ``earliest`` or later, for a run's first iterator.

        Reading :attr:`next` and then advancing would let two runs started on two threads
        at once both read the same epoch (one order twice, as a seed generator never
        gives): the read and the advance are one step here.

        Example:
            >>> counter = EpochCounter()
            >>> counter.claim(0), counter.claim(0), counter.claim(5), counter.next
            (0, 1, 5, 6)
        """
        with self._lock:
            epoch = max(self._next, earliest)
            self._next = epoch + 1
            return epoch

    def advance_past(self, epoch: int) -> None:
        """Record that ``epoch`` was used (the counter never goes back here)."""
        with self._lock:
            self._next = max(self._next, epoch + 1)

    def restart_after(self, epoch: int) -> None:
        """Continue after ``epoch`` (a restored state's), whichever epochs ran before."""
        with self._lock:
            self._next = epoch + 1

    def __reduce__(self) -> tuple[Any, ...]:
        return (EpochCounter, ())

    def __deepcopy__(self, memo: dict[int, Any]) -> EpochCounter:
        return EpochCounter()

    def __repr__(self) -> str:
        return f"EpochCounter(next={self._next})"


def start_epoch(node: object, counter: EpochCounter, ctx: IteratorContext) -> int:
    """The epoch of the iterator of ``node`` being built in ``ctx`` (counted as started).

    ``ctx.start_iteration(node)``, except that the node's first iterator in a run started
    by ``iter(ds)`` begins at ``counter.next`` when that is later.

    Example:
        >>> counter = EpochCounter()
        >>> node = type("Node", (), {})()
        >>> run = IteratorContext(continue_epochs=True)
        >>> start_epoch(node, counter, run), start_epoch(node, counter, run)
        (0, 1)
        >>> start_epoch(node, counter, IteratorContext(continue_epochs=True))
        2
        >>> start_epoch(node, counter, IteratorContext())  # a pinned run
        0
    """
    fresh = ctx.continue_epochs and node not in ctx.iterations
    epoch = ctx.start_iteration(node)
    if not ctx.continue_epochs:
        return epoch
    if fresh:
        claimed = counter.claim(epoch)
        if claimed != epoch:
            ctx.set_iterations(node, claimed + 1)
        return claimed
    counter.advance_past(epoch)
    return epoch


def restored_epoch(node: object, counter: EpochCounter, ctx: IteratorContext,
                   epoch: Any) -> int:
    """A state of epoch ``epoch`` was loaded: the node's next iterator (in this run, and in
    the next run started by ``iter(ds)``) takes the epoch after it. Returns the epoch.

    Raises:
        CheckpointError: ``epoch`` is not an int >= 0 (a damaged or forged state: it must not
            reach the counter, which later iterators of the dataset read).

    Example:
        >>> counter, node = EpochCounter(), type("Node", (), {})()
        >>> ctx = IteratorContext(continue_epochs=True)
        >>> counter.advance_past(7); restored_epoch(node, counter, ctx, 2)
        2
        >>> counter.next, start_epoch(node, counter, ctx)
        (3, 3)
    """
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise CheckpointError(f"damaged state: epoch {epoch!r} is not an int >= 0")
    ctx.set_iterations(node, epoch + 1)
    if ctx.continue_epochs:
        counter.restart_after(epoch)
    return epoch
