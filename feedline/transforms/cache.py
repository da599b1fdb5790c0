"""``cache``: keep the elements of the first complete pass (in memory or on disk) and replay
them in later passes instead of recomputing the input.

``cache()`` keeps them in memory, for this dataset object. ``cache(filename)`` keeps them in
the folder ``filename + ".feedline-cache"``: a store of chunk files, the one on-disk format
of ``save`` and ``snapshot`` (:mod:`feedline.snapshot.store`) -- binary, every frame checked
by its CRC32C, every chunk naming its store, shard and number -- read back by any pipeline
(and process) that names it. With tf.data's semantics:

* **A partial cache is never read.** A pass writes into a temporary folder beside the cache
  (``<cache>.tmp-<pid>-<id>``) and renames it into place when its input ends; a pass stopped
  early removes it (a crash leaves it, and the next writer removes it).
* **One writer at a time.** A pass that writes holds the lock file ``<cache>.lock`` (its
  host and pid). Another pass that finds no complete cache and the lock held by a live
  iterator -- of this process or another -- raises ``FileExistsError`` (tf.data's
  ``AlreadyExistsError``: "There appears to be a concurrent caching iterator running").
  A lock whose process is gone (same host) is taken over.
* **A cache belongs to its pipeline.** The manifest holds the fingerprint of the pipeline
  that wrote it; another pipeline's cache (or one an older feedline wrote as JSON lines) is
  not read but replaced when this pipeline's pass completes, with a warning.
* **Damage is named.** A damaged, truncated, swapped or foreign chunk is a
  :class:`~feedline.core.errors.DataLossError` naming the file.

Elements come back as they went in: arrays with their dtype and shape (large ones as
writable views of the mapped chunk files), ``bytes``, Python scalars and the library's own
leaf types (``RaggedValues``); decoding builds only the namedtuple classes the pipeline
itself names, and imports or calls nothing a file says.
"""

from __future__ import annotations

import abc
import logging
import os
import threading
import uuid
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError, DataLossError
from feedline.core.fingerprint import DeclaredTypes, PipelineFingerprint, declared_types
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import Element, detached
from feedline.core.traits import POSITIONAL, OperationTraits
from feedline.core.unary import UnaryDataset
from feedline.snapshot.store import (
    MANIFEST,
    StoreWriter,
    filesystem,
    join,
    read_json,
    release_lock,
    take_lock,
)

logger = logging.getLogger(__name__)

CACHE_SUFFIX = ".feedline-cache"
"""Appended to ``cache(filename)`` to name the cache folder (tf.data also treats the filename
as a prefix of the files it writes)."""

LOCK_SUFFIX = ".lock"
"""Appended to the cache folder's name to name the writer's lock file."""

ROUND_BYTES = 16 << 20
"""Encoded bytes of elements a cache file's writer gathers into one chunk file."""

_OLD_FORMAT = b'{"feedline_cache":'
"""How the JSON-lines cache files of feedline before the store format begin."""


# ----------------------------------------------------------------------------- readers/writers
class _Reader(abc.ABC):
    """Replays a complete cache from ``position``; after the end, every ``next()`` ends."""

    position: int

    @abc.abstractmethod
    def next(self) -> Element:
        """The next cached element; ``StopIteration`` at the end (and after it)."""

    def close(self) -> None:
        pass


class _Writer(abc.ABC):
    """Collects one pass; only :meth:`commit` (at the end of the input) makes it the cache."""

    start: State | None = None
    """The input's state when the pass began, if it could be taken (see ``filled_from``)."""

    @abc.abstractmethod
    def append(self, element: Element) -> None:
        """Add the next element of the pass."""

    @abc.abstractmethod
    def commit(self) -> None:
        """The pass is complete: make it the cache."""

    def abort(self) -> None:
        pass


def _check_position(where: str, position: int, count: int) -> None:
    if not 0 <= position <= count:
        raise CheckpointError(f"{where}: the state's cache position {position} is not in this "
                              f"cache of {count} elements")


class _MemoryReader(_Reader):
    def __init__(self, elements: tuple[Element, ...], position: int) -> None:
        _check_position("cache", position, len(elements))
        self._elements = elements
        self.position = position

    def next(self) -> Element:
        if self.position >= len(self._elements):
            raise StopIteration
        self.position += 1
        return detached(self._elements[self.position - 1])


