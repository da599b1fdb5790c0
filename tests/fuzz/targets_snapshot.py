"""Fuzz targets: ``fl.Dataset.load`` of a damaged saved dataset (manifest and chunk files).

A saved dataset is a folder, and the harness mutates bytes: an input is the folder packed
into one byte string (:func:`pack`: each file as a ``\\x00FILE:<relative path>\\n`` line, then
its bytes), unpacked into the scratch folder before it is loaded. Byte mutations then damage
the files (and sometimes merge, rename or drop one). Most of them hit a chunk's CRC32C; the
``saved_structured`` target adds damage that knows the layout (:func:`damage`): manifest
fields changed, with its checksum recomputed half the time (a manifest consistent with
itself but wrong), chunk files swapped, copied over one another, dropped, cut at a frame, or
taken from another save.

Beyond the harness's checks (no crash, no hang, feedline errors naming the file), a load that
succeeds must yield exactly the elements of one of the valid saves, and a cardinality that
agrees: damage is detected, never read as other data.
"""

from __future__ import annotations

import collections
import hashlib
import json
import random
import re
import uuid
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_harness import FuzzTarget

import feedline as fl

_MARK = b"\x00FILE:"
_NAME = re.compile(r"(save-[0-9a-f]{32}/)?(dataset\.json|progress\.json|"
                   r"shard-\d{5}/chunk-\d{5}\.flchunk)")
Pair = collections.namedtuple("Pair", "left right")

_STATE: dict[str, Any] = {"corpus": set(), "expected": set(), "files": []}
"""What the corpus builder leaves for the reads of the same child: the valid inputs, the
digests of the valid saves' elements, and each valid save's files."""


def pack(folder: Path) -> bytes:
    """The files under ``folder`` as one byte string (see the module doc)."""
    out = bytearray()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        out += _MARK + str(path.relative_to(folder)).encode() + b"\n" + path.read_bytes()
    return bytes(out)


def unpack(data: bytes) -> dict[str, bytes]:
    """The files :func:`pack` packed, as far as damaged bytes still name any: pieces whose
    name is not one a saved dataset has are dropped (a fuzz input writes only there)."""
    files = {}
    for piece in data.split(_MARK)[1:]:
        name, _, content = piece.partition(b"\n")
        text = name.decode("utf-8", "replace")
        if _NAME.fullmatch(text):
            files[text] = content
    return files


def _write(files: dict[str, bytes], folder: Path) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _canonical(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype == object:
            return ("O", array.shape, [_canonical(v) for v in array.reshape(-1).tolist()])
        return (array.dtype.str, array.shape, array.tobytes())
    if isinstance(value, dict):
        return ("d", sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, tuple | list):
        return (type(value).__name__, [_canonical(v) for v in value])
    return (type(value).__name__, repr(value))


def _digest(elements: list[Any]) -> str:
    return hashlib.sha256(repr([_canonical(e) for e in elements]).encode()).hexdigest()


# --------------------------------------------------------------------------- corpus
def _record(x: Any) -> dict[str, Any]:
    i = int(x)
    return {"id": np.int64(i), "image": np.full((3, 4), i, np.uint8), "raw": b"r" * (i % 7),
            "text": f"t{i}", "names": np.array([b"a" * (i % 3), b"b"], dtype=object)}


def _pair(x: Any) -> Pair:
    i = int(x)
    return Pair(np.float32(i) / 3, (np.arange(i % 5, dtype=np.int16), i, i / 2, i % 2 == 0))


def _big(x: Any) -> dict[str, Any]:  # 280 KB: a frame of its own, read back as a view
    return {"board": np.arange(70_000, dtype=np.int32) + int(x), "i": np.int64(x)}


def _saves(folder: Path) -> list[Path]:
    """Several valid saves, each exercising other features of the layout."""
    made = []

    def save(name: str, dataset: fl.Dataset, **kwargs: Any) -> None:
        made.append(folder / name)
        dataset.save(str(folder / name), **kwargs)

    save("records", fl.Dataset.range(30).map(_record), compression="AUTO",
         checkpoint_args={"checkpoint_interval": 300})
    save("sharded", fl.Dataset.range(24).map(_pair), shard_func=lambda p: int(p.right[1]) % 3,
         checkpoint_args={"checkpoint_interval": 200})
    save("gzip", fl.Dataset.range(12).map(_pair), compression="GZIP",
         checkpoint_args={"checkpoint_interval": 150})
    save("lz4", fl.Dataset.range(20).map(_record), compression="LZ4")
    save("big", fl.Dataset.range(2).map(_big), compression=None)
    save("empty", fl.Dataset.range(0))
    save("resaved", fl.Dataset.range(5))
    save("resaved", fl.Dataset.range(9).map(lambda x: x * 3),  # replaced: the new one stays
         checkpoint_args={"checkpoint_interval": 20})
    made.pop()
    # As an older feedline saved it: the chunks beside a dataset.json naming no folder.
    source = folder / "records"
    legacy = folder / "legacy"
    manifest = json.loads((source / "dataset.json").read_text())
    for path in (source / manifest.pop("root")).rglob("*.flchunk"):
        target = legacy / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    del manifest["manifest_checksum"]
    (legacy / "dataset.json").write_text(json.dumps(manifest))
    made.append(legacy)
    return made


def _corpus(folder: Path) -> list[bytes]:
    from feedline.snapshot import store

    # Save ids and times fixed: the same corpus, so the same mutants, on every run.
    ids = random.Random(41)
    real_uuid4, real_time = uuid.uuid4, store.time
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128))  # type: ignore[assignment]
    store.time = type("FixedTime", (), {"time": staticmethod(lambda: 1.7e9)})  # type: ignore
    try:
        saves = _saves(folder)
    finally:
        uuid.uuid4, store.time = real_uuid4, real_time
    corpus = []
    for saved in saves:
        data = pack(saved)
        assert unpack(data).keys() == {str(p.relative_to(saved)) for p in saved.rglob("*")
                                       if p.is_file()}, saved
        with iter(fl.Dataset.load(str(saved))) as it:
            _STATE["expected"].add(_digest(list(it)))
        _STATE["files"].append(unpack(data))
        corpus.append(data)
    _STATE["corpus"] = set(corpus)
    return corpus


