"""Helpers shared by the process executor's tests."""

from __future__ import annotations

import psutil


def worker_processes() -> list[psutil.Process]:
    """This test process's live workers of ``map(executor="process")``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(
                    "feedline.execution.processes" in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found
