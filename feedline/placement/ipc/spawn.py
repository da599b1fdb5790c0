"""Starting, watching and ending worker processes: what every process pool here shares.

Workers are fresh interpreters (``python -c``) connected to the parent by a Unix socket
pair, never forks of the threaded parent and, unlike ``multiprocessing``'s *spawn* and
*forkserver* starts, never re-runs of the user's main script: a script needs no ``if
__name__ == "__main__"`` guard. They get the parent's ``sys.path`` (as ``PYTHONPATH``).

A worker never outlives its parent. On Linux the kernel kills it when the parent dies,
however (``SIGKILL`` included), even in the middle of a C call that holds the GIL
(``PR_SET_PDEATHSIG``, set first thing in the worker, with a check for a parent that died
before that); a thread watching the parent's ``pidfd`` and the end of its socket are the
other signs, and the only ones elsewhere.
Used by the per-stage process executor (:mod:`feedline.placement.process_executor`) and the
pipeline's worker processes (:mod:`feedline.placement.worker_loop`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from feedline.placement.ipc.transport import Channel

_DIE_WITH_PARENT = """\
import sys
if sys.platform.startswith("linux"):
    try:
        import ctypes, os, signal
        # PR_SET_PDEATHSIG (1): the kernel sends SIGKILL when the thread that started this
        # process ends; the spawner thread lives as long as the process it started.
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass
    else:
        if os.getppid() != int(sys.argv[2]):  # the parent died before the line above
            os._exit(1)
"""
"""Run first in every worker, before anything is imported: where the kernel can, it kills the
worker the moment its parent is gone. A Python thread watching the parent cannot: it never
runs while the worker is inside a long C call that holds the GIL (a regex, a decoder)."""


NATIVE_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                           "VECLIB_MAXIMUM_THREADS")
"""How many threads the native libraries of a worker (NumPy's BLAS, OpenMP code) start: set to
the worker's share of the CPUs, as PyTorch's DataLoader sets one thread per worker. Left
alone where the user set them. With a thread per CPU in each of ``n`` workers, the machine
is ``n`` times oversubscribed, and merely importing NumPy started a BLAS thread per CPU in
every worker: on 2 CPUs, 0.27 s of CPU per worker instead of 0.13 s, paid before its first
call."""

SET_BY_FEEDLINE = "FEEDLINE_NATIVE_THREADS"
"""In a worker's environment: which of :data:`NATIVE_THREAD_VARIABLES` feedline set (comma
separated), not the user. A worker that starts workers of its own (a feeder's map in
processes) gives them their own share instead of passing its own on as if it were the
user's."""


def start_worker(entry: str, *args: str, threads: int | None = None) -> subprocess.Popen[bytes]:
    """Run ``python -c entry <socket fd> <parent pid> *args``; return it with the parent's
    end of its socket as a :class:`Channel` (``process.channel``).

    The child's end is closed here once the child has its copy: the parent then sees the
    end of the stream when the child is gone. On Linux the process is started by the
    spawner thread (:class:`_Spawner`) and dies with its parent (``PR_SET_PDEATHSIG``).
    ``threads``: the worker's share of the CPUs, for its native libraries
    (:data:`NATIVE_THREAD_VARIABLES`).
    """
    if _SPAWNER.available:
        return _SPAWNER.run(lambda: _start(_DIE_WITH_PARENT + entry, args, threads))
    return _start(entry, args, threads)


