"""Fixtures of the tuner's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _gil_rules(monkeypatch):
    """The tuner's rules as under the GIL, on any interpreter: these tests expect the GIL
    build's thread budget and serial calls (a free-threaded interpreter counts cores only;
    tests/placement/test_placement_decisions.py tests both)."""
    from feedline.autotune import stage, stage_knobs, start
    from feedline.placement import policy

    for module in (policy, stage, start, stage_knobs):
        monkeypatch.setattr(module, "gil_disabled", lambda: False)
