"""Review of the worker start path, normalize's cached constants and flips (session review 2).

Each test pins a bug found in review: it failed before the fix committed with it.
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.placement import worker_loop
from feedline.image import dtype as image_dtype
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


def test_normalize_keeps_the_sign_of_a_zero_mean():
    # The cached constants were keyed by value: -0.0 == 0.0, so a call with mean=-0.0 got
    # the constants of an earlier mean=0.0 (a zero pixel with a negative std came out +0.0
    # instead of -0.0, unlike the NumPy computation it is meant to match bit for bit).
    image = np.zeros((1, 1, 2), np.uint8)
    for dtype in (np.float32, np.float64):
        positive = image_dtype.normalize(image, 0.0, -1.0, dtype)
        negative = image_dtype.normalize(image, -0.0, -1.0, dtype)
        assert np.signbit(positive).tolist() == [[[False, False]]]
        assert np.signbit(negative).tolist() == [[[True, True]]]
        assert image_dtype.normalize(image, [-0.0, 0.0], -1.0, dtype).tobytes() == \
            np.array([-0.0, 0.0], dtype).tobytes()


def _double(x):
    return int(x) * 2  # not vectorized (a whole batch in one call) by the optimizer


def test_an_inline_map_given_executor_process_still_gets_the_trial(monkeypatch):
    # map(f, executor="process") without num_parallel_calls runs inline, on this process's
    # threads; it was taken for a map in worker processes: no trial, never moved.
    from feedline.placement.auto import AutoProcessesIterator

    original = AutoProcessesIterator._trial
    trials = []

    def gil_bound(self):
        trials.append(original(self))
        return 1.0, False  # one core of two busy: moving pays

    monkeypatch.setattr(AutoProcessesIterator, "_trial", gil_bound)
    ds = fl.Dataset.range(40).map(_double, executor="process").batch(4) \
        .prefetch(fl.AUTOTUNE).with_options(fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2)))
    with iter(ds) as it:
        got = [batch.tolist() for batch in it]
        decision = it._root.decision
    assert got == [[2 * x for x in range(i, i + 4)] for i in range(0, 40, 4)]
    assert len(trials) == 1
    assert (decision.mode, decision.workers, decision.cpu_budget) == ("processes", 2, 2)