# --------------------------------------------------------------------------- structured damage
def _json_edit(value: Any, rng: random.Random) -> Any:
    """``value`` with one field somewhere in it changed, removed or added."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(sorted(value))
        roll = rng.random()
        if roll < 0.15:
            del value[key]
        elif roll < 0.25:
            value[key + "x"] = value[key]
        else:
            value[key] = _json_edit(value[key], rng)
        return value
    if isinstance(value, list) and value and rng.random() < 0.8:
        roll, at = rng.random(), rng.randrange(len(value))
        if roll < 0.2:
            value.pop(at)
        elif roll < 0.35:
            value.insert(at, value[at])
        elif roll < 0.5:
            other = rng.randrange(len(value))
            value[at], value[other] = value[other], value[at]
        else:
            value[at] = _json_edit(value[at], rng)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return rng.choice([0, 1, -1, "x", None, [], {}, 2**64, "../x",
                           "save-" + "0" * 32, 1.5])
    return rng.choice([value + 1, value - 1, 0, -value, value * 2, 2**63, 10**30, str(value),
                       float("inf")])


def _edit_manifest(files: dict[str, bytes], name: str, rng: random.Random) -> None:
    from feedline.snapshot.store import manifest_checksum

    try:
        manifest = json.loads(files[name])
    except ValueError:
        return
    manifest = _json_edit(manifest, rng)
    if isinstance(manifest, dict) and "manifest_checksum" in manifest and rng.random() < 0.5:
        # Consistent with itself, wrong about the files: only the deeper checks can tell.
        try:
            manifest["manifest_checksum"] = manifest_checksum(manifest)
        except (TypeError, ValueError):
            pass
    files[name] = json.dumps(manifest).encode()


def damage(files: dict[str, bytes], rng: random.Random) -> None:
    """One to three changes that know a saved dataset's layout (see the module doc)."""
    for _ in range(rng.randint(1, 3)):
        chunks = sorted(n for n in files if n.endswith(".flchunk"))
        manifests = sorted(n for n in files if n.endswith(".json"))
        kind = rng.randrange(8)
        if kind <= 1 and manifests:
            _edit_manifest(files, rng.choice(manifests), rng)
        elif kind == 2 and len(chunks) >= 2:  # two chunks swapped
            a, b = rng.sample(chunks, 2)
            files[a], files[b] = files[b], files[a]
        elif kind == 3 and len(chunks) >= 2:  # one copied over another
            a, b = rng.sample(chunks, 2)
            files[b] = files[a]
        elif kind == 4 and chunks:  # one lost
            del files[rng.choice(chunks)]
        elif kind == 5 and chunks:  # one cut short, or given a tail
            name = rng.choice(chunks)
            data = files[name]
            files[name] = data[:rng.randrange(len(data) + 1)] if rng.random() < 0.7 else \
                data + bytes(rng.randrange(1, 128))
        elif kind == 6 and chunks:  # a byte of a chunk's header (not its payload) changed
            name = rng.choice(chunks)
            data = bytearray(files[name])
            at = rng.randrange(min(len(data), 400) or 1)
            if data:
                data[at] = rng.randrange(256)
            files[name] = bytes(data)
        elif kind == 7 and chunks:  # a file from another save put in its place
            other = rng.choice(_STATE["files"])
            if other:
                source = rng.choice(sorted(other))
                files[rng.choice(chunks + manifests)] = other[source]


# --------------------------------------------------------------------------- reading
def _load(files: dict[str, bytes], scratch: Path) -> None:
    folder = scratch / "saved"
    folder.mkdir()
    _write(files, folder)
    dataset = fl.Dataset.load(str(folder))
    cardinality = dataset.cardinality()
    with iter(dataset) as it:
        elements = list(it)
    if _digest(elements) not in _STATE["expected"]:
        raise AssertionError(f"a damaged save read as other data: {len(elements)} elements, "
                             "none of the valid saves")
    if cardinality >= 0 and cardinality != len(elements):
        raise AssertionError(f"cardinality {cardinality}, but {len(elements)} elements read")


def _read_bytes(data: bytes, scratch: Path) -> None:
    _load(unpack(data), scratch)


def _read_structured(data: bytes, scratch: Path) -> None:
    files = unpack(data)
    if data not in _STATE["corpus"]:  # the valid inputs must read as they are
        damage(files, random.Random(zlib.crc32(data)))
    _load(files, scratch)


def _names_file(error: BaseException, scratch: Path | None) -> str | None:
    if getattr(error, "path", None) or (scratch is not None and str(scratch) in str(error)):
        return None
    return "the error does not name the file"


_ALLOWED = (fl.FeedlineError, FileNotFoundError)  # FileNotFoundError: nothing (whole) saved

TARGETS = {
    "saved_bytes": FuzzTarget(corpus=_corpus, read=_read_bytes, allowed=_ALLOWED,
                              where=_names_file, memory_cap_mib=512),
    "saved_structured": FuzzTarget(corpus=_corpus, read=_read_structured, allowed=_ALLOWED,
                                   where=_names_file, memory_cap_mib=512),
}
