"""The error of a CSV record that does not match the columns."""

from __future__ import annotations

from feedline.core.errors import FeedlineError


class CsvError(FeedlineError, ValueError):
    """A CSV record that does not match the columns.

    Attributes:
        path: The file.
        line: The line (from 1) the record starts on.
        record_index: Index of the record within the file (from 0, header excluded).
        column: The column (from 0) at fault, ``None`` when the whole record is.

    Example:
        >>> import feedline as fl, fsspec
        >>> fsspec.filesystem("memory").pipe("/doc/csv/bad.csv", b"1\\nx\\n")
        >>> try:
        ...     list(fl.CsvDataset("memory://doc/csv/bad.csv", [0]))
        ... except CsvError as error:
        ...     print(error.line, error.column, error.record_index)
        2 0 1
    """

    def __init__(self, message: str, *, path: str, line: int, record_index: int,
                 column: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.record_index = record_index
        self.column = column
