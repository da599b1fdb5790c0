"""fl.profile and its analysis: the bottleneck, predicted speed-ups, verified advice."""

from __future__ import annotations

import time

import pytest

import feedline as fl
from feedline.profiling.records import ConsumerStatistics, PipelineStatistics, StageStatistics
from feedline.profiling.report import analyse, format_report


def _stage(id, parent, name, operation, self_seconds, *, elements=1000, asynchronous=False,
           parallelism=1, executor="inline", buffer_size=None, buffer_mean=None):
    return StageStatistics(
        id=id, parent=parent, name=name, operation=operation, elements=elements,
        bytes=8 * elements, self_seconds=self_seconds, input_seconds=0.0,
        wait_seconds=self_seconds, parallelism=parallelism, asynchronous=asynchronous,
        buffer_size=buffer_size, buffer_mean=buffer_mean,
        executor=executor if asynchronous else "inline", cpu_seconds=self_seconds)


def _statistics(stages, wait, between, seconds=1.0):
    return PipelineStatistics(seconds=seconds, stages=tuple(stages),
                              consumer=ConsumerStatistics(100, wait, between))


def test_inline_map_is_the_bottleneck_and_parallelizing_it_is_advised():
    stats = _statistics([_stage(0, None, "batch", "batch", 0.05),
                         _stage(1, 0, "map(parse)", "map", 0.8),
                         _stage(2, 1, "tfrecord", "tfrecord", 0.05)], wait=0.9, between=0.1)
    report = analyse(stats, cores=4)
    assert report.input_bound
    assert report.bottleneck.name == "map(parse)" and report.bottleneck.stage == 1
    assert report.bottleneck.share == pytest.approx(0.8 / 0.9)
    # Without the map, the consumer's own 0.1 s per second is the limit: 0.9 / 0.1.
    assert report.bottleneck.speedup_without == pytest.approx(9.0)
    assert [a.kind for a in report.advice] == ["parallelize", "prefetch", "snapshot"]
    parallelize, prefetch, snapshot = report.advice
    assert parallelize.rewrite == ".map(parse, num_parallel_calls=fl.AUTOTUNE)"
    # On 4 workers the map's 0.8 s is 0.2 of a second; the CPU (0.9 s over 4 cores) then
    # limits: 0.9 / 0.225.
    assert parallelize.predicted_speedup == pytest.approx(4.0)
    assert prefetch.predicted_speedup == pytest.approx(1.0 / 0.9)
    assert snapshot.predicted_speedup == pytest.approx(9.0)
    assert all(a.verified_speedup is None for a in report.advice)


def test_gil_bound_threaded_map_gets_worker_processes():
    stats = _statistics([
        _stage(0, None, "prefetch", "prefetch", 0.01, elements=100, asynchronous=True,
               executor="threads", buffer_size=2, buffer_mean=0.0),
        _stage(1, 0, "map(tokenize)", "map", 1.0, elements=100, asynchronous=True,
               parallelism=4, executor="threads", buffer_size=8, buffer_mean=0.1),
        _stage(2, 1, "tensor_slices", "tensor_slices", 0.02, elements=100)],
        wait=0.8, between=0.2)
    report = analyse(stats, cores=4)
    assert report.bottleneck.name == "map(tokenize)" and report.bottleneck.share == 1.0
    assert report.bottleneck.speedup_without == pytest.approx(5.0)
    assert [a.kind for a in report.advice] == ["processes", "snapshot"]
    processes = report.advice[0]
    assert processes.rewrite == '.map(tokenize, num_parallel_calls=4, executor="process")'
    # Four processes: the map's load 1.0 becomes 0.25; the CPU (1.03 s over 4 cores) limits.
    assert processes.predicted_speedup == pytest.approx(1.0 / (1.03 / 4))


def test_a_batch_stacking_large_elements_is_parallelized():
    stats = _statistics([_stage(0, None, "prefetch", "prefetch", 0.0, elements=50,
                                asynchronous=True, executor="threads", buffer_size=2,
                                buffer_mean=0.9),
                         _stage(1, 0, "batch", "batch", 0.9, elements=50),
                         _stage(2, 1, "map(decode)", "map", 0.6, elements=3200,
                                asynchronous=True, parallelism=2, executor="threads",
                                buffer_size=4, buffer_mean=0.9)], wait=0.9, between=0.1)
    report = analyse(stats, cores=2)
    assert report.bottleneck.name == "batch"
    advice = report.advice[0]
    assert (advice.kind, advice.rewrite) == (
        "parallelize", ".batch(batch_size, num_parallel_calls=fl.AUTOTUNE)")
    # Stacking on 2 workers: the prefetch thread's 0.9 s of batch becomes 0.45 per worker,
    # and the CPU (1.5 s over 2 cores, 0.75) then limits: 0.9 / 0.75.
    assert advice.predicted_speedup == pytest.approx(1.2)


def test_a_consumer_that_does_not_wait_is_told_the_pipeline_keeps_up():
    stats = _statistics([_stage(0, None, "range", "range", 0.01)], wait=0.01, between=0.99)
    report = analyse(stats, cores=2)
    assert not report.input_bound
    assert report.advice[0].kind == "consumer"
    assert "waits for input only 1%" in report.advice[0].message


def test_nothing_measured_gives_no_bottleneck():
    stats = PipelineStatistics(seconds=0.0, stages=(), consumer=ConsumerStatistics(0, 0, 0))
    report = analyse(stats, cores=2)
    assert report.bottleneck is None and report.advice == ()
    assert report.notes == ("nothing was measured",)


def _sleepy(x):
    time.sleep(0.002)
    return x


def test_profile_names_a_slow_map_and_verifies_parallelizing_it():
    ds = fl.Dataset.range(2000).map(_sleepy, name="sleepy").batch(10)
    report = fl.profile(ds, seconds=0.6, verify=True)
    assert report.bottleneck.name == "sleepy"
    assert report.advice[0].kind == "parallelize"
    assert report.advice[0].predicted_speedup > 1.5
    assert report.advice[0].verified_speedup is not None
    assert any(note.startswith("verified against the pipeline as written") for note in report.notes)
    text = format_report(report)
    assert "bottleneck: sleepy" in text and "measured" in text


def test_profile_stops_at_max_elements_and_calls_the_consumer():
    seen = []
    report = fl.profile(fl.Dataset.range(1000), seconds=10, consumer=seen.append,
                        max_elements=50)
    assert len(seen) == 50 and report.statistics.elements == 50


def _fails_on_5(x):
    if int(x) == 5:
        raise ValueError("element five is bad")
    return x


def test_elements_that_raise_are_skipped_counted_and_named():
    ds = fl.Dataset.range(20).map(_fails_on_5).batch(4)
    report = fl.profile(ds, seconds=5)
    # tf.data's batch: the error takes the place of the batch it broke (element 4 is
    # dropped with it), then batches go on after element 5: 5 batches and the error.
    assert report.statistics.elements == 6
    assert any(note.startswith("1 element(s) raised an error while measured")
               and "ValueError: element five is bad" in note for note in report.notes)


def test_an_error_of_the_consumer_is_raised():
    def step(_):
        raise RuntimeError("the training step broke")

    with pytest.raises(RuntimeError, match="training step broke"):
        fl.profile(fl.Dataset.range(10), seconds=5, consumer=step)


def test_profile_rejects_a_non_positive_duration():
    with pytest.raises(ValueError, match="seconds"):
        fl.profile(fl.Dataset.range(3), seconds=0)
