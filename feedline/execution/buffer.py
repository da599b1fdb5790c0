"""A bounded, closable FIFO shared by one producer thread and one consumer."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from typing import Any


class BufferClosed(BaseException):
    """A stage's buffer or call window was closed (its pipeline was closed) while in use.

    A ``BaseException``, like ``GeneratorExit``: it must pass through every ``except
    Exception`` on its way up (``ignore_errors()`` would otherwise swallow it and ask the
    closed stage again, forever). :class:`~feedline.core.iterator.PipelineIterator` turns it
    into ``StopIteration`` for a consumer whose ``next()`` was ended by ``close()``.
    """


class BoundedBuffer:
    """A FIFO of at most ``capacity`` items whose waits end when it is closed.

    Unlike ``queue.Queue`` it can be closed (waking every waiter), its capacity can change
    while in use (autotuning), and its contents can be copied for a checkpoint.

    Example:
        >>> buffer = BoundedBuffer(2)
        >>> buffer.put(1); buffer.put(2); buffer.get()
        1
    """

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._capacity = max(1, capacity)
        self._cond = threading.Condition()
        self._closed = False

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        """Change how many items may wait; wakes a producer waiting for room."""
        with self._cond:
            self._capacity = max(1, capacity)
            self._cond.notify_all()

    def wait_for_room(self) -> None:
        """Block until an item may be added; raises :class:`BufferClosed` when closed."""
        with self._cond:
            while len(self._items) >= self._capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                raise BufferClosed

    def put(self, item: Any) -> None:
        """Add ``item``, waiting for room; raises :class:`BufferClosed` when closed."""
        with self._cond:
            while len(self._items) >= self._capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                raise BufferClosed
            self._items.append(item)
            self._cond.notify_all()

    def put_nowait(self, item: Any) -> None:
        """Add ``item`` even past capacity (the caller already waited for room)."""
        with self._cond:
            if self._closed:
                raise BufferClosed
            self._items.append(item)
            self._cond.notify_all()

    def get(self) -> Any:
        """Remove and return the oldest item, waiting for one; :class:`BufferClosed` if closed."""
        with self._cond:
            while not self._items and not self._closed:
                self._cond.wait()
            if self._closed:
                raise BufferClosed
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def snapshot(self) -> list[Any]:
        """A copy of the waiting items, oldest first."""
        with self._cond:
            return list(self._items)

    def extend(self, items: Iterable[Any]) -> None:
        """Add items without waiting (used to refill a buffer from a checkpoint)."""
        with self._cond:
            self._items.extend(items)
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._items.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        """Wake and fail every current and future wait. Idempotent."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()
