"""feedline.image.resize against tf.image.resize's outputs recorded by record_golden.py."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline import image as fli

GOLDEN = np.load(Path(__file__).with_name("golden_codecs_geometry.npz"))
SOURCES = {"rgb": GOLDEN["src/rgb"], "rgb40f": GOLDEN["src/rgb40"].astype(np.float32) / 255}
# In 0..255 units (the float image is scaled up by 255 before comparing). Measured against
# TensorFlow 2.21: area 4.6e-4 (OpenCV's INTER_AREA), bilinear 7.6e-5 (OpenCV's INTER_LINEAR),
# the scale_and_translate kernels and bicubic at most 1.1e-4 (lanczos5): float32 rounding only.
TOLERANCE = {"area": 5e-4, "nearest": 0.0}
DEFAULT_TOLERANCE = 2e-4


def cases(prefix: str) -> list[str]:
    return [key for key in GOLDEN.files if key.startswith(prefix)]


def size_of(text: str) -> tuple[int, int]:
    height, width = text.split("x")
    return int(height), int(width)


@pytest.mark.parametrize("key", cases("resize/"))
def test_resize_matches_tensorflow(key):
    _, name, size, method, antialias = key.split("/")
    got = fli.resize(SOURCES[name], size_of(size), method=method, antialias=bool(int(antialias)))
    expected = GOLDEN[key]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    units = 255.0 if name == "rgb40f" else 1.0
    difference = np.abs(got.astype(np.float64) - expected).max() * units
    assert difference <= TOLERANCE.get(method, DEFAULT_TOLERANCE)


@pytest.mark.parametrize("key", cases("resize_aspect/"))
def test_preserve_aspect_ratio_matches_tensorflow(key):
    _, name, size = key.split("/")
    got = fli.resize(SOURCES[name], size_of(size), preserve_aspect_ratio=True)
    assert got.shape == GOLDEN[key].shape
    assert np.abs(got - GOLDEN[key]).max() <= DEFAULT_TOLERANCE


@pytest.mark.parametrize("key", cases("resize_with_pad/"))
def test_resize_with_pad_matches_tensorflow(key):
    _, name, size = key.split("/")
    got = fli.resize_with_pad(SOURCES[name], *size_of(size))
    assert got.shape == GOLDEN[key].shape and got.dtype == np.float32
    assert np.abs(got - GOLDEN[key]).max() <= DEFAULT_TOLERANCE


def test_batches_resize_each_image_as_alone():
    batch = np.stack([SOURCES["rgb"], SOURCES["rgb"][::-1]])
    for method in ("bilinear", "nearest", "area", "bicubic", "lanczos3"):
        got = fli.resize(batch, (9, 7), method=method, antialias=method == "lanczos3")
        assert got.shape == (2, 9, 7, 3)
        for index in range(2):
            np.testing.assert_array_equal(got[index], fli.resize(
                batch[index], (9, 7), method=method, antialias=method == "lanczos3"))


def test_one_channel_many_channels_and_dtypes():
    gray = GOLDEN["src/gray"]
    assert fli.resize(gray, (5, 6)).shape == (5, 6, 1)
    wide = np.random.default_rng(0).random((6, 7, 9)).astype(np.float64)
    got = fli.resize(wide, (3, 4))
    assert got.dtype == np.float32 and got.shape == (3, 4, 9)
    np.testing.assert_allclose(got[..., 4:5], fli.resize(wide[..., 4:5], (3, 4)), atol=1e-6)
    assert fli.resize(gray.astype(np.uint16), (5, 6), method="nearest").dtype == np.uint16
    identity = fli.resize(SOURCES["rgb40f"], (40, 32))
    np.testing.assert_allclose(identity, SOURCES["rgb40f"], atol=1e-7)


def test_bad_arguments_name_the_shape():
    with pytest.raises(fl.InvalidArgumentError, match=r"got shape \(3, 4\)"):
        fli.resize(np.zeros((3, 4)), (2, 2))
    with pytest.raises(fl.InvalidArgumentError, match="method is one of"):
        fli.resize(SOURCES["rgb"], (2, 2), method="cubic")
    with pytest.raises(fl.InvalidArgumentError, match="size must be positive"):
        fli.resize(SOURCES["rgb"], (0, 2))
    with pytest.raises(fl.InvalidArgumentError, match=r"size is \[height, width\]"):
        fli.resize(SOURCES["rgb"], (2, 2, 2))
    with pytest.raises(fl.InvalidArgumentError, match="empty image"):
        fli.resize(np.zeros((0, 4, 3)), (2, 2))
    with pytest.raises(fl.InvalidArgumentError, match="dtype object"):
        fli.resize(np.array([[[b"x"]]], dtype=object), (2, 2))


def test_resize_from_threads_gives_the_single_thread_result():
    # The native paths run concurrently (GIL released); results must not depend on it.
    image = np.random.default_rng(1).random((64, 48, 3)).astype(np.float32)
    methods = ("bilinear", "area", "bicubic", "lanczos3")
    expected = {method: fli.resize(image, (31, 29), method=method) for method in methods}
    failures: list[str] = []

    def work() -> None:
        for _ in range(20):
            for method in methods:
                if not np.array_equal(fli.resize(image, (31, 29), method=method),
                                      expected[method]):
                    failures.append(method)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
