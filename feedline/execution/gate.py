"""A gate that lets at most ``limit`` tasks of a stage do their work at once.

The tuner sets how many workers of a threaded ``map`` compute at once
(:mod:`feedline.autotune.tuner`). Capping the tasks *in flight* instead would also cap
those queued behind the running ones: while the consumer is away (stacking a batch), a
worker that finishes would find nothing to do until the consumer comes back and submits
more. The gate caps the running ones only; the window (``2 * parallelism`` tasks) keeps
work queued.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self


class RunningGate:
    """At most :attr:`limit` holders at once (``None``: no limit); the limit may change
    while tasks wait, and a lower one takes effect as running tasks leave.

    No task waits for anything but running tasks, which always finish: the gate cannot
    deadlock, and a pipeline's shutdown (which cancels the queued tasks) is not held up
    beyond the tasks already running.

    Example:
        >>> gate = RunningGate(limit=1)
        >>> with gate:
        ...     gate.running
        1
        >>> gate.limit = 2
        >>> gate.running
        0
    """

    def __init__(self, limit: int | None = None) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._limit = limit
        self.running = 0
        """Holders now."""

    @property
    def limit(self) -> int | None:
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        with self._condition:
            self._limit = None if value is None else max(1, int(value))
            self._condition.notify_all()

    def __enter__(self) -> Self:
        with self._condition:
            while self._limit is not None and self.running >= self._limit:
                self._condition.wait()
            self.running += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        with self._condition:
            self.running -= 1
            self._condition.notify()
