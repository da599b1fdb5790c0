"""``cache``: keep the elements of the first complete pass (in memory or in a file) and replay
them in later passes instead of recomputing the input."""

from __future__ import annotations

import abc
import json
import logging
import os
import threading
import uuid
from typing import IO, Any

import google_crc32c

from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError, DataLossError
from feedline.core.fingerprint import DeclaredTypes, PipelineFingerprint, declared_types
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element
from feedline.core.unary import UnaryDataset

logger = logging.getLogger(__name__)

CACHE_SUFFIX = ".feedline-cache"
"""Appended to ``cache(filename)`` to name the cache file (tf.data also treats the filename as
a prefix of the files it writes)."""

CACHE_FORMAT = 2
"""Version of the cache file layout (see :class:`_FileReader`)."""


# ----------------------------------------------------------------------------- readers/writers
class _Reader(abc.ABC):
    """Replays a complete cache from ``position``."""

    position: int

    @abc.abstractmethod
    def next(self) -> Element:
        """The next cached element; ``StopIteration`` at the end."""

    def offset(self) -> int:
        return 0

    def close(self) -> None:
        pass


class _Writer(abc.ABC):
    """Collects one pass; only :meth:`commit` (at the end of the input) makes it the cache."""

    @abc.abstractmethod
    def append(self, element: Element) -> None:
        """Add the next element of the pass."""

    @abc.abstractmethod
    def commit(self) -> None:
        """The pass is complete: make it the cache."""

    def abort(self) -> None:
        pass


class _MemoryReader(_Reader):
    def __init__(self, elements: tuple[Element, ...], position: int) -> None:
        self._elements = elements
        self.position = position

    def next(self) -> Element:
        if self.position >= len(self._elements):
            raise StopIteration
        self.position += 1
        return self._elements[self.position - 1]


class _MemoryWriter(_Writer):
    def __init__(self, store: _MemoryStore) -> None:
        self._store = store
        self._elements: list[Element] = []

    def append(self, element: Element) -> None:
        self._elements.append(element)

    def commit(self) -> None:
        self._store.publish(self._elements)


