"""CSV files: :class:`CsvDataset` (typed columns, tf.data's ``CsvDataset``) and
:func:`make_csv_dataset` (batched feature dicts with type inference, tf.data's
``make_csv_dataset``).

Records are split by Python's :mod:`csv` module in strict mode (RFC 4180 quoting, ``""``
inside quotes, quoted fields may hold the delimiter and line breaks). Files are read as bytes:
string fields come out as the exact bytes of the file, whatever their encoding.

Columns are counted from 0 (as ``select_cols`` counts them), lines from 1. Errors name the
file, the line the record starts on, the record index within the file and the column.
"""

from __future__ import annotations

import contextlib
import csv as pycsv
import itertools
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.errors import FeedlineError
from feedline.core.structure import TensorSpec
from feedline.core.validation import (
    as_int,
    validate_count,
    validate_int,
    validate_optional_int,
    validate_parallelism,
    validate_seed,
)
from feedline.formats._file_reader import (
    ChunkedReader,
    FileReaderDataset,
    RecordCursor,
    check_buffer_size,
)
from feedline.formats.files import compression_name, path_name

__all__ = ["CsvDataset", "CsvError", "make_csv_dataset"]

#: Bytes read from a file at a time unless ``buffer_size`` says otherwise (tf.data's 4 MiB).
DEFAULT_BUFFER_SIZE = 4 << 20

_REQUIRED = None  # the default of a column that must be present
_STRING = np.dtype(object)
_NUMERIC = tuple(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))
# tf.data parses integers with safe_strto32/64: optional spaces, an optional '-', digits.
_INTEGER = re.compile(r"\s*-?[0-9]+\s*\Z", re.ASCII)


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


def _type_name(dtype: np.dtype) -> str:
    return "string" if dtype == _STRING else dtype.name


def _column_dtype(spec: Any, where: str) -> np.dtype:
    if spec is int or spec is float or spec is bool:  # (np.dtype("int64") == int is True)
        raise TypeError(f"{where}: the Python type {spec.__name__} is ambiguous; use "
                        "np.int32, np.int64, np.float32, np.float64 or bytes")
    try:
        dtype = np.dtype(spec)
    except TypeError:
        raise TypeError(f"{where}: expected a dtype or a default value; found {spec!r}") \
            from None
    if dtype.kind in "SUO":
        return _STRING
    if dtype not in _NUMERIC:
        raise TypeError(f"{where}: CSV columns are int32, int64, float32, float64 or string; "
                        f"found {dtype.name}")
    return dtype


def _column(spec: Any, index: int) -> tuple[np.dtype, Any]:
    """``(dtype, default)`` of a ``record_defaults`` entry; default ``_REQUIRED`` if none.

    As in tf.data: a dtype means a required column; a value is the default, with Python
    ``int`` as int32 (int64 when it does not fit), ``float`` as float32, ``str``/``bytes`` as
    a string; a one-element list or array holds the default, an empty one a required column.
    """
    where = f"CsvDataset: record_defaults[{index}]"
    if isinstance(spec, type | np.dtype):
        return _column_dtype(spec, where), _REQUIRED
    if isinstance(spec, list | tuple):
        if len(spec) > 1:
            raise ValueError(f"{where}: there should be only one default per column; found "
                             f"{len(spec)}")
        # tf.constant([]) is an empty float32 tensor: a required float32 column.
        return _column(spec[0], index) if spec else (np.dtype(np.float32), _REQUIRED)
    if isinstance(spec, np.ndarray):
        if spec.ndim > 1 or spec.size > 1:
            raise ValueError(f"{where}: a default must be a scalar or have at most one "
                             f"element; found shape {spec.shape}")
        dtype = _column_dtype(spec.dtype, where)
        if spec.size == 0:
            return dtype, _REQUIRED
        spec = spec.reshape(()).item() if dtype == _STRING else spec.reshape(())[()]
    if isinstance(spec, str | np.str_):
        return _STRING, str(spec).encode()
    if isinstance(spec, bytes | np.bytes_):
        return _STRING, bytes(spec)
    if isinstance(spec, bool | np.bool_):
        raise TypeError(f"{where}: bool columns are not supported by CSV (found {spec!r})")
    if isinstance(spec, np.generic):
        dtype = _column_dtype(spec.dtype, where)
        return dtype, dtype.type(spec)
    if isinstance(spec, int):
        dtype = np.dtype(np.int32) if -2**31 <= spec < 2**31 else np.dtype(np.int64)
        return dtype, dtype.type(spec)
    if isinstance(spec, float):
        return np.dtype(np.float32), np.float32(spec)
    raise TypeError(f"{where}: expected a dtype or a default value (int, float, str, bytes, "
                    f"NumPy scalar); found {type(spec).__name__}")


