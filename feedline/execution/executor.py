"""Executors run user functions off the consumer's thread.

Every parallel stage gets its own executor from :func:`make_executor`, so that stages never
wait on each other's workers (a nested pipeline inside ``interleave`` cannot deadlock on a
pool its parent has filled) and closing a stage ends exactly its own threads.

Worker threads are **daemon threads**, on purpose: a user function that never returns (a
stuck network read, a deadlocked lock) must not keep the interpreter from exiting. Closing
a stage waits at most ``close_timeout`` seconds for its running calls; threads still busy
then are abandoned (they end with the process) and a ``RuntimeWarning`` names the stage.
``concurrent.futures.ThreadPoolExecutor`` is not used because its threads are joined,
without a time limit, at interpreter exit.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import queue
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

from feedline.core.options import ThreadingOptions
from feedline.execution.gate import WorkerGate

_STAGE_IDS = itertools.count()

DEFAULT_CLOSE_TIMEOUT: float = ThreadingOptions.close_timeout
"""Seconds ``close()`` waits for a stage's running calls (``Options().threading.close_timeout``)."""


class Executor(Protocol):
    """What a read-ahead stage needs from an executor."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future[Any]:
        """Start ``fn(*args)``; its result or exception arrives through the future."""

    def shutdown(self) -> None:
        """Cancel queued calls and end the workers, waiting a bounded time. Idempotent."""


def _run(future: concurrent.futures.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]
         ) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the future
        future.set_exception(error)
    else:
        future.set_result(result)


class _Roster:
    """The threads of one :class:`ThreadExecutor` and what they are doing, shared with them
    (never the executor or the stage: an abandoned pipeline is still collected while its
    threads wait for work).

    A submitted call starts a thread only when more calls are queued than threads wait for
    work: counted exactly, so that a pool whose gate rises from 4 to 64 starts the threads
    it now may (a permit per finished call, as ``concurrent.futures`` counts idle threads,
    piles up while every thread is busy and would let the pool start none). When the gate
    (:class:`~feedline.execution.gate.WorkerGate`) falls below the threads started (a map
    that ran 200 threads for calls that waited, now needing 8), the threads past its limit
    end once their call returns, rather than wait at the gate for good.

    A thread's place is taken under :attr:`lock` (it is listed in :attr:`threads` and
    :attr:`starting`, so the cap counts it and a shutdown gives it its sentinel), and the
    thread is started after the lock is released: ``Thread.start()`` waits for the new
    thread to run, and under the lock that wait hung on CPython 3.13t (issue 39).
    """

    __slots__ = ("gate", "idle", "lock", "queued", "settled", "starting", "threads")

    def __init__(self, gate: WorkerGate | None) -> None:
        self.gate = gate
        self.lock = threading.Lock()
        # Notified (under ``lock``) when a thread in ``starting`` has started or failed to.
        self.settled = threading.Condition(self.lock)
        self.threads: list[threading.Thread] = []  # started, or being started (below)
        # Threads listed in ``threads`` whose ``start()`` has not returned yet: started
        # outside the lock, they cannot be joined (nor their CPU time read) until it has.
        self.starting: set[threading.Thread] = set()
        self.queued = 0  # calls submitted that no thread has taken yet
        self.idle = 0  # threads waiting for a call

    def retire(self) -> bool:
        """Whether the calling thread, which just gave its place at the gate back, ends now
        (more threads are left than the gate's limit)."""
        gate = self.gate
        limit = None if gate is None else gate.limit
        with self.lock:
            if limit is None or len(self.threads) <= limit:
                return False
            self.threads.remove(threading.current_thread())
            return True


def _worker(work: queue.SimpleQueue[Any], roster: _Roster) -> None:
    # Refers to the queue and the roster only, never to the stage: an abandoned pipeline is
    # still collected.
    gate, lock = roster.gate, roster.lock
    placed = False
    try:
        if gate is not None:
            gate.enter()
            placed = True
        while True:
            with lock:
                roster.idle += 1
            item = work.get()
            with lock:
                roster.idle -= 1
                roster.queued -= 1
            if item is None:
                return
            _run(*item)
            del item  # drop the finished call's arguments before waiting for the next
            if gate is not None and gate.leave_if_over():
                placed = False
                if roster.retire():
                    return  # the limit fell below the threads: one fewer
                gate.enter()  # wait until a place is free again
                placed = True
    finally:
        if placed:
            assert gate is not None
            gate.leave()


class ThreadExecutor:
    """A pool of up to ``workers`` named daemon threads, started as calls need them.

    Args:
        workers: Most calls that may run at once (threads).
        name: Stage name, used in thread names (``feedline-<name>-<id>_<k>``) and warnings.
        close_timeout: Seconds :meth:`shutdown` waits for running calls before abandoning
            their threads with a ``RuntimeWarning``.
        gate: How many of the threads take work at once, if fewer than ``workers`` (a
            tuned ``map``'s setting, which the tuner changes while the pool runs). Threads
            are started as calls need them, up to its limit; when the limit falls, the
            threads past it end once their call returns, so a pool sized for the most a
            stage may ever run (hundreds of threads for calls that wait) holds only the
            threads its setting uses.

    Example:
        >>> executor = ThreadExecutor(2, "demo")
        >>> executor.submit(pow, 2, 10).result()
        1024
        >>> executor.shutdown()
    """

    kind = "thread"
    """Where calls run, as ``make_executor`` names it (statistics report it)."""

    def __init__(self, workers: int, name: str,
                 close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
                 gate: WorkerGate | None = None) -> None:
        self.name = name
        self._gate = gate
        self._prefix = f"feedline-{name}-{next(_STAGE_IDS)}"
        self._numbers = itertools.count()  # thread names: threads end and start again
        self._workers = max(1, workers)
        self._close_timeout = close_timeout
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._roster = _Roster(gate)
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        roster = self._roster
        thread = None
        with roster.lock:
            if self._shut:
                raise RuntimeError(f"the executor of {self.name} is shut down")
            self._work.put((future, fn, args))
            roster.queued += 1
            # Threads waiting for work take the calls queued; more calls than those start
            # a thread, while the gate allows. Its place is taken now (the cap counts it,
            # a shutdown gives it a sentinel); it starts once the lock is released.
            if roster.queued > roster.idle and len(roster.threads) < self._cap():
                thread = threading.Thread(
                    target=_worker, args=(self._work, roster), daemon=True,
                    name=f"{self._prefix}_{next(self._numbers)}")
                roster.threads.append(thread)
                roster.starting.add(thread)
        if thread is not None:
            self._start(thread)
        return future

    def _start(self, thread: threading.Thread) -> None:
        """Start a thread whose place :meth:`submit` took, outside the roster's lock.

        A shutdown meanwhile has given it a sentinel: it starts, finds it and ends. If it
        cannot start ("can't start new thread"), its place is given back and the calls
        queued are left to the threads running; with none running, nothing would ever take
        them, so their futures fail with an error naming the stage (never lost silently).
        """
        roster = self._roster
        failure: Exception | None = None
        stranded: list[Any] = []
        try:
            thread.start()
        except Exception as error:  # noqa: BLE001 - reported through the futures below
            failure = error
        finally:
            with roster.lock:
                roster.starting.discard(thread)
                if failure is not None:
                    roster.threads.remove(thread)
                    if not roster.threads:
                        stranded = self._take_queued()
                roster.settled.notify_all()
        for item in stranded:
            if item is not None and item[0].set_running_or_notify_cancel():
                refused = RuntimeError(f"{self.name}: could not start a worker thread for "
                                       f"the call ({failure})")
                refused.__cause__ = failure
                item[0].set_exception(refused)

    def _take_queued(self) -> list[Any]:
        """Every call queued (the caller holds the roster's lock and no thread is left)."""
        items = []
        while True:
            try:
                items.append(self._work.get_nowait())
            except queue.Empty:
                break
        self._roster.queued -= len(items)
        return items

    @property
    def workers(self) -> int:
        """Calls that may run at once now (the gate's limit, within ``workers``)."""
        return self._cap()

    def _cap(self) -> int:
        limit = None if self._gate is None else self._gate.limit
        return self._workers if limit is None else min(self._workers, limit)

    def threads(self) -> list[threading.Thread]:
        """The threads running now (for statistics: their CPU time is this stage's work)."""
        roster = self._roster
        with roster.lock:
            return [t for t in roster.threads if t not in roster.starting]

    def shutdown(self) -> None:
        """Cancel queued calls, wait up to ``close_timeout`` for running ones. Idempotent.

        Threads still running a call after that are abandoned (daemon threads end with the
        process; each ends by itself once its call returns) and a ``RuntimeWarning`` names
        the stage. A thread that :meth:`submit` is starting (outside the roster's lock) gets
        its sentinel like the others and is joined once started.
        """
        roster = self._roster
        with roster.lock:
            if self._shut:
                return
            self._shut = True
        while True:  # cancel what has not started
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            with roster.lock:
                roster.queued -= 1
            if item is not None:
                item[0].cancel()
        with roster.lock:
            # A sentinel for every thread, those still being started by submit() too: no
            # thread is added from now on (submit refuses), so none is left waiting.
            threads = list(roster.threads)
            for _ in threads:
                self._work.put(None)
                roster.queued += 1
        if self._gate is not None:
            self._gate.close()  # threads waiting for a place go to their end
        current = threading.current_thread()
        deadline = time.monotonic() + self._close_timeout
        with roster.lock:
            # A thread can be joined once its start() has returned (a failed one has left
            # the roster and never ran): wait for those being started, within the deadline.
            roster.settled.wait_for(lambda: not roster.starting,
                                    max(0.0, deadline - time.monotonic()))
            unstarted = set(roster.starting)
        for thread in threads:
            # A pipeline garbage-collected on one of its own workers must not join that
            # worker; a thread whose start failed (no ident) never ran.
            if thread is not current and thread not in unstarted and thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t is not current and
                 (t in unstarted or (t.ident is not None and t.is_alive()))]
        if stuck:
            warnings.warn(
                f"feedline: {self.name} did not stop within {self._close_timeout} s "
                f"(Options().threading.close_timeout); abandoned {len(stuck)} daemon "
                f"thread(s) still running a call (or still starting): {', '.join(stuck)}",
                RuntimeWarning, stacklevel=2)

