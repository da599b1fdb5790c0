"""Fuzzing ``fl.Dataset.load`` of damaged saved datasets: no crash, no hang, no raw error,
memory bounded, and never other data read back without an error."""

from __future__ import annotations

import pytest
from fuzz_harness import assert_clean, fuzz_count


@pytest.mark.timeout(900)
@pytest.mark.parametrize("target", ["saved_bytes", "saved_structured"])
@pytest.mark.slow
def test_load_survives_a_damaged_save(target, tmp_path):
    # A save per input is slower than one file: a shorter default run than the harness's.
    report = assert_clean("targets_snapshot", target, tmp_path, seed=7, count=fuzz_count(80))
    assert report.errors > 0  # the mutations did damage what they read
