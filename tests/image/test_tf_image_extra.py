"""tf.image's YUV/YIQ, crop_and_resize, extract_patches, total_variation and stateless_random_*
against TensorFlow 2.21's outputs (``golden_tf_extra.npz``, written by
``record_golden_tf_extra.py``).

Integer and stateless results are bit for bit; float32 colour conversions and crops too;
float64 conversions and float sums may differ in the last bit (summation order).
"""

import json
from pathlib import Path

import numpy as np
import pytest

import feedline.image as fli
from feedline.core.errors import InvalidArgumentError
from feedline.image._philox import stateless_uniform, stateless_uniform_int32

GOLDEN = np.load(Path(__file__).with_name("golden_tf_extra.npz"))
KEYS = GOLDEN.files


def keys(prefix):
    return [k for k in KEYS if k.startswith(prefix + "/") and not k.endswith(("boxes",
                                                                              "box_indices"))]


def source(name):
    if name == "coins16":
        return np.zeros((16, 1, 2, 1)) + np.arange(2).reshape(1, 1, 2, 1)
    return GOLDEN[f"src/{name}"]


def assert_matches(got, expected, exact):
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if exact:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("key", [k for op in ("rgb_to_yuv", "yuv_to_rgb", "rgb_to_yiq",
                                              "yiq_to_rgb") for k in keys(op)])
def test_yuv_and_yiq_as_tensorflow(key):
    op, name = key.split("/")
    got = getattr(fli, op)(source(name))
    assert_matches(got, GOLDEN[key], exact=source(name).dtype == np.float32)


@pytest.mark.parametrize("key", keys("total_variation"))
def test_total_variation_as_tensorflow(key):
    name = key.split("/")[1]
    image = source(name)
    if image.dtype == np.uint8:
        image = image.astype(np.int32)  # TensorFlow refuses uint8 (no Abs for it)
    assert_matches(fli.total_variation(image), GOLDEN[key], exact=image.dtype.kind == "i")


@pytest.mark.parametrize("key", keys("crop_and_resize"))
def test_crop_and_resize_as_tensorflow(key):
    _, name, method, size = key.split("/")
    images = source(name)
    boxes = GOLDEN["crop_and_resize/boxes"]
    indices = GOLDEN["crop_and_resize/box_indices"] % images.shape[0]
    height, width = (int(v) for v in size.split("x"))
    got = fli.crop_and_resize(images, boxes, indices, (height, width), method, -1.0)
    assert_matches(got, GOLDEN[key], exact=True)


@pytest.mark.parametrize("key", keys("extract_patches"))
def test_extract_patches_as_tensorflow(key):
    _, name, sizes, strides, rates, padding = key.split("/")
    as_list = [[int(v) for v in part.split("x")] for part in (sizes, strides, rates)]
    got = fli.extract_patches(source(name), *as_list, padding)
    assert_matches(got, GOLDEN[key], exact=True)


ARGS = {"stateless_random_brightness": (0.3,), "stateless_random_contrast": (0.2, 1.8),
        "stateless_random_saturation": (0.2, 1.8), "stateless_random_hue": (0.4,)}


@pytest.mark.parametrize("key", [k for k in KEYS if k.startswith("stateless_random_")])
def test_stateless_random_ops_draw_what_tensorflow_draws(key):
    op, name, seed_text = key.split("/")
    seed = tuple(int(v) for v in seed_text.split("_"))
    image = source(name)
    if op == "stateless_random_crop":
        args = ((3, 4, 3) if image.ndim == 3 else (2, 3, 4, 3),)
    elif op == "stateless_random_jpeg_quality":
        args = (10, 95)  # pixels through libjpeg: TensorFlow's, with Pillow's libjpeg-turbo
    else:
        args = ARGS.get(op, ())
    got = getattr(fli, op)(image, *args, seed)
    assert_matches(got, GOLDEN[key], exact=True)
    # Stateless: the same seed gives the same result, every time.
    assert_matches(getattr(fli, op)(image, *args, np.array(seed)), got, exact=True)


def test_philox_words_as_tensorflow():
    # tf.random.stateless_uniform([6], seed=(1, 2)).numpy().view(np.uint32) on TF 2.21, and
    # stateless_uniform([5], seed=(-5, 123456789012), maxval=2**31 - 1, dtype=tf.int32).
    assert stateless_uniform((1, 2), [6]).view(np.uint32).tolist() == [
        1062736984, 1044686728, 1065289852, 1042562200, 1049313868, 1059470218]
    assert stateless_uniform_int32((-5, 123456789012), [5], 0, 2**31 - 1).tolist() == [
        514215538, 1199654067, 1814128956, 1471396046, 730288218]