class _MemoryWriter(_Writer):
    def __init__(self, store: _MemoryStore) -> None:
        self._store = store
        self._elements: list[Element] = []

    def append(self, element: Element) -> None:
        # Kept apart from the element handed downstream, which a map may update in place.
        self._elements.append(detached(element))

    def commit(self) -> None:
        self._store.publish(self._elements, self.start)


class _MemoryStore:
    """The cache of one dataset object: set once, by the first pass that completes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.elements: tuple[Element, ...] | None = None
        # The input's state when that pass began: a checkpoint taken while replaying holds
        # it, so that a restore where the cache is not (a new process, a new dataset object)
        # fills it again with the same elements (a shuffle below: the same epoch's order).
        self.filled_from: State | None = None

    def publish(self, elements: list[Element], filled_from: State | None = None) -> None:
        with self._lock:
            if self.elements is None:
                self.elements = tuple(elements)
                self.filled_from = filled_from

    def open_reader(self, ctx: IteratorContext, position: int) -> _Reader | None:
        elements = self.elements
        return None if elements is None else _MemoryReader(elements, position)

    def open_writer(self) -> _Writer:
        return _MemoryWriter(self)

    # As tf.data's memory cache: complete once it holds the input's known cardinality, even
    # if the end was never asked for (a consumer that stops after exactly all elements).
    completes_at_cardinality = True


class _StoreReader(_Reader):
    """Replays a cache folder through the store's reader (chunks read ahead on threads)."""

    def __init__(self, iterator: DatasetIterator, position: int) -> None:
        self._iterator = iterator
        self.position = position

    def next(self) -> Element:
        element = next(self._iterator)  # ends again after the end (the store reader does)
        self.position += 1
        return element

    def close(self) -> None:
        self._iterator.close()


class _FileWriter(_Writer):
    """Writes a pass into a temporary store folder beside the cache, holding the cache's
    lock; :meth:`commit` renames the folder into place."""

    def __init__(self, store: _FileStore) -> None:
        self._store = store
        if not take_lock(store.lock):
            try:
                owner = read_json(store.lock)
            except DataLossError:  # being written this instant
                owner = None
            raise FileExistsError(
                f"There appears to be a concurrent caching iterator running: the cache lock "
                f"file {store.lock} exists (held by {owner}). If no other iterator of this "
                "pipeline, in this or another process, is filling this cache, delete the lock "
                "file and iterate again.")
        try:
            store.remove_stale_temporaries()
            self.folder = f"{store.path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            # copy=True: the elements are handed on downstream, which may change their
            # arrays in place before their round is written.
            self._writer = StoreWriter(self.folder, "NONE", store.identity(),
                                       round_bytes=ROUND_BYTES, progress_bar=False, copy=True)
        except BaseException:
            release_lock(store.lock)
            raise

    def append(self, element: Element) -> None:
        if self._writer.add(element):
            self._writer.commit(None)  # a cache is never resumed: no input state to keep

    def commit(self) -> None:
        try:
            self._writer.finish({"cardinality": self._writer.elements})
            self._store.publish(self.folder)
        except BaseException:
            self._discard()
            raise
        finally:
            release_lock(self._store.lock)

    def abort(self) -> None:
        try:
            self._discard()
        finally:
            release_lock(self._store.lock)

    def _discard(self) -> None:
        self._writer.close()
        fs, inner = filesystem(self.folder)
        if fs.exists(inner):
            fs.rm(inner, recursive=True)


