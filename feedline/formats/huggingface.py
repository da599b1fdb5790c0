"""Hugging Face datasets on disk, read with pyarrow alone (``datasets`` is never imported).

:class:`HuggingFaceDataset` reads

* a folder written by ``Dataset.save_to_disk`` (``state.json``, ``dataset_info.json``,
  ``data-*.arrow``), or one split of a ``DatasetDict.save_to_disk`` folder
  (``dataset_dict.json`` and a folder per split);
* one split of a ``datasets`` cache folder (``<name>-<split>.arrow`` or
  ``<name>-<split>-00000-of-00003.arrow`` files, or ``.parquet`` ones);
* Arrow (IPC stream or file) and Parquet files given by name.

Local Arrow files are memory-mapped, so opening one reads nothing but its schema, and the
dataset has random access (``len``, ``ds[i]``, ``global_shuffle``, index-based sharding):
a list of indices is one ``take`` per file. Elements are rows: dicts of column name to value,
converted as described in :class:`HuggingFaceDataset`. pyarrow is the ``parquet`` extra
(``pip install feedline[parquet]``).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from feedline.core.errors import DataLossError, InvalidArgumentError
from feedline.core.iterator import IteratorContext
from feedline.core.random_access import RandomAccessReader
from feedline.core.validation import validate_optional_int
from feedline.formats._file_reader import FileReaderDataset, RecordCursor
from feedline.formats.files import open_file, path_name

__all__ = ["HuggingFaceDataset"]

#: Rows converted at once when reading in order.
DEFAULT_BLOCK_SIZE = 256
_CACHE_FILE = re.compile(r"-(?P<split>[^-/]+?)(?:-\d{5}-of-\d{5})?\.(?:arrow|parquet)$")
_ARRAY_TYPES = ("Array2D", "Array3D", "Array4D", "Array5D")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet  # noqa: F401 - imported for the .parquet files
    except ImportError as error:
        raise ImportError("HuggingFaceDataset needs pyarrow, an optional dependency of "
                          "feedline: pip install feedline[parquet]") from error
    return pyarrow


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


# ------------------------------------------------------------------- finding the files
def _fs(path: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(path)


def _read_json(fs: Any, path: str, what: str) -> Any:
    try:
        return json.loads(fs.cat_file(path))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise DataLossError(f"HuggingFaceDataset: {what} {path} is not valid JSON: "
                            f"{_quote(error)}", path=path) from None


def _read_object(fs: Any, path: str, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object (``state.json``, ``dataset_info.json``...)."""
    value = _read_json(fs, path, what)
    if not isinstance(value, dict):
        raise DataLossError(f"HuggingFaceDataset: {what} {path} holds a JSON "
                            f"{type(value).__name__}, not an object", path=path)
    return value


def _data_files(state: dict[str, Any], path: str) -> list[str]:
    """The file names listed by a ``state.json``; each must be a plain name in its folder."""
    entries = state.get("_data_files", [])
    names = [entry.get("filename") if isinstance(entry, dict) else None
             for entry in entries] if isinstance(entries, list) else [None]
    for index, name in enumerate(names):
        # A name with a folder in it would read outside the dataset's folder.
        if not isinstance(name, str) or not name or "/" in name or "\\" in name \
                or name in (".", ".."):
            raise DataLossError(
                f"HuggingFaceDataset: the state file {path} is damaged: _data_files entry "
                f"{index} is {(entries[index] if isinstance(entries, list) else entries)!r}, "
                "not {\"filename\": <a file name in its folder>}", path=path,
                record_index=index)
    return names


class Resolved(NamedTuple):
    """What :func:`resolve_files` finds."""

    #: The data files, in order.
    files: list[str]
    #: The ``dataset_info.json`` (``{}`` if there is none).
    info: dict[str, Any]
    #: The split the files hold, where known.
    split: str | None
    #: ``"saved"`` (``save_to_disk``), ``"cache"`` (a ``datasets`` cache folder) or
    #: ``"files"`` (files given by name).
    kind: str


