"""Image dtype conversions: ``convert_image_dtype``, ``normalize``, ``per_image_standardization``.

``convert_image_dtype`` follows ``tf.image.convert_image_dtype`` bit for bit: integers map to
floats by ``MAX`` of their dtype (``cast(x) * (1 / MAX)`` in the target dtype), floats map to
integers by ``x * (MAX + 0.5)`` truncated toward zero (saturated first with ``saturate=True``),
integers map to integers by a power-of-two shift, floats to floats by a plain cast.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._shape import as_images, restore

try:
    from feedline.image import _normalize_fast
except ImportError:  # pragma: no cover - built without a C compiler or FEEDLINE_PURE_PYTHON
    _normalize_fast = None
if os.environ.get("FEEDLINE_PURE_PYTHON", "") not in ("", "0"):
    _normalize_fast = None  # as for feedline's other C paths: ignore a built one

__all__ = ["convert_image_dtype", "normalize", "per_image_standardization"]

DTypeLike = np.dtype | type | str


def _numeric_dtype(dtype: DTypeLike, what: str) -> np.dtype:
    try:
        result = np.dtype(dtype)
    except TypeError as error:
        raise InvalidArgumentError(f"convert_image_dtype: {what} must be an integer or floating "
                                   f"point dtype; got {dtype!r}") from error
    if result.kind not in "iuf":
        raise InvalidArgumentError(f"convert_image_dtype: {what} must be an integer or floating "
                                   f"point dtype; got {result}")
    return result


def _limits(dtype: np.dtype) -> tuple[int | float, int | float]:
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    return (int(info.min), int(info.max)) if dtype.kind in "iu" else (float(info.min),
                                                                     float(info.max))


def saturate_cast(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``tf.dtypes.saturate_cast``: clamp to ``dtype``'s range in the input dtype, then cast.

    The clamp limits are those TensorFlow 2.21 computes: a limit the input dtype cannot hold
    exactly (``float32(2**31 - 1)`` rounds up to ``2**31``) steps one ulp toward zero, so the
    cast never overflows.
    """
    in_dtype = value.dtype
    in_min, in_max = _limits(in_dtype)
    out_min, out_max = _limits(dtype)
    if in_dtype.kind in "iu" and in_min >= out_min and in_max <= out_max:
        return value.astype(dtype)  # the clamp is a no-op (floats clamp inf even then)
    scalar = in_dtype.type
    try:
        promoted = np.promote_types(in_dtype, dtype)
    except TypeError:
        promoted = np.dtype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        low = scalar(max(in_min, out_min))
        if np.array([low, out_min], promoted)[0] < np.array([low, out_min], promoted)[1]:
            low = np.nextafter(low, scalar(0), dtype=in_dtype)
        high = scalar(min(float(in_max), float(out_max)) if in_dtype.kind == "f"
                      else min(in_max, out_max))
        if np.array([high, out_max], promoted)[0] > np.array([high, out_max], promoted)[1]:
            high = np.nextafter(high, scalar(0), dtype=in_dtype)
        return np.clip(value, low, high).astype(dtype)


def _float_to_int(image: np.ndarray, dtype: np.dtype, saturate: bool,
                  scratch: bool = False) -> np.ndarray:
    """``x * (MAX + 0.5)`` truncated; ``scratch`` lets it scale ``image`` in place."""
    scale = image.dtype.type(np.iinfo(dtype).max + 0.5)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.multiply(image, scale, out=image if scratch else None)
        if saturate:
            return saturate_cast(scaled, dtype)
        # Out of range, TensorFlow's cast is C's undefined float -> int conversion; NumPy's
        # gives what x86 gives (the same as TensorFlow on x86 for int32 and narrower).
        return scaled.astype(dtype)


