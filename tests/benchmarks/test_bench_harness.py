"""The benchmark harness's own logic: arguments, checks, summaries and reports (no peers)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks import reference, report, run
from benchmarks.common import RunSpec


def test_arguments_aliases_defaults_and_errors(capsys):
    args = run.parse_args(["python-heavy", "shuffle", "chess", "chess"])
    assert args.workloads == ["python_heavy", "shuffle_memory", "chess"]
    assert run.parse_args([]).workloads == run.WORKLOADS + run.EXTRAS
    with pytest.raises(SystemExit):
        run.parse_args(["nonsense"])
    assert "unknown workload 'nonsense'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.parse_args(["--systems", "feedline,mxnet"])


def test_sizes_small_and_overrides():
    args = run.parse_args(["--small", "--images", "7"])
    sizes = run.sizes_from(args)
    assert sizes.images == 7 and sizes.chess_records == 40_000
    assert run.sizes_from(run.parse_args([])).chess_records == 400_000


def test_configs_alternate_systems_and_skip_naive_for_shuffle_memory():
    bench = run.Bench(run.parse_args(["--systems", "feedline,tf"]), [])
    assert bench.configs("chess") == [("feedline", "recommended"), ("feedline", "processes"),
                                      ("tf", "expert"), ("tf", "naive")]
    assert bench.configs("shuffle_memory") == [("feedline", "recommended"), ("tf", "expert")]


def test_startup_alone_runs_chess_and_images_to_the_first_batch_only():
    bench = run.Bench(run.parse_args(["startup", "chess"]), [])
    assert bench.measured() == ["chess"]
    assert bench.startup_only() == ["images"]
    assert bench.data_workloads() == ["chess", "images"]


def test_compare_batches_finds_wrong_values_shapes_and_missing_batches():
    want = [[np.arange(4)], [np.arange(4)]]
    assert reference.compare_batches("overhead", want, [[np.arange(4)], [np.arange(4)]]) is None
    assert "1 values differ" in reference.compare_batches(
        "overhead", want, [[np.arange(4)], [np.array([0, 1, 2, 5])]])
    assert "shape" in reference.compare_batches("overhead", want, [[np.arange(3)]] * 2)
    assert "produced 1 batches" in reference.compare_batches("overhead", want, want[:1])
    close = [[np.full(3, 0.5, np.float32)]]
    assert reference.compare_batches("chess", close, [[close[0][0] + 1e-7]]) is None
    assert reference.compare_batches("chess", close, [[close[0][0] + 1e-3]]) is not None


def test_compare_epoch_counts_and_digest():
    expected = {"count": 10, "digest": 100.0, "values": 10}
    assert reference.compare_epoch("overhead", expected, 10, 100.0) is None
    assert "9 elements" in reference.compare_epoch("overhead", expected, 9, 100.0)
    assert "digest" in reference.compare_epoch("overhead", expected, 10, 101.0)
    # Images allow a few grey levels of decoder difference per value, not more.
    assert reference.compare_epoch("images", expected, 10, 100.2) is None
    assert reference.compare_epoch("images", expected, 10, 105.0) is not None


def _records(values, **extra):
    return [{"ok": True, "throughput": v, "first_batch_s": 0.5, "cpu_s": 1.0,
             "peak_rss": 200 * report.MIB, **extra} for v in values]


def test_summary_keeps_failures_visible():
    records = _records([10.0, 12.0]) + [{"ok": False, "error": "timeout (> 600 s)"}]
    row = report.summarize(records, "chess", "grain", "naive")
    assert row.status == "timeout (> 600 s)" and row.runs == 2 and row.median == 11.0
    failed = report.summarize([], "chess", "torch", "expert", status="unavailable: no wheel")
    assert failed.status == "unavailable: no wheel" and failed.median is None


def test_ratio_is_feedline_over_the_best_successful_peer():
    rows = [report.summarize(_records([30.0]), "chess", "feedline", "recommended"),
            report.summarize(_records([20.0]), "chess", "tf", "expert"),
            report.summarize(_records([25.0]), "chess", "torch", "expert", status="CHECK FAILED"),
            report.summarize(_records([10.0]), "chess", "grain", "naive")]
    value, best = report.ratio(rows)
    assert best.label == "tf (expert)" and value == pytest.approx(1.5)
    # Lower is better for start-up: the best peer is the fastest to its first batch.
    startup = [report.summarize(_records([None], first_batch_s=t), "startup", s, "x")
               for s, t in (("feedline", 0.2), ("tf", 0.4), ("torch", 0.3))]
    value, best = report.ratio(startup)
    assert best.system == "torch" and value == pytest.approx(0.2 / 0.3)


def test_markdown_lists_every_row_and_the_summary():
    rows = {"chess": [report.summarize(_records([30.0]), "chess", "feedline", "recommended"),
                      report.summarize([], "chess", "grain", "expert",
                                       status="unavailable: install failed")]}
    text = report.markdown(rows)
    assert "| chess | examples/s | 30 | – | – |" in text
    assert "grain (expert)" in text and "unavailable: install failed" in text


def test_results_md_names_date_machine_and_command():
    host = report.machine()
    text = report.results_md("2030-01-01", host, "./dev bench --small", "TABLE", ["ok"], [],
                             {"tf": "2.21.0"})
    assert "2030-01-01" in text and "./dev bench --small" in text and "TABLE" in text
    assert f"{host['nproc']} CPUs" in text and "tf 2.21.0" in text


def test_unavailable_peer_is_reported_not_dropped(tmp_path):
    bench = run.Bench(run.parse_args(["overhead", "--systems", "feedline,torch", "--rounds",
                                      "1", "--small"]), [])
    bench.envs = {"feedline": run.envs.Environment("feedline", sys.executable),
                  "torch": run.envs.Environment("torch", None, "install failed; see log")}
    bench.data = {"overhead": {"kind": "range", "count": 3000}}
    bench.cache = tmp_path
    bench.logs = tmp_path / "logs"
    bench.measure()
    rows = bench.rows()["overhead"]
    statuses = {r.label: r.status for r in rows}
    assert statuses["feedline (recommended)"] == "ok"
    assert statuses["torch (expert)"].startswith("unavailable: install failed")
    assert statuses["torch (naive)"].startswith("unavailable")
    (mine,) = [r for r in rows if r.system == "feedline"]
    assert mine.median and mine.median > 0 and mine.peak_rss > 0


def test_worker_check_mode_saves_the_first_batches(tmp_path):
    spec = RunSpec("feedline", "recommended", "overhead", "check", {"count": 2000},
                   check_batches=2)
    result = run.run_child(sys.executable, spec, 120, tmp_path)
    assert result["ok"], result.get("error")
    with np.load(result["npz"]) as npz:
        found = run._unpack_npz(npz)
    expected = reference.first_batches("overhead", {"count": 2000}, 2)
    assert reference.compare_batches("overhead", expected, found) is None


def test_worker_reports_a_failing_pipeline(tmp_path):
    spec = RunSpec("feedline", "recommended", "chess", "measure",
                   {"files": [str(tmp_path / "missing.tfrecord")], "count": 1})
    result = run.run_child(sys.executable, spec, 120, tmp_path)
    assert not result["ok"] and "log:" in result["error"]


def test_one_worker_count_means_no_tuning_and_only_experts_get_it():
    bench = run.Bench(run.parse_args(["chess", "--workers", "3"]), [])
    bench.tune_workers()
    assert bench.workers[("torch", "chess")] == 3
    assert bench.extra_for("torch", "expert", "chess") == {"workers": 3}
    assert bench.extra_for("torch", "naive", "chess") == {}
    assert bench.extra_for("feedline", "recommended", "chess") == {}
    with pytest.raises(SystemExit):
        run.parse_args(["--workers", "0"])


def test_peers_python_variable_uses_one_interpreter_and_installs_nothing(monkeypatch, tmp_path):
    from benchmarks import envs

    monkeypatch.setattr(envs, "VENVS", tmp_path / "venvs")  # nothing may be made there
    monkeypatch.setenv(envs.PEERS_PYTHON_VARIABLE, sys.executable)
    monkeypatch.setattr(envs, "can_import",
                        lambda python, module: python == sys.executable and module == "torch")
    torch = envs.ensure("torch")
    assert torch == envs.Environment("torch", sys.executable)
    tf = envs.ensure("tf")
    assert tf.python is None
    assert tf.error == (f"import tensorflow failed in {sys.executable} "
                        f"(${envs.PEERS_PYTHON_VARIABLE})")
    assert not (tmp_path / "venvs").exists()
