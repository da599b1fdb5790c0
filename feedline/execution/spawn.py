"""Starting, watching and ending worker processes: what every process pool here shares.

Workers are fresh interpreters (``python -c``) connected to the parent by a Unix socket
pair, never forks of the threaded parent and, unlike ``multiprocessing``'s *spawn* and
*forkserver* starts, never re-runs of the user's main script: a script needs no ``if
__name__ == "__main__"`` guard. They get the parent's ``sys.path`` (as ``PYTHONPATH``).
Used by the per-stage process executor (:mod:`feedline.execution.processes`) and the
pipeline's worker processes (:mod:`feedline.execution.worker_pool`).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading

from feedline.execution.transport import Channel


def start_worker(entry: str, *args: str) -> subprocess.Popen[bytes]:
    """Run ``python -c entry <socket fd> <parent pid> *args``; return it with the parent's
    end of its socket as a :class:`Channel` (``process.channel``).

    The child's end is closed here once the child has its copy: the parent then sees the
    end of the stream when the child is gone.
    """
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        process = subprocess.Popen(
            [sys.executable, "-c", entry, str(child_end.fileno()), str(os.getpid()), *args],
            pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    process.channel = Channel(parent_end)  # type: ignore[attr-defined]
    return process


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
