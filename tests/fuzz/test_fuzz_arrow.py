"""Fuzzing the Arrow and Parquet readers (HuggingFaceDataset, ParquetDataset): no crash, no
hang, no raw error, every error naming the file, memory under the targets' cap (512 MiB)."""

from __future__ import annotations

import pytest
from fuzz_harness import assert_clean, fuzz_count

pytest.importorskip("pyarrow")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("target", ["hf_arrow_stream", "hf_arrow_file", "hf_saved_folder",
                                    "parquet", "hf_parquet"])
@pytest.mark.slow
def test_reader_survives_damaged_input(target, tmp_path):
    report = assert_clean("targets_arrow", target, tmp_path, seed=41, count=fuzz_count(100))
    assert report.errors > 0  # the mutations did damage what they read
