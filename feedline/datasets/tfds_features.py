"""TFDS feature connectors rebuilt from ``features.json``, decoding ``tf.train.Example`` records
to what ``tfds.as_numpy(tfds.load(...))`` gives, without TensorFlow.

``features.json`` is the proto-JSON TensorFlow Datasets writes beside the shards: a tree of
``FeaturesDict`` / ``Sequence`` nodes over leaves (``Tensor``, ``Scalar``, ``ClassLabel``,
``Text``, ``Image``, ``Video``, ``Audio``, ``BBoxFeature``). Each feature knows how it is stored
(:meth:`Feature.serialized_info`: the flat ``tf.train.Example`` keys, their dtype and shape,
``None`` for a dimension of any length) and how it is decoded (:meth:`Feature.decode`).

Decoding follows TFDS's TensorFlow path, value for value: integers are stored as int64 and
cast (``uint64`` wraps, ``bool`` is ``!= 0``), floats as float32 and cast (a ``float64``
feature holds float32 values), strings stay ``bytes``; 0-d values come out as NumPy scalars
(``bytes`` for strings); a sequence of sequences is a :class:`~feedline.RaggedValues`
(``tf.RaggedTensor`` in TFDS); images decode with :func:`feedline.image.decode_image`
(``tf.image.decode_image``'s pixels).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.datasets.tfds_metadata import MAX_METADATA_BYTES, read_json
from feedline.formats.example import RaggedValues

__all__ = [
    "FALLBACK", "MAX_DECOMPRESSED_BYTES", "MAX_DIMENSION", "MAX_NESTING", "MAX_RANK", "Audio",
    "BBoxFeature", "ClassLabel", "Feature", "FeaturesDict", "Image", "RecordPlan", "Scalar",
    "Sequence", "Tensor", "TensorInfo", "Text", "Video", "decode_record", "feature_from_json",
    "load_features", "record_plan",
]

_DTYPES = {name: np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")}
_DTYPES["bfloat16"] = None  # known to TFDS, not to NumPy: an error names it when used
_STRING = np.dtype(object)


class FeatureError(InvalidArgumentError):
    """``features.json`` describes something feedline cannot decode, or a record does not
    match its features (an :class:`~feedline.InvalidArgumentError`, so a ``ValueError``)."""


#: Most dimensions of a feature, and the largest dimension, ``features.json`` may give.
MAX_RANK = 32
MAX_DIMENSION = (1 << 31) - 1
#: Deepest nesting of FeaturesDict/Sequence in ``features.json``.
MAX_NESTING = 32
#: Most bytes one ``zlib``-encoded tensor of unknown size may decompress to (one of a known
#: shape decompresses to exactly its size).
MAX_DECOMPRESSED_BYTES = 1 << 30


def _dtype(name: Any, where: str) -> np.dtype:
    if not isinstance(name, str):
        raise FeatureError(f"{where}: dtype is not a string: {_short(name)}")
    if name in ("string", "str", "object"):
        return _STRING
    dtype = _DTYPES.get(name, False)
    if dtype is None or dtype is False:
        raise FeatureError(f"{where}: dtype {name!r} is not supported; expected one of "
                           f"string, {', '.join(k for k, v in _DTYPES.items() if v)}")
    return dtype


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any, where: str, low: int, high: int) -> int:
    """An integer of proto-JSON (a number or a decimal string) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or \
            isinstance(value, str) and not value.lstrip("-").isdigit() or \
            isinstance(value, str) and len(value) > 20:
        raise FeatureError(f"{where}: expected an integer, found {_short(value)}")
    number = int(value)
    if not low <= number <= high:
        raise FeatureError(f"{where}: {number} is not in [{low}, {high}]")
    return number


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FeatureError(f"{where}: expected a JSON object, found {_short(value)}")
    return value


def _string(value: Any, where: str, default: str | None) -> str | None:
    if value is None:
        return default
    if not isinstance(value, str):
        raise FeatureError(f"{where}: expected a string, found {_short(value)}")
    return value