class _FileStore:
    """The cache folder of one pipeline: used only if the pipeline that wrote it was this
    one."""

    def __init__(self, path: str, node: CacheDataset) -> None:
        self.path = path
        self.lock = path + LOCK_SUFFIX
        self._node = node

    def identity(self) -> dict[str, Any]:
        return {"kind": "cache", "pipeline": self._node.fingerprint().to_json()}

    def _manifest(self) -> dict[str, Any] | None:
        """The manifest of a complete cache of this pipeline, else ``None``."""
        fs, inner = filesystem(self.path)
        if not fs.exists(inner):
            return None
        if not fs.isdir(inner):
            with fs.open(inner, "rb") as file:
                head = file.read(len(_OLD_FORMAT))
            if head == _OLD_FORMAT:
                logger.warning("%s is a cache file of an older feedline (JSON lines); it is not "
                               "used and will be replaced by this pipeline's cache.", self.path)
                return None
            raise DataLossError(f"{self.path} is not a feedline cache (expected a folder of "
                                "chunk files with its dataset.json)", path=self.path, offset=0)
        manifest_path = join(self.path, MANIFEST)
        manifest = read_json(manifest_path)
        if manifest is None:
            raise DataLossError(f"{self.path} is not a complete feedline cache: it has no "
                                f"{MANIFEST} (a cache folder is put in place only when "
                                "complete)", path=manifest_path)
        identity = manifest.get("identity")
        try:
            if identity.get("kind") != "cache":
                raise ValueError(f"it holds a {identity.get('kind')!r}, not a cache")
            written_by = PipelineFingerprint.from_json(identity["pipeline"])
            int(manifest["elements"])
        except (AttributeError, KeyError, TypeError, ValueError, CheckpointError) as error:
            raise DataLossError(f"{manifest_path}: not the manifest of a feedline cache: "
                                f"{error}", path=manifest_path) from None
        difference = self._node.fingerprint().first_difference(written_by)
        if difference is not None:
            logger.warning("%s was written by a different pipeline (%s); it is not used and "
                           "will be replaced by this pipeline's cache.", self.path, difference)
            return None
        return manifest

    def open_reader(self, ctx: IteratorContext, position: int) -> _Reader | None:
        from feedline.snapshot.save_load import StoreShardDataset, StoreShardIterator

        manifest = self._manifest()
        if manifest is None:
            return None
        manifest_path = join(self.path, MANIFEST)
        try:
            chunks = int(manifest["shards"].get("0", 0))
            counts = [int(n) for n in manifest["counts"].get("0", [])]
            total = int(manifest["elements"])
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise DataLossError(f"{manifest_path}: damaged manifest: {error!r}",
                                path=manifest_path) from None
        if len(counts) != chunks or sum(counts) != total or min(counts, default=1) < 1:
            raise DataLossError(f"{manifest_path}: damaged manifest: expected {chunks} chunk "
                                f"element counts adding up to {total}, found {counts}",
                                path=manifest_path)
        _check_position(self.path, position, total)
        dataset = StoreShardDataset(self.path, 0, chunks, manifest,
                                    name=f"{self._node.name}({self.path})")
        iterator = StoreShardIterator(ctx, dataset, self._node.declared_types())
        chunk, element = 0, position
        while chunk < chunks and element >= counts[chunk]:
            element -= counts[chunk]
            chunk += 1
        iterator.seek(chunk, element)
        return _StoreReader(iterator, position)

    def open_writer(self) -> _Writer:
        return _FileWriter(self)

    def remove_stale_temporaries(self) -> None:
        """Remove the temporary folders of writers that died (the caller holds the lock, so
        no live writer has one)."""
        fs, inner = filesystem(self.path)
        parent, name = inner.rsplit("/", 1) if "/" in inner else (".", inner)
        if not fs.exists(parent):
            return
        for entry in fs.ls(parent, detail=False):
            if entry.rstrip("/").rsplit("/", 1)[-1].startswith(f"{name}.tmp-"):
                fs.rm(entry, recursive=True)

    def publish(self, folder: str) -> None:
        """Put the complete cache ``folder`` in place (replacing another pipeline's)."""
        fs, inner = filesystem(self.path)
        _, temporary = filesystem(folder)
        if fs.exists(inner):
            fs.rm(inner, recursive=True)
        fs.mv(temporary, inner, recursive=True)


def _start_state(upstream: DatasetIterator) -> State | None:
    """The input's state before its first element, or ``None`` where it has none: plain
    iteration never needs a checkpoint, so an input that cannot give one only loses the
    exact refill after a restore elsewhere (the next epoch's order, as before)."""
    try:
        return upstream.state_dict()
    except Exception:  # noqa: BLE001 - any input's refusal: no checkpoint, no failure
        return None


