"""The live status line (``AutotuneOptions(status_seconds=...)``)."""

from __future__ import annotations

import io
import re
import time

import pytest

import feedline as fl
from feedline.autotune.status import LiveStatus


def test_the_line_gives_rate_wait_placement_and_tuned_settings_from_a_fake_clock():
    class Tuner:
        def settings(self):
            return {"map(parse)": 6, "map(augment)": 2}

    class Ctx:
        tuner = Tuner()

    out = io.StringIO()
    ticks = iter([0.0, 1.0, 2.0, 2.5, 4.0])
    status = LiveStatus(2.0, Ctx(), None, stream=out, clock=ticks.__next__)
    status.took(0.1)  # at 1.0: not due
    assert out.getvalue() == ""
    status.took(0.3)  # at 2.0: 2 elements in 2 s, 0.4 s of it waiting
    assert status.line() == ("feedline: 1.0 elements/s, consumer waited 20% | threads "
                             "map(parse)=6 map(augment)=2")
    status.took(0.0)  # at 2.5
    status.took(1.5)  # at 4.0: counts start again at each line
    assert out.getvalue().splitlines() == [
        "feedline: 1.0 elements/s, consumer waited 20% | threads map(parse)=6 map(augment)=2",
        "feedline: 1.0 elements/s, consumer waited 75% | threads map(parse)=6 map(augment)=2"]


def test_in_processes_the_line_names_them_and_not_the_trial_s_settings():
    class Decision:
        mode, workers = "processes", 2

    class Root:
        decision = Decision()

    class Ctx:
        class tuner:  # noqa: N801 - a stand-in object
            @staticmethod
            def settings():
                return {"map(f)": 4}

    out = io.StringIO()
    status = LiveStatus(1.0, Ctx(), Root(), stream=out, clock=iter([0.0, 30.0]).__next__)
    status.took(0.0)
    assert status.line() == "feedline: 0.0 elements/s, consumer waited 0% | 2 worker processes"
    Decision.mode = "feeder"
    ticks = iter([0.0] + [1.0] * 999 + [60.0])  # due at the 1000th element
    status = LiveStatus(60.0, Ctx(), Root(), stream=out, clock=ticks.__next__)
    for _ in range(1000):
        status.took(0.0)
    assert status.line().endswith("| feeder process")
    assert status.line() == "feedline: 17 elements/s, consumer waited 0% | feeder process"


@pytest.mark.timeout(60)
def test_a_pipeline_with_status_seconds_writes_lines_to_stderr(capsys):
    def slow(x):
        time.sleep(0.001)
        return x
    options = fl.Options(autotune=fl.AutotuneOptions(status_seconds=0.05, processes=False))
    ds = fl.Dataset.range(40).map(slow, num_parallel_calls=fl.AUTOTUNE).with_options(options)
    with iter(ds) as it:
        out = []
        for x in it:
            out.append(int(x))
            time.sleep(0.01)  # 0.4 s of iteration: several lines are due
    assert out == list(range(40))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2
    pattern = r"feedline: [\d,.]+ elements/s, consumer waited \d+% \| threads map\([\w.<>]*slow\)=\d+"
    assert all(re.fullmatch(pattern, line) for line in lines), lines


def test_status_seconds_must_be_positive():
    with pytest.raises(ValueError, match="status_seconds must be None or > 0"):
        fl.AutotuneOptions(status_seconds=0)
    with pytest.raises(TypeError, match="status_seconds"):
        fl.AutotuneOptions(status_seconds="10")
