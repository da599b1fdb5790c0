"""Fuzz targets: prepared TFDS folders read with ``fl.datasets.load``.

An input is a folder packed into one blob (``@@@ <name>`` lines between the files), so the
harness's byte mutations reach every file of it. Three targets share the golden folders of
``tests/data/tfds`` (every feature type, several splits and shards, TFRecord and ArrayRecord,
supervised keys) as their corpus:

* ``tfds_folder``: the whole folder, byte for byte (metadata and framed shards).
* ``tfds_metadata``: ``dataset_info.json`` and ``features.json`` only, with JSON-aware
  mutations (values of other types, out-of-range counts, deep nesting, odd templates)
  seeded from the input, over intact shards: damage the shards' checksums would hide.
* ``tfds_records``: the shards' record payloads, framed anew (valid checksums) after they are
  mutated, so that damaged Examples reach the decoders and records go missing or appear.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from pathlib import Path
from typing import Any

from fuzz_harness import FuzzTarget

import feedline as fl

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "tfds"
FOLDERS = ["fl_features/1.0.0", "fl_order/small/1.0.0", "fl_order/big/1.1.0", "fl_array/2.0.0"]
MARK = b"\n@@@ "
RECORD = b"\n@@R\n"
_NAME = re.compile(r"^[\w.+-]{1,200}$")
_METADATA = ("dataset_info.json", "features.json")
# What the metadata and records targets do not mutate, per corpus folder (set by corpus()).
_FIXED: dict[int, dict[str, bytes]] = {}
_READ = fl.datasets.ReadConfig(num_parallel_calls_for_interleave_files=None,
                               num_parallel_calls_for_decode=None)


# --------------------------------------------------------------------------- packing
def pack(files: dict[str, bytes]) -> bytes:
    return b"".join(MARK + name.encode() + b"\n" + data for name, data in files.items())


def unpack(blob: bytes) -> dict[str, bytes]:
    """The files of a blob; a damaged name (not a plain file name) drops its file."""
    files = {}
    for part in blob.split(MARK)[1:]:
        name, _, data = part.partition(b"\n")
        text = name.decode("latin-1")
        if _NAME.match(text) and text not in (".", ".."):
            files[text] = data
    return files


def _golden(folder: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((GOLDEN / folder).iterdir()) if p.is_file()}


def _write(scratch: Path, files: dict[str, bytes]) -> Path:
    folder = scratch / "data" / "ds" / "1.0.0"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return scratch / "data"


def _load_everything(data_dir: Path, data: bytes) -> None:
    """Read every split as a user would: each element, decoded; supervised too when the
    dataset has supervised keys (one input in two)."""
    splits = fl.datasets.load("ds", data_dir=data_dir, read_config=_READ)
    for ds in splits.values():
        for _ in ds:
            pass
    if zlib.crc32(data) & 1:
        try:
            supervised = fl.datasets.load("ds", data_dir=data_dir, read_config=_READ,
                                          as_supervised=True)
        except fl.InvalidArgumentError as error:
            if "has no supervised_keys" in str(error):
                return
            raise
        for ds in supervised.values():
            for _ in ds:
                pass


def _names_the_folder(error: BaseException, scratch: Path | None) -> str | None:
    """Every error names a file of the folder (or the folder) it is about."""
    where = str(error) + str(getattr(error, "path", "") or "")
    if scratch is not None and str(scratch) in where:
        return None
    return "the error does not name the file (or the dataset folder) it is about"


# --------------------------------------------------------------------------- tfds_folder
def _folder_corpus(work: Path) -> list[bytes]:
    return [pack(_golden(folder)) for folder in FOLDERS]


def _read_folder(data: bytes, scratch: Path) -> None:
    _load_everything(_write(scratch, unpack(data)), data)


# --------------------------------------------------------------------------- tfds_metadata
_ODD_VALUES: list[Any] = [
    -1, "-1", 0, "0", 1, 2**63, str(2**64), 1.5, "2.5", "abc", "", True, None, [], {}, [1],
    {"a": 1}, "x" * 300, "{SHARD_INDEX:999999999}", "../../../{SHARD_X_OF_Y}",
    "/etc/passwd", "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX}", "{SPLIT.__class__}",
    "{HOME}-{SHARD_X_OF_Y}", "{SHARD_X_OF_Y}/../../x", "train", "..", "int64", "float32",
    "string", "uint8", "zlib", "bytes",
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if len(prefix) > 64:  # a document an earlier change nested deeply: not walked further
        return out
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def _mutate_json(doc: Any, rng: random.Random) -> Any:
    """One structural change of a decoded JSON document."""
    paths = _paths(doc)
    path = rng.choice(paths)
    kind = rng.randrange(7)
    if not path:
        return rng.choice([[doc], {"x": doc}, doc]) if kind == 0 else doc
    parent, key = _at(doc, path[:-1]), path[-1]
    if kind <= 2:  # a value of another type or range
        parent[key] = rng.choice(_ODD_VALUES)
    elif kind == 3:  # removed
        del parent[key]
    elif kind == 4:  # nested deeper
        value = parent[key]
        for _ in range(rng.choice([1, 5, 40, 400])):
            value = rng.choice([[value], {"tuple": {"items": [value]}},
                                {"featuresDict": {"features": {"x": value}}}])
        parent[key] = value
    elif kind == 5:  # a list grows or shrinks, or a dict gets a copy of a sibling's value
        value = parent[key]
        if isinstance(value, list) and value:
            if rng.randrange(2):
                value.append(rng.choice(value))
            else:
                value.pop(rng.randrange(len(value)))
        elif isinstance(parent, dict):
            parent[rng.choice(list(parent))] = parent[key]
    else:  # an integer (as proto-JSON writes them) moved a little
        value = parent[key]
        if isinstance(value, str) and value.lstrip("-").isdigit():
            parent[key] = str(int(value) + rng.choice([-1, 1, -1000, 10**6]))
        elif isinstance(value, int) and not isinstance(value, bool):
            parent[key] = value + rng.choice([-1, 1, -1000])
    return doc


_PRISTINE: dict[int, dict[str, bytes]] = {}


def _metadata_corpus(work: Path) -> list[bytes]:
    out = []
    for index, folder in enumerate(FOLDERS):
        files = _golden(folder)
        _FIXED[index] = {k: v for k, v in files.items() if k not in _METADATA}
        _PRISTINE[index] = {k: files[k] for k in _METADATA}
        out.append(pack({"corpus": str(index).encode(), **_PRISTINE[index]}))
    return out


def _read_metadata(data: bytes, scratch: Path) -> None:
    files = unpack(data)
    try:
        index = int(files.get("corpus", b"0"))
    except ValueError:
        index = 0
    if index not in _FIXED:
        index = 0
    files = {k: v for k, v in files.items() if k in _METADATA}
    rng = random.Random(zlib.crc32(data))
    # One input in four is read as the byte mutation left it; the others get structural
    # changes of their JSON (of the corpus's JSON where the byte mutation broke it), which
    # byte mutations alone rarely make: a value of another type, a count out of range.
    if rng.randrange(4):
        docs = {}
        for name in _METADATA:
            try:
                docs[name] = json.loads(files[name])
            except (KeyError, ValueError, RecursionError):
                docs[name] = json.loads(_PRISTINE[index][name])
                files[name] = _PRISTINE[index][name]
        name = rng.choice(_METADATA)
        doc = docs[name]
        for _ in range(rng.randint(1, 3)):
            doc = _mutate_json(doc, rng)
        try:
            files[name] = json.dumps(doc).encode()
        except (RecursionError, ValueError):
            pass
    _load_everything(_write(scratch, {**_FIXED[index], **files}), data)


# --------------------------------------------------------------------------- tfds_records
_SHARDS: dict[int, list[str]] = {}


def _records_corpus(work: Path) -> list[bytes]:
    out = []
    for index, folder in enumerate(FOLDERS[:3]):  # TFRecord shards (framed anew)
        files = _golden(folder)
        _FIXED[100 + index] = {k: v for k, v in files.items() if ".tfrecord-" not in k}
        _SHARDS[100 + index] = sorted(k for k in files if ".tfrecord-" in k)
        shards = {}
        for name in _SHARDS[100 + index]:
            path = work / name
            path.write_bytes(files[name])
            shards[name] = RECORD.join(bytes(r) for r in fl.TFRecordDataset(str(path)))
        out.append(pack({"corpus": str(100 + index).encode(), **shards}))
    return out


def _read_records(data: bytes, scratch: Path) -> None:
    files = unpack(data)
    try:
        index = int(files.pop("corpus", b"100"))
    except ValueError:
        index = 100
    if index not in _FIXED:
        index = 100
    folder = scratch / "data" / "ds" / "1.0.0"
    data_dir = _write(scratch, _FIXED[index])
    rng = random.Random(zlib.crc32(data))
    # A shard the mutation cut off is there, empty: a truncated shard, not a missing one.
    shards = {name: files.get(name, b"") for name in _SHARDS[index]}
    shards.update({k: v for k, v in files.items() if ".tfrecord-" in k})
    for name, payload in shards.items():
        records = payload.split(RECORD) if payload else []
        if records and rng.randrange(3) == 0:  # whole records lost, repeated or cut short
            at = rng.randrange(len(records))
            kind = rng.randrange(4)
            if kind == 0:
                del records[at:]
            elif kind == 1:
                del records[at]
            elif kind == 2:
                records.insert(at, records[at])
            else:
                records[at] = records[at][:rng.randrange(len(records[at]) + 1)]
        with fl.TFRecordWriter(str(folder / name)) as writer:
            for record in records:
                writer.write(record)
    _load_everything(data_dir, data)


TARGETS = {
    "tfds_folder": FuzzTarget(corpus=_folder_corpus, read=_read_folder,
                              allowed=(fl.FeedlineError,), where=_names_the_folder,
                              memory_cap_mib=768),
    "tfds_metadata": FuzzTarget(corpus=_metadata_corpus, read=_read_metadata,
                                allowed=(fl.FeedlineError,), where=_names_the_folder,
                                memory_cap_mib=768),
    "tfds_records": FuzzTarget(corpus=_records_corpus, read=_read_records,
                               allowed=(fl.FeedlineError,), where=_names_the_folder,
                               memory_cap_mib=768),
}
