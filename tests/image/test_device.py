"""feedline.image.device against feedline.image's host operations (and TensorFlow's recorded
resizes), on the CPU; the tests marked ``cuda`` run only where PyTorch sees a GPU.

Measured here (no torchvision loads beside the CPU torch of these tests: only CUDA wheels are
reachable): the host decoder is feedline.image.decode_jpeg exactly; libjpeg's accurate IDCT,
which torchvision's CPU decoder uses, is at most 4 levels (mean 0.98) from feedline's default
fast IDCT on the noisy photo-like images below, and equal to ``dct_method="INTEGER_ACCURATE"``.
nvJPEG's distance is measured by the cuda tests (run them with ``-s`` to print it).
"""

from __future__ import annotations

import importlib.abc
import sys
from pathlib import Path

import numpy as np
import pytest

from feedline import InvalidArgumentError
from feedline import image as host
from feedline.image._random import generator_for

torch = pytest.importorskip("torch")
from feedline.image import device as dv  # noqa: E402

GOLDEN = np.load(Path(__file__).with_name("golden_codecs_geometry.npz"))
CUDA = torch.cuda.is_available()
cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def torchvision_problem() -> str | None:
    try:
        dv._torchvision_io()
    except ImportError as error:
        return str(error)
    return None


needs_torchvision = pytest.mark.skipif(torchvision_problem() is not None,
                                        reason=f"torchvision: {torchvision_problem()}")


