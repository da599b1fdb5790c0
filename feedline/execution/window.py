"""One positioned read-ahead window: tasks in flight over one input, and where it stands.

Every parallel stage that pulls its input on the consumer's thread (``map``, ``batch``,
``map_and_batch``) is a thin operation over a :class:`PositionedWindow`: a
:class:`~feedline.execution.read_ahead.ReadAhead` of tasks that also numbers the items it
pulls from its input (:class:`~feedline.execution.positions.PositionReader`) and records
which went out (:class:`~feedline.execution.positions.PositionTracker`). Its checkpoint is
a position and nothing else (the layout in :mod:`feedline.execution.positions`); restoring
drops the tasks in flight and re-reads from the snapshot.

A stage may also hand items out *directly* (:meth:`PositionedWindow.pull_direct`: a map
calling its function inline): with nothing in flight, re-read or pending, the input's own
state is then the exact position, and only the count of items pulled is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from feedline.execution.executor import Executor
from feedline.execution.positions import (
    PositionReader,
    PositionTracker,
    State,
    initial_position,
)
from feedline.execution.read_ahead import ReadAhead, StopSignal


class PositionedWindow(ReadAhead):
    """A :class:`ReadAhead` over one input iterator, keeping the input's positions.

    Args:
        name: The stage's name, for errors, warnings and thread names.
        upstream: The input (a ``DatasetIterator``), pulled only on the consumer's thread.
        executor: An executor, or a function making one (called by the first submit).
        limit: Most tasks in the window.
        deterministic: Hand tasks back in submission order (else as they finish).
        element_timeout: Seconds :meth:`take` waits for one task.
        describe: Names the element a tag stands for, in timeout errors.
        pull: What one item of the input is (default ``next(upstream)``: a batch stage
            pulls a whole batch's elements as one item).
        stop: A :class:`StopSignal` shared with other windows of the stage.

    Example:
        >>> import feedline as fl
        >>> from feedline.core.iterator import IteratorContext
        >>> from feedline.execution.executor import ThreadExecutor
        >>> source = fl.Dataset.range(3)._make_iterator(IteratorContext())
        >>> window = PositionedWindow("doc", source, lambda: ThreadExecutor(2, "doc"), limit=2)
        >>> item, is_error, value = window.pull()
        >>> window.submit(item, int, value); tag, future = window.take()
        >>> window.handed_out(tag); window.position()["next"]
        1
        >>> window.shutdown()
    """

    def __init__(self, name: str, upstream: Any, executor: Executor | Callable[[], Executor],
                 *, limit: int, deterministic: bool = True,
                 element_timeout: float | None = None,
                 describe: Callable[[Any], str] | None = None,
                 pull: Callable[[], Any] | None = None,
                 stop: StopSignal | None = None) -> None:
        super().__init__(name, executor, limit=limit, deterministic=deterministic,
                         element_timeout=element_timeout, describe=describe, stop=stop)
        self._upstream = upstream
        self.positions = PositionReader(pull or upstream.__next__, upstream.state_dict,
                                        upstream.replay_exact, hold_order=upstream.hold_order)
        self.tracker = PositionTracker()
        self.exhausted = False
        """The input has ended (no more items to pull until a restore)."""
        self.direct = False
        """Items go out as pulled (:meth:`pull_direct`): the input's state is the position."""

    # ------------------------------------------------------------------ pulling
    def mark_start(self) -> None:
        """Record the input's state before the first item is pulled (it is idle now)."""
        if not self.tracker.has_snapshot:
            self.tracker.add_snapshot((self.positions.pulled, self._upstream.state_dict()))

    def pull(self) -> tuple[int, bool, Any]:
        """The next numbered item ``(item, is_error, value)``; ``StopIteration`` at the end
        (then :attr:`exhausted`). An input error is an item, kept in its place."""
        try:
            item, is_error, value, snapshot = self.positions.pull()
        except StopIteration:
            self.exhausted = True
            raise
        self.tracker.add_snapshot(snapshot)
        return item, is_error, value

    def pull_chunk(self, size: int, within: float | None = None
                   ) -> tuple[list[int], list[Any], tuple[int, BaseException] | None]:
        """Up to ``size`` items for one task: their numbers, their values, and an input error
        that ended the chunk (its number and the error). With ``within`` seconds, the chunk
        ends once that long has passed since its first item arrived: an input that gives
        items slowly keeps the workers waiting no longer (waiting for the first is no
        choice).

        Example:
            >>> import feedline as fl
            >>> from feedline.core.iterator import IteratorContext
            >>> source = fl.Dataset.range(5)._make_iterator(IteratorContext())
            >>> window = PositionedWindow("doc", source, lambda: None, limit=1)
            >>> window.mark_start(); window.pull_chunk(3)
            ([0, 1, 2], [np.int64(0), np.int64(1), np.int64(2)], None)
        """
        items: list[int] = []
        values: list[Any] = []
        clock = time.perf_counter
        deadline = 0.0
        for _ in range(size):
            try:
                item, is_error, value = self.pull()
            except StopIteration:
                break
            if is_error:
                return items, values, (item, value)
            items.append(item)
            values.append(value)
            if within is not None and size > 1:
                now = clock()
                if not deadline:
                    deadline = now + within
                elif now >= deadline:
                    break
        return items, values, None

    def handed_out(self, item: int) -> None:
        """The consumer received ``item`` (its result or its error)."""
        self.tracker.handed_out(item)
        self.positions.handed_out(item)

    def handed_out_many(self, items: list[int]) -> None:
        """The consumer received ``items`` (a task's, in order), as :meth:`handed_out` of each.

        Example:
            >>> import feedline as fl
            >>> from feedline.core.iterator import IteratorContext
            >>> source = fl.Dataset.range(3)._make_iterator(IteratorContext())
            >>> window = PositionedWindow("doc", source, lambda: None, limit=1)
            >>> window.mark_start(); items = [window.pull()[0] for _ in range(3)]
            >>> window.handed_out_many(items[:2]); window.position()["next"]
            2
        """
        tracker = self.tracker
        if not items:
            return
        first, last = items[0], items[-1]
        # The common case in one step: the next items in a row, none out of order before
        # them, no input error pending.
        if first == tracker.next and not tracker.done and last - first == len(items) - 1 \
                and not self.positions.errors:
            tracker.next = last + 1
            return
        for item in items:
            self.handed_out(item)

    # ------------------------------------------------------------------ direct
    def may_go_direct(self) -> bool:
        """Switch to direct hand-outs if nothing is re-read or pending (call with nothing
        in flight); whether it did."""
        positions = self.positions
        if not (positions.replaying or positions.errors):
            self.direct = True
        return self.direct

    def pull_direct(self) -> tuple[int, Any]:
        """``(item, element)`` pulled and handed out at once; the input's error, counted as
        an item, is raised as it came (annotated by the stage that raised it)."""
        positions = self.positions
        item = positions.pulled
        try:
            value = next(self._upstream)
        except StopIteration:
            raise
        except Exception:
            positions.pulled = item + 1
            raise
        positions.pulled = item + 1
        return item, value

    def leave_direct(self) -> None:
        """Tasks again after items handed out directly or inline: positions go on where
        those left off (directly, no snapshot was kept: every item pulled went out)."""
        position = (self.positions.pulled, self._upstream.state_dict())
        if self.direct:
            self.direct = False
            self.tracker.restore(initial_position(position[1], position[0]))
        else:
            self.tracker.add_snapshot(position)

    # ------------------------------------------------------------------ checkpoints
    def idle(self) -> bool:
        """Nothing in flight, re-read or pending: every item pulled went out in order."""
        positions = self.positions
        return not len(self) and not positions.replaying and not positions.errors

    def position(self, exact: bool = False) -> State:
        """The checkpoint: a position in the input, never the items in flight.

        Args:
            exact: Every item pulled went out (direct or :meth:`idle`): the input's state
                now is the position.
        """
        positions = self.positions
        if exact or self.direct or not self.tracker.has_snapshot:
            return initial_position(self._upstream.state_dict(), positions.pulled)
        return self.tracker.state(positions.pending_errors(self.tracker))

    def restore(self, state: State) -> None:
        """Continue from ``state``: the tasks in flight are dropped (their results are no
        longer wanted; tasks never touch the input) and the input re-read from its
        snapshot."""
        self.discard()
        self.direct = False  # the restored position may have items to skip
        self.exhausted = False
        self._upstream.load_state_dict(state["input"])
        self.positions.restore(state)
        self.tracker.restore(state)
