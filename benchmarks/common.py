"""What every system computes, written once in NumPy and plain Python.

Every system under test (feedline, tf.data, DataLoader, Grain) imports this module inside its
own virtual environment, so it needs only NumPy and the standard library. Systems that have
their own vectorized ops (tf.data) re-express these functions in those ops; the harness then
checks that they produce the same values as the functions here.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# ----------------------------------------------------------------------------- chess
CHESS_RECORD_BYTES = 194
CHESS_BITS = CHESS_RECORD_BYTES * 8  # 1552
CHESS_BATCH = 512
CHESS_SHUFFLE_BUFFER = 10_000
# Channel order of the board planes (issue 4): the four groups of six come from strided planes.
CHESS_CHANNELS = np.array([0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21,
                           2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23], dtype=np.int64)
# The second and fourth groups of six are negated.
CHESS_SIGN = np.ones(24, dtype=np.float32)
CHESS_SIGN[6:12] = -1.0
CHESS_SIGN[18:24] = -1.0
SCORE_A, SCORE_K, SCORE_B = 0.7, 600.0, 10.0


def chess_transform(d: np.ndarray, s: np.ndarray) -> dict[str, np.ndarray]:
    """The chess workload's per-batch transform on parsed features.

    Args:
        d: ``(n, 194)`` uint8: the ``d`` bytes feature of ``n`` records.
        s: ``(n,)`` int64: the ``s`` feature.

    Returns:
        ``board`` ``(n, 8, 8, 24)`` float32, ``flags`` ``(n, 10)`` float32, ``score`` ``(n,)``
        float32.

    Example:
        >>> out = chess_transform(np.zeros((2, 194), np.uint8), np.array([0, 600]))
        >>> out["board"].shape, out["flags"].shape, [round(float(v), 4) for v in out["score"]]
        ((2, 8, 8, 24), (2, 10), [0.0, 0.5331])
    """
    n = d.shape[0]
    bits = np.unpackbits(d, axis=1)
    board = bits[:, :1536].reshape(n, 8, 8, 24)[..., CHESS_CHANNELS].astype(np.float32)
    board *= CHESS_SIGN
    flags = bits[:, 1536:1546].astype(np.float32)
    return {"board": board, "flags": flags, "score": chess_score(bits[:, 1546], s)}


def chess_score(m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``(1-m)*A*tanh(s/K) + m*sign(s)*(A + (1-A)/(B-1)*max(0, B-|s|))`` in float32.

    Example:
        >>> [round(float(v), 4) for v in chess_score(np.array([1, 1], np.uint8), np.array([-3, 20]))]
        [-0.9333, 0.7]
    """
    m = m.astype(np.float32)
    s = s.astype(np.float32)
    a, k, b = np.float32(SCORE_A), np.float32(SCORE_K), np.float32(SCORE_B)
    soft = a * np.tanh(s / k)
    hard = np.sign(s) * (a + (np.float32(1) - a) / (b - np.float32(1))
                         * np.maximum(np.float32(0), b - np.abs(s)))
    return ((np.float32(1) - m) * soft + m * hard).astype(np.float32)


# ----------------------------------------------------------------------------- images
IMAGE_SIZE = 320
CROP = 224
IMAGE_BATCH = 64
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def augment_params(n: int, seed: int) -> np.ndarray:
    """Random crop offsets and flips of ``n`` images: ``(n, 3)`` int64 ``[dy, dx, flip]``.

    Every system draws its crop and flip from this table (carried with the file name), so that
    the harness can check that all of them computed the same pixels, in any order.

    Example:
        >>> p = augment_params(4, seed=0)
        >>> p.shape, bool((p[:, :2] <= 320 - 224).all()), set(p[:, 2].tolist()) <= {0, 1}
        ((4, 3), True, True)
    """
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, IMAGE_SIZE - CROP + 1, size=(n, 2))
    flips = rng.integers(0, 2, size=(n, 1))
    return np.concatenate([offsets, flips], axis=1).astype(np.int64)


def image_params(data: dict[str, Any]) -> np.ndarray:
    """The crop/flip table of ``data["files"]``: rows of ``data["params"]``, repeated when
    the file list is the data set repeated (the ``feed`` workload's epochs).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "p.npy")
        >>> np.save(path, np.array([[1, 2, 0], [3, 4, 1]]))
        >>> image_params({"params": path, "files": ["a", "b", "a", "b"]})[:, 0].tolist()
        [1, 3, 1, 3]
    """
    params = np.load(data["params"])
    repeat, rest = divmod(len(data["files"]), len(params))
    if rest:
        raise ValueError(f"{len(data['files'])} files for {len(params)} crop/flip rows")
    return np.tile(params, (repeat, 1)) if repeat > 1 else params