def _shape(proto: Any, where: str = "features.json") -> tuple[int | None, ...]:
    where = f"{where}: shape"
    dims = _object(proto if proto is not None else {}, where).get("dimensions", [])
    if not isinstance(dims, list) or len(dims) > MAX_RANK:
        raise FeatureError(f"{where}: expected a list of at most {MAX_RANK} dimensions, "
                           f"found {_short(dims)}")
    shape = tuple(_int(d, f"{where}.dimensions[{i}]", -1, MAX_DIMENSION)
                  for i, d in enumerate(dims))
    return tuple(None if d < 0 else d for d in shape)


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """How one leaf is stored in a ``tf.train.Example``: its dtype after decoding, its
    shape (``None`` for a dimension of any length) and how many leading dimensions are
    sequences (above 1, the leaf is ragged: ``<key>/ragged_flat_values`` and
    ``<key>/ragged_row_lengths_<k>``).

    Example:
        >>> TensorInfo((None, 2), np.dtype("int32")).shape
        (None, 2)
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype
    sequence_rank: int = 0


class Feature:
    """One node of the feature tree.

    Subclasses give :meth:`serialized_info` (a :class:`TensorInfo` or a dict of them) and
    :meth:`decode` (the stored values, already cast and shaped, to the user's value).
    """

    #: ``Sequence`` decodes its items with one call on the batch when this is True.
    batch_decodes = False
    shape: tuple[int | None, ...] = ()
    dtype: np.dtype = _STRING

    def serialized_info(self) -> TensorInfo | dict[str, Any]:
        raise NotImplementedError

    def decode(self, value: Any) -> Any:
        return value

    def decode_batch(self, values: Any) -> Any:
        """Items stacked along a first dimension (a ``Sequence``), decoded."""
        if self.batch_decodes:
            return self.decode(values)
        if isinstance(values, RaggedValues):
            raise FeatureError(f"{type(self).__name__} inside a sequence of sequences "
                               "cannot be decoded (nor can TFDS)")
        items = [self.decode(item) for item in values]
        if not items:
            shape = tuple(0 if d is None else d for d in self.shape)
            return np.zeros((0, *shape), self.dtype)
        return np.stack(items)

    def load_metadata(self, directory: str, name: str | None) -> None:
        """Read what the feature keeps beside ``features.json`` (ClassLabel names)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype})"


class Tensor(Feature):
    """``tfds.features.Tensor``: an array of a dtype and shape, stored as a flat value list or,
    with ``encoding`` ``"bytes"``/``"zlib"``, as its raw (compressed) bytes.

    Example:
        >>> t = Tensor((None, 2), np.dtype("int16"), encoding="zlib")
        >>> raw = zlib.compress(np.arange(4, dtype=np.int16).tobytes())
        >>> t.decode(raw).tolist()
        [[0, 1], [2, 3]]
    """

    def __init__(self, shape: tuple[int | None, ...], dtype: np.dtype,
                 encoding: str = "none") -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.encoding = (encoding or "none").lower()
        if self.encoding not in ("none", "bytes", "zlib"):
            raise FeatureError(f"Tensor encoding {encoding!r} is unknown; expected none, "
                               "bytes or zlib")
        self._dynamic = self.shape.count(None) > 1
        self.batch_decodes = self.encoding == "none"

    def serialized_info(self) -> TensorInfo | dict[str, Any]:
        stored = (TensorInfo((), _STRING) if self.encoding != "none"
                  else TensorInfo(self.shape, self.dtype))
        if self._dynamic:
            return {"shape": TensorInfo((len(self.shape),), np.dtype("int32")), "value": stored}
        return stored

    def decode(self, value: Any) -> Any:
        if self._dynamic:
            shape = [int(d) for d in np.asarray(value["shape"]).reshape(-1)]
            value = value["value"]
        else:
            shape = [-1 if d is None else d for d in self.shape]
        if self.encoding == "none":
            return value
        data = value if isinstance(value, bytes) else bytes(value)
        known = None if -1 in shape else int(np.prod(shape, dtype=object)) * self.dtype.itemsize
        if self.encoding == "zlib":
            data = _inflate(data, min(MAX_DECOMPRESSED_BYTES, known if known is not None
                                      and known >= 0 else MAX_DECOMPRESSED_BYTES))
        if known is not None and len(data) != known or len(data) % self.dtype.itemsize:
            raise FeatureError(f"a {self.encoding}-encoded tensor of {len(data)} bytes does "
                               f"not hold {self.dtype} values of shape {tuple(shape)}")
        try:
            return np.frombuffer(data, self.dtype).reshape(shape).copy()
        except ValueError:
            raise FeatureError(f"a {self.encoding}-encoded tensor of {len(data)} bytes does "
                               f"not hold {self.dtype} values of shape {tuple(shape)}") from None


def _inflate(data: bytes, limit: int) -> bytes:
    """``zlib.decompress(data)``, refusing a stream longer than ``limit`` bytes before it
    is inflated whole (a small record must not become gigabytes)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as error:
        raise FeatureError(f"a zlib-encoded tensor is damaged ({error})") from None
    if len(out) > limit:
        raise FeatureError(f"a zlib-encoded tensor inflates to more than the {limit} bytes "
                           "its shape allows")
    if not inflater.eof:
        raise FeatureError("a zlib-encoded tensor is truncated")
    return out


class Scalar(Tensor):
    """``tfds.features.Scalar``: a 0-d :class:`Tensor`."""


class Audio(Tensor):
    """``tfds.features.Audio``: samples as a :class:`Tensor` (``[length]`` or
    ``[length, channels]``), or the encoded file's bytes when ``lazy_decode``."""

    def __init__(self, shape: tuple[int | None, ...], dtype: np.dtype, encoding: str = "none",
                 sample_rate: int | None = None, lazy_decode: bool = False) -> None:
        super().__init__(() if lazy_decode else shape, _STRING if lazy_decode else dtype,
                         encoding)
        self.sample_rate = sample_rate
        self.lazy_decode = lazy_decode


