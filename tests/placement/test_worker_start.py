"""multiprocess() starts its worker processes together, then sends each its pipeline.

A pipeline larger than a socket's buffer makes each send wait until the worker has imported
feedline; sent right after each start, the workers' imports ran one after another (14 s to
the first batch with 15 workers on a 16-core machine).
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.placement import worker_loop
from tests.placement.process_helpers import wait_gone

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))
# Well above a Unix socket's default buffer (~200 kB): the first send blocks until the
# worker reads it.
BIG_PATHS = np.array([f"/data/images/train/{i:08d}-" + "x" * 200 for i in range(4000)])


def _recording_start(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    events: list[tuple[str, int]] = []
    real_start = worker_loop.start_worker

    def start(entry: str, *args: str, **keywords: int | None):
        process = real_start(entry, *args, **keywords)
        channel, pid = process.channel, process.pid
        real_send = channel.send
        sent = []

        def send(message):
            if not sent:  # the first message is the worker's pipeline
                sent.append(True)
                events.append(("pipeline", pid))
            real_send(message)

        channel.send = send
        events.append(("process", pid))
        return process

    monkeypatch.setattr(worker_loop, "start_worker", start)
    return events


@pytest.mark.timeout(60)
def test_every_worker_is_started_before_any_pipeline_is_sent(monkeypatch):
    events = _recording_start(monkeypatch)
    ds = fl.Dataset.from_tensor_slices(BIG_PATHS).map(lambda p: p[:22]).multiprocess(3)
    iterator = iter(ds.with_options(QUICK))
    got = list(iterator)
    pids = iterator.worker_pids() if hasattr(iterator, "worker_pids") else []
    iterator.close()
    assert [e[0] for e in events] == ["process"] * 3 + ["pipeline"] * 3
    assert [e[1] for e in events[:3]] == [e[1] for e in events[3:]]
    assert got == [p[:22].encode() for p in BIG_PATHS]
    assert wait_gone([e[1] for e in events] + list(pids), 10.0) == []


@pytest.mark.timeout(60)
def test_a_restarted_worker_alone_gets_a_new_process_and_its_pipeline(monkeypatch):
    pool = worker_loop.WorkerPool(fl.Dataset.range(5), QUICK, 2, "multiprocess", 0.5)
    events = _recording_start(monkeypatch)
    try:
        pool.start([1, 1])
        assert [e[0] for e in events] == ["process", "pipeline"]
        pool.start([0, 1])  # 1 runs already: only 0 starts
        assert [e[0] for e in events] == ["process", "pipeline"] * 2
        pids = pool.pids()
        assert None not in pids and len(set(pids)) == 2
    finally:
        pool.shutdown()
    assert wait_gone(pids, 10.0) == []
    with pytest.raises(RuntimeError, match="shut down"):
        pool.start([0])
