"""feedline.image.color against tf.image's outputs recorded by record_golden_color.py.

Tolerances, all measured against TensorFlow 2.21's CPU results:

- exact (bit for bit): adjust_brightness, adjust_hue, adjust_saturation, rgb_to_grayscale,
  grayscale_to_rgb, rgb_to_hsv, hsv_to_rgb, for every dtype recorded; adjust_contrast and
  adjust_gamma for uint8, uint16 and float16.
- adjust_contrast on float images: 3.6e-7 (the per-channel mean's float32 summation order);
  adjust_gamma on float images: 1.2e-7 (one ulp: NumPy's pow against Eigen's); on int32 both
  are those float differences scaled by 2**31 (384 and 256). The tests allow 4e-7 in [0, 1]
  units.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.core.errors import InvalidArgumentError
from feedline.image import color
from feedline.image._random import generator_for

GOLDEN = np.load(Path(__file__).with_name("golden_color.npz"))
OPS = ("adjust_brightness", "adjust_contrast", "adjust_gamma", "adjust_hue",
       "adjust_saturation", "rgb_to_grayscale", "grayscale_to_rgb", "rgb_to_hsv", "hsv_to_rgb")
CASES = sorted(k for k in GOLDEN.files if k.split("/")[0] in OPS)
INEXACT = {"adjust_contrast", "adjust_gamma"}


def _tolerance(op: str, dtype: np.dtype) -> float:
    if op not in INEXACT or dtype in (np.uint8, np.uint16, np.float16):
        return 0.0
    return 4e-7 * (2**31 if dtype == np.int32 else 1)


@pytest.mark.parametrize("key", CASES)
@pytest.mark.slow
def test_matches_tensorflow(key):
    op, source, *parameters = key.split("/")
    expected = GOLDEN[key]
    result = getattr(color, op)(GOLDEN[f"src/{source}"], *map(float, parameters))
    assert result.dtype == expected.dtype and result.shape == expected.shape
    tolerance = _tolerance(op, expected.dtype)
    if tolerance == 0:
        np.testing.assert_array_equal(result, expected)
    else:
        np.testing.assert_allclose(result.astype(np.float64), expected.astype(np.float64),
                                   rtol=0, atol=tolerance)


def test_golden_covers_every_op_and_source():
    assert len(CASES) == 267
    for op in ("adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation"):
        sources = {k.split("/")[1] for k in CASES if k.startswith(op + "/")}
        assert {"rgb8", "batch8", "rgb16", "rgbf", "widef", "rgbd", "int32"} <= sources, op


@pytest.mark.parametrize("op, parameter", [("adjust_contrast", 1.7),
                                           ("adjust_saturation", 1.9), ("adjust_hue", 0.25)])
def test_float16_is_computed_in_float32_where_tensorflow_has_no_kernel(op, parameter):
    assert f"error/{op}/rgbh/{parameter}" in GOLDEN.files  # TensorFlow's CPU: NotFoundError
    image = GOLDEN["src/rgbh"]
    result = getattr(color, op)(image, parameter)
    assert result.dtype == np.float16
    expected = getattr(color, op)(image.astype(np.float32), parameter).astype(np.float16)
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("op, parameter", [
    ("adjust_brightness", 0.2), ("adjust_contrast", 1.5), ("adjust_gamma", 0.7),
    ("adjust_hue", -0.3), ("adjust_saturation", 0.4), ("rgb_to_grayscale", None),
])
def test_a_batch_is_its_images_each_adjusted(op, parameter):
    batch = GOLDEN["src/batch8"]
    args = () if parameter is None else (parameter,)
    result = getattr(color, op)(batch, *args)
    for index, image in enumerate(batch):
        np.testing.assert_array_equal(result[index], getattr(color, op)(image, *args))


def test_inputs_are_not_modified():
    for name in ("rgb8", "rgbf", "batch8"):
        image = GOLDEN[f"src/{name}"].copy()
        for op in (color.adjust_brightness, color.adjust_contrast, color.adjust_hue,
                   color.adjust_saturation, color.adjust_gamma):
            op(image, 0.3)
        color.rgb_to_grayscale(image)
        np.testing.assert_array_equal(image, GOLDEN[f"src/{name}"])


def test_hsv_round_trip():
    image = GOLDEN["src/rgbf"]
    np.testing.assert_allclose(color.hsv_to_rgb(color.rgb_to_hsv(image)), image, atol=1e-6)


def test_brightness_saturates_integers_and_not_floats():
    image = np.array([[[10, 250]]], np.uint8)
    assert color.adjust_brightness(image, 0.5).tolist() == [[[137, 255]]]
    assert color.adjust_brightness(image, -0.5).tolist() == [[[0, 122]]]
    floats = np.array([[[0.9]]], np.float32)
    assert color.adjust_brightness(floats, 0.5).item() == pytest.approx(1.4)


# --- random forms ------------------------------------------------------------------------------

RANDOM = {
    # op: (arguments, the deterministic op, how the factors are drawn from generator_for(seed))
    "random_brightness": ((0.3,), color.adjust_brightness,
                          lambda rng, n: rng.uniform(-0.3, 0.3, n)),
    "random_contrast": ((0.2, 1.8), color.adjust_contrast,
                        lambda rng, n: rng.uniform(0.2, 1.8, n)),
    "random_saturation": ((0.0, 3.0), color.adjust_saturation,
                          lambda rng, n: rng.uniform(0.0, 3.0, n)),
    "random_hue": ((0.5,), color.adjust_hue, lambda rng, n: rng.uniform(-0.5, 0.5, n)),
}


@pytest.mark.parametrize("op", sorted(RANDOM))
@pytest.mark.parametrize("seed", [7, (3, 4), np.array([1, 2], np.int64)])
def test_random_op_is_the_deterministic_op_with_its_drawn_factor(op, seed):
    arguments, deterministic, draw = RANDOM[op]
    batch = GOLDEN["src/batch8"]
    result = getattr(color, op)(batch, *arguments, seed=seed)
    factors = draw(generator_for(seed), len(batch))
    for index, image in enumerate(batch):
        np.testing.assert_array_equal(result[index], deterministic(image, factors[index]))
    # The same seed, the same result; one image draws the first factor of the batch.
    np.testing.assert_array_equal(getattr(color, op)(batch, *arguments, seed=seed), result)
    np.testing.assert_array_equal(getattr(color, op)(batch[0], *arguments, seed=seed),
                                  result[0])


@pytest.mark.parametrize("op", sorted(RANDOM))
def test_random_op_draws_per_image_of_a_batch(op):
    # tf.image draws one factor for a whole batch; feedline one per image (a batch is a map).
    arguments = RANDOM[op][0]
    image = GOLDEN["src/rgb8"]
    batch = np.stack([image] * 4)
    result = getattr(color, op)(batch, *arguments, seed=11)
    assert len({result[i].tobytes() for i in range(4)}) == 4
    other = getattr(color, op)(batch, *arguments, seed=12)
    assert not np.array_equal(result, other)


def test_random_op_advances_a_generator_it_is_given():
    rng = np.random.default_rng(5)
    image = GOLDEN["src/rgbf"]
    first = color.random_brightness(image, 0.5, seed=rng)
    second = color.random_brightness(image, 0.5, seed=rng)
    assert not np.array_equal(first, second)


def _augment(image, seed):
    image = color.random_brightness(image, 0.2, seed=seed)
    image = color.random_contrast(image, 0.5, 1.5, seed=seed + 1)
    image = color.random_saturation(image, 0.5, 1.5, seed=seed + 2)
    return color.random_hue(image, 0.1, seed=seed + 3)


def test_seeds_from_the_pipeline_restore_with_a_checkpoint():
    images = np.stack([np.roll(GOLDEN["src/batch8"][i % 3], i, axis=0) for i in range(6)])
    seeds = fl.Dataset.random(seed=5).batch(2)
    ds = fl.Dataset.zip(fl.Dataset.from_tensor_slices(images), seeds).map(_augment)
    with fl.PipelineIterator(ds) as it:
        reference = list(it)
    assert len(reference) == 6
    with fl.PipelineIterator(seeds.take(6)) as it:
        drawn = list(it)
    for image, seed, augmented in zip(images, drawn, reference):
        np.testing.assert_array_equal(augmented, _augment(image, seed))
    for k in (1, 4):
        with fl.PipelineIterator(ds) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.state_dict()))
        with fl.PipelineIterator(ds) as restored:
            restored.load_state_dict(state)
            rest = list(restored)
        assert len(rest) == 6 - k
        for got, want in zip(rest, reference[k:]):
            np.testing.assert_array_equal(got, want)


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda: color.adjust_brightness(np.zeros((7, 9), np.uint8), 0.1),
     r"adjust_brightness: .*got shape \(7, 9\)"),
    (lambda: color.adjust_contrast(np.zeros((1, 2, 7, 9, 3)), 1.0),
     r"adjust_contrast: .*got shape \(1, 2, 7, 9, 3\)"),
    (lambda: color.adjust_hue(np.zeros((7, 9, 1), np.uint8), 0.1),
     r"adjust_hue: an RGB image has 3 channels .*got shape \(7, 9, 1\)"),
    (lambda: color.adjust_saturation(np.zeros((2, 7, 9, 4)), 0.1),
     r"adjust_saturation: an RGB image has 3 channels .*got shape \(2, 7, 9, 4\)"),
    (lambda: color.rgb_to_grayscale(np.zeros((7, 9, 1))), r"rgb_to_grayscale: an RGB image"),
    (lambda: color.grayscale_to_rgb(np.zeros((7, 9, 3))),
     r"grayscale_to_rgb: a grayscale image has 1 channel .*got shape \(7, 9, 3\)"),
    (lambda: color.rgb_to_hsv(np.zeros((7, 9, 3), np.uint8)),
     r"rgb_to_hsv: images must be floating point .* got uint8: convert with "
     r"convert_image_dtype"),
    (lambda: color.adjust_hue(np.zeros((7, 9, 3)), 1.5),
     r"adjust_hue: delta must be in the interval \[-1, 1\]; got 1.5"),
    (lambda: color.adjust_gamma(np.zeros((7, 9, 3)), -1.0),
     r"adjust_gamma: gamma must be a non-negative real number; got -1.0"),
    (lambda: color.adjust_brightness(np.zeros((7, 9, 3)), float("nan")),
     r"adjust_brightness: delta must be finite"),
    (lambda: color.adjust_contrast(np.zeros((7, 9, 3)), "x"),
     r"adjust_contrast: contrast_factor must be a number; got 'x'"),
    (lambda: color.random_contrast(np.zeros((7, 9, 3)), 1.5, 0.5),
     r"random_contrast: upper must be > lower; got lower=1.5, upper=0.5"),
    (lambda: color.random_saturation(np.zeros((7, 9, 3)), -0.5, 0.5),
     r"random_saturation: lower must be non-negative; got lower=-0.5"),
    (lambda: color.random_brightness(np.zeros((7, 9, 3)), -0.1),
     r"random_brightness: max_delta must be non-negative; got -0.1"),
    (lambda: color.random_hue(np.zeros((7, 9, 3)), 0.6),
     r"random_hue: max_delta must be <= 0.5; got 0.6"),
    (lambda: color.random_hue(np.zeros((7, 9, 3)), -0.1),
     r"random_hue: max_delta must be non-negative"),
    (lambda: color.adjust_brightness(np.array([[["a"]]]), 0.1),
     r"adjust_brightness: an image is a numeric array"),
])
def test_bad_input_is_a_clear_error(call, message):
    # InvalidArgumentError is a ValueError, as TensorFlow's ValueErrors for these cases.
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        call()
    assert isinstance(caught.value, ValueError)


def test_bad_seed_is_a_type_error():
    with pytest.raises(TypeError, match="a seed is an int, a pair of ints"):
        color.random_brightness(np.zeros((7, 9, 3)), 0.1, seed="x")
