"""Fixtures of the tuner's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _gil_rules(gil_build_rules):
    """These tests give figures and expect the GIL build's decisions, on any interpreter."""