class Strand:
    """Runs the calls submitted through it one at a time, in order, on a shared executor.

    Several readers (interleave's open datasets) share one pool of workers, but each reads
    an iterator that must never be advanced by two threads at once: a strand gives that
    guarantee without a thread of its own. :meth:`shutdown` cancels the strand's queued
    calls only; the shared executor is shut down by its owner.

    Example:
        >>> pool = ThreadExecutor(2, "doc")
        >>> strand = Strand(pool)
        >>> futures = [strand.submit(pow, 2, n) for n in range(3)]
        >>> [f.result() for f in futures]
        [1, 2, 4]
        >>> strand.shutdown(); pool.shutdown()
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._queue: collections.deque[tuple[concurrent.futures.Future[Any],
                                             Callable[..., Any], tuple[Any, ...]]] = \
            collections.deque()
        self._lock = threading.Lock()
        self._running = False
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("the strand is shut down")
            self._queue.append((future, fn, args))
            start = not self._running
            self._running = True
        if start:
            self._turn()
        return future

    def _turn(self) -> None:
        """Hand the strand's next call to the executor."""
        self._executor.submit(self._run_next).add_done_callback(self._turn_failed)

    def _turn_failed(self, turn: concurrent.futures.Future[Any]) -> None:
        # ``_run_next`` never raises: a turn failing means the executor could not run it
        # (it could start no thread), and the calls waiting for it would never run: they
        # fail with its error, and the next submit tries again.
        if turn.cancelled() or turn.exception() is None:
            return
        error = turn.exception()
        with self._lock:
            queued = list(self._queue)
            self._queue.clear()
            self._running = False
        for future, _, _ in queued:
            if future.set_running_or_notify_cancel():
                future.set_exception(error)

    def _run_next(self) -> None:
        with self._lock:
            if not self._queue:
                self._running = False
                return
            future, fn, args = self._queue.popleft()
        _run(future, fn, args)
        with self._lock:
            more = bool(self._queue) and not self._shut
            self._running = more
        if more:
            # One call per turn: other strands waiting on the pool get theirs in between.
            try:
                self._turn()
            except RuntimeError:  # the pool shut down meanwhile: nothing more will run
                self.shutdown()

    def shutdown(self) -> None:
        """Cancel the calls not started yet. Idempotent."""
        with self._lock:
            self._shut = True
            queued = list(self._queue)
            self._queue.clear()
        for future, _, _ in queued:
            future.cancel()