def resolve_files(path: Any, split: str | None) -> Resolved:
    """The data files of a saved dataset (or of ``split`` of a dataset dict or cache folder),
    in order, with its ``dataset_info.json`` (``{}`` if there is none).

    Raises:
        FileNotFoundError: There is no such file or folder.
        ValueError: ``path`` is not a Hugging Face dataset, or ``split`` does not fit it.
        DataLossError: ``state.json``, ``dataset_dict.json`` or ``dataset_info.json`` is
            damaged.

    Example:
        >>> import json, os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "state.json"), "w") as f:
        ...     json.dump({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}, f)
        >>> found = resolve_files(folder, None)
        >>> [os.path.basename(f) for f in found.files], found.info, found.kind
        (['data-00000-of-00001.arrow'], {}, 'saved')
    """
    if isinstance(path, (list, tuple)):
        names = [path_name(p) for p in path]
        if split is not None:
            raise InvalidArgumentError("HuggingFaceDataset: split= chooses a split of a "
                                       "folder; a list of files has none")
        return Resolved(names, {}, None, "files")
    path = path_name(path)
    fs, inner = _fs(path)
    prefix = path[:len(path) - len(inner)] if path.endswith(inner) else ""
    if not fs.exists(inner):
        raise FileNotFoundError(errno.ENOENT, "HuggingFaceDataset: no such file or folder",
                                path)
    if fs.isfile(inner):
        if split is not None:
            raise InvalidArgumentError(f"HuggingFaceDataset: split={split!r} chooses a split "
                                       f"of a folder; {path} is one file", path=path)
        return Resolved([path], {}, None, "files")
    entries = {os.path.basename(e.rstrip("/")) for e in fs.ls(inner, detail=False)}
    if "dataset_dict.json" in entries:
        listed = _read_object(fs, _join(inner, "dataset_dict.json"), "the split list"
                              ).get("splits", [])
        splits = [s for s in listed if isinstance(s, str)] if isinstance(listed, list) else []
        if split is None or split not in splits:
            raise InvalidArgumentError(
                f"HuggingFaceDataset: {path} is a DatasetDict with splits {splits}; "
                + ("pass split=" if split is None else f"it has no split {split!r}")
                + " (one of them)", path=path)
        if "/" in split or split in (".", ".."):
            raise DataLossError(f"HuggingFaceDataset: the split list of {path} is damaged: "
                                f"split {split!r} is not a folder name", path=path)
        found = resolve_files(prefix + _join(inner, split), None)
        return found._replace(split=found.split or split)
    if "state.json" in entries:
        state_path = _join(inner, "state.json")
        state = _read_object(fs, state_path, "the state file")
        saved_split = state.get("_split")
        saved_split = saved_split if isinstance(saved_split, str) else None
        if split is not None and saved_split not in (None, split):
            raise InvalidArgumentError(f"HuggingFaceDataset: {path} holds split "
                                       f"{saved_split!r}, not {split!r}", path=path)
        info = (_read_object(fs, _join(inner, "dataset_info.json"), "the dataset info")
                if "dataset_info.json" in entries else {})
        files = [prefix + _join(inner, name) for name in _data_files(state, prefix + state_path)]
        return Resolved(files, info, saved_split or split, "saved")
    found: dict[str, list[str]] = {}
    for name in sorted(entries):
        match = _CACHE_FILE.search(name)
        if match and not name.startswith("cache-"):
            found.setdefault(match.group("split"), []).append(prefix + _join(inner, name))
    if not found:
        raise InvalidArgumentError(
            f"HuggingFaceDataset: {path} is not a saved Hugging Face dataset: it has no "
            "state.json (Dataset.save_to_disk), no dataset_dict.json "
            "(DatasetDict.save_to_disk) and no <name>-<split>.arrow or .parquet cache files",
            path=path)
    if split is None or split not in found:
        raise InvalidArgumentError(
            f"HuggingFaceDataset: {path} is a cache folder with splits {sorted(found)}; "
            + ("pass split=" if split is None else f"it has no split {split!r}"), path=path)
    info = (_read_object(fs, _join(inner, "dataset_info.json"), "the dataset info")
            if "dataset_info.json" in entries else {})
    return Resolved(found[split], info, split, "cache")


def expected_rows(info: dict[str, Any], split: str | None) -> int | None:
    """The ``num_examples`` that ``dataset_info.json`` gives ``split`` (``None`` if none).

    Example:
        >>> expected_rows({"splits": {"train": {"name": "train", "num_examples": 7}}}, "train")
        7
    """
    splits = info.get("splits")
    if isinstance(splits, list):  # the list spelling of older `datasets`
        splits = {s.get("name"): s for s in splits if isinstance(s, dict)}
    entry = splits.get(split) if isinstance(splits, dict) and split is not None else None
    count = entry.get("num_examples") if isinstance(entry, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 \
        else None


def _count_rows(path: str) -> int:
    """The rows of one file, reading only its metadata (a local Arrow file is mapped)."""
    if path.endswith(".parquet"):
        pa = _pyarrow()
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path.removeprefix("file://")).metadata.num_rows
        except _arrow_errors(pa) as error:
            raise DataLossError(f"HuggingFaceDataset: {path} cannot be read as a Parquet "
                                f"file: {_quote(error)}", path=path) from error
    return ArrowData(path).num_rows