def crop_flip_normalize(image: np.ndarray, dy: int, dx: int, flip: int) -> np.ndarray:
    """Crop ``224x224`` at ``(dy, dx)``, flip horizontally if ``flip``, ImageNet-normalize.

    Example:
        >>> out = crop_flip_normalize(np.full((320, 320, 3), 255, np.uint8), 0, 0, 1)
        >>> out.shape, out.dtype, [round(float(v), 3) for v in out[0, 0]]
        ((224, 224, 3), dtype('float32'), [2.249, 2.429, 2.64])
    """
    crop = image[dy:dy + CROP, dx:dx + CROP]
    if flip:
        crop = crop[:, ::-1]
    return (crop.astype(np.float32) * np.float32(1 / 255) - IMAGENET_MEAN) / IMAGENET_STD


def decode_jpeg(data: bytes, decoder: str) -> np.ndarray:
    """Decode to ``(h, w, 3)`` uint8 RGB with ``"simplejpeg"`` or ``"pillow"``."""
    if decoder == "simplejpeg":
        import simplejpeg

        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    if decoder == "pillow":
        import io

        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"))
    raise ValueError(f"unknown JPEG decoder {decoder!r}: expected 'simplejpeg' or 'pillow'")


def load_and_augment(path: str | bytes, dy: int, dx: int, flip: int,
                     decoder: str) -> np.ndarray:
    """Read one JPEG file and return its augmented float32 ``(224, 224, 3)`` crop."""
    if isinstance(path, bytes):
        path = path.decode()
    with open(path, "rb") as f:
        data = f.read()
    return crop_flip_normalize(decode_jpeg(data, decoder), int(dy), int(dx), int(flip))


# The images_tfrecord workload: the same JPEGs inside tf.train.Example records, as ImageNet's
# TFRecords hold them (``image/encoded``, ``image/class/label``), plus ``image/index``, the row
# of the crop/flip table, so every system makes the same crops after its own shuffle.
IMAGE_KEY, LABEL_KEY, INDEX_KEY = "image/encoded", "image/class/label", "image/index"
IMAGE_RECORD_SHUFFLE = 1024


def image_label(index: int) -> int:
    """The class label stored with image ``index`` (1..1000, ImageNet's range).

    Example:
        >>> [image_label(i) for i in (0, 999, 1000)]
        [1, 1000, 1]
    """
    return 1 + index % 1000


def encode_image_example(jpeg: bytes, label: int, index: int) -> bytes:
    """A serialized ``tf.train.Example`` of one image record (wire format by hand, no
    TensorFlow): ``image/encoded`` (bytes), ``image/class/label`` and ``image/index`` (int64).

    Example:
        >>> record = encode_image_example(b"\\xff\\xd8", 7, 3)
        >>> len(record), record[:2].hex()
        (77, '0a4b')
    """
    def entry(key: bytes, feature: bytes) -> bytes:
        return _field(1, _field(1, key) + _field(2, feature))

    encoded = _field(1, _field(1, jpeg))  # Feature.bytes_list{value: jpeg}
    label_f = _field(3, _field(1, _varint(label)))  # Feature.int64_list{value: [label]}
    index_f = _field(3, _field(1, _varint(index)))
    return _field(1, entry(IMAGE_KEY.encode(), encoded) + entry(LABEL_KEY.encode(), label_f)
                  + entry(INDEX_KEY.encode(), index_f))


def parse_image_record(record: bytes, example_pb2: Any) -> tuple[bytes, int, int]:
    """``(jpeg, label, index)`` of one record, parsed with a protobuf ``example_pb2`` module
    (the ``tfrecord`` package's, in the DataLoader and Grain environments)."""
    example = example_pb2.Example()
    example.ParseFromString(record)
    feature = example.features.feature
    return (feature[IMAGE_KEY].bytes_list.value[0], int(feature[LABEL_KEY].int64_list.value[0]),
            int(feature[INDEX_KEY].int64_list.value[0]))


# ----------------------------------------------------------------------------- overhead
OVERHEAD_BATCH = 256

# ----------------------------------------------------------------------------- python-heavy
TEXT_BATCH = 128
TOKENS = 64
VOCAB = 30_000


def tokenize(line: str | bytes) -> np.ndarray:
    """A deliberately pure-Python tokenizer (holds the GIL, ~50 µs a line of ~80 words).

    Lower-cases, splits on whitespace, strips punctuation, hashes each word character by
    character into a vocabulary id and pads or cuts to ``TOKENS`` ids.

    Example:
        >>> tokenize("Hello, world!")[:3].tolist()
        [25501, 1945, 0]
    """
    if isinstance(line, bytes):
        line = line.decode()
    ids = []
    for word in line.lower().split():
        word = word.strip(".,;:!?\"'()")
        h = 7
        for ch in word:
            h = (h * 31 + ord(ch)) % 1_000_003
        ids.append(1 + h % (VOCAB - 1))
    ids = ids[:TOKENS] + [0] * (TOKENS - min(len(ids), TOKENS))
    return np.array(ids, dtype=np.int32)


# ----------------------------------------------------------------------------- shuffle memory
SHUFFLE_ELEMENT_BYTES = 1 << 20


def shuffle_element(i: int, nbytes: int = SHUFFLE_ELEMENT_BYTES) -> np.ndarray:
    """Element ``i`` of the shuffle-memory workload: ``nbytes`` of uint8 all equal to ``i % 251``.

    Example:
        >>> e = shuffle_element(300, 8); e.tolist()
        [49, 49, 49, 49, 49, 49, 49, 49]
    """
    return np.full(nbytes, i % 251, dtype=np.uint8)