# Finite doubles at least this large round to infinity as float32 (FLT_MAX + half an ulp).
_FLOAT32_OVERFLOW = 3.4028235677973366e38


def _parser(dtype: np.dtype) -> Any:
    """``text -> value`` for one column type; raises ValueError when the text is not one."""
    if dtype == _STRING:
        return lambda text: text.encode("latin-1")
    scalar = dtype.type
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        low, high, match = info.min, info.max, _INTEGER.match

        def parse_int(text: str) -> Any:
            if not match(text):
                raise ValueError
            value = int(text)
            if not low <= value <= high:
                raise ValueError
            return scalar(value)

        return parse_int

    def parse_float(text: str) -> Any:
        if "_" in text:  # Python's float() accepts "1_000"; tf.data does not
            raise ValueError
        value = float(text)
        if scalar is np.float32 and abs(value) >= _FLOAT32_OVERFLOW:  # (False for NaN)
            return scalar(np.inf if value > 0 else -np.inf)  # as tf.data, without a warning
        return scalar(value)

    return parse_float


def _single_byte(value: Any, name: str) -> str:
    raw = value.encode() if isinstance(value, str) else value
    if not isinstance(raw, bytes) or len(raw) != 1:
        raise ValueError(f"CsvDataset: {name} must be a single one-byte character; "
                         f"found {value!r}")
    return raw.decode("latin-1")


def _indices(values: Any, name: str) -> tuple[int, ...] | None:
    if values is None:
        return None
    items = values.reshape(-1).tolist() if isinstance(values, np.ndarray) else list(values)
    # One by one: np.asarray(..., dtype=np.int64) would silently truncate 1.5 and accept True.
    out = tuple(as_int(v, f"CsvDataset({name}[{i}])") for i, v in enumerate(items))
    if any(v < 0 for v in out):
        raise ValueError(f"CsvDataset: {name} must be non-negative column indices; found {out}")
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise ValueError(f"CsvDataset: {name} must be strictly increasing; found {out}")
    return out


def _show(field: str) -> str:
    return repr(field.encode("latin-1").decode("utf-8", "replace"))


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


# ---------------------------------------------------------------------------- make_csv_dataset
def _csv_rows(path: str, compression: str, delim: str, quoting: int) -> Any:
    """The records of one file as lists of ``str`` (UTF-8), for header and type inference."""
    reader = ChunkedReader(path, compression, DEFAULT_BUFFER_SIZE)
    try:
        def lines(pending: list[str]) -> Iterator[str]:
            while raw := reader.read_line():
                pieces = raw.splitlines(keepends=True) if b"\r" in raw[:-1] else (raw,)
                for piece in pieces:
                    text = piece.decode("utf-8", "replace")
                    pending.append(text)
                    yield text

        yield from _Records(lines, delimiter=delim, quotechar='"', quoting=quoting,
                            strict=True)
    finally:
        reader.close()


def _is_int(text: str, dtype: type) -> bool:
    try:
        # numpy, as tf.data's own inference does (an int32 that overflows is not an int32).
        return bool(dtype(text) == np.int64(text))
    except (ValueError, OverflowError):
        return False


