"""feedline.image.dtype against tf.image's outputs recorded by record_golden_color.py.

convert_image_dtype is bit-exact with TensorFlow 2.21 wherever TensorFlow's result is defined;
per_image_standardization is within 4e-7 (measured: 3.6e-7, float32 summation order).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from feedline.core.errors import InvalidArgumentError
from feedline.image.dtype import (
    convert_image_dtype,
    normalize,
    per_image_standardization,
    saturate_cast,
)

GOLDEN = np.load(Path(__file__).with_name("golden_color.npz"))
CONVERSIONS = sorted(k for k in GOLDEN.files if k.startswith("convert_image_dtype/"))
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _defined(source: np.ndarray, target: np.dtype, saturate: bool) -> np.ndarray:
    """Where TensorFlow's result is defined: C++'s float -> int cast is undefined out of range.

    TensorFlow (x86) gives 2**31 for such uint32 values, NumPy 0; NaN (0 * inf, when float16's
    MAX + 0.5 rounds to inf) casts to an arbitrary value in both.
    """
    if source.dtype.kind != "f" or target.kind == "f":
        return np.ones(source.shape, bool)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (source * source.dtype.type(np.iinfo(target).max + 0.5)).astype(np.float64)
    if saturate:
        return ~np.isnan(scaled)
    info = np.iinfo(target)
    return np.isfinite(scaled) & (scaled > info.min - 1.0) & (scaled < info.max + 1.0)


@pytest.mark.parametrize("key", CONVERSIONS)
@pytest.mark.slow
def test_convert_image_dtype_is_tensorflow_bit_for_bit(key):
    _, table, source_name, target, saturate = key.split("/")
    source = GOLDEN[f"src/{table}/{source_name}"]
    expected = GOLDEN[key]
    with np.errstate(all="ignore"):
        result = convert_image_dtype(source, target, saturate=bool(int(saturate)))
    assert result.dtype == expected.dtype and result.shape == expected.shape
    defined = _defined(source, np.dtype(target), bool(int(saturate)))
    assert defined.sum() >= (1 if table == "conv" and source_name != "float16" else 0)
    np.testing.assert_array_equal(result[defined], expected[defined])


def test_golden_conversions_cover_every_pair():
    # 10 source dtypes x 10 targets x 2 in range, plus 3 float sources out of range; TensorFlow
    # has no uint32 clamp kernel (saturate=True from a wider dtype): recorded as errors.
    errors = [k for k in GOLDEN.files if k.startswith("error/convert_image_dtype/")]
    assert len(CONVERSIONS) + len(errors) == 2 * 10 * 13
    assert errors and all("uint32" in k.split("/")[3:5] for k in errors)


def test_convert_uint32_saturates_where_tensorflow_has_no_kernel():
    source = np.array([0, 1, 2**32 - 1], np.uint32).reshape(1, 3, 1)
    assert convert_image_dtype(source, np.uint8, saturate=True).ravel().tolist() == [0, 0, 255]
    wide = np.array([-0.5, 0.5, 2.0], np.float64).reshape(1, 3, 1)
    assert convert_image_dtype(wide, np.uint32, saturate=True).ravel().tolist() == \
        [0, 2147483647, 2**32 - 1]


def test_convert_same_dtype_is_the_input_and_any_shape_works():
    image = np.arange(6, dtype=np.uint8)
    assert convert_image_dtype(image, np.uint8) is image
    assert convert_image_dtype(image, "float32").shape == (6,)


def test_saturate_cast_keeps_the_limits_tensorflow_computes():
    # float32(2**31 - 1) rounds up to 2**31: the clamp steps one ulp toward zero.
    values = np.array([3e9, -3e9, np.inf, -np.inf], np.float32)
    assert saturate_cast(values, np.dtype(np.int32)).tolist() == \
        [2147483520, -2147483648, 2147483520, -2147483648]
    assert saturate_cast(np.array([300, -5], np.int16), np.dtype(np.uint8)).tolist() == [255, 0]


@pytest.mark.parametrize("dtype", [np.bool_, np.complex64, "U1", object])
def test_convert_rejects_non_numeric_images(dtype):
    image = np.zeros((1, 1, 1), dtype)
    with pytest.raises(InvalidArgumentError, match="image's dtype must be an integer or "
                                                   "floating point dtype"):
        convert_image_dtype(image, np.float32)


@pytest.mark.parametrize("dtype", [np.bool_, np.complex64, "nonsense"])
def test_convert_rejects_non_numeric_targets(dtype):
    with pytest.raises(InvalidArgumentError, match="dtype must be an integer or floating"):
        convert_image_dtype(np.zeros((1, 1, 1), np.uint8), dtype)


# --- normalize -----------------------------------------------------------------------------


def _normalize_reference(images: np.ndarray, mean, std) -> np.ndarray:
    values = images.astype(np.float64)
    if images.dtype.kind in "iu":
        values /= np.iinfo(images.dtype).max
    return (values - np.asarray(mean, np.float64)) / np.asarray(std, np.float64)


@pytest.mark.parametrize("name", ["rgb8", "batch8", "rgb16", "rgbf", "rgbd"])
def test_normalize_is_x_over_max_minus_mean_over_std(name):
    images = GOLDEN[f"src/{name}"]
    result = normalize(images, IMAGENET_MEAN, IMAGENET_STD)
    assert result.dtype == np.float32 and result.shape == images.shape
    reference = _normalize_reference(images, IMAGENET_MEAN, IMAGENET_STD)
    # Measured: 4.8e-7 against the exact values (|values| <= 2.7: 2 float32 ulps).
    np.testing.assert_allclose(result, reference, rtol=0, atol=1e-6)


def test_normalize_float64_output_and_scalar_parameters():
    images = GOLDEN["src/gray8"]
    result = normalize(images, 0.5, 0.25, dtype=np.float64)
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, _normalize_reference(images, 0.5, 0.25), atol=1e-12)


def test_normalize_batch_is_its_images_normalized():
    batch = GOLDEN["src/batch8"]
    result = normalize(batch, IMAGENET_MEAN, IMAGENET_STD)
    for index, image in enumerate(batch):
        np.testing.assert_array_equal(result[index],
                                      normalize(image, IMAGENET_MEAN, IMAGENET_STD))


def test_normalize_does_not_touch_its_input():
    image = GOLDEN["src/rgbf"].copy()
    normalize(image, 0.5, 0.5)
    np.testing.assert_array_equal(image, GOLDEN["src/rgbf"])


@pytest.mark.parametrize("kwargs, message", [
    ({"mean": (0.5, 0.5), "std": 1.0}, "mean has 2 values for an image of 3 channels"),
    ({"mean": 0.5, "std": (1, 1, 1, 1)}, "std has 4 values for an image of 3 channels"),
    ({"mean": 0.5, "std": (1, 0, 1)}, "std must be non-zero"),
    ({"mean": float("nan"), "std": 1}, "mean must be finite"),
    ({"mean": 0.5, "std": 1, "dtype": np.int32}, "dtype must be a floating point dtype"),
])
def test_normalize_bad_parameters(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        normalize(GOLDEN["src/rgb8"], **kwargs)


def test_normalize_bad_rank():
    with pytest.raises(InvalidArgumentError, match=r"got shape \(7, 9\)"):
        normalize(np.zeros((7, 9), np.uint8), 0.5, 0.5)


# --- per_image_standardization ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["rgb8", "batch8", "rgb16", "rgbf", "widef", "rgbh", "rgbd",
                                  "int32", "gray8", "grayf"])
def test_per_image_standardization_matches_tensorflow(name):
    expected = GOLDEN[f"per_image_standardization/{name}"]
    result = per_image_standardization(GOLDEN[f"src/{name}"])
    assert result.dtype == np.float32 and result.shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=0, atol=4e-7)


def test_per_image_standardization_uniform_image_is_zero_and_batches_per_image():
    batch = GOLDEN["src/batch8"]
    result = per_image_standardization(batch)
    assert not result[2].any()  # the uniform image: the 1 / sqrt(N) floor, no division by 0
    for index, image in enumerate(batch):
        np.testing.assert_array_equal(result[index], per_image_standardization(image))


def test_per_image_standardization_bad_rank():
    with pytest.raises(InvalidArgumentError, match=r"per_image_standardization: .*got shape "
                                                   r"\(2, 3, 4, 5, 6\)"):
        per_image_standardization(np.zeros((2, 3, 4, 5, 6)))


@pytest.mark.parametrize("shape", [(224, 224, 3), (5, 7, 9, 3), (2, 3, 4, 1), (1, 6, 5, 4),
                                   (3, 3, 3, 7), (0, 4, 4, 3)])
def test_normalize_c_path_is_bit_identical_to_the_numpy_path(monkeypatch, shape):
    from feedline.image import dtype as dtype_module

    if dtype_module._normalize_fast is None:
        pytest.skip("built without the C extension")
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, shape, dtype=np.uint8)
    channels = shape[-1]
    arguments = [(0.5, 0.25), ([0.1] * channels, np.array([0.3] * channels)),
                 (list(rng.random(channels)), tuple(rng.random(channels) + 0.01))]
    for mean, std in arguments:
        fast = normalize(images, mean, std)
        with monkeypatch.context() as patch:
            patch.setattr(dtype_module, "_normalize_fast", None)
            plain = normalize(images, mean, std)
        assert fast.dtype == plain.dtype == np.float32 and fast.shape == plain.shape
        np.testing.assert_array_equal(fast.view(np.uint32), plain.view(np.uint32))
        assert fast.flags.writeable and fast.flags.c_contiguous
    strided = images[..., ::-1]  # not contiguous: copied first
    np.testing.assert_array_equal(normalize(strided, 0.5, 0.25),
                                  normalize(np.ascontiguousarray(strided), 0.5, 0.25))


def test_normalize_checks_every_call_though_its_constants_are_cached():
    image = np.zeros((2, 2, 3), np.uint8)
    normalize(image, 0.5, 0.25)
    for mean, std, match in [(0.5, 0.0, "std must be non-zero"),
                             (float("nan"), 0.25, "mean must be finite"),
                             ([0.5, 0.5], 0.25, "mean has 2 values")]:
        for _ in range(2):  # the second call meets the same (uncached) error
            with pytest.raises(InvalidArgumentError, match=match):
                normalize(image, mean, std)


def test_normalize_c_function_rejects_mismatched_buffers():
    from feedline.image import dtype as dtype_module

    fast = dtype_module._normalize_fast
    if fast is None:
        pytest.skip("built without the C extension")
    source = np.zeros(12, np.uint8)
    three = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="uint8"):
        fast.normalize_u8(source.astype(np.int16), np.empty(12, np.float32), three, three)
    with pytest.raises(TypeError, match="out must be a contiguous float32"):
        fast.normalize_u8(source, np.empty(12, np.float64), three, three)
    with pytest.raises(ValueError, match="as many items"):
        fast.normalize_u8(source, np.empty(11, np.float32), three, three)
    with pytest.raises(ValueError, match="same number"):
        fast.normalize_u8(source, np.empty(12, np.float32), three, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="multiple of the channel count"):
        fast.normalize_u8(source, np.empty(12, np.float32), np.ones(5, np.float32),
                          np.ones(5, np.float32))
    out = np.empty(12, np.float32)
    fast.normalize_u8(np.arange(12, dtype=np.uint8), out, np.float32([1, 2, 3]),
                      np.float32([0, -1, 0.5]))
    assert out.tolist() == [0, 1, 6.5, 3, 7, 15.5, 6, 13, 24.5, 9, 19, 33.5]
