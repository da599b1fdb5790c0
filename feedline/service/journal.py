"""The dispatcher's journal: what it decided, on disk, so that a restarted dispatcher goes on.

One JSON object per line, appended and flushed to the OS before the decision is answered
(``fsync`` too, so that a machine crash keeps it as well). A dispatcher that restarts (Ray
restarts its actor) replays the lines in order and is back where it was. A last line cut
short by the crash is ignored; a damaged line anywhere else is an error naming the file and
the line: silently skipping it could hand out a split twice. The cut line is removed from
the file before anything is appended after it.

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

    def replay(self) -> Iterator[dict[str, Any]]:
        """The events appended so far, oldest first."""
        if not self._path.exists():
            return
        data = self._path.read_bytes()
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as error:
                if number == len(lines):  # the last line, cut short by a crash: drop it,
                    # or the next event would be appended to it and damage both
                    with open(self._path, "r+b") as file:
                        file.truncate(data.rfind(b"\n") + 1)
                    return
                raise ServiceError(f"{self._path}: line {number} is not a journal event "
                                   f"({error}); the dispatcher cannot recover its state") from None
            yield event

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