# ------------------------------------------------------------------------ reading a file
#: The end-of-stream marker of an Arrow IPC stream (a continuation token, then length 0), and
#: the one written before Arrow 0.15 (length 0 alone).
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_LEGACY_EOS = b"\x00\x00\x00\x00"
#: An Arrow IPC file (not stream) starts and ends with this.
_FILE_MAGIC = b"ARROW1"
#: pyarrow quotes damaged bytes in some messages; this much of a message is enough to act on.
_QUOTED = 300


def _quote(error: BaseException) -> str:
    text = str(error)
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."


def _arrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    # pyarrow raises plain OSError (not an ArrowException) for an IO status, which is what a
    # damaged flatbuffer or a short read gives, and UnicodeDecodeError for names it decodes.
    return (pa.ArrowException, OSError, UnicodeDecodeError)


def _check_names(pa: Any, fields: list[Any]) -> None:
    """Decode every field name (nested ones too): pyarrow decodes them when asked, and raises
    ``UnicodeDecodeError`` then for damaged bytes."""
    for field in fields:
        _ = field.name
        kind = field.type
        while isinstance(kind, (pa.DictionaryType, pa.ExtensionType)):
            kind = kind.value_type if isinstance(kind, pa.DictionaryType) else kind.storage_type
        _check_names(pa, [kind.field(i) for i in range(kind.num_fields)])


