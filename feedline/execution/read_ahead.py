"""The one mechanism that runs work ahead of a consumer.

A :class:`ReadAhead` is a bounded window of tasks in flight on an executor. Prefetch, the
parallel ``map`` and ``batch`` stages and each dataset ``interleave`` reads ahead all use it:

* **bounded**: at most ``limit`` tasks are in the window (running, queued or finished and
  not yet taken); the stage adds one when :meth:`ReadAhead.has_room`;
* **ordered or not**: :meth:`ReadAhead.take` hands tasks back in submission order, or, when
  not ``deterministic``, whichever finished first;
* **errors in their place**: a task's exception comes back through its future, in its
  turn; a failure known before any task could run (the input's own error) takes a place in
  the window with :meth:`ReadAhead.add_failed`;
* **lazy**: the executor is made by the first :meth:`ReadAhead.submit`, so an iterator that
  is built, restored and closed without being read starts no thread;
* **one shutdown path**: :meth:`ReadAhead.shutdown` is idempotent and may come from another
  thread while the consumer waits in :meth:`ReadAhead.take`; the wait ends at once with
  :class:`BufferClosed`, even if a task never returns, and the executor waits for its
  threads a bounded time (see :mod:`feedline.execution.executor`);
* **per-element timeout**: a wait longer than ``element_timeout`` raises ``TimeoutError``
  naming the stage and the element.

The window holds the *tags* the stage gave each task (input positions, element indices),
never needs to hold inputs: checkpoints record positions (:mod:`feedline.execution.positions`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from feedline.core.iterator import chunk_reader
from feedline.execution.executor import Executor
from feedline.execution.positions import RUN, PositionReader, PositionTracker, initial_position

_FIRST = concurrent.futures.FIRST_COMPLETED


class BufferClosed(BaseException):
    """A stage's read-ahead was shut down (its pipeline was closed) while in use.

    A ``BaseException``, like ``GeneratorExit``: it must pass through every ``except
    Exception`` on its way up (``ignore_errors()`` would otherwise swallow it and ask the
    closed stage again, forever). :class:`~feedline.pipeline.PipelineIterator` turns it
    into ``StopIteration`` for a consumer whose ``next()`` was ended by ``close()``.
    """


class StopSignal:
    """Set once, by whoever shuts a stage down; a wait on tasks also wakes when it is set.

    Several windows of one stage (interleave's open datasets) share one signal, so closing
    the stage wakes a consumer waiting on any of them.

    Example:
        >>> signal = StopSignal(); signal.set(); signal.set(); signal.is_set()
        True
    """

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._set = False  # read on every element: a plain flag, no lock

    def set(self) -> None:
        self._set = True
        if not self.future.done():
            try:
                self.future.set_result(None)
            except concurrent.futures.InvalidStateError:  # set twice at once
                pass

    def is_set(self) -> bool:
        return self._set


def _set_all(fn: Callable[..., None], futures: list[concurrent.futures.Future[Any]],
             args: tuple[Any, ...]) -> None:
    try:
        fn(futures, *args)
    except BaseException as error:  # noqa: BLE001 - handed over through the futures
        for future in futures:
            if not future.done():
                try:
                    future.set_exception(error)
                except concurrent.futures.InvalidStateError:  # cancelled meanwhile
                    pass


def _failed(error: BaseException) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_exception(error)
    return future


class ReadAhead:
    """Up to ``limit`` tasks in flight on an executor, handed back in order or as finished.

    Args:
        name: The stage's name, for errors, warnings and thread names.
        executor: An executor, or a function making one (called by the first submit).
        limit: Most tasks in the window.
        deterministic: Hand tasks back in submission order (else as they finish).
        element_timeout: Seconds :meth:`take` waits for one task before raising
            ``TimeoutError``; ``None`` waits as long as it takes.
        describe: Names the element a tag stands for, in timeout errors.
        stop: The stage's :class:`StopSignal`, when several windows share one.

    Example:
        >>> from feedline.execution.executor import ThreadExecutor
        >>> window = ReadAhead("doc", lambda: ThreadExecutor(2, "doc"), limit=2)
        >>> window.submit("a", str.upper, "a"); window.submit("b", str.upper, "b")
        >>> [(tag, future.result()) for tag, future in (window.take(), window.take())]
        [('a', 'A'), ('b', 'B')]
        >>> window.shutdown()
    """

    def __init__(self, name: str, executor: Executor | Callable[[], Executor], *, limit: int,
                 deterministic: bool = True, element_timeout: float | None = None,
                 describe: Callable[[Any], str] | None = None,
                 stop: StopSignal | None = None) -> None:
        self.name = name
        self.limit = max(1, limit)
        self._deterministic = deterministic
        self._timeout = element_timeout
        self._describe = describe or (lambda tag: "the next element")
        self._executor: Executor | None = None
        self._make_executor: Callable[[], Executor] | None = None
        if callable(getattr(executor, "submit", None)):
            self._executor = executor  # type: ignore[assignment]
        else:
            self._make_executor = executor  # type: ignore[assignment]
        self._pending: collections.deque[tuple[Any, concurrent.futures.Future[Any]]] = \
            collections.deque()
        self._stop = stop or StopSignal()
        self._lock = threading.Lock()
        self._shut = False

    def __len__(self) -> int:
        return len(self._pending)

    def __bool__(self) -> bool:
        # An empty window is still a window: ``window or make_new()`` must not replace it.
        return True

    @property
    def started(self) -> bool:
        return self._executor is not None

    @property
    def closed(self) -> bool:
        return self._shut or self._stop.is_set()

    def has_room(self) -> bool:
        return len(self._pending) < self.limit

    def threads(self) -> list[threading.Thread]:
        """The threads running this window's tasks so far (none before the first submit, or
        when its executor runs them elsewhere: processes, a shared pool)."""
        threads = getattr(self._executor, "threads", None)
        return threads() if callable(threads) else []

    @property
    def workers(self) -> int:
        """Tasks that may run at once (0 before the executor is made)."""
        return int(getattr(self._executor, "workers", 1)) if self._executor is not None else 0

    @property
    def executor_kind(self) -> str:
        """``"threads"`` or ``"processes"``: where this window's tasks run."""
        kind = getattr(self._executor, "kind", "thread")
        return "processes" if kind == "process" else "threads"

    def _executor_or_start(self) -> Executor:
        executor = self._executor
        if executor is None:
            with self._lock:
                if self._shut:
                    raise BufferClosed
                assert self._make_executor is not None
                executor = self._executor = self._make_executor()
        return executor

    def submit(self, tag: Any, fn: Callable[..., Any], /, *args: Any) -> None:
        """Start ``fn(*args)``; :meth:`take` returns it with ``tag``. :class:`BufferClosed`
        once shut down."""
        if self.closed:
            raise BufferClosed
        try:
            future = self._executor_or_start().submit(fn, *args)
        except RuntimeError:
            if self.closed:  # shut down from another thread meanwhile
                raise BufferClosed from None
            raise
        self._pending.append((tag, future))

    def submit_reads(self, tags: list[Any], fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(futures, *args)`` as one task that sets one future per tag, in order, each as
        soon as it has its result; each future takes its place in the window.

        ``fn`` calls ``set_running_or_notify_cancel()`` on each future before working on it
        and stops at the first that was cancelled. If ``fn`` raises, the futures it left
        unset get its exception.
        """
        if self.closed:
            raise BufferClosed
        futures: list[concurrent.futures.Future[Any]] = [
            concurrent.futures.Future() for _ in tags]
        try:
            self._executor_or_start().submit(_set_all, fn, futures, args)
        except RuntimeError:
            if self.closed:
                raise BufferClosed from None
            raise
        self._pending.extend(zip(tags, futures))

    def add_failed(self, tag: Any, error: BaseException) -> None:
        """Queue ``error`` in the window: :meth:`take` hands it back in its turn, as a
        future that raises it."""
        if self.closed:
            raise BufferClosed
        self._pending.append((tag, _failed(error)))

    def set_ordered(self, ordered: bool) -> None:
        """Hand tasks back in submission order from now on (``True``), or as they finish
        (``False``)."""
        self._deterministic = ordered

    def head_future(self) -> concurrent.futures.Future[Any] | None:
        """The future :meth:`take` returns next in order (``None`` when the window is empty)."""
        return self._pending[0][1] if self._pending else None

    def head_ready(self) -> bool:
        return bool(self._pending) and self._pending[0][1].done()

    def finished(self) -> int:
        """Tasks its consumer could take now without waiting: those done before the first
        one still running, in order; any done one, in completion order."""
        done = [future.done() for _, future in tuple(self._pending)]
        if not self._deterministic:
            return sum(done)
        return done.index(False) if False in done else len(done)

    def take(self) -> tuple[Any, concurrent.futures.Future[Any]]:
        """Wait for the next task and return ``(tag, finished future)``.

        ``future.result()`` gives the result or raises the task's own exception. Raises
        :class:`BufferClosed` when shut down (before or while waiting) and ``TimeoutError``
        when a task takes longer than ``element_timeout`` (the task stays in the window:
        a later call waits for it again).
        """
        stop = self._stop.future
        pending = self._pending
        if self._deterministic or len(pending) == 1:
            tag, future = pending[0]
            if not future.done():
                concurrent.futures.wait([future, stop], timeout=self._timeout,
                                        return_when=_FIRST)
            if self.closed:
                raise BufferClosed
            if not future.done():
                raise self._timed_out(tag)
            pending.popleft()
            return tag, future
        done, _ = concurrent.futures.wait([f for _, f in pending] + [stop],
                                          timeout=self._timeout, return_when=_FIRST)
        if self.closed:
            raise BufferClosed
        for position, (tag, future) in enumerate(pending):
            if future in done:
                del pending[position]
                return tag, future
        raise self._timed_out(pending[0][0])

    def _timed_out(self, tag: Any) -> TimeoutError:
        return TimeoutError(
            f"{self.name}: {self._describe(tag)} took longer than {self._timeout} s "
            "(Options().threading.element_timeout)")

    def tags(self) -> list[Any]:
        """Tags of the tasks not yet taken, in submission order."""
        return [tag for tag, _ in self._pending]

    def discard(self, wait: bool = False) -> list[concurrent.futures.Future[Any]]:
        """Forget every task in the window (their results are no longer wanted).

        Args:
            wait: Return only once the tasks already running have finished (a stage that
                is about to move its input elsewhere needs its readers off it).

        Returns:
            The futures that had a task on them (running, or done): without ``wait``, the
            caller owns them, and must wait for them before touching what those tasks read.
        """
        futures = [future for _, future in self._pending]
        self._pending.clear()
        # Only a future that could not be cancelled has a task on it (running or done). A
        # cancelled one is never waited for: ``wait`` counts it as done only once its task
        # calls ``set_running_or_notify_cancel``, which a task that never runs (or stopped at
        # an earlier cancelled future) never does, and waiting for it would hang.
        started = [future for future in futures if not future.cancel()]
        if wait:
            concurrent.futures.wait(started)
        return started

    def shutdown(self, stop_all: bool = True, keep_executor: bool = False) -> Executor | None:
        """Wake a waiting :meth:`take`, cancel queued tasks, stop the executor. Idempotent.

        Args:
            stop_all: Also set the shared :class:`StopSignal` (``False`` ends only this
                window, as when one of interleave's datasets ends).
            keep_executor: Leave the executor running and return it (the caller owns it
                now: a stage keeps its worker processes for its next iterator); its tasks
                already running finish there, unread.

        Returns:
            The executor, if kept (``None`` otherwise, or if none was made).
        """
        with self._lock:
            if self._shut:
                return None
            self._shut = True
        if stop_all:
            self._stop.set()
        # Cancel without emptying the window: a consumer on another thread may be reading
        # it, and it sees the closed flag before it takes anything more.
        for _, future in list(self._pending):
            future.cancel()
        executor = self._executor
        if executor is not None and keep_executor:
            return executor
        if executor is not None:
            executor.shutdown()
        return None


def wait_any(windows: list[ReadAhead], stop: StopSignal, timeout: float | None) -> bool:
    """Wait until one of ``windows`` has its next task finished, or ``stop`` is set.

    Returns whether one is ready (``False`` on timeout). Used by interleave with
    ``deterministic=False`` to take from whichever open dataset has an element.
    """
    futures = [f for f in (w.head_future() for w in windows) if f is not None]
    if any(f.done() for f in futures):
        return True
    done, _ = concurrent.futures.wait(futures + [stop.future], timeout=timeout,
                                      return_when=_FIRST)
    return bool(done)


ELEMENT, ERROR, END = 0, 1, 2
"""Tags of the items a :class:`SequentialReader` hands over: an element, an error of the
input (reading goes on after it), the end of the input. Read ahead, a chunk of elements is
one entry tagged :data:`~feedline.execution.positions.RUN` until handed out."""

TARGET_GROUP_SECONDS = 0.0002
"""Reading time of the items handed over together (one future): long enough that the
hand-off cost is small beside it, short enough that the consumer rarely waits for a group."""

ITEM_SECONDS_WEIGHT = 1 / 8
"""Weight of the newest group in :attr:`SequentialReader.seconds_per_item`."""

MAX_GROUPS_PER_READ = 64
"""Most groups (futures) in a reader's window at once: the window fills as items arrive and
are taken, never allocated whole up front (``prefetch(10**6)`` made a million futures before
its first element: 8 s and 1.8 GB; ``prefetch(10**12)`` ran out of memory)."""


class SequentialReader:
    """Reads one iterator ahead of its consumer, keeping positions, on a :class:`ReadAhead`.

    Prefetch and each of interleave's open datasets use it. The iterator is advanced only by
    tasks on ``executor`` (a one-thread executor or a :class:`~feedline.execution.executor.
    Strand`), one at a time. A task reads up to the free room in the window, handing items
    over in groups, one future per group, each set as soon as its items are read: the
    consumer gets the first group while the task reads on. Groups start at one item and grow
    while items are cheap (about :data:`TARGET_GROUP_SECONDS` of reading each). Checkpoints record positions
    (:class:`~feedline.execution.positions.PositionTracker`): the iterator's state taken by
    the reading task after some item, never the items read ahead.

    Args:
        name: Stage name, for errors and warnings.
        source: The iterator to read ahead (a ``DatasetIterator``).
        executor: Where reading tasks run (or a function making it, on the first read).
        capacity: Items to read ahead at most.
        max_capacity: Items it may read ahead when they are cheap to read (each group of
            items, about :data:`TARGET_GROUP_SECONDS` of reading, gets room for two):
            whole chunks move between threads, not a few items per hand-off.
        element_timeout: Seconds to wait for one item before ``TimeoutError``.
        stop: A :class:`StopSignal` shared by the stage's readers.

    Example:
        >>> import feedline as fl
        >>> from feedline.core.iterator import IteratorContext
        >>> from feedline.execution.executor import ThreadExecutor
        >>> source = fl.Dataset.range(3)._make_iterator(IteratorContext())
        >>> reader = SequentialReader("doc", source, lambda: ThreadExecutor(1, "doc"), 2)
        >>> [int(reader.next()) for _ in range(3)]
        [0, 1, 2]
        >>> reader.shutdown()
    """

    def __init__(self, name: str, source: Any, executor: Executor | Callable[[], Executor],
                 capacity: int, element_timeout: float | None = None,
                 stop: StopSignal | None = None, max_capacity: int | None = None) -> None:
        self._source = source
        self._capacity = self._base_capacity = max(1, capacity)
        self._max_capacity = max(self._capacity, max_capacity or 0)
        self._positions = PositionReader(source.__next__, source.state_dict,
                                         getattr(source, "replay_exact", True),
                                         chunk_reader(source),
                                         hold_order=getattr(source, "hold_order", None))
        self._tracker = PositionTracker()
        self._window = ReadAhead(name, executor, limit=self._capacity,
                                 element_timeout=element_timeout,
                                 describe=lambda tag: f"element {tag[0]}", stop=stop)
        self._requested = 0  # items asked of tasks so far: the next one's output index
        self._in_window = 0  # items asked of the tasks in the window
        self._group = 1  # items per future: grows when items are cheap
        # Items of the group taken last, not handed out yet: (item, tag, value, snapshot),
        # or a run (first, RUN, values, snapshot) of which ``_run_pos`` values went out.
        self._ready: collections.deque[tuple[int, int, Any, Any]] = collections.deque()
        self._run_pos = 0
        self._end_asked = False  # a task has seen the end: ask for nothing more
        self._ended = False  # the consumer has reached the end
        # Futures dropped from the window at the end whose tasks were still running: they
        # may be pulling from the source, so discard() waits for them before a restore.
        self._still_reading: list[concurrent.futures.Future[Any]] = []
        self.seconds_per_item: float | None = None
        """Seconds the source takes per item, a moving average (``None`` before the first
        group): the producer's pace, excluding the time it waited for room."""

    @property
    def window(self) -> ReadAhead:
        return self._window

    @property
    def capacity(self) -> int:
        """Items to read ahead at most (``prefetch(AUTOTUNE)`` raises it while running)."""
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._capacity = max(1, int(value))
        self._max_capacity = max(self._max_capacity, self._capacity)
        # The window's limit is what statistics read as the buffer's size.
        self._window.limit = self._capacity

    def _read(self, futures: list[concurrent.futures.Future[Any]], group: int) -> None:
        """On a worker: read ``group`` items into each future, in order; stop when one was
        cancelled (the reader was discarded or shut down)."""
        # Items are (item, tag, value, snapshot) with the tag ELEMENT (0) or ERROR (1) (the
        # reader's own (item, is_error, value, snapshot) tuples, as they come), or runs.
        pull_many = self._positions.pull_many
        clock = time.perf_counter
        ended = False
        for future in futures:
            if not future.set_running_or_notify_cancel():
                return
            started = clock()
            items: list[tuple[int, int, Any, Any]] = []
            count = 0
            while count < group and not ended:
                try:
                    pulled = pull_many(group - count)
                except StopIteration:
                    ended = True
                    items.append((-1, END, None, None))
                    continue
                items += pulled
                count += sum(len(e[2]) if e[1] == RUN else 1 for e in pulled)
            if ended and not items:
                items.append((-1, END, None, None))
            future.set_result((items, clock() - started, count))

    def _fill(self) -> None:
        room = self.capacity - self._in_window
        # Read in runs: fewer, longer tasks for cheap items (up to half the capacity), but
        # never wait for more than two groups' room: with costly items (batches) a reader
        # idle until half a large buffer drained would starve its consumer in bursts
        # (measured: prefetch(16) of chess batches 30% slower than prefetch(2)).
        least = max(1, min(self.capacity // 2, 2 * self._group))
        if self._end_asked or room <= 0 or (self._in_window and room < least):
            return
        if not self._tracker.has_snapshot:
            # Before the first task: the source is idle, its state is the start.
            self._tracker.add_snapshot((self._positions.pulled, self._source.state_dict()))
        group = min(self._group, room)
        count = min(-(-room // group), MAX_GROUPS_PER_READ - len(self._window._pending))
        if count <= 0:
            return
        first = self._requested
        self._requested += count * group
        self._in_window += count * group
        self._window.submit_reads([(first + i * group, group) for i in range(count)],
                                  self._read, group)

    def prime(self) -> None:
        """Start reading ahead now (else the first :meth:`next_item` starts it)."""
        if not self._ended:
            self._fill()

    def ready(self) -> bool:
        """Whether :meth:`next_item` would return without waiting."""
        return bool(self._ready) or self._ended or self._window.head_ready()

    def next_item(self) -> tuple[int, Any]:
        """The next ``(tag, value)``: ``(ELEMENT, element)``, ``(ERROR, error)`` or
        ``(END, None)`` (again on every later call)."""
        ready = self._ready
        if ready:
            # The common case, once per element: an element of the group in hand, handed
            # out in order, no snapshot attached, and more in hand after it.
            item, tag, value, snapshot = ready[0]
            tracker = self._tracker
            if tag == RUN:
                pos = self._run_pos
                if pos < len(value) - 1 and item + pos == tracker.next and not tracker.done:
                    tracker.next += 1
                    self._run_pos = pos + 1
                    return ELEMENT, value[pos]
            elif tag == ELEMENT and snapshot is None and len(ready) > 1 \
                    and item == tracker.next and not tracker.done:
                ready.popleft()
                tracker.next = item + 1
                return ELEMENT, value
        return self._next_item()

    def _take_group(self) -> None:
        """Wait for the next group (a future) and put its items in hand."""
        (_, group), future = self._window.take()
        self._in_window -= group
        items, seconds, count = future.result()
        if items[-1][1] != END:
            # Items per hand-off: as many as are read in about TARGET_GROUP_SECONDS.
            per_item = seconds / count
            previous = self.seconds_per_item
            self.seconds_per_item = per_item if previous is None else \
                previous + (per_item - previous) * ITEM_SECONDS_WEIGHT
            wanted = int(TARGET_GROUP_SECONDS / max(per_item, 1e-9))
            if self._max_capacity > self._capacity:
                # Cheap items: room for two groups of them (cheap to read is small to hold).
                self.capacity = min(self._max_capacity, max(self._base_capacity, 2 * wanted))
            self._group = max(1, min(max(1, self.capacity // 2), wanted))
        self._ready.extend(items)

    def _group_ready(self) -> bool:
        """Whether the next group has been read without failing (taking it cannot wait or
        raise)."""
        future = self._window.head_future()
        return future is not None and future.done() and not future.cancelled() \
            and future.exception() is None

    def elements_in_hand(self, limit: int) -> int:
        """How many elements (not errors, not the end) :meth:`take_elements` can return now,
        up to ``limit``, without waiting: groups already read are taken in hand."""
        ready = self._ready
        count = scanned = 0
        while True:
            for entry in itertools.islice(ready, scanned, None):
                tag = entry[1]
                if tag == RUN:
                    count += len(entry[2]) - (self._run_pos if scanned == 0 else 0)
                elif tag == ELEMENT:
                    count += 1
                else:
                    return min(count, limit)
                if count >= limit:
                    return limit
                scanned += 1
            if self._ended or not self._group_ready():
                return count
            self._take_group()

    def take_elements(self, count: int) -> list[Any]:
        """The next ``count`` elements, which :meth:`elements_in_hand` said are in hand."""
        ready, tracker = self._ready, self._tracker
        out: list[Any] = []
        while len(out) < count:
            first, tag, values, snapshot = ready[0]
            if tag != RUN:  # a single element
                ready.popleft()
                tracker.add_snapshot(snapshot)
                tracker.handed_out(first)
                out.append(values)
                continue
            # A run: its values in one slice, the tracker moved once (the common case).
            pos = self._run_pos
            taken = min(count - len(out), len(values) - pos)
            if pos + taken == len(values):
                ready.popleft()
                self._run_pos = 0
            else:
                self._run_pos = pos + taken
                snapshot = None  # it follows the run's last value
            if not out and pos == 0 and taken == len(values):
                out = values
            else:
                out += values[pos:pos + taken]
            start = first + pos
            if start == tracker.next and not tracker.done:
                tracker.next = start + taken
            else:
                for item in range(start, start + taken):
                    tracker.handed_out(item)
            tracker.add_snapshot(snapshot)
        if not ready:
            self._fill()  # keep reading while the consumer works
        return out

    def _next_item(self) -> tuple[int, Any]:
        ready = self._ready
        if not ready:
            if self._ended:
                return END, None
            self._fill()
            self._take_group()
        item, tag, value, snapshot = ready[0]
        if tag == RUN:  # its next value, as an element (the snapshot follows its last)
            pos = self._run_pos
            item, tag, value = item + pos, ELEMENT, value[pos]
            if pos + 1 < len(ready[0][2]):
                self._run_pos, snapshot = pos + 1, None
            else:
                ready.popleft()
                self._run_pos = 0
        else:
            ready.popleft()
        if tag == END:
            self._ended = self._end_asked = True
            ready.clear()
            self._run_pos = 0
            # A task queued behind the one that saw the end may be pulling from the source
            # now: a restore must wait for it (see discard()).
            self._still_reading = [f for f in self._window.discard() if not f.done()]
            return END, None
        tracker = self._tracker
        if snapshot is not None:
            tracker.add_snapshot(snapshot)
        tracker.handed_out(item)
        if tag == ERROR:
            self._positions.handed_out(item)
        if not ready:
            self._fill()  # keep reading while the consumer works
        return tag, value

    def next(self) -> Any:
        """The next element; ``StopIteration`` at the end; raises the input's errors."""
        tag, value = self.next_item()
        if tag == ELEMENT:
            return value
        if tag == END:
            raise StopIteration
        raise value

    def position(self) -> dict[str, Any]:
        """This reader's checkpoint: a position in the source, never the items read ahead."""
        if not self._tracker.has_snapshot:  # never read: the source is idle
            return initial_position(self._source.state_dict(), self._positions.pulled)
        return self._tracker.state(self._positions.pending_errors(self._tracker))

    def restore(self, position: dict[str, Any]) -> None:
        """Continue from ``position`` (call before the first read, or after :meth:`discard`)."""
        self._source.load_state_dict(position["input"])
        self._positions.restore(position)
        self._tracker.restore(position)
        self._requested = int(position["next"])

    def discard(self) -> None:
        """Drop what was read ahead (before a restore); waits for the task reading now."""
        self._window.discard(wait=True)
        if self._still_reading:
            concurrent.futures.wait(self._still_reading)
            self._still_reading = []
        self._ready.clear()
        self._run_pos = 0
        self._in_window = 0
        self._end_asked = self._ended = False

    def shutdown(self, stop_all: bool = True) -> None:
        self._window.shutdown(stop_all)