def worker_environment(threads: int | None) -> dict[str, str]:
    """The environment of a worker: this process's, with its ``sys.path`` as ``PYTHONPATH``
    and, given ``threads``, the native thread counts the user did not set.

    Example:
        >>> env = worker_environment(3)
        >>> env["OPENBLAS_NUM_THREADS"] == os.environ.get("OPENBLAS_NUM_THREADS", "3")
        True
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    if threads is not None:
        ours = env.get(SET_BY_FEEDLINE, "").split(",")
        chosen = [name for name in NATIVE_THREAD_VARIABLES if name not in env or name in ours]
        for name in chosen:
            env[name] = str(max(1, threads))
        env[SET_BY_FEEDLINE] = ",".join(chosen)
    return env


def _start(code: str, args: tuple[str, ...], threads: int | None) -> subprocess.Popen[bytes]:
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        env = worker_environment(threads)
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(child_end.fileno()), str(os.getpid()), *args],
            pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    process.channel = Channel(parent_end)  # type: ignore[attr-defined]
    return process


class _Request:
    __slots__ = ("done", "error", "result", "start")

    def __init__(self, start: Callable[[], subprocess.Popen[bytes]]) -> None:
        self.start = start
        self.done = threading.Event()
        self.result: subprocess.Popen[bytes] | None = None
        self.error: BaseException | None = None


class _Spawner:
    """The one thread that starts worker processes, alive while any of them is.

    Linux sends a process's parent-death signal when the *thread* that started it ends, not
    the process: a worker started by a consumer thread (a ``prefetch`` thread, a user's
    thread that later exits) would be killed with that thread. So workers are started here,
    on a thread that ends only once every process it started has exited (it watches their
    ``pidfd``), and is started again for the next one.
    """

    def __init__(self) -> None:
        self.available = sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
        self._lock = threading.Lock()
        self._reset()
        if self.available:
            os.register_at_fork(after_in_child=self._reset_in_child)

    def _reset(self) -> None:
        self._requests: collections.deque[_Request] = collections.deque()
        self._children: dict[int, int] = {}  # pidfd -> pid, of the processes still running
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None

    def _reset_in_child(self) -> None:
        # A forked child has none of the parent's threads; the pipe and pidfds are the
        # parent's: using them here would steal its wake-ups.
        for fd in [*self._children, *(self._wake or ())]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock = threading.Lock()
        self._reset()

    def run(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """``start()`` called on the spawner thread; its process, or its exception."""
        request = _Request(start)
        with self._lock:
            self._requests.append(request)
            if self._wake is None:
                self._wake = os.pipe()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="feedline-spawner")
                self._thread.start()
            else:
                os.write(self._wake[1], b"s")
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _loop(self) -> None:
        poller = select.poll()  # not select(): descriptors may be numbered above 1024
        watched: set[int] = set()
        while True:
            with self._lock:
                requests = list(self._requests)
                self._requests.clear()
                if not requests and not self._children:
                    self._thread = None  # nothing of ours runs: ending signals no one
                    return
                assert self._wake is not None
                wake = self._wake[0]
            if wake not in watched:
                poller.register(wake, select.POLLIN)
                watched.add(wake)
            for request in requests:
                try:
                    process = request.start()
                    try:
                        pidfd = os.pidfd_open(process.pid)
                    except OSError:  # pragma: no cover - reaped already: it has ended
                        pass
                    else:
                        self._children[pidfd] = process.pid
                        poller.register(pidfd, select.POLLIN)
                    request.result = process
                except BaseException as error:  # noqa: BLE001 - the caller's to raise
                    request.error = error
                request.done.set()
            if requests:
                continue  # more may have come meanwhile
            for fd, _ in poller.poll():
                if fd == wake:
                    os.read(wake, 4096)
                elif fd in self._children:  # readable once that process has exited
                    poller.unregister(fd)
                    os.close(fd)
                    del self._children[fd]


_SPAWNER = _Spawner()


def exit_watch(pid: int) -> int | None:
    """A descriptor readable once process ``pid`` has exited (a pidfd), or ``None`` where
    the platform has none (then the end of its socket is the only sign)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def serve_as_worker(fd: int, parent_pid: int) -> Channel:
    """In a worker: ignore Ctrl-C (the parent decides: it closes the pipeline, which ends
    its workers), exit as soon as the parent is gone even in the middle of a user function
    (where Linux can tell, ``pidfd``), and return the channel to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.set_inheritable(fd, False)  # a subprocess a user function starts must not keep it
    _exit_with_parent(parent_pid)
    return Channel(socket.socket(fileno=fd))


def _exit_with_parent(parent_pid: int) -> None:
    try:
        parent = os.pidfd_open(parent_pid)
    except ProcessLookupError:  # gone already, before we could watch it
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd: the channel's end is the only signal
        return
    if os.getppid() != parent_pid:  # it exited (we were handed to init) before the open
        os._exit(1)

    def watch() -> None:
        select.select([parent], [], [])  # readable once the parent has exited
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="feedline-parent-watch").start()


def describe_exit(exitcode: int | None) -> str:
    """``exitcode`` of a process in words.

    Example:
        >>> describe_exit(-9)
        'was killed by signal SIGKILL'
    """
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


# Signals a process raises on itself when its own code fails (a crash, an abort, a bad
# instruction, a CPU limit); the others (SIGKILL, SIGTERM, SIGINT, SIGHUP, ...) are sent to it:
# by a person, a job scheduler or the kernel's OOM killer.
_OWN_FAILURE_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE,
                                  signal.SIGILL, signal.SIGSYS, signal.SIGTRAP, signal.SIGXCPU,
                                  signal.SIGXFSZ})


def ended_by_itself(exitcode: int | None) -> bool:
    """Whether a process that ended with ``exitcode`` ended through its own code (an exit, a
    crash) rather than a signal sent from outside (``SIGKILL``, ``SIGTERM``, ...): only the
    first says something about what it was computing.

    Example:
        >>> ended_by_itself(3), ended_by_itself(-11), ended_by_itself(-9), ended_by_itself(None)
        (True, True, False, False)
    """
    if exitcode is None:
        return False  # how it ended is unknown: no evidence against what it computed
    return exitcode >= 0 or -exitcode in _OWN_FAILURE_SIGNALS


def end_process(process: subprocess.Popen[bytes], wait: float, grace: float = 1.0) -> None:
    """Wait up to ``wait`` seconds for ``process`` to exit, then terminate it, then after
    ``grace`` seconds kill it. Returns once it has exited."""
    try:
        process.wait(wait)
        return
    except subprocess.TimeoutExpired:
        process.terminate()  # stuck in a user function: SIGTERM, then SIGKILL
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