def _is_float(text: str, dtype: type) -> bool:
    try:
        with np.errstate(over="ignore"):
            return bool(dtype(text) < np.inf)
    except ValueError:
        return False


_INFERENCE = [(np.dtype(np.int32), lambda s: _is_int(s, np.int32)),
              (np.dtype(np.int64), lambda s: _is_int(s, np.int64)),
              (np.dtype(np.float32), lambda s: _is_float(s, np.float32)),
              (np.dtype(np.float64), lambda s: _is_float(s, np.float64)),
              (_STRING, lambda s: True)]


def _infer_type(text: str, na_value: str, previous: np.dtype | None) -> np.dtype | None:
    """tf.data's rule: the least permissive type that fits this value and the ones before."""
    if text in ("", na_value):
        return previous
    order = [dtype for dtype, _ in _INFERENCE]
    for i, (dtype, fits) in enumerate(_INFERENCE):
        if (previous is None or previous in order[:i + 1]) and fits(text):
            return dtype
    return _STRING


class _ToFeatures:
    """``*columns -> {name: column}`` (and the label apart), the map of make_csv_dataset."""

    def __init__(self, names: list[str], label_name: str | None) -> None:
        self.names = names
        self.label_name = label_name

    def __call__(self, *columns: Any) -> Any:
        features = dict(zip(self.names, columns))
        if self.label_name is None:
            return features
        label = features.pop(self.label_name)
        return features, label


