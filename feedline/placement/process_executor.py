"""A process executor for GIL-bound Python functions.

Threads are the default because NumPy, I/O and codecs release the GIL. A pure-Python
function holds it, so only separate processes run it in parallel.

Why a pool of its own rather than ``concurrent.futures.ProcessPoolExecutor``: that pool
pickles the callable with every task and sends every result through one shared result
queue as a pickle. A map function closing over a 50 MB table then crossed the pipe 50 MB
per task (7.9 s for 100 elements of a 3 ms function, 0.4 s without the table), and a
batch of arrays was pickled, copied through the pipe and unpickled on the way back. An
initializer could install one function per pool, but not the function of a stage that
only learns later it wants processes, nor several functions. Here each worker has one
duplex :class:`~feedline.placement.ipc.transport.Channel` (its own task and result stream):

* a function travels **once per worker**, before that worker's first call of it; its large
  array constants go out-of-band through anonymous shared memory, so a 50 MB table costs
  one 50 MB write per worker, never a pickle per task;
* arguments and results travel through the same channel: their NumPy payloads land in
  shared memory (no pickling or copying of the payload by the receiver);
* a worker holds at most two calls: the one it runs and, for calls known to be short
  (:data:`PIPELINE_SECONDS`), the next, waiting in its socket, so that it goes from one to
  the next without waiting for the parent; the other calls wait in the parent's queue, where
  a call not yet sent can always be cancelled, and ``shutdown`` knows exactly which calls
  were sent.

Workers are fresh interpreters (:mod:`feedline.placement.ipc.spawn`): a script needs no ``if
__name__ == "__main__"`` guard, which matters because an ``AUTOTUNE`` map may move to
processes without being asked (:mod:`feedline.placement.map_executor`).
Functions travel with cloudpickle (lambdas, closures and functions of ``__main__`` work),
their code by ``marshal`` (:mod:`feedline.core.pickling`): a worker's traceback names the
user's file and line, not ``<dynamic-code>``.

**Faults.** A worker's exception comes back as itself (its own class, rebuilt in the parent
where it can be, see :class:`~feedline.placement.ipc.transport.PackedError`) with the worker's
traceback as a note. A worker that dies (killed, crashed, out of memory, ``os._exit``)
while running a call fails *that call* with :class:`~feedline.WorkerProcessError` naming
the stage, the process and how it ended: the call's element is an error in its place
(``ignore_errors()`` drops it), and a new worker takes the next calls (the call sent ahead
to the dead worker never started: it goes back to the queue, first). A call that
processes several independent pieces (``map``'s chunks of elements) says how to split it
(``split_call``/``combine_call`` on the function): its pieces are then run again one per
call, so only the piece that kills its worker fails. A worker that dies idle is replaced,
and nothing is lost. What cannot go on ends the stage with an error marked fatal
(:func:`~feedline.core.error_records.mark_fatal`: ``ignore_errors()`` re-raises it) in
every pending and later call: :data:`MAX_START_FAILURES` workers in a row dying before they
could run a call (they cannot start, or cannot load the function), a function that does
not pickle or cannot be loaded in a worker, a worker that cannot be started at all. Never
a hang. ``shutdown`` waits at most ``close_timeout`` for running calls, then terminates
the workers still running one (with a ``RuntimeWarning`` naming the stage): no process is
left behind. Workers ignore ``SIGINT``: on Ctrl-C the parent decides (its
``KeyboardInterrupt`` closes the pipeline, which ends them). A worker exits when its
channel closes (the parent closed it, exited or died) and, on Linux, the moment its parent
dies, even in the middle of a C call that never returns (:mod:`feedline.placement.ipc.spawn`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from feedline.core.error_records import mark_fatal
from feedline.core.errors import WorkerProcessError
from feedline.core.validation import schedulable_cpus
from feedline.execution.executor import DEFAULT_CLOSE_TIMEOUT, register_executor_kind
from feedline.placement.ipc.spawn import describe_exit, exit_watch, serve_as_worker, start_worker
from feedline.placement.ipc.transport import Channel, PackedError

_FUNCTION, _CALL, _STOP = 0, 1, 2  # message kinds, parent to worker
_LOADED, _RESULT = 0, 1  # message kinds, worker to parent

PIPELINE_SECONDS = 0.05
"""Calls of a function that have taken less than this (a moving mean) are sent to a busy
worker one ahead: the next call waits in its socket, so the worker goes on without waiting
for the parent to receive its result and send it another (a round trip, and a wake-up of
the collector thread that competes for the GIL with the consumer: 10-16% of each worker's
time with ``map``'s chunks of ~5 ms on 2 loaded cores). Longer calls go to the first worker
free, as a call sent ahead cannot move to another worker that frees sooner."""

MAX_START_FAILURES = 3
"""Workers in a row that may die before running a call (while starting, or loading the
function) before the stage gives up with a fatal ``BrokenProcessPool``."""
_POOL_IDS = itertools.count()
_JOIN_SECONDS = 2.0  # an idle worker told to stop exits at once; this bounds a stuck exit


@dataclass(frozen=True)
class ProcessStatistics:
    """What a :class:`ProcessExecutor` has done so far.

    Attributes:
        workers_started: Worker processes started.
        functions_shipped: Function transfers (one per function and worker, never per call).
        function_bytes: Bytes of those transfers (pickle plus out-of-band array payloads).
        calls: Calls sent to workers.
    """

    workers_started: int = 0
    functions_shipped: int = 0
    function_bytes: int = 0
    calls: int = 0


def _worker_traceback(error: BaseException, stage: str) -> BaseException:
    # The traceback does not survive pickling: its text travels as a note.
    error.add_note(f"worker traceback (pid {os.getpid()}, {stage}):\n"
                   + "".join(traceback.format_exception(error)))
    return error


def _send_outcome(channel: Channel, ok: bool, value: Any, stage: str, fatal: bool) -> None:
    # With each result, the buffers of arguments this worker has freed: the parent reuses
    # them for later arguments.
    released = channel.released()
    try:
        channel.send((_RESULT, ok, value, released, fatal))
        return
    except (OSError, EOFError):
        raise
    except Exception as error:  # noqa: BLE001 - a result or error that does not pickle
        failure = error
    if not ok:
        # Its class may live in __main__ or a closure (plain pickle refuses those): by value.
        packed = PackedError(value, "")
        if packed.blob is not None:
            channel.send((_RESULT, False, packed, released, fatal))
            return
    what = "result" if ok else f"{type(value).__name__} raised"
    replacement = TypeError(f"{stage}: the {what} in a worker process cannot be sent "
                            f"back: {type(failure).__name__}: {failure}")
    if not ok:
        replacement.add_note("".join(traceback.format_exception(value)))
    channel.send((_RESULT, False, replacement, released, fatal))


_LAZY_PACKAGE = """\
def _lazy_package(name):
    import importlib, importlib.util, sys, types
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    class Lazy(types.ModuleType):
        def __getattr__(self, attribute):
            if not attribute.startswith("__"):  # a submodule: imported alone
                try:
                    found = importlib.util.find_spec(name + "." + attribute)
                except (ImportError, ValueError):
                    found = None
                if found is not None:
                    return importlib.import_module(name + "." + attribute)
            self.__class__ = types.ModuleType  # once: the package runs its __init__ now
            spec.loader.exec_module(self)
            return getattr(self, attribute)
    module = importlib.util.module_from_spec(spec)
    module.__class__ = Lazy
    sys.modules[name] = module
_lazy_package("feedline")
del _lazy_package
"""
"""Run first in a worker: ``feedline`` as a package whose ``__init__`` runs on the first use
of one of its names (``fl.Dataset`` in the function), not when the worker imports its own
modules (the worker loop, the transport) or a function of a submodule is unpickled: the
whole public surface (formats, datasets, the service) cost a worker ~0.4 s of CPU to
import, twice the rest of its start, and a parallel map waits for its workers to start."""

_ENTRY = (_LAZY_PACKAGE + "import sys; from feedline.placement.process_executor import worker_entry; "
          "worker_entry(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])")


def worker_entry(fd: int, parent_pid: int, stage: str) -> None:
    """The program of a worker process: serve the socket ``fd`` until it closes.

    The first message is the parent's ``sys.path`` and ``multiprocessing`` key; then
    functions (once each, each acknowledged once loaded) and calls, one at a time, until
    ``stop`` or the end of the channel.
    """
    channel = serve_as_worker(fd, parent_pid)
    import cloudpickle

    from feedline.execution import allocator

    allocator.configure()

    functions: dict[int, tuple[bool, Any]] = {}
    try:
        try:
            # Find the user's modules as the parent does; talk to its multiprocessing
            # managers (proxies in a closure authenticate with the parent's key).
            sys.path[:], authkey = channel.recv()
        except (EOFError, OSError):
            return
        multiprocessing.current_process().authkey = authkey
        while True:
            try:
                message = channel.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            kind = message[0]
            if kind == _STOP:
                return
            if kind == _FUNCTION:
                _, key, header, buffers = message
                try:
                    functions[key] = (True, cloudpickle.loads(header, buffers=buffers))
                except BaseException as error:  # noqa: BLE001 - reported with every call
                    error.add_note(f"feedline: the function of {stage} cannot be loaded in "
                                   "a worker process; the stage cannot go on")
                    functions[key] = (False, _worker_traceback(error, stage))
                del header, buffers
                # From here on, a death while running a call of it is that call's.
                try:
                    channel.send((_LOADED, key))
                except (OSError, EOFError):
                    return
                continue
            _, key, args, released = message
            del message
            channel.reclaim(released)  # buffers of our results the parent has freed
            loaded, fn = functions[key]
            if not loaded:
                ok, value = False, fn
            else:
                try:
                    ok, value = True, fn(*args)
                except BaseException as error:  # noqa: BLE001 - handed to the caller
                    ok, value = False, _worker_traceback(error, stage)
            del args  # free the arguments' shared memory before waiting for the next call
            try:
                _send_outcome(channel, ok, value, stage, fatal=not loaded)
            except (OSError, EOFError):
                return
            del value
    finally:
        channel.close()


class _Worker:
    __slots__ = ("calls", "channel", "exited", "gone", "loaded", "process", "running_since",
                 "shipped")

    def __init__(self, process: subprocess.Popen[bytes], channel: Channel) -> None:
        self.process = process
        self.channel = channel
        # Readable once the process has exited (pidfd), where the platform has one.
        self.exited = exit_watch(process.pid)
        # The calls sent to it, in order: the first is the one it runs, the second (short
        # calls only, see PIPELINE_SECONDS) waits in its socket.
        self.calls: collections.deque[_Call] = collections.deque()
        self.running_since = 0.0  # when its first call started (about: sent, or the last result)
        self.shipped: set[int] = set()  # keys of the functions sent to it
        self.loaded: set[int] = set()  # keys of those it has acknowledged (loaded)
        self.gone = False


@dataclass
class _Call:
    """A call waiting in the queue (or run by a worker)."""

    future: concurrent.futures.Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    started: bool = False  # its future is running already (a call given back to the queue)


class ProcessExecutor:
    """A pool of up to ``workers`` worker processes; same interface as ``ThreadExecutor``.

    Workers start as calls need them. Each function is sent to each worker once (see the
    module docstring); :meth:`statistics` counts what was shipped.

    Args:
        workers: Calls that may run at once (worker processes at most).
        name: Stage name, used in process names, errors and warnings.
        close_timeout: Seconds :meth:`shutdown` waits for running calls before terminating
            the workers that run them.

    Example:
        >>> executor = ProcessExecutor(1, "doc")
        >>> executor.submit(lambda x: x + 1, 41).result()
        42
        >>> executor.statistics().functions_shipped
        1
        >>> executor.shutdown()
    """

    kind = "process"
    """Where calls run, as ``make_executor`` names it (statistics report it)."""

    def __init__(self, workers: int, name: str,
                 close_timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        try:
            from feedline.core import pickling  # imports cloudpickle
        except ImportError as error:  # pragma: no cover - cloudpickle is a core dependency
            raise ImportError("the process executor needs cloudpickle: pip install cloudpickle") \
                from error
        self._dumps = pickling.dumps
        self.name = name
        self._prefix = f"feedline-{name}-p{next(_POOL_IDS)}"
        self._max_workers = max(1, workers)
        self._close_timeout = close_timeout
        self._lock = threading.Lock()
        self._queue: collections.deque[_Call] = collections.deque()
        self._workers: list[_Worker] = []
        self._idle: list[_Worker] = []
        # id(fn) -> (fn, pickle, out-of-band buffers); holding fn keeps its id unique.
        self._functions: dict[int, tuple[Callable[..., Any], bytes,
                                         list[pickle.PickleBuffer]]] = {}
        self._broken: str | None = None
        self._start_failures = 0  # workers in a row that died before running a call
        self._shut = False
        self._stop_collecting = False
        self._wake_r, self._wake_w = os.pipe()
        self._collector: threading.Thread | None = None
        self._stats = ProcessStatistics()
        # Function key -> moving mean of its calls' seconds (for sending calls ahead).
        self._call_seconds: dict[int, float] = {}

    # ------------------------------------------------------------------ submitting
    @property
    def workers(self) -> int:
        """Worker processes that may run at once."""
        return self._max_workers

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError(f"the executor of {self.name} is shut down")
            if self._broken is not None:
                # In the call's place, like the calls that were pending when it broke.
                future.set_exception(mark_fatal(BrokenProcessPool(self._broken)))
                return future
            self._queue.append(_Call(future, fn, args))
            self._dispatch_locked()
        return future

    def statistics(self) -> ProcessStatistics:
        """Counts of workers started, functions shipped (and their bytes), calls sent."""
        return self._stats

    @property
    def reusable(self) -> bool:
        """Whether new calls may still be submitted: not shut down, not broken (a stage's
        next iterator may then take this pool over, its workers started)."""
        with self._lock:
            return not self._shut and self._broken is None

    def _count(self, **increments: int) -> None:
        stats = self._stats
        self._stats = ProcessStatistics(**{
            field: getattr(stats, field) + increments.get(field, 0)
            for field in ("workers_started", "functions_shipped", "function_bytes", "calls")})

    def _pickled(self, fn: Callable[..., Any]) -> tuple[bytes, list[pickle.PickleBuffer]]:
        cached = self._functions.get(id(fn))
        if cached is None:
            buffers: list[pickle.PickleBuffer] = []
            # Out-of-band buffers: a large array constant of the function is written once
            # into shared memory per worker, never copied into the pickle.
            header = self._dumps(fn, protocol=5, buffer_callback=buffers.append)
            cached = self._functions[id(fn)] = (fn, header, buffers)
        return cached[1], cached[2]

    def _dispatch_locked(self) -> None:
        """Send queued calls to idle workers, starting workers as needed, then short calls
        one ahead to busy workers (lock held)."""
        while self._queue:
            worker: _Worker | None = None
            if not self._idle and len(self._workers) >= self._max_workers:
                worker = self._ahead_locked(id(self._queue[0].fn))
                if worker is None:
                    return
            call = self._queue.popleft()
            future, fn, args = call.future, call.fn, call.args
            if not call.started:
                if not future.set_running_or_notify_cancel():
                    continue  # cancelled while queued
                call.started = True
            try:
                header, buffers = self._pickled(fn)
            except Exception as error:  # noqa: BLE001 - no call of it can ever run
                error.add_note(f"feedline: the function of {self.name} cannot be sent to a "
                               "worker process; the stage cannot go on")
                future.set_exception(mark_fatal(error))
                continue
            try:
                if worker is None:
                    worker = self._idle.pop() if self._idle else self._start_worker_locked()
            except Exception as error:  # noqa: BLE001 - no process, no call
                error.add_note(f"feedline: {self.name} cannot start a worker process")
                future.set_exception(mark_fatal(error))
                continue
            key = id(fn)
            try:
                if key not in worker.shipped:
                    worker.channel.send((_FUNCTION, key, header, buffers))
                    worker.shipped.add(key)
                    self._count(functions_shipped=1, function_bytes=len(header) + sum(
                        buffer.raw().nbytes for buffer in buffers))
                # With the call, the buffers of results we have freed, for the worker to
                # reuse (transport.Channel: a buffer is reused only once released).
                worker.channel.send((_CALL, key, args, worker.channel.released()))
            except (OSError, EOFError):
                # The worker died: the collector sees its exit and hands the call on.
                self._sent_locked(worker, call)
                continue
            except Exception as error:  # noqa: BLE001 - arguments that do not pickle
                future.set_exception(error)
                if not worker.calls:
                    self._idle.append(worker)
                continue
            self._sent_locked(worker, call)
            self._count(calls=1)

    def _sent_locked(self, worker: _Worker, call: _Call) -> None:
        if not worker.calls:
            worker.running_since = time.perf_counter()
        worker.calls.append(call)

    def _ahead_locked(self, key: int) -> _Worker | None:
        """A busy worker to send a call of function ``key`` ahead to (running one call, with
        the function loaded), the one running longest; ``None`` if the function's calls are
        not known short (:data:`PIPELINE_SECONDS`) or no worker fits."""
        if self._call_seconds.get(key, PIPELINE_SECONDS) >= PIPELINE_SECONDS:
            return None
        fitting = [w for w in self._workers
                   if len(w.calls) == 1 and not w.gone and key in w.loaded]
        return min(fitting, key=lambda w: w.running_since) if fitting else None

    def _start_worker_locked(self) -> _Worker:
        # Each worker's share of the CPUs: its calls' native libraries start that many
        # threads (the workers run at once).
        process = start_worker(_ENTRY, self.name,
                               threads=max(1, schedulable_cpus() // self._max_workers))
        worker = _Worker(process, process.channel)  # type: ignore[attr-defined]
        self._workers.append(worker)  # tracked before anything can fail: it is ended later
        self._count(workers_started=1)
        try:
            worker.channel.send((list(sys.path),
                                 bytes(multiprocessing.current_process().authkey)))
        except OSError:
            pass  # it died at once: the collector reports it
        if self._collector is None:
            self._collector = threading.Thread(target=self._collect, daemon=True,
                                               name=f"{self._prefix}_results")
            self._collector.start()
        else:
            os.write(self._wake_w, b"w")  # the collector waits on the new worker too
        return worker

    # ------------------------------------------------------------------ results
    def _collect(self) -> None:
        """On the collector thread: results and worker exits, until shut down or broken."""
        while True:
            with self._lock:
                if self._stop_collecting or self._broken is not None:
                    return
                workers = [w for w in self._workers if not w.gone]
            by_handle: dict[Any, tuple[_Worker, bool]] = {}
            for w in workers:
                by_handle[w.channel] = (w, True)
                if w.exited is not None:
                    by_handle[w.exited] = (w, False)
            ready = wait([*by_handle, self._wake_r])
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            died: list[_Worker] = []
            for handle in ready:
                if handle == self._wake_r:
                    continue
                worker, is_channel = by_handle[handle]
                if worker in died:
                    continue
                if not is_channel or not self._receive(worker):
                    died.append(worker)
            for worker in died:
                # A result it sent before dying still counts.
                while not worker.gone and worker.channel.poll():
                    if not self._receive(worker):
                        break
                self._bury(worker)

    def _receive(self, worker: _Worker) -> bool:
        try:
            message = worker.channel.recv()
        except (EOFError, OSError):
            return False
        if message[0] == _LOADED:
            with self._lock:
                worker.loaded.add(message[1])
                self._start_failures = 0  # a worker got as far as running calls
                worker.running_since = time.perf_counter()  # its call runs now, not its start
            return True
        _, ok, value, released, fatal = message
        future = None
        with self._lock:
            worker.channel.reclaim(released)
            if worker.calls:
                call = worker.calls.popleft()
                future = call.future
                now = time.perf_counter()
                seconds, worker.running_since = now - worker.running_since, now
                key = id(call.fn)
                mean = self._call_seconds.get(key)
                self._call_seconds[key] = seconds if mean is None else 0.8 * mean + 0.2 * seconds
            if not self._shut:
                if not worker.calls:
                    self._idle.append(worker)
                self._dispatch_locked()
        if future is not None:
            if not ok:
                if isinstance(value, PackedError):
                    value = value.unpack(f"raised in a worker process of {self.name}")
                if fatal:
                    mark_fatal(value)
            try:
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
            except concurrent.futures.InvalidStateError:  # pragma: no cover - defensive
                pass
        return True

    def _bury(self, dead: _Worker) -> None:
        """A worker died unexpectedly: fail the call it was running with a
        ``WorkerProcessError`` (or run its pieces again one by one), give back a call it
        never started, replace it; after :data:`MAX_START_FAILURES` in a row that died
        before running anything, break the pool."""
        try:
            code = dead.process.wait(_JOIN_SECONDS)  # its channel closed as it died
        except subprocess.TimeoutExpired:
            code = None
        how = describe_exit(code)
        pid = dead.process.pid
        outcome: BaseException | None = None
        pieces: list[_Call] = []
        broken: list[concurrent.futures.Future[Any]] | None = None
        workers: list[_Worker] = []
        with self._lock:
            if self._stop_collecting:
                return  # shutting down: the exit was expected
            sent = list(dead.calls)
            dead.calls.clear()
            call = sent[0] if sent else None
            future = call.future if call is not None else None
            # Calls sent ahead never started: back to the queue, first, in their order.
            self._queue.extendleft(reversed(sent[1:]))
            self._forget_locked(dead)
            if call is not None and future is not None and not future.done():
                if id(call.fn) in dead.loaded:
                    # It was running this call: the call is what killed it (or the call
                    # was running when something else did). Only this call fails.
                    pieces = self._split_locked(call)
                    if not pieces:
                        outcome = WorkerProcessError(
                            f"{self.name}: the worker process (pid {pid}) running this call "
                            f"{how}; the call failed, and a new worker process takes the "
                            "next calls", exitcode=code)
                else:
                    # It died before it could run the call (starting, loading the
                    # function): the call is not to blame, and goes back to the queue.
                    self._start_failures += 1
                    self._queue.appendleft(call)
            if self._start_failures >= MAX_START_FAILURES:
                self._broken = (f"{self.name}: {self._start_failures} worker processes in a "
                                f"row died before they could run a call (the last, pid {pid}, "
                                f"{how}); the stage cannot go on")
                broken = [c.future for w in self._workers for c in w.calls]
                broken += [c.future for c in self._queue]
                self._queue.clear()
                for w in self._workers:
                    w.calls.clear()
                self._idle.clear()
                workers = list(self._workers)
            else:
                for piece in reversed(pieces):
                    self._queue.appendleft(piece)
                self._dispatch_locked()  # a new worker for what waits
        self._end_workers([dead], terminate=True)
        if broken is not None:
            assert self._broken is not None
            for pending_future in broken:
                try:
                    pending_future.set_exception(mark_fatal(BrokenProcessPool(self._broken)))
                except concurrent.futures.InvalidStateError:  # cancelled meanwhile
                    pass
            self._end_workers(workers, terminate=True)
            return
        if outcome is not None:
            assert future is not None and call is not None
            combine = getattr(call.fn, "combine_call", None)
            try:
                if combine is None:
                    future.set_exception(outcome)
                else:  # the call's own result, with the death as its one piece's outcome
                    future.set_result(combine([(False, outcome)]))
            except concurrent.futures.InvalidStateError:  # pragma: no cover - defensive
                pass
            except Exception as error:  # noqa: BLE001 - combine_call failed: the call did
                future.set_exception(error)

    def _forget_locked(self, dead: _Worker) -> None:
        if dead in self._idle:
            self._idle.remove(dead)
        if dead in self._workers:
            self._workers.remove(dead)

    def _split_locked(self, call: _Call) -> list[_Call]:
        """The call's pieces, each a call of its own whose outcomes make up the call's
        result, or ``[]`` if it has fewer than two.

        A function may say how its calls split: ``fn.split_call(*args)`` returns the
        argument tuples of the pieces, and ``fn.combine_call(outcomes)`` makes the call's
        result from one ``(True, result)`` or ``(False, exception)`` per piece (or from the
        whole call's single ``(False, WorkerProcessError)`` when it has no pieces).
        """
        split = getattr(call.fn, "split_call", None)
        combine = getattr(call.fn, "combine_call", None)
        if split is None or combine is None:
            return []
        try:
            parts = split(*call.args)
        except Exception:  # noqa: BLE001 - cannot split: the call fails whole
            return []
        if not parts or len(parts) < 2:
            return []
        futures: list[concurrent.futures.Future[Any]] = [
            concurrent.futures.Future() for _ in parts]
        remaining = [len(parts)]
        count_lock = threading.Lock()  # not the pool's: a piece may fail while it is held
        whole = call.future

        def piece_done(_: concurrent.futures.Future[Any]) -> None:
            with count_lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            outcomes: list[tuple[bool, Any]] = []
            for piece in futures:
                if piece.cancelled():
                    outcomes = []
                    break
                error = piece.exception()
                outcomes.append((True, piece.result()) if error is None else (False, error))
            try:
                if not outcomes:  # shut down before every piece ran
                    whole.set_exception(RuntimeError(
                        f"{self.name}: the call was still running when the stage was closed"))
                else:
                    whole.set_result(combine(outcomes))
            except concurrent.futures.InvalidStateError:  # pragma: no cover - defensive
                pass
            except Exception as error:  # noqa: BLE001 - combine_call failed: the call did
                whole.set_exception(error)

        for piece in futures:
            piece.add_done_callback(piece_done)
        return [_Call(future, call.fn, tuple(args)) for future, args in zip(futures, parts)]

    # ------------------------------------------------------------------ shutting down
    def shutdown(self) -> None:
        """Cancel queued calls, wait up to ``close_timeout`` for running ones, end the workers.

        A worker still running a call after that is terminated, and a ``RuntimeWarning``
        names the stage. Every worker process has exited when this returns. Idempotent.
        """
        with self._lock:
            if self._shut:
                return
            self._shut = True
            queued = [c.future for c in self._queue]
            self._queue.clear()
            running = [c.future for w in self._workers for c in w.calls]
        for future in queued:
            future.cancel()
        _, stuck = concurrent.futures.wait(running, timeout=self._close_timeout)
        with self._lock:
            self._stop_collecting = True
            workers = list(self._workers)
        os.write(self._wake_w, b"s")
        collector = self._collector
        if collector is not None and collector is not threading.current_thread():
            collector.join(self._close_timeout + _JOIN_SECONDS)
        busy = [w for w in workers if any(not c.future.done() for c in w.calls)]
        self._end_workers(workers, terminate=False)
        for future in stuck:
            if not future.done():
                try:
                    future.set_exception(RuntimeError(
                        f"{self.name}: the call was still running when the stage was closed"))
                except concurrent.futures.InvalidStateError:  # pragma: no cover - finished now
                    pass
        if collector is None or not collector.is_alive():
            os.close(self._wake_r)
        os.close(self._wake_w)
        if busy:
            warnings.warn(
                f"feedline: {self.name} did not stop within {self._close_timeout} s "
                f"(Options().threading.close_timeout); terminated {len(busy)} worker "
                "process(es) still running a call", RuntimeWarning, stacklevel=2)

    def _end_workers(self, workers: list[_Worker], terminate: bool) -> None:
        """Stop idle workers (terminate busy ones, or all if ``terminate``), then join them
        a bounded time; a worker that still has not exited is killed."""
        for w in workers:
            if w.gone:
                continue
            if terminate or any(not c.future.done() for c in w.calls):
                w.process.terminate()
            else:
                try:
                    w.channel.send((_STOP,))
                except (OSError, EOFError):  # already gone
                    pass
        deadline = time.monotonic() + _JOIN_SECONDS
        for w in workers:
            if w.gone:
                continue
            try:
                w.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.process.kill()
                try:
                    w.process.wait(_JOIN_SECONDS)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL ignored?
                    pass
            w.gone = True
            w.channel.close()
            if w.exited is not None:
                os.close(w.exited)
                w.exited = None


# ``make_executor(kind="process")`` makes these: the execution layer names no process kind.
register_executor_kind("process", ProcessExecutor)
