"""The C allocator's thresholds for a process that runs pipelines (glibc only).

glibc gives memory freed at the top of its heap back to the kernel once more than
``M_TRIM_THRESHOLD`` (128 KiB) is free there, and serves blocks from 128 KiB up with fresh
``mmap`` s, until a freed ``mmap`` block makes it raise both thresholds (up to 32 MiB and
64 MiB). A pipeline of records smaller than 128 KiB never triggers that adjustment, yet frees
and allocates megabytes per batch: each batch's records were returned to the kernel and
faulted back in, page by page (on the images workload's 49 kB JPEG records, half the
feeder's CPU: benchmarks/RESULTS-images.md).

:func:`configure` sets what glibc's own adjustment converges to (``M_MMAP_THRESHOLD`` 32 MiB,
``M_TRIM_THRESHOLD`` 64 MiB) once per process, when its first pipeline starts and in every
worker process. The price is memory kept rather than returned: up to 64 MiB freed at the
top of each malloc arena stays with the process, as it does under glibc's own adjustment once
the process has freed one large block (common where tensors are batched). It leaves the
allocator alone where the user configured it
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``, or malloc
tunables in ``GLIBC_TUNABLES``), with ``FEEDLINE_MALLOC_TUNING=0``, and on other C libraries.

The memory kept is the pipelines' to use while they run, not the training process's to carry
after: when the last pipeline of a process closes (:func:`pipeline_ended`) after pipelines
ran for :data:`GIVE_BACK_AFTER_SECONDS` or more, what the thresholds kept is given back
(``malloc_trim``), so a process that builds and closes many pipelines ends where it started
(``benchmarks/malloc_tuning.py`` measures both sides). A trim gives back the whole process's
free memory, the training loop's too, which the loop then faults back in: short pipelines
(``list(small_ds)`` in every step) hold little and do not trim.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

MMAP_THRESHOLD = 32 << 20
"""Blocks from this size up get their own mapping (glibc's dynamic maximum on 64-bit)."""
TRIM_THRESHOLD = 64 << 20
"""Free memory at the heap's top kept from the kernel (twice the mmap threshold, as glibc's
dynamic adjustment sets it)."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_lock = threading.Lock()
_outcome: str | None = None
_open_pipelines = 0
_open_since = 0.0  # when the first of the pipelines open now started

GIVE_BACK_AFTER_SECONDS = 1.0
"""Pipelines open together at least this long give back what was kept when the last closes
(a trim costs the process's other users of freed memory page faults: 0.4 s a step was
measured for a loop reusing 300 MiB and closing a small pipeline each step)."""


def configure() -> str:
    """Set the thresholds once in this process; returns what was done (the same string on
    every later call).

    Example:
        >>> configure() in ("configured", "not glibc", "configured by the user",
        ...                 "off (FEEDLINE_MALLOC_TUNING=0)", "mallopt failed")
        True
    """
    global _outcome
    with _lock:
        if _outcome is None:
            _outcome = _configure()
        return _outcome


def _configure() -> str:
    if os.environ.get("FEEDLINE_MALLOC_TUNING", "1") == "0":
        return "off (FEEDLINE_MALLOC_TUNING=0)"
    if any(name in os.environ for name in _USER_SETTINGS) \
            or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "configured by the user"
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):  # not a GNU system (Windows: no confstr)
        libc = ""
    if not libc.startswith("glibc"):
        return "not glibc"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "not glibc"
    # mallopt returns 1 on success. The mmap threshold first: setting either turns glibc's
    # dynamic adjustment off, and the pair must stay consistent.
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 \
            or mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "mallopt failed"
    return "configured"


def pipeline_started() -> None:
    """A pipeline starts in this process: configure the allocator (once) and count it.

    Example:
        >>> pipeline_started(); pipeline_ended()
    """
    global _open_pipelines, _open_since
    configure()
    with _lock:
        if _open_pipelines == 0:
            _open_since = time.monotonic()
        _open_pipelines += 1


def pipeline_ended() -> None:
    """A pipeline of this process closed: once none is open, give back to the kernel the
    free memory the thresholds kept (what a pipeline's batches freed)."""
    global _open_pipelines
    with _lock:
        _open_pipelines = max(0, _open_pipelines - 1)
        last = _open_pipelines == 0 and _outcome == "configured" \
            and time.monotonic() - _open_since >= GIVE_BACK_AFTER_SECONDS
    if last:
        _give_back()


def _give_back() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)  # ctypes releases the GIL for the call
    except (OSError, AttributeError):
        pass  # configured means glibc, which has it; nothing to give back otherwise
