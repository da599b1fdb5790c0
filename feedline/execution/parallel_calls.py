"""A window of calls running at once on an executor, handed back in order or as they finish."""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable
from typing import Any

from feedline.execution.buffer import BufferClosed
from feedline.execution.executor import Executor


class FailedInput:
    """The window's item for a failure of the input itself (see :meth:`ParallelCalls.add_failed`)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ParallelCalls:
    """Up to ``limit`` calls of ``fn`` in flight; results come back in submission order when
    ``deterministic``, else in completion order.

    The inputs of calls not yet handed back are kept, so a checkpoint can store them and a
    restored stage can run them again: in-flight work is never lost or done twice. A failure
    that happened before a call could be made (the input's own error) takes a place in the
    window with :meth:`add_failed`, so it is handed back in its turn, after the calls
    submitted before it.

    :meth:`shutdown` may come from another thread while the consumer waits in :meth:`take`:
    the wait ends at once with :class:`BufferClosed`, even if a call never finishes.

    Example:
        >>> from feedline.execution.executor import ThreadExecutor
        >>> calls = ParallelCalls(lambda x: x * 10, ThreadExecutor(2, "doc"), 2, True)
        >>> calls.submit(1); calls.submit(2)
        >>> [(item, future.result()) for item, future in (calls.take(), calls.take())]
        [(1, 10), (2, 20)]
        >>> calls.shutdown()
    """

    def __init__(self, fn: Callable[[Any], Any], executor: Executor, limit: int,
                 deterministic: bool) -> None:
        self._fn = fn
        self._executor = executor
        self.limit = max(1, limit)
        self._deterministic = deterministic
        self._pending: collections.deque[tuple[Any, concurrent.futures.Future[Any]]] = \
            collections.deque()
        # Done once shut down: waited on beside the calls, it wakes a blocked take().
        self._closed: concurrent.futures.Future[None] = concurrent.futures.Future()

    def __len__(self) -> int:
        return len(self._pending)

    def __bool__(self) -> bool:
        # An empty window is still a window: ``calls or make_new()`` must not replace it.
        return True

    def has_room(self) -> bool:
        return len(self._pending) < self.limit

    def submit(self, item: Any) -> None:
        """Start ``fn(item)``; :class:`BufferClosed` once shut down."""
        if self._closed.done():
            raise BufferClosed
        try:
            future = self._executor.submit(self._fn, item)
        except RuntimeError:
            if self._closed.done():  # shut down from another thread meanwhile
                raise BufferClosed from None
            raise
        self._pending.append((item, future))

    def add_failed(self, error: BaseException) -> None:
        """Queue the input's own ``error`` in the window; it is handed back in its turn, as
        a :class:`FailedInput` item whose future raises ``error``.

        :meth:`pending_inputs` lists it in its place, so a checkpoint stores the failure.
        """
        if self._closed.done():
            raise BufferClosed
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_exception(error)
        self._pending.append((FailedInput(error), future))

    def take(self) -> tuple[Any, concurrent.futures.Future[Any]]:
        """Wait for the next call to hand back and return ``(input, finished future)``.

        ``future.result()`` gives the result, or raises the call's own exception with its
        traceback; the caller knows which input failed. Raises :class:`BufferClosed` when
        the window is shut down (before or while waiting).
        """
        closed = self._closed
        if self._deterministic or len(self._pending) == 1:
            item, future = self._pending[0]
            concurrent.futures.wait([future, closed],
                                    return_when=concurrent.futures.FIRST_COMPLETED)
            if closed.done():
                raise BufferClosed
            self._pending.popleft()
            return item, future
        done, _ = concurrent.futures.wait([f for _, f in self._pending] + [closed],
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        if closed.done():
            raise BufferClosed
        for position, (item, future) in enumerate(self._pending):
            if future in done:
                del self._pending[position]
                return item, future
        raise AssertionError("a completed call vanished from the pending window")

    def pending_inputs(self) -> list[Any]:
        """Inputs of the calls not yet handed back, in submission order."""
        return [item for item, _ in self._pending]

    def discard(self) -> None:
        """Forget every pending call (their results are no longer wanted)."""
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()

    def shutdown(self) -> None:
        """Wake a waiting :meth:`take`, cancel queued calls, wait for running ones. Idempotent."""
        if not self._closed.done():
            try:
                self._closed.set_result(None)
            except concurrent.futures.InvalidStateError:  # shut down twice at once
                pass
        # Cancel without emptying the window: a consumer on another thread may be reading
        # it, and it sees the closed flag before it takes anything more.
        for _, future in list(self._pending):
            future.cancel()
        self._executor.shutdown()