class ArrowData:
    """One Arrow (IPC stream or file) or Parquet file: its table, and where each record batch
    starts, so that each batch is validated before any of its rows is converted.

    Opening reads the schema and every record batch's header (local Arrow files are
    memory-mapped, so no data is read), and checks that the file is whole: an IPC stream must
    end with its end-of-stream marker and an IPC file with its footer, else the file was cut
    (at a record-batch boundary, a cut stream reads as a valid, shorter one).

    Example:
        >>> import pyarrow as pa, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "rows.arrow")
        >>> table = pa.table({"x": [1, 2, 3]})
        >>> with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        ...     out.write_table(table, max_chunksize=2)
        >>> data = ArrowData(path)
        >>> data.num_rows, data.starts.tolist(), data.offsets
        (3, [0, 2, 3], [128, 296])
        >>> os.truncate(path, 296)  # cut after the first record batch
        >>> ArrowData(path)
        Traceback (most recent call last):
        ...
        feedline.core.errors.DataLossError: HuggingFaceDataset: ...rows.arrow is truncated: its ...
    """

    def __init__(self, path: str) -> None:
        pa = _pyarrow()
        self.path = path
        local = path.removeprefix("file://") if _is_local(path) else None
        if local is not None and not os.path.isfile(local):
            raise FileNotFoundError(errno.ENOENT, "HuggingFaceDataset: no such file", path)
        #: The byte offset of each record batch's message (``None`` where unknown).
        self.offsets: list[int | None]
        if path.endswith(".parquet"):
            batches, self.schema = self._parquet(pa, local)
            self.offsets = [None] * len(batches)
        else:
            if local is not None:
                try:
                    source = pa.memory_map(local)
                except _arrow_errors(pa) as error:
                    raise DataLossError(f"HuggingFaceDataset: cannot map {path}: "
                                        f"{_quote(error)}", path=path) from error
            else:
                with open_file(path, "rb") as file:
                    source = pa.BufferReader(file.read())
            head = source.read(len(_FILE_MAGIC))
            source.seek(0)
            if head == _FILE_MAGIC:
                batches, self.schema = self._file(pa, source)
                self.offsets = [None] * len(batches)
            else:
                batches, self.schema, self.offsets = self._stream(pa, source)
        try:
            _check_names(pa, list(self.schema))
        except UnicodeDecodeError as error:
            raise self._damaged("is damaged: a column name in its schema is not UTF-8", error,
                                offset=0) from error
        self._batches = batches
        #: Row ``starts[i]`` is the first of batch ``i``; ``starts[-1]`` is the row count.
        self.starts = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum([b.num_rows for b in batches], out=self.starts[1:])
        self.num_rows = int(self.starts[-1])
        self.table = pa.Table.from_batches(batches, schema=self.schema)
        self._checked = np.zeros(len(batches), dtype=bool)

    def _damaged(self, what: str, error: BaseException | None = None, *,
                 offset: int | None = None, row: int | None = None) -> DataLossError:
        cause = f": {_quote(error)}" if error is not None else ""
        return DataLossError(f"HuggingFaceDataset: {self.path} {what}{cause}", path=self.path,
                             offset=offset, record_index=row)

    def _parquet(self, pa: Any, local: str | None) -> tuple[list[Any], Any]:
        import pyarrow.parquet as pq

        try:
            if local is not None:
                table = pq.read_table(local, memory_map=True)
            else:
                with open_file(self.path, "rb") as file:
                    table = pq.read_table(pa.BufferReader(file.read()))
        except _arrow_errors(pa) as error:
            raise DataLossError(f"HuggingFaceDataset: cannot read {self.path} as a Parquet "
                                f"file: {_quote(error)}", path=self.path) from error
        return table.to_batches(), table.schema

    def _file(self, pa: Any, source: Any) -> tuple[list[Any], Any]:
        size = source.size()
        source.seek(max(0, size - len(_FILE_MAGIC)))
        if size < 2 * len(_FILE_MAGIC) or source.read(len(_FILE_MAGIC)) != _FILE_MAGIC:
            raise self._damaged(f"is truncated: it starts as an Arrow file but does not end "
                                f"with the footer's {_FILE_MAGIC!r} ({size} bytes)",
                                offset=size)
        source.seek(0)
        try:
            reader = pa.ipc.open_file(source)
        except _arrow_errors(pa) as error:
            raise self._damaged("is not a readable Arrow file (its footer)", error,
                                offset=size) from error
        batches = []
        for index in range(reader.num_record_batches):
            try:
                batches.append(reader.get_batch(index))
            except _arrow_errors(pa) as error:
                rows = sum(b.num_rows for b in batches)
                raise self._damaged(f"cannot read record batch {index} (from row {rows})",
                                    error, row=rows) from error
        return batches, reader.schema

    def _stream(self, pa: Any, source: Any) -> tuple[list[Any], Any, list[int | None]]:
        try:
            reader = pa.ipc.open_stream(source)
        except _arrow_errors(pa) as error:
            raise DataLossError(f"HuggingFaceDataset: cannot read {self.path} as an Arrow file "
                                f"(its first message is not an Arrow schema): {_quote(error)}",
                                path=self.path, offset=0) from error
        batches: list[Any] = []
        offsets: list[int | None] = []
        rows = 0
        while True:
            at = source.tell()
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except _arrow_errors(pa) as error:
                raise self._damaged(f"cannot read record batch {len(batches)} (from row "
                                    f"{rows}) at byte {at}: damaged or truncated", error,
                                    offset=at, row=rows) from error
            batches.append(batch)
            offsets.append(at)
            rows += batch.num_rows
        end = source.tell()
        source.seek(at)
        ending = source.read(end - at)
        # pyarrow ends a stream at the marker and, silently, at the end of the file; only the
        # marker says the writer finished.
        if not (ending.endswith(_EOS) or ending == _LEGACY_EOS):
            raise self._damaged(
                f"is truncated: its Arrow stream ends after record batch {len(batches) - 1} "
                f"({rows} rows) at byte {at} without the end-of-stream marker", offset=at,
                row=rows)
        return batches, reader.schema, offsets

    def check(self, batch_indices: Any, columns: Sequence[str]) -> None:
        """Validate ``columns`` of each record batch in ``batch_indices`` (once each), so
        that damaged offsets or lengths raise here instead of crashing a conversion.

        Raises:
            DataLossError: A batch is damaged; names the file, the batch, its first row and
                its byte offset.
        """
        pa = _pyarrow()
        for index in batch_indices:
            if self._checked[index]:
                continue
            batch = self._batches[index]
            try:
                # Full: the cheap check trusts offsets and dictionary indices, whose damage
                # reads out of bounds.
                batch.select(list(columns)).validate(full=True)
            except _arrow_errors(pa) as error:
                offset = self.offsets[index]
                start = int(self.starts[index])
                raise self._damaged(
                    f"is damaged: record batch {index} (rows {start} to "
                    f"{int(self.starts[index + 1]) - 1}"
                    + (f", at byte {offset}" if offset is not None else "") + ") is invalid",
                    error, offset=offset, row=start) from error
            self._checked[index] = True

    def batches_between(self, start: int, stop: int) -> range:
        """The indices of the record batches a slice of rows ``start`` to ``stop - 1`` may
        touch: those holding the rows and any empty batch at either end (a slice may take
        a zero-row chunk at its boundary along, and concatenating reads its buffers)."""
        starts = self.starts
        first, last = (np.searchsorted(starts, [start, stop - 1], side="right") - 1).tolist()
        while first > 0 and starts[first - 1] == starts[first]:
            first -= 1
        while last + 2 < len(starts) and starts[last + 2] == starts[last + 1]:
            last += 1
        return range(first, last + 1)

    def batch(self, index: int) -> Any:
        """Record batch ``index`` (validate it with :meth:`check` before converting it)."""
        return self._batches[index]


