"""The feed workload's trainer, its options and reports, and the worker-count sweep (no peers)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks import common, data, feed, reference, report, run
from benchmarks.common import RunSpec


class FakeClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeStep:
    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def run(self) -> None:
        self.clock.now += self.seconds


def _loader(clock: FakeClock, build: float, waits: list[float], batch: int):
    def make():
        clock.now += build

        def batches():
            for wait in waits:
                clock.now += wait
                yield np.ones((batch, 2))

        return batches()

    return make


def test_train_counts_waiting_from_building_the_pipeline_to_the_last_next():
    clock = FakeClock()
    result = feed.train(_loader(clock, 1.0, [2.0, 0.5, 0.5], 4), FakeStep(clock, 3.0),
                        common.batch_size_of, common.batch_digest, clock=clock)
    assert (result.elements, result.batches) == (12, 3)
    assert result.first_batch_s == 3.0  # build 1 + first next 2
    assert result.total_s == 3.0 + 9.0 + 1.0
    assert result.waited_s == 4.0 and result.steps_s == 9.0
    assert result.waited == pytest.approx(4 / 13)
    assert result.steady_waited == pytest.approx(1 / 10)
    assert result.digest == pytest.approx(3 * common.batch_digest(np.ones((4, 2))))
    assert not result.capped


def test_train_stops_at_the_time_cap():
    clock = FakeClock()
    result = feed.train(_loader(clock, 0.0, [1.0] * 10, 2), FakeStep(clock, 1.0),
                        common.batch_size_of, common.batch_digest, max_seconds=5, clock=clock)
    assert result.capped and result.batches == 3


def test_step_limit_work_and_trainer_alone():
    step = feed.make_step(2.0, 8.0, per_ms=100.0, digest=0.5)
    assert step.iterations == 150 and step.limit(512) == pytest.approx(51_200)
    assert feed.make_step(1.0, 0.0, per_ms=100.0, digest=3.0).iterations == 0
    assert feed.Step(0.0, 0.0, 0).limit(8) is None
    rate = feed.trainer_alone(np.ones((4, 2)), feed.Step(0.0, 0.0, 10), common.batch_digest,
                              seconds=0, min_steps=3)
    assert rate > 0
    assert feed.calibrate(target_ms=0.2, trials=2) > 0
    assert feed.digest_ms("images", trials=1) >= 0


def test_step_options_parse_per_workload_or_for_both():
    args = run.parse_args(["feed", "--feed-gil-ms", "images=5", "--feed-sleep-ms", "3"])
    assert args.feed_ms == {"chess": (feed.DEFAULT_STEP_MS["chess"][0], 3.0),
                            "images": (5.0, 3.0)}
    defaults = run.parse_args(["feed"]).feed_ms
    assert defaults == feed.DEFAULT_STEP_MS
    for bad in ("tennis=2", "chess=fast", "-1"):
        with pytest.raises(ValueError):
            feed.parse_step_ms(bad, "--feed-gil-ms")
    with pytest.raises(SystemExit):
        run.parse_args(["feed", "--feed-gil-ms", "tennis=2"])


def test_repeated_epochs_keep_each_image_with_its_crop(tmp_path):
    meta = {**data.images(count=3, seed=2, cache=tmp_path), "decoder": "pillow"}
    assert feed.epochs_for(meta["count"], 500, 0.02) == 4
    twice = feed.repeat_data(meta, 2)
    assert twice["count"] == 6 and twice["files"][3] == meta["files"][0]
    params = common.image_params(twice)
    np.testing.assert_array_equal(params[3:], common.image_params(meta))
    assert feed.repeat_data(meta, 1) is meta
    with pytest.raises(ValueError):
        common.image_params({**meta, "files": meta["files"][:2]})


def test_feed_runs_each_systems_expert_variant_and_sources_chess_and_images():
    bench = run.Bench(run.parse_args(["feed", "--systems", "feedline,tf,torch"]), [])
    assert bench.measured() == []
    assert bench.data_workloads() == ["chess", "images"]
    assert bench.configs("chess", feed_mode=True) == [
        ("feedline", "recommended"), ("feedline", "processes"), ("tf", "expert"),
        ("torch", "expert")]


def test_feedline_processes_variant_is_chess_and_images_only_and_has_a_worker_count():
    bench = run.Bench(run.parse_args(["--systems", "feedline", "--workers", "3"]), [])
    assert bench.configs("chess") == [("feedline", "recommended"), ("feedline", "processes")]
    assert bench.configs("overhead") == [("feedline", "recommended")]
    bench.tune_workers()
    assert bench.extra_for("feedline", "processes", "images") == {"workers": 3}
    assert bench.extra_for("feedline", "recommended", "images") == {}
    off = run.Bench(run.parse_args(["--no-feedline-processes", "--systems", "feedline"]), [])
    assert off.configs("chess") == [("feedline", "recommended")]


def test_sweep_is_opt_in_and_runs_every_count_of_counted_variants():
    assert "sweep" not in run.parse_args([]).workloads
    args = run.parse_args(["sweep", "--systems", "feedline,tf,torch", "--sweep-workers", "1,2",
                           "--rounds", "1", "--no-feedline-processes"])
    bench = run.Bench(args, [])
    assert bench.data_workloads() == ["chess", "images"]
    plan = bench.sweep_plan()
    chess = [(s, v, n) for _, w, s, v, n in plan if w == "chess"]
    assert chess == [("feedline", "recommended", None), ("tf", "expert", None),
                     ("torch", "expert", 1), ("torch", "expert", 2)]
    args.feedline_processes = True
    counted = [(v, n) for _, w, s, v, n in bench.sweep_plan() if s == "feedline"]
    assert counted == [("recommended", None), ("processes", 1), ("processes", 2)] * 2
    assert run.parse_args(["sweep"]).sweep_workers[0] == 1
    bench.data = {"chess": {}, "images": {}}
    bench.tune_workers()  # the sweep tries every count itself: nothing to tune
    assert bench.tuning == [] and bench.workers == {}
    with pytest.raises(SystemExit):
        run.parse_args(["sweep", "--sweep-workers", "0"])


def _feed_records(system, variant, values, waited):
    return [{"ok": True, "mode": "feed", "workload": "chess", "system": system,
             "variant": variant, "throughput": v, "waited": waited, "steady_waited": waited,
             "limit": 51_200.0, "trainer_alone": 50_000.0, "gil_ms": 2.0, "sleep_ms": 8.0,
             "digest_ms": 0.5, "epochs": 2, "first_batch_s": 0.1, "cpu_s": 1.0,
             "peak_rss": 100 * report.MIB} for v in values]


def test_feed_rows_report_waiting_limit_and_ratio_to_the_best_peer():
    bench = run.Bench(run.parse_args(["feed", "--systems", "feedline,tf,torch"]), [])
    bench.records = (_feed_records("feedline", "recommended", [30_000.0], 0.2)
                     + _feed_records("feedline", "processes", [48_000.0], 0.01)
                     + _feed_records("tf", "expert", [40_000.0], 0.1)
                     + _feed_records("torch", "expert", [20_000.0], 0.5)
                     + [{**r, "mode": "measure", "throughput": 1.0}
                        for r in _feed_records("tf", "expert", [1.0], 0.0)])
    rows = bench.rows()
    assert list(rows) == ["feed (chess)", "feed (images)"]
    chess = {r.label: r for r in rows["feed (chess)"]}
    assert chess["tf (expert)"].median == 40_000.0  # the measure-mode record is not counted
    assert chess["torch (expert)"].waited == 0.5
    value, best = report.ratio(rows["feed (chess)"])
    assert best.label == "tf (expert)" and value == pytest.approx(1.2)
    text = report.markdown({"feed (chess)": rows["feed (chess)"]})
    assert ("| feed (chess) | examples/s | feedline (processes): 48,000 (waited 1.0%) | "
            "tf (expert): 40,000 (waited 10.0%) | 1.2 |") in text
    assert "limit (input free) batch / step = 51,200/s" in text and "repeated 2 times" in text
    assert "| torch (expert) | 20,000 | 20,000–20,000 | 39.1% | 50.0% | 50.0% |" in text


def test_sweep_table_marks_failed_counts():
    records = [{"system": "torch", "variant": "expert", "workload": "images", "workers": 1,
                "ok": True, "throughput": 300.0},
               {"system": "torch", "variant": "expert", "workload": "images", "workers": 2,
                "ok": False, "error": "WRONG OUTPUT: epoch produced 3 elements"}]
    text = report.sweep_markdown(records, [1, 2])
    assert "| images | torch (expert) | 300 | WRONG OUTPUT | 300 (1) |" in text


@pytest.mark.slow
def test_worker_feed_mode_consumes_one_checked_epoch(tmp_path):
    meta = data.chess(records=1200, files=2, seed=3, cache=tmp_path)
    twice = feed.repeat_data(meta, 2)
    spec = RunSpec("feedline", "recommended", "chess", "feed", twice,
                   extra={"gil_ms": 0.2, "sleep_ms": 0.1, "iterations": 100})
    result = run.run_child(sys.executable, spec, 120, tmp_path / "logs")
    assert result["ok"], result.get("error")
    one = reference.epoch_expectation("chess", meta, tmp_path)
    expected = {k: v * 2 for k, v in one.items()}
    assert reference.compare_epoch("chess", expected, result["elements"],
                                   result["digest"]) is None
    assert 0 <= result["waited"] <= 1 and result["limit"] == pytest.approx(512 / 0.0003)
    assert result["batches"] >= 4 and result["trainer_alone"] > 0


def test_worker_count_trials_see_default_size_data_even_with_small():
    bench = run.Bench(run.parse_args(["chess", "--small"]), [])
    bench.data = {"chess": {"files": ["a", "b"], "count": 40_000},
                  "python_heavy": {"path": "x", "count": 10}}
    trial = bench.tuning_data("chess")
    assert trial["count"] == 400_000 and len(trial["files"]) == 20
    assert bench.tuning_data("python_heavy") is bench.data["python_heavy"]
