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
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from feedline.core.errors import DataLossError
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
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"HuggingFaceDataset: {what} {path} is not valid JSON: {error}"
                         ) from None


def resolve_files(path: Any, split: str | None) -> tuple[list[str], dict[str, Any]]:
    """The data files of a saved dataset (or of ``split`` of a dataset dict or cache folder),
    in order, and its ``dataset_info.json`` (``{}`` if there is none).

    Example:
        >>> import json, os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "state.json"), "w") as f:
        ...     json.dump({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}, f)
        >>> files, info = resolve_files(folder, None)
        >>> [os.path.basename(f) for f in files], info
        (['data-00000-of-00001.arrow'], {})
    """
    if isinstance(path, (list, tuple)):
        names = [path_name(p) for p in path]
        if split is not None:
            raise ValueError("HuggingFaceDataset: split= chooses a split of a folder; a list "
                             "of files has none")
        return names, {}
    path = path_name(path)
    fs, inner = _fs(path)
    prefix = path[:len(path) - len(inner)] if path.endswith(inner) else ""
    if not fs.exists(inner):
        raise FileNotFoundError(errno.ENOENT, "HuggingFaceDataset: no such file or folder",
                                path)
    if fs.isfile(inner):
        if split is not None:
            raise ValueError(f"HuggingFaceDataset: split={split!r} chooses a split of a "
                             f"folder; {path} is one file")
        return [path], {}
    entries = {os.path.basename(e.rstrip("/")) for e in fs.ls(inner, detail=False)}
    if "dataset_dict.json" in entries:
        splits = list(_read_json(fs, _join(inner, "dataset_dict.json"), "the split list")
                      .get("splits", []))
        if split is None or split not in splits:
            raise ValueError(
                f"HuggingFaceDataset: {path} is a DatasetDict with splits {splits}; "
                + ("pass split=" if split is None else f"it has no split {split!r}")
                + " (one of them)")
        return resolve_files(prefix + _join(inner, split), None)
    if "state.json" in entries:
        state = _read_json(fs, _join(inner, "state.json"), "the state file")
        if split is not None and state.get("_split") not in (None, split):
            raise ValueError(f"HuggingFaceDataset: {path} holds split {state['_split']!r}, "
                             f"not {split!r}")
        info = (_read_json(fs, _join(inner, "dataset_info.json"), "the dataset info")
                if "dataset_info.json" in entries else {})
        files = [prefix + _join(inner, f["filename"]) for f in state.get("_data_files", [])]
        return files, info
    found: dict[str, list[str]] = {}
    for name in sorted(entries):
        match = _CACHE_FILE.search(name)
        if match and not name.startswith("cache-"):
            found.setdefault(match.group("split"), []).append(prefix + _join(inner, name))
    if not found:
        raise ValueError(
            f"HuggingFaceDataset: {path} is not a saved Hugging Face dataset: it has no "
            "state.json (Dataset.save_to_disk), no dataset_dict.json "
            "(DatasetDict.save_to_disk) and no <name>-<split>.arrow or .parquet cache files")
    if split is None or split not in found:
        raise ValueError(f"HuggingFaceDataset: {path} is a cache folder with splits "
                         f"{sorted(found)}; "
                         + ("pass split=" if split is None else f"it has no split {split!r}"))
    info = (_read_json(fs, _join(inner, "dataset_info.json"), "the dataset info")
            if "dataset_info.json" in entries else {})
    return found[split], info


# ------------------------------------------------------------------------ reading a file
def open_table(path: str) -> Any:
    """The whole table of an Arrow (IPC stream or file) or Parquet file; local Arrow files
    are memory-mapped (nothing is read until a column is used).

    Raises:
        FileNotFoundError: There is no such file.
        DataLossError: The file is damaged or not Arrow/Parquet; the message names it.
    """
    pa = _pyarrow()
    local = path.removeprefix("file://") if _is_local(path) else None
    if local is not None and not os.path.isfile(local):
        raise FileNotFoundError(errno.ENOENT, "HuggingFaceDataset: no such file", path)
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            if local is not None:
                return pq.read_table(local, memory_map=True)
            with open_file(path, "rb") as file:
                return pq.read_table(file)
        if local is not None:
            source = pa.memory_map(local)
        else:
            with open_file(path, "rb") as file:
                source = pa.BufferReader(file.read())
        try:
            return pa.ipc.open_stream(source).read_all()  # what `datasets` writes
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_file(source).read_all()
    except pa.ArrowException as error:
        kind = "Parquet" if path.endswith(".parquet") else "Arrow"
        raise DataLossError(f"HuggingFaceDataset: cannot read {path} as an {kind} file: "
                            f"{error}", path=path) from error


