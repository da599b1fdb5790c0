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
import string
from typing import Any

from feedline.core.errors import FeedlineError, InvalidArgumentError
from feedline.datasets.tfds_features import Feature, load_features
from feedline.datasets.tfds_metadata import MAX_METADATA_BYTES, read_json

__all__ = ["MAX_METADATA_BYTES", "MAX_SHARDS", "DatasetInfo", "DatasetNotFoundError", "SplitInfo",
           "default_data_dir", "find_dataset_dir", "list_datasets", "parse_name", "read_info",
           "read_json", "shard_files_on_disk", "validate_template"]

_VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
_WILDCARD = re.compile(r"^(0|[1-9]\d*|\*)(?:\.(0|[1-9]\d*|\*))?(?:\.(0|[1-9]\d*|\*))?$")
_NAME = re.compile(r"^(?P<name>[\w-]+)(?:/(?P<config>[\w\-.+]+))?(?::(?P<version>[\d.*]+))?$")
_DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_SUFFIXES = {"tfrecord": "tfrecord", "array_record": "array_record", "riegeli": "riegeli",
             "parquet": "parquet"}
# The fields TFDS fills in a filepathTemplate (tfds.core.naming), and the widths a field may
# be padded to: a width is a count of characters the format call allocates.
_TEMPLATE_FIELDS = ("DATASET", "SPLIT", "FILEFORMAT", "SHARD_INDEX", "NUM_SHARDS",
                    "SHARD_X_OF_Y")
_FORMAT_SPEC = re.compile(r"^(?:[\w -]?[<>^])?0?\d{0,2}$")
_MAX_TEMPLATE = 1024
# What the split syntax can name (tfds_splits); TFDS's split names are Python identifiers.
_SPLIT_NAME = re.compile(r"^[\w-]{1,256}$")
_CONFIG_NAME = re.compile(r"^[\w\-.+]+$")
_INT64_MAX = (1 << 63) - 1
_MAX_NESTING = 32

#: Most shards one split may list (TFDS's largest datasets have a few thousand).
MAX_SHARDS = 100_000


class DatasetNotFoundError(FeedlineError, FileNotFoundError):
    """No prepared dataset (or config, version, split) by that name; the message lists
    what is there."""


