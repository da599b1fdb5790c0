"""Where AUTOTUNE places a whole pipeline: one that writes files (a file cache) stays on
threads; an inline map given ``executor="process"`` is a map of this process, which the trial
measures and may move."""

from __future__ import annotations

import pytest

import feedline as fl

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))


def _twice(x):
    return x * 2


def _two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU budget of two, whatever this machine has: the pipeline's placement is decided."""
    monkeypatch.setattr("feedline.core.options.schedulable_cpus", lambda: 2)


@pytest.mark.timeout(120)
def test_a_file_cache_with_maps_in_processes_stays_on_threads(monkeypatch, tmp_path):
    # Before the placement package, a map given executor="process" kept the pipeline on
    # threads before the sharding plan was asked for; the policy's extraction asked for the
    # plan first, and the plan refuses a cache(filename): iteration raised ValueError.
    _two_cpus(monkeypatch)
    ds = (fl.Dataset.range(20).cache(str(tmp_path / "c"))
          .map(_twice, num_parallel_calls=2, executor="process")
          .prefetch(fl.AUTOTUNE).with_options(QUICK))
    with iter(ds) as it:
        assert [int(x) for x in it] == [2 * x for x in range(20)]
        decision = it.process_decision
        assert (decision.mode, decision.workers, decision.provisional) == ("threads", 0, False)
        assert decision.reason.startswith("map(_twice)")  # the stage that keeps it here


@pytest.mark.timeout(120)
def test_a_file_cache_before_prefetch_autotune_stays_on_threads(monkeypatch, tmp_path):
    # ds.cache(filename).prefetch(AUTOTUNE), tf.data's most common ending, raised ValueError
    # on any machine of two CPUs or more: the whole-pipeline placement asked the sharding
    # plan, which refuses file caches, instead of keeping such a pipeline where it is.
    _two_cpus(monkeypatch)
    path = str(tmp_path / "c")
    ds = fl.Dataset.range(5).cache(path).prefetch(fl.AUTOTUNE).with_options(QUICK)
    for _ in range(2):  # writes the cache, then reads it
        with iter(ds) as it:
            assert [int(x) for x in it] == [0, 1, 2, 3, 4]
            decision = it.process_decision
            assert (decision.mode, decision.workers) == ("threads", 0)
            assert decision.reason.startswith(f"cache({path!r})")  # the stage that writes


def test_the_placement_policy_keeps_a_pipeline_that_writes_files():
    from feedline.placement.policy import place_pipeline

    plan = place_pipeline(8, None, [], "output", False, True, True,
                          writes_files=["cache('/tmp/c')"])
    assert plan.move is None
    assert plan.reason.startswith("cache('/tmp/c')")
    forced = place_pipeline(8, True, [], "output", False, True, True,
                            writes_files=["cache('/tmp/c')"])
    assert forced.move is None
    # A map's calls in processes is still the reason given first, as before.
    both = place_pipeline(8, None, ["map(f)"], "output", False, True, True,
                          writes_files=["cache"])
    assert both.move is None and both.reason.startswith("map(f)")


def _double(x):
    return int(x) * 2  # not vectorized (a whole batch in one call) by the optimizer


def test_an_inline_map_given_executor_process_still_gets_the_trial(monkeypatch):
    # map(f, executor="process") without num_parallel_calls runs inline, on this process's
    # threads; it was taken for a map in worker processes: no trial, never moved.
    from feedline.placement import policy
    from feedline.placement.auto import AutoProcessesIterator

    original = AutoProcessesIterator._trial
    trials = []

    def gil_bound(self):
        trials.append(original(self))
        return 1.0, False  # one core of two busy: moving pays

    monkeypatch.setattr(AutoProcessesIterator, "_trial", gil_bound)
    # Its elements cost more than receiving them would, whatever this machine measures (a
    # cheap element's cost is near that of receiving it, on either side by the load).
    monkeypatch.setattr(policy, "SHARDS_MIN_RECEIVE_GAIN", 0.0)
    ds = fl.Dataset.range(40).map(_double, executor="process").batch(4) \
        .prefetch(fl.AUTOTUNE).with_options(fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2)))
    with iter(ds) as it:
        got = [batch.tolist() for batch in it]
        decision = it._root.decision
    assert got == [[2 * x for x in range(i, i + 4)] for i in range(0, 40, 4)]
    assert len(trials) == 1
    assert (decision.mode, decision.workers, decision.cpu_budget) == ("processes", 2, 2), decision.reason
