"""Fuzzing feedline.image's decoders: no crash, no hang, only feedline errors naming the
operation, peak memory within the decode limits' documented cap (targets_image.py)."""

from __future__ import annotations

import pytest
from fuzz_harness import assert_clean


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", ["jpeg", "png", "gif", "bmp", "webp", "image"])
@pytest.mark.slow
def test_decoder_survives_damaged_input(target, tmp_path):
    report = assert_clean("targets_image", target, tmp_path, seed=7)
    assert report.ok > 0 and report.errors > 0  # the corpus decodes; mutations damage it
