"""A folder of chunk files written in committed rounds, resumable after a crash.

Layout of a store folder::

    progress.json            committed rounds so far: chunks per shard, elements, the
                             writer's input state after the last committed round
    shard-00000/chunk-00000.flchunk, chunk-00001.flchunk, ...
    dataset.json             written last, when the input ended: the store is complete

Both JSON files (format 2) hold the store's random id (``store_id``), and, per shard, each
chunk's checksum and element count (``checksums``, ``counts``). Every chunk carries the
store's id, its shard and its number in its header; readers check them and the checksum
(:class:`~feedline.snapshot.chunks.ChunkIdentity`), so a chunk file swapped, copied, or taken
from another store is a :class:`~feedline.core.errors.DataLossError`, never elements out of
order, twice or missing. Complete stores of format 1 (no ids) are still read, unchecked; a
partial one is started again.

A round gathers elements (bounded by :data:`ROUND_BYTES` of encoded size) in one chunk per
shard, writes those chunks, then rewrites ``progress.json`` atomically. Elements are encoded
as they come without copying their large arrays (:func:`~feedline.snapshot.codec.
element_parts`), and each frame of a chunk (:mod:`feedline.snapshot.chunks`) starts
compressing on the writer's threads as soon as it is full -- zstd releases the GIL, so
compression runs on every core while the pipeline produces the next elements. A crash at
any moment leaves the committed rounds intact: the next writer of the same store deletes
chunk files no round committed, loads the input state of the last committed round and goes
on from there -- nothing is recomputed before it and nothing is lost. Memory stays bounded
by the rounds in flight (three at most by default), whatever the dataset's size.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import fsspec

from feedline.core.errors import CheckpointError, DataLossError
from feedline.snapshot.chunks import (
    ChunkBuilder,
    ChunkIdentity,
    chunk_parts,
    crc32c,
    header_checksum,
    pack_frame,
    write_file,
)

ROUND_BYTES = 16 << 20
"""Encoded bytes a round may buffer before it is committed (per store writer)."""
MANIFEST = "dataset.json"
PROGRESS = "progress.json"
CHUNK_SUFFIX = ".flchunk"
FORMAT = 2
"""Version of the store layout: 2 added chunk identities (store id, shard, number) and the
checksums and element counts of the chunks in the JSON files; 1 had none."""


def join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts)


def chunk_path(folder: str, shard: int, chunk: int) -> str:
    return join(folder, f"shard-{shard:05d}", f"chunk-{chunk:05d}{CHUNK_SUFFIX}")


def filesystem(path: str) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(path)


def read_json(path: str) -> dict[str, Any] | None:
    """A JSON file's content, ``None`` if it does not exist."""
    fs, inner = filesystem(path)
    try:
        with fs.open(inner, "rb") as file:
            return json.loads(file.read())
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise DataLossError(f"{path}: damaged JSON: {error}", path=path) from None


def write_json(path: str, value: dict[str, Any]) -> None:
    write_file(path, json.dumps(value, sort_keys=True, indent=1).encode())