class BBoxFeature(Tensor):
    """``tfds.features.BBoxFeature``: ``float32[4]`` (ymin, xmin, ymax, xmax by default)."""

    def __init__(self, shape: tuple[int | None, ...] = (4,),
                 dtype: np.dtype = np.dtype("float32"), bbox_format: str = "REL_YXYX") -> None:
        super().__init__(shape or (4,), dtype)
        self.bbox_format = bbox_format


class ClassLabel(Tensor):
    """``tfds.features.ClassLabel``: an int64 class index; ``names`` come from
    ``<feature>.labels.txt`` beside ``features.json`` when the dataset has them.

    Example:
        >>> label = ClassLabel(num_classes=3, names=["cat", "dog", "bird"])
        >>> label.int2str(2), label.str2int("dog")
        ('bird', 1)
    """

    def __init__(self, num_classes: int | None = None, names: list[str] | None = None) -> None:
        super().__init__((), np.dtype("int64"))
        self.names = list(names) if names is not None else None
        self.num_classes = len(self.names) if names is not None else num_classes

    def load_metadata(self, directory: str, name: str | None) -> None:
        path = os.path.join(directory, f"{name}.labels.txt")
        if not os.path.isfile(path):
            return
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_METADATA_BYTES + 1)
            if len(data) > MAX_METADATA_BYTES:
                raise FeatureError(f"{path}: more than {MAX_METADATA_BYTES} bytes of class "
                                   "names", path=path)
            text = data.decode("utf-8")
        except OSError as error:
            raise FeatureError(f"{path}: cannot be read ({error.strerror or error})",
                               path=path) from None
        except UnicodeDecodeError as error:
            raise FeatureError(f"{path}: class names that are not UTF-8 (at byte "
                               f"{error.start})", path=path, offset=error.start) from None
        names = [line.strip() for line in text.split("\n") if line.strip()]
        self.names = names
        self.num_classes = len(names)

    def int2str(self, index: int) -> str:
        """The name of class ``index`` (its number as a string when there are no names)."""
        index = int(index)
        if self.names is not None:
            return self.names[index]
        if self.num_classes is None or not 0 <= index < self.num_classes:
            raise ValueError(f"Invalid integer class label {index}")
        return str(index)

    def str2int(self, name: str) -> int:
        """The index of class ``name``."""
        if self.names is not None:
            try:
                return self.names.index(name)
            except ValueError:
                raise ValueError(f"Invalid string class label {name!r}; the classes are "
                                 f"{self.names}") from None
        try:
            index = int(name)
        except ValueError:
            index = -1
        if self.num_classes is None or not 0 <= index < self.num_classes:
            raise ValueError(f"Invalid string class label {name!r}")
        return index

    def __repr__(self) -> str:
        return f"ClassLabel(num_classes={self.num_classes})"


class Text(Tensor):
    """``tfds.features.Text``: a string, returned as ``bytes`` (TFDS's ``tf.string``)."""

    def __init__(self) -> None:
        super().__init__((), _STRING)


class Image(Feature):
    """``tfds.features.Image``: an encoded PNG/JPEG/GIF/BMP decoded to ``[H, W, C]`` as
    ``tf.image.decode_image(contents, channels=C, dtype=dtype)`` does.

    Example:
        >>> from feedline.image import encode_png
        >>> image = Image((None, None, 3), np.dtype("uint8"))
        >>> image.decode(encode_png(np.zeros((2, 3, 3), np.uint8))).shape
        (2, 3, 3)
    """

    def __init__(self, shape: tuple[int | None, ...] = (None, None, 3),
                 dtype: np.dtype = np.dtype("uint8"), encoding_format: str | None = None,
                 use_colormap: bool = False) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.encoding_format = encoding_format
        self.use_colormap = use_colormap
        if self.dtype not in (np.dtype("uint8"), np.dtype("uint16"), np.dtype("float32")):
            raise FeatureError(f"Image dtype {self.dtype} is not supported; expected uint8, "
                               "uint16 or float32")

    def serialized_info(self) -> TensorInfo:
        return TensorInfo((), _STRING)

    def decode(self, value: Any) -> np.ndarray:
        from feedline.image import decode_image

        channels = self.shape[-1] if self.shape else None
        if self.dtype == np.float32:
            # TFDS stores a 1-channel float32 image bit-cast to a 4-channel uint8 PNG.
            pixels = decode_image(value, channels=4, dtype=np.uint8)
            return np.ascontiguousarray(pixels).view(np.float32)
        return decode_image(value, channels=channels or None, dtype=self.dtype)

    def __repr__(self) -> str:
        return f"Image(shape={self.shape}, dtype={self.dtype})"


