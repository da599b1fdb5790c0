"""``Dataset.save`` and ``Dataset.load``: tf.data's, with crash-safe, resumable writes.

``ds.save(path)`` writes every element of ``ds`` into a store (:mod:`feedline.snapshot.store`)
in a fresh folder ``path/save-<id>``: chunk files committed in rounds, each round recording
the pipeline's checkpoint. If the process dies, calling ``save`` again with the same pipeline
and path resumes after the last committed round instead of starting over. When the store is
whole, ``path/dataset.json`` is replaced (one atomic rename) by its manifest, naming that
folder; only then is the copy it replaces removed. So whenever the process is killed,
``load`` reads either the old complete copy or the new one, never a mix; what a killed save
leaves (a partial folder, a replaced copy half removed) is ignored by ``load`` and removed
by the next ``save``. A folder per save and a pointer, rather than renaming folders, because
one file's rename is atomic everywhere (an object store has no atomic folder rename), and
because a partial save must stay where the next ``save`` finds it to resume.

``Dataset.load(path)`` reads it back: the structure, element count and compression are
stored, so it needs no ``element_spec``; large elements come back as writable views into the
chunks' memory, not copies (:mod:`feedline.snapshot.chunks`). The manifest carries its own
checksum, and each chunk's: damage anywhere is a :class:`~feedline.core.errors.DataLossError`
naming the file. A folder saved by an older feedline (chunks beside ``dataset.json``) is
still read.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError, DataLossError
from feedline.core.fingerprint import DeclaredTypes, PipelineFingerprint, declared_types
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.runner import run
from feedline.core.traits import SOURCE
from feedline.execution.executor import make_executor
from feedline.snapshot.chunks import chunk_elements, compression_of, load_chunk
from feedline.snapshot.store import (
    MANIFEST,
    PROGRESS,
    StoreWriter,
    chunk_identities,
    chunk_path,
    exists,
    filesystem,
    join,
    manifest_checksum,
    manifest_shards,
    read_json,
    remove,
    write_json,
)

SAVE_FOLDER = re.compile(r"save-[0-9a-f]{32}")
"""The name of the folder one save writes into, inside the path given to ``save``."""
_LEGACY = re.compile(r"shard-\d{5,}|progress\.json|\.tmp-.*")
"""What a save of an older feedline (chunks beside ``dataset.json``) left in the folder."""


def write_store(dataset: Dataset, path: str, compression: str,
                shard_func: Callable[[Any], Any] | None, identity: dict[str, Any],
                round_bytes: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Write every element of ``dataset`` into the store at ``path`` (resuming a partial one
    of the same identity); returns the manifest."""
    def shard_of(element: Any) -> int:
        assert shard_func is not None
        value = shard_func(element)
        try:
            shard = int(value)
        except (TypeError, ValueError):
            raise TypeError(f"shard_func must return an integer, got {value!r}") from None
        if shard < 0:
            raise ValueError(f"shard_func returned {shard}: shard numbers are >= 0")
        return shard

    options = {} if round_bytes is None else {"round_bytes": round_bytes}
    writer = StoreWriter(path, compression, identity,
                         shard_of if shard_func is not None else None, **options)
    bar = None
    try:
        with run(dataset) as iterator:
            if writer.resume_state is not None:
                iterator.load_state_dict(writer.resume_state)
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(desc=f"feedline: writing {path}", unit=" elements",
                           initial=writer.elements, mininterval=0.5)
            for element in iterator:
                if writer.add(element):
                    writer.commit(iterator.state_dict())
                if bar is not None:
                    bar.update(1)
        return writer.finish({"cardinality": writer.elements})
    finally:
        writer.close()
        if bar is not None:
            bar.close()


