"""A ThreadExecutor starts its threads outside its roster's lock (issue 39).

``Thread.start()`` waits for the new thread to run; on CPython 3.13t that wait, made while
the roster's lock was held, hung twice in about 24 runs. ``submit`` now takes the thread's
place under the lock (the cap counts it, a shutdown gives it a sentinel) and starts it after
releasing the lock. These tests replace ``threading.Thread`` with a subclass whose
``start()`` runs a hook first, so that they can act while a start is in progress: no wall
clock, every wait bounded, every thread proven ended.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator

import pytest

from feedline.execution.executor import Strand, ThreadExecutor
from feedline.execution.gate import WorkerGate
from feedline.testing import no_leaked_threads

TIMEOUT = 30

_RealThread = threading.Thread


@contextlib.contextmanager
def _starts_calling(monkeypatch: pytest.MonkeyPatch,
                    hook: Callable[[threading.Thread], None]) -> Iterator[list[threading.Thread]]:
    """While inside, every ``threading.Thread(...).start()`` calls ``hook(thread)`` first;
    yields the threads whose start was asked for."""
    asked: list[threading.Thread] = []

    class _Hooked(_RealThread):
        def start(self) -> None:
            asked.append(self)
            hook(self)
            super().start()

    with monkeypatch.context() as patch:
        patch.setattr(threading, "Thread", _Hooked)
        yield asked


def _cannot_start(thread: threading.Thread) -> None:
    raise RuntimeError("can't start new thread")


def _on_helper(target: Callable[[], None]) -> threading.Thread:
    helper = _RealThread(target=target, name="test-helper", daemon=True)
    helper.start()
    return helper


@pytest.mark.timeout(2 * TIMEOUT)
def test_a_thread_starts_after_the_roster_lock_is_released(monkeypatch):
    executor = ThreadExecutor(1, "start-outside-lock", close_timeout=TIMEOUT)
    seen: dict[str, object] = {}

    def from_another_thread(thread: threading.Thread) -> None:
        # Both need the roster's lock: they finish only if start() is not under it.
        def use_the_executor() -> None:
            seen["threads"] = executor.threads()
            seen["second"] = executor.submit(pow, 2, 3)

        helper = _on_helper(use_the_executor)
        helper.join(TIMEOUT)
        seen["helper_done"] = not helper.is_alive()

    with no_leaked_threads():
        with _starts_calling(monkeypatch, from_another_thread) as asked:
            first = executor.submit(pow, 2, 10)
        assert seen["helper_done"], "the roster's lock was held while the thread started"
        # The thread being started is not listed as running yet, but its place is taken:
        # the second call, with one worker allowed, started no second thread.
        assert seen["threads"] == []
        assert len(asked) == 1
        assert first.result(TIMEOUT) == 1024
        assert seen["second"].result(TIMEOUT) == 8  # type: ignore[attr-defined]
        assert executor.threads() == asked
        executor.shutdown()
    assert not asked[0].is_alive()


class _ObservedGate(WorkerGate):
    """A gate that tells when a shutdown closed it (after the sentinels were queued)."""

    def __init__(self) -> None:
        super().__init__(limit=None)
        self.closed = threading.Event()

    def close(self) -> None:
        super().close()
        self.closed.set()


@pytest.mark.timeout(2 * TIMEOUT)
def test_a_thread_started_after_a_shutdown_finds_its_sentinel_and_is_joined(monkeypatch):
    gate = _ObservedGate()
    executor = ThreadExecutor(2, "start-after-shutdown", close_timeout=TIMEOUT, gate=gate)
    helpers: list[threading.Thread] = []

    def shut_down_first(thread: threading.Thread) -> None:
        helpers.append(_on_helper(executor.shutdown))
        # The shutdown has cancelled the queued call and queued the sentinels; it now
        # waits for this start before joining.
        assert gate.closed.wait(TIMEOUT), "the shutdown could not run during the start"

    with no_leaked_threads(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no thread abandoned
        with _starts_calling(monkeypatch, shut_down_first) as asked:
            future = executor.submit(pow, 2, 10)
        helpers[0].join(TIMEOUT)
        assert not helpers[0].is_alive()
        assert future.cancelled()
        assert len(asked) == 1
        # The shutdown joined the thread it saw being started.
        assert asked[0].ident is not None and not asked[0].is_alive()
        with pytest.raises(RuntimeError, match="shut down"):
            executor.submit(pow, 2, 3)


@pytest.mark.timeout(2 * TIMEOUT)
def test_a_thread_that_cannot_start_fails_the_call_when_no_thread_runs(monkeypatch):
    executor = ThreadExecutor(1, "cannot-start", close_timeout=TIMEOUT)
    with no_leaked_threads(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with _starts_calling(monkeypatch, _cannot_start) as asked:
            future = executor.submit(pow, 2, 10)
        assert len(asked) == 1
        with pytest.raises(RuntimeError, match="cannot-start: could not start a worker "
                                               "thread") as raised:
            future.result(TIMEOUT)
        assert "can't start new thread" in str(raised.value.__cause__)
        assert executor.threads() == []
        # Its place was given back: the next call starts a thread and runs.
        assert executor.submit(pow, 2, 3).result(TIMEOUT) == 8
        assert len(executor.threads()) == 1
        executor.shutdown()


@pytest.mark.timeout(2 * TIMEOUT)
def test_a_thread_that_cannot_start_leaves_the_call_to_a_running_thread(monkeypatch):
    executor = ThreadExecutor(2, "cannot-start-second", close_timeout=TIMEOUT)
    running, release = threading.Event(), threading.Event()

    def hold() -> str:
        running.set()
        assert release.wait(TIMEOUT)
        return "held"

    with no_leaked_threads(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        first = executor.submit(hold)
        assert running.wait(TIMEOUT)
        # The only thread is busy: the second call asks for a thread, which cannot start.
        with _starts_calling(monkeypatch, _cannot_start) as asked:
            second = executor.submit(pow, 2, 10)
        assert len(asked) == 1
        assert len(executor.threads()) == 1
        assert not second.done()
        release.set()
        assert first.result(TIMEOUT) == "held"
        assert second.result(TIMEOUT) == 1024  # run by the thread already there
        executor.shutdown()


@pytest.mark.timeout(2 * TIMEOUT)
def test_a_strand_whose_pool_cannot_start_a_thread_fails_its_calls(monkeypatch):
    pool = ThreadExecutor(1, "strand-cannot-start", close_timeout=TIMEOUT)
    strand = Strand(pool)
    with no_leaked_threads(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with _starts_calling(monkeypatch, _cannot_start):
            future = strand.submit(pow, 2, 10)
        with pytest.raises(RuntimeError, match="could not start a worker thread"):
            future.result(TIMEOUT)
        # Not left waiting for a turn that never comes: the next call runs.
        assert strand.submit(pow, 2, 3).result(TIMEOUT) == 8
        strand.shutdown()
        pool.shutdown()
