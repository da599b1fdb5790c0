"""``CsvDataset``: typed columns of CSV records, and the cursor that reads one file."""

from __future__ import annotations

import csv as pycsv
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from feedline.core.structure import TensorSpec
from feedline.formats._file_reader import (
    ChunkedReader,
    FileReaderDataset,
    RecordCursor,
    check_buffer_size,
)
from feedline.formats.csv.columns import (
    _REQUIRED,
    _column,
    _indices,
    _parser,
    _show,
    _single_byte,
    _type_name,
)
from feedline.formats.csv.errors import CsvError
from feedline.formats.csv.records import _Records
from feedline.formats.files import compression_name

#: Bytes read from a file at a time unless ``buffer_size`` says otherwise (tf.data's 4 MiB).
DEFAULT_BUFFER_SIZE = 4 << 20


class CsvDataset(FileReaderDataset):
    """One tuple per CSV record, with one typed scalar per selected column (tf.data's
    ``CsvDataset``).

    Args:
        filenames: A path or fsspec URL, a list of them, or a :class:`~feedline.Dataset` of
            them.
        record_defaults: One entry per output column. A dtype (``np.int32``, ``np.int64``,
            ``np.float32``, ``np.float64``, ``bytes``/``str``/``object`` for strings) makes
            the column required: an empty field is an error. A value makes it optional with
            that default: ``int`` is int32 (int64 if it does not fit), ``float`` float32,
            ``str``/``bytes`` a string, a NumPy scalar keeps its dtype; a one-element list
            or array holds the default, an empty one (with its dtype) marks a required column.
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.
        buffer_size: Bytes read at a time (default 4 MiB).
        header: Whether each file starts with a header record to skip. An empty file then
            has no header, which is an error (as in tf.data).
        field_delim: The one-character field delimiter.
        use_quote_delim: ``False`` treats ``"`` as an ordinary character.
        na_value: A field equal to this (or empty) takes the column's default.
        select_cols: Sorted column indices to read (one per ``record_defaults`` entry);
            the records may have more columns after the last one selected.
        exclude_cols: Sorted column indices to drop; every other column is read.
        num_parallel_reads: ``None`` reads the files one after the other; ``n`` (or
            ``AUTOTUNE``) reads ``n`` at once and interleaves their records, as tf.data's
            readers do (tf.data's ``CsvDataset`` has no such argument).

    Elements: int columns as ``np.int32``/``np.int64`` scalars, float columns as
    ``np.float32``/``np.float64``, string columns as ``bytes``. Empty lines are records with
    one empty field (as in tf.data). A record whose fields do not match raises
    :class:`CsvError` naming the file, line, record and column; the next ``next()`` goes on
    with the next record. Known differences from tf.data's own parser: a quote inside an
    unquoted field (``a"b``) is an ordinary character. Fields may be of any size, as in tf.data
    (beyond ``csv.field_size_limit()`` too, without changing it for the rest of the process).

    Checkpoints store the file index, the byte offset of the next record, and the line and
    record counts; a compressed file is decoded again up to the offset on restore.

    Example:
        >>> import feedline as fl, fsspec, numpy as np
        >>> fsspec.filesystem("memory").pipe("/doc/csv/a.csv", b'x,n\\n"a,b",1\\nc,\\n')
        >>> ds = fl.CsvDataset("memory://doc/csv/a.csv", [b"", -1], header=True)
        >>> list(ds)
        [(b'a,b', np.int32(1)), (b'c', np.int32(-1))]
    """

    READER: ClassVar[str] = "CsvDataset"

    def __init__(self, filenames: Any, record_defaults: Sequence[Any],
                 compression_type: str | None = None, buffer_size: int | None = None,
                 header: bool = False, field_delim: str = ",", use_quote_delim: bool = True,
                 na_value: str = "", select_cols: Sequence[int] | None = None,
                 exclude_cols: Sequence[int] | None = None,
                 num_parallel_reads: int | None = None) -> None:
        if isinstance(record_defaults, str | bytes) or not isinstance(record_defaults,
                                                                      Sequence):
            raise TypeError("CsvDataset: record_defaults must be a list with one entry per "
                            f"column; found {type(record_defaults).__name__}")
        if not record_defaults:
            raise ValueError("CsvDataset: record_defaults must name at least one column")
        self.record_defaults = list(record_defaults)
        self._columns = [_column(spec, i) for i, spec in enumerate(self.record_defaults)]
        self.compression_type = compression_name(compression_type)
        self.buffer_size = check_buffer_size(buffer_size, DEFAULT_BUFFER_SIZE, self.READER)
        self.header = bool(header)
        self.field_delim = _single_byte(field_delim, "field_delim")
        self.use_quote_delim = bool(use_quote_delim)
        na = na_value.encode() if isinstance(na_value, str) else na_value
        if not isinstance(na, bytes):
            raise TypeError(f"CsvDataset: na_value must be a string; found {na_value!r}")
        self.na_value = na.decode("latin-1")
        self.select_cols = _indices(select_cols, "select_cols")
        self.exclude_cols = _indices(exclude_cols, "exclude_cols")
        if self.select_cols is not None and self.exclude_cols is not None:
            raise ValueError("CsvDataset: give select_cols or exclude_cols, not both")
        if self.select_cols is not None and len(self.select_cols) != len(self._columns):
            raise ValueError(f"CsvDataset: select_cols has {len(self.select_cols)} columns but "
                             f"record_defaults has {len(self._columns)}; they must match")
        self._setup(filenames, num_parallel_reads, {
            "record_defaults": self.record_defaults, "compression_type": self.compression_type,
            "buffer_size": self.buffer_size, "header": self.header,
            "field_delim": self.field_delim.encode("latin-1"),
            "use_quote_delim": self.use_quote_delim, "na_value": na,
            "select_cols": self.select_cols, "exclude_cols": self.exclude_cols})

    def _element_spec(self) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec((), dtype) for dtype, _ in self._columns)

    @property
    def _start(self) -> dict[str, Any]:
        return {"offset": 0, "line": 0, "record": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _CsvCursor(self, path, position)


class _CsvCursor(RecordCursor):
    def __init__(self, node: CsvDataset, path: str, position: dict[str, Any]) -> None:
        self._path = path
        self._na = node.na_value
        self._num_out = len(node._columns)
        self._select = node.select_cols
        self._exclude = frozenset(node.exclude_cols or ())
        self._included: dict[int, list[int]] = {}
        self._converters = [(dtype, default, _parser(dtype)) for dtype, default in node._columns]
        self._offset = position["offset"]
        self._line = position["line"]
        self._record = position["record"]
        self._reader = ChunkedReader(path, node.compression_type, node.buffer_size,
                                     self._offset)
        self._rows = _Records(
            self._lines, delimiter=node.field_delim, quotechar='"', doublequote=True,
            quoting=pycsv.QUOTE_MINIMAL if node.use_quote_delim else pycsv.QUOTE_NONE,
            skipinitialspace=False, strict=True)
        if node.header and self._offset == 0:
            try:
                next(self._rows)
            except StopIteration:
                self._reader.close()
                raise CsvError(f"CsvDataset: {path}: cannot read the header: the file is empty",
                               path=path, line=1, record_index=0) from None
            except pycsv.Error as error:
                self._reader.close()
                raise CsvError(f"CsvDataset: {path}: line 1: cannot read the header: {error}",
                               path=path, line=1, record_index=0) from None

    def _lines(self, pending: list[str]) -> Iterator[str]:
        """The file's lines as ``str`` (latin-1, so every byte round-trips), one record
        separator each: a lone ``\\r`` ends a line too, as it ends a record in tf.data.
        Each is appended to ``pending`` as well (see :class:`_Records`)."""
        reader = self._reader
        keep = pending.append
        while True:
            raw = reader.read_line()
            if not raw:
                return
            pieces = raw.splitlines(keepends=True) if b"\r" in raw[:-1] else (raw,)
            for piece in pieces:
                self._line += 1
                self._offset += len(piece)
                text = piece.decode("latin-1")
                keep(text)
                yield text

    def _error(self, message: str, line: int, column: int | None = None) -> CsvError:
        where = f"line {line}" + (f", column {column}" if column is not None else "")
        return CsvError(f"CsvDataset: {self._path}: {where} (record {self._record}): {message}",
                        path=self._path, line=line, record_index=self._record, column=column)

    def _columns_of(self, n: int, line: int) -> Sequence[int]:
        if self._select is not None:
            if n <= self._select[-1]:
                found = sum(1 for c in self._select if c < n)
                raise self._error(f"expected {self._num_out} fields (select_cols reads column "
                                  f"{self._select[-1]}) but the record has {n} "
                                  f"({found} selected)", line)
            return self._select
        if not self._exclude:
            if n != self._num_out:
                raise self._error(f"expected {self._num_out} fields but found {n}", line)
            return range(n)
        included = self._included.get(n)
        if included is None:
            included = self._included[n] = [c for c in range(n) if c not in self._exclude]
        if len(included) != self._num_out:
            raise self._error(f"expected {self._num_out} fields besides the excluded columns "
                              f"but found {len(included)} (of {n})", line)
        return included

    def read(self) -> tuple[Any, ...]:
        self.recoverable = False
        line = self._line + 1
        try:
            row = next(self._rows)
        except pycsv.Error as error:
            # The csv reader starts afresh at the next line: the file can go on.
            self.recoverable = True
            error = self._error(str(error), line)
            self._record += 1
            raise error from None
        try:
            return self._convert(row or [""], line)
        except CsvError:
            self.recoverable = True
            raise
        finally:
            self._record += 1

    def _convert(self, row: list[str], line: int) -> tuple[Any, ...]:
        values = []
        na = self._na
        for column, (dtype, default, parse) in zip(self._columns_of(len(row), line),
                                                   self._converters):
            field = row[column]
            if field == "" or field == na:
                if default is _REQUIRED:
                    raise self._error(f"the field is {'empty' if field == '' else 'the NA value'}"
                                      f" but the column ({_type_name(dtype)}) is required",
                                      line, column)
                values.append(default)
                continue
            try:
                values.append(parse(field))
            except (ValueError, OverflowError):
                raise self._error(f"{_show(field)} is not a valid {_type_name(dtype)}",
                                  line, column) from None
        return tuple(values)

    def position(self) -> dict[str, Any]:
        return {"offset": self._offset, "line": self._line, "record": self._record}

    def close(self) -> None:
        self._reader.close()


class _SkippingCsvDataset(CsvDataset):
    """A CsvDataset that drops the records (and files) it cannot read, for
    ``make_csv_dataset(ignore_errors=True)`` (tf.data applies ``ignore_errors`` per file)."""

    SKIP_ERRORS: ClassVar[bool] = True