# ----------------------------------------------------------------------------- the dataset
@operation("cache")
class CacheDataset(UnaryDataset):
    """The node of ``Dataset.cache``.

    With ``filename=""`` the cache lives in memory and belongs to this dataset object: the
    first iterator to read the whole input fills it, later ones (next epochs, new iterators)
    replay it without touching the input. With a filename it is the folder
    ``filename + ".feedline-cache"`` (see the module doc), reused by any pipeline (and
    process) that names it. Either way only a complete pass becomes the cache; a pass stopped
    early is discarded.

    Example:
        >>> import feedline as fl
        >>> calls = []
        >>> ds = CacheDataset(fl.Dataset.range(3).map(lambda x: calls.append(x) or x))
        >>> [int(x) for x in ds.repeat(3)], len(calls)
        ([0, 1, 2, 0, 1, 2, 0, 1, 2], 3)
    """

    TRAITS = POSITIONAL

    # The store is this object's cache, not an argument; the fingerprint is memoized.
    _NOT_FINGERPRINTED = frozenset({"_store", "_fingerprint", "_declared_types"})

    def traits(self) -> OperationTraits:
        """Positional; with a file name it also writes files."""
        return OperationTraits("positional", writes_files=True) if self.filename else POSITIONAL

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

    The state is the position when replaying, the input's state when reading; elements are
    not stored in it. A state taken while replaying an in-memory cache also holds the input's
    state where the pass that filled it began: restored where that cache is not (a new
    process or dataset object), the refill reads the same elements (below a shuffle, the
    same epoch's order, not the next one's). (``offset`` is kept, always 0, so that states of the JSON-lines cache
    files of older feedline versions, which held a byte offset there, still restore: replay
    goes by position.) A restore that lands in the middle of filling continues reading the
    input but cannot complete the cache (the elements before the checkpoint are not in the
    state), so the next pass fills it. After the end, ``next()`` ends again, every time.
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
        # Whether this pass fills the cache: its writer (for a file, the lock) is taken at
        # its first next(), as tf.data does, so an iterator made and never read blocks none.
        self._fills = False
        self._complete_at = -1
        if getattr(self._store, "completes_at_cardinality", False):
            cardinality = node._inputs[0].cardinality()
            self._complete_at = cardinality if cardinality >= 0 else -1
        self._reader = self._store.open_reader(ctx, 0)
        if self._reader is None:
            self._set_upstream(node._make_input_iterator(ctx))
            self._fills = True

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
        if self._fills and self._writer is None:
            self._writer = self._store.open_writer()  # FileExistsError: another one writes
            if self._position == 0 and self._read_completed_cache():
                return self.__next__()
            if self._position == 0:
                self._writer.start = _start_state(self._upstream)
        try:
            element = next(self._upstream)
        except StopIteration:
            self._done, self._fills = True, False
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.commit()
            raise
        # A failed element raised above: it is not cached, as in tf.data.
        self._position += 1
        if self._writer is not None:
            self._writer.append(element)
            if self._position == self._complete_at:
                writer, self._writer = self._writer, None
                writer.commit()
        return element

    def _read_completed_cache(self) -> bool:
        """Read the cache instead of filling it, if another pass (an iterator on another
        thread, made before it was complete) completed it since this one looked: looked for
        again now that this pass holds the writer's lock, so no pass replaces a complete
        cache that others may be reading."""
        reader = self._store.open_reader(self._ctx, 0)
        if reader is None:
            return False
        writer, self._writer = self._writer, None
        assert writer is not None
        writer.abort()
        self._fills = False
        self._set_upstream(None)
        self._reader = reader
        return True

    def _get_state(self) -> State:
        if self._reader is not None:
            # "input": where the pass that filled the cache began, where known.
            filled_from = getattr(self._store, "filled_from", None)
            return {"mode": "cache", "position": self._position, "offset": 0, "done": False,
                    "input": [] if filled_from is None else [filled_from]}
        assert self._upstream is not None
        return {"mode": "input", "position": self._position, "offset": 0, "done": self._done,
                "input": [self._upstream.state_dict()]}

    def _set_state(self, state: State) -> None:
        self._drop_reader_and_writer(warn=False)
        self._set_upstream(None)
        position = int(state["position"])
        self._done, self._fills = bool(state["done"]), False
        self._reader = self._store.open_reader(self._ctx, position)
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
            self._fills = position == 0 and not self._done
            return
        # Saved while replaying a cache that is not here (a new process, a copied dataset):
        # fill it again from where the pass that filled it began, re-reading the elements
        # already handed out.
        if state["input"]:
            upstream.load_state_dict(state["input"][0])
        self._fills = True
        self._position = 0
        if not position:
            return
        self._writer = self._store.open_writer()
        while self._position < position:
            try:
                element = next(upstream)
            except StopIteration:
                self._done, self._fills = True, False
                writer, self._writer = self._writer, None
                writer.commit()
                return
            except Exception:  # noqa: BLE001, S112 -- failed elements never were in the cache
                continue
            self._writer.append(element)
            self._position += 1
        if self._position == self._complete_at:
            writer, self._writer = self._writer, None
            writer.commit()

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