def make_csv_dataset(file_pattern: Any, batch_size: int, column_names: Sequence[str] | None = None,
                     column_defaults: Sequence[Any] | None = None, label_name: str | None = None,
                     select_columns: Sequence[int | str] | None = None, field_delim: str = ",",
                     use_quote_delim: bool = True, na_value: str = "", header: bool = True,
                     num_epochs: int | None = None, shuffle: bool = True,
                     shuffle_buffer_size: int = 10000, shuffle_seed: int | None = None,
                     num_parallel_reads: int | None = None, ignore_errors: bool = False, *,
                     prefetch_buffer_size: int | None = None,
                     num_rows_for_inference: int | None = 100,
                     compression_type: str | None = None) -> Dataset:
    """Batches of CSV records as ``{column name: array}`` dicts, like tf.data's
    ``make_csv_dataset``.

    The pipeline is tf.data's: the sorted matching files (shuffled when ``shuffle``), read
    ``num_parallel_reads`` at a time, records shuffled in a buffer of ``shuffle_buffer_size``,
    repeated ``num_epochs`` times (``None``: forever), batched (dropping a last partial batch
    only when repeating forever), turned into dicts, and prefetched.

    Args:
        file_pattern: A glob pattern (local or fsspec URL) or a list of them.
        batch_size: Records per batch.
        column_names: The names of the columns, in file order; default: the header row of
            the files (which must all have the same one).
        column_defaults: One ``record_defaults`` entry per selected column (see
            :class:`CsvDataset`); default: inferred from the first ``num_rows_for_inference``
            records as tf.data does (int32, int64, float32, float64, then string: the least
            permissive type that fits every value), every column optional with default 0 or
            ``b""``.
        label_name: A column returned apart: elements become ``(features, label)``.
        select_columns: Column indices or names to read (default: all).
        field_delim, use_quote_delim, na_value: As for :class:`CsvDataset`.
        header: Whether the files start with a header row (skipped).
        num_epochs: Passes over the data; ``None`` repeats forever.
        shuffle: Shuffle the files and the records.
        shuffle_buffer_size: Records in the shuffle buffer.
        shuffle_seed: Seed of both shuffles.
        num_parallel_reads: Files read at once (default 1).
        ignore_errors: Skip records (and files) that cannot be read instead of raising.
        prefetch_buffer_size: Batches prefetched (default ``AUTOTUNE``; 0: none).
        num_rows_for_inference: Records read to infer the types (``None``: all).
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.

    Returns:
        A dataset of dicts mapping column names to arrays of ``batch_size`` values (string
        columns as object arrays of ``bytes``), or of ``(features, label)`` pairs.

    Example:
        >>> import feedline as fl, fsspec
        >>> fsspec.filesystem("memory").pipe("/doc/mcsv/a.csv", b"x,y,label\\n1,2.5,a\\n3,,b\\n")
        >>> ds = fl.make_csv_dataset("memory://doc/mcsv/*.csv", batch_size=2, label_name="label",
        ...                          num_epochs=1, shuffle=False)
        >>> features, label = next(iter(ds))
        >>> features["x"], features["y"], label
        (array([1, 3], dtype=int32), array([2.5, 0. ], dtype=float32), array([b'a', b'b'], dtype=object))
    """
    what = "make_csv_dataset"
    batch_size = validate_int(batch_size, f"{what}(batch_size)", minimum=1,
                              hint="a positive integer")
    num_epochs = None if num_epochs is None else validate_count(num_epochs,
                                                                f"{what}(num_epochs)")
    num_epochs = None if num_epochs == -1 else num_epochs  # a negative count: forever
    shuffle_buffer_size = validate_int(shuffle_buffer_size, f"{what}(shuffle_buffer_size)",
                                       minimum=1, hint="a positive integer")
    shuffle_seed = validate_seed(shuffle_seed, f"{what}(shuffle_seed)")
    num_parallel_reads = validate_parallelism(num_parallel_reads, f"{what}(num_parallel_reads)")
    prefetch_buffer_size = validate_optional_int(
        prefetch_buffer_size, f"{what}(prefetch_buffer_size)", minimum=0, special=(AUTOTUNE,),
        hint="None, AUTOTUNE or >= 0")
    num_rows_for_inference = validate_optional_int(
        num_rows_for_inference, f"{what}(num_rows_for_inference)", minimum=0)
    compression = compression_name(compression_type)
    delim = _single_byte(field_delim, "field_delim")
    quoting = pycsv.QUOTE_MINIMAL if use_quote_delim else pycsv.QUOTE_NONE
    try:
        filenames = sorted(path_name(name) for name in Dataset.list_files(file_pattern,
                                                                          shuffle=False))
    except (ValueError, FileNotFoundError) as error:
        # tf.data raises ValueError when no file matches.
        raise ValueError(f"make_csv_dataset: {error}") from None

    if column_names is None:
        if not header:
            raise ValueError("make_csv_dataset: without a header row, column_names is needed")
        column_names = _header_names(filenames, compression, delim, quoting)
    column_names = [str(name) for name in column_names]
    duplicates = sorted({name for name in column_names if column_names.count(name) > 1})
    if duplicates:
        raise ValueError(f"make_csv_dataset: duplicate column names {duplicates} (from "
                         "column_names or the header row)")

    selected = None
    if select_columns is not None:
        selected = _sorted_indices(select_columns, column_names)
    if column_defaults is None:
        na = (na_value.encode() if isinstance(na_value, str) else na_value).decode("utf-8")
        column_defaults = _infer_defaults(filenames, compression, delim, quoting, header,
                                          len(column_names), selected, na,
                                          num_rows_for_inference)
    column_defaults = list(column_defaults)
    if selected is not None and len(column_defaults) != len(selected):
        raise ValueError(f"make_csv_dataset: column_defaults has {len(column_defaults)} "
                         f"entries but select_columns selects {len(selected)} columns")
    if selected is not None:
        column_names = [column_names[i] for i in selected]
    if len(column_defaults) != len(column_names):
        raise ValueError(f"make_csv_dataset: column_defaults has {len(column_defaults)} "
                         f"entries for {len(column_names)} columns")
    if label_name is not None and label_name not in column_names:
        raise ValueError(f"make_csv_dataset: label_name {label_name!r} is not one of the "
                         f"columns {column_names}")

    names = Dataset.from_tensor_slices(np.array(filenames, dtype=object))
    if shuffle:
        names = names.shuffle(len(filenames), shuffle_seed)
    reader = _SkippingCsvDataset if ignore_errors else CsvDataset
    dataset: Dataset = reader(
        names, column_defaults, compression_type=compression, header=header,
        field_delim=field_delim, use_quote_delim=use_quote_delim, na_value=na_value,
        select_cols=selected,
        num_parallel_reads=None if num_parallel_reads in (None, 1) else num_parallel_reads)
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer_size, shuffle_seed)
    if num_epochs != 1:
        dataset = dataset.repeat(num_epochs)
    # Repeating forever, every batch is full: tf.data drops the remainder to say so.
    dataset = dataset.batch(batch_size, drop_remainder=num_epochs is None)
    dataset = dataset.map(_ToFeatures(column_names, label_name))
    prefetch = AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size
    if prefetch != 0:
        dataset = dataset.prefetch(prefetch)
    return dataset