def photo(rng: np.random.Generator, height: int = 64, width: int = 80) -> np.ndarray:
    """Smooth colour fields, waves and noise: JPEGs that behave like photos'."""
    low = rng.integers(0, 256, size=(-(-height // 16), -(-width // 16), 3)).astype(np.int16)
    big = np.repeat(np.repeat(low, 16, axis=0), 16, axis=1)[:height, :width]
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    wave = (40 * np.cos(y / rng.uniform(5, 30)) * np.sin(x / rng.uniform(5, 30))).astype(np.int16)
    noisy = big + wave[..., None] + rng.integers(-12, 13, size=big.shape, dtype=np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def jpegs(count: int, seed: int = 0, height: int = 64, width: int = 80) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [host.encode_jpeg(photo(rng, height, width), quality=90) for _ in range(count)]


def batch_of(count: int = 4, height: int = 30, width: int = 40, channels: int = 3,
             seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, height, width, channels),
                                                np.uint8)


# ----------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_host_decoder_is_feedline_decode_jpeg_exactly(channels):
    data = jpegs(3)
    got = dv.decode_jpeg_to_device(data, channels, device="cpu")
    expected = host.decode_jpeg(data, channels)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.uint8
    assert got.device.type == "cpu" and got.is_contiguous()
    assert np.array_equal(got.numpy(), expected)
    one = dv.decode_jpeg_to_device(data[1], channels, device="cpu")
    assert np.array_equal(one.numpy(), expected[1])


def test_host_decoder_takes_dct_method_and_object_arrays():
    data = jpegs(2)
    batch = np.empty(2, dtype=object)
    batch[:] = data
    got = dv.decode_jpeg_to_device(batch, 3, device="cpu", dct_method="INTEGER_ACCURATE")
    assert np.array_equal(got.numpy(), host.decode_jpeg(data, 3, dct_method="INTEGER_ACCURATE"))
    assert not np.array_equal(got.numpy(), host.decode_jpeg(data, 3))


def test_a_mixed_batch_decodes_to_a_list():
    gray = host.encode_jpeg(np.full((8, 8, 1), 90, np.uint8))
    data = [jpegs(1)[0], gray]
    got = dv.decode_jpeg_to_device(data, device="cpu")
    assert isinstance(got, list) and [tuple(t.shape) for t in got] == [(64, 80, 3), (8, 8, 1)]
    assert np.array_equal(got[1].numpy(), host.decode_jpeg(gray))


def test_decode_errors_name_the_element():
    good = jpegs(1)[0]
    truncated = good[: len(good) // 2]
    with pytest.raises(InvalidArgumentError, match=r"^element 1 of the batch: "
                       r"decode_jpeg_to_device: invalid or truncated JPEG"):
        dv.decode_jpeg_to_device([good, truncated, good], device="cpu")
    with pytest.raises(InvalidArgumentError, match=r"^decode_jpeg_to_device: invalid or trunc"):
        dv.decode_jpeg_to_device(truncated, device="cpu")
    with pytest.raises(InvalidArgumentError, match="element 1 of the batch is not encoded image"):
        dv.decode_jpeg_to_device([good, 3], device="cpu")
    with pytest.raises(InvalidArgumentError, match="expected JPEG data"):
        dv.decode_jpeg_to_device([good, b"GIF89a..."], device="cpu")
    with pytest.raises(InvalidArgumentError, match="is empty"):
        dv.decode_jpeg_to_device([], device="cpu")
    with pytest.raises(InvalidArgumentError, match="got a str"):
        dv.decode_jpeg_to_device("cat.jpg", device="cpu")
    with pytest.raises(InvalidArgumentError, match="1-D"):
        dv.decode_jpeg_to_device(np.array([[good]], dtype=object), device="cpu")
    with pytest.raises(InvalidArgumentError, match="channels must be one of"):
        dv.decode_jpeg_to_device(good, 4, device="cpu")
    with pytest.raises(InvalidArgumentError, match="decoder is 'auto', 'torchvision' or"):
        dv.decode_jpeg_to_device(good, device="cpu", decoder="dali")
    with pytest.raises(InvalidArgumentError, match="must name a torch device"):
        dv.decode_jpeg_to_device(good, device="gpu-please")
    with pytest.raises(InvalidArgumentError, match=r"^decode_jpeg_to_device: dct_method is"):
        dv.decode_jpeg_to_device([good, good], device="cpu", dct_method="FLOAT")
    with pytest.raises(InvalidArgumentError, match="dct_method applies to decoder='host'"):
        dv.decode_jpeg_to_device(good, device="cpu", decoder="torchvision",
                                 dct_method="INTEGER_FAST")


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"device='cuda'\): CUDA is not available in this "
                                           r"PyTorch .*pass device='cpu'"):
        dv.decode_jpeg_to_device(jpegs(1)[0])  # device="cuda" is the default
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        dv.decode_jpeg_to_device(jpegs(1)[0], device="cuda:1", decoder="host")


@pytest.fixture
def fresh_imports():
    dv._torch.cache_clear()
    dv._torchvision_io.cache_clear()
    yield
    dv._torch.cache_clear()
    dv._torchvision_io.cache_clear()


def test_missing_torch_names_the_extra(monkeypatch, fresh_imports):
    monkeypatch.setitem(sys.modules, "torch", None)  # its import raises ImportError
    with pytest.raises(ImportError, match=r"needs PyTorch: pip install 'feedline\[gpu-image\]'"):
        dv.decode_jpeg_to_device(jpegs(1)[0], device="cpu")
    with pytest.raises(ImportError, match=r"feedline\[gpu-image\]"):
        dv.random_crop(np.zeros((4, 4, 1), np.uint8), (2, 2))


def test_missing_torchvision_names_the_extra(monkeypatch, fresh_imports):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    with pytest.raises(ImportError, match=r"needs torchvision: pip install 'feedline\[gpu-image"
                                          r"\]' \(or decoder='host'"):
        dv.decode_jpeg_to_device(jpegs(1)[0], device="cpu", decoder="torchvision")


class _BrokenTorchvision(importlib.abc.MetaPathFinder):
    """Imports of torchvision fail as a CUDA wheel's do beside a CPU-only torch."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            raise RuntimeError("operator torchvision::nms does not exist")


def test_a_torchvision_that_does_not_load_is_named(monkeypatch, fresh_imports):
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_BrokenTorchvision(), *sys.meta_path])
    with pytest.raises(ImportError, match=r"torchvision is installed but does not load with this "
                                          r"PyTorch \(torch .*nms does not exist"):
        dv.decode_jpeg_to_device(jpegs(1)[0], device="cpu", decoder="torchvision")


def test_jpeg_info_reads_the_frame_and_finds_truncation():
    data = jpegs(1, height=48, width=72)[0]
    assert dv._jpeg_info(data, "op") == (48, 72, 3)
    gray = host.encode_jpeg(np.zeros((5, 7, 1), np.uint8))
    assert dv._jpeg_info(gray, "op") == (5, 7, 1)
    # Bytes after the end-of-image marker (camera trailers) are allowed, as libjpeg allows them.
    assert dv._jpeg_info(data + b"\x00" * 100, "op") == (48, 72, 3)
    for cut, message in [(len(data) - 1, "no end-of-image marker after the scan"),
                         (len(data) // 2, "no end-of-image marker after the scan"),
                         (40, "truncated JPEG header"), (3, "truncated JPEG header")]:
        with pytest.raises(InvalidArgumentError, match=message):
            dv._jpeg_info(data[:cut], "op")
    with pytest.raises(InvalidArgumentError, match="no marker at byte 8"):
        dv._jpeg_info(b"\xff\xd8\xff\xe0\x00\x04ab" + b"\x12" * 20, "op")
    with pytest.raises(InvalidArgumentError, match="FF 00 at byte 2 is not a segment marker"):
        dv._jpeg_info(b"\xff\xd8\xff" + b"\x00" * 20, "op")


def test_a_thumbnail_end_marker_does_not_hide_truncation():
    data = jpegs(1)[0]
    thumbnail = host.encode_jpeg(np.zeros((8, 8, 3), np.uint8))  # has its own FF D9
    payload = b"Exif\x00\x00" + thumbnail
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    with_thumbnail = data[:2] + app1 + data[2:]
    assert dv._jpeg_info(with_thumbnail, "op") == (64, 80, 3)
    with pytest.raises(InvalidArgumentError, match="no end-of-image marker"):
        dv._jpeg_info(with_thumbnail[: len(with_thumbnail) - 200], "op")


class _FakeIO:
    """torchvision.io's decode_jpeg as far as _blame uses it: a batch fails if any element
    starts with b"bad"."""

    def decode_jpeg(self, tensors, mode, device):
        for tensor in tensors:
            if bytes(tensor[:3].tolist()) == b"bad":
                raise RuntimeError("Error while decoding JPEG images: nvjpeg status 7")
        return [torch.zeros(3, 1, 1, dtype=torch.uint8) for _ in tensors]


def test_a_failed_batch_decode_is_blamed_on_the_element_that_fails_alone():
    items = [b"good", b"good", b"bad!", b"good"]
    tensors = [torch.tensor(list(item), dtype=torch.uint8) for item in items]
    error = RuntimeError("batch failed")
    with pytest.raises(InvalidArgumentError, match=r"^element 2 of the batch: op: invalid JPEG "
                                                   r"data \(torchvision: .*nvjpeg status 7\)"):
        dv._blame(_FakeIO(), tensors, items, "RGB", torch.device("cpu"), False, "op", error)
    with pytest.raises(InvalidArgumentError, match=r"^op: invalid JPEG data"):
        dv._blame(_FakeIO(), tensors[2:3], items[2:3], "RGB", torch.device("cpu"), True, "op",
                  error)
    # No element fails alone: nothing to blame, the caller re-raises the batch's error.
    assert dv._blame(_FakeIO(), tensors[:2], items[:2], "RGB", torch.device("cpu"), False, "op",
                     error) is None


@needs_torchvision
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_torchvision_decoder_on_the_cpu_is_libjpegs_accurate_idct(channels):
    data = jpegs(4, seed=3) + [host.encode_jpeg(np.full((64, 80, 1), 77, np.uint8))]
    got = dv.decode_jpeg_to_device(data, channels, device="cpu", decoder="torchvision")
    expected = [host.decode_jpeg(one, channels, dct_method="INTEGER_ACCURATE") for one in data]
    got = got if isinstance(got, list) else list(got)
    for image, reference in zip(got, expected, strict=True):
        assert tuple(image.shape) == reference.shape
        assert np.abs(image.numpy().astype(int) - reference).max() <= 1


@needs_torchvision
def test_torchvision_decoder_names_a_truncated_element():
    good = jpegs(1)[0]
    with pytest.raises(InvalidArgumentError, match="^element 1 of the batch: .*truncated"):
        dv.decode_jpeg_to_device([good, good[:-300]], device="cpu", decoder="torchvision")


# ----------------------------------------------------------------------------- crops and flips
@pytest.mark.parametrize("seed", [0, 7, (1, 2)])
def test_random_crop_equals_the_host_op(seed):
    batch = batch_of(6, 30, 40)
    got = dv.random_crop(torch.from_numpy(batch), (12, 25), seed=seed)
    assert np.array_equal(got.numpy(), host.random_crop(batch, (12, 25), seed=seed))
    one = dv.random_crop(torch.from_numpy(batch[0]), (30, 1, 3), seed=seed)  # full-rank size
    assert np.array_equal(one.numpy(), host.random_crop(batch[0], (30, 1, 3), seed=seed))


def test_random_crop_of_a_list_draws_as_the_host_op_image_by_image():
    images = [batch_of(1, 20 + 3 * i, 25 + i, seed=i)[0] for i in range(4)]
    got = dv.random_crop([torch.from_numpy(image) for image in images], (10, 12), seed=11)
    rng = generator_for(11)
    expected = np.stack([host.random_crop(image, (10, 12), seed=rng) for image in images])
    assert np.array_equal(got.numpy(), expected)
    # A stacked batch and the list of its images draw the same crops.
    batch = batch_of(3)
    assert torch.equal(dv.random_crop(torch.from_numpy(batch), (5, 5), seed=4),
                       dv.random_crop(list(torch.from_numpy(batch)), (5, 5), seed=4))


def test_a_generator_seed_is_advanced_as_the_host_op_advances_it():
    batch = batch_of(3)
    mine, theirs = np.random.default_rng(9), np.random.default_rng(9)
    for _ in range(3):
        got = dv.random_crop(torch.from_numpy(batch), (7, 9), seed=mine)
        assert np.array_equal(got.numpy(), host.random_crop(batch, (7, 9), seed=theirs))


def test_random_crop_errors():
    with pytest.raises(InvalidArgumentError, match=r"crop size \(31, 5\) must be positive and fit"):
        dv.random_crop(torch.zeros(2, 30, 40, 3), (31, 5))
    with pytest.raises(InvalidArgumentError, match="crop size"):
        dv.random_crop([torch.zeros(30, 40, 3), torch.zeros(10, 40, 3)], (20, 5))
    with pytest.raises(InvalidArgumentError, match="size is"):
        dv.random_crop(torch.zeros(30, 40, 3), (5,))


@pytest.mark.parametrize("fraction", [1.0, 0.875, 0.5, 0.33, 0.01])
def test_central_crop_equals_the_host_op(fraction):
    batch = batch_of(3, 31, 40)
    got = dv.central_crop(torch.from_numpy(batch), fraction)
    assert np.array_equal(got.numpy(), host.central_crop(batch, fraction))
    one = dv.central_crop(torch.from_numpy(batch[1]), fraction)
    assert np.array_equal(one.numpy(), host.central_crop(batch[1], fraction))


def test_central_crop_of_a_list_and_its_errors():
    images = [torch.zeros(40, 40, 3), torch.ones(40, 40, 3)]
    assert tuple(dv.central_crop(images, 1.0).shape) == (2, 40, 40, 3)
    with pytest.raises(InvalidArgumentError, match="central crops differ in size"):
        dv.central_crop([torch.zeros(40, 40, 3), torch.zeros(20, 20, 3)], 0.5)
    with pytest.raises(InvalidArgumentError, match=r"within \(0, 1\]"):
        dv.central_crop(images, 0.0)


def test_crop_to_bounding_box_takes_one_box_or_one_offset_per_image():
    batch = batch_of(3, 20, 30)
    tensor = torch.from_numpy(batch)
    assert np.array_equal(dv.crop_to_bounding_box(tensor, 2, 5, 10, 12).numpy(),
                          host.crop_to_bounding_box(batch, 2, 5, 10, 12))
    tops, lefts = [0, 4, 10], [18, 0, 7]
    got = dv.crop_to_bounding_box(tensor, tops, lefts, 10, 12).numpy()
    for index in range(3):
        assert np.array_equal(got[index], host.crop_to_bounding_box(
            batch[index], tops[index], lefts[index], 10, 12))
    with pytest.raises(InvalidArgumentError, match=r"image 2: the box \[offset_height=11"):
        dv.crop_to_bounding_box(tensor, [0, 0, 11], 0, 10, 12)
    with pytest.raises(InvalidArgumentError, match="2 values for a batch of 3"):
        dv.crop_to_bounding_box(tensor, [0, 0], 0, 10, 12)
    with pytest.raises(InvalidArgumentError, match="is empty or not inside"):
        dv.crop_to_bounding_box(tensor[0], 0, 0, 0, 12)


@pytest.mark.parametrize("seed", [0, 3, (5, 6)])
def test_random_flip_left_right_equals_the_host_op(seed):
    batch = batch_of(9, 4, 7, 3)
    got = dv.random_flip_left_right(torch.from_numpy(batch), seed=seed)
    assert np.array_equal(got.numpy(), host.random_flip_left_right(batch, seed=seed))
    one = dv.random_flip_left_right(torch.from_numpy(batch[0]), seed=seed)
    assert np.array_equal(one.numpy(), host.random_flip_left_right(batch[0], seed=seed))


def test_flip_left_right_all_or_flagged():
    batch = batch_of(3, 4, 5, 2)
    tensor = torch.from_numpy(batch)
    assert np.array_equal(dv.flip_left_right(tensor).numpy(), host.flip_left_right(batch))
    flags = [True, False, True]
    expected = batch.copy()
    expected[[0, 2]] = host.flip_left_right(batch[[0, 2]])
    assert np.array_equal(dv.flip_left_right(tensor, flags).numpy(), expected)
    assert np.array_equal(dv.flip_left_right(list(tensor), np.array(flags)).numpy(), expected)
    with pytest.raises(InvalidArgumentError, match="2 flags for a batch of 3"):
        dv.flip_left_right(tensor, [True, False])
    with pytest.raises(InvalidArgumentError, match="different shapes.*crop or resize them"):
        dv.flip_left_right([torch.zeros(4, 5, 2), torch.zeros(5, 5, 2)])


# ----------------------------------------------------------------------------- resizing
SOURCES = {"rgb": GOLDEN["src/rgb"], "rgb40f": GOLDEN["src/rgb40"].astype(np.float32) / 255}


@pytest.mark.parametrize("key", [k for k in GOLDEN.files if k.startswith("resize/")
                                 and k.split("/")[3] in ("bilinear", "nearest")
                                 and k.endswith("/0")])
def test_resize_equals_tensorflows_recorded_outputs(key):
    _, name, size, method, _ = key.split("/")
    height, width = (int(side) for side in size.split("x"))
    got = dv.resize(torch.from_numpy(SOURCES[name]), (height, width), method=method).numpy()
    assert got.dtype == GOLDEN[key].dtype and got.shape == GOLDEN[key].shape
    # tf.image.resize's float32 operations in its order: no rounding apart.
    assert np.array_equal(got, GOLDEN[key])


def test_resize_is_within_2e3_of_the_host_op_and_takes_a_list():
    rng = np.random.default_rng(1)
    worst = 0.0
    for size in [(8, 8), (32, 24), (100, 130), (61, 19)]:
        batch = rng.integers(0, 256, (2, 37, 53, 3), np.uint8)
        got = dv.resize(torch.from_numpy(batch), size).numpy()
        worst = max(worst, float(np.abs(got - host.resize(batch, size)).max()))
        assert np.array_equal(dv.resize(torch.from_numpy(batch), size, "nearest").numpy(),
                              host.resize(batch, size, "nearest"))
    assert worst <= 2e-3  # measured 1.6e-3: OpenCV's kernel rounds differently from TF's
    images = [torch.from_numpy(batch_of(1, 10 + i, 20 - i, seed=i)[0]) for i in range(3)]
    stacked = dv.resize(images, (7, 9))
    for index, image in enumerate(images):
        assert torch.equal(stacked[index], dv.resize(image, (7, 9)))


def test_resize_errors():
    image = torch.zeros(4, 4, 3)
    with pytest.raises(InvalidArgumentError, match="'bilinear' or 'nearest' on the device"):
        dv.resize(image, (2, 2), method="bicubic")
    with pytest.raises(InvalidArgumentError, match="antialias=True is not supported"):
        dv.resize(image, (2, 2), antialias=True)
    with pytest.raises(InvalidArgumentError, match="size must be positive"):
        dv.resize(image, (0, 2))
    with pytest.raises(InvalidArgumentError, match=r"\[height, width, channels\]"):
        dv.resize(torch.zeros(4, 4), (2, 2))


@pytest.mark.parametrize("seed", [0, 1, (3, 4)])
def test_random_resized_crop_draws_the_host_ops_windows(seed):
    batch = batch_of(5, 40, 60)
    tensor = torch.from_numpy(batch)
    # Nearest sampling is exact, so equal outputs mean equal windows.
    assert np.array_equal(
        dv.random_resized_crop(tensor, (16, 16), method="nearest", seed=seed).numpy(),
        host.random_resized_crop(batch, (16, 16), method="nearest", seed=seed))
    got = dv.random_resized_crop(tensor, (24, 24), scale=(0.2, 0.9), seed=seed).numpy()
    expected = host.random_resized_crop(batch, (24, 24), scale=(0.2, 0.9), seed=seed)
    assert got.dtype == np.float32 and np.abs(got - expected).max() <= 2e-3


def test_random_resized_crop_of_a_list():
    images = [batch_of(1, 30 + 7 * i, 50 - 5 * i, seed=i)[0] for i in range(4)]
    got = dv.random_resized_crop([torch.from_numpy(image) for image in images], (12, 12),
                                 method="nearest", seed=8)
    rng = generator_for(8)
    expected = np.stack([host.random_resized_crop(image, (12, 12), method="nearest", seed=rng)
                         for image in images])
    assert np.array_equal(got.numpy(), expected)


# ----------------------------------------------------------------------------- dtypes
DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]


def sample_of(dtype: type) -> np.ndarray:
    rng = np.random.default_rng(2)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(0.0, 1.0, (2, 3, 4, 3)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -(2 ** 40)), min(info.max, 2 ** 40), (2, 3, 4, 3),
                        dtype=dtype, endpoint=True)


@pytest.mark.parametrize("source", DTYPES)
@pytest.mark.parametrize("target", DTYPES)
@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the host op's float16 <-> int32/64
@pytest.mark.slow
def test_convert_image_dtype_is_the_host_op_bit_for_bit(source, target, saturate):
    image = sample_of(source)
    got = dv.convert_image_dtype(torch.from_numpy(image), target, saturate).numpy()
    expected = host.convert_image_dtype(image, target, saturate)
    assert got.dtype == expected.dtype
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("source", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("target", [np.uint8, np.int16, np.int32])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_convert_image_dtype_saturates_as_the_host_op(source, target):
    image = np.array([[[-3.0, -1.0, 0.0, 0.25, 1.0, 1.5, 2.0e4]]], source)
    got = dv.convert_image_dtype(torch.from_numpy(image), target, saturate=True).numpy()
    assert np.array_equal(got, host.convert_image_dtype(image, target, saturate=True))


def test_convert_image_dtype_to_bfloat16_and_nchw():
    image = batch_of(2, 3, 4, 3)
    got = dv.convert_image_dtype(torch.from_numpy(image), torch.bfloat16, data_format="NCHW")
    assert got.dtype == torch.bfloat16 and tuple(got.shape) == (2, 3, 3, 4)
    assert got.is_contiguous(memory_format=torch.channels_last)
    expected = host.convert_image_dtype(image, np.float32).transpose(0, 3, 1, 2)
    assert np.abs(got.float().numpy() - expected).max() <= 2 ** -7  # bfloat16's 8 bits
    same = torch.zeros(2, 2, 1)
    assert dv.convert_image_dtype(same, "float32") is same
    with pytest.raises(InvalidArgumentError, match="dtype is one of"):
        dv.convert_image_dtype(same, np.uint32)


NORMALIZE_CASES = [
    (np.uint8, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), np.float32),
    (np.uint8, 0.5, 0.5, np.float64),
    (np.uint8, -0.0, -2.0, np.float32),
    (np.float32, (123.7, 116.3, 103.5), (58.4, 57.1, 57.4), np.float32),
    (np.float64, 0.1, 3.0, np.float32),
    (np.int16, (0.0, 1.0, 2.0), 7.0, np.float32),
]


@pytest.mark.parametrize("source, mean, std, dtype", NORMALIZE_CASES)
def test_normalize_is_the_host_op_bit_for_bit(source, mean, std, dtype):
    image = sample_of(source) if source != np.float32 else (
        np.random.default_rng(4).uniform(0, 255, (2, 5, 6, 3)).astype(np.float32))
    got = dv.normalize(torch.from_numpy(image), mean, std, dtype).numpy()
    expected = host.normalize(image, mean, std, dtype)
    assert got.dtype == expected.dtype
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))  # signed zeros too
    one = dv.normalize(torch.from_numpy(image[0]), mean, std, dtype).numpy()
    assert np.array_equal(one, expected[0])


def test_normalize_nchw_bfloat16_leaves_its_input_alone():
    image = torch.from_numpy(batch_of(2, 5, 6, 3))
    got = dv.normalize(image, 0.5, 0.25, data_format="NCHW")
    assert tuple(got.shape) == (2, 3, 5, 6) and got.is_contiguous(
        memory_format=torch.channels_last)
    assert np.array_equal(got.permute(0, 2, 3, 1).numpy(), host.normalize(image.numpy(), 0.5, 0.25))
    assert tuple(dv.normalize(image[0], 0.5, 0.25, data_format="NCHW").shape) == (3, 5, 6)
    half = dv.normalize(image, 0.5, 0.25, torch.bfloat16)
    assert half.dtype == torch.bfloat16
    floats = torch.rand(2, 3, 3, 3)
    before = floats.clone()
    dv.normalize(floats, 0.5, 0.5)
    assert torch.equal(floats, before)


def test_normalize_errors():
    image = torch.zeros(2, 3, 3, 3, dtype=torch.uint8)
    with pytest.raises(InvalidArgumentError, match="std must be non-zero"):
        dv.normalize(image, 0.5, (1.0, 0.0, 1.0))
    with pytest.raises(InvalidArgumentError, match="mean has 2 values for an image of 3"):
        dv.normalize(image, (0.5, 0.5), 1.0)
    with pytest.raises(InvalidArgumentError, match="floating point dtype"):
        dv.normalize(image, 0.5, 0.5, torch.int32)
    with pytest.raises(InvalidArgumentError, match="data_format is 'NHWC' or 'NCHW'"):
        dv.normalize(image, 0.5, 0.5, data_format="CHW")


def test_inputs_numpy_read_only_and_bad():
    image = batch_of(1)[0]
    image.flags.writeable = False
    assert np.array_equal(dv.flip_left_right(image).numpy(), host.flip_left_right(image))
    with pytest.raises(InvalidArgumentError, match="a torch tensor"):
        dv.flip_left_right("image")
    with pytest.raises(InvalidArgumentError, match="numeric array"):
        dv.flip_left_right(np.array([[["x"]]], dtype=object))
    with pytest.raises(InvalidArgumentError, match="the batch of images is empty"):
        dv.random_crop([], (1, 1))
    with pytest.raises(InvalidArgumentError, match="element 1 of the batch has shape"):
        dv.random_crop([torch.zeros(3, 3, 1), torch.zeros(3, 3)], (1, 1))
    with pytest.raises(InvalidArgumentError, match="share one device and dtype"):
        dv.random_crop([torch.zeros(3, 3, 1), torch.zeros(3, 3, 1, dtype=torch.int32)], (1, 1))
    with pytest.raises(InvalidArgumentError, match="one channel count"):
        dv.random_crop([torch.zeros(3, 3, 1), torch.zeros(3, 3, 3)], (1, 1))


def test_a_whole_training_augmentation_equals_the_host_pipeline():
    """Decode, random crop, random flip, normalize: the device path on the CPU gives the host
    path's batch, bit for bit."""
    data = jpegs(8, seed=5)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    images = dv.decode_jpeg_to_device(data, 3, device="cpu")
    images = dv.random_crop(images, (48, 48), seed=(7, 1))
    images = dv.random_flip_left_right(images, seed=(7, 2))
    got = dv.normalize(images, mean, std, data_format="NCHW")
    expected = host.decode_jpeg(data, 3)
    expected = host.random_crop(expected, (48, 48), seed=(7, 1))
    expected = host.random_flip_left_right(expected, seed=(7, 2))
    expected = host.normalize(expected, mean, std)
    assert np.array_equal(got.permute(0, 2, 3, 1).numpy(), expected)


# ----------------------------------------------------------------------------- on a GPU
@cuda_only
@needs_torchvision
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_nvjpeg_decodes_a_batch_close_to_libjpeg(channels):
    """nvJPEG against feedline.image.decode_jpeg (libjpeg-turbo), both IDCTs: printed with -s."""
    data = jpegs(16, seed=9, height=120, width=160)
    data.append(host.encode_jpeg(np.full((120, 160, 1), 77, np.uint8)))
    got = dv.decode_jpeg_to_device(data, channels, device="cuda")
    got = got if isinstance(got, list) else list(got)
    assert all(image.device.type == "cuda" and image.dtype == torch.uint8 for image in got)
    for dct in ("", "INTEGER_ACCURATE"):
        differences = []
        for image, one in zip(got, data, strict=True):
            reference = host.decode_jpeg(one, channels, dct_method=dct)
            assert tuple(image.shape) == reference.shape
            differences.append(np.abs(image.cpu().numpy().astype(int) - reference))
        flat = np.concatenate([d.reshape(-1) for d in differences])
        print(f"\nnvJPEG vs feedline.image.decode_jpeg(channels={channels}, dct_method={dct!r}):"
              f" max {flat.max()}, mean {flat.mean():.3f}, 99th percentile "
              f"{np.percentile(flat, 99):.0f}, 99.9th {np.percentile(flat, 99.9):.0f}")
        # Bounds set without a GPU (nvJPEG's IDCT and chroma upsampling are its own): loose
        # enough for a different decoder, tight enough to catch a wrong colour conversion.
        assert flat.mean() <= 3.0 and np.percentile(flat, 99) <= 20


@cuda_only
@needs_torchvision
def test_nvjpeg_names_a_truncated_element():
    good = jpegs(1)[0]
    with pytest.raises(InvalidArgumentError, match="^element 2 of the batch: .*truncated"):
        dv.decode_jpeg_to_device([good, good, good[:-300]], device="cuda")


@cuda_only
def test_the_augmentation_on_cuda_equals_the_cpu_path():
    batch = batch_of(8, 60, 70)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

    def run(device: str) -> tuple[np.ndarray, np.ndarray]:
        images = torch.from_numpy(batch).to(device)
        crops = dv.random_crop(images, (40, 40), seed=3)
        crops = dv.random_flip_left_right(crops, seed=4)
        normalized = dv.normalize(crops, mean, std, data_format="NCHW")
        resized = dv.random_resized_crop(list(images), (32, 32), seed=5)
        return normalized.cpu().numpy(), resized.cpu().numpy()

    on_cuda, on_cpu = run("cuda"), run("cpu")
    assert np.array_equal(on_cuda[0], on_cpu[0])  # crops, flips and normalize: bit for bit
    assert np.abs(on_cuda[1] - on_cpu[1]).max() <= 1e-4


@cuda_only
def test_host_decoder_to_cuda():
    data = jpegs(3)
    got = dv.decode_jpeg_to_device(data, 3, device="cuda", decoder="host")
    assert got.device.type == "cuda"
    assert np.array_equal(got.cpu().numpy(), host.decode_jpeg(data, 3))


def test_a_jpeg_over_the_pixel_limit_is_refused_before_nvjpeg_allocates_it():
    # Issue 41.4: nvJPEG allocates what the header declares; the GPU path had no size check.
    import torch

    data = jpegs(2)
    previous = host.set_decode_limits(max_pixels=64 * 80 - 1)
    try:
        with pytest.raises(InvalidArgumentError, match="max_pixels") as refused:
            dv._decode_torchvision(data, False, 0, torch.device("cpu"), "decode_jpeg_to_device")
    finally:
        host.set_decode_limits(previous.max_pixels, previous.max_animation_bytes)
    assert str(refused.value).startswith("element 0 of the batch: decode_jpeg_to_device")