class StoreWriter:
    """Writes elements into a store folder in committed rounds (see the module doc).

    Args:
        folder: The store's folder (created if needed).
        compression: A canonical compression name (:func:`~feedline.snapshot.chunks.
            compression_of`).
        shard_of: Element to shard number (``save``'s ``shard_func``), or ``None``: one shard.
        identity: What the store holds (a pipeline fingerprint): a partial store of another
            identity is not resumed but refused.
        round_bytes: Encoded bytes per round.
        workers: Threads compressing frames (default: one per core).
        progress_bar: Show bytes and elements written (tqdm; only on a terminal).
        rounds_in_flight: Rounds written at once (a next one fills meanwhile).
        copy: Copy the elements' large arrays as they are added (a consumer may change
            them in place before their round is written); by default they are referenced.
    """

    def __init__(self, folder: str, compression: str, identity: dict[str, Any],
                 shard_of: Callable[[Any], int] | None = None,
                 round_bytes: int = ROUND_BYTES, workers: int | None = None,
                 progress_bar: bool = True, rounds_in_flight: int = 2,
                 copy: bool = False) -> None:
        self.folder = folder
        self.copy = copy
        self.compression = compression
        self.identity = identity
        self.shard_of = shard_of
        self.round_bytes = round_bytes
        fs, inner = filesystem(folder)
        fs.makedirs(inner, exist_ok=True)
        progress = read_json(join(folder, PROGRESS))
        if progress is not None and progress.get("identity") != identity:
            raise CheckpointError(
                f"{folder} holds a partial write of another pipeline or setting "
                f"({progress.get('identity')}); remove it or use another path")
        if progress is not None and progress.get("format") != FORMAT:
            # A partial write of an older feedline: its chunks carry no identity, so it is
            # started again (its chunk files are removed below as uncommitted).
            progress = None
        self.progress: dict[str, Any] = progress or {
            "format": FORMAT, "identity": identity, "compression": compression,
            "store_id": uuid.uuid4().hex, "shards": {}, "checksums": {}, "counts": {},
            "elements": 0, "bytes": 0, "input_state": None, "rounds": 0,
            "structure": None, "started": time.time()}
        self.compression = self.progress["compression"]
        self._remove_uncommitted()
        self._chunks: dict[int, ChunkBuilder] = {}
        self._buffered_bytes = 0
        # Rounds being written, oldest first: (jobs, shards, input state, elements,
        # structure). ``_shards`` counts their chunks too (the next chunk's number).
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._shards: dict[str, int] = dict(self.progress["shards"])
        self.rounds_in_flight = rounds_in_flight
        # Frames compress on one pool, chunk files are written by another (a write job
        # waits for its frames: on one pool it could wait for jobs queued behind it).
        self._compressor = None if self.compression == "NONE" else \
            concurrent.futures.ThreadPoolExecutor(
                max_workers=workers or os.cpu_count() or 1,
                thread_name_prefix="feedline-store-compress")
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=rounds_in_flight, thread_name_prefix="feedline-store-writer")
        self._bar: Any = None
        if progress_bar:
            from tqdm.auto import tqdm

            # Off by itself when stderr is not a terminal (logs, CI).
            self._bar = tqdm(desc=f"feedline: writing {folder}", unit="B", unit_scale=True,
                             initial=self.progress["bytes"], disable=None, mininterval=0.5)

    @property
    def resume_state(self) -> Any:
        """The input's state after the last committed round (``None``: from the start)."""
        return self.progress["input_state"]

    @property
    def elements(self) -> int:
        """Elements committed, being written and buffered."""
        pending = sum(round_[3] for round_ in self._pending)
        return self.progress["elements"] + pending + sum(
            b.elements for b in self._chunks.values())

    def _remove_uncommitted(self) -> None:
        """Delete chunk files (and temporary files) no committed round lists."""
        fs, inner = filesystem(self.folder)
        committed = {chunk_path(inner, int(shard), i)
                     for shard, count in self.progress["shards"].items() for i in range(count)}
        for path in fs.find(inner):
            name = path.rsplit("/", 1)[-1]
            if (path.endswith(CHUNK_SUFFIX) and path not in committed) or \
                    name.startswith(".tmp-"):
                fs.rm(path)

    def add(self, element: Any) -> bool:
        """Encode ``element`` into this round; True when the round is full and should be
        committed (with the input's state) by :meth:`commit`."""
        shard = 0 if self.shard_of is None else self.shard_of(element)
        builder = self._chunks.get(shard)
        if builder is None:
            builder = self._chunks[shard] = ChunkBuilder(self.compression, self._frame,
                                                         self.copy)
        self._buffered_bytes += builder.add(element)
        return self._buffered_bytes >= self.round_bytes

    def _frame(self, parts: list[Any], raw: int, count: int) -> Any:
        """A closed frame: compressing at once on the pool (uncompressed: checked when its
        chunk is written, on the writer's thread)."""
        if self._compressor is None:
            return functools.partial(pack_frame, parts, raw, count, "NONE")
        return self._compressor.submit(pack_frame, parts, raw, count, self.compression)

    def commit(self, input_state: Any) -> None:
        """Start writing the round, to be recorded with ``input_state`` (where to resume)
        once its chunks are written.

        Rounds are pipelined: this round's chunks are finished and written on the writer's
        threads while the next round fills, and while the round before is still being
        flushed to disk (a round's files are fsynced: with two in flight, one's copy into
        the page cache overlaps the other's wait for the disk). Rounds are recorded in
        order, each only once its chunks are on disk. At most ``rounds_in_flight`` + 1
        rounds are in memory.
        """
        while len(self._pending) >= self.rounds_in_flight:
            self._record_oldest()
        if not self._chunks:
            self._record_all()
            self.progress["input_state"] = input_state
            return
        shards = self._shards
        jobs = []
        for shard, builder in sorted(self._chunks.items()):
            index = shards.get(str(shard), 0)
            path = chunk_path(self.folder, shard, index)
            fs, inner = filesystem(path)
            fs.makedirs(inner.rsplit("/", 1)[0], exist_ok=True)
            fields = {"store": self.progress["store_id"], "shard": shard, "chunk": index}
            jobs.append((str(shard), builder.elements, self._executor.submit(
                self._write, path, builder.close(), builder.structure, fields)))
            shards[str(shard)] = index + 1
        structure = next(iter(self._chunks.values())).structure
        count = sum(b.elements for b in self._chunks.values())
        self._pending.append((jobs, dict(shards), input_state, count, structure))
        self._chunks, self._buffered_bytes = {}, 0

    def _record_all(self) -> None:
        while self._pending:
            self._record_oldest()

    def _record_oldest(self) -> None:
        """Wait for the oldest round being written, then record it in ``progress.json``."""
        jobs, shards, input_state, count, structure = self._pending.popleft()
        results = [(shard, elements, job.result())  # raises the first write error
                   for shard, elements, job in jobs]
        written = sum(size for _, _, (size, _) in results)
        progress = self.progress
        # Chunks of one shard are committed in order, so each list grows by one per round.
        for shard, elements, (_, checksum) in results:
            progress["checksums"].setdefault(shard, []).append(checksum)
            progress["counts"].setdefault(shard, []).append(elements)
        if progress["structure"] is None:
            progress["structure"] = structure
        progress.update(shards=shards, input_state=input_state, rounds=progress["rounds"] + 1,
                        elements=progress["elements"] + count, bytes=progress["bytes"] + written)
        write_json(join(self.folder, PROGRESS), progress)
        if self._bar is not None:
            self._bar.update(written)
            self._bar.set_postfix(elements=f"{progress['elements']:,}", refresh=False)

    def _write(self, path: str, frames: list[Any], structure: Any,
               fields: dict[str, Any]) -> tuple[int, int]:
        """Write one chunk; returns its size and checksum."""
        packed = [frame() if callable(frame) else frame.result() for frame in frames]
        parts = chunk_parts(packed, self.compression, structure, fields)
        return write_file(path, parts), header_checksum(parts)

    def finish(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Commit what is buffered and write the manifest: the store is complete."""
        self.commit(None)
        self._record_all()
        progress = self.progress
        complete = {"format": FORMAT, "identity": self.identity,
                    "compression": self.compression, "store_id": progress["store_id"],
                    "shards": progress["shards"], "checksums": progress["checksums"],
                    "counts": progress["counts"], "elements": progress["elements"],
                    "bytes": progress["bytes"], "structure": progress["structure"],
                    "written": time.time(), **manifest}
        write_json(join(self.folder, MANIFEST), complete)
        fs, inner = filesystem(join(self.folder, PROGRESS))
        try:
            fs.rm(inner)
        except FileNotFoundError:
            pass
        self.close()
        return complete

    def close(self) -> None:
        """Stop the writing threads; rounds being written are recorded (in order) if their
        chunks made it, buffered elements are dropped (the next writer resumes after the
        last round recorded)."""
        try:
            self._record_all()
        except Exception:  # noqa: BLE001 - closing after a failure: the rounds stay out
            self._pending.clear()
        finally:
            self._chunks = {}  # buffered elements are dropped: their frames need not finish
            if self._compressor is not None:
                self._compressor.shutdown(wait=True, cancel_futures=True)
            self._executor.shutdown(wait=True)
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def chunk_identities(folder: str, manifest: dict[str, Any], shard: int,
                     chunks: int) -> list[ChunkIdentity] | None:
    """What each of the ``chunks`` chunk files of ``shard`` must be, by the manifest (or
    ``progress.json``) of the store at ``folder``; ``None`` for a format 1 store, whose
    chunks carry no identity.

    Raises:
        DataLossError: The manifest does not list exactly one checksum per chunk.

    Example:
        >>> manifest = {"format": 2, "store_id": "ab", "checksums": {"0": [7, 9]}}
        >>> [i.chunk for i in chunk_identities("/s", manifest, 0, 2)]
        [0, 1]
    """
    manifest_path = join(folder, MANIFEST)
    if "checksums" not in manifest and "store_id" not in manifest and \
            manifest.get("format", 1) == 1:
        return None
    try:
        store = str(manifest["store_id"])
        checksums = [int(c) for c in manifest["checksums"].get(str(shard), [])]
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise DataLossError(f"{manifest_path}: damaged manifest (expected the store's "
                            f"id and its chunks' checksums): {error!r}",
                            path=manifest_path) from None
    if len(checksums) != chunks:
        raise DataLossError(f"{manifest_path}: damaged manifest: expected a checksum "
                            f"for each of the {chunks} chunks of shard {shard}, found "
                            f"{len(checksums)}", path=manifest_path)
    return [ChunkIdentity(store, shard, chunk, checksum)
            for chunk, checksum in enumerate(checksums)]


def manifest_checksum(manifest: dict[str, Any]) -> int:
    """The CRC32C of a manifest's content (all but its ``manifest_checksum`` field), as
    JSON with sorted keys: what ``save`` records in it and ``load`` checks.

    Example:
        >>> manifest_checksum({"a": 1}) == manifest_checksum({"a": 1, "manifest_checksum": 5})
        True
    """
    content = {key: value for key, value in manifest.items() if key != "manifest_checksum"}
    return crc32c(json.dumps(content, sort_keys=True).encode())


def manifest_shards(path: str, manifest: dict[str, Any]) -> list[tuple[int, int]]:
    """The ``(shard, chunks)`` of a complete store's manifest (read from ``path``), shard 0
    first, once its numbers are checked to agree: chunk element counts (format 2), one per
    chunk, adding up to the elements it lists.

    Raises:
        DataLossError: The manifest is damaged (the message says what disagrees).

    Example:
        >>> manifest_shards("m", {"elements": 3, "shards": {"1": 1, "0": 1},
        ...                       "counts": {"0": [2], "1": [1]}})
        [(0, 1), (1, 1)]
    """
    try:
        shards = sorted((int(key), int(value)) for key, value in manifest["shards"].items())
        if any(str(shard) not in manifest["shards"] for shard, _ in shards):
            raise ValueError("shard numbers are not written as plain integers")
        if any(shard < 0 or chunks < 0 for shard, chunks in shards):
            raise ValueError("negative shard or chunk numbers")
        elements = int(manifest["elements"])
        counts = manifest.get("counts")
        if counts is not None or manifest.get("format", 1) != 1:
            found = 0
            for shard, chunks in shards:
                listed = [int(n) for n in counts.get(str(shard), [])]
                if len(listed) != chunks or min(listed, default=1) < 1:
                    raise ValueError(f"shard {shard} has {chunks} chunks but element counts "
                                     f"{listed}")
                found += sum(listed)
            if found != elements:
                raise ValueError(f"its chunks hold {found} elements, not the {elements} "
                                 "it lists")
    except KeyError as error:
        raise DataLossError(f"{path}: damaged manifest: no {error} field", path=path,
                            offset=0) from None
    except (TypeError, ValueError, AttributeError, OverflowError) as error:
        raise DataLossError(f"{path}: damaged manifest: {error}", path=path,
                            offset=0) from None
    return shards


def lock_owner_alive(owner: dict[str, Any]) -> bool:
    """Whether the process a lock file names may still be alive (another host's: assumed)."""
    if owner.get("host") != socket.gethostname():
        return True  # another machine's process: assume it is alive
    try:
        os.kill(int(owner.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError, TypeError):
        return True
    return True


def take_lock(path: str) -> bool:
    """Create the lock file ``path`` (holding this host and pid); False if a live process
    holds it. A lock whose process is gone (same host) is taken over.

    Local files are created atomically (``O_EXCL``); remote ones best effort.

    Example:
        >>> import os, tempfile
        >>> lock = os.path.join(tempfile.mkdtemp(), "x.lock")
        >>> take_lock(lock), take_lock(lock)   # this process holds it: not again
        (True, False)
        >>> release_lock(lock); take_lock(lock)
        True
    """
    fs, inner = filesystem(path)
    fs.makedirs(inner.rsplit("/", 1)[0] or "/", exist_ok=True)
    owner = {"host": socket.gethostname(), "pid": os.getpid()}
    local = "://" not in path or path.startswith("file://")
    for _ in range(2):
        if local:
            try:
                handle = os.open(inner, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pass
            else:
                with os.fdopen(handle, "w") as file:
                    json.dump(owner, file)
                return True
        elif not fs.exists(inner):  # remote stores: best effort
            with fs.open(inner, "w") as file:
                json.dump(owner, file)
            return True
        try:
            current = read_json(path) or {}
        except DataLossError:
            current = {}  # being written this instant, or damaged: its owner is unknown
        if not isinstance(current, dict) or lock_owner_alive(current):
            return False
        try:
            fs.rm(inner)  # its writer died: take over
        except FileNotFoundError:
            pass
    return False


def release_lock(path: str) -> None:
    """Remove the lock file ``path`` (if it is there)."""
    fs, inner = filesystem(path)
    try:
        fs.rm(inner)
    except FileNotFoundError:
        pass


def complete_manifest(folder: str) -> dict[str, Any] | None:
    """The manifest of a complete store, ``None`` if the store is missing or partial."""
    return read_json(join(folder, MANIFEST))


def exists(path: str) -> bool:
    fs, inner = filesystem(path)
    return bool(fs.exists(inner))


def remove(path: str) -> None:
    fs, inner = filesystem(path)
    if fs.exists(inner):
        fs.rm(inner, recursive=True)