ExecutorFactory = Callable[[int, str, float], Executor]
"""Makes an executor of one kind: ``factory(workers, name, close_timeout)``."""

_KINDS: dict[str, ExecutorFactory] = {}


def register_executor_kind(kind: str, factory: ExecutorFactory) -> None:
    """Let :func:`make_executor` make executors of ``kind`` with ``factory``.

    Worker processes are the placement layer's (:mod:`feedline.placement.process_executor`
    registers ``"process"`` when imported): this layer runs calls on threads and knows no
    other kind by name.

    Example:
        >>> register_executor_kind("doc", lambda workers, name, close_timeout:
        ...                        ThreadExecutor(workers, name, close_timeout))
        >>> ex = make_executor(1, "doc", "doc"); ex.submit(len, "ab").result(); ex.shutdown()
        2
    """
    _KINDS[kind] = factory


def make_executor(workers: int, name: str, kind: str = "thread",
                  close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
                  gate: WorkerGate | None = None) -> Executor:
    """The executor for one parallel stage.

    Args:
        workers: Calls to run at once.
        name: Stage name, used in thread names (visible in profilers and debuggers).
        kind: ``"thread"`` (the default), or a kind registered with
            :func:`register_executor_kind` (``"process"``, once
            :mod:`feedline.placement.process_executor` is imported).
        close_timeout: Seconds shutting down waits for running calls.
        gate: Threads only: how many of them take work at once (:class:`ThreadExecutor`).

    Example:
        >>> ex = make_executor(1, "doc"); ex.submit(len, "abc").result(); ex.shutdown()
        3
    """
    if kind == "thread":
        return ThreadExecutor(workers, name, close_timeout, gate)
    factory = _KINDS.get(kind)
    if factory is None:
        known = ", ".join(repr(k) for k in ("thread", *sorted(_KINDS)))
        raise ValueError(f"unknown executor kind {kind!r}: expected one of {known}")
    return factory(workers, name, close_timeout)
