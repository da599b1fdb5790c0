"""``load``: a prepared TensorFlow Datasets directory as a feedline :class:`~feedline.Dataset`,
element for element what ``tfds.as_numpy(tfds.load(...))`` gives, without TensorFlow.

The pipeline is TFDS's own reading pipeline rebuilt from feedline's readers::

    from_tensor_slices(shard instructions)       # the shards a split expression needs
      [.shuffle(len, seed)]                      # shuffle_files
      .interleave(read one shard's [skip, skip + take), cycle_length=16, block_length=16)
      .map(decode)                               # features.json -> NumPy

``cycle_length`` is 1 when the dataset was written with ``disable_shuffling`` (TFDS's rule),
so with the defaults the records come in TFDS's order. Shards outside the requested slice are
never opened. Each shard read is counted against its ``shardLengths``: a truncated shard is
a ``DataLossError`` naming it, never a shorter split. The instructions are the pipeline's
source of file names, so the auto-shard ``"file"`` policy (worker processes,
``distribute``) gives each shard its own shard files, and checkpoints are the readers'
positions.

ArrayRecord shards (``feedline[array_record]``) are read in the order of TFDS's
``tfds.data_source`` (TFDS has no ``tf.data`` reader for them): instruction after instruction.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from feedline.core.constants import AUTOTUNE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError, FeedlineError, InvalidArgumentError
from feedline.core.iterator import DatasetIterator, IteratorContext, State, chunk_reader
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.datasets.tfds_features import (
    FALLBACK,
    Feature,
    FeatureError,
    FeaturesDict,
    Sequence,
    decode_record,
    flat_infos,
    record_plan,
)
from feedline.datasets.tfds_info import (
    DatasetInfo,
    DatasetNotFoundError,
    SplitInfo,
    find_dataset_dir,
    read_info,
    shard_files_on_disk,
)
from feedline.datasets.tfds_splits import (
    FileInstruction,
    ReadInstruction,
    file_instructions,
    parse_split,
)
from feedline.transforms.batch import stack_leaves
from feedline.transforms.map_and_batch import NOT_BATCHED

__all__ = ["ReadConfig", "ReadInstruction", "SkipDecoding", "SplitNotFoundError", "load"]

_READERS = ("tfrecord", "array_record")


class SplitNotFoundError(DatasetNotFoundError, ValueError):
    """A split expression names a split the dataset does not have (the message lists them)."""


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    """How the shards are read (``tfds.ReadConfig``'s reading fields).

    Attributes:
        shuffle_seed: Seed of the shard-order shuffle (``shuffle_files=True``); ``None``
            draws a new order each time.
        shuffle_reshuffle_each_iteration: Whether each epoch reshuffles the shard order
            (default: yes).
        interleave_cycle_length: Shards read at once; ``None`` is TFDS's default (16, or 1
            for a dataset written with ``disable_shuffling``).
        interleave_block_length: Consecutive records taken from one shard (16).
        num_parallel_calls_for_interleave_files: Threads opening and reading shards
            (``AUTOTUNE``); the order does not depend on it.
        num_parallel_calls_for_decode: Threads decoding (``AUTOTUNE``).
        add_tfds_id: Add ``"tfds_id"``: ``b"<shard file>__<record index>"`` to each example.

    Example:
        >>> ReadConfig(shuffle_seed=3).interleave_block_length
        16
    """

    shuffle_seed: int | None = None
    shuffle_reshuffle_each_iteration: bool | None = None
    interleave_cycle_length: int | None = None
    interleave_block_length: int = 16
    num_parallel_calls_for_interleave_files: int | None = AUTOTUNE
    num_parallel_calls_for_decode: int | None = AUTOTUNE
    add_tfds_id: bool = False


class SkipDecoding:
    """A ``decoders`` entry that leaves a feature as stored (an image's encoded ``bytes``),
    as ``tfds.decode.SkipDecoding()``.

    Example:
        >>> SkipDecoding()("raw")
        'raw'
    """

    def __call__(self, value: Any) -> Any:
        return value

    def __repr__(self) -> str:
        return "SkipDecoding()"


class _Custom(Feature):
    """A feature decoded by a user's function (``decoders``) instead of its own decode."""

    def __init__(self, feature: Feature, fn: Callable[[Any], Any]) -> None:
        self.feature, self.fn = feature, fn
        self.shape, self.dtype = feature.shape, feature.dtype

    def serialized_info(self) -> Any:
        return self.feature.serialized_info()

    def decode(self, value: Any) -> Any:
        return self.fn(value)

    def decode_batch(self, values: Any) -> Any:
        if isinstance(self.fn, SkipDecoding):
            return values
        return [self.fn(v) for v in values]


def _apply_decoders(feature: Feature, decoders: Any, where: str) -> Feature:
    if decoders is None:
        return feature
    if callable(decoders):
        return _Custom(feature, decoders)
    if not isinstance(decoders, Mapping) or not isinstance(feature, FeaturesDict):
        raise TypeError(f"decoders{where}: expected a dict of features or a SkipDecoding()/"
                        f"function for {feature!r}; found {decoders!r}")
    unknown = set(decoders) - set(feature.keys())
    if unknown:
        raise KeyError(f"decoders{where}: no feature {sorted(unknown)}; the features are "
                       f"{list(feature.keys())}")
    return FeaturesDict({k: _apply_decoders(f, decoders.get(k), f"{where}[{k!r}]")
                         for k, f in feature.items()})


class _Decoder:
    """The decode function of one dataset (picklable: worker processes build it anew).

    A record goes through the feature tree's compiled :class:`RecordPlan` (the C Example
    parser, one step per leaf) when the features allow one; a record the plan does not
    decode itself (anything unusual, including every damaged record) goes through
    :func:`decode_record`, which gives the same value or raises the error.
    """

    _DERIVED = ("info", "infos", "plan")

    def __init__(self, feature: Feature, supervised_keys: Any, as_supervised: bool,
                 add_id: bool, where: str = "") -> None:
        self.feature = feature
        self.supervised_keys = supervised_keys if as_supervised else None
        self.add_id = add_id
        self.where = where  # the dataset folder and split, for errors
        self._derive()

    def _derive(self) -> None:
        self.info = self.feature.serialized_info()
        self.infos = flat_infos(self.info)
        self.plan = record_plan(self.feature)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._DERIVED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._derive()

    def __call__(self, record: Any, tfds_id: Any = None) -> Any:
        try:
            return self._decode(record, tfds_id)
        except MemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - every error of a record names the dataset
            raise self._located(error) from None

    def _located(self, error: Exception) -> Exception:
        """``error`` saying which dataset and split the record is of: a feedline error
        keeps its type, any other becomes a :class:`FeatureError` (its cause kept)."""
        if isinstance(error, FeedlineError):
            if error.args and isinstance(error.args[0], str) and self.where not in error.args[0]:
                error.args = (f"{self.where}: {error.args[0]}", *error.args[1:])
            return error
        located = FeatureError(f"{self.where}: a record does not decode as features.json "
                               f"describes it ({type(error).__name__}: {error})")
        located.__cause__ = error
        return located

    def _decode(self, record: Any, tfds_id: Any) -> Any:
        if self.add_id:  # the reader yields (id, record)
            record, tfds_id = tfds_id, record
        if type(record) is not bytes:
            record = bytes(record)
        value = FALLBACK if self.plan is None else self.plan(record)
        if value is FALLBACK:
            value = self._decode_slowly(record)
        if self.add_id and isinstance(value, dict):
            value["tfds_id"] = tfds_id
        if self.supervised_keys is not None:
            return _select(value, self.supervised_keys)
        return value

    def feedline_batch_form(self, records: list[Any]) -> Any:
        """The batch of ``[self(r) for r in records]`` as ``batch`` stacks it, the records
        parsed by one C call (see :mod:`feedline.transforms.map_and_batch`); NOT_BATCHED
        for a batch with any record the plan does not decode itself."""
        if self.plan is None:
            return NOT_BATCHED
        try:
            return self._batch_form(records)
        except MemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - as __call__
            raise self._located(error) from None

    def _batch_form(self, records: list[Any]) -> Any:
        assert self.plan is not None
        ids = None
        if self.add_id:  # the reader yields (id, record)
            ids = [tfds_id for tfds_id, _ in records]
            records = [record for _, record in records]
        records = [r if type(r) is bytes else bytes(r) for r in records]
        value = self.plan.batch(records)
        if value is FALLBACK:
            return NOT_BATCHED
        if ids is not None:
            if not isinstance(value, dict):
                return NOT_BATCHED
            value["tfds_id"] = stack_leaves(ids)
        if self.supervised_keys is not None:
            return _select(value, self.supervised_keys)
        return value

    def _decode_slowly(self, record: bytes) -> Any:
        from feedline.formats.example_proto import decode_example

        try:
            example = decode_example(record)
            return decode_record(self.feature, self.infos, self.info, example)
        except KeyError as error:
            raise FeatureError(f"a record lacks feature {error.args[0]!r} that features.json "
                               "describes") from None


def _select(value: Any, keys: Any) -> Any:
    if isinstance(keys, str):
        for part in keys.split("/"):  # a nested feature's key: "a/b"
            value = value[part]
        return value
    if isinstance(keys, dict):
        return {k: _select(value, v) for k, v in keys.items()}
    return tuple(_select(value, k) for k in keys)


class _ShardDataset(UnaryDataset):
    """Records ``[skip, skip + take)`` of one shard (``take`` -1: to its end), checked
    against the ``length`` ``dataset_info.json`` gives the shard.

    A shard that ends before the records asked for, or (read to its end) holds more than
    ``length``, is a :class:`DataLossError` naming the file and both counts: the metadata
    allows telling a truncated shard from a short one, so it is never silently shorter.
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, path: str, skip: int, take: int,
                 length: int) -> None:
        super().__init__(input_dataset)
        self.path, self.skip, self.take, self.length = path, skip, take, length

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        return UNKNOWN if n == UNKNOWN else self._stop() - self.skip

    def _stop(self) -> int:
        return self.length if self.take == -1 else self.skip + self.take

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _ShardIterator(ctx, self._make_input_iterator(ctx), self)


class _ShardIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 node: _ShardDataset) -> None:
        super().__init__(ctx, upstream)
        self._path, self._skip, self._length = node.path, node.skip, node.length
        self._stop = node._stop()
        self._to_end = node.take == -1  # read to the end: more records than listed is damage
        self._position = 0  # records taken from the file
        self._done = False  # ended, or reported damage: the next next() is the end
        self._chunks = chunk_reader(upstream)

    def _pull(self) -> Any:
        try:
            element = next(self._upstream)
        except StopIteration:
            self._done = True
            raise self._short() from None
        except Exception:
            self._done = True  # a damaged record ends the file, as the reader does
            raise
        self._position += 1
        return element

    def _short(self) -> DataLossError:
        listed = f"dataset_info.json's shardLengths gives it {self._length}"
        return DataLossError(
            f"{self._path}: the shard ends after {self._position} records, but "
            f"{listed}: it is truncated (records {self._position} to {self._length - 1} "
            "are missing)",
            path=self._path, record_index=self._position)

    def _end(self) -> Any:
        """At the last record listed: the end, after checking (when reading to the end of
        the file) that nothing follows."""
        self._done = True
        if self._to_end:
            try:
                next(self._upstream)
            except StopIteration:
                pass
            else:
                raise DataLossError(
                    f"{self._path}: the shard holds more than the {self._length} records "
                    "dataset_info.json's shardLengths gives it: the metadata does not "
                    "describe this file", path=self._path, record_index=self._length)
        raise StopIteration

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        while self._position < self._skip:
            self._pull()
        if self._position >= self._stop:
            return self._end()
        return self._pull()

    def next_chunk(self, limit: int) -> list[Any]:
        if self._chunks is None or self._done or not self._skip <= self._position < self._stop:
            return [self.__next__()]
        try:
            chunk = self._chunks(min(limit, self._stop - self._position))
        except StopIteration:
            self._done = True
            raise self._short() from None
        except Exception:
            self._done = True
            raise
        self._position += len(chunk)
        return chunk

    def _get_state(self) -> State:
        return self._with_input_state({"position": self._position, "done": self._done})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._position, self._done = int(state["position"]), bool(state["done"])


def _read_shard(table: tuple[tuple[str, int, int, str, int], ...], file_format: str,
                add_id: bool, key: Any) -> Dataset:
    """The records of one instruction (``key`` is its index, as a string)."""
    path, skip, take, basename, length = table[int(key.decode() if isinstance(key, bytes)
                                                   else key)]
    if file_format == "array_record":
        from feedline.formats.array_record import ArrayRecordDataset

        ds: Dataset = ArrayRecordDataset(path)
    else:
        from feedline.formats.tfrecord import TFRecordDataset

        ds = TFRecordDataset(path)
    ds = _ShardDataset(ds, path, skip, take, length)
    if add_id:
        prefix = f"{basename}__".encode()
        ids = Dataset.counter(skip).map(functools.partial(_tfds_id, prefix))
        ds = Dataset.zip((ids, ds))
    return ds


def _tfds_id(prefix: bytes, index: Any) -> bytes:
    return prefix + str(int(index)).encode()


def _instructions(info: DatasetInfo, split: Any) -> list[FileInstruction]:
    instruction = parse_split(split)
    lengths = {name: s.shard_lengths for name, s in info.splits.items()}
    try:
        absolute = instruction.to_absolute(lengths)
    except KeyError as error:
        sizes = ", ".join(f"{k} ({v.num_examples} examples)" for k, v in info.splits.items())
        raise SplitNotFoundError(
            f"{info.full_name} has no split {error.args[0]!r} (asked for {split!r}); its "
            f"splits: {sizes or 'none'} (from {os.path.join(info.data_dir, 'dataset_info.json')}"
            ")") from None
    out: list[FileInstruction] = []
    for name, from_, to in absolute:
        s = info.splits[name]
        out += file_instructions(from_, to, s.filepaths, s.shard_lengths)
    if not out:
        metadata = os.path.join(info.data_dir, "dataset_info.json")
        raise InvalidArgumentError(
            f"split {str(split)!r} of {info.full_name} selects no examples (TFDS: 'Instruction "
            f"[] corresponds to no data!'); the shardLengths in {metadata} say how many "
            "there are", path=metadata)
    return out


def _check_shards(info: DatasetInfo, split: SplitInfo, needed: set[str]) -> None:
    """The shard files of ``split`` are what ``dataset_info.json`` lists: each inside the
    dataset folder (symbolic links resolved), a regular file where ``needed`` (the ones the
    split expression reads), and no other shard files of the split beside them."""
    metadata = os.path.join(info.data_dir, "dataset_info.json")
    top = os.path.realpath(info.data_dir)
    paths = split.filepaths
    for path in paths:
        real = os.path.realpath(path)
        if real != top and not real.startswith(top + os.sep):
            raise InvalidArgumentError(
                f"{metadata}: split {split.name!r}: filepathTemplate "
                f"{split.filepath_template!r} names {path!r}, which is {real!r}, outside the "
                f"dataset folder {info.data_dir!r}; shard files are read inside it only",
                path=metadata)
    present = shard_files_on_disk(split)
    listed = {os.path.basename(p) for p in paths}
    extra = sorted(set(present or ()) - listed)
    if extra:
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        raise DataLossError(
            f"{metadata}: field shardLengths of split {split.name!r} lists {split.num_shards} "
            f"shards, but the folder also holds {shown} (files of that split by its "
            f"filepathTemplate {split.filepath_template!r}): the metadata does not describe "
            "the shards there", path=metadata)
    for path in paths:
        if path not in needed:
            continue
        if not os.path.exists(path):
            raise DatasetNotFoundError(
                f"shard {path!r} of {info.full_name} is missing; dataset_info.json lists it "
                f"(split {split.name!r} needs it): the directory is incomplete")
        if not os.path.isfile(path):
            raise InvalidArgumentError(f"shard {path!r} of {info.full_name} is not a regular "
                                       "file", path=path)


def _check_supervised_keys(info: DatasetInfo) -> None:
    """Every feature ``supervisedKeys`` names is in ``features.json``."""
    metadata = os.path.join(info.data_dir, "dataset_info.json")

    def check(keys: Any) -> None:
        if isinstance(keys, str):
            node: Any = info.features
            for part in keys.split("/"):
                while isinstance(node, Sequence):
                    node = node.feature
                if not isinstance(node, FeaturesDict) or part not in node.keys():
                    raise InvalidArgumentError(
                        f"{metadata}: field supervisedKeys names the feature {keys!r}, which "
                        f"features.json does not have", path=metadata)
                node = node[part]
        elif isinstance(keys, dict):
            for value in keys.values():
                check(value)
        else:
            for value in keys:
                check(value)

    check(info.supervised_keys)


def _one_split(info: DatasetInfo, split: Any, shuffle_files: bool, as_supervised: bool,
               decoders: Any, read_config: ReadConfig, seed: int | None) -> Dataset:
    metadata = os.path.join(info.data_dir, "dataset_info.json")
    if info.file_format not in _READERS:
        raise InvalidArgumentError(
            f"{metadata}: field fileFormat: shards in {info.file_format!r} format cannot be "
            f"read; feedline reads {', '.join(_READERS)}", path=metadata)
    if as_supervised:
        if not info.supervised_keys:
            raise InvalidArgumentError(f"as_supervised=True, but {info.full_name} has no "
                                       f"supervised_keys (see {metadata})", path=metadata)
        _check_supervised_keys(info)
    instructions = _instructions(info, split)
    needed = {inst.filename for inst in instructions}
    for name in info.splits:
        if any(path in needed for path in info.splits[name].filepaths):
            _check_shards(info, info.splits[name], needed)
    table = tuple((i.filename, i.skip, i.take, os.path.basename(i.filename),
                   i.examples_in_shard) for i in instructions)
    keys = Dataset.from_tensor_slices(np.array([str(k) for k in range(len(table))]))
    if shuffle_files:
        shuffle_seed = read_config.shuffle_seed if read_config.shuffle_seed is not None else seed
        keys = keys.shuffle(len(table), seed=shuffle_seed,
                            reshuffle_each_iteration=read_config.shuffle_reshuffle_each_iteration
                            is not False)
    if info.file_format == "array_record":
        cycle, block = 1, 1  # tfds.data_source's order: one instruction after the other
    else:
        cycle = read_config.interleave_cycle_length or (1 if info.disable_shuffling else 16)
        block = read_config.interleave_block_length
    read = functools.partial(_read_shard, table, info.file_format, read_config.add_tfds_id)
    ds = keys.interleave(read, cycle_length=cycle, block_length=block,
                         num_parallel_calls=read_config.num_parallel_calls_for_interleave_files)
    assert info.features is not None
    feature = _apply_decoders(info.features, decoders, "")
    decoder = _Decoder(feature, info.supervised_keys, as_supervised, read_config.add_tfds_id,
                       f"{info.data_dir} (split {str(split)!r})")
    return ds.map(decoder, num_parallel_calls=read_config.num_parallel_calls_for_decode)


def load(name: str, split: Any = None, data_dir: str | os.PathLike[str] | None = None,
         shuffle_files: bool = False, as_supervised: bool = False, with_info: bool = False,
         decoders: Any = None, read_config: ReadConfig | None = None,
         seed: int | None = None) -> Any:
    """A prepared TFDS dataset, as ``tfds.load`` + ``tfds.as_numpy`` give it.

    Args:
        name: ``"mnist"``, ``"mnist:3.*.*"``, ``"my_ds/config"``, ``"my_ds/config:1.0.0"``
            (the newest version present when none is given; the default config when none
            is named).
        split: A split expression (``"train"``, ``"train[:10%]"``, ``"train[10%:]+test"``,
            ``"test[-100:]"``, ``"train[2shard]"``, ``"all"``) or a :class:`ReadInstruction`;
            ``None`` gives a dict of every split.
        data_dir: The directory holding ``<name>/``; default ``$TFDS_DATA_DIR`` or
            ``~/tensorflow_datasets``.
        shuffle_files: Shuffle the order of the shards (seeded by ``read_config.shuffle_seed``
            or ``seed``; each epoch reshuffles unless the config says otherwise).
        as_supervised: Elements are ``(input, target)`` from the dataset's
            ``supervised_keys`` instead of the feature dict.
        with_info: Return ``(dataset, info)``, ``info`` a
            :class:`~feedline.datasets.tfds_info.DatasetInfo` (features with ClassLabel
            names, splits and their sizes, citation, description, version).
        decoders: Per feature (a nested dict like the features), a :class:`SkipDecoding` or
            a function of the stored value that replaces the feature's decoding.
        read_config: A :class:`ReadConfig` (seed, interleave, ``add_tfds_id``).
        seed: Shorthand for ``read_config.shuffle_seed``.

    Raises:
        DatasetNotFoundError: no such dataset, config, version or split (listing those
            present), or a shard file missing.
        InvalidArgumentError: a malformed ``dataset_info.json`` (naming it and the field),
            or a ``filepathTemplate`` naming a file outside the dataset folder.
        FeatureError: ``features.json`` has a feature feedline cannot decode, or (while
            iterating) a record does not decode as it describes.
        DataLossError: while iterating, a damaged shard, or one holding fewer or more
            records than ``shardLengths`` gives it (naming the file and both counts);
            at load, shard files of a split that ``shardLengths`` does not list.
        ValueError: a malformed split expression, or one that selects nothing.

    Example:
        >>> import os
        >>> root = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tfds")
        >>> if os.path.isdir(root):  # the repository's golden TFDS directories
        ...     ds, info = load("fl_order/small", split="train[:4]", data_dir=root,
        ...                     with_info=True)
        ...     print(len(list(ds)), info.splits["train"].num_examples,
        ...           info.features["label"].names)
        ... else:
        ...     print(4, 103, ['even', 'odd'])
        4 103 ['even', 'odd']
    """
    read_config = read_config or ReadConfig()
    directory = find_dataset_dir(name, None if data_dir is None else os.fspath(data_dir))
    info = read_info(directory)
    splits = list(info.splits) if split is None else None
    if splits is not None:
        ds: Any = {s: _one_split(info, s, shuffle_files, as_supervised, decoders, read_config,
                                 seed) for s in splits}
    else:
        ds = _one_split(info, split, shuffle_files, as_supervised, decoders, read_config, seed)
    return (ds, info) if with_info else ds
