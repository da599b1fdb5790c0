"""The dispatcher's journal: what it decided, on disk, so that a restarted dispatcher goes on.

One JSON object per line, appended and flushed to the OS before the decision is answered
(``fsync`` too, so that a machine crash keeps it as well). A dispatcher that restarts (Ray
restarts its actor) replays the lines in order and is back where it was. A last line cut
short by the crash is ignored; a damaged line anywhere else (not JSON, or not an object
with an ``"op"``) is an error naming the file and the line: silently skipping it could hand
out a split twice. The cut line is removed from the file before anything is appended after
it. What each event must hold is checked where it is applied
(:class:`~feedline.service.jobs.JobTable`), which names the file and line as well.

Job payloads (the pickled pipeline) are not journaled: consumers hand them to workers.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from feedline.core.errors import ServiceError

JOURNAL_FILE = "journal.jsonl"


class Journal:
    """An append-only log of JSON events in ``directory``.

    Args:
        directory: Created if missing.

    Example:
        >>> import tempfile
        >>> journal = Journal(tempfile.mkdtemp())
        >>> journal.append({"op": "done", "split": 3})
        >>> list(Journal(journal.directory).replay())
        [{'op': 'done', 'split': 3}]
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path = self.directory / JOURNAL_FILE
        self._lock = threading.Lock()
        self._file: Any = None

    @property
    def path(self) -> Path:
        """The journal's file."""
        return self._path

    def replay(self) -> Iterator[dict[str, Any]]:
        """The events appended so far, oldest first."""
        for _, event in self.entries():
            yield event

    def entries(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """The events appended so far, oldest first, each with its line number (from 1).

        Raises:
            ServiceError: A line other than a last one cut short is not JSON, or any line
                is not a JSON object with a string ``"op"`` (message: the file, the line,
                what was expected).
        """
        if not self._path.exists():
            return
        data = self._path.read_bytes()
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError) as error:  # RecursionError: [[[[... nested
                if number == len(lines):  # the last line, cut short by a crash: drop it,
                    # or the next event would be appended to it and damage both
                    with open(self._path, "r+b") as file:
                        file.truncate(data.rfind(b"\n") + 1)
                    return
                raise ServiceError(
                    f"{self._path}: line {number} is not a journal event (expected one JSON "
                    f"object per line: {error}); the dispatcher cannot recover its "
                    "state from this journal") from None
            if not isinstance(event, dict) or not isinstance(event.get("op"), str):
                raise ServiceError(
                    f"{self._path}: line {number} is not a journal event (expected a JSON "
                    f"object with a string \"op\", got {_preview(line)}); the dispatcher "
                    "cannot recover its state from this journal")
            yield number, event

    def append(self, event: dict[str, Any]) -> None:
        """Write ``event`` and make it durable before returning."""
        line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            if self._file is None:
                self._file = open(self._path, "ab")  # noqa: SIM115 (kept open: one per journal)
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file (appending again reopens it)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _preview(line: bytes, limit: int = 60) -> str:
    """The start of a journal line, for an error message."""
    text = line.decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")