def table_features(table: Any) -> dict[str, Any]:
    """The ``datasets`` features stored in an Arrow schema's metadata (``{}`` if none)."""
    metadata = table.schema.metadata or {}
    try:
        stored = json.loads(metadata.get(b"huggingface", b"{}"))
    except ValueError:
        return {}
    return (stored.get("info") or {}).get("features") or {}


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
    converted = [_values(pa, table.column(name).combine_chunks(), features.get(name))
                 for name in columns]
    if decode_images:
        for position, name in enumerate(columns):
            if (features.get(name) or {}).get("_type") == "Image":
                converted[position] = [_decode(value, name, path)
                                       for value in converted[position]]
    return [dict(zip(columns, row, strict=True)) for row in zip(*converted, strict=True)] \
        if columns else [{} for _ in range(table.num_rows)]


def _decode(value: Any, column: str, path: str) -> Any:
    """An ``Image`` value (``{"bytes", "path"}``) as a ``uint8`` array (height, width,
    channels), as ``datasets`` decodes it (its own channels; palette images to RGB)."""
    if value is None:
        return None
    contents = value.get("bytes")
    if contents is None:
        source = value.get("path")
        if source is None:
            return None
        with open_file(source.decode(), "rb") as file:
            contents = file.read()
    from PIL import Image

    with Image.open(io.BytesIO(contents)) as picture:
        if picture.mode not in ("L", "RGB", "RGBA", "LA", "I", "F", "I;16"):
            picture = picture.convert("RGB")
        array = np.asarray(picture)
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

    Values convert as ``datasets`` stores them: numbers and bools to NumPy scalars of their
    dtype, strings to ``bytes`` (as :class:`~feedline.ParquetDataset` and every feedline
    reader give text), ``ClassLabel`` to its ``int64`` index (names in :attr:`features`),
    sequences of numbers to 1-D arrays, sequences of strings to object arrays of ``bytes``,
    ``Array2D``-``Array5D`` to arrays of their shape, dicts to dicts. A null is NaN in a
    float column and ``None`` elsewhere.

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
                 block_size: int | None = None, name: str | None = None) -> None:
        _pyarrow()
        if isinstance(columns, str):
            raise TypeError(f"HuggingFaceDataset: columns must be a list of column names, not "
                            f"a single string ({columns!r}); use [{columns!r}]")
        files, info = resolve_files(path, split)
        self.path = path if isinstance(path, (list, tuple)) else path_name(path)
        self.split = split
        self.info: dict[str, Any] = info
        self.features: dict[str, Any] = dict(info.get("features") or {})
        self.columns = None if columns is None else [str(c) for c in columns]
        self.decode_images = bool(decode_images)
        block_size = validate_optional_int(block_size, f"{self.READER}(block_size)", minimum=1,
                                           hint="None or a positive integer")
        self.block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
        self.name = name or "huggingface"
        self._setup(files, None, {})

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
    """One data file: its table, its columns to read and their features."""

    def __init__(self, path: str, columns: Sequence[str] | None, decode_images: bool) -> None:
        self.pa = _pyarrow()
        self.path = path
        self.table = open_table(path)
        names = self.table.schema.names
        self.columns = list(names) if columns is None else list(columns)
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise ValueError(f"HuggingFaceDataset: {path} has no column(s) {missing}; its "
                             f"columns are {names}")
        self.features = table_features(self.table)
        self.decode_images = decode_images

    def rows(self, table: Any) -> list[dict[str, Any]]:
        try:
            return _rows(self.pa, table, self.columns, self.features, self.decode_images,
                         self.path)
        except self.pa.ArrowException as error:
            raise DataLossError(f"HuggingFaceDataset: cannot read rows of {self.path}: "
                                f"{error}", path=self.path) from error


class _TableCursor(RecordCursor):
    def __init__(self, node: HuggingFaceDataset, path: str, row: int) -> None:
        self._file = _OpenTable(path, node.columns, node.decode_images)
        self._row = row  # the next row handed out
        self._block: list[dict[str, Any]] = []
        self._taken = 0
        self._block_size = node.block_size

    def read(self) -> dict[str, Any]:
        if self._taken >= len(self._block):
            table = self._file.table
            if self._row >= table.num_rows:
                raise StopIteration
            self._block = self._file.rows(table.slice(self._row, self._block_size))
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
        counts = np.array([f.table.num_rows for f in self._files], dtype=np.int64)
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
            opened = self._files[file_index]
            rows = opened.rows(opened.table.take(opened.pa.array(local[slots])))
            for slot, row in zip(slots.tolist(), rows, strict=True):
                out[slot] = row
        return out

    def close(self) -> None:
        self._files = []
