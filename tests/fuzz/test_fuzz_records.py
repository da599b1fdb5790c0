"""Fuzzing the record readers: no crash, no hang, no raw error, memory bounded."""

from __future__ import annotations

import pytest
from fuzz_harness import assert_clean


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", ["tfrecord"])
def test_reader_survives_damaged_input(target, tmp_path):
    report = assert_clean("targets_records", target, tmp_path, seed=1)
    assert report.errors > 0  # the mutations did damage what they read
