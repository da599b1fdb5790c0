"""``make_csv_dataset``: batched feature dicts from CSV files, with type inference."""

from __future__ import annotations

import csv as pycsv
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.validation import (
    as_int,
    validate_count,
    validate_int,
    validate_optional_int,
    validate_parallelism,
    validate_seed,
)
from feedline.formats._file_reader import ChunkedReader
from feedline.formats.csv.columns import _STRING, _single_byte
from feedline.formats.csv.dataset import DEFAULT_BUFFER_SIZE, CsvDataset, _SkippingCsvDataset
from feedline.formats.csv.errors import CsvError
from feedline.formats.csv.records import _Records
from feedline.formats.files import compression_name, path_name


def _csv_rows(path: str, compression: str, delim: str, quoting: int,
              header: bool) -> Iterator[tuple[int, list[str]]]:
    """The records of one file as ``(line, fields)``: the line (from 1) each starts on and
    its fields as ``str`` (UTF-8), for header and type inference. A record ``csv`` cannot
    split is a :class:`CsvError` naming the file, the line and the record."""
    reader = ChunkedReader(path, compression, DEFAULT_BUFFER_SIZE)
    read = [0]  # lines read so far
    try:
        def lines(pending: list[str]) -> Iterator[str]:
            while raw := reader.read_line():
                pieces = raw.splitlines(keepends=True) if b"\r" in raw[:-1] else (raw,)
                for piece in pieces:
                    text = piece.decode("utf-8", "replace")
                    read[0] += 1
                    pending.append(text)
                    yield text

        records = _Records(lines, delimiter=delim, quotechar='"', quoting=quoting, strict=True)
        for index in itertools.count(-1 if header else 0):
            line = read[0] + 1
            try:
                row = next(records)
            except StopIteration:
                return
            except pycsv.Error as error:
                what = "the header" if index < 0 else f"record {index}"
                raise _file_error(path, line, max(index, 0),
                                  f"cannot read {what}: {error}") from None
            yield line, row
    finally:
        reader.close()


def _file_error(path: str, line: int, record: int, problem: str) -> CsvError:
    return CsvError(f"make_csv_dataset: {path}: line {line}: {problem}", path=path, line=line,
                    record_index=record)


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
        rows = _csv_rows(path, compression, delim, quoting, True)
        try:
            _, row = next(rows, (1, None))
        finally:
            rows.close()
        if row is None:
            raise _file_error(path, 1, 0, "no header row (the file is empty)")
        if not row:
            raise _file_error(path, 1, 0, "the header row names no columns (an empty line)")
        if names is None:
            names = row
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise _file_error(path, 1, 0, f"duplicate column names {duplicates} in the "
                                  "header row")
        elif row != names:
            raise _file_error(path, 1, 0, f"files have different column names in the header "
                              f"row: {filenames[0]} has {names}, {path} has {row}")
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
        rows = _csv_rows(path, compression, delim, quoting, header)
        try:
            if header:
                next(rows, None)
            for record, (line, row) in enumerate(rows):
                if limit is not None and seen >= limit:
                    break
                if len(row) != num_columns:
                    raise _file_error(
                        path, line, record, f"cannot infer the column types: record {record} has "
                        f"{len(row)} fields, expected {num_columns}; pass column_defaults")
                for j, column in enumerate(columns):
                    types[j] = _infer_type(row[column], na_value, types[j])
                seen += 1
        finally:
            rows.close()
    # Optional columns: 0 of the inferred type, or b"" for strings (and columns never seen).
    # (np.dtype(None) is float64, so `dtype in (None, ...)` would be wrong.)
    return [b"" if dtype is None or dtype == _STRING else np.zeros((), dtype)[()]
            for dtype in types]
