"""The pipeline model fl.profile and the tuner share: segments, loads, the bottleneck, and a
tuned stage's window, on figures the tests set."""

from __future__ import annotations

import dataclasses

import pytest

from feedline.profiling import model
from feedline.profiling.records import ConsumerStatistics, PipelineStatistics, StageStatistics
from feedline.profiling.report import analyse


def _stage(id: int, parent: int | None, name: str, seconds: float = 0.0, *,
           asynchronous: bool = False, parallelism: int = 1, cpu: float = 0.0,
           executor: str = "inline", buffer_mean: float | None = None) -> StageStatistics:
    return StageStatistics(id=id, parent=parent, name=name, operation=name.split("(")[0],
                           elements=100, bytes=0, self_seconds=seconds, input_seconds=0.0,
                           wait_seconds=0.0, parallelism=parallelism, asynchronous=asynchronous,
                           buffer_mean=buffer_mean, executor=executor, cpu_seconds=cpu)


def _run(*stages: StageStatistics, seconds: float = 1.0, between: float = 0.0
         ) -> PipelineStatistics:
    return PipelineStatistics(seconds=seconds, stages=stages,
                              consumer=ConsumerStatistics(calls=100, wait_seconds=0.5,
                                                          between_seconds=between))


def test_segments_follow_the_threads_that_pull_each_stage():
    # prefetch's workers pull the parallel map, which pulls its input where it is called
    # (on those workers); interleave's workers pull their own input.
    stages = (
        _stage(0, None, "batch"),
        _stage(1, 0, "prefetch", asynchronous=True),
        _stage(2, 1, "map(parse)", asynchronous=True, parallelism=4),
        _stage(3, 2, "interleave", asynchronous=True, parallelism=2),
        _stage(4, 3, "tfrecord"),
    )
    assert model.segments(stages) == {0: "consumer", 1: "workers:1", 2: "workers:2",
                                      3: "workers:3", 4: "workers:3"}
    assert model.caller_segment(stages[2], stages, model.segments(stages)) == "workers:1"
    # A parallel map at the output is called by the consumer: its input runs there.
    top = (_stage(0, None, "map(f)", asynchronous=True, parallelism=4), _stage(1, 0, "range"))
    assert model.segments(top) == {0: "workers:0", 1: "consumer"}


def test_loads_divide_each_segments_work_by_its_threads():
    stats = _run(_stage(0, None, "map(f)", 3.0, asynchronous=True, parallelism=4, cpu=3.0,
                        executor="threads"),
                 _stage(1, 0, "range", 0.2, cpu=0.2), seconds=2.0, between=0.5)
    loads = model.loads(stats, model.segments(stats.stages), cores=4)
    assert loads == pytest.approx({"workers:0": 3.0 / 8, "consumer": 0.1, "cpu": 3.2 / 8,
                                   "step": 0.25})
    # A prediction: the map free, the consumer's segment on 2 threads.
    predicted = model.loads(stats, model.segments(stats.stages), cores=4,
                            own={0: 0.0, 1: 0.2}, threads={"consumer": 2})
    assert predicted == pytest.approx({"workers:0": 0.0, "consumer": 0.05, "cpu": 0.025,
                                       "step": 0.25})


def test_a_threaded_map_the_gil_serializes_counts_its_cpu_on_the_cores_it_used():
    gil_bound = _stage(0, None, "map(f)", 3.6, asynchronous=True, parallelism=4, cpu=0.9,
                       executor="threads", buffer_mean=0.1)
    stats = _run(gil_bound)
    assert model.gil_bound_cores(stats, gil_bound) == pytest.approx(0.9)
    # Its work is its CPU time (0.9 s), on the 0.9 cores its threads used: a load of 1.
    assert model.loads(stats, {0: "workers:0"}, cores=4)["workers:0"] == pytest.approx(1.0)
    # A full buffer, one thread, processes, too little or too much CPU: not GIL-bound.
    for changed in ({"buffer_mean": 0.9}, {"parallelism": 1}, {"executor": "processes"},
                    {"cpu_seconds": 0.2}, {"cpu_seconds": 1.5}):
        stage = dataclasses.replace(gil_bound, **changed)
        assert model.gil_bound_cores(_run(stage), stage) is None, changed


def test_the_bottleneck_is_the_most_own_time_in_the_most_loaded_segment():
    stages = (
        _stage(0, None, "batch", 0.3),
        _stage(1, 0, "prefetch", 0.0, asynchronous=True),
        _stage(2, 1, "map(parse)", 0.6),
        _stage(3, 2, "tfrecord", 0.3),
    )
    segment_of = model.segments(stages)
    loads = {"consumer": 0.3, "workers:1": 0.9, "cpu": 0.99, "step": 2.0}
    assert model.bottleneck(stages, segment_of, loads).name == "map(parse)"
    # "cpu" and "step" are not segments; ties go to the first segment, then stage.
    loads = {"consumer": 0.9, "workers:1": 0.9, "cpu": 5.0, "step": 5.0}
    assert model.bottleneck(stages, segment_of, loads).name == "batch"
    even = (_stage(0, None, "map(a)", 0.5), _stage(1, 0, "map(b)", 0.5))
    assert model.bottleneck(even, model.segments(even), {"consumer": 1.0}).name == "map(a)"


def test_analyse_names_the_models_bottleneck():
    stats = _run(_stage(0, None, "batch", 0.1),
                 _stage(1, 0, "prefetch", 0.0, asynchronous=True),
                 _stage(2, 1, "map(parse)", 0.7, cpu=0.7),
                 _stage(3, 2, "tfrecord", 0.2, cpu=0.2))
    segment_of = model.segments(stats.stages)
    expected = model.bottleneck(stats.stages, segment_of, model.loads(stats, segment_of, 4))
    report = analyse(stats, cores=4)
    assert (report.bottleneck.stage, report.bottleneck.name) == (2, "map(parse)") == \
        (expected.id, expected.name)
    assert report.bottleneck.share == pytest.approx(0.7 / 0.9)


def test_a_stage_window_between_two_snapshots():
    since = (100.0, 1000, 1100, 50, 4.0, 0.5, 2.0)
    now = (104.0, 5000, 5100, 1050, 16.0, 1.5, 8.0)
    window = model.StageWindow.between(since, now, workers=4)
    assert window == model.StageWindow(seconds=4.0, rate=1000.0, waited=0.25, occupied=3.0,
                                       pulling=0.25, share=0.5, workers=4)
    assert window.load == 0.75


def test_a_stage_window_of_no_time_or_no_work():
    at = (100.0, 10, 10, 0, 1.0, 0.0, 1.0)
    assert model.StageWindow.between(at, at, workers=2) == model.StageWindow(
        seconds=0.0, rate=0.0, waited=0.0, occupied=0.0, pulling=0.0, share=None, workers=2)
    # CPU time is capped at the busy time it was measured in; no call: no wait share.
    later = (101.0, 10, 10, 0, 2.0, 0.0, 3.0)
    window = model.StageWindow.between(at, later, workers=0)
    assert (window.share, window.waited, window.load) == (1.0, 0.0, 1.0)


def test_the_most_loaded_of_several_stages_is_their_bottleneck():
    def window(occupied: float, workers: int) -> model.StageWindow:
        return model.StageWindow(1.0, 100.0, 0.5, occupied, 0.0, 1.0, workers)

    assert model.most_loaded([window(3.0, 8), window(1.8, 2), window(3.5, 4)]) == 1
    assert model.most_loaded([window(1.0, 2), window(2.0, 4)]) == 0  # a tie: the first
    with pytest.raises(ValueError, match="at least one"):
        model.most_loaded([])
