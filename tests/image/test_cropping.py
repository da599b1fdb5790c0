"""feedline.image crops and pads against tf.image's (recorded by record_golden.py): exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline import image as fli
from feedline.image._random import generator_for

GOLDEN = np.load(Path(__file__).with_name("golden_codecs_geometry.npz"))
SOURCES = {"rgb": GOLDEN["src/rgb"], "gray": GOLDEN["src/gray"],
           "rgb40f": GOLDEN["src/rgb40"].astype(np.float32) / 255}


@pytest.mark.parametrize("name", ["rgb", "gray"])
def test_boxes_and_central_crop_equal_tensorflow(name):
    image = SOURCES[name]
    h, w = image.shape[:2]
    np.testing.assert_array_equal(fli.crop_to_bounding_box(image, 2, 3, h - 5, w - 7),
                                  GOLDEN[f"crop_to_bounding_box/{name}"])
    np.testing.assert_array_equal(fli.pad_to_bounding_box(image, 2, 3, h + 5, w + 4),
                                  GOLDEN[f"pad_to_bounding_box/{name}"])
    for fraction in (0.5, 0.33, 0.9, 1.0):
        np.testing.assert_array_equal(fli.central_crop(image, fraction),
                                      GOLDEN[f"central_crop/{name}/{fraction}"])


def test_batch_forms():
    batch = GOLDEN["src/batch"]
    np.testing.assert_array_equal(fli.central_crop(batch, 0.5), GOLDEN["central_crop/batch/0.5"])
    assert fli.crop_to_bounding_box(batch, 1, 1, 3, 4).shape == (2, 3, 4, 3)
    padded = fli.pad_to_bounding_box(batch, 1, 2, 20, 30)
    assert padded.shape == (2, 20, 30, 3) and padded.dtype == np.uint8
    np.testing.assert_array_equal(padded[:, 1:18, 2:25], batch)


@pytest.mark.parametrize("key", [key for key in GOLDEN.files
                                 if key.startswith("resize_with_crop_or_pad/")])
def test_resize_with_crop_or_pad_equals_tensorflow(key):
    _, name, size = key.split("/")
    height, width = (int(value) for value in size.split("x"))
    got = fli.resize_with_crop_or_pad(SOURCES[name], height, width)
    assert got.dtype == GOLDEN[key].dtype
    np.testing.assert_array_equal(got, GOLDEN[key])


def test_crop_and_pad_errors_name_the_shape():
    image = SOURCES["rgb"]
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"not inside the image of shape \(17, 23, 3\)"):
        fli.crop_to_bounding_box(image, 10, 0, 10, 5)
    with pytest.raises(fl.InvalidArgumentError, match="offsets must be >= 0"):
        fli.crop_to_bounding_box(image, -1, 0, 2, 2)
    with pytest.raises(fl.InvalidArgumentError, match="target size must be positive"):
        fli.crop_to_bounding_box(image, 0, 0, 0, 2)
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"shape \(17, 23, 3\) at offset \(1, 0\) does not fit"):
        fli.pad_to_bounding_box(image, 1, 0, 17, 23)
    with pytest.raises(fl.InvalidArgumentError, match="within"):
        fli.central_crop(image, 0.0)
    with pytest.raises(fl.InvalidArgumentError, match=r"got shape \(5,\)"):
        fli.central_crop(np.zeros(5), 0.5)


def test_random_crop_determinism_independence_and_window():
    image = np.arange(20 * 30 * 2).reshape(20, 30, 2)
    crop = fli.random_crop(image, (5, 7), seed=11)
    np.testing.assert_array_equal(crop, fli.random_crop(image, (5, 7), seed=11))
    # The crop is the deterministic crop at some window.
    top, left = np.argwhere(image[..., 0] == crop[0, 0, 0])[0]
    np.testing.assert_array_equal(crop, fli.crop_to_bounding_box(image, top, left, 5, 7))
    # TensorFlow's full-rank size is accepted.
    np.testing.assert_array_equal(fli.random_crop(image, (5, 7, 2), seed=11), crop)
    batch = np.stack([image] * 64)
    crops = fli.random_crop(batch, (5, 7), seed=(1, 2))
    assert crops.shape == (64, 5, 7, 2)
    np.testing.assert_array_equal(crops[0], fli.random_crop(image, (5, 7), seed=(1, 2)))
    corners = [tuple(np.argwhere(image[..., 0] == one[0, 0, 0])[0]) for one in crops]
    assert len(set(corners)) > 40  # per-image offsets (16 * 24 possible)
    tops = np.array([corner[0] for corner in corners])
    lefts = np.array([corner[1] for corner in corners])
    assert tops.min() >= 0 and tops.max() <= 15 and lefts.max() <= 23
    whole = fli.random_crop(image, (20, 30), seed=0)
    np.testing.assert_array_equal(whole, image)


def test_random_crop_offsets_are_uniform():
    image = np.arange(4 * 1 * 1).reshape(4, 1, 1)
    batch = np.stack([image] * 4000)
    tops = fli.random_crop(batch, (2, 1), seed=5)[:, 0, 0, 0]
    counts = np.bincount(tops, minlength=3)
    assert counts.sum() == 4000 and (np.abs(counts - 4000 / 3) < 120).all()  # > 4 sigma


def test_random_crop_errors():
    image = np.zeros((4, 5, 3))
    with pytest.raises(fl.InvalidArgumentError, match=r"fit in the image of shape \(1, 4, 5, 3\)"):
        fli.random_crop(image, (5, 5))
    with pytest.raises(fl.InvalidArgumentError, match="keep the image's batch and channel"):
        fli.random_crop(image, (2, 2, 1))
    with pytest.raises(fl.InvalidArgumentError, match=r"size is \(height, width\)"):
        fli.random_crop(image, (2,))
    with pytest.raises(TypeError, match="a seed is"):
        fli.random_crop(image, (2, 2), seed="x")


def test_random_resized_crop_window_follows_torchvisions_rule():
    windows = [fli.random_resized_crop_window((100, 200, 3), seed=seed) for seed in range(2000)]
    assert windows[7] == fli.random_resized_crop_window((100, 200), seed=7)
    for top, left, height, width in windows:
        assert 0 <= top and top + height <= 100 and 0 <= left and left + width <= 200
    # Where every draw fits (at most sqrt(0.5 * 4/3) of a side), the first draw is taken: the
    # area fraction is uniform on the scale range (rounding moves it a little) and the ratio
    # log-uniform.
    windows = [fli.random_resized_crop_window((100, 100), scale=(0.1, 0.5), seed=seed)
               for seed in range(2000)]
    areas = np.array([height * width / 10000 for _, _, height, width in windows])
    ratios = np.array([width / height for _, _, height, width in windows])
    assert areas.min() >= 0.09 and areas.max() <= 0.51
    assert abs(np.mean(areas) - 0.3) < 0.01
    assert abs(np.mean(areas < 0.2) - 0.25) < 0.03
    assert ratios.min() >= 0.7 and ratios.max() <= 1.45
    assert abs(np.mean(np.log(ratios))) < 0.03
    # No window fits (a 1x50 strip and ratio near 1): the fallback is the central crop
    # clamped to the ratio range.
    assert fli.random_resized_crop_window((1, 50), scale=(0.9, 1.0), seed=0) == (0, 24, 1, 1)
    assert fli.random_resized_crop_window((10, 10), scale=(2.0, 3.0), seed=0) == (0, 0, 10, 10)
    with pytest.raises(fl.InvalidArgumentError, match="increasing positive ranges"):
        fli.random_resized_crop_window((10, 10), scale=(0.5, 0.1))
    with pytest.raises(fl.InvalidArgumentError, match="empty"):
        fli.random_resized_crop_window((0, 10))


def test_random_resized_crop_is_resize_of_the_drawn_window():
    image = SOURCES["rgb40f"]
    got = fli.random_resized_crop(image, (8, 9), seed=(4, 2))
    top, left, height, width = fli.random_resized_crop_window(image.shape, seed=(4, 2))
    expected = fli.resize(fli.crop_to_bounding_box(image, top, left, height, width), (8, 9))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, fli.random_resized_crop(image, (8, 9), seed=(4, 2)))
    batch = np.stack([image] * 8)
    crops = fli.random_resized_crop(batch, (8, 9), seed=3, method="nearest")
    assert crops.shape == (8, 8, 9, 3) and crops.dtype == np.float32
    assert len({one.tobytes() for one in crops}) == 8  # independent windows
    rng = generator_for(3)  # the batch's windows are drawn in order from seed 3's generator
    first = fli.random_resized_crop_window(image.shape, seed=rng)
    np.testing.assert_array_equal(crops[0], fli.resize(
        fli.crop_to_bounding_box(image, *first), (8, 9), method="nearest"))


def test_decode_then_crop_the_drawn_window():
    data = fli.encode_jpeg(GOLDEN["src/rgb40"])
    window = fli.random_resized_crop_window(fli.extract_jpeg_shape(data), seed=9)
    np.testing.assert_array_equal(
        fli.decode_and_crop_jpeg(data, window),
        fli.crop_to_bounding_box(fli.decode_jpeg(data), *window))