@operation("save")
def save(dataset: Dataset, path: str, compression: str | None = None,
         shard_func: Callable[[Any], Any] | None = None,
         checkpoint_args: dict[str, Any] | None = None) -> None:
    """Write ``dataset`` to ``path`` for :func:`load` (``tf.data.Dataset.save``).

    Args:
        dataset: What to save (finite).
        path: A folder, local or fsspec URL. A save there is replaced atomically: until
            this one is whole, ``load`` reads the old one (see the module doc).
        compression: ``None`` (none), ``"AUTO"``/``"ZSTD"``, ``"LZ4"``, ``"GZIP"``.
        shard_func: Element to shard number: elements go to ``shard-<n>`` folders, which
            :func:`load`'s ``reader_func`` can read in parallel.
        checkpoint_args: ``{"checkpoint_interval": bytes}``: how much encoded data a round
            holds before it is committed (default 16 MiB). Every committed round survives
            a crash: ``save`` with the same pipeline and path resumes after it.

    Example:
        >>> import feedline as fl, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> fl.Dataset.range(5).map(lambda x: (x, x * 2)).save(folder)
        >>> [(int(a), int(b)) for a, b in fl.Dataset.load(folder)]
        [(0, 0), (1, 2), (2, 4), (3, 6), (4, 8)]
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"save() needs a feedline Dataset, got {type(dataset).__name__}")
    round_bytes = None
    if checkpoint_args is not None:
        unknown = set(checkpoint_args) - {"checkpoint_interval"}
        if unknown:
            raise TypeError(f"checkpoint_args takes 'checkpoint_interval' (bytes per committed "
                            f"round), not {sorted(unknown)}")
        round_bytes = int(checkpoint_args.get("checkpoint_interval", 16 << 20))
        if round_bytes < 1:
            raise ValueError(f"checkpoint_interval must be >= 1, got {round_bytes}")
    name = compression_of(compression)
    identity = {"kind": "save", "fingerprint": PipelineFingerprint.of(dataset).digest,
                "compression": name, "sharded": shard_func is not None}
    root, manifest = _folder_for(path, identity)
    if manifest is None:
        manifest = write_store(dataset, join(path, root), name, shard_func, identity,
                               round_bytes)
    switch_to(path, root, manifest)
    remove_leftovers(path, root)


def _entries(path: str) -> list[str]:
    """The names in folder ``path`` (none if it does not exist)."""
    fs, inner = filesystem(path)
    if not fs.isdir(inner):
        return []
    return sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(inner, detail=False))


def _read_or_none(path: str) -> dict[str, Any] | None:
    """A JSON file, or ``None`` when it is missing or damaged (a leftover of a killed save)."""
    try:
        value = read_json(path)
    except DataLossError:
        return None
    return value if isinstance(value, dict) else None


def _folder_for(path: str, identity: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The folder in ``path`` to save ``identity`` into: the partial save of the same
    pipeline a killed ``save`` left (resumed), else a new one; with its manifest when that
    save was whole already (killed before ``dataset.json`` named it: nothing to redo).

    Raises:
        CheckpointError: ``path`` holds a partial save of another pipeline or setting.
    """
    current = _read_or_none(join(path, MANIFEST)) or {}
    legacy = _read_or_none(join(path, PROGRESS))
    if legacy is not None and legacy.get("identity") != identity and not current:
        raise CheckpointError(
            f"{path} holds a partial write of another pipeline or setting "
            f"({legacy.get('identity')}); remove it or use another path")
    found: tuple[str, dict[str, Any] | None] | None = None
    dead = []
    for name in _entries(path):
        if name.startswith(".tmp-"):  # a manifest a killed save was writing aside
            remove(join(path, name))
        if not SAVE_FOLDER.fullmatch(name) or name == current.get("root"):
            continue
        folder = join(path, name)
        manifest = _read_or_none(join(folder, MANIFEST))
        progress = _read_or_none(join(folder, PROGRESS)) if manifest is None else None
        if manifest is not None and manifest.get("identity") == identity and found is None:
            found = name, manifest
        elif progress is not None and progress.get("identity") == identity and found is None:
            found = name, None
        elif progress is not None:
            raise CheckpointError(
                f"{folder} holds a partial write of another pipeline or setting "
                f"({progress.get('identity')}); remove it or use another path")
        else:  # a replaced copy half removed, a whole save of another pipeline: leftovers
            dead.append(name)
    for name in dead:  # so that the leftovers of killed saves do not pile up
        discard(path, name)
    return found or (f"save-{uuid.uuid4().hex}", None)


def switch_to(path: str, root: str, manifest: dict[str, Any]) -> None:
    """Make the whole save in ``path/root`` the one :func:`load` reads: ``path/dataset.json``
    is replaced by its manifest (written aside, then renamed over: atomic)."""
    pointer = {**manifest, "root": root}
    pointer["manifest_checksum"] = manifest_checksum(pointer)
    write_json(join(path, MANIFEST), pointer)


def remove_leftovers(path: str, keep: str) -> None:
    """Remove from ``path`` every save but ``keep`` (the replaced copy, the partial or whole
    saves killed ones left) and what an older feedline's save left there."""
    for name in _entries(path):
        if name == keep or name == MANIFEST:
            continue
        if SAVE_FOLDER.fullmatch(name):
            discard(path, name)
        elif _LEGACY.fullmatch(name):
            remove(join(path, name))


def discard(path: str, name: str) -> None:
    """Remove save folder ``name`` of ``path``, its manifest and progress first: a removal
    killed half-way leaves a folder that looks dead, never whole nor resumable."""
    for mark in (MANIFEST, PROGRESS):
        fs, inner = filesystem(join(path, name, mark))
        try:
            fs.rm(inner)
        except FileNotFoundError:
            pass
    remove(join(path, name))