def _bad(path: str, field: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{path}: field {field}: {message}", path=path)


def _get(proto: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str,
         field: str, default: Any) -> Any:
    """``proto[key]`` if it is a ``kind`` (``default`` if absent or null), else an error."""
    value = proto.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _bad(path, field, f"expected {_json_kind(names)}, found {_describe(value)}")
    return value


def _json_kind(python: str) -> str:
    return (python.replace("str", "a string").replace("dict", "an object")
            .replace("list", "a list").replace("bool", "true or false"))


def _describe(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else \
        ("an object" if isinstance(value, dict) else f"a list of {len(value)}")
    return text if len(text) <= 60 else text[:57] + "..."


def _count(value: Any, path: str, field: str) -> int:
    """A non-negative int64, as proto-JSON writes one (a decimal string or a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or \
            isinstance(value, str) and not re.fullmatch(r"-?\d{1,20}", value):
        raise _bad(path, field, f"expected an integer, found {_describe(value)}")
    number = int(value)
    if not 0 <= number <= _INT64_MAX:
        raise _bad(path, field, f"expected a count from 0 to 2**63-1, found {number}")
    return number


def validate_template(template: str, where: str, num_shards: int = 2) -> str:
    """``template`` if it is a filepathTemplate TFDS could have written: only TFDS's fields
    (``{DATASET}``, ``{SPLIT}``, ``{FILEFORMAT}``, ``{SHARD_INDEX}``, ``{NUM_SHARDS}``,
    ``{SHARD_X_OF_Y}``), a padding width of at most 99, a relative file name, and for
    more than one shard a field that tells the shards apart.

    Raises:
        InvalidArgumentError: naming ``where`` and what is wrong.

    Example:
        >>> validate_template("{SPLIT}-{SHARD_INDEX}.rec", "x.json")
        '{SPLIT}-{SHARD_INDEX}.rec'
        >>> validate_template("/etc/{SPLIT}", "x.json")
        Traceback (most recent call last):
        ...
        feedline.core.errors.InvalidArgumentError: x.json: filepathTemplate '/etc/{SPLIT}' ...
    """
    shown = repr(template) if len(template) <= 80 else repr(template[:77]) + "..."
    if len(template) > _MAX_TEMPLATE:
        raise InvalidArgumentError(f"{where}: filepathTemplate {shown} is longer than "
                                   f"{_MAX_TEMPLATE} characters")
    if os.path.isabs(template) or template.startswith(("/", "\\")) or "\0" in template:
        raise InvalidArgumentError(f"{where}: filepathTemplate {shown} names an absolute path; "
                                   "shard files are inside the dataset folder")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise InvalidArgumentError(f"{where}: filepathTemplate {shown} is not a template "
                                   f"({error})") from None
    indexed = False
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in _TEMPLATE_FIELDS:
            raise InvalidArgumentError(
                f"{where}: filepathTemplate {shown} has the field {{{field}}}; TFDS's fields "
                f"are {', '.join('{' + f + '}' for f in _TEMPLATE_FIELDS)}")
        if conversion is not None or not _FORMAT_SPEC.match(spec or ""):
            raise InvalidArgumentError(
                f"{where}: filepathTemplate {shown}: the format of {{{field}}} "
                f"({'!' + conversion if conversion else ''}{':' + spec if spec else ''}) is "
                "not a padding of at most 99 characters")
        indexed |= field in ("SHARD_INDEX", "SHARD_X_OF_Y")
    if not indexed and num_shards > 1:
        # Every shard would be the same file.
        raise InvalidArgumentError(f"{where}: filepathTemplate {shown} has neither "
                                   "{SHARD_INDEX} nor {SHARD_X_OF_Y}: its shards would share "
                                   "one file name")
    return template


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
    if (not match or "/" in name) and os.path.isdir(name):
        # A path where a name belongs: say what reads a folder of images per class.
        from feedline.datasets.image_folder import ALLOWLIST_FORMATS

        if any(file.lower().endswith(ALLOWLIST_FORMATS)
               for _, _, files in os.walk(name) for file in files):
            raise ValueError(f"{name!r} is a folder of images per class; read it with "
                             f"fl.datasets.image_folder({name!r}) (load() takes a prepared "
                             "TFDS dataset's name, with data_dir=)")
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
    name = None
    if os.path.isfile(metadata):
        proto = read_json(metadata)
        name = proto.get("default_config_name") if isinstance(proto, dict) else None
        # The name becomes a path below builder_dir: nothing else than a config's name.
        if name is not None and (not isinstance(name, str) or not _CONFIG_NAME.match(name)
                                 or name in (".", "..")):
            raise _bad(metadata, "default_config_name",
                       f"expected a config's name, found {_describe(name)}")
    if name:
        return name
    if len(configs) == 1:
        return configs[0]
    from feedline.datasets.image_folder import ALLOWLIST_FORMATS

    # No config and no version, but images below (walked until the first: ImageNet's
    # folder holds a million): the class folders Keras' image_dataset_from_directory reads.
    if not configs and any(file.lower().endswith(ALLOWLIST_FORMATS)
                           for _, _, files in os.walk(builder_dir) for file in files):
        raise DatasetNotFoundError(
            f"{builder_dir!r} is a folder of images per class, not a prepared TFDS dataset; "
            f"read it with fl.datasets.image_folder({builder_dir!r})")
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
        """The shard files, in shard order.

        Raises:
            InvalidArgumentError: ``filepath_template`` names a file outside ``directory``.
        """
        n = self.num_shards
        digits = max(len(str(n)), 5)
        top = os.path.normpath(self.directory)
        out = []
        for index in range(n):
            x, y = f"{index:0{digits}d}", f"{n:0{digits}d}"
            name = self.filepath_template.format(
                DATASET=self.dataset_name, SPLIT=self.name,
                FILEFORMAT=_SUFFIXES.get(self.file_format, self.file_format),
                SHARD_INDEX=x, NUM_SHARDS=y, SHARD_X_OF_Y=f"{x}-of-{y}")
            path = os.path.normpath(os.path.join(top, name))
            if os.path.isabs(name) or not path.startswith(top + os.sep):
                raise InvalidArgumentError(
                    f"{os.path.join(self.directory, 'dataset_info.json')}: split "
                    f"{self.name!r}: filepathTemplate {self.filepath_template!r} names "
                    f"{name!r}, outside the dataset folder {self.directory!r}",
                    path=os.path.join(self.directory, "dataset_info.json"))
            out.append(path)
        return out

    def __repr__(self) -> str:
        return f"<SplitInfo num_examples={self.num_examples}, num_shards={self.num_shards}>"


def shard_files_on_disk(split: SplitInfo) -> list[str] | None:
    """The names of the files in the split's folder that its ``filepath_template`` gives
    for some shard index and count, sorted; ``None`` when the template cannot be matched
    that way (a padded field, a subfolder).

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> for name in ["ds-train.tfrecord-00000-of-00002", "ds-train.tfrecord-00001-of-00002",
        ...              "ds-train.tfrecord-00002-of-00003", "ds-test.tfrecord-00000-of-00001"]:
        ...     open(os.path.join(d, name), "w").close()
        >>> shard_files_on_disk(SplitInfo("train", (3, 2), d, "ds", "tfrecord"))[-1]
        'ds-train.tfrecord-00002-of-00003'
    """
    values = {"DATASET": re.escape(split.dataset_name), "SPLIT": re.escape(split.name),
              "FILEFORMAT": re.escape(_SUFFIXES.get(split.file_format, split.file_format)),
              "SHARD_INDEX": r"\d+", "NUM_SHARDS": r"\d+", "SHARD_X_OF_Y": r"\d+-of-\d+"}
    pattern = []
    for literal, field, spec, _ in string.Formatter().parse(split.filepath_template):
        pattern.append(re.escape(literal))
        if field is not None:
            if spec:
                return None
            pattern.append(values[field])
    if "/" in split.filepath_template or os.sep in split.filepath_template:
        return None
    regex = re.compile("".join(pattern))
    try:
        names = os.listdir(split.directory)
    except OSError:
        return None
    return sorted(n for n in names if regex.fullmatch(n))


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
    field = "supervisedKeys"
    if not proto:
        return None
    if not isinstance(proto, dict):
        raise _bad(path, field, f"expected an object, found {_describe(proto)}")
    if "input" in proto or "output" in proto:  # TFDS < 4.4
        return (_get(proto, "input", str, path, f"{field}.input", ""),
                _get(proto, "output", str, path, f"{field}.output", ""))

    def nest(node: Any, where: str, depth: int) -> Any:
        if depth > _MAX_NESTING:
            raise _bad(path, where, f"nested more than {_MAX_NESTING} levels")
        if not isinstance(node, dict):
            raise _bad(path, where, f"expected an object, found {_describe(node)}")
        if "featureKey" in node:
            return _get(node, "featureKey", str, path, f"{where}.featureKey", "")
        if "tuple" in node:
            content = _get(node, "tuple", dict, path, f"{where}.tuple", {})
            items = _get(content, "items", list, path, f"{where}.tuple.items", [])
            return tuple(nest(item, f"{where}.tuple.items[{i}]", depth + 1)
                         for i, item in enumerate(items))
        if "dict" in node:
            content = _get(node, "dict", dict, path, f"{where}.dict", {})
            entries = _get(content, "dict", dict, path, f"{where}.dict.dict", {})
            return {k: nest(v, f"{where}.dict.dict[{k!r}]", depth + 1)
                    for k, v in entries.items()}
        raise _bad(path, where, f"expected a featureKey, tuple or dict, found keys "
                   f"{sorted(node)[:5]}")

    return nest(proto, field, 0)


def _split_info(split: Any, index: int, path: str, directory: str, name: str,
                file_format: str) -> SplitInfo:
    """One entry of ``splits``, checked: its shard lengths, their count and total, and a
    template confined to the dataset folder."""
    where = f"splits[{index}]"
    if not isinstance(split, dict):
        raise _bad(path, where, f"expected an object, found {_describe(split)}")
    split_name = split.get("name")
    if not isinstance(split_name, str) or not _SPLIT_NAME.match(split_name):
        raise _bad(path, f"{where}.name", f"expected a split name (letters, digits, '_', "
                   f"'-'), found {_describe(split_name)}")
    where = f"splits[{index}] ({split_name!r})"
    lengths = _get(split, "shardLengths", list, path, f"{where}.shardLengths", None)
    shards = split.get("numShards")
    if lengths is None:
        if shards not in (None, "0", 0):
            raise _bad(path, f"{where}.shardLengths", "missing (written by TFDS < 3.0); "
                       "re-prepare the dataset with a newer TFDS")
        lengths = []
    if len(lengths) > MAX_SHARDS:
        raise _bad(path, f"{where}.shardLengths", f"{len(lengths)} shards, more than "
                   f"{MAX_SHARDS} (feedline.datasets.tfds_info.MAX_SHARDS)")
    lengths = [_count(n, path, f"{where}.shardLengths[{i}]") for i, n in enumerate(lengths)]
    if shards is not None and _count(shards, path, f"{where}.numShards") != len(lengths):
        raise _bad(path, f"{where}.numShards", f"{int(shards)} shards, but shardLengths "
                   f"lists {len(lengths)}")
    statistics = _get(split, "statistics", dict, path, f"{where}.statistics", {})
    total = statistics.get("numExamples")
    if total is not None and _count(total, path, f"{where}.statistics.numExamples") \
            != sum(lengths):
        raise _bad(path, f"{where}.statistics.numExamples",
                   f"{int(total)} examples, but the shardLengths add up to {sum(lengths)}")
    template = _get(split, "filepathTemplate", str, path, f"{where}.filepathTemplate",
                    "") or _DEFAULT_TEMPLATE
    validate_template(template, f"{path}: field {where}.filepathTemplate", len(lengths))
    info = SplitInfo(name=split_name, shard_lengths=tuple(lengths), directory=directory,
                     dataset_name=name, file_format=file_format, filepath_template=template,
                     num_bytes=_count(split.get("numBytes", 0), path, f"{where}.numBytes"))
    info.filepaths  # noqa: B018 - refuses a template that leads outside the folder now
    return info


def read_info(directory: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a ``<name>[/<config>]/<version>`` directory.

    Every field read is checked: shard lengths are counts, one per shard, adding up to the
    split's ``statistics.numExamples`` when it is there; ``filepathTemplate`` uses TFDS's
    fields only and names files inside ``directory``.

    Raises:
        DatasetNotFoundError: no ``dataset_info.json`` there.
        InvalidArgumentError: a malformed ``dataset_info.json`` or ``features.json``
            (naming the file and the field).

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
    if not os.path.exists(path):
        raise DatasetNotFoundError(f"{directory!r} is not a prepared TFDS dataset: it has no "
                                   "dataset_info.json")
    proto = read_json(path)
    if not isinstance(proto, dict):
        raise InvalidArgumentError(f"{path}: expected a JSON object, found "
                                   f"{_describe(proto)}", path=path)
    name = _get(proto, "name", str, path, "name", "") or \
        os.path.basename(os.path.dirname(directory))
    file_format = _get(proto, "fileFormat", str, path, "fileFormat", "") or "tfrecord"
    splits: dict[str, SplitInfo] = {}
    for index, split in enumerate(_get(proto, "splits", list, path, "splits", [])):
        info = _split_info(split, index, path, directory, name, file_format)
        if info.name in splits:
            raise _bad(path, f"splits[{index}].name", f"split {info.name!r} is listed twice")
        splits[info.name] = info
    config = _get(proto, "configName", str, path, "configName", "") or None
    version = _get(proto, "version", str, path, "version", "") or os.path.basename(directory)
    full_name = "/".join(p for p in (name, config, version) if p)
    location = _get(proto, "location", dict, path, "location", {})
    urls = _get(location, "urls", list, path, "location.urls", [])
    homepage = urls[0] if urls else ""
    if not isinstance(homepage, str):
        raise _bad(path, "location.urls[0]", f"expected a string, found {_describe(homepage)}")
    notes = _get(proto, "releaseNotes", dict, path, "releaseNotes", {})
    for key, value in notes.items():
        _get(notes, key, str, path, f"releaseNotes[{key!r}]", "")
    return DatasetInfo(
        name=name, full_name=full_name, config_name=config, version=version,
        description=_get(proto, "description", str, path, "description", ""),
        citation=_get(proto, "citation", str, path, "citation", ""),
        homepage=homepage, features=load_features(directory), splits=splits,
        supervised_keys=_supervised_keys(proto.get("supervisedKeys"), path),
        disable_shuffling=bool(_get(proto, "disableShuffling", bool, path,
                                    "disableShuffling", False)),
        file_format=file_format, data_dir=directory,
        config_description=_get(proto, "configDescription", str, path, "configDescription",
                                ""),
        release_notes=dict(notes))
