"""Helpers shared by the process executor's tests."""

from __future__ import annotations

import psutil


def worker_processes() -> list[psutil.Process]:
    """This test process's live workers of ``map(executor="process")``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(
                    "feedline.placement.process_executor" in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids, deadline: float) -> list[int]:
    """The pids still alive after up to ``deadline`` seconds of polling."""
    import time

    end = time.monotonic() + deadline
    while True:
        left = [pid for pid in pids if pid is not None and alive(pid)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def feedline_mappings() -> list[str]:
    """Shared-memory mappings of the transport still in this process (``memfd:feedline``)."""
    with open("/proc/self/maps") as maps:
        return [line for line in maps if "memfd:feedline" in line]
