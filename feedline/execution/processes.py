"""A process executor for GIL-bound Python functions.

Threads are the default because NumPy, I/O and codecs release the GIL. A pure-Python
function holds it, so only separate processes run it in parallel. Workers are forked from a
clean *forkserver* process (never from the threaded parent), functions travel with
cloudpickle (so lambdas and closures work), and results come back pickled (protocol 5).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import warnings
import weakref
from collections.abc import Callable
from typing import Any

_functions: dict[bytes, Callable[..., Any]] = {}


def _call_pickled(function_bytes: bytes, args: tuple[Any, ...]) -> Any:
    """Runs in a worker: unpickle the function once per worker, then call it."""
    fn = _functions.get(function_bytes)
    if fn is None:
        import cloudpickle

        fn = _functions[function_bytes] = cloudpickle.loads(function_bytes)
    return fn(*args)


class ProcessExecutor:
    """A pool of worker processes; same interface as :class:`ThreadExecutor`.

    If a worker dies (killed, crashed), every call still pending fails with
    ``concurrent.futures.process.BrokenProcessPool``, which the stage reports like any
    other error of the user function: the pipeline never hangs waiting for it.

    Example:
        >>> executor = ProcessExecutor(1, "doc")
        >>> executor.submit(lambda x: x + 1, 41).result()
        42
        >>> executor.shutdown()
    """

    def __init__(self, workers: int, name: str, close_timeout: float = 2.0) -> None:
        try:
            import cloudpickle
        except ImportError as error:  # pragma: no cover - cloudpickle is a core dependency
            raise ImportError("the process executor needs cloudpickle: pip install cloudpickle") \
                from error
        self._cloudpickle = cloudpickle
        self._name = name
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=max(1, workers), mp_context=multiprocessing.get_context("forkserver"))
        self._pickled: dict[int, tuple[Callable[..., Any], bytes]] = {}
        self._close_timeout = close_timeout
        self._submitted: weakref.WeakSet[concurrent.futures.Future[Any]] = weakref.WeakSet()

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future[Any]:
        cached = self._pickled.get(id(fn))
        if cached is None or cached[0] is not fn:
            cached = self._pickled[id(fn)] = (fn, self._cloudpickle.dumps(fn))
        future = self._pool.submit(_call_pickled, cached[1], args)
        self._submitted.add(future)
        return future

    def shutdown(self) -> None:
        """Cancel queued calls and wait up to ``close_timeout`` for running ones; then the
        workers end. A call still running after that keeps its worker process until it
        returns (a ``RuntimeWarning`` names the stage): ``close()`` does not wait for it."""
        running = [f for f in list(self._submitted) if not f.cancel()]  # queued: cancelled
        _, stuck = concurrent.futures.wait(running, timeout=self._close_timeout)
        if stuck:
            self._pool.shutdown(wait=False, cancel_futures=True)
            warnings.warn(
                f"feedline: {self._name} did not stop within {self._close_timeout} s "
                f"(Options().threading.close_timeout); {len(stuck)} call(s) still running in "
                "worker processes were left to finish", RuntimeWarning, stacklevel=2)
            return
        self._pool.shutdown(wait=True, cancel_futures=True)  # all done: the workers exit now