@operation("load")
def load(path: str, element_spec: Any = None, compression: str | None = None,
         reader_func: Callable[[list[Dataset]], Dataset] | None = None) -> Dataset:
    """The dataset :func:`save` wrote at ``path`` (``tf.data.Dataset.load``).

    Args:
        path: The folder given to ``save``.
        element_spec: Optional: checked against the saved elements' spec when given.
        compression: Optional: checked against the saved compression when given.
        reader_func: Combines the per-shard datasets (a list, shard 0 first) into one, e.g.
            ``lambda shards: fl.Dataset.from_tensor_slices(list(range(len(shards))))
            .interleave(lambda i: shards[int(i)], cycle_length=len(shards))``;
            default: the shards one after the other (for one shard: the saved order).

    Raises:
        FileNotFoundError: Nothing complete was saved at ``path`` (an incomplete save, one
            killed before it was whole, says so).
        DataLossError: The saved files are damaged (when they are read, for chunks).

    Example:
        >>> import feedline as fl, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> fl.Dataset.range(4).save(folder, compression="GZIP")
        >>> ds = fl.Dataset.load(folder)
        >>> ds.cardinality(), [int(x) for x in ds]
        (4, [0, 1, 2, 3])
    """
    folder, manifest = _saved(path)
    if compression is not None and compression_of(compression) != manifest.get("compression"):
        raise ValueError(f"{path} was saved with {manifest.get('compression')} compression, not "
                         f"{compression_of(compression)}")
    shards = [StoreShardDataset(folder, shard, count, manifest)
              for shard, count in manifest_shards(join(path, MANIFEST), manifest)]
    if not shards:
        shards = [StoreShardDataset(folder, 0, 0, manifest)]
    if reader_func is not None:
        combined = reader_func(shards)
        if not isinstance(combined, Dataset):
            raise TypeError(f"reader_func must return a feedline Dataset, got "
                            f"{type(combined).__name__}")
    else:
        combined = shards[0]
        for shard in shards[1:]:
            combined = combined.concatenate(shard)
    if element_spec is not None and manifest["elements"]:
        found = combined.element_spec
        if repr(found) != repr(element_spec):
            raise ValueError(f"{path} holds elements of spec {found!r}, not {element_spec!r}")
    return combined


def _saved(path: str) -> tuple[str, dict[str, Any]]:
    """The folder holding the chunks of the save :func:`load` reads at ``path``, and its
    manifest (checked against its checksum).

    Raises:
        FileNotFoundError: Nothing was saved there, or only an incomplete save.
        DataLossError: ``dataset.json`` is damaged.
    """
    manifest_path = join(path, MANIFEST)
    manifest = read_json(manifest_path)
    if manifest is None:
        partial = [join(path, name, PROGRESS) for name in _entries(path)
                   if SAVE_FOLDER.fullmatch(name)] + [join(path, PROGRESS)]
        if any(exists(p) for p in partial):
            raise FileNotFoundError(
                f"{path} holds an incomplete save (no {MANIFEST}): a save that did not finish"
                ". Run save() again with the same pipeline to complete it")
        if exists(path):
            raise FileNotFoundError(f"no saved dataset at {path} (no {MANIFEST})")
        raise FileNotFoundError(f"no saved dataset at {path}")
    if not isinstance(manifest, dict):
        raise DataLossError(f"{manifest_path}: damaged manifest (not a JSON object)",
                            path=manifest_path, offset=0)
    if "root" not in manifest and "manifest_checksum" not in manifest:
        return path, manifest  # an older feedline's save: the chunks are beside it
    root = manifest.get("root")
    if not isinstance(root, str) or not SAVE_FOLDER.fullmatch(root) or \
            manifest.get("manifest_checksum") != manifest_checksum(manifest):
        raise DataLossError(f"{manifest_path}: damaged manifest (its checksum does not match "
                            "what it holds)", path=manifest_path, offset=0)
    return join(path, root), manifest


class StoreShardDataset(Dataset):
    """The elements of one shard of a complete store, chunk after chunk.

    Example:
        >>> import feedline as fl, tempfile
        >>> folder = tempfile.mkdtemp(); fl.Dataset.range(3).save(folder)
        >>> shard = fl.Dataset.load(folder)
        >>> type(shard).__name__, len(shard)
        ('StoreShardDataset', 3)
    """

    TRAITS = SOURCE

    def __init__(self, folder: str, shard: int, chunks: int, manifest: dict[str, Any],
                 name: str | None = None) -> None:
        super().__init__()
        self.folder = folder
        self.shard = shard
        self.chunks = chunks
        self.elements = int(manifest["elements"]) if len(manifest["shards"]) <= 1 else UNKNOWN
        self.written = manifest.get("written")
        self.name = name or f"load({folder}, shard {shard})"
        # What each chunk file must be (None: a format 1 store, whose chunks name nothing).
        self.identities = chunk_identities(folder, manifest, shard, chunks)
        # The elements of each chunk, as the manifest lists them (None: not listed).
        counts = manifest.get("counts")
        self.counts: list[int] | None = None
        if isinstance(counts, dict) and isinstance(counts.get(str(shard)), list):
            self.counts = [int(n) for n in counts[str(shard)]]

    def cardinality(self) -> int:
        return self.elements

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return StoreShardIterator(ctx, self)