class Sequence(Feature):
    """``tfds.features.Sequence``: a list of ``feature`` values (``length`` fixed or
    ``None``), stored with one more leading dimension on each of its leaves.

    Example:
        >>> seq = Sequence(Tensor((), np.dtype("int32")), length=None)
        >>> seq.serialized_info()
        TensorInfo(shape=(None,), dtype=dtype('int32'), sequence_rank=1)
    """

    def __init__(self, feature: Feature, length: int | None = None) -> None:
        self.feature = feature
        self.batch_decodes = feature.batch_decodes
        self.length = length
        self.shape = (length, *feature.shape)
        self.dtype = feature.dtype

    def serialized_info(self) -> TensorInfo | dict[str, Any]:
        def add(info: TensorInfo) -> TensorInfo:
            return TensorInfo((self.length, *info.shape), info.dtype, info.sequence_rank + 1)
        return _map_infos(add, self.feature.serialized_info())

    def decode(self, value: Any) -> Any:
        return self.feature.decode_batch(value)

    def decode_batch(self, values: Any) -> Any:
        if self.feature.batch_decodes:
            return self.feature.decode_batch(values)
        raise FeatureError(f"a sequence of sequences of {self.feature!r} cannot be decoded "
                           "(nor can TFDS)")

    def load_metadata(self, directory: str, name: str | None) -> None:
        self.feature.load_metadata(directory, name)

    def __getitem__(self, key: str) -> Feature:
        return self.feature[key]  # type: ignore[index]

    def __repr__(self) -> str:
        return f"Sequence({self.feature!r}, length={self.length})"


class Video(Sequence):
    """``tfds.features.Video``: a :class:`Sequence` of encoded frames (:class:`Image`)."""

    def __init__(self, shape: tuple[int | None, ...], dtype: np.dtype = np.dtype("uint8"),
                 encoding_format: str = "png") -> None:
        super().__init__(Image(shape[1:], dtype, encoding_format), length=shape[0])


class FeaturesDict(Feature):
    """``tfds.features.FeaturesDict``: named features; decodes to a dict in the order
    ``features.json`` lists them.

    Example:
        >>> fd = FeaturesDict({"a": Text(), "b": Tensor((2,), np.dtype("int64"))})
        >>> list(fd.keys()), fd["b"].shape
        (['a', 'b'], (2,))
    """

    def __init__(self, features: dict[str, Feature]) -> None:
        self.features = dict(features)
        self.batch_decodes = all(f.batch_decodes for f in self.features.values())

    def serialized_info(self) -> dict[str, Any]:
        return {name: f.serialized_info() for name, f in self.features.items()}

    def decode(self, value: Any) -> dict[str, Any]:
        return {name: f.decode(value[name]) for name, f in self.features.items()}

    def decode_batch(self, values: Any) -> dict[str, Any]:
        return {name: f.decode_batch(values[name]) for name, f in self.features.items()}

    def load_metadata(self, directory: str, name: str | None) -> None:
        for child, feature in self.features.items():
            # TFDS's convert_feature_name_to_filename: "/" in a key becomes ".", parents "-".
            child_file = child.replace("/", ".")
            feature.load_metadata(directory, child_file if name is None else
                                  "-".join([*name.split("/"), child_file]))

    def __getitem__(self, key: str) -> Feature:
        return self.features[key]

    def keys(self) -> Any:
        return self.features.keys()

    def items(self) -> Any:
        return self.features.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self.features)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.features.items())
        return f"FeaturesDict({{{inner}}})"


def _map_infos(fn: Callable[[TensorInfo], TensorInfo], info: Any) -> Any:
    if isinstance(info, dict):
        return {k: _map_infos(fn, v) for k, v in info.items()}
    return fn(info)


_KINDS = ("featuresDict", "sequence", "tensor", "classLabel", "text", "image", "video",
          "audio", "boundingBox")


def feature_from_json(proto: Mapping[str, Any], where: str = "features.json",
                      depth: int = 0) -> Feature:
    """A :class:`Feature` tree from the proto-JSON of ``features.json``.

    Args:
        proto: The decoded JSON of one feature (``{"pythonClassName": ..., "<kind>": {...}}``).
        where: What to name in errors (the file and the feature's path in it).
        depth: How deep ``proto`` is nested (at most :data:`MAX_NESTING`).

    Raises:
        FeatureError: an unknown feature type or dtype, or a field of the wrong kind,
            naming ``where``.

    Example:
        >>> feature_from_json({"tensor": {"dtype": "float32", "shape": {"dimensions": ["-1"]}}})
        Tensor(shape=(None,), dtype=float32)
    """
    if depth > MAX_NESTING:
        raise FeatureError(f"{where}: features nested more than {MAX_NESTING} levels deep")
    try:
        return _feature(_object(proto, where), where, depth)
    except FeatureError as error:
        if where in str(error):
            raise
        # A feature's own constructor says what is wrong, not where (an Image's dtype).
        raise FeatureError(f"{where}: {error}", path=error.path) from None


