"""``make_batched_features_dataset``: batches of parsed tf.train.Example feature dicts from
files, built as tf.data 2.21 builds it (list files, interleave the readers, shuffle, repeat,
batch, parse, split off the label, prefetch)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.formats.example import parse_example
from feedline.formats.tfrecord import TFRecordDataset


@dataclass(frozen=True)
class _Read:
    """The reader of one file (a picklable function: worker processes may run it)."""

    reader: Callable[..., Dataset]
    args: tuple[Any, ...]

    def __call__(self, filename: bytes) -> Dataset:
        return self.reader(filename, *self.args)


@dataclass(frozen=True)
class _Parse:
    features: Mapping[str, Any]

    def __call__(self, records: Any) -> dict[str, Any]:
        return parse_example(records, self.features)


@dataclass(frozen=True)
class _SplitLabel:
    label_key: str

    def __call__(self, features: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        features = dict(features)
        label = features.pop(self.label_key)
        return features, label


def _value(_key: Any, value: Any) -> Any:
    return value


def make_batched_features_dataset(
        file_pattern: str | Sequence[str], batch_size: int, features: Mapping[str, Any],
        reader: Callable[..., Dataset] | None = None, label_key: str | None = None,
        reader_args: Sequence[Any] | None = None, num_epochs: int | None = None,
        shuffle: bool = True, shuffle_buffer_size: int = 10000, shuffle_seed: int | None = None,
        prefetch_buffer_size: int | None = None, reader_num_threads: int | None = None,
        parser_num_threads: int | None = None, sloppy_ordering: bool = False,
        drop_final_batch: bool = False) -> Dataset:
    """Batches of feature dicts parsed from the ``tf.train.Example`` records of files:
    ``tf.data.experimental.make_batched_features_dataset``, step for step.

    Files matching ``file_pattern`` are listed (shuffled unless ``shuffle=False``), read by
    ``reader`` (``TFRecordDataset`` by default) ``reader_num_threads`` at a time, one record
    from each in turn; records are shuffled (``shuffle_buffer_size``, ``shuffle_seed``),
    repeated ``num_epochs`` times (``None``: forever), batched (full batches only when
    repeating forever or with ``drop_final_batch``), parsed with ``features`` by
    :func:`~feedline.parse_example` (a ``VarLenFeature`` gives ragged rows, see the porting
    notes) and, with ``label_key``, split into ``(features, label)``.

    Args:
        file_pattern: A glob pattern or a list of them (local paths or fsspec URLs).
        batch_size: Records per batch.
        features: ``{name: FixedLenFeature | VarLenFeature | ...}``.
        reader: Makes a dataset of serialized records of one file name; a reader yielding
            ``(key, value)`` pairs has its values kept.
        label_key: A key of ``features`` to return as the label, beside the other features.
        reader_args: More arguments for ``reader`` after the file name.
        num_epochs: Passes over the data; ``None`` repeats forever.
        shuffle: Shuffle the files and the records.
        shuffle_buffer_size: The records' shuffle buffer.
        shuffle_seed: Seed of both shuffles.
        prefetch_buffer_size: Batches prefetched; ``None`` is ``AUTOTUNE``.
        reader_num_threads: Files read at once (default 1; ``AUTOTUNE`` lets the tuner pick).
        parser_num_threads: Batches parsed at once (default 2).
        sloppy_ordering: Allow any order of the records read in parallel, for speed.
        drop_final_batch: Drop a last, smaller batch.

    Returns:
        A dataset of ``{name: batch}`` dicts, or ``({name: batch}, label)`` with
        ``label_key``.

    Raises:
        ValueError: ``label_key`` is not a key of ``features``.

    Example:
        >>> import os, tempfile, feedline as fl
        >>> path = os.path.join(tempfile.mkdtemp(), "a.tfrecord")
        >>> with fl.TFRecordWriter(path) as writer:
        ...     for i in range(5):
        ...         writer.write(fl.encode_example({"x": [float(i)], "y": [i % 2]}))
        >>> ds = make_batched_features_dataset(
        ...     path, 2, {"x": fl.FixedLenFeature([], "float32"),
        ...               "y": fl.FixedLenFeature([], "int64")},
        ...     label_key="y", num_epochs=1, shuffle=False)
        >>> [(f["x"].tolist(), y.tolist()) for f, y in ds]
        [([0.0, 1.0], [0, 1]), ([2.0, 3.0], [0, 1]), ([4.0], [0])]
    """
    if label_key is not None and label_key not in features:
        raise ValueError(f"The `label_key` provided ({label_key}) must be one of the "
                         f"`features` keys: {list(features)}.")
    reader = TFRecordDataset if reader is None else reader
    threads = 1 if reader_num_threads is None else reader_num_threads
    parsers = 2 if parser_num_threads is None else parser_num_threads
    read = _Read(reader, tuple(reader_args or ()))
    files = Dataset.list_files(file_pattern, shuffle=shuffle, seed=shuffle_seed)
    if threads == AUTOTUNE:
        dataset = files.interleave(read, num_parallel_calls=AUTOTUNE,
                                   deterministic=not sloppy_ordering)
    else:
        dataset = files.interleave(read, cycle_length=threads, block_length=1,
                                   num_parallel_calls=threads if threads > 1 else None,
                                   deterministic=not sloppy_ordering)
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) == 2 and all(
            getattr(s, "dtype", None) == object for s in spec):
        dataset = dataset.map(_value)  # (key, value) records: the values are the Examples
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer_size, shuffle_seed)
    if num_epochs != 1:
        dataset = dataset.repeat(num_epochs)
    # As tf.data: full batches when repeating forever, so the batch dimension is known.
    dataset = dataset.batch(batch_size, drop_remainder=drop_final_batch or num_epochs is None)
    dataset = dataset.map(_Parse(dict(features)), num_parallel_calls=parsers,
                          deterministic=not sloppy_ordering)
    if label_key is not None:
        dataset = dataset.map(_SplitLabel(label_key))
    return dataset.prefetch(AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)
