"""benchmarks.serial_path: its stages read the same elements as the plain pipeline, its trainer
loop runs every placement, and its tables."""

from __future__ import annotations

import pytest

from benchmarks import data, serial_path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    # Enough for three warm-up reads of 512 and 1,500 measured records at every stage.
    return data.chess(4_000, 8, 5, cache=tmp_path_factory.mktemp("chess"))["files"]


def test_each_stage_is_measured_on_what_the_next_stage_reads(files):
    rows = serial_path.measure_stages(files, 1_500)
    assert [r["stage"] for r in rows] == ["TFRecordDataset(files)", "interleave(…, 2, AUTOTUNE)",
                                         "shuffle(10000)", "batch(512)"]
    assert all(r["us_per_record"] > 0 for r in rows)
    assert sum(r["added_us"] for r in rows) == pytest.approx(rows[-1]["us_per_record"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("placement", serial_path.PLACEMENTS)
def test_the_trainer_loop_runs_under_every_placement(files, placement):
    row = serial_path.feed_trainer(files, placement, gil_ms=0.1, sleep_ms=0.1, batches=4)
    assert row["placement"] == placement and row["examples_per_s"] > 0
    assert 0 <= row["waited_share"] <= 1
    assert row["second_half"]["examples_per_s"] > 0 and 0 <= row["second_half"]["waited_share"] <= 1
    assert row["chosen"] in ("threads", "feeder")  # a pipeline ending in prefetch(AUTOTUNE)


def test_markdown_has_both_tables():
    text = serial_path.markdown({
        "stages": [{"stage": "TFRecordDataset(files)", "us_per_record": 0.15, "added_us": 0.15}],
        "trainer": {"gil_ms": 1.5, "sleep_ms": 6.5, "rows": [
            {"placement": "feeder", "examples_per_s": 60835.2, "waited_share": 0.036,
             "consumer_ms_per_batch": 0.31},
            {"placement": "default", "chosen": "feeder", "examples_per_s": 61162.0,
             "waited_share": 0.027, "consumer_ms_per_batch": 1.33,
             "second_half": {"examples_per_s": 61088.0, "waited_share": 0.029,
                             "consumer_ms_per_batch": 0.27}}]}})
    assert "| TFRecordDataset(files) | 0.150 | +0.150 |" in text
    # A row without the second half's figures (older results) repeats the whole run's.
    assert "| feeder | - | 60,835 | 3.6% | 0.31 ms | 60,835 | 3.6% | 0.31 ms |" in text
    assert "| default | feeder | 61,162 | 2.7% | 1.33 ms | 61,088 | 2.9% | 0.27 ms |" in text
    assert "trainer 1.5 ms GIL + 6.5 ms sleep" in text
