"""multiprocess() recovers from a worker start that fails or a worker that dies before it
gets its pipeline: the run goes on with every element once, and every process started ends."""

from __future__ import annotations

import pytest

import feedline as fl
from feedline.placement import worker_loop
from tests.placement.process_helpers import wait_gone

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))


def _killing_first_payload(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the first worker started die just before its pipeline is sent; return the pids
    of every worker started."""
    real_start = worker_loop.start_worker
    pids: list[int] = []

    def start(entry: str, *args: str, **keywords: int | None):
        process = real_start(entry, *args, **keywords)
        pids.append(process.pid)
        if len(pids) == 1:
            channel = process.channel
            real_send = channel.send

            def send(message):
                channel.send = real_send
                process.kill()  # dies between its start and its pipeline
                process.wait()
                real_send(message)

            channel.send = send
        return process

    monkeypatch.setattr(worker_loop, "start_worker", start)
    return pids


@pytest.mark.timeout(60)
def test_a_worker_dying_before_its_pipeline_is_sent_is_restarted(monkeypatch):
    # The send to the dead worker raised BrokenPipeError out of next(), and the workers
    # after it never got their pipelines.
    pids = _killing_first_payload(monkeypatch)
    iterator = iter(fl.Dataset.range(10).map(lambda x: x * 2).multiprocess(2)
                    .with_options(QUICK))
    try:
        # Reported as any death is (the worker is restarted from its last position), and
        # the next next() goes on, losing and repeating no element.
        with pytest.raises(fl.WorkerProcessError, match="worker process 0 of 2"):
            next(iterator)
        got = [int(x) for x in iterator]
    finally:
        iterator.close()
    assert got == [x * 2 for x in range(10)]
    assert len(pids) == 3  # two workers, one of them started again
    assert wait_gone(pids, 10.0) == []


@pytest.mark.timeout(60)
def test_a_failed_start_leaves_no_worker_without_its_pipeline(monkeypatch):
    # Starting worker 1 fails (too many open files); worker 0 had started but was never sent
    # its pipeline, and the next start skipped it: it took the "start" command for its
    # pipeline and the run failed.
    real_start = worker_loop.start_worker
    pids: list[int] = []

    def start(entry: str, *args: str, **keywords: int | None):
        if len(pids) == 1:
            pids.append(-1)
            raise OSError(24, "Too many open files")
        process = real_start(entry, *args, **keywords)
        pids.append(process.pid)
        return process

    monkeypatch.setattr(worker_loop, "start_worker", start)
    iterator = iter(fl.Dataset.range(10).multiprocess(2).with_options(QUICK))
    try:
        with pytest.raises(OSError, match="Too many open files"):
            next(iterator)
        assert wait_gone(pids[:1], 10.0) == []  # ended, not left waiting for a pipeline
        got = [int(x) for x in iterator]
    finally:
        iterator.close()
    assert got == list(range(10))
    assert wait_gone([p for p in pids if p > 0], 10.0) == []