def _feature(proto: Mapping[str, Any], where: str, depth: int) -> Feature:
    class_name = _string(proto.get("pythonClassName"), f"{where}: pythonClassName", "")
    assert class_name is not None
    short = class_name.rsplit(".", 1)[-1]
    if "featuresDict" in proto:
        content = _object(proto["featuresDict"], f"{where}: featuresDict")
        children = _object(content.get("features", {}), f"{where}: featuresDict.features")
        return FeaturesDict({str(name): feature_from_json(child, f"{where}/{name}", depth + 1)
                             for name, child in children.items()})
    if "sequence" in proto:
        content = _object(proto["sequence"], f"{where}: sequence")
        length = _int(content.get("length", -1), f"{where}: sequence.length", -1,
                      MAX_DIMENSION)
        if "feature" not in content:
            raise FeatureError(f"{where}: sequence has no feature")
        return Sequence(feature_from_json(content["feature"], f"{where}[]", depth + 1),
                        None if length < 0 else length)
    if "classLabel" in proto:
        content = _object(proto["classLabel"], f"{where}: classLabel")
        count = _int(content.get("numClasses", 0), f"{where}: classLabel.numClasses", 0,
                     (1 << 63) - 1)
        return ClassLabel(num_classes=count or None)
    if "text" in proto:
        return Text()
    if "image" in proto:
        content = _object(proto["image"], f"{where}: image")
        return Image(_shape(content.get("shape"), where),
                     _dtype(content.get("dtype", "uint8"), where),
                     _string(content.get("encodingFormat"), f"{where}: image.encodingFormat",
                             None), bool(content.get("useColormap", False)))
    if "video" in proto:
        content = _object(proto["video"], f"{where}: video")
        shape = _shape(content.get("shape"), where)
        if len(shape) != 4:
            raise FeatureError(f"{where}: a video's shape is [frames, height, width, "
                               f"channels], found {shape}")
        return Video(shape, _dtype(content.get("dtype", "uint8"), where),
                     _string(content.get("encodingFormat"), f"{where}: video.encodingFormat",
                             "png") or "png")
    if "audio" in proto:
        content = _object(proto["audio"], f"{where}: audio")
        encoding = _string(content.get("encoding"), f"{where}: audio.encoding", "none")
        assert encoding is not None
        rate = content.get("sampleRate")
        return Audio(_shape(content.get("shape"), where),
                     _dtype(content.get("dtype", "int64"), where),
                     "none" if encoding.lower() in ("", "none") else encoding,
                     None if rate is None else _int(rate, f"{where}: audio.sampleRate", 0,
                                                    (1 << 63) - 1),
                     bool(content.get("lazyDecode", False)))
    if "boundingBox" in proto:
        content = _object(proto["boundingBox"], f"{where}: boundingBox")
        return BBoxFeature(_shape(content.get("shape"), where),
                           _dtype(content.get("dtype", "float32"), where),
                           _string(content.get("bboxFormat"), f"{where}: bboxFormat",
                                   "REL_YXYX") or "REL_YXYX")
    if "tensor" in proto:
        content = _object(proto["tensor"], f"{where}: tensor")
        kind = Scalar if short == "Scalar" else Tensor
        if "dtype" not in content:
            raise FeatureError(f"{where}: tensor has no dtype")
        encoding = _string(content.get("encoding"), f"{where}: tensor.encoding", "none")
        return kind(_shape(content.get("shape"), where), _dtype(content["dtype"], where),
                    encoding or "none")
    if "type" in proto and "content" in proto:
        raise FeatureError(f"{where}: this features.json is in the pre-2021 TFDS format "
                           f"({_short(proto['type'])}), which feedline does not read; "
                           "re-prepare the dataset with TFDS >= 4.3")
    found = short or ", ".join(sorted(map(str, proto))) or "an empty object"
    raise FeatureError(f"{where}: unknown feature type {found!r}; feedline decodes "
                       f"{', '.join(_KINDS)} (FeaturesDict, Sequence, Tensor, Scalar, "
                       "ClassLabel, Text, Image, Video, Audio, BBoxFeature)")


