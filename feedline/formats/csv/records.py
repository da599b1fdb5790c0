"""Records as :mod:`csv` splits them, with fields over ``csv.field_size_limit()`` too."""

from __future__ import annotations

import contextlib
import csv as pycsv
import itertools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

# csv.field_size_limit() is one value for the whole process. It is raised only while a record
# with a field over it is read again, and put back when the last such reader is done.
_limit_lock = threading.Lock()
_limit_users = 0
_limit_saved = 0


@contextlib.contextmanager
def _unlimited_fields() -> Iterator[None]:
    """Lift ``csv.field_size_limit()`` (as far as a C ``long`` goes) inside the block."""
    global _limit_users, _limit_saved
    with _limit_lock:
        if _limit_users == 0:
            try:
                _limit_saved = pycsv.field_size_limit(sys.maxsize)
            except OverflowError:  # a C long of 32 bits (Windows)
                _limit_saved = pycsv.field_size_limit(2**31 - 1)
        _limit_users += 1
    try:
        yield
    finally:
        with _limit_lock:
            _limit_users -= 1
            if _limit_users == 0:
                pycsv.field_size_limit(_limit_saved)


def _field_limit() -> int:
    """``csv.field_size_limit()`` as the process has it outside :func:`_unlimited_fields`.

    Another thread may be inside that block right now: the limit then reads as lifted, but a
    record this thread parsed a moment before may have failed under the normal one.
    """
    with _limit_lock:
        return _limit_saved if _limit_users else pycsv.field_size_limit()


class _Records:
    """The records of ``lines`` as ``csv.reader`` splits them, without its field size limit.

    tf.data reads fields of any size, but :mod:`csv` rejects a field longer than
    ``csv.field_size_limit()`` (128 KiB by default). That limit is global to the process, so
    lifting it for good would change it for every other user of :mod:`csv`. Instead, the
    lines of the current record are kept, and a record that fails while holding more
    characters than the limit is parsed again from them (then from the lines that follow)
    with the limit lifted, only for as long as that record takes. Records within the limit
    cost one list append per line.

    Args:
        lines: ``lines(pending)`` yields the lines of the file and appends each one to
            ``pending`` as it yields it (in the reader's own line loop: a generator layer
            of its own would slow every record down by a few percent).
        **dialect: The arguments of :func:`csv.reader`.

    Example:
        >>> def lines(pending):
        ...     for line in ["a," + "x" * 200_000 + "\\n", "b,c\\n"]:
        ...         pending.append(line)
        ...         yield line
        >>> [[len(field) for field in row] for row in _Records(lines, delimiter=",")]
        [[1, 200000], [1, 1]]
    """

    def __init__(self, lines: Callable[[list[str]], Iterator[str]], **dialect: Any) -> None:
        self._pending: list[str] = []  # the lines read since the current record began
        self._lines = lines(self._pending)
        self._dialect = dialect
        self._reader = pycsv.reader(self._lines, **dialect)

    def __iter__(self) -> _Records:
        return self

    def __next__(self) -> list[str]:
        pending = self._pending
        pending.clear()
        try:
            return next(self._reader)
        except pycsv.Error:
            # Too few characters for a field over the limit: a genuine error.
            if sum(map(len, pending)) <= _field_limit():
                raise
        # (csv.reader starts a new record at its next call after an error, so self._reader
        # goes on after this record.)
        replay = pycsv.reader(itertools.chain(list(pending), self._lines), **self._dialect)
        with _unlimited_fields():
            return next(replay)
