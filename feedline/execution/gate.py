"""A gate that lets at most ``limit`` threads of a pool take work at once.

The tuner sets how many workers of a threaded ``map`` compute at once
(:mod:`feedline.autotune.tuner`), between one and the pool's threads (hundreds, for calls
that wait: the pool starts threads as the limit lets them work, and ends those a lowered
limit leaves without a place, :class:`~feedline.execution.executor.ThreadExecutor`). The
gate stands in
front of a worker's *queue*, not its task: a worker keeps its place across tasks while the
limit allows, so with one place, one thread runs every task in turn, exactly as a pool of
one thread would. Gating each task instead (a thread takes a task, then waits for a place)
hands every task from the thread finishing to the thread waiting with it: on chess that
wake-up per task, fighting the consumer's thread for the GIL, read 25% slower than one
thread.

Capping the tasks *in flight* instead would also cap those queued behind the running ones:
while the consumer is away (stacking a batch), a worker that finishes would find nothing to
do until the consumer comes back and submits more. The gate caps the working threads only;
the window (``2 * parallelism`` tasks) keeps work queued.
"""

from __future__ import annotations

import threading


class WorkerGate:
    """At most :attr:`limit` threads hold a place at once (``None``: no limit).

    A thread :meth:`enter`\\ s before it takes work and keeps its place across tasks; after
    each task it gives the place back with :meth:`leave_if_over` only when the limit has
    fallen below the places held. A raised limit lets waiting threads in at once; a lowered
    one applies as running tasks end. :meth:`close` opens the gate for good, so that a pool
    shutting down gets all its threads to their exit.

    No thread waits for anything but threads holding a place, which wait only for work or
    run a task: the gate cannot deadlock.

    Example:
        >>> gate = WorkerGate(limit=1)
        >>> gate.enter(); gate.active
        1
        >>> gate.limit = 0  # at least one place always
        >>> gate.limit
        1
        >>> gate.leave(); gate.active
        0
    """

    def __init__(self, limit: int | None = None) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._limit = None if limit is None else max(1, int(limit))
        self._closed = False
        self.active = 0
        """Threads holding a place now."""

    @property
    def limit(self) -> int | None:
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        with self._condition:
            self._limit = None if value is None else max(1, int(value))
            self._condition.notify_all()

    def enter(self) -> None:
        """Take a place, waiting while :attr:`limit` threads hold one."""
        with self._condition:
            while self._full():
                self._condition.wait()
            self.active += 1

    def leave(self) -> None:
        """Give a place back (a thread that is ending)."""
        with self._condition:
            self.active -= 1
            self._condition.notify()

    def leave_if_over(self) -> bool:
        """Give the place back if more threads hold one than the limit allows.

        Returns:
            Whether it was given back (the thread must :meth:`enter` again before more work).
        """
        limit = self._limit
        if limit is None or self.active <= limit:  # the common case: no lock per task
            return False
        with self._condition:
            if self._closed or self._limit is None or self.active <= self._limit:
                return False
            # Still at or over the limit after this: nobody waiting may enter yet.
            self.active -= 1
            return True

    def close(self) -> None:
        """Let every waiting thread in, now and from now on. Idempotent."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def _full(self) -> bool:
        return not self._closed and self._limit is not None and self.active >= self._limit
