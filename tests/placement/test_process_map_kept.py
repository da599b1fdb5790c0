"""A map's worker processes are kept across the epochs of a ``repeat`` and end with the
pipeline (``MapRunner.release``, ``IteratorContext.keep``)."""

from __future__ import annotations

import concurrent.futures
import os
import time

import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.core.validation import schedulable_cpus
from feedline.placement.runner import MapRunner, kept_pool
from feedline.testing.threads import no_leaked_threads
from tests.placement.process_helpers import wait_gone, worker_processes

pytestmark = pytest.mark.timeout(120)

THREADS = fl.Options(autotune=fl.AutotuneOptions(processes=False))


def _pid_and_value(x):
    return os.getpid(), int(x) * 3


def _epochs(dataset: fl.Dataset, epochs: int, per_epoch: int) -> list[list[tuple[int, int]]]:
    with iter(dataset.repeat(epochs).with_options(THREADS)) as it:
        out = [(int(pid), int(value)) for pid, value in it]
    return [out[i * per_epoch:(i + 1) * per_epoch] for i in range(epochs)]


def test_the_next_epoch_runs_on_the_same_worker_processes_and_they_end_with_the_pipeline():
    ds = fl.Dataset.range(40).map(_pid_and_value, num_parallel_calls=2, executor="process")
    with no_leaked_threads():
        epochs = _epochs(ds, 3, 40)
        assert [[value for _, value in epoch] for epoch in epochs] == \
            [[3 * i for i in range(40)]] * 3
        pids = {pid for epoch in epochs for pid, _ in epoch}
        # Two workers at most over the three epochs, whichever of them got work when: a
        # pool started per epoch would have run them on up to six.
        assert os.getpid() not in pids and 1 <= len(pids) <= 2
        assert wait_gone(sorted(pids), 10) == []
    assert worker_processes() == []


def test_a_pipeline_closed_mid_epoch_ends_the_kept_workers():
    ds = fl.Dataset.range(40).map(_pid_and_value, num_parallel_calls=2, executor="process")
    with no_leaked_threads():
        it = iter(ds.repeat(3).with_options(THREADS))
        seen = {int(next(it)[0]) for _ in range(50)}  # into the second epoch
        it.close()
        assert wait_gone(sorted(seen), 10) == []
    assert worker_processes() == []


class _Pool:
    def __init__(self, workers: int, reusable: bool) -> None:
        self.workers, self.reusable, self.shut = workers, reusable, False

    def shutdown(self) -> None:
        self.shut = True


@pytest.mark.parametrize(("workers", "reusable", "taken"), [
    (2, True, True), (3, True, False), (2, False, False)])
def test_a_kept_pool_is_taken_only_if_usable_and_of_the_stages_size(workers, reusable, taken):
    ctx, node = IteratorContext(), object()
    pool = _Pool(workers, reusable)
    ctx.keep(node, pool)
    assert (kept_pool(ctx, node, 2) is pool) == taken
    assert pool.shut == (not taken)  # one not taken is ended, not left running
    assert node not in ctx.kept
    assert kept_pool(ctx, None, 2) is None


def _slow_pid_and_value(x):
    time.sleep(0.01)  # calls worth moving to processes
    return os.getpid(), int(x) * 3


def _workers_started_within_the_first_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer maps elements inline while the stage's workers start (seconds on a
    loaded machine); an epoch that ends before they have started ends them with it. Here the
    first call waits for their start, so what is checked is the keeping, not a race between
    the workers' start and the epoch's end."""
    real = MapRunner._workers_starting

    def started_first(self, window) -> bool:
        real(self, window)  # starts them on its first call
        if self._warming:
            done, _ = concurrent.futures.wait(self._warming, timeout=60)
            assert len(done) == len(self._warming), "the workers did not start in 60 s"
        return real(self, window)

    monkeypatch.setattr(MapRunner, "_workers_starting", started_first)


def test_an_autotune_map_moved_to_processes_keeps_them_for_the_next_epoch(monkeypatch):
    from tests.gil_measurements import measure_as, serialized_by_the_gil

    measure_as(monkeypatch, serialized_by_the_gil)  # moved to processes after its first calls
    _workers_started_within_the_first_epoch(monkeypatch)
    ds = fl.Dataset.range(200).map(_slow_pid_and_value, num_parallel_calls=fl.AUTOTUNE)
    with no_leaked_threads():
        epochs = _epochs(ds, 3, 200)
        assert [[value for _, value in epoch] for epoch in epochs] == \
            [[3 * i for i in range(200)]] * 3
        workers = [{pid for pid, _ in epoch} - {os.getpid()} for epoch in epochs]
        # The later epochs ran on worker processes, one pool of the stage's size at most
        # over the three epochs (a pool started per epoch would have run on more).
        assert workers[1] and workers[2]
        assert len(workers[0] | workers[1] | workers[2]) <= schedulable_cpus()
        assert wait_gone(sorted(workers[0] | workers[1] | workers[2]), 10) == []
    assert worker_processes() == []