def table_features(table: Any) -> dict[str, Any]:
    """The ``datasets`` features stored in an Arrow schema's metadata (``{}`` if none or if
    they are not a mapping)."""
    metadata = table.schema.metadata or {}
    try:
        stored = json.loads(metadata.get(b"huggingface", b"{}"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    info = stored.get("info") if isinstance(stored, dict) else None
    features = info.get("features") if isinstance(info, dict) else None
    return features if isinstance(features, dict) else {}


# --------------------------------------------------------------------- converting values
def _values(pa: Any, array: Any, feature: Any) -> list[Any]:
    """The value of each row of ``array`` (an Arrow array): NumPy scalars and arrays,
    ``bytes`` for strings, dicts for structs, ``None`` for nulls (NaN in float columns)."""
    types = pa.types
    kind = array.type
    n = len(array)
    feature_type = feature.get("_type") if isinstance(feature, dict) else None
    if isinstance(kind, pa.ExtensionType):
        array = array.storage
        kind = array.type
    if types.is_dictionary(kind):
        array = array.cast(kind.value_type)
        kind = array.type
    if types.is_null(kind):
        return [None] * n
    if (types.is_string(kind) or types.is_large_string(kind) or types.is_binary(kind)
            or types.is_large_binary(kind) or types.is_fixed_size_binary(kind)
            or getattr(types, "is_string_view", lambda _: False)(kind)
            or getattr(types, "is_binary_view", lambda _: False)(kind)):
        return array.cast(pa.large_binary()).to_numpy(zero_copy_only=False).tolist()
    if feature_type in _ARRAY_TYPES:
        return _fixed_arrays(pa, array, feature)
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind) \
            or getattr(types, "is_list_view", lambda _: False)(kind):
        inner = feature.get("feature") if isinstance(feature, dict) else None
        if isinstance(feature, list) and feature:  # the old list-of-one-feature spelling
            inner = feature[0]
        return _lists(pa, array, inner)
    if types.is_struct(kind):
        fields = array.flatten()  # the parent's nulls and slicing applied to each field
        columns = [_values(pa, field, (feature or {}).get(kind.field(i).name)
                           if isinstance(feature, dict) else None)
                   for i, field in enumerate(fields)]
        names = [kind.field(i).name for i in range(kind.num_fields)]
        valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
        return [None if valid is not None and not valid[row] else
                {name: column[row] for name, column in zip(names, columns, strict=True)}
                for row in range(n)]
    if types.is_floating(kind) and array.null_count:
        array = array.fill_null(float("nan"))
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        values = array.fill_null(array.type.to_pandas_dtype()(0) if types.is_integer(kind)
                                 else False if types.is_boolean(kind) else None)
        numbers = values.to_numpy(zero_copy_only=False)
        return [numbers[i] if valid[i] else None for i in range(n)]
    try:
        # A copy, so that a function may update an element in place (the map is read-only).
        return list(np.array(array.to_numpy(zero_copy_only=False), copy=True))
    except (pa.ArrowException, TypeError, ValueError):
        return array.to_pylist()


def _lists(pa: Any, array: Any, inner: Any) -> list[Any]:
    """One NumPy array per row of a list column (``bytes`` items as an object array,
    dicts and ragged nested lists as a Python list)."""
    n = len(array)
    lengths = array.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    flat = array.flatten()
    ends = np.cumsum(lengths)
    starts = ends - lengths
    kind = flat.type
    types = pa.types
    if (types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind)) \
            and not flat.null_count:
        numbers = np.array(flat.to_numpy(zero_copy_only=False), copy=True)
        rows: list[Any] = [numbers[s:e] for s, e in zip(starts.tolist(), ends.tolist(),
                                                         strict=True)]
    else:
        items = _values(pa, flat, inner)
        rows = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            part = items[s:e]
            rows.append(_stack(part))
    if valid is not None:
        rows = [rows[i] if valid[i] else None for i in range(n)]
    return rows


def _stack(items: list[Any]) -> Any:
    """Items of one list as an array: ``bytes`` in an object array, equal-shaped arrays
    stacked; anything else (dicts, ragged lists, nulls) stays a list."""
    if not items:
        return np.zeros((0,), dtype=object)
    if all(isinstance(x, bytes) for x in items):
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out
    if all(isinstance(x, np.ndarray) for x in items) and len({x.shape for x in items}) == 1 \
            and len({x.dtype for x in items}) == 1:
        return np.stack(items)
    if all(isinstance(x, np.generic) for x in items):
        return np.array(items)
    return items


