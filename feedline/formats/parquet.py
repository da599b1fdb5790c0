"""``ParquetDataset``: the row groups of Parquet files as batches of NumPy columns.

pyarrow is an optional dependency (``pip install feedline[parquet]``), imported only when a
``ParquetDataset`` is created.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from feedline.core.errors import DataLossError, InvalidArgumentError
from feedline.core.validation import validate_optional_int
from feedline.formats._file_reader import FileReaderDataset, RecordCursor
from feedline.formats.files import open_file

__all__ = ["ParquetDataset"]


def _pyarrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or an ImportError that says how to install them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as error:
        raise ImportError("ParquetDataset needs pyarrow, an optional dependency of feedline: "
                          "pip install feedline[parquet]") from error
    return pyarrow, pyarrow.parquet


def _column_to_numpy(pa: Any, column: Any) -> np.ndarray:
    """One column as a NumPy array; strings and binaries as object arrays of ``bytes``."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
        kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) \
            or getattr(pa.types, "is_string_view", lambda _: False)(kind):
        column = column.cast(pa.large_binary())
    return column.to_numpy(zero_copy_only=False)


class ParquetDataset(FileReaderDataset):
    """One element per row group (or per ``batch_size`` rows) of the Parquet files: a dict
    mapping each column name to a NumPy array of that many rows.

    Args:
        filenames: A path or fsspec URL, a list of them, or a :class:`~feedline.Dataset` of
            them.
        columns: The columns to read, in this order (default: every column, in file order).
            A column missing from a file is an error naming the file.
        batch_size: ``None`` yields each row group as it is stored (empty row groups are
            skipped); a number re-chunks the rows of each file into batches of that many
            rows (the last batch of a file may be smaller; batches never span files).

    Columns convert as pyarrow's ``to_numpy`` converts them, except that strings and binaries
    become object arrays of ``bytes`` (as every feedline reader gives text). Nulls follow
    pyarrow too: ``None`` in object columns, NaN in floats, and integer columns with nulls
    become float64.

    Checkpoints store the file index, the row group and the row offset within it.

    Example:
        >>> import feedline as fl, pyarrow as pa, pyarrow.parquet as pq, fsspec
        >>> table = pa.table({"x": [1, 2, 3], "s": ["a", "b", "c"]})
        >>> with fsspec.open("memory://doc/parquet/a.parquet", "wb") as f:
        ...     pq.write_table(table, f, row_group_size=2)
        >>> [batch["x"].tolist() for batch in fl.ParquetDataset("memory://doc/parquet/a.parquet")]
        [[1, 2], [3]]
        >>> next(iter(fl.ParquetDataset("memory://doc/parquet/a.parquet", ["s"], batch_size=3)))
        {'s': array([b'a', b'b', b'c'], dtype=object)}
    """

    READER: ClassVar[str] = "ParquetDataset"

    def __init__(self, filenames: Any, columns: Sequence[str] | None = None,
                 batch_size: int | None = None) -> None:
        _pyarrow()
        if isinstance(columns, str):
            raise TypeError("ParquetDataset: columns must be a list of column names, not a "
                            f"single string ({columns!r}); use [{columns!r}]")
        self.columns = None if columns is None else [str(c) for c in columns]
        self.batch_size = validate_optional_int(batch_size, "ParquetDataset(batch_size)",
                                                minimum=1, hint="None or a positive integer")
        self._setup(filenames, None, {})

    @property
    def _start(self) -> dict[str, Any]:
        return {"row_group": 0, "row": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _ParquetCursor(self, path, position)


class _ParquetCursor(RecordCursor):
    def __init__(self, node: ParquetDataset, path: str, position: dict[str, Any]) -> None:
        self._pa, pq = _pyarrow()
        self._path = path
        self._batch = node.batch_size
        self._group = position["row_group"]
        self._row = position["row"]
        self._table: Any = None  # the current row group, read
        self._file = open_file(path, "rb")
        try:
            self._parquet = pq.ParquetFile(self._file)
            names = self._parquet.schema_arrow.names
            self._columns = node.columns if node.columns is not None else list(names)
            missing = [c for c in self._columns if c not in names]
            if missing:
                raise InvalidArgumentError(f"ParquetDataset: {path} has no column(s) "
                                           f"{missing}; its columns are {names}", path=path)
            self._groups = self._parquet.num_row_groups
        except BaseException as error:
            self._file.close()
            if isinstance(error, self._errors):
                raise self._damage(error) from error
            raise

    @property
    def _errors(self) -> tuple[type[BaseException], ...]:
        # pyarrow raises plain OSError (no ArrowException) for an IO status, which is what
        # a damaged Thrift footer or page header gives, and UnicodeDecodeError for a column
        # name that is not UTF-8.
        return (self._pa.ArrowException, OSError, UnicodeDecodeError)

    def _damage(self, error: BaseException) -> DataLossError:
        where = "the footer" if not hasattr(self, "_groups") else f"row group {self._group}"
        text = str(error)
        text = text if len(text) <= 300 else text[:300] + "..."  # it may quote damaged bytes
        return DataLossError(f"ParquetDataset: cannot read {where} of {self._path}: {text}",
                             path=self._path, record_index=self._group)

    def _group_table(self) -> Any:
        if self._table is None:
            try:
                table = self._parquet.read_row_group(self._group, columns=self._columns)
                # Full validation before any conversion reads the buffers: cheap next to
                # decoding, and what stands between damaged offsets and a crash.
                table.validate(full=True)
            except self._errors as error:
                raise self._damage(error) from error
            self._table = table
        return self._table

    def _next_group(self) -> None:
        self._group += 1
        self._row = 0
        self._table = None

    def read(self) -> dict[str, np.ndarray]:
        pieces = []
        wanted = self._batch
        while self._group < self._groups:
            table = self._group_table()
            available = table.num_rows - self._row
            take = available if wanted is None else min(available, wanted)
            if take > 0:
                pieces.append(table.slice(self._row, take))
                self._row += take
            if self._row >= table.num_rows:
                self._next_group()
            if wanted is None:
                if pieces:
                    break
                continue
            wanted -= take
            if wanted == 0:
                break
        if not pieces:
            raise StopIteration
        try:
            table = pieces[0] if len(pieces) == 1 else self._pa.concat_tables(pieces)
            return {name: _column_to_numpy(self._pa, table.column(name))
                    for name in self._columns}
        except self._errors as error:
            raise self._damage(error) from error

    def position(self) -> dict[str, Any]:
        return {"row_group": self._group, "row": self._row}

    def close(self) -> None:
        self._table = None
        self._file.close()