@pytest.mark.parametrize(("call", "match"), [
    (lambda: fli.rgb_to_yuv(np.zeros((2, 2, 3), np.uint8)), "must be floats"),
    (lambda: fli.rgb_to_yiq(np.zeros((2, 2, 4), np.float32)), "3 channels"),
    (lambda: fli.total_variation(np.zeros((2, 2, 1), np.uint8)), "signed integers or floats"),
    (lambda: fli.total_variation(np.zeros((2, 2), np.float32)), "got shape"),
    (lambda: fli.crop_and_resize(np.zeros((1, 2, 2, 1)), [[0, 0, 1, 1]], [1], (2, 2)),
     r"outside \[0, batch_size\)"),
    (lambda: fli.crop_and_resize(np.zeros((1, 2, 2, 1)), [[0, 0, 1]], [0], (2, 2)),
     r"\[num_boxes, 4\]"),
    (lambda: fli.crop_and_resize(np.zeros((1, 2, 2, 1)), [[0, 0, 1, 1]], [0], (0, 2)),
     "must be positive"),
    (lambda: fli.crop_and_resize(np.zeros((1, 2, 2, 1)), [[0, 0, 1, 1]], [0], (2, 2),
                                 "bicubic"), "method must be one of"),
    (lambda: fli.extract_patches(np.zeros((1, 4, 4, 1)), [2, 2, 2, 1], [1, 1, 1, 1],
                                 [1, 1, 1, 1], "VALID"), r"\[1, rows, cols, 1\]"),
    (lambda: fli.extract_patches(np.zeros((1, 4, 4, 1)), [1, 2, 2, 1], [1, 1, 1, 1],
                                 [1, 1, 1, 1], "FULL"), "'VALID' or 'SAME'"),
    (lambda: fli.stateless_random_flip_left_right(np.zeros((2, 2, 1)), 3), "shape \\[2\\]"),
    (lambda: fli.stateless_random_brightness(np.zeros((2, 2, 1)), -0.1, (1, 2)),
     "non-negative"),
    (lambda: fli.stateless_random_hue(np.zeros((2, 2, 3)), 0.6, (1, 2)), "<= 0.5"),
    (lambda: fli.stateless_random_contrast(np.zeros((2, 2, 3)), 0.5, 0.5, (1, 2)),
     "upper must be > lower"),
    (lambda: fli.stateless_random_crop(np.zeros((2, 2, 3)), (3, 2, 3), (1, 2)),
     "Need value.shape >= size"),
    (lambda: fli.stateless_random_crop(np.zeros((2, 2, 3)), (2, 2), (1, 2)),
     "one entry per dimension"),
    (lambda: fli.stateless_random_jpeg_quality(np.zeros((2, 2, 3)), 50, 50, (1, 2)),
     "must be less than"),
    (lambda: fli.stateless_random_jpeg_quality(np.zeros((2, 2, 3)), 50, 101, (1, 2)),
     "between 0 and 100"),
    (lambda: fli.adjust_jpeg_quality(np.zeros((1, 2, 2, 3)), 50), "must be one image"),
])
def test_invalid_arguments_are_refused_as_tensorflow_does(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def test_extract_patches_valid_larger_than_the_image_is_empty():
    out = fli.extract_patches(np.zeros((2, 3, 3, 1)), [1, 4, 4, 1], [1, 1, 1, 1],
                              [1, 1, 1, 1], "VALID")
    assert out.shape == (2, 0, 0, 16)


BOX_CASES = json.loads(Path(__file__).with_name("golden_tf_bounding_box.json").read_text())


@pytest.mark.parametrize("case", BOX_CASES, ids=[str(i) for i in range(len(BOX_CASES))])
def test_stateless_sample_distorted_bounding_box_as_tensorflow(case):
    boxes = np.array(case["boxes"], np.float32).reshape(1, -1, 4)
    begin, size, box = fli.stateless_sample_distorted_bounding_box(
        np.array(case["image_size"], np.int32), boxes, case["seed"], **case["kwargs"])
    assert begin.tolist() == case["begin"] and size.tolist() == case["size"]
    assert begin.dtype == np.int32 and box.dtype == np.float32
    assert box.view(np.uint32).tolist() == case["box_bits"]


def test_sample_distorted_bounding_box_is_seeded_and_covers_the_objects():
    boxes = [[[0.2, 0.3, 0.6, 0.7]]]
    windows = [fli.sample_distorted_bounding_box([80, 120, 3], boxes, seed=s,
                                                 min_object_covered=0.5) for s in range(50)]
    again = fli.sample_distorted_bounding_box([80, 120, 3], boxes, seed=7,
                                              min_object_covered=0.5)
    assert all((a == b).all() for a, b in zip(again, windows[7]))
    for begin, size, box in windows:
        y, x, _ = begin.tolist()
        h, w, _ = size.tolist()
        assert 0 <= y and y + h <= 80 and 0 <= x and x + w <= 120
        # The object spans rows 16..48 and columns 36..84 (pixels); the window covers half.
        overlap = max(0, min(y + h, 48) - max(y, 16)) * max(0, min(x + w, 84) - max(x, 36))
        assert overlap / (32 * 48) >= 0.5
    assert len({tuple(b.tolist()) for b, _, _ in windows}) > 10


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"bounding_boxes": np.zeros((1, 0, 4))}, "No bounding boxes provided"),
    ({"bounding_boxes": [[[0, 0, 1.5, 1]]]}, r"must be in \[0.0, 1.0\]"),
    ({"bounding_boxes": [[[0, 0, 1, 1]]], "area_range": (0.5,)}, "must have 2 elements"),
    ({"bounding_boxes": [[[0, 0, 1, 1]]], "max_attempts": 0}, "max_attempts must be positive"),
])
def test_sample_distorted_bounding_box_refuses_bad_arguments(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        fli.stateless_sample_distorted_bounding_box(np.array([10, 10, 3]), seed=(1, 2), **kwargs)