def _fixed_arrays(pa: Any, array: Any, feature: dict[str, Any]) -> list[Any]:
    """Rows of an ``Array2D`` ... ``Array5D`` column, each an array of the feature's shape
    (its first dimension may vary, as ``datasets`` allows)."""
    shape = [d for d in feature.get("shape", [])]
    dtype = np.dtype(feature.get("dtype", "float32"))
    rows = []
    for row in array.to_pylist():  # nested lists of numbers; small next to any image
        rows.append(None if row is None else np.array(row, dtype=dtype).reshape(
            [-1 if d is None else d for d in shape] if shape else -1))
    return rows


def _rows(pa: Any, table: Any, columns: Sequence[str], features: dict[str, Any],
          decode_images: bool, path: str) -> list[dict[str, Any]]:
    converted = []
    for name in columns:
        feature = features.get(name)
        try:
            values = _values(pa, table.column(name).combine_chunks(), feature)
            if decode_images and isinstance(feature, dict) and feature.get("_type") == "Image":
                values = [_decode(value) for value in values]
        except (ValueError, TypeError) as error:
            # The features in the schema's metadata do not fit the column (a shape or dtype
            # of another size, an Image that is not a struct): the metadata is damaged.
            raise DataLossError(f"HuggingFaceDataset: column {name!r} of {path} does not "
                                f"convert as its features {_quote(feature)} say: "
                                f"{_quote(error)}", path=path) from error
        converted.append(values)
    return [dict(zip(columns, row, strict=True)) for row in zip(*converted, strict=True)] \
        if columns else [{} for _ in range(table.num_rows)]


