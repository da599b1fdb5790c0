"""Fixtures of the placement tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _gil_rules(gil_build_rules):
    """These tests give figures and expect the GIL build's decisions, on any interpreter."""


@pytest.fixture
def gil_bound_trial(gil_bound_trial, monkeypatch):
    """The root fixture's trial (one core busy of two), whose elements also cost this
    process more than receiving them from a worker would: the test pipelines' elements are
    cheap, and the trial stands for a GIL-bound one (see
    :data:`feedline.placement.policy.SHARDS_MIN_RECEIVE_GAIN`)."""
    from feedline.placement import policy

    monkeypatch.setattr(policy, "SHARDS_MIN_RECEIVE_GAIN", 0.0)
    return gil_bound_trial