def convert_image_dtype(image: np.ndarray, dtype: DTypeLike,
                        saturate: bool = False) -> np.ndarray:
    """Convert ``image`` to ``dtype``, scaling its values: ``tf.image.convert_image_dtype``.

    Floating point images hold values in ``[0, 1]``, integer images in ``[0, MAX]`` of their
    dtype. Integer to float divides by ``MAX`` (as TensorFlow does: the cast times the rounded
    ``1 / MAX``); float to integer multiplies by ``MAX + 0.5`` and truncates; integer to integer
    shifts by the ratio of the two ranges; float to float casts. With ``saturate=True``, values
    are clamped to the target's range before the cast (otherwise out-of-range values wrap, as in
    TensorFlow). The result equals TensorFlow 2.21's bit for bit, for every pair of
    ``uint8/16/32, int8/16/32/64, float16/32/64``. Any shape works (the conversion is per
    element); an image already of ``dtype`` is returned as it is, not copied.

    Args:
        image: an array (an image ``[H, W, C]``, a batch ``[N, H, W, C]``, or any shape).
        dtype: the target dtype, integer or floating point.
        saturate: clamp before casting, so that out-of-range values cannot wrap around.

    Returns:
        The converted array, of ``dtype``.

    Raises:
        InvalidArgumentError: ``image`` or ``dtype`` is not an integer or floating point type.

    Example:
        >>> convert_image_dtype(np.array([[[0, 51, 255]]], np.uint8), np.float32)  # 51 * (1/255)
        array([[[0.        , 0.20000002, 1.        ]]], dtype=float32)
        >>> convert_image_dtype(np.array([[[0.0, 0.5, 1.2]]]), np.uint8, saturate=True)
        array([[[  0, 127, 255]]], dtype=uint8)
        >>> convert_image_dtype(np.array([[[1, 255]]], np.uint8), np.uint16)  # a shift: * 256
        array([[[  256, 65280]]], dtype=uint16)
    """
    array = np.asarray(image)
    source = _numeric_dtype(array.dtype, "the image's dtype")
    target = _numeric_dtype(dtype, "dtype")
    if source == target:
        return array
    if source.kind == "f" and target.kind == "f":
        return array.astype(target)
    if source.kind == "f":
        return _float_to_int(array, target, saturate)
    scale_in = int(np.iinfo(source).max)
    if target.kind == "f":
        cast = array.astype(target)
        with np.errstate(over="ignore"):
            cast *= target.type(1.0 / scale_in)
        return cast
    scale_out = int(np.iinfo(target).max)
    if scale_in > scale_out:
        scaled = np.floor_divide(array, source.type((scale_in + 1) // (scale_out + 1)))
        return saturate_cast(scaled, target) if saturate else scaled.astype(target)
    cast = saturate_cast(array, target) if saturate else array.astype(target)
    cast *= target.type((scale_out + 1) // (scale_in + 1))  # wraps, as TensorFlow's does
    return cast


def _values_key(values: float | Sequence[float] | np.ndarray) -> bytes:
    """``values`` (a ``mean`` or ``std`` argument) as the bytes of its float64 values: a
    hashable key that tells -0.0 from 0.0 (equal as floats, their shifts' signs differ)."""
    if isinstance(values, (int, float)):
        return struct.pack("d", float(values))
    return np.asarray(values, dtype=np.float64).reshape(-1).tobytes()


@functools.lru_cache(maxsize=64)
def _affine(mean: bytes, std: bytes, channels: int, unit: float,
            out_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """normalize's per-channel ``scale`` and ``shift`` in ``out_dtype``, checked once per
    distinct argument set: per call, the checks cost as much as the C loop they feed."""
    mean64 = _per_channel(np.frombuffer(mean), channels, "mean")
    std64 = _per_channel(np.frombuffer(std), channels, "std")
    if np.any(std64 == 0):
        raise InvalidArgumentError(f"normalize: std must be non-zero; got {std64.tolist()}")
    scale = (1.0 / (unit * std64)).astype(out_dtype)
    shift = (-mean64 / std64).astype(out_dtype)
    scale.flags.writeable = shift.flags.writeable = False
    return scale, shift


def _per_channel(values: float | Sequence[float] | np.ndarray, channels: int,
                 name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 1:
        array = np.repeat(array, channels)
    if array.size != channels:
        raise InvalidArgumentError(f"normalize: {name} has {array.size} values for an image of "
                                   f"{channels} channels; give one value or one per channel")
    if not np.all(np.isfinite(array)):
        raise InvalidArgumentError(f"normalize: {name} must be finite; got {array.tolist()}")
    return array


def normalize(images: np.ndarray, mean: float | Sequence[float],
              std: float | Sequence[float], dtype: DTypeLike = np.float32) -> np.ndarray:
    """``(x - mean) / std`` per channel, integer images scaled to ``[0, 1]`` first.

    Integer images are first converted as by :func:`convert_image_dtype` (``uint8`` divides by
    255), so ``mean`` and ``std`` are in ``[0, 1]`` units, the convention of the ImageNet
    constants ``mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)`` (torchvision's
    ``Normalize`` after ``ToTensor``, Keras' ``Normalization`` after ``/ 255``). Float images are
    used as they are: for ``0-255`` float pixels, pass ``mean * 255`` and ``std * 255``.

    The computation is ``x * (1 / (MAX * std)) + (-mean / std)`` in ``dtype``, one cast and
    two in-place passes (uint8 to float32 is the fused fast path: no intermediate ``[0, 1]``
    image). It differs from the two-step ``(convert_image_dtype(x) - mean) / std`` in float32
    by rounding only: at most 2 float32 ulps of the result (the tests check against float64).

    Args:
        images: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``.
        mean: one value, or one per channel.
        std: one value, or one per channel; each must be non-zero.
        dtype: the floating point dtype of the result.

    Returns:
        The normalized images, of ``dtype``, in the input's shape.

    Raises:
        InvalidArgumentError: a bad rank, a ``mean``/``std`` length that is neither 1 nor the
            channel count, a zero ``std``, or a non-float ``dtype``.

    Example:
        >>> image = np.array([[[0, 128, 255]]], np.uint8)
        >>> normalize(image, mean=0.5, std=0.5)
        array([[[-1.        ,  0.00392163,  1.        ]]], dtype=float32)
    """
    batch, single = as_images(images, "normalize")
    out_dtype = np.dtype(dtype)
    if out_dtype.kind != "f":
        raise InvalidArgumentError(f"normalize: dtype must be a floating point dtype; "
                                   f"got {out_dtype}")
    channels = batch.shape[-1]
    unit = float(np.iinfo(batch.dtype).max) if batch.dtype.kind in "iu" else 1.0
    scale, shift = _affine(_values_key(mean), _values_key(std), channels, unit, out_dtype)
    n, height, width, _ = batch.shape
    if (_normalize_fast is not None and batch.dtype == np.uint8 and out_dtype == np.float32
            and batch.size):
        # One C loop with the GIL released, the same two float32 roundings as below: the
        # cast and two passes each retake the GIL, which serializes threads.
        out = np.empty(batch.shape, np.float32)
        _normalize_fast.normalize_u8(np.ascontiguousarray(batch), out, scale, shift)
        return restore(out, single)
    # Rows of width * channels: a per-channel constant broadcast over a last axis of 3 runs
    # NumPy's inner loop 3 elements at a time, several times slower than one row per call.
    out = batch.astype(out_dtype).reshape(n * height, width * channels)
    out *= np.tile(scale, width)
    out += np.tile(shift, width)
    return restore(out.reshape(batch.shape), single)


def per_image_standardization(image: np.ndarray) -> np.ndarray:
    """``(x - mean) / max(stddev, 1 / sqrt(N))`` per image: ``tf.image.per_image_standardization``.

    Values are cast to float32 (not scaled: uint8 stays in ``0-255``), and the mean and the
    (population) standard deviation are over each image's ``N = H * W * C`` values; the
    ``1 / sqrt(N)`` floor keeps a uniform image finite (it becomes all zeros). Matches
    TensorFlow within 2e-6 (float32 summation order).

    Args:
        image: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``, standardized per image.

    Returns:
        float32 images of the input's shape, each with mean 0 and variance 1 (or all zero).

    Raises:
        InvalidArgumentError: the input is not an image or a batch of images.

    Example:
        >>> image = np.arange(1, 13, dtype=np.int32).reshape(2, 2, 3)
        >>> per_image_standardization(image)[0, 0]
        array([-1.593255 , -1.3035723, -1.0138896], dtype=float32)
    """
    batch, single = as_images(image, "per_image_standardization")
    n = batch.shape[0]
    flat = batch.astype(np.float32).reshape(n, -1)
    count = max(flat.shape[1], 1)
    # The mean in float64 (then rounded once); the variance from the centred float32 values,
    # which the output needs anyway, so the image is read three times in all.
    mean = flat.mean(axis=1, dtype=np.float64).astype(np.float32)
    flat -= mean[:, None]
    variance = np.array([np.dot(row, row) for row in flat], np.float64) / count
    stddev = np.sqrt(variance).astype(np.float32)
    floor = np.float32(1.0) / np.sqrt(np.float32(count))
    flat /= np.maximum(stddev, floor)[:, None]
    return restore(flat.reshape(batch.shape), single)
