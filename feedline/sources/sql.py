"""``SqlDataset``: the rows of a SQL query on a SQLite database, one element per row.

tf.data's ``tf.data.experimental.SqlDataset`` with its one driver, ``"sqlite"``, through
the standard library's :mod:`sqlite3`. The database is opened read-only, as tf.data opens
it, so a query that would write fails instead of changing the file.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import urllib.parse
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import InvalidArgumentError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import Element, TensorSpec
from feedline.core.traits import SOURCE

_STRING_TYPES = (bytes, str, object, "string")
_SUPPORTED = ("int8", "int16", "int32", "int64", "uint8", "uint16", "bool", "float64")
"""tf.data's: DT_STRING, DT_INT8, DT_INT16, DT_INT32, DT_INT64, DT_UINT8, DT_UINT16, DT_BOOL,
DT_DOUBLE."""


def column_dtype(output_type: Any, index: int) -> np.dtype:
    """One of ``output_types`` as a NumPy dtype (``object`` for tf.data's tf.string).

    Example:
        >>> column_dtype("string", 0), column_dtype(np.int8, 1)
        (dtype('O'), dtype('int8'))
    """
    if any(output_type is t or (isinstance(t, str) and output_type == t)
           for t in _STRING_TYPES):
        return np.dtype(object)
    try:
        dtype = np.dtype(output_type)
    except TypeError:
        dtype = None
    if dtype is None or (dtype.kind != "O" and dtype.name not in _SUPPORTED):
        raise InvalidArgumentError(
            f"SqlDataset: Each element of `output_types` must be one of: bytes (tf.string), "
            f"{', '.join(_SUPPORTED)}; output_types[{index}] is {output_type!r}")
    return dtype


def _as_int(value: Any) -> int:
    """SQLite's integer of a column value (``sqlite3_column_int64``): NULL is 0, a REAL is
    truncated, text is read as its leading number (0 if none)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if np.isfinite(value) else 0
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = text.strip()
    for end in range(len(text), 0, -1):
        try:
            return int(float(text[:end])) if any(c in text[:end] for c in ".eE") \
                else int(text[:end])
        except ValueError:
            continue
    return 0


def _as_float(value: Any) -> float:
    """SQLite's double of a column value (``sqlite3_column_double``)."""
    if value is None:
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = text.strip()
    for end in range(len(text), 0, -1):
        try:
            return float(text[:end])
        except ValueError:
            continue
    return 0.0


def convert_value(value: Any, dtype: np.dtype) -> Any:
    """A column value as tf.data's SqlDataset gives it for ``dtype``.

    Integers are SQLite's 64-bit integer of the value cast to the narrower type (as tf.data's
    ``static_cast``), a bool is "the 32-bit integer is not 0", strings are the raw bytes (NUL
    bytes kept), NULL is 0 / 0.0 / ``b""``.

    Example:
        >>> convert_value(b"123", np.dtype(np.int32)), convert_value(32767, np.dtype(bool))
        (np.int32(123), np.True_)
    """
    if dtype == object:
        if value is None:
            return b""
        if isinstance(value, bytes):
            return value
        return str(value).encode("utf-8")
    if dtype.kind == "f":
        return dtype.type(_as_float(value))
    # SQLite saturates what does not fit in 64 bits (a REAL of 1e57 reads as INT64_MAX).
    number = min(max(_as_int(value), -(1 << 63)), (1 << 63) - 1)
    if dtype == bool:
        return np.bool_(np.int64(number).astype(np.int32) != 0)
    return np.array(number, dtype=np.int64).astype(dtype)[()]


class SqlDataset(Dataset):
    """The rows of ``query`` on the SQLite database ``data_source_name``.

    Args:
        driver_name: ``"sqlite"``, tf.data's only driver.
        data_source_name: The database file's path.
        query: A SQL ``SELECT`` (rows in the order it gives them: use ``ORDER BY`` for a
            stable order across runs and checkpoints).
        output_types: One type per column (``bytes`` for tf.data's ``tf.string``, NumPy
            int8-int64, uint8, uint16, bool or float64, as tf.data), or a single type for a
            one-column query, whose elements are then scalars instead of tuples.

    Errors, as tf.data's: another driver or a query whose column count differs from
    ``output_types`` (a non-``SELECT`` has none) is an :class:`InvalidArgumentError`, as is
    a query SQLite refuses (a syntax error, an unknown column); a missing database file is
    ``FileNotFoundError``. Each names the database and the query.

    Checkpoints store the number of rows read; a restore runs the query again and skips them.

    Example:
        >>> import feedline as fl, sqlite3, tempfile, os, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "db.sqlite")
        >>> with sqlite3.connect(path) as db:
        ...     _ = db.execute("CREATE TABLE t (name TEXT, n INTEGER)")
        ...     _ = db.executemany("INSERT INTO t VALUES (?, ?)", [("a", 1), ("b", 2)])
        >>> ds = fl.SqlDataset("sqlite", path, "SELECT name, n FROM t ORDER BY n",
        ...                    (bytes, np.int32))
        >>> [(name, int(n)) for name, n in ds]
        [(b'a', 1), (b'b', 2)]
    """

    TRAITS = SOURCE

    def __init__(self, driver_name: str, data_source_name: str | os.PathLike[str], query: str,
                 output_types: Any, name: str | None = None) -> None:
        super().__init__()
        if driver_name != "sqlite":
            raise InvalidArgumentError(f"SqlDataset: the database type {driver_name!r} is not "
                                       "supported: the only driver is 'sqlite'")
        if not isinstance(query, str):
            raise TypeError(f"SqlDataset: query must be a str, got {type(query).__name__}")
        self.driver_name = driver_name
        self.data_source_name = os.fspath(data_source_name)
        self.query = query
        self.single = not isinstance(output_types, tuple | list)
        types = [output_types] if self.single else list(output_types)
        if not types:
            raise ValueError("SqlDataset: output_types must name at least one column type")
        self.dtypes = tuple(column_dtype(t, i) for i, t in enumerate(types))
        self.name = name

    def _element_spec(self) -> Element:
        specs = tuple(TensorSpec((), dtype) for dtype in self.dtypes)
        return specs[0] if self.single else specs

    def cardinality(self) -> int:
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return SqlIterator(ctx, self.data_source_name, self.query, self.dtypes, self.single)


class SqlIterator(DatasetIterator):
    """Runs the query when the first row is asked for and reads its rows one at a time."""

    def __init__(self, ctx: IteratorContext, path: str, query: str,
                 dtypes: Sequence[np.dtype], single: bool) -> None:
        super().__init__(ctx)
        self._path, self._query, self._dtypes, self._single = path, query, dtypes, single
        self._connection: sqlite3.Connection | None = None
        self._cursor: sqlite3.Cursor | None = None
        self._rows = 0  # rows handed out
        self._done = False

    def _where(self) -> str:
        return f"(database {self._path!r}, query {self._query!r})"

    def _start(self) -> sqlite3.Cursor:
        if not os.path.isfile(self._path):
            raise FileNotFoundError(errno.ENOENT, "SqlDataset: no such database file "
                                    f"{self._where()}", self._path)
        uri = f"file:{urllib.parse.quote(os.path.abspath(self._path))}?mode=ro"
        try:
            self._connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._connection.text_factory = bytes  # raw bytes: NUL bytes and non-UTF-8 kept
            cursor = self._connection.execute(self._query)
        except sqlite3.Error as error:
            raise InvalidArgumentError(f"SqlDataset: SQLite refused the query: {error} "
                                       f"{self._where()}", path=self._path) from None
        columns = 0 if cursor.description is None else len(cursor.description)
        if columns != len(self._dtypes):
            raise InvalidArgumentError(
                f"SqlDataset: The number of columns in query ({columns}) must match the "
                f"number of elements in output_types ({len(self._dtypes)}) {self._where()}",
                path=self._path)
        self._cursor = cursor
        return cursor

    def _fetch(self) -> tuple[Any, ...] | None:
        cursor = self._cursor if self._cursor is not None else self._start()
        try:
            return cursor.fetchone()
        except sqlite3.Error as error:
            raise InvalidArgumentError(f"SqlDataset: reading row {self._rows} failed: {error} "
                                       f"{self._where()}", path=self._path,
                                       record_index=self._rows) from None

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        row = self._fetch()
        if row is None:
            self._done = True
            self._release()
            raise StopIteration
        self._rows += 1
        values = tuple(convert_value(v, d) for v, d in zip(row, self._dtypes))
        return values[0] if self._single else values

    def _get_state(self) -> State:
        return {"rows": self._rows, "done": self._done}

    def _set_state(self, state: State) -> None:
        rows, done = int(state["rows"]), bool(state["done"])
        self._release()
        self._rows, self._done = 0, done
        if done:
            self._rows = rows
            return
        for _ in range(rows):  # the query runs again; its first rows were handed out
            if self._fetch() is None:
                raise ValueError(f"the query now gives {self._rows} rows, the state was saved "
                                 f"after row {rows} {self._where()}")
            self._rows += 1

    def _release(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection, self._cursor = None, None