# ----------------------------------------------------------------------------- digests
def batch_leaves(batch: Any) -> list[np.ndarray]:
    """The leaves of a batch (dict, tuple, array, torch or TF tensor) as NumPy arrays, in
    a fixed order (dict keys sorted)."""
    if isinstance(batch, dict):
        return [leaf for key in sorted(batch) for leaf in batch_leaves(batch[key])]
    if isinstance(batch, list | tuple):
        return [leaf for item in batch for leaf in batch_leaves(item)]
    if hasattr(batch, "numpy"):  # torch.Tensor, tf.Tensor
        return [np.asarray(batch.numpy())]
    return [np.asarray(batch)]


def batch_size_of(batch: Any) -> int:
    """Number of elements in a batch (the leading dimension of its first leaf)."""
    first = batch_leaves(batch)[0]
    return int(first.shape[0]) if first.ndim else 1


def batch_digest(batch: Any) -> float:
    """An order-independent checksum of a batch: the float64 sum of about 64 values spread
    evenly over every row of every leaf. Summed over an epoch it tells whether two systems
    produced the same multiset of elements, for a small fraction of the cost of the epoch.

    Example:
        >>> batch_digest({"a": np.ones((2, 100)), "b": np.arange(2)})
        201.0
    """
    total = 0.0
    for leaf in batch_leaves(batch):
        flat = leaf.reshape(leaf.shape[0], -1) if leaf.ndim else leaf.reshape(1, 1)
        total += float(flat[:, ::max(1, flat.shape[1] // 64)].sum(dtype=np.float64))
    return total


def digest_values(batch: Any) -> int:
    """How many values :func:`batch_digest` adds up for ``batch``.

    Example:
        >>> digest_values({"a": np.ones((2, 100)), "b": np.arange(2)})
        202
    """
    total = 0
    for leaf in batch_leaves(batch):
        rows = leaf.shape[0] if leaf.ndim else 1
        width = int(np.prod(leaf.shape[1:])) if leaf.ndim else 1
        total += rows * len(range(0, width, max(1, width // 64)))
    return total


# ----------------------------------------------------------------------------- run specs
@dataclass
class RunSpec:
    """One child run: what the worker process is asked to do.

    Attributes:
        system: ``feedline``, ``tf``, ``torch`` or ``grain``.
        variant: ``expert`` or ``naive`` (feedline: ``recommended``).
        workload: ``chess``, ``images``, ``overhead``, ``python_heavy`` or ``shuffle_memory``.
        mode: ``measure`` (one timed epoch), ``check`` (first batches, in order, no shuffle)
            or ``startup`` (stop after the first batch).
        data: The workload's data description (paths, sizes) from ``benchmarks.data``.
        seed: Seed of every random choice.
        check_batches: Batches saved in ``check`` mode.
        out: Where the worker writes its JSON result (and ``.npz`` in check mode).
    """

    system: str
    variant: str
    workload: str
    mode: str
    data: dict[str, Any]
    seed: int = 1234
    check_batches: int = 3
    out: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls(**json.loads(text))

    @property
    def shuffle(self) -> bool:
        """Whether the pipeline shuffles (never in ``check`` mode, so orders can be compared)."""
        return self.mode != "check"

    @property
    def ordered(self) -> bool:
        """``check`` mode: read files one after the other so every system has the same order."""
        return self.mode == "check"


# ----------------------------------------------------------------------------- TFRecord writing
def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord frame: length, masked CRC32C of the length, data, masked CRC32C of data.

    Example:
        >>> frame_record(b"abc").hex()
        '0300000000000000b099490e6162636e57f121'
    """
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack(
        "<I", _masked_crc(data))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as two's complement, 10 bytes, like protobuf
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_chess_example(d: bytes, s: int) -> bytes:
    """A serialized ``tf.train.Example`` with ``d`` (one bytes value) and ``s`` (one int64),
    written by hand in protobuf wire format so that generating data needs no TensorFlow.

    Example:
        >>> encode_chess_example(b"xy", -1).hex()
        '0a220a0b0a016412060a040a0278790a130a0173120e1a0c0a0affffffffffffffffff01'
    """
    feature_d = _field(1, _field(1, d))  # Feature.bytes_list{value: d}
    packed = _varint(s)
    feature_s = _field(3, _field(1, packed))  # Feature.int64_list{value: [s] (packed)}
    entry_d = _field(1, b"d") + _field(2, feature_d)
    entry_s = _field(1, b"s") + _field(2, feature_s)
    features = _field(1, entry_d) + _field(1, entry_s)
    return _field(1, features)


def read_json(path: str | Path) -> Any:
    with open(path) as f:
        return json.load(f)


def emit(results: dict[str, Any], markdown: str, json_path: str | None) -> int:
    """An extra benchmark's ending: its table printed, its results (with the table) written
    as JSON where ``./dev bench`` asked (``--json``); the exit status."""
    results["markdown"] = markdown
    print(markdown)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return 0
