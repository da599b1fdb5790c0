"""benchmarks/service.py: its tables say what was measured; a tiny run on two clusters."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import common, service


def _row(label, seconds, local=False, rows=1000, batches=8, status="ok"):
    return {"label": label, "local": local, "rows": rows, "batches": batches,
            "seconds": seconds, "first_s": [0.01] * len(seconds),
            "cpu_s": [0.001] * len(seconds), "tree_cpu_s": [0.002] * len(seconds),
            "status": status}


def test_markdown_reports_ratios_to_local_scaling_and_overhead_per_batch():
    result = {
        "command": "python -m benchmarks.service", "machine": "x86_64, 2 CPUs", "cores": 2,
        "date": "2026-11-24", "ray": "2.60.0", "revision": "at abc1234", "python": "3.11.7",
        "mode": "distributed_epoch", "rounds": 3, "startup": "1 worker: 5.0 s",
        "load": (1.0, 2.0), "others": 0.5, "notes": ["a note"],
        "heavy": {"lines": 1000, "check_us": 20.0, "scaling": 1.8, "rows": [
            _row("local", [1.0, 1.1, 0.9], local=True),
            _row("service, 2 workers", [0.5, 0.6, 0.4],
                 status="**FAILED**: digest 1.0, expected 2.0")]},
        "overhead": [{"name": "small", "check_us": 5.0, "rows": [
            _row("local", [0.001, 0.002], local=True, batches=100),
            _row("service, 1 worker", [0.011, 0.012], batches=100)]}],
    }
    text = service.markdown(result)
    assert "| local | 1,000 | 909–1,111 | **1.00x** | 10 | 0.00 | 0.00 | ok |" in text
    assert "| service, 2 workers | 2,000 | 1,667–2,500 | **2.00x** | 10 |" in text
    assert "| 0.00 | **FAILED**: digest 1.0" in text
    assert "Service, 2 workers / 1 worker: **1.80x**" in text
    assert "benchmark's used 0.50 of the 2 cores" in text
    assert "could reach at most **2.00x** local" in text
    assert "| small | local | 15.0 | 10–20 | – | 10.0 | 10 | 20 | ok |" in text
    assert "| small | service, 1 worker | 115.0 | 110–120 | **+100** |" in text
    assert "Ray 2.60.0" in text and "- a note" in text


def test_a_wrong_pass_is_recorded_and_a_right_one_is_not(capsys):
    variant = service.Variant("small", "service, 1 worker", lambda: None)
    expected = {"count": 10, "batches": 2, "digest": 45.0}
    service.check(variant, service.Pass(1.0, 0.1, 0.1, 0.2, 2, 10, 45.0, 0.0), expected)
    assert not variant.problems
    service.check(variant, service.Pass(1.0, 0.1, 0.1, 0.2, 2, 10, 44.0, 0.0), expected)
    service.check(variant, service.Pass(1.0, 0.1, 0.1, 0.2, 2, 9, 45.0, 0.0), expected)
    service.check(variant, service.Pass(1.0, 0.1, 0.1, 0.2, 0, 0, 0.0, 0.0, "ValueError: x"),
                  expected)
    assert len(variant.problems) == 3
    assert "!!! WRONG OUTPUT" in capsys.readouterr().err


def test_the_overhead_pipelines_make_what_they_say():
    small = list(service.small_batches(3))
    assert [b.tolist() for b in small] == [[i] * service.SMALL_ROWS for i in range(3)]
    large = list(service.large_batches(2))
    assert large[1].shape == service.LARGE_SHAPE and large[1].nbytes == 1 << 20
    assert float(large[1].sum()) == 1 << 18
    for batches, shape in ((small, (service.SMALL_ROWS,)), (large, service.LARGE_SHAPE)):
        want = service.overhead_reference(len(batches), shape)
        assert want["count"] == sum(common.batch_size_of(b) for b in batches)
        assert want["digest"] == sum(common.batch_digest(b) for b in batches)


def test_a_pass_that_raises_is_reported_not_raised():
    def broken():
        raise RuntimeError("no pipeline")

    result = service.timed_pass(broken, service.Watchdog(30))
    assert result.error == "RuntimeError: no pipeline" and result.batches == 0
    lines = np.array(["a b c", "d e"], dtype=object)
    ok = service.timed_pass(lambda: service.heavy_local(lines), service.Watchdog(30))
    assert (ok.error, ok.rows, ok.batches) == ("", 2, 1)
    assert ok.digest == common.batch_digest(np.stack([common.tokenize(x) for x in lines]))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_tiny_run_on_two_clusters_checks_every_pass(tmp_path, capsys):
    pytest.importorskip("ray")
    status = service.main(["--lines", "300", "--small-batches", "20", "--large-batches", "4",
                           "--rounds", "1", "--run-timeout", "60", "--cache", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| service, 2 workers |" in out and "FAILED" not in out
    assert out.count("| ok |") == 10  # 4 GIL-bound rows, 3 + 3 overhead rows


class _NoCluster:
    """Stands in for a LocalCluster: the sabotaged ``through`` below never uses it."""

    def __init__(self, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


@pytest.mark.slow
def test_a_pass_missing_a_batch_fails_the_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray")
    import feedline as fl

    monkeypatch.setattr(fl.service, "LocalCluster", _NoCluster)
    monkeypatch.setattr(service, "through", lambda dataset, cluster: dataset.skip(1))
    status = service.main(["--lines", "300", "--small-batches", "20", "--large-batches", "4",
                           "--rounds", "1", "--cache", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1
    assert "!!! WRONG OUTPUT: service, 1 worker: 172 rows in 2 batches" in captured.err
    assert captured.out.count("**FAILED**") == 6 and captured.out.count("| ok |") == 4
