"""Prepared TensorFlow Datasets directories: finding ``<data_dir>/<name>/<config>/<version>/``
and reading its ``dataset_info.json`` (splits, shard lengths, file format, supervised keys,
citation) as TFDS's read-only builder does, without TensorFlow.

A name is ``"mnist"``, ``"mnist:3.0.1"``, ``"my_ds/config"`` or ``"my_ds/config:1.*.*"``.
Without a version the newest one present is read; without a config, the default config
TFDS recorded (``<name>/.config/metadata.json``), else the only config present.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

from feedline.datasets.tfds_features import Feature, load_features

__all__ = ["DatasetInfo", "DatasetNotFoundError", "SplitInfo", "default_data_dir",
           "find_dataset_dir", "list_datasets", "parse_name", "read_info"]

_VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
_WILDCARD = re.compile(r"^(0|[1-9]\d*|\*)(?:\.(0|[1-9]\d*|\*))?(?:\.(0|[1-9]\d*|\*))?$")
_NAME = re.compile(r"^(?P<name>[\w-]+)(?:/(?P<config>[\w\-.+]+))?(?::(?P<version>[\d.*]+))?$")
_DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_SUFFIXES = {"tfrecord": "tfrecord", "array_record": "array_record", "riegeli": "riegeli",
             "parquet": "parquet"}


class DatasetNotFoundError(FileNotFoundError):
    """No prepared dataset (or config, version, split) by that name; the message lists
    what is there."""


def default_data_dir() -> str:
    """``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets`` (TFDS's default).

    Example:
        >>> default_data_dir().endswith("tensorflow_datasets") or "TFDS_DATA_DIR" in os.environ
        True
    """
    return os.environ.get("TFDS_DATA_DIR") or os.path.join(
        os.path.expanduser("~"), "tensorflow_datasets")


def parse_name(name: str) -> tuple[str, str | None, str | None]:
    """``(dataset, config, version)`` of ``"name[/config][:version]"``.

    Example:
        >>> parse_name("mnist"), parse_name("my_ds/config:1.0.0")
        (('mnist', None, None), ('my_ds', 'config', '1.0.0'))
    """
    match = _NAME.match(name)
    if not match or (match["version"] and not _WILDCARD.match(match["version"])):
        raise ValueError(f"dataset name {name!r} is not 'name', 'name/config', "
                         "'name:1.2.3' or 'name/config:1.2.3'")
    return match["name"], match["config"], match["version"]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _versions(directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted((n for n in names if _VERSION.match(n)
                   and os.path.isdir(os.path.join(directory, n))), key=_version_key)


def _matches(version: str, pattern: str) -> bool:
    wanted = _WILDCARD.match(pattern)
    assert wanted is not None
    return all(w in (None, "*") or int(w) == int(v)
               for w, v in zip(wanted.groups(), version.split(".")))


def _prepared(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "features.json")) or \
        os.path.isfile(os.path.join(directory, "dataset_info.json"))


def _configs(builder_dir: str) -> list[str]:
    try:
        names = sorted(os.listdir(builder_dir))
    except OSError:
        return []
    return [n for n in names if not n.startswith(".") and not _VERSION.match(n)
            and _versions(os.path.join(builder_dir, n))]


def find_dataset_dir(name: str, data_dir: str | None = None) -> str:
    """The ``<data_dir>/<name>[/<config>]/<version>`` directory ``name`` refers to.

    Raises:
        DatasetNotFoundError: naming what was looked for and listing the datasets, configs
            or versions that are there.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> for v in ["1.0.0", "1.2.0", "1.10.0"]:
        ...     os.makedirs(os.path.join(root, "ds", v))
        ...     open(os.path.join(root, "ds", v, "features.json"), "w").close()
        >>> os.path.relpath(find_dataset_dir("ds", root), root)
        'ds/1.10.0'
        >>> os.path.relpath(find_dataset_dir("ds:1.2.*", root), root)
        'ds/1.2.0'
    """
    data_dir = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    dataset, config, version = parse_name(name)
    builder_dir = os.path.join(data_dir, dataset)
    if not os.path.isdir(builder_dir):
        present = list_datasets(data_dir)
        raise DatasetNotFoundError(
            f"no dataset {dataset!r} in {data_dir!r} (no directory {builder_dir!r}); "
            f"prepared datasets there: {present or 'none'}")
    if config is None and not _versions(builder_dir):
        config = _default_config(builder_dir)
    config_dir = builder_dir if config is None else os.path.join(builder_dir, config)
    if config is not None and not os.path.isdir(config_dir):
        raise DatasetNotFoundError(
            f"dataset {dataset!r} has no config {config!r} in {builder_dir!r}; its configs: "
            f"{_configs(builder_dir) or 'none'}")
    versions = [v for v in _versions(config_dir) if _prepared(os.path.join(config_dir, v))]
    chosen = [v for v in versions if version is None or _matches(v, version)]
    if not chosen:
        what = f"version matching {version!r}" if version else "prepared version"
        raise DatasetNotFoundError(
            f"no {what} of {dataset + ('/' + config if config else '')!r} in {config_dir!r} "
            f"(a version directory with features.json); versions there: {versions or 'none'}")
    return os.path.join(config_dir, chosen[-1])


def _default_config(builder_dir: str) -> str:
    metadata = os.path.join(builder_dir, ".config", "metadata.json")
    configs = _configs(builder_dir)
    try:
        with open(metadata, encoding="utf-8") as f:
            name = json.load(f).get("default_config_name")
    except (OSError, ValueError):
        name = None
    if name:
        return name
    if len(configs) == 1:
        return configs[0]
    raise DatasetNotFoundError(
        f"{builder_dir!r} holds several configs and no default ({metadata!r} is missing); "
        f"name one of {configs or 'none'} as '{os.path.basename(builder_dir)}/<config>'")


def list_datasets(data_dir: str | None = None) -> list[str]:
    """Every prepared dataset under ``data_dir`` as ``"name[/config]:version"``, sorted.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> for path in ["a/1.0.0", "b/small/2.0.0", "b/big/2.0.0"]:
        ...     os.makedirs(os.path.join(root, path))
        ...     open(os.path.join(root, path, "features.json"), "w").close()
        >>> list_datasets(root)
        ['a:1.0.0', 'b/big:2.0.0', 'b/small:2.0.0']
    """
    data_dir = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    out = []
    try:
        names = sorted(os.listdir(data_dir))
    except OSError:
        return []
    for name in names:
        builder_dir = os.path.join(data_dir, name)
        if name.startswith(".") or name == "downloads" or not os.path.isdir(builder_dir):
            continue
        out += [f"{name}:{v}" for v in _versions(builder_dir)
                if _prepared(os.path.join(builder_dir, v))]
        for config in _configs(builder_dir):
            config_dir = os.path.join(builder_dir, config)
            out += [f"{name}/{config}:{v}" for v in _versions(config_dir)
                    if _prepared(os.path.join(config_dir, v))]
    return sorted(out)


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split: its shards and how many examples each holds.

    Example:
        >>> s = SplitInfo("train", (3, 2), "/d", "ds", "tfrecord")
        >>> s.num_examples, [os.path.basename(p) for p in s.filepaths]
        (5, ['ds-train.tfrecord-00000-of-00002', 'ds-train.tfrecord-00001-of-00002'])
    """

    name: str
    shard_lengths: tuple[int, ...]
    directory: str
    dataset_name: str
    file_format: str
    filepath_template: str = _DEFAULT_TEMPLATE
    num_bytes: int = 0

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)

    @property
    def num_shards(self) -> int:
        return len(self.shard_lengths)

    @property
    def filepaths(self) -> list[str]:
        """The shard files, in shard order."""
        n = self.num_shards
        digits = max(len(str(n)), 5)
        out = []
        for index in range(n):
            x, y = f"{index:0{digits}d}", f"{n:0{digits}d}"
            name = self.filepath_template.format(
                DATASET=self.dataset_name, SPLIT=self.name,
                FILEFORMAT=_SUFFIXES.get(self.file_format, self.file_format),
                SHARD_INDEX=x, NUM_SHARDS=y, SHARD_X_OF_Y=f"{x}-of-{y}")
            out.append(os.path.join(self.directory, name))
        return out

    def __repr__(self) -> str:
        return f"<SplitInfo num_examples={self.num_examples}, num_shards={self.num_shards}>"


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What ``dataset_info.json`` and ``features.json`` say about a prepared dataset, as
    ``tfds.core.DatasetInfo`` gives it (``features``, ``splits``, ``supervised_keys``, …).

    Example:
        >>> info = DatasetInfo(name="ds", full_name="ds/1.0.0", config_name=None,
        ...                    version="1.0.0", description="", citation="", homepage="",
        ...                    features=None, splits={}, supervised_keys=None,
        ...                    disable_shuffling=False, file_format="tfrecord", data_dir="/d")
        >>> info.full_name
        'ds/1.0.0'
    """

    name: str
    full_name: str
    config_name: str | None
    version: str
    description: str
    citation: str
    homepage: str
    features: Feature | None
    splits: dict[str, SplitInfo]
    supervised_keys: Any
    disable_shuffling: bool
    file_format: str
    data_dir: str
    config_description: str = ""
    release_notes: dict[str, str] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        splits = ", ".join(f"{k!r}: {v!r}" for k, v in self.splits.items())
        return (f"DatasetInfo(name={self.full_name!r}, features={self.features!r}, "
                f"splits={{{splits}}}, supervised_keys={self.supervised_keys!r})")


def _supervised_keys(proto: Any, path: str) -> Any:
    if not proto:
        return None
    if "input" in proto or "output" in proto:  # TFDS < 4.4
        return (proto.get("input", ""), proto.get("output", ""))

    def nest(node: Any) -> Any:
        if "featureKey" in node:
            return node["featureKey"]
        if "tuple" in node:
            return tuple(nest(item) for item in node["tuple"].get("items", []))
        if "dict" in node:
            return {k: nest(v) for k, v in node["dict"].get("dict", {}).items()}
        raise ValueError(f"{path}: supervisedKeys entry {node!r} is not a featureKey, tuple "
                         "or dict")

    return nest(proto)


def read_info(directory: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a ``<name>[/<config>]/<version>`` directory.

    Raises:
        DatasetNotFoundError: no ``dataset_info.json`` there.
        ValueError: a malformed ``dataset_info.json`` (naming the file and field).

    Example:
        >>> import json, os, tempfile
        >>> d = os.path.join(tempfile.mkdtemp(), "ds", "1.0.0")
        >>> os.makedirs(d)
        >>> with open(os.path.join(d, "dataset_info.json"), "w") as f:
        ...     json.dump({"name": "ds", "version": "1.0.0", "splits": [
        ...         {"name": "train", "shardLengths": ["2", "1"]}]}, f)
        >>> with open(os.path.join(d, "features.json"), "w") as f:
        ...     json.dump({"tensor": {"dtype": "int64", "shape": {}}}, f)
        >>> read_info(d).splits["train"].num_examples
        3
    """
    path = os.path.join(directory, "dataset_info.json")
    try:
        with open(path, encoding="utf-8") as f:
            proto = json.load(f)
    except FileNotFoundError:
        raise DatasetNotFoundError(f"{directory!r} is not a prepared TFDS dataset: it has no "
                                   "dataset_info.json") from None
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    name = proto.get("name") or os.path.basename(os.path.dirname(directory))
    file_format = proto.get("fileFormat") or "tfrecord"
    splits = {}
    for split in proto.get("splits", []):
        if "shardLengths" not in split and split.get("numShards", "0") not in ("0", 0):
            raise ValueError(f"{path}: split {split.get('name')!r} has no shardLengths "
                             "(written by TFDS < 3.0); re-prepare it with a newer TFDS")
        splits[split["name"]] = SplitInfo(
            name=split["name"], shard_lengths=tuple(int(n) for n in split.get("shardLengths", [])),
            directory=directory, dataset_name=name, file_format=file_format,
            filepath_template=split.get("filepathTemplate") or _DEFAULT_TEMPLATE,
            num_bytes=int(split.get("numBytes", 0)))
    config = proto.get("configName") or None
    version = proto.get("version") or os.path.basename(directory)
    full_name = "/".join(p for p in (name, config, version) if p)
    return DatasetInfo(
        name=name, full_name=full_name, config_name=config, version=version,
        description=proto.get("description", ""), citation=proto.get("citation", ""),
        homepage=(proto.get("location", {}).get("urls") or [""])[0],
        features=load_features(directory), splits=splits,
        supervised_keys=_supervised_keys(proto.get("supervisedKeys"), path),
        disable_shuffling=bool(proto.get("disableShuffling", False)),
        file_format=file_format, data_dir=directory,
        config_description=proto.get("configDescription", ""),
        release_notes=dict(proto.get("releaseNotes", {})))
