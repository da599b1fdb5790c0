"""The allocator tuning leaves a system without ``os.confstr`` (not glibc) alone."""

from __future__ import annotations

import os

from feedline.execution import allocator


def test_the_allocator_leaves_a_system_without_confstr_alone(monkeypatch):
    # os.confstr does not exist on Windows: configure() (called by every pipeline's
    # iterator) raised AttributeError there instead of leaving the allocator alone.
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                 "GLIBC_TUNABLES", "FEEDLINE_MALLOC_TUNING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delattr(os, "confstr", raising=False)
    assert allocator._configure() == "not glibc"
