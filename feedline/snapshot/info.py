"""What a snapshot folder holds: one entry per pipeline fingerprint, and why one differs.

``fl.snapshot_info(path)`` (and ``feedline snapshots PATH``) lists the snapshots under a
``snapshot(path)`` folder: fingerprint, status (``complete``; ``writing`` while a live
process holds the writer's lock; ``partial`` when a write stopped -- the next iteration
resumes it), elements, bytes, chunks. Given the pipeline (``dataset=``), each entry says
whether it is that pipeline's snapshot and, if not, the first stage that differs.
``remove_partial(path)`` deletes the partial writes nobody is writing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError
from feedline.core.fingerprint import PipelineFingerprint
from feedline.snapshot.store import (
    MANIFEST,
    PROGRESS,
    filesystem,
    join,
    lock_owner_alive,
    read_json,
    remove,
)


@dataclasses.dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot in a ``snapshot(path)`` folder.

    Attributes:
        fingerprint: The upstream pipeline's fingerprint (the folder's name).
        path: The snapshot's folder.
        status: ``"complete"``, ``"writing"`` (a live writer holds the lock) or
            ``"partial"`` (a stopped write; the next iteration resumes it).
        elements: Elements committed.
        bytes: Bytes of chunk files committed.
        chunks: Chunk files committed.
        compression: ``"ZSTD"``, ``"LZ4"``, ``"GZIP"`` or ``"NONE"``; ``"-"`` before the
            writer's first commit.
        writer: ``{"host", "pid"}`` of the writer holding the lock, if any.
        matches: Whether it is the given pipeline's snapshot (``None``: none given, or
            nothing committed yet to tell).
        difference: Why it is not (the first stage that differs), when a pipeline is given.
    """

    fingerprint: str
    path: str
    status: str
    elements: int
    bytes: int
    chunks: int
    compression: str
    writer: dict[str, Any] | None = None
    matches: bool | None = None
    difference: str | None = None


def snapshot_info(path: str, dataset: Dataset | None = None) -> list[SnapshotInfo]:
    """The snapshots under ``path`` (what ``ds.snapshot(path)`` wrote), oldest name first.

    Args:
        path: The folder given to ``snapshot``.
        dataset: The pipeline *before* ``snapshot`` (optional): each entry then says whether
            it belongs to it, and if not, which stage differs.

    Example:
        >>> import feedline as fl, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> upstream = fl.Dataset.range(5).map(lambda x: x * 2)
        >>> _ = list(upstream.snapshot(folder))
        >>> [(s.status, s.elements, s.matches) for s in fl.snapshot_info(folder, upstream)]
        [('complete', 5, True)]
    """
    from feedline.transforms.snapshot import LOCK

    fs, inner = filesystem(path)
    if not fs.exists(inner):
        return []
    wanted = PipelineFingerprint.of(dataset) if dataset is not None else None
    if dataset is not None:
        from feedline.transforms.snapshot import input_files

        wanted_files = input_files(dataset)
    found = []
    folders = [e["name"] for e in fs.ls(inner, detail=True) if e.get("type") == "directory"]
    for entry in sorted(folders):  # files beside the snapshots (notes, a README) are none
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        folder = join(path, name)
        manifest = read_json(join(folder, MANIFEST))
        progress = manifest or read_json(join(folder, PROGRESS))
        writer = _lock_owner(join(folder, LOCK))
        if progress is None:
            if writer is None:
                continue  # not a snapshot's folder
            # A writer that has committed nothing yet, or crashed before its first commit:
            # unfinished all the same.
            found.append(SnapshotInfo(
                fingerprint=name, path=folder,
                status="writing" if lock_owner_alive(writer) else "partial", elements=0,
                bytes=0, chunks=0, compression="-", writer=writer,
                difference=None if dataset is None else "nothing committed yet"))
            continue
        if manifest is not None:
            status = "complete"
        elif writer is not None and lock_owner_alive(writer):
            status = "writing"
        else:
            status = "partial"
        identity = progress.get("identity", {})
        matches = difference = None
        if wanted is not None:
            same_code = identity.get("pipeline", {}).get("digest") == wanted.digest \
                if "pipeline" in identity else identity.get("fingerprint") == wanted.digest
            saved_files = identity.get("files", [])
            matches = same_code and saved_files == wanted_files
            if not same_code and "pipeline" in identity:
                difference = wanted.first_difference(
                    PipelineFingerprint.from_json(identity["pipeline"]))
            elif not matches:
                changed = sorted({f[0] for f in saved_files} ^ {f[0] for f in wanted_files}
                                 | {a[0] for a, b in zip(saved_files, wanted_files) if a != b})
                difference = (f"the same pipeline, but its input files changed (name, size or "
                              f"modification time): {changed[:3]}")
        found.append(SnapshotInfo(
            fingerprint=name, path=folder, status=status, elements=int(progress["elements"]),
            bytes=int(progress["bytes"]),
            chunks=sum(int(c) for c in progress["shards"].values()),
            compression=str(progress["compression"]), writer=writer, matches=matches,
            difference=difference))
    return found


def _lock_owner(path: str) -> dict[str, Any] | None:
    """The ``{"host", "pid"}`` a writer's lock file holds; ``{}`` (an owner taken for alive)
    while a writer is still filling it in; ``None`` without a lock."""
    try:
        return read_json(path)
    except DataLossError:
        return {}  # created, not yet written: a writer is taking the lock right now


def remove_partial(path: str) -> list[str]:
    """Delete the partial snapshots under ``path`` that no live process is writing.

    Returns:
        The folders removed.

    Example:
        >>> import tempfile
        >>> remove_partial(tempfile.mkdtemp())
        []
    """
    removed = []
    for info in snapshot_info(path):
        if info.status == "partial":
            remove(info.path)
            removed.append(info.path)
    return removed