def load_features(directory: str) -> FeaturesDict | Feature:
    """The feature tree of a prepared TFDS directory, with ClassLabel names loaded.

    Raises:
        FeatureError: no readable ``features.json`` in ``directory``, or one describing a
            feature feedline cannot decode, naming the file and feature.

    Example:
        >>> import json, os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> with open(os.path.join(d, "features.json"), "w") as f:
        ...     json.dump({"featuresDict": {"features": {"label": {"classLabel": {
        ...         "numClasses": "2"}}}}}, f)
        >>> with open(os.path.join(d, "label.labels.txt"), "w") as f:
        ...     _ = f.write("no\\nyes\\n")
        >>> load_features(d)["label"].names
        ['no', 'yes']
    """
    path = os.path.join(directory, "features.json")
    try:
        proto = read_json(path, missing=FeatureError)
    except FeatureError:
        raise
    except InvalidArgumentError as error:
        raise FeatureError(str(error), path=path, offset=error.offset) from None
    feature = feature_from_json(proto, path)
    feature.load_metadata(directory, None)
    return feature


def flat_infos(info: Any, prefix: str = "") -> dict[str, TensorInfo]:
    """``{"a/b": TensorInfo}`` for a nested serialized info (the Example keys)."""
    if isinstance(info, TensorInfo):
        return {prefix: info}
    out: dict[str, TensorInfo] = {}
    for key, child in info.items():
        out.update(flat_infos(child, f"{prefix}/{key}" if prefix else key))
    return out


def _cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == _STRING:
        return values if values.dtype == _STRING else values.astype(object)
    if values.dtype == dtype:
        return values
    if dtype == np.bool_:
        return values != 0
    if dtype == np.uint64 and values.dtype == np.int64:
        return values.view(np.uint64)
    return values.astype(dtype)