def _header_names(filenames: list[str], compression: str, delim: str,
                  quoting: int) -> list[str]:
    names: list[str] | None = None
    for path in filenames:
        row = next(_csv_rows(path, compression, delim, quoting), None)
        if row is None:
            raise ValueError(f"make_csv_dataset: {path} has no header row (empty file?)")
        if names is None:
            names = row
        elif row != names:
            raise ValueError(f"make_csv_dataset: files have different column names in the "
                             f"header row: {filenames[0]} has {names}, {path} has {row}")
    assert names is not None
    return names


def _sorted_indices(select_columns: Sequence[int | str], column_names: list[str]) -> list[int]:
    where = {name: i for i, name in enumerate(column_names)}
    out = []
    for value in select_columns:
        if not isinstance(value, str | bytes):
            value = as_int(value, "make_csv_dataset(select_columns)")
            if not 0 <= value < len(column_names):
                raise ValueError(f"make_csv_dataset: column index {value} in select_columns "
                                 f"is out of range (there are {len(column_names)} columns)")
            out.append(value)
        elif value in where:
            out.append(where[value])
        else:
            raise ValueError(f"make_csv_dataset: {value!r} in select_columns is not a column "
                             f"index or name (columns: {column_names})")
    if len(set(out)) != len(out):
        raise ValueError(f"make_csv_dataset: select_columns names a column twice: "
                         f"{list(select_columns)}")
    return sorted(out)


def _infer_defaults(filenames: list[str], compression: str, delim: str, quoting: int,
                    header: bool, num_columns: int, selected: list[int] | None, na_value: str,
                    limit: int | None) -> list[Any]:
    columns = selected if selected is not None else list(range(num_columns))
    types: list[np.dtype | None] = [None] * len(columns)
    seen = 0
    for path in filenames:
        if limit is not None and seen >= limit:
            break
        rows = _csv_rows(path, compression, delim, quoting)
        try:
            if header:
                next(rows, None)
            for row in rows:
                if limit is not None and seen >= limit:
                    break
                if len(row) != num_columns:
                    raise ValueError(
                        f"make_csv_dataset: cannot infer the column types: a record of {path} "
                        f"has {len(row)} fields, expected {num_columns}; pass column_defaults")
                for j, column in enumerate(columns):
                    types[j] = _infer_type(row[column], na_value, types[j])
                seen += 1
        except pycsv.Error as error:
            raise ValueError(f"make_csv_dataset: cannot infer the column types from {path}: "
                             f"{error}; pass column_defaults") from None
        finally:
            rows.close()
    # Optional columns: 0 of the inferred type, or b"" for strings (and columns never seen).
    # (np.dtype(None) is float64, so `dtype in (None, ...)` would be wrong.)
    return [b"" if dtype is None or dtype == _STRING else np.zeros((), dtype)[()]
            for dtype in types]
