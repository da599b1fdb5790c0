"""The service's autoscaler decides from the figures it is given: consumers' waits and takes,
workers' items and busy seconds. Each tick is called here (no timer, no Ray): every decision,
its action, its workers and the figures behind it, follows from the reports alone."""

from __future__ import annotations

import pytest

from feedline.service import dispatcher
from feedline.service.dispatcher import DispatcherCore, ServiceConfig


class _Remote:
    def __init__(self, method) -> None:
        self.remote = method


class _Worker:
    """A worker handle: each status call reports ``rate`` more items in one more busy
    second, and no task running."""

    def __init__(self, name: str, rate: float) -> None:
        self.name, self.produced, self.busy, self.rate = name, 0, 0.0, rate
        self.status = _Remote(self._status)

    def _status(self) -> dict:
        self.produced += int(self.rate)
        self.busy += 1.0
        return {"name": self.name, "produced": self.produced, "busy_seconds": self.busy,
                "tasks": 0}


class _Ray:
    """What the dispatcher asks of Ray: results are the statuses themselves; a kill is kept."""

    def __init__(self) -> None:
        self.killed: list[str] = []

    def get(self, refs, timeout=None):
        return refs

    def kill(self, handle, no_restart=False):
        self.killed.append(handle.name)


@pytest.fixture
def core(monkeypatch, tmp_path):
    """A dispatcher of one worker (at most three) making 100 items a busy second, its
    autoscaler ticking only when called; reports count for an hour."""
    ray = _Ray()
    monkeypatch.setattr(dispatcher, "import_ray", lambda: ray)
    monkeypatch.setattr(dispatcher, "start_worker", lambda config, name: _Worker(name, 100.0))
    config = ServiceConfig(name="t", num_workers=1, min_workers=1, max_workers=3,
                           journal_dir=str(tmp_path), autoscale=False,
                           autoscale_interval=1200.0)
    core = DispatcherCore(config)
    core.ray = ray
    return core


def _actions(core: DispatcherCore) -> list[tuple[str, list[str]]]:
    return [(d["action"], d["workers"]) for d in core.statistics()["decisions"]]


def test_consumers_that_wait_get_the_workers_their_rate_needs(core):
    # Waiting half the time, taking 150 items in a second: 300/s if they never waited, and
    # a worker makes 100/s: three workers (one running, two added).
    core.report("consumer", 1.0, 0.5, 150)
    core.autoscale_once()
    assert _actions(core) == [("add", ["t-worker-1", "t-worker-2"])]
    assert core.workers() == ["t-worker-0", "t-worker-1", "t-worker-2"]
    core.autoscale_once()  # at max_workers: no more, whatever they wait
    assert len(_actions(core)) == 1


def test_a_little_wait_adds_one_worker_at_least(core):
    core.report("consumer", 1.0, 0.06, 10)  # 6% > SCALE_UP_WAIT; 10.6/s needs no more
    core.autoscale_once()
    assert _actions(core) == [("add", ["t-worker-1"])]


def test_consumers_that_no_longer_wait_retire_the_newest_worker_after_three_quiet_ticks(core):
    core.report("consumer", 1.0, 0.5, 150)
    core.autoscale_once()  # three workers
    core.report("consumer", 1.0, 0.0, 50)  # 50/s taken, never waiting; 2 workers make 200/s
    for _ in range(dispatcher.SCALE_DOWN_TICKS - 1):
        core.autoscale_once()
    assert [action for action, _ in _actions(core)] == ["add"]
    core.autoscale_once()
    assert _actions(core)[1:] == [("retire", ["t-worker-2"])]
    assert core.workers() == ["t-worker-0", "t-worker-1"]
    core.autoscale_once()  # the retired worker has no task left: it is ended
    assert _actions(core)[2] == ("end", ["t-worker-2"]) and core.ray.killed == ["t-worker-2"]


def test_a_tick_of_some_wait_starts_the_quiet_count_again(core):
    core.report("consumer", 1.0, 0.5, 150)
    core.autoscale_once()
    for waited in (0.0, 0.0, 0.03, 0.0, 0.0):  # 3%: neither adds nor counts as quiet
        core.report("consumer", 1.0, waited, 50)
        core.autoscale_once()
    assert [action for action, _ in _actions(core)] == ["add"]
    core.autoscale_once()  # the third quiet tick in a row
    assert [action for action, _ in _actions(core)] == ["add", "retire"]


def test_no_worker_is_retired_where_the_others_would_not_keep_up(core):
    core.report("consumer", 1.0, 0.06, 10)
    core.autoscale_once()  # two workers
    core.report("consumer", 1.0, 0.0, 90)  # 90/s: one worker (100/s) is under 1.25x that
    for _ in range(2 * dispatcher.SCALE_DOWN_TICKS):
        core.autoscale_once()
    assert [action for action, _ in _actions(core)] == ["add"]
    assert core.workers() == ["t-worker-0", "t-worker-1"]
