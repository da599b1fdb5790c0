"""``snapshot``: compute the pipeline above once, then read it back (tf.data's ``snapshot``).

``ds.snapshot(path)`` keeps its input's output in ``path/<fingerprint>/``, a store of
chunk files (:mod:`feedline.snapshot.store`). The fingerprint is the input pipeline's
(:mod:`feedline.core.fingerprint`): stable across runs and processes, so the same code finds
its snapshot again, and a changed upstream pipeline writes a new snapshot beside the old one
(``feedline snapshots PATH`` / :func:`feedline.snapshot_info` list them and say which stage
differs).

* **First iteration**: elements are written while they are produced (no second pass);
  rounds of chunks are committed as they fill, each with the input's checkpoint.
* **Later iterations** (this run or another) read the complete snapshot. Large elements
  come back as writable views into the chunk files' memory (uncompressed: the page cache
  itself, mapped copy-on-write; compressed: a buffer per element), copied nowhere
  (:mod:`feedline.snapshot.chunks`). Chunk files are never changed in place; do not
  overwrite them in place either while a snapshot is read.
* **After a crash** (even ``kill -9``), the next iteration reads the committed rounds and
  goes on computing from the checkpoint of the last one: nothing committed is computed again
  and a partial snapshot is never taken for a complete one.
* **Two processes at once**: the first takes the writer's lock (``writer.lock``, holding its
  host and pid) and writes; the other does not wait: it reads the rounds committed when it
  started (committed chunk files never change), then computes the rest from the committed
  input checkpoint, without writing. A lock whose process is gone (same host) is taken over.

The iterator's checkpoint is a position: in a complete snapshot, the chunk and element; while
writing, the input's state and the elements produced (a restore resumes the store at its last
committed round and recomputes the elements after it up to the position, without yielding
them, so the snapshot stays complete and exact).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import PipelineFingerprint
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.snapshot.chunks import compression_of
from feedline.snapshot.store import (
    PROGRESS,
    StoreWriter,
    complete_manifest,
    filesystem,
    join,
    read_json,
)
from feedline.snapshot.store import release_lock as release_lock_file
from feedline.snapshot.store import take_lock as take_lock_file

LOCK = "writer.lock"


@operation("snapshot")
class SnapshotDataset(UnaryDataset):
    """The node of ``Dataset.snapshot``.

    Example:
        >>> import feedline as fl, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> ds = fl.Dataset.range(4).map(lambda x: x * 10).snapshot(folder)
        >>> [int(x) for x in ds], [int(x) for x in ds]   # written, then read
        ([0, 10, 20, 30], [0, 10, 20, 30])
    """

    TRAITS = POSITIONAL

    # Where and how the snapshot is kept changes no element.
    _NOT_FINGERPRINTED = frozenset({"path", "compression", "reader_func", "shard_func",
                                    "round_bytes", "upstream"})

    def __init__(self, input_dataset: Dataset, path: str, compression: str | None = "AUTO",
                 reader_func: Callable[[list[Dataset]], Dataset] | None = None,
                 shard_func: Callable[[Any], Any] | None = None, name: str | None = None,
                 round_bytes: int | None = None) -> None:
        super().__init__(input_dataset)
        self.path = os.fspath(path) if not isinstance(path, str) else path
        self.compression = compression_of(compression)
        self.reader_func = reader_func
        self.shard_func = shard_func
        self.round_bytes = round_bytes
        self.name = name or "snapshot"
        # Taken on the pipeline as written: the iterators run a rewritten (fused) copy.
        self.upstream = PipelineFingerprint.of(input_dataset)
        self.files = input_files(input_dataset)

    def fingerprint(self) -> str:
        """The name of this snapshot's folder: the input pipeline's fingerprint, and the
        name, size and modification time of every file it reads (changed files: a new
        snapshot, never stale data)."""
        if not self.files:
            return self.upstream.digest
        text = json.dumps([self.upstream.digest, self.files])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def folder(self) -> str:
        return join(self.path, self.fingerprint())

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return SnapshotIterator(ctx, self)


def input_files(dataset: Dataset) -> list[list[Any]]:
    """``[name, size, mtime_ns]`` of the files the readers in ``dataset`` are given by name.

    Example:
        >>> import feedline as fl
        >>> input_files(fl.Dataset.range(3))
        []
    """
    from feedline.core.graph import graph_nodes
    from feedline.formats._file_reader import FileReaderDataset
    from feedline.formats.tfrecord_index import _file_identity

    files: list[list[Any]] = []
    for node in graph_nodes(dataset):
        if isinstance(node, FileReaderDataset) and node.filenames:
            for name in node.filenames:
                try:
                    size, mtime = _file_identity(name)
                except OSError:
                    size, mtime = -1, -1  # missing: reading it will say so
                files.append([name, size, mtime])
    return sorted(files)


def take_lock(folder: str) -> bool:
    """Take the writer's lock of a snapshot folder (``writer.lock`` in it)."""
    fs, inner = filesystem(folder)
    fs.makedirs(inner, exist_ok=True)
    return take_lock_file(join(folder, LOCK))


def release_lock(folder: str) -> None:
    release_lock_file(join(folder, LOCK))


