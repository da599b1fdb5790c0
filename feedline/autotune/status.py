"""The live status line: what the pipeline delivers and what AUTOTUNE has set, in one line.

``Options(autotune=AutotuneOptions(status_seconds=10))`` writes, every 10 seconds of a
training loop, a line such as::

    feedline: 12,480 elements/s, consumer waited 3% | threads | map(parse)=6

the rate and the share of wall time the consumer spent waiting in ``next()`` since the last
line, where the pipeline runs (threads, a feeder process, or worker processes), and, on
threads, each tuned stage's current setting (threads working at once). The line is written by the
consumer's own ``next()`` once the interval has passed (no thread of its own), to standard
error: overwritten in place on a terminal, one line each time otherwise.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any


class LiveStatus:
    """Counts what the consumer receives, and writes the status line when it is due.

    Args:
        seconds: Seconds between two lines.
        ctx: The pipeline's iterator context (its tuner, once one is made).
        root: The pipeline's root iterator (its placement decision, if it has one).
        stream: Where the line goes (default: standard error).
        clock: The clock (tests give their own).

    Example:
        >>> import io, feedline as fl
        >>> out = io.StringIO()
        >>> status = LiveStatus(10.0, None, None, stream=out, clock=iter([0, 4, 10]).__next__)
        >>> status.took(0.5); status.took(0.5)
        >>> status.line()
        'feedline: 0.2 elements/s, consumer waited 10% | threads'
        >>> out.getvalue()
        'feedline: 0.2 elements/s, consumer waited 10% | threads\\n'
    """

    def __init__(self, seconds: float, ctx: Any, root: Any, stream: IO[str] | None = None,
                 clock: Any = time.perf_counter) -> None:
        self._seconds = seconds
        self._ctx = ctx
        self._root = root
        self._stream = stream
        self._clock = clock
        self._since = clock()
        self._due = self._since + seconds
        self._elements = 0
        self._waited = 0.0
        self._last = ""

    def took(self, waited: float) -> None:
        """The consumer received an element after waiting ``waited`` seconds for it."""
        self._elements += 1
        self._waited += waited
        now = self._clock()
        if now >= self._due:
            self._write(now)

    def line(self) -> str:
        """The last line written (empty before the first)."""
        return self._last

    def _write(self, now: float) -> None:
        elapsed = max(now - self._since, 1e-9)
        rate = self._elements / elapsed
        parts = [f"feedline: {rate:,.0f} elements/s" if rate >= 10 else
                 f"feedline: {rate:.1f} elements/s",
                 f"consumer waited {self._waited / elapsed:.0%}"]
        knobs = [self._placement()]
        tuner = getattr(self._ctx, "tuner", None)
        # In processes, the tuned stages run there: this process's tuner only tuned the
        # trial on threads, whose settings no longer apply.
        if tuner is not None and knobs == ["threads"]:
            knobs += [f"{name}={workers}" for name, workers in tuner.settings().items()]
        self._last = ", ".join(parts) + " | " + " ".join(knobs)
        stream = self._stream if self._stream is not None else sys.stderr
        if stream.isatty():
            stream.write("\r" + self._last + "\x1b[K")
        else:
            stream.write(self._last + "\n")
        stream.flush()
        self._since, self._due = now, now + self._seconds
        self._elements, self._waited = 0, 0.0

    def _placement(self) -> str:
        decision = getattr(self._root, "decision", None)
        if decision is None or decision.mode == "threads":
            return "threads"
        if decision.mode == "feeder":
            return "feeder process"
        return f"{decision.workers} worker processes"
