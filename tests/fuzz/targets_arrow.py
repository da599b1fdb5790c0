"""Fuzz targets: Hugging Face Arrow data (IPC streams, IPC files, ``save_to_disk`` folders) and
Parquet files.

Memory cap: 512 MiB per input (inputs are a few KB; local Arrow files are memory-mapped).
Beside the harness's byte mutations, half the mutants also get :func:`_arrow_mutation`: an
aligned integer set to a boundary value or nudged, which is what the length prefixes of IPC
messages, the buffer offsets and lengths of their metadata and the offsets inside string and
list buffers are (damage only pyarrow's full validation catches).
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fuzz_harness import FuzzTarget

import feedline as fl
from feedline.formats.huggingface import HuggingFaceRandomReader

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "huggingface"
MEMORY_CAP_MIB = 512
_INPUT = "input"  # every file a target reads has this in its name


def _tables() -> list[pa.Table]:
    """Small tables exercising the column types ``datasets`` writes and Arrow allows."""
    rows = 12
    mixed = pa.table({
        "text": [f"row {i} é" if i % 5 else None for i in range(rows)],
        "big": pa.array([f"x{i}" * i for i in range(rows)], pa.large_string()),
        "blob": pa.array([bytes([i]) * i for i in range(rows)], pa.binary()),
        "fixed": pa.array([bytes([i]) * 3 for i in range(rows)], pa.binary(3)),
        "label": pa.array([i % 3 for i in range(rows)], pa.int64()),
        "small": pa.array([i - 6 for i in range(rows)], pa.int8()),
        "score": pa.array([i / 4 if i % 4 else None for i in range(rows)], pa.float32()),
        "flag": [i % 2 == 0 for i in range(rows)],
        "tokens": pa.array([[f"t{j}" for j in range(i % 4)] for i in range(rows)],
                           pa.list_(pa.string())),
        "ids": pa.array([list(range(i)) if i % 6 else None for i in range(rows)],
                        pa.large_list(pa.int32())),
        "pair": pa.array([[i, i + 1] for i in range(rows)], pa.list_(pa.int16(), 2)),
        "meta": pa.array([{"source": f"s{i}", "year": 2000 + i} for i in range(rows)]),
        "kind": pa.array([["a", "b", "c"][i % 3] for i in range(rows)]).dictionary_encode(),
        "when": pa.array(np.arange(rows).astype("datetime64[s]")),
        "nothing": pa.nulls(rows),
    })
    grid_features = {"grid": {"shape": [2, 3], "dtype": "int32", "_type": "Array2D"},
                     "id": {"dtype": "int64", "_type": "Value"}}
    grid = pa.table({
        "grid": pa.array([np.arange(6, dtype=np.int32).reshape(2, 3).tolist()] * 5,
                         pa.list_(pa.list_(pa.int32()))),
        "id": pa.array(range(5), pa.int64())}).replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": grid_features}})})
    return [mixed, grid, pa.table({"x": pa.array([], pa.int64())})]


def _stream(table: pa.Table, chunk: int, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as out:
        out.write_table(table, max_chunksize=chunk)
    return sink.getvalue().to_pybytes()


def _file(table: pa.Table, chunk: int) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table, max_chunksize=chunk)
    return sink.getvalue().to_pybytes()


def _golden_arrow() -> list[bytes]:
    return [(GOLDEN / "cache.arrow").read_bytes(),
            (GOLDEN / "single" / "data-00000-of-00001.arrow").read_bytes()]


def _stream_corpus(folder: Path) -> list[bytes]:
    tables = _tables()
    return [*_golden_arrow(), _stream(tables[0], 4), _stream(tables[0], 100),
            _stream(tables[1], 2), _stream(tables[2], 1),
            _stream(tables[0], 6, compression="zstd"), _stream(tables[1], 5, "lz4")]


def _file_corpus(folder: Path) -> list[bytes]:
    tables = _tables()
    golden = pa.ipc.open_stream(_golden_arrow()[0]).read_all()
    return [_file(golden, 2), _file(tables[0], 5), _file(tables[1], 3), _file(tables[2], 1)]


def _read_all(ds: fl.HuggingFaceDataset, paths: list[str]) -> None:
    """What a user does: read in order, then at random (each batch validated both ways)."""
    for _ in ds:
        pass
    with HuggingFaceRandomReader(paths) as reader:
        if len(reader):
            reader.get_many(np.random.default_rng(0).permutation(len(reader)))


def _read_arrow(data: bytes, scratch: Path) -> None:
    path = scratch / f"{_INPUT}.arrow"
    path.write_bytes(_reshaped(data))
    _read_all(fl.HuggingFaceDataset(str(path)), [str(path)])


# ------------------------------------------------------------- save_to_disk folders
#: The first byte of a folder input says which of its files the rest replaces (the others
#: are the golden ``single/`` folder's), so that mutations reach the JSON files as well.
_MEMBERS = ("data-00000-of-00001.arrow", "state.json", "dataset_info.json", "dataset_dict.json")


def _folder_corpus(folder: Path) -> list[bytes]:
    single = GOLDEN / "single"
    info = json.loads((single / "dataset_info.json").read_text())
    info["splits"] = {"train": {"name": "train", "num_examples": 3, "num_bytes": 100}}
    state = json.loads((single / "state.json").read_text())
    state["_split"] = "train"
    return [bytes([0]) + (single / _MEMBERS[0]).read_bytes(),
            bytes([1]) + json.dumps(state).encode(),
            bytes([2]) + json.dumps(info).encode(),
            bytes([3]) + b'{"splits": ["train"]}']


def _read_folder(data: bytes, scratch: Path) -> None:
    data = _reshaped(data, keep=1)
    member = _MEMBERS[data[0] % len(_MEMBERS)] if data else _MEMBERS[0]
    root = scratch / f"{_INPUT}-folder"
    split = root / "train" if member == "dataset_dict.json" else root
    shutil.copytree(GOLDEN / "single", split)
    info = json.loads((split / "dataset_info.json").read_text())
    info["splits"] = {"train": {"name": "train", "num_examples": 3, "num_bytes": 100}}
    (split / "dataset_info.json").write_text(json.dumps(info))
    state = json.loads((split / "state.json").read_text())
    state["_split"] = "train"  # so that the row count is checked against dataset_info.json
    (split / "state.json").write_text(json.dumps(state))
    (root / member).write_bytes(data[1:])
    ds = fl.HuggingFaceDataset(str(root), split="train" if member == "dataset_dict.json"
                               else None, check_row_count=True)
    _read_all(ds, list(ds.filenames))


# ------------------------------------------------------------------------ Parquet
def _parquet(table: pa.Table, **options) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    return sink.getvalue().to_pybytes()


def _parquet_corpus(folder: Path) -> list[bytes]:
    mixed, grid, empty = _tables()
    mixed = mixed.drop_columns(["nothing"])
    return [(GOLDEN / "cache.parquet").read_bytes(),
            _parquet(mixed, row_group_size=5, compression="none"),
            _parquet(mixed, row_group_size=4, compression="snappy", use_dictionary=False),
            _parquet(mixed, compression="zstd", write_statistics=False, data_page_size=64),
            _parquet(grid, row_group_size=2, compression="gzip", write_page_index=True),
            _parquet(empty)]


def _read_parquet(data: bytes, scratch: Path) -> None:
    path = scratch / f"{_INPUT}.parquet"
    path.write_bytes(_reshaped(data))
    for _ in fl.ParquetDataset(str(path)):
        pass
    for _ in fl.ParquetDataset(str(path), batch_size=3):
        pass


def _read_parquet_hf(data: bytes, scratch: Path) -> None:
    path = scratch / f"{_INPUT}.parquet"
    path.write_bytes(_reshaped(data))
    _read_all(fl.HuggingFaceDataset(str(path)), [str(path)])


# ----------------------------------------------------------- structure-aware mutation
def _arrow_mutation(data: bytes, rng: random.Random) -> bytes:
    """One IPC-aware change: an aligned 32- or 64-bit integer (a length prefix, an offset,
    a buffer length or a row count) set to a boundary value or nudged."""
    out = bytearray(data)
    if len(out) < 8:
        return bytes(out)
    width = rng.choice((4, 8))
    at = rng.randrange(0, len(out) - width + 1) & ~(width - 1)
    form = "<i" if width == 4 else "<q"
    (value,) = struct.unpack_from(form, out, at)
    limit = (1 << (8 * width - 1)) - 1
    value = rng.choice([0, -1, 1, limit, -limit - 1, value + 1, value - 1, value * 2,
                        value + rng.randint(-64, 64), len(out), len(out) * 1000])
    struct.pack_into(form, out, at, max(-limit - 1, min(limit, value)))
    return bytes(out)


_VALID: set[bytes] = set()


def _corpus(build):
    """``build``, remembering its inputs: only mutants get the IPC-aware change."""
    def corpus(folder: Path) -> list[bytes]:
        inputs = build(folder)
        _VALID.update(inputs)
        return inputs
    return corpus


def _reshaped(data: bytes, keep: int = 0) -> bytes:
    """A mutant (not a valid corpus input) given, half the time, an IPC-aware change too,
    seeded by its bytes (so the saved input of a failure reproduces it); the first ``keep``
    bytes are left alone."""
    if data in _VALID:
        return data
    rng = random.Random(zlib.crc32(data))
    if rng.random() < 0.5:
        return data[:keep] + _arrow_mutation(data[keep:], rng)
    return data


def _names_file(error: BaseException, scratch: Path | None) -> str | None:
    if _INPUT in str(getattr(error, "path", None) or "") or _INPUT in str(error):
        return None
    return "the error does not name the file"


_ALLOWED = (fl.FeedlineError,)

TARGETS = {
    "hf_arrow_stream": FuzzTarget(corpus=_corpus(_stream_corpus), read=_read_arrow,
                                  allowed=_ALLOWED, where=_names_file,
                                  memory_cap_mib=MEMORY_CAP_MIB),
    "hf_arrow_file": FuzzTarget(corpus=_corpus(_file_corpus), read=_read_arrow,
                                allowed=_ALLOWED, where=_names_file,
                                memory_cap_mib=MEMORY_CAP_MIB),
    # A missing data file (a damaged name in state.json) is a FileNotFoundError naming it.
    "hf_saved_folder": FuzzTarget(corpus=_corpus(_folder_corpus), read=_read_folder,
                                  allowed=(*_ALLOWED, FileNotFoundError), where=_names_file,
                                  memory_cap_mib=MEMORY_CAP_MIB),
    "parquet": FuzzTarget(corpus=_corpus(_parquet_corpus), read=_read_parquet,
                          allowed=_ALLOWED, where=_names_file, memory_cap_mib=MEMORY_CAP_MIB),
    "hf_parquet": FuzzTarget(corpus=_corpus(_parquet_corpus), read=_read_parquet_hf,
                             allowed=_ALLOWED, where=_names_file,
                             memory_cap_mib=MEMORY_CAP_MIB),
}
