"""``Dataset.list_files``: the names of the files matching glob patterns, local or fsspec URLs."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from fsspec.core import url_to_fs

from feedline.core.dataset import Dataset
from feedline.core.errors import InvalidArgumentError
from feedline.core.registry import operation
from feedline.sources.tensor_slices import TensorSlicesDataset
from feedline.transforms.shuffle import ShuffleDataset

_WILDCARDS = "*?["


def _has_protocol(pattern: str) -> bool:
    return "://" in pattern or "::" in pattern


def _fixed_dir(pattern: str) -> str:
    """The directory part of a pattern before its first wildcard (``data`` in ``data/*.txt``)."""
    first_wildcard = min((i for i in (pattern.find(c) for c in _WILDCARDS) if i >= 0),
                         default=len(pattern))
    return pattern[:first_wildcard].rpartition("/")[0]


def _as_written(match: str, head: str, root: str) -> str:
    """A local match spelled from the pattern's own directory ``head`` (fsspec's absolute
    ``root``), as TensorFlow spells it: ``data/*.txt`` gives ``data/a.txt``."""
    root = root.rstrip("/")
    if match.startswith(root + "/"):
        rest = match[len(root) + 1:]
        return f"{head}/{rest}" if head else rest
    return os.path.relpath(match)


def _glob(pattern: str) -> list[bytes]:
    """The names matching one pattern; URL patterns keep their scheme, local ones stay paths."""
    try:
        fs, path = url_to_fs(pattern)
    except (ValueError, ImportError) as error:
        raise ValueError(f"list_files(): cannot open a filesystem for {pattern!r}: {error}") \
            from error
    try:
        matches = fs.glob(path)
    except FileNotFoundError:
        matches = []
    except Exception as error:  # any backend failure, re-raised naming the pattern
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        raise ValueError(f"list_files(): the {protocol!r} filesystem cannot glob {pattern!r} "
                         f"({type(error).__name__}: {error}); list the files yourself and use "
                         "Dataset.from_tensor_slices(names)") from error
    if _has_protocol(pattern):
        names = [fs.unstrip_protocol(m) for m in matches]
    elif os.path.isabs(pattern):
        names = list(matches)
    else:
        head = _fixed_dir(pattern)
        root = fs._strip_protocol(head or ".")
        names = [_as_written(m, head, root) for m in matches]
    return [os.fsencode(name) for name in names]


def _patterns(file_pattern: str | os.PathLike[str] | bytes | Sequence[str]) -> list[str]:
    if isinstance(file_pattern, str | bytes | os.PathLike):
        items = [file_pattern]
    elif isinstance(file_pattern, Sequence | np.ndarray):
        items = list(file_pattern)
    else:
        raise TypeError("list_files(file_pattern) must be a string or a list of strings, got "
                        f"{type(file_pattern).__name__}")
    patterns = []
    for item in items:
        if isinstance(item, bytes):
            item = os.fsdecode(item)
        elif isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str):
            raise TypeError(f"list_files(): a pattern must be a string, got {item!r}")
        patterns.append(item)
    if not patterns:
        raise ValueError("list_files() needs at least one file pattern")
    return patterns


@operation("list_files")
def list_files(file_pattern: str | os.PathLike[str] | bytes | Sequence[str],
               shuffle: bool | None = None, seed: int | None = None,
               name: str | None = None) -> Dataset:
    """A dataset of the file names (``bytes``) matching ``file_pattern``, like tf.data's.

    Patterns are globbed once, now, through fsspec: local paths (a relative pattern gives
    names relative the same way) or URLs such as ``memory://``, ``gs://`` or ``s3://`` (names
    keep their scheme). A list of patterns gives every match of each (a file matching two
    patterns appears twice). Names are sorted, then, when ``shuffle`` is ``None`` or true (as
    in tf.data), shuffled with ``seed`` and reshuffled every epoch (every iterator ``repeat``
    builds). Pass ``shuffle=False`` or a ``seed`` for a reproducible order.

    Args:
        file_pattern: A glob pattern (``*``, ``?``, ``[...]``, ``**`` where the filesystem
            supports it) or a list of them.
        shuffle: Shuffle the names (default: yes).
        seed: Seed of the shuffle (``None``: ``Options.seed``, else fresh randomness).
        name: Shown in errors and profiles (the name of the shuffle, or of the source
            when there is none).

    Raises:
        InvalidArgumentError: No file matched ("No files matched pattern: ...", tf.data's
            ``InvalidArgumentError``; a ``ValueError``).
        ValueError: The pattern's filesystem cannot glob (plain HTTP, for one).

    Example:
        >>> import feedline as fl, fsspec
        >>> fsspec.filesystem("memory").pipe({"/lfx/b.csv": b"", "/lfx/a.csv": b""})
        >>> list(fl.Dataset.list_files("memory:///lfx/*.csv", shuffle=False))
        [b'memory:///lfx/a.csv', b'memory:///lfx/b.csv']
    """
    patterns = _patterns(file_pattern)
    names: list[bytes] = []
    for pattern in patterns:
        names.extend(_glob(pattern))
    if not names:
        raise InvalidArgumentError(f"No files matched pattern: {', '.join(patterns)}")
    names.sort()  # bytewise, as TensorFlow's MatchingFiles sorts them
    shuffled = shuffle is None or bool(shuffle)
    dataset: Dataset = TensorSlicesDataset(np.array(names, dtype=object),
                                           name=None if shuffled else name)
    if shuffled:
        dataset = ShuffleDataset(dataset, len(names), seed, reshuffle_each_iteration=True,
                                 name=name or "list_files")
    return dataset