def _decode(value: Any) -> Any:
    """An ``Image`` value (``{"bytes", "path"}``) as a ``uint8`` array (height, width,
    channels), as ``datasets`` decodes it (its own channels; palette images to RGB)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"an Image value is a {{'bytes', 'path'}} struct, not {type(value)}")
    contents = value.get("bytes")
    if contents is None:
        source = value.get("path")
        if source is None:
            return None
        with open_file(source.decode(), "rb") as file:
            contents = file.read()
    from PIL import Image

    try:
        with Image.open(io.BytesIO(contents)) as picture:
            if picture.mode not in ("L", "RGB", "RGBA", "LA", "I", "F", "I;16"):
                picture = picture.convert("RGB")
            array = np.asarray(picture)
    except Image.DecompressionBombError as error:
        raise ValueError(f"the image is too large to decode: {error}") from error
    except (OSError, SyntaxError) as error:  # what Pillow raises for damaged images
        raise ValueError(f"the image cannot be decoded: {error}") from error
    return array[:, :, None] if array.ndim == 2 else np.array(array)


# ------------------------------------------------------------------------- the dataset
class HuggingFaceDataset(FileReaderDataset):
    """The rows of a Hugging Face dataset saved to disk, as dicts of column to value.

    Args:
        path: A folder written by ``save_to_disk`` (of a ``Dataset``, or of a
            ``DatasetDict`` with ``split``), a ``datasets`` cache folder (with ``split``), an
            ``.arrow``/``.parquet`` file, or a list of such files. Local paths or fsspec URLs
            (remote files are read whole, local ones memory-mapped).
        split: The split to read from a ``DatasetDict`` or cache folder.
        columns: The columns to read, in this order (default: all, in stored order).
        decode_images: Decode ``Image`` columns into ``uint8`` arrays ``(height, width,
            channels)``; by default their value is the stored ``{"bytes": ..., "path":
            ...}``.
        block_size: Rows converted at once when reading in order (default 256).
        name: Name of this stage in statistics and errors.
        check_row_count: Compare the rows of a local folder's files with the
            ``num_examples`` its ``dataset_info.json`` gives the split, when it gives one.
            ``None`` (default): a mismatch is a :class:`~feedline.DataLossError` in a
            ``datasets`` cache folder and a ``RuntimeWarning`` in a ``save_to_disk`` folder
            (``datasets`` saves the count of the dataset a ``filter``, ``select`` or
            ``map`` started from, so it is stale there after one); ``True``: an error in
            both; ``False``: no comparison.

    Values convert as ``datasets`` stores them: numbers and bools to NumPy scalars of their
    dtype, strings to ``bytes`` (as :class:`~feedline.ParquetDataset` and every feedline
    reader give text), ``ClassLabel`` to its ``int64`` index (names in :attr:`features`),
    sequences of numbers to 1-D arrays, sequences of strings to object arrays of ``bytes``,
    ``Array2D``-``Array5D`` to arrays of their shape, dicts to dicts. A null is NaN in a
    float column and ``None`` elsewhere.

    Damage is a :class:`~feedline.DataLossError` naming the file and where: an Arrow stream
    without its end-of-stream marker or an Arrow file without its footer (a file cut short),
    a record batch that fails pyarrow's full validation (checked, for the columns read, before
    any of its rows is converted), metadata that does not fit the data.

    :attr:`features` holds the ``datasets`` features (as in ``dataset_info.json``) and
    :attr:`info` the whole ``dataset_info.json`` of a saved folder. Checkpoints store the
    file index and the row; every file is a unit of file-based sharding.

    Example:
        >>> import feedline as fl, pyarrow as pa, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "data-00000-of-00001.arrow")
        >>> table = pa.table({"text": ["a", "b", "c"], "label": [0, 1, 0]})
        >>> with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        ...     out.write_table(table)
        >>> ds = fl.HuggingFaceDataset(path)
        >>> len(ds), ds[1]
        (3, {'text': b'b', 'label': np.int64(1)})
        >>> [row["text"] for row in ds.global_shuffle(seed=0, reshuffle_each_iteration=False)]
        [b'a', b'c', b'b']
    """

    READER: ClassVar[str] = "HuggingFaceDataset"

    def __init__(self, path: Any, split: str | None = None,
                 columns: Sequence[str] | None = None, decode_images: bool = False,
                 block_size: int | None = None, name: str | None = None,
                 check_row_count: bool | None = None) -> None:
        _pyarrow()
        if isinstance(columns, str):
            raise TypeError(f"HuggingFaceDataset: columns must be a list of column names, not "
                            f"a single string ({columns!r}); use [{columns!r}]")
        if check_row_count not in (None, True, False):
            raise TypeError(f"HuggingFaceDataset: check_row_count must be None, True or "
                            f"False, not {check_row_count!r}")
        found = resolve_files(path, split)
        self.path = path if isinstance(path, (list, tuple)) else path_name(path)
        self.split = split
        self.info: dict[str, Any] = found.info
        features = found.info.get("features")
        self.features: dict[str, Any] = dict(features) if isinstance(features, dict) else {}
        self.columns = None if columns is None else [str(c) for c in columns]
        self.decode_images = bool(decode_images)
        block_size = validate_optional_int(block_size, f"{self.READER}(block_size)", minimum=1,
                                           hint="None or a positive integer")
        self.block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
        self.name = name or "huggingface"
        if check_row_count is not False:
            self._check_row_count(found, bool(check_row_count) or found.kind == "cache")
        self._setup(found.files, None, {})

    def _check_row_count(self, found: Resolved, strict: bool) -> None:
        expected = expected_rows(found.info, found.split)
        # Counting a remote file would read all of it; a local one is mapped (headers only).
        if expected is None or not all(_is_local(f) for f in found.files):
            return
        try:
            actual = sum(_count_rows(f) for f in found.files)
        except DataLossError:
            return  # a damaged file is reported, by name, where it is read
        if actual == expected:
            return
        message = (f"HuggingFaceDataset: the files of {self.path} hold {actual} rows of split "
                   f"{found.split!r}, but its dataset_info.json says {expected}")
        if strict:
            raise DataLossError(message + " (a file is missing rows, or was replaced)",
                                path=self.path)
        warnings.warn(message + ": rows may be missing, or (most often) the dataset went "
                      "through filter/select/map before save_to_disk, which keeps the count "
                      "it started from; pass check_row_count=True to make this an error, "
                      "False to skip the comparison", RuntimeWarning, stacklevel=3)

    @property
    def _start(self) -> dict[str, Any]:
        return {"row": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _TableCursor(self, path, int(position["row"]))

    def _offers_random_access(self) -> bool:
        return self.filenames is not None

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        assert self.filenames is not None
        return HuggingFaceRandomReader(self.filenames, self.columns, self.decode_images)


class _OpenTable:
    """One data file: its batches, its columns to read and their features; converts rows
    of batches it has validated first."""

    def __init__(self, path: str, columns: Sequence[str] | None, decode_images: bool) -> None:
        self.pa = _pyarrow()
        self.path = path
        self.data = ArrowData(path)
        names = self.data.schema.names
        self.columns = list(names) if columns is None else list(columns)
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise InvalidArgumentError(f"HuggingFaceDataset: {path} has no column(s) "
                                       f"{missing}; its columns are {names}", path=path)
        twice = sorted({n for n in self.columns if names.count(n) > 1})
        if twice:  # a lookup by name would be ambiguous; `datasets` never writes this
            raise DataLossError(f"HuggingFaceDataset: {path} has more than one column named "
                                f"each of {twice}", path=path)
        self.features = table_features(self.data.table)
        self.decode_images = decode_images

    @property
    def num_rows(self) -> int:
        return self.data.num_rows

    def slice(self, start: int, count: int) -> list[dict[str, Any]]:
        """Rows ``start`` to ``start + count`` (fewer at the end of the file)."""
        stop = min(start + count, self.data.num_rows)
        if stop <= start:
            return []
        self.data.check(self.data.batches_between(start, stop), self.columns)
        return self._convert(self.data.table.slice(start, stop - start), start, stop)

    def take(self, rows: np.ndarray) -> list[dict[str, Any]]:
        """The rows numbered ``rows`` (in this file), in that order."""
        data = self.data
        owners = np.searchsorted(data.starts, rows, side="right") - 1
        batches = np.unique(owners)
        data.check(batches, self.columns)
        # One take per batch: a take over the whole table could touch batches not validated.
        order = np.argsort(owners, kind="stable")
        bounds = np.searchsorted(owners[order], batches, side="left").tolist() + [len(rows)]
        pieces = []
        for position, index in enumerate(batches.tolist()):
            chosen = rows[order[bounds[position]:bounds[position + 1]]] - data.starts[index]
            pieces.append(data.batch(index).select(self.columns).take(self.pa.array(chosen)))
        if not pieces:
            return []
        table = self.pa.Table.from_batches(pieces)
        converted = self._convert(table, int(rows.min()), int(rows.max()) + 1)
        out: list[Any] = [None] * len(rows)
        for slot, row in zip(order.tolist(), converted, strict=True):
            out[slot] = row
        return out

    def _convert(self, table: Any, start: int, stop: int) -> list[dict[str, Any]]:
        try:
            return _rows(self.pa, table, self.columns, self.features, self.decode_images,
                         self.path)
        except DataLossError:
            raise
        except _arrow_errors(self.pa) as error:
            raise DataLossError(f"HuggingFaceDataset: cannot convert rows {start} to "
                                f"{stop - 1} of {self.path}: {_quote(error)}", path=self.path,
                                record_index=start) from error


class _TableCursor(RecordCursor):
    def __init__(self, node: HuggingFaceDataset, path: str, row: int) -> None:
        self._file = _OpenTable(path, node.columns, node.decode_images)
        self._row = row  # the next row handed out
        self._block: list[dict[str, Any]] = []
        self._taken = 0
        self._block_size = node.block_size

    def read(self) -> dict[str, Any]:
        if self._taken >= len(self._block):
            if self._row >= self._file.num_rows:
                raise StopIteration
            self._block = self._file.slice(self._row, self._block_size)
            self._taken = 0
        row = self._block[self._taken]
        self._taken += 1
        self._row += 1
        return row

    def read_many(self, limit: int) -> list[dict[str, Any]]:
        out = self._block[self._taken:self._taken + limit]
        self._taken += len(out)
        self._row += len(out)
        return out

    def position(self) -> dict[str, Any]:
        return {"row": self._row}

    def close(self) -> None:
        self._block = []


class HuggingFaceRandomReader(RandomAccessReader):
    """Row ``i`` of a list of Arrow/Parquet files, counting through the files in order.

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "rows.parquet")
        >>> pq.write_table(pa.table({"x": [5, 6, 7]}), path)
        >>> with HuggingFaceRandomReader([path, path]) as reader:
        ...     len(reader), reader.get_many([5, 0])
        (6, [{'x': np.int64(7)}, {'x': np.int64(5)}])
    """

    def __init__(self, paths: Sequence[str], columns: Sequence[str] | None = None,
                 decode_images: bool = False) -> None:
        super().__init__()
        self._files = [_OpenTable(path, columns, decode_images) for path in paths]
        counts = np.array([f.num_rows for f in self._files], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._length = int(self._starts[-1])

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> dict[str, Any]:
        return self.get_many([index])[0]

    def get_many(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        files = np.searchsorted(self._starts, positions, side="right") - 1
        local = positions - self._starts[files]
        out: list[Any] = [None] * len(positions)
        for file_index in np.unique(files).tolist():
            slots = np.flatnonzero(files == file_index)
            rows = self._files[file_index].take(local[slots])
            for slot, row in zip(slots.tolist(), rows, strict=True):
                out[slot] = row
        return out

    def close(self) -> None:
        self._files = []