class StoreShardIterator(DatasetIterator):
    """Reads a shard's chunks in order, :data:`READ_AHEAD` chunks ahead on threads (mapping
    and decompressing release the GIL); the state is ``{chunk, element}``.

    Large elements come out as views into their chunk's memory (see
    :mod:`feedline.snapshot.chunks`): reading an uncompressed snapshot copies nothing.
    """

    OPERATION = "load"
    READ_AHEAD = max(2, min(4, os.cpu_count() or 1))
    """Chunks read ahead: one per core (decompression is the work), 2 to 4 (memory)."""

    def __init__(self, ctx: IteratorContext, node: StoreShardDataset,
                 types: DeclaredTypes | None = None) -> None:
        super().__init__(ctx)
        self._node = node
        # The namedtuple classes elements may be built with (a cache passes its pipeline's).
        self._types = types if types is not None else declared_types(node)
        self._chunk = 0
        self._element = 0  # within the chunk
        self._elements: Any = None
        self._ahead: dict[int, concurrent.futures.Future[Any]] = {}
        self._executor: Any = None

    def _path(self, chunk: int) -> str:
        return chunk_path(self._node.folder, self._node.shard, chunk)

    def _open(self) -> None:
        if self._executor is None:
            self._executor = make_executor(self.READ_AHEAD, self._node.name)
        for chunk in range(self._chunk, min(self._chunk + 1 + self.READ_AHEAD,
                                            self._node.chunks)):
            if chunk not in self._ahead:
                expected = None if self._node.identities is None else \
                    self._node.identities[chunk]
                self._ahead[chunk] = self._executor.submit(load_chunk, self._path(chunk),
                                                           expected)
        header, raw = self._ahead.pop(self._chunk).result()
        counts = self._node.counts
        if counts is not None and self._chunk < len(counts) and \
                header.get("elements") != counts[self._chunk]:
            path = self._path(self._chunk)
            raise DataLossError(f"{path}: expected {counts[self._chunk]} elements (as the "
                                f"manifest lists), the chunk holds {header.get('elements')}",
                                path=path)
        elements = chunk_elements(self._path(self._chunk), header, raw, self._types)
        for _ in range(self._element):  # skip what a restored state had read
            next(elements, None)
        self._elements = elements

    def __next__(self) -> Any:
        while True:
            if self._chunk >= self._node.chunks:
                raise StopIteration
            if self._elements is None:
                try:
                    self._open()
                except FileNotFoundError:
                    self._chunk, self._element = self._chunk + 1, 0  # ignore_errors goes on
                    raise DataLossError(
                        f"{self._node.name}: chunk {self._chunk - 1} is missing (the saved "
                        "dataset was damaged or removed)",
                        path=chunk_path(self._node.folder, self._node.shard,
                                        self._chunk - 1)) from None
                except DataLossError:
                    # The next next() goes on with the next chunk: ignore_errors() skips
                    # the damaged one whole, as tf.data skips the rest of a damaged file.
                    self._chunk, self._element = self._chunk + 1, 0
                    raise
            element = next(self._elements, _END)
            if element is not _END:
                self._element += 1
                return element
            self._chunk, self._element, self._elements = self._chunk + 1, 0, None

    def _get_state(self) -> State:
        return {"chunk": self._chunk, "element": self._element}

    def _set_state(self, state: State) -> None:
        self.seek(int(state["chunk"]), int(state["element"]))

    def seek(self, chunk: int, element: int) -> None:
        """Go on from element ``element`` of chunk ``chunk`` (``chunk == chunks``: the end)."""
        if chunk < 0 or element < 0 or chunk > self._node.chunks:
            raise CheckpointError(f"{self._node.name}: no chunk {chunk} element {element}")
        self._chunk, self._element, self._elements = chunk, element, None
        self._discard_ahead()

    def _discard_ahead(self) -> None:
        ahead, self._ahead = self._ahead, {}
        for future in ahead.values():
            future.cancel()

    def _release(self) -> None:
        self._discard_ahead()
        if self._executor is not None:
            self._executor.shutdown()


_END = object()
