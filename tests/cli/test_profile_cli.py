"""``feedline profile MODULE:FUNCTION``: the real profiler end to end, the arguments it is
given, and one-line errors for targets that name no pipeline."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import uuid

import cloudpickle
import pytest

import feedline.profiling.report as report_module
from feedline.cli.main import main
from feedline.profiling.records import (
    ConsumerStatistics,
    PipelineStatistics,
    ProfileReport,
    StageStatistics,
)

PIPELINES = textwrap.dedent('''
    import feedline as fl

    VALUE = 3


    def work(x):
        # Pure Python (not vectorizable) and slow enough (~30 us) that a run spans a few
        # timeline samples.
        return int(x) + sum(range(3000))


    def pipeline():
        return fl.Dataset.range(10_000).map(work).batch(64)


    def small():
        return fl.Dataset.range(5)


    def needs_argument(n):
        return fl.Dataset.range(n)


    def not_a_dataset():
        return VALUE


    def broken():
        raise RuntimeError("the user's pipeline is broken")
''')


@pytest.fixture
def pipelines(tmp_path, monkeypatch):
    """A module of pipeline functions in a .py file: (its path, its module name); sys.path
    and sys.modules are restored after the test."""
    name = f"feedline_cli_pipelines_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(PIPELINES)
    monkeypatch.setattr(sys, "path", [*sys.path])
    yield path, name
    module = sys.modules.pop(name, None)
    if module is not None:
        with contextlib.suppress(ValueError):  # only a module loaded by path is registered
            cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.slow
def test_profile_runs_the_real_profiler_and_writes_every_file(pipelines, tmp_path, capsys):
    path, _ = pipelines
    out = tmp_path / "out"
    assert main(["profile", f"{path}:pipeline", "--seconds", "60", "--verify",
                 "--html", str(out / "report.html"), "--trace", str(out / "trace.json"),
                 "--json", str(out / "report.json")]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"profiling {path}:pipeline for up to 60 s, then each advised "
                            "rewrite as long...\n")
    lines = captured.out.splitlines()
    assert lines[0].startswith("throughput: ")
    assert lines[-3:] == [f"HTML report: {out / 'report.html'}",
                          (f"trace: {out / 'trace.json'} (open it in ui.perfetto.dev or "
                           "chrome://tracing)"),
                          f"JSON: {out / 'report.json'}"]

    # The pipeline ran to its end (10,000 elements in 157 batches, well within 60 s).
    report = json.loads((out / "report.json").read_text())
    stages = report["statistics"]["stages"]
    assert [(s["name"], s["elements"]) for s in stages] == [
        ("batch", 157), ("map(work)", 10_000), ("range", 10_000)]
    assert report["statistics"]["consumer"]["calls"] == 157
    assert report["bottleneck"]["name"] == "map(work)"
    assert len(report["statistics"]["timeline"]) >= 2

    # --trace turned span recording on: every stage has spans in the trace.
    trace = json.loads((out / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in spans} == {"batch", "map(work)", "range"}
    assert len(spans) == len(report["statistics"]["spans"])

    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<strong>map(work)</strong>" in page and page.count("<svg") >= 2


def test_the_arguments_reach_profile(pipelines, tmp_path, capsys, monkeypatch):
    path, name = pipelines
    calls = []
    stage = StageStatistics(id=0, parent=None, name="range", operation="range", elements=5,
                            bytes=40, self_seconds=0.001, input_seconds=0.0,
                            wait_seconds=0.001, parallelism=1, asynchronous=False)
    canned = ProfileReport(
        statistics=PipelineStatistics(seconds=0.5, stages=(stage,),
                                      consumer=ConsumerStatistics(5, 0.001, 0.4)),
        input_bound=False, bottleneck=None)

    def fake_profile(dataset, seconds=5.0, consumer=None, *, verify=False, trace=False,
                     max_elements=None):
        calls.append((list(map(int, dataset)), seconds, consumer, verify, trace, max_elements))
        return canned

    monkeypatch.setattr(report_module, "profile", fake_profile)
    monkeypatch.setattr(report_module, "format_report", lambda report: "THE REPORT")
    # By module name, found from the working folder as `python -m` would.
    monkeypatch.chdir(path.parent)
    assert main(["profile", f"{name}:small", "--seconds", "0.5", "--verify",
                 "--trace", "t.json"]) == 0
    assert main(["profile", f"{name}:small"]) == 0
    assert calls == [([0, 1, 2, 3, 4], 0.5, None, True, True, None),
                     ([0, 1, 2, 3, 4], 5.0, None, False, False, None)]
    out = capsys.readouterr().out
    assert out == ("THE REPORT\ntrace: t.json (open it in ui.perfetto.dev or chrome://tracing)"
                   "\nTHE REPORT\n")
    assert json.loads((path.parent / "t.json").read_text())["displayTimeUnit"] == "ms"


@pytest.mark.parametrize(("target", "message"), [
    ("nocolon", ("expected MODULE:FUNCTION (a module or a .py file, a colon, a function "
                 "returning a Dataset), got 'nocolon'")),
    ("{name}:", ("expected MODULE:FUNCTION (a module or a .py file, a colon, a function "
                 "returning a Dataset), got '{name}:'")),
    ("no_such_module_for_feedline:f", ("no module named 'no_such_module_for_feedline' (give "
                                       "a module importable from here, or the path of a .py "
                                       "file)")),
    ("{name}:missing", "'{name}' has no 'missing'"),
    ("{name}:VALUE", "{name}:VALUE is a int, not a function"),
    ("{name}:needs_argument", "{name}:needs_argument must take no arguments: it takes (n)"),
    ("{name}:not_a_dataset", "{name}:not_a_dataset returned a int, not a feedline Dataset"),
    ("{folder}/absent.py:pipeline", "no such file: {folder}/absent.py"),
])
def test_a_bad_target_is_a_one_line_error(pipelines, monkeypatch, capsys, target, message):
    path, name = pipelines
    monkeypatch.chdir(path.parent)
    fields = {"name": name, "folder": path.parent}
    assert main(["profile", target.format(**fields)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"feedline profile: error: {message.format(**fields)}\n"


def test_an_error_in_the_users_code_keeps_its_traceback(pipelines):
    path, _ = pipelines
    with pytest.raises(RuntimeError, match="the user's pipeline is broken"):
        main(["profile", f"{path}:broken"])


def test_seconds_must_be_positive(capsys):
    for bad in ("0", "-1", "inf", "soon"):
        with pytest.raises(SystemExit) as exit_:
            main(["profile", "x:y", "--seconds", bad])
        assert exit_.value.code == 2
    assert "argument --seconds: must be a positive number of seconds, got 0" in \
        capsys.readouterr().err


def test_the_command_exits_2_with_one_line(tmp_path):
    # The real entry point, in a process of its own: exit status and stderr as a shell sees.
    done = subprocess.run([sys.executable, "-m", "feedline.cli.main", "profile",
                           "no_such_module_for_feedline:pipeline"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        ("feedline profile: error: no module named 'no_such_module_for_feedline' (give a module "
         "importable from here, or the path of a .py file)")]