class SnapshotIterator(DatasetIterator):
    """Reads a complete snapshot, or produces the input's elements while writing them."""

    OPERATION = "snapshot"

    def __init__(self, ctx: IteratorContext, node: SnapshotDataset) -> None:
        super().__init__(ctx)
        self._node = node
        self._folder = node.folder()
        self._reader: Any = None
        self._upstream: DatasetIterator | None = None
        self._writer: StoreWriter | None = None
        self._produced = 0
        self._mode = ""  # "read", "write" or "compute" (another process writes)

    # ------------------------------------------------------------------------ starting
    def _start(self, position: int = 0) -> None:
        manifest = complete_manifest(self._folder)
        if manifest is not None:
            # Complete by now (maybe written by another iteration since the state was
            # taken): read it, from the position the state had produced up to.
            self._start_reading(manifest)
            while self._produced < position:
                next(self)
            return
        self._upstream = self._node._inputs[0]._make_iterator(self._ctx)
        self._produced = 0
        node = self._node
        identity = {"kind": "snapshot", "fingerprint": node.fingerprint(),
                    "pipeline": node.upstream.to_json(), "files": node.files,
                    "compression": node.compression, "sharded": node.shard_func is not None}
        if not take_lock(self._folder):
            # Another iteration writes: read the rounds it has committed (chunk files are
            # never changed once committed), then compute the rest without writing.
            self._mode = "compute"
            progress = read_json(join(self._folder, PROGRESS))
            if progress is not None and progress.get("identity") == identity and \
                    progress.get("elements"):
                self._upstream.load_state_dict(progress["input_state"])
                self._committed = self._committed_reader(progress)
            self._skip_to(position)
            return
        self._mode = "write"
        options = {} if node.round_bytes is None else {"round_bytes": node.round_bytes}
        try:
            self._writer = StoreWriter(self._folder, node.compression, identity,
                                       node.shard_func, **options)
        except BaseException:
            release_lock(self._folder)
            raise
        writer = self._writer
        if writer.resume_state is not None:
            self._upstream.load_state_dict(writer.resume_state)
        # Elements committed before (a crashed run) are read back from the store, not
        # recomputed; then production goes on from the committed input state.
        self._committed = self._committed_reader(writer.progress)
        self._skip_to(position)

    def _skip_to(self, position: int) -> None:
        """Produce (and write) the elements before ``position`` without handing them out."""
        while self._produced < position:
            next(self)

    def _committed_reader(self, progress: dict[str, Any]) -> Any:
        if not progress["elements"]:
            return None
        from feedline.snapshot.save_load import StoreShardDataset

        manifest = {key: progress.get(key) for key in
                    ("format", "elements", "shards", "store_id", "checksums", "counts")}
        shards = [StoreShardDataset(self._folder, int(shard), int(count), manifest)
                  for shard, count in sorted(progress["shards"].items(),
                                             key=lambda kv: int(kv[0]))]
        combined = shards[0]
        for shard in shards[1:]:
            combined = combined.concatenate(shard)
        return combined._make_iterator(self._ctx)

    def _start_reading(self, manifest: dict[str, Any]) -> None:
        from feedline.snapshot.save_load import load

        self._mode = "read"
        self._produced = 0
        dataset = load(self._folder, reader_func=self._node.reader_func)
        self._reader = dataset._make_iterator(self._ctx)
        del manifest

    # ------------------------------------------------------------------------ elements
    def __next__(self) -> Any:
        if not self._mode:
            self._start()
        if self._mode == "read":
            element = next(self._reader)
            self._produced += 1
            return element
        assert self._upstream is not None
        element = self._next_committed()
        if element is not _END:
            return element
        if self._mode == "compute":
            element = next(self._upstream)
            self._produced += 1
            return element
        return self._next_written()

    def _next_committed(self) -> Any:
        """The next element of the rounds committed before this iteration started (a
        crashed run's, or those of the iteration writing now), or ``_END``."""
        committed = getattr(self, "_committed", None)
        if committed is None:
            return _END
        element = next(committed, _END)
        if element is not _END:
            self._produced += 1
            return element
        committed.close()  # its read-ahead threads end with it
        self._committed = None
        return _END

    def _next_written(self) -> Any:
        writer = self._writer
        assert writer is not None and self._upstream is not None
        try:
            element = next(self._upstream)
        except StopIteration:
            self._finish()
            raise
        self._produced += 1
        if writer.add(element):
            writer.commit(self._upstream.state_dict())
        return element

    def _finish(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.finish({"cardinality": writer.elements})
            finally:
                release_lock(self._folder)
        self._mode = "compute"  # the input has ended; nothing more to write

    # ------------------------------------------------------------------------ state
    def _get_state(self) -> State:
        if not self._mode:
            self._start()  # the state says whether this iteration reads or produces
        # One layout in every mode (a state taken while computing may load into an
        # iteration that finds the snapshot complete, and the other way round).
        reader = self._reader.state_dict() if self._mode == "read" else None
        return {"mode": self._mode, "produced": self._produced, "reader": reader}

    def _set_state(self, state: State) -> None:
        self._release()
        mode = state["mode"]
        self._mode, self._reader, self._upstream, self._writer = "", None, None, None
        if mode == "read":
            manifest = complete_manifest(self._folder)
            if manifest is None:
                raise CheckpointError(f"snapshot: the state reads {self._folder}, which is "
                                      "no longer a complete snapshot")
            self._start_reading(manifest)
            self._reader.load_state_dict(state["reader"])
            self._produced = int(state["produced"])
            return
        # Producing: re-position by producing again (from the store's last committed round
        # when writing; the elements before come from the store, not the input).
        self._start(int(state["produced"]))

    def _release(self) -> None:
        for iterator in (self._reader, self._upstream, getattr(self, "_committed", None)):
            if iterator is not None:
                iterator.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            release_lock(self._folder)


_END = object()
