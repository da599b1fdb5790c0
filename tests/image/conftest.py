"""The image tests' collection: the record_*.py scripts run under TensorFlow's interpreter only
(they write the golden files), so pytest's doctest collection must not import them. Every
image test starts from feedline.image's default decode limits."""

from __future__ import annotations

import os

import pytest

collect_ignore_glob = ["record_*.py"]


@pytest.fixture(autouse=True)
def _default_decode_limits():
    # The limits live in the environment: each test starts from the defaults and leaves the
    # environment as it found it (monkeypatch.delenv would not undo a variable set later).
    names = ("FEEDLINE_IMAGE_MAX_PIXELS", "FEEDLINE_IMAGE_MAX_ANIMATION_BYTES")
    saved = {name: os.environ.pop(name, None) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