class _MemoryStore:
    """The cache of one dataset object: set once, by the first pass that completes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.elements: tuple[Element, ...] | None = None

    def publish(self, elements: list[Element]) -> None:
        with self._lock:
            if self.elements is None:
                self.elements = tuple(elements)

    def open_reader(self, position: int, offset: int | None) -> _Reader | None:
        elements = self.elements
        return None if elements is None else _MemoryReader(elements, position)

    def open_writer(self) -> _Writer:
        return _MemoryWriter(self)


def _record_checksum(index: int, payload: bytes) -> str:
    # The record's index is inside its checksum: a deleted, repeated or reordered record
    # fails at once, not at the end of the file.
    return f"{google_crc32c.value(b'%d:' % index + payload):08x}"


def _footer(header: bytes, count: int) -> bytes:
    return b"#end %d %08x\n" % (count, google_crc32c.value(header + b"%d" % count))


def _header(fingerprint: PipelineFingerprint) -> bytes:
    return json.dumps({"feedline_cache": CACHE_FORMAT, "pipeline": fingerprint.to_json()},
                      sort_keys=True, separators=(",", ":")).encode() + b"\n"


class _FileReader(_Reader):
    """Replays a cache file.

    Layout: a JSON header line (format and the fingerprint of the pipeline that wrote it),
    then one line per element, ``<crc32c of index and payload> <payload>`` where the payload
    is the element's :mod:`~feedline.core.state_codec` encoding as JSON, then a footer line
    ``#end <count> <crc32c of header and count>`` written when the pass completed. Any
    difference (a changed byte, a deleted or repeated record, a missing footer) is a
    :class:`~feedline.core.errors.DataLossError` naming the file, record and byte offset.
    """

    def __init__(self, path: str, header: bytes, count: int, types: DeclaredTypes,
                 position: int, offset: int | None) -> None:
        self._path = path
        self._count = count
        self._types = types
        self._ended = False
        self._file: IO[bytes] = open(path, "rb")  # noqa: SIM115 -- closed by close()
        try:
            self._file.seek(len(header))
            self.position = 0
            if offset is not None:
                if not (0 <= position <= count) or offset < len(header):
                    raise CheckpointError(
                        f"{path}: the state's cache position {position} (byte {offset}) is not "
                        f"in this cache of {count} elements")
                self._file.seek(offset)
                self.position = position
            else:
                for _ in range(position):
                    self.next()
        except BaseException:
            self._file.close()
            raise

    def _damaged(self, start: int, what: str) -> DataLossError:
        return DataLossError(f"{self._path}: damaged cache record {self.position} at byte "
                             f"{start}: {what}", path=self._path, offset=start,
                             record_index=self.position)

    def next(self) -> Element:
        if self._ended:  # after the end, next() ends again (batch asks once more)
            raise StopIteration
        start = self._file.tell()
        line = self._file.readline()
        if line.startswith(b"#end ") or not line:
            if self.position != self._count or not line:
                raise self._damaged(start, f"expected {self._count} records, found "
                                    f"{self.position}")
            self._ended = True
            raise StopIteration
        if not line.endswith(b"\n") or line[8:9] != b" ":
            raise self._damaged(start, "not a cache record (truncated or edited)")
        payload = line[9:-1]
        if line[:8].decode("ascii", "replace") != _record_checksum(self.position, payload):
            raise self._damaged(start, "checksum mismatch")
        try:
            element = decode(json.loads(payload), self._types)
        except (ValueError, CheckpointError) as error:
            raise self._damaged(start, str(error)) from None
        self.position += 1
        return element

    def offset(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()


class _FileWriter(_Writer):
    """Writes a temporary file beside the cache and renames it into place when complete, so
    a reader never sees a partial cache (and a crash leaves none behind to be used)."""

    def __init__(self, path: str, header: bytes) -> None:
        self._path = path
        self._header = header
        self._count = 0
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._temp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
        self._file: IO[bytes] | None = open(self._temp, "wb")  # noqa: SIM115 -- commit/abort
        self._file.write(header)

    def append(self, element: Element) -> None:
        assert self._file is not None
        payload = json.dumps(encode(element), separators=(",", ":")).encode()
        self._file.write(_record_checksum(self._count, payload).encode() + b" " + payload
                         + b"\n")
        self._count += 1

    def commit(self) -> None:
        assert self._file is not None
        self._file.write(_footer(self._header, self._count))
        self._file.close()
        self._file = None
        os.replace(self._temp, self._path)

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            try:
                os.remove(self._temp)
            except FileNotFoundError:
                pass


class _FileStore:
    """The cache file of one pipeline: usable only if the pipeline that wrote it was this one."""

    def __init__(self, path: str, node: CacheDataset) -> None:
        self.path = path
        self._node = node

    def _complete_cache(self) -> tuple[bytes, int] | None:
        """The header and element count of a complete cache of this pipeline, else ``None``."""
        try:
            with open(self.path, "rb") as file:
                header = file.readline()
                size = file.seek(0, os.SEEK_END)
                file.seek(max(len(header), size - 64))
                tail = file.read()
        except FileNotFoundError:
            return None
        try:
            saved = json.loads(header)
            written_by = PipelineFingerprint.from_json(saved["pipeline"])
            if saved["feedline_cache"] != CACHE_FORMAT:
                raise ValueError(f"format {saved['feedline_cache']!r}")
        except (ValueError, KeyError, TypeError, CheckpointError) as error:
            raise DataLossError(f"{self.path} is not a feedline cache file of format "
                                f"{CACHE_FORMAT} (bad header: {error})", path=self.path,
                                offset=0) from None
        difference = self._node.fingerprint().first_difference(written_by)
        if difference is not None:
            logger.warning("%s was written by a different pipeline (%s); it is not used and "
                           "will be replaced by this pipeline's cache.", self.path, difference)
            return None
        footer_start = tail.rfind(b"\n#end ", 0, len(tail) - 1)
        last_line = tail[footer_start + 1:] if footer_start >= 0 else tail
        try:
            count = int(last_line.split()[1])
        except (IndexError, ValueError):
            count = -1
        if count < 0 or last_line != _footer(header, count):
            raise DataLossError(f"{self.path}: the cache file is truncated or damaged (no valid "
                                "end marker)", path=self.path, offset=size)
        return header, count

    def open_reader(self, position: int, offset: int | None) -> _Reader | None:
        complete = self._complete_cache()
        if complete is None:
            return None
        header, count = complete
        return _FileReader(self.path, header, count, self._node.declared_types(), position,
                           offset)

    def open_writer(self) -> _Writer:
        return _FileWriter(self.path, _header(self._node.fingerprint()))


# ----------------------------------------------------------------------------- the dataset
class CacheDataset(UnaryDataset):
    """The node of ``Dataset.cache``.

    With ``filename=""`` the cache lives in memory and belongs to this dataset object: the
    first iterator to read the whole input fills it, later ones (next epochs, new iterators)
    replay it without touching the input. With a filename it is the file
    ``filename + ".feedline-cache"``, reused by any pipeline (and process) that names it.
    Either way only a complete pass becomes the cache; a pass stopped early is discarded.

    Example:
        >>> import feedline as fl
        >>> calls = []
        >>> ds = CacheDataset(fl.Dataset.range(3).map(lambda x: calls.append(x) or x))
        >>> [int(x) for x in ds.repeat(3)], len(calls)
        ([0, 1, 2, 0, 1, 2, 0, 1, 2], 3)
    """

    # The store is this object's cache, not an argument; the fingerprint is memoized.
    _NOT_FINGERPRINTED = frozenset({"_store", "_fingerprint", "_declared_types"})

    def __init__(self, input_dataset: Dataset, filename: str | os.PathLike[str] = "",
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        if not isinstance(filename, str | os.PathLike):
            raise TypeError(f"cache(filename) must be a str or path, got {filename!r}")
        self.filename = os.fspath(filename)
        self.name = name or "cache"
        self._fingerprint: PipelineFingerprint | None = None
        self._declared_types: DeclaredTypes | None = None
        self._store: _MemoryStore | _FileStore = self._new_store()

    def _new_store(self) -> _MemoryStore | _FileStore:
        if self.filename:
            return _FileStore(self.filename + CACHE_SUFFIX, self)
        return _MemoryStore()

    def fingerprint(self) -> PipelineFingerprint:
        """The fingerprint of the cached pipeline (this stage's input), recorded in the file."""
        if self._fingerprint is None:
            self._fingerprint = PipelineFingerprint.of(self._inputs[0])
        return self._fingerprint

    def declared_types(self) -> DeclaredTypes:
        """The namedtuple classes a cache file of this pipeline may hold."""
        if self._declared_types is None:
            self._declared_types = declared_types(self._inputs[0])
        return self._declared_types

    # The graph must stay picklable and cheap to ship: the cached elements (and the lock
    # guarding them) stay with this object; a copy starts with an empty cache of its own.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_store"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = self._new_store()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return CacheIterator(ctx, self)


class CacheIterator(DatasetIterator):
    """Replays the cache when it is complete; otherwise reads the input, writing what it
    reads, and commits it as the cache when the input ends.

    The state is the position (plus the file offset) when replaying, the input's state when
    reading; elements are not stored in it. A restore that lands in the middle of filling
    continues reading the input but cannot complete the cache (the elements before the
    checkpoint are not in the state), so the next pass fills it.
    """

    def __init__(self, ctx: IteratorContext, node: CacheDataset) -> None:
        super().__init__(ctx)
        self._node = node
        self._store = node._store
        self._reader: _Reader | None = None
        self._writer: _Writer | None = None
        self._upstream: DatasetIterator | None = None
        self._position = 0
        self._done = False
        self._reader = self._store.open_reader(0, None)
        if self._reader is None:
            self._set_upstream(node._make_input_iterator(ctx))
            self._writer = self._store.open_writer()

    def _set_upstream(self, upstream: DatasetIterator | None) -> None:
        if self._upstream is not None:
            self._upstream.close()
        self._upstream = upstream
        self._inputs = [] if upstream is None else [upstream]

    def __next__(self) -> Any:
        if self._reader is not None:
            element = self._reader.next()
            self._position = self._reader.position
            return element
        if self._done or self._upstream is None:
            raise StopIteration
        try:
            element = next(self._upstream)
        except StopIteration:
            self._done = True
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.commit()
            raise
        # A failed element raised above: it is not cached, as in tf.data.
        if self._writer is not None:
            self._writer.append(element)
        self._position += 1
        return element

    def _get_state(self) -> State:
        if self._reader is not None:
            return {"mode": "cache", "position": self._position, "offset": self._reader.offset(),
                    "done": False, "input": []}
        assert self._upstream is not None
        return {"mode": "input", "position": self._position, "offset": 0, "done": self._done,
                "input": [self._upstream.state_dict()]}

    def _set_state(self, state: State) -> None:
        self._drop_reader_and_writer(warn=False)
        self._set_upstream(None)
        position = state["position"]
        self._done = state["done"]
        self._reader = self._store.open_reader(
            position, state["offset"] if state["mode"] == "cache" else None)
        if self._reader is not None:
            self._position = position
            return
        upstream = self._node._make_input_iterator(self._ctx)
        self._set_upstream(upstream)
        if state["mode"] == "input":
            upstream.load_state_dict(state["input"][0])
            self._position = position
            # The elements before the checkpoint are gone: this pass can complete the cache
            # only if there were none.
            self._writer = self._store.open_writer() if position == 0 else None
            return
        # Saved while replaying a cache that is not here (a new process, a copied dataset):
        # fill it again, re-reading the elements already handed out.
        self._writer = self._store.open_writer()
        self._position = 0
        while self._position < position:
            try:
                element = next(upstream)
            except StopIteration:
                self._done = True
                self._writer.commit()
                self._writer = None
                return
            except Exception:  # noqa: BLE001, S112 -- failed elements never were in the cache
                continue
            self._writer.append(element)
            self._position += 1

    def _drop_reader_and_writer(self, warn: bool) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.abort()
            if warn and self._position:
                logger.warning(
                    "%s: the iterator filling the cache stopped after %d elements, before the "
                    "end of its input; the partial cache is discarded. This happens with "
                    "pipelines like dataset.cache().take(k).repeat(); use "
                    "dataset.take(k).cache().repeat() instead.", self._node.name,
                    self._position)

    def _release(self) -> None:
        self._drop_reader_and_writer(warn=True)