def _leaf(example: Mapping[str, np.ndarray], key: str, info: TensorInfo) -> Any:
    if info.sequence_rank > 1:
        flat = example.get(f"{key}/ragged_flat_values")
        flat = _cast(np.asarray(flat if flat is not None else np.zeros(0, info.dtype
                                if info.dtype != _STRING else object)), info.dtype)
        inner = info.shape[info.sequence_rank:]
        flat = flat.reshape((-1, *inner))
        splits = []
        for level in range(info.sequence_rank - 1):
            lengths = example.get(f"{key}/ragged_row_lengths_{level}")
            lengths = np.zeros(0, np.int64) if lengths is None else np.asarray(lengths, np.int64)
            splits.append(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        return RaggedValues(flat, splits)
    values = example.get(key)
    if values is None:
        if info.shape.count(None) == 1:  # FixedLenSequenceFeature(allow_missing=True)
            values = np.zeros(0, np.int64 if info.dtype != _STRING else object)
        else:
            raise KeyError(key)
    values = _cast(np.asarray(values), info.dtype)
    shape = tuple(-1 if d is None else d for d in info.shape)
    if not shape:
        if values.size != 1:
            raise FeatureError(f"feature {key!r}: expected 1 value, found {values.size}")
        # A string is handed to decoders (images, encoded tensors) as bytes.
        return values[0] if values.dtype == _STRING else values.reshape(())
    try:
        return values.reshape(shape)
    except ValueError:
        raise FeatureError(f"feature {key!r}: {values.size} values do not fit the shape "
                           f"{info.shape}") from None


def _nest(flat: dict[str, Any], info: Any, prefix: str = "") -> Any:
    if isinstance(info, TensorInfo):
        return flat[prefix]
    return {k: _nest(flat, v, f"{prefix}/{k}" if prefix else k) for k, v in info.items()}


def _scalars(value: Any) -> Any:
    # tfds.as_numpy gives NumPy scalars (bytes for strings) for 0-d tensors.
    if isinstance(value, np.ndarray):
        return value[()] if value.ndim == 0 else value
    if isinstance(value, dict):
        return {k: _scalars(v) for k, v in value.items()}
    return value


def decode_record(feature: Feature, infos: dict[str, TensorInfo], info_tree: Any,
                  example: Mapping[str, np.ndarray]) -> Any:
    """Decode one parsed ``tf.train.Example`` (``{key: 1-D values}``) through ``feature``.

    ``infos``/``info_tree`` are ``flat_infos(feature.serialized_info())`` and
    ``feature.serialized_info()`` (computed once per dataset).

    Raises:
        KeyError: a feature the record lacks (its key).
        FeatureError: values that do not fit the feature's shape.

    Example:
        >>> from feedline import decode_example, encode_example
        >>> fd = FeaturesDict({"x": Tensor((2,), np.dtype("int32")), "s": Text()})
        >>> info = fd.serialized_info()
        >>> decode_record(fd, flat_infos(info), info,
        ...               decode_example(encode_example({"x": [1, 2], "s": [b"hi"]})))
        {'x': array([1, 2], dtype=int32), 's': b'hi'}
    """
    flat = {key: _leaf(example, key, leaf) for key, leaf in infos.items()}
    return _scalars(feature.decode(_nest(flat, info_tree)))


# The fast path: one record through the C Example parser and a plan compiled once per dataset.
#
# decode_record builds a protobuf message per record, every value list as an array, then
# walks the feature tree per record (~100 us of Python on a CIFAR-like record). The plan below
# asks the C parser (feedline.formats._example_fast, the engine of fl.parse_example) for
# exactly the keys the features read, with their stored kind and value count, and assembles
# the output with one precomputed step per leaf. The C parser refuses anything unusual (a
# missing key, a list of another kind, a wrong count, odd wire data) by returning None: the
# caller then runs decode_record, which gives the value or the precise error, so the fast
# path only ever answers where its answer is decode_record's.

#: What :meth:`RecordPlan.__call__` returns when the record needs :func:`decode_record`.
FALLBACK: Any = object()

_KIND_OF = {"b": 3, "i": 3, "u": 3, "f": 2}  # dtype.kind -> Feature oneof field (int64, float)
_NATIVE_DTYPE = {2: np.dtype("float32"), 3: np.dtype("int64")}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _image_fast(feature: Image) -> Callable[[Any], Any]:
    """``feature.decode`` with a direct OpenCV call for 8-bit RGB and gray PNGs.

    ``decode_image`` decodes a PNG unchanged (BGR), flips it to RGB and copies it twice;
    for an 8-bit RGB PNG without a ``tRNS`` chunk OpenCV's ``IMREAD_COLOR_RGB`` gives those
    pixels in one step (libpng's own RGB order), and an 8-bit gray one is its 2-D decode with
    a channel axis. Anything else (other depths, colour types, channels, dtypes, JPEG, damaged
    data) goes through ``feature.decode``, which also raises the errors.
    """
    slow = feature.decode
    channels = feature.shape[-1] if feature.shape else None
    if feature.dtype != np.uint8 or channels not in (1, 3):
        return slow
    from feedline.image import _native

    try:
        cv2 = _native.cv2()
    except ImportError:
        return slow
    flag = getattr(cv2, "IMREAD_COLOR_RGB", None) if channels == 3 else cv2.IMREAD_UNCHANGED
    if flag is None:  # OpenCV < 4.10
        return slow
    color_type = 2 if channels == 3 else 0  # PNG IHDR: RGB, grayscale

    def decode(value: Any) -> Any:
        if (type(value) is not bytes or len(value) < 26 or value[25] != color_type
                or value[24] != 8 or not value.startswith(_PNG_MAGIC) or b"tRNS" in value):
            return slow(value)
        image = cv2.imdecode(np.frombuffer(value, np.uint8), flag)
        if image is None or image.ndim != (3 if channels == 3 else 2):
            return slow(value)  # raises decode_image's error for damaged data
        return image if channels == 3 else image[..., None]

    return decode


class RecordPlan:
    """Decodes one serialized record as :func:`decode_record` does, through the C parser.

    Built by :func:`record_plan` for features whose leaves it can read directly; calling it
    returns the decoded value, or :data:`FALLBACK` for a record it does not decode itself
    (the caller then runs :func:`decode_record`, which gives the value or the error).
    """

    def __init__(self, parse: Callable[..., Any], native: tuple[Any, ...],
                 steps: list[Callable[[Any], Any]], build: Callable[[Iterator[Any]], Any],
                 batch_steps: list[Callable[[Any, Any, int], Any]] | None = None) -> None:
        self._parse, self._native, self._steps, self._build = parse, native, steps, build
        self._batch_steps = batch_steps

    def __call__(self, record: bytes) -> Any:
        parsed = self._parse([record], self._native)
        if parsed is None:
            return FALLBACK
        values = []
        for step, (data, _) in zip(self._steps, parsed):
            value = step(data)
            if value is FALLBACK:
                return FALLBACK
            values.append(value)
        return self._build(iter(values))

    def batch(self, records: list[bytes]) -> Any:
        """What ``batch`` stacks from ``[plan(r) for r in records]``, each leaf read for all
        records at once (one C parser call); :data:`FALLBACK` when any record needs
        :func:`decode_record` (the caller then decodes record by record)."""
        if self._batch_steps is None or not records:
            return FALLBACK
        parsed = self._parse(records, self._native)
        if parsed is None:
            return FALLBACK
        count = len(records)
        columns = []
        for batch_step, (data, aux) in zip(self._batch_steps, parsed):
            value = batch_step(data, aux, count)
            if value is FALLBACK:
                return FALLBACK
            columns.append(value)
        return self._build(iter(columns))


def _batch_step(step: Callable[[Any], Any], kind: int, size: int, dims: tuple[int, ...],
                native: np.dtype | None, direct: bool) -> Callable[[Any, Any, int], Any]:
    """The leaf's batch: ``stack_leaves`` of ``step`` on each record's share of the parsed
    values (``direct``: a reshape of the values, which is the same array for a fixed-size
    numeric leaf stored as its own dtype)."""
    from feedline.transforms.batch import stack_leaves

    def batch_step(data: Any, aux: Any, count: int) -> Any:
        if size >= 0:
            if aux:
                return FALLBACK  # a record lacks the feature: decode_record names it
            if direct:
                return np.frombuffer(data, native).reshape((count, *dims))
            bounds = [start * size for start in range(count + 1)]
        else:
            bounds = np.frombuffer(aux, np.int64).tolist()
        if kind != 1:
            data = np.frombuffer(data, native)
        values = []
        for start, stop in itertools.pairwise(bounds):
            value = step(data[start:stop])
            if value is FALLBACK:
                return FALLBACK
            values.append(value)
        return stack_leaves(values)

    return batch_step


def _leaf_step(info: TensorInfo, post: Callable[[Any], Any] | None) -> tuple[Any, Any] | None:
    """``(native spec, value step)`` for one leaf, or None when the plan cannot read it."""
    shape = info.shape
    unknown = shape.count(None)
    if info.sequence_rank > 1 or unknown > 1:
        return None
    if info.dtype == _STRING:
        kind = 1
    else:
        kind = _KIND_OF.get(info.dtype.kind, 0)
        if not kind:
            return None  # complex
    inner = 1
    for d in shape:
        inner *= 1 if d is None else d
    if unknown and inner == 0:
        return None
    size = -1 if unknown else inner
    dims = tuple(-1 if d is None else d for d in shape)
    dtype = info.dtype

    same = False
    if kind == 1:
        if not dims:
            def convert(data: Any) -> Any:
                return data[0]
        else:
            def convert(data: Any) -> Any:
                if unknown and len(data) % inner:
                    return FALLBACK  # decode_record names the shape
                out = np.empty(len(data), dtype=object)
                out[:] = data
                return out.reshape(dims)
    else:
        native = _NATIVE_DTYPE[kind]
        same = dtype == native

        def convert(data: Any) -> Any:
            values = np.frombuffer(data, native)
            if unknown and values.size % inner:
                return FALLBACK
            if not same:
                values = _cast(values, dtype)
            return values[0] if not dims else values.reshape(dims)

    if post is None:
        step = convert
    else:
        def step(data: Any) -> Any:
            value = convert(data)
            return value if value is FALLBACK else _scalars(post(value))
    direct = post is None and kind != 1 and same and size >= 0 and bool(dims or size == 1)
    batch = _batch_step(step, kind, size, dims, None if kind == 1 else _NATIVE_DTYPE[kind],
                        direct)
    return (info, kind, size), step, batch


def record_plan(feature: Feature) -> RecordPlan | None:
    """A :class:`RecordPlan` for ``feature``, or None when it needs :func:`decode_record`
    (no C parser; ragged or dynamically shaped tensors, complex dtypes, a decoder over a
    whole dict).

    Example:
        >>> from feedline import encode_example
        >>> fd = FeaturesDict({"x": Tensor((2,), np.dtype("int32")), "s": Text()})
        >>> plan = record_plan(fd)
        >>> record = encode_example({"x": [1, 2], "s": [b"hi"]})
        >>> plan(record) if plan is not None else {"x": np.array([1, 2], np.int32), "s": b"hi"}
        {'x': array([1, 2], dtype=int32), 's': b'hi'}
    """
    from feedline.formats.example import cbridge

    if cbridge.extension is None:
        return None
    native: list[tuple[bytes, int, int, bool]] = []
    steps: list[Callable[[Any], Any]] = []
    batch_steps: list[Callable[[Any, Any, int], Any]] = []

    def compile_node(node: Feature, key: str) -> Callable[[Iterator[Any]], Any] | None:
        if type(node) is FeaturesDict:
            children = []
            for name, child in node.items():
                built = compile_node(child, f"{key}/{name}" if key else name)
                if built is None:
                    return None
                children.append((name, built))

            def build_dict(values: Iterator[Any]) -> Any:
                return {name: built(values) for name, built in children}
            return build_dict
        info = node.serialized_info()
        if not isinstance(info, TensorInfo):
            return None  # a decoder over a dict, or a dynamically shaped tensor
        if isinstance(node, Tensor) and node.encoding == "none" and not node._dynamic:
            post = None  # Tensor.decode returns the stored value
        elif type(node) is Image:
            post = _image_fast(node)
        else:
            post = node.decode
        leaf = _leaf_step(info, post)
        if leaf is None:
            return None
        (_, kind, size), step, batch_step = leaf
        native.append((key.encode(), kind, size, False))
        steps.append(step)
        batch_steps.append(batch_step)
        return next

    try:
        build = compile_node(feature, "")
    except UnicodeEncodeError:  # a key with lone surrogates: as protobuf's map decides
        return None
    if build is None:
        return None
    if not isinstance(feature, FeaturesDict):
        return None  # a lone leaf: decode_record wraps nothing around it, kept simple
    return RecordPlan(cbridge.extension.parse_examples, tuple(native), steps, build,
                      batch_steps)
