"""``resize``: tf.image.resize's methods and pixel conventions; and the ops that resize a window
of the image, ``resize_with_pad`` (then pads) and ``random_resized_crop`` (a random crop,
resized), over :mod:`feedline.image.cropping`'s crops and pads.

Pixel centres are at half-integers (tf.image.resize's ``half_pixel_centers=True``); the result is
float32 except for ``"nearest"``, which keeps the input's dtype, as in TensorFlow.

Which native code runs each method (all release the GIL):

- ``bilinear`` (no antialias) and ``area``: OpenCV's ``INTER_LINEAR`` / ``INTER_AREA`` on float32,
  which use the same sampling as TensorFlow's kernels (measured: at most 8e-5 apart on 0..255
  data for bilinear, 5e-4 for area, float rounding).
- ``nearest``: TensorFlow's source indices (``floor((x + 0.5) * in / out)`` in float32), gathered
  with ``np.take``: exact.
- ``bicubic`` (Keys a=-0.5 with TensorFlow's 1/1024 weight table and renormalized borders),
  ``lanczos3``, ``lanczos5``, ``gaussian``, ``mitchellcubic`` and every ``antialias=True`` form:
  TensorFlow's ``scale_and_translate`` weights, built once per shape and applied as two matrix
  products (BLAS) per image (measured: at most 3e-4 apart on 0..255 data).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image import _native
from feedline.image._random import Seed, generator_for
from feedline.image._shape import as_images, restore, size_pair
from feedline.image.cropping import pad_to_bounding_box, random_resized_crop_window

METHODS = ("bilinear", "nearest", "area", "bicubic", "lanczos3", "lanczos5", "gaussian",
           "mitchellcubic")
"""The ``method`` names :func:`resize` takes (tf.image.ResizeMethod's values)."""

_F = np.float32


def _triangle(x: np.ndarray) -> np.ndarray:
    return np.where(x < 1, 1 - x, 0).astype(_F)


def _keys_cubic(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 2, 0, np.where(x >= 1, ((_F(-0.5) * x + _F(2.5)) * x - 4) * x + 2,
                                        ((_F(1.5) * x - _F(2.5)) * x) * x + 1)).astype(_F)


def _mitchell_cubic(x: np.ndarray) -> np.ndarray:
    far = (((_F(-7 / 18) * x + 2) * x - _F(10 / 3)) * x) + _F(16 / 9)
    near = ((_F(7 / 6) * x - 2) * x) * x + _F(8 / 9)
    return np.where(x >= 2, 0, np.where(x >= 1, far, near)).astype(_F)


def _gaussian(x: np.ndarray) -> np.ndarray:
    sigma = 1.5 / 3.0
    return np.where(x >= 1.5, 0, np.exp(-x.astype(np.float64) ** 2 / (2 * sigma * sigma))
                    ).astype(_F)


def _lanczos(radius: float) -> Callable[[np.ndarray], np.ndarray]:
    def kernel(x: np.ndarray) -> np.ndarray:
        x_pi = x.astype(np.float64) * math.pi
        with np.errstate(divide="ignore", invalid="ignore"):
            value = radius * np.sin(x_pi) * np.sin(x_pi / radius) / (x_pi * x_pi)
        return np.where(x > radius, 0, np.where(x <= 1e-3, 1, value)).astype(_F)
    return kernel


# kernel, radius: TensorFlow's sampling_kernels.h
_KERNELS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "triangle": (_triangle, 1.0), "keyscubic": (_keys_cubic, 2.0),
    "mitchellcubic": (_mitchell_cubic, 2.0), "gaussian": (_gaussian, 1.5),
    "lanczos3": (_lanczos(3.0), 3.0), "lanczos5": (_lanczos(5.0), 5.0),
}


@functools.lru_cache(maxsize=256)
def _span_weights(kernel_name: str, in_size: int, out_size: int, antialias: bool) -> np.ndarray:
    """TensorFlow's scale_and_translate spans for one axis as a dense ``[out, in]`` matrix."""
    kernel, radius = _KERNELS[kernel_name]
    scale = _F(out_size) / _F(in_size)
    inv_scale = _F(1.0 / scale)
    kernel_scale = max(inv_scale, _F(1)) if antialias else _F(1)
    weights = np.zeros((out_size, in_size), np.float32)
    reach = _F(radius) * kernel_scale
    for x in range(out_size):
        sample = (_F(x) + _F(0.5)) * inv_scale
        if sample < 0 or sample > in_size:
            continue
        start = min(max(math.ceil(sample - reach - _F(0.5)), 0), in_size - 1)
        end = min(max(math.floor(sample + reach - _F(0.5)), 0), in_size - 1) + 1
        positions = np.arange(start, end, dtype=_F) + _F(0.5) - sample
        row = kernel(np.abs(positions * (_F(1) / kernel_scale)))
        total = row.sum(dtype=_F)
        if abs(total) >= 1000 * np.finfo(_F).tiny:
            weights[x, start:end] = row * (_F(1) / total)
    return weights


@functools.lru_cache(maxsize=256)
def _bicubic_weights(in_size: int, out_size: int) -> np.ndarray:
    """tf.raw_ops.ResizeBicubic(half_pixel_centers=True)'s weights as ``[out, in]``."""
    table_size = 1024
    t = np.arange(table_size + 1, dtype=np.float64) / table_size
    a = _F(-0.5)
    t32 = t.astype(_F)
    near = ((a + 2) * t32 - (a + 3)) * t32 * t32 + 1
    t1 = t32 + _F(1)
    far = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a
    scale = _F(in_size) / _F(out_size)
    locations = (np.arange(out_size, dtype=_F) + _F(0.5)) * scale - _F(0.5)
    floors = np.floor(locations)
    offsets = np.rint((locations - floors) * table_size).astype(np.int64)  # lrintf
    weights = np.zeros((out_size, in_size), np.float32)
    for x in range(out_size):
        base, offset = int(floors[x]), offsets[x]
        taps = ((base - 1, far[offset]), (base, near[offset]),
                (base + 1, near[table_size - offset]), (base + 2, far[table_size - offset]))
        # Taps outside the image get no weight and the rest are renormalized (TensorFlow's
        # Keys-cubic border rule).
        inside = [(index, weight) for index, weight in taps if 0 <= index < in_size]
        total = _F(sum(weight for _, weight in inside))
        for index, weight in inside:
            weights[x, index] += weight * (_F(1) / total)
    return weights


def _apply_separable(batch: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``rows @ image @ cols.T`` per image and channel: columns first, as TensorFlow does."""
    # [N, H, W, C] x [ow, W] -> [N, H, C, ow]; BLAS releases the GIL.
    across = np.tensordot(batch, cols, axes=([2], [1]))
    # [oh, H] x [N, H, C, ow] -> [oh, N, C, ow]
    down = np.tensordot(rows, across, axes=([1], [1]))
    return np.ascontiguousarray(down.transpose(1, 0, 3, 2))


def _nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    scale = _F(in_size) / _F(out_size)
    indices = np.floor((np.arange(out_size, dtype=_F) + _F(0.5)) * scale).astype(np.int64)
    return np.clip(indices, 0, in_size - 1)


def _cv2_resize(batch: np.ndarray, height: int, width: int, interpolation: int) -> np.ndarray:
    cv2 = _native.cv2()
    out = np.empty((batch.shape[0], height, width, batch.shape[3]), np.float32)
    for index, image in enumerate(batch):
        result = cv2.resize(image, (width, height), interpolation=interpolation)
        out[index] = result.reshape(height, width, batch.shape[3])
    return out


def _aspect_size(height: int, width: int, size: tuple[int, int]) -> tuple[int, int]:
    # tf.image.resize's float32 arithmetic and round-half-to-even.
    factor = min(_F(size[0]) / _F(height), _F(size[1]) / _F(width))
    return (max(int(np.round(factor * _F(height))), 1), max(int(np.round(factor * _F(width))), 1))


def resize(images: np.ndarray, size: Sequence[int], method: str = "bilinear",
           preserve_aspect_ratio: bool = False, antialias: bool = False) -> np.ndarray:
    """Resize images to ``size``, as ``tf.image.resize``.

    Args:
        images: ``[H, W, C]`` or a batch ``[N, H, W, C]``, any real dtype.
        size: ``(new_height, new_width)``, both positive.
        method: One of :data:`METHODS` (``"bilinear"``, ``"nearest"``, ``"area"``,
            ``"bicubic"``, ``"lanczos3"``, ``"lanczos5"``, ``"gaussian"``, ``"mitchellcubic"``).
        preserve_aspect_ratio: Scale both sides by one factor so the result fits in ``size``.
        antialias: Low-pass filter when downscaling (TensorFlow's ``scale_and_translate``);
            ignored by ``"nearest"`` and ``"area"``, as in TensorFlow.

    Returns:
        float32 images of the new size (``"nearest"`` keeps the input dtype).

    Raises:
        InvalidArgumentError: a bad rank, size or method.

    Example:
        >>> image = np.arange(16, dtype=np.uint8).reshape(4, 4, 1)
        >>> resize(image, (2, 2))[..., 0].tolist()
        [[2.5, 4.5], [10.5, 12.5]]
        >>> resize(image, (2, 2), method="nearest")[..., 0].tolist()
        [[5, 7], [13, 15]]
    """
    op = "resize"
    if method not in METHODS:
        raise InvalidArgumentError(f"{op}: method is one of {', '.join(METHODS)}; got {method!r}")
    batch, single = as_images(images, op)
    height, width = size_pair(size, op)
    if height == 0 or width == 0:
        raise InvalidArgumentError(f"{op}: size must be positive; got {tuple(size)}")
    in_height, in_width = batch.shape[1:3]
    if in_height == 0 or in_width == 0:
        raise InvalidArgumentError(f"{op}: cannot resize an empty image of shape "
                                   f"{np.shape(images)}")
    if preserve_aspect_ratio:
        height, width = _aspect_size(in_height, in_width, (height, width))
    if method == "nearest":
        out = np.take(np.take(batch, _nearest_indices(in_height, height), axis=1),
                      _nearest_indices(in_width, width), axis=2)
        return restore(out, single)
    floats = np.ascontiguousarray(batch, dtype=np.float32)
    if method == "area" or (method == "bilinear" and not antialias):
        cv2 = _native.cv2()
        out = _cv2_resize(floats, height, width,
                          cv2.INTER_AREA if method == "area" else cv2.INTER_LINEAR)
    elif method == "bicubic" and not antialias:
        out = _apply_separable(floats, _bicubic_weights(in_height, height),
                               _bicubic_weights(in_width, width))
    else:
        kernel = {"bilinear": "triangle", "bicubic": "keyscubic"}.get(method, method)
        out = _apply_separable(floats, _span_weights(kernel, in_height, height, antialias),
                               _span_weights(kernel, in_width, width, antialias))
    return restore(out, single)


def resize_with_pad(images: np.ndarray, target_height: int, target_width: int,
                    method: str = "bilinear", antialias: bool = False) -> np.ndarray:
    """Resize keeping the aspect ratio, then pad with zeros to the target size, as
    ``tf.image.resize_with_pad``.

    Args:
        images: ``[H, W, C]`` or ``[N, H, W, C]``.
        target_height: The result's height.
        target_width: The result's width.
        method: As :func:`resize`.
        antialias: As :func:`resize`.

    Returns:
        ``[target_height, target_width, C]`` (float32 unless ``method="nearest"``).

    Example:
        >>> resize_with_pad(np.ones((2, 4, 1), np.float32), 4, 4)[..., 0].tolist()
        [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    """
    op = "resize_with_pad"
    batch, single = as_images(images, op)
    target_height, target_width = size_pair((target_height, target_width), op)
    if target_height == 0 or target_width == 0:
        raise InvalidArgumentError(f"{op}: target size must be positive; got "
                                   f"{(target_height, target_width)}")
    height, width = batch.shape[1:3]
    # tf.image.resize_with_pad's float32 arithmetic: floor the resized size, truncate the pad.
    ratio = max(_F(width) / _F(target_width), _F(height) / _F(target_height))
    resized_height, resized_width = _F(height) / ratio, _F(width) / ratio
    pad_height = max(0, int((_F(target_height) - resized_height) / _F(2)))
    pad_width = max(0, int((_F(target_width) - resized_width) / _F(2)))
    resized = resize(batch, (int(np.floor(resized_height)), int(np.floor(resized_width))),
                     method=method, antialias=antialias)
    return restore(pad_to_bounding_box(resized, pad_height, pad_width, target_height,
                                       target_width), single)


def random_resized_crop(image: np.ndarray, size: Sequence[int],
                        scale: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3), method: str = "bilinear",
                        antialias: bool = False, seed: Seed = None) -> np.ndarray:
    """Inception-style crop: a random window (:func:`random_resized_crop_window`, torchvision's
    ``RandomResizedCrop`` rule) resized to ``size`` with :func:`resize`.

    TensorFlow's ``sample_distorted_bounding_box`` draws windows differently (100 tries, area
    and ratio both uniform); this follows torchvision's, the common recipe for ImageNet training.

    Args:
        image: ``[H, W, C]`` or ``[N, H, W, C]`` (each image of a batch draws its own window).
        size: ``(height, width)`` of the result.
        scale: The range of the window's area as a fraction of the image's.
        ratio: The range of the window's width / height.
        method: As :func:`resize`.
        antialias: As :func:`resize`.
        seed: As :func:`random_crop`.

    Returns:
        ``[height, width, C]`` float32 (the input dtype for ``method="nearest"``).

    Example:
        >>> image = np.random.default_rng(0).random((40, 60, 3), np.float32)
        >>> random_resized_crop(image, (8, 8), seed=3).shape
        (8, 8, 3)
    """
    op = "random_resized_crop"
    batch, single = as_images(image, op)
    height, width = size_pair(size, op)
    rng = generator_for(seed)
    crops = []
    for one in batch:
        top, left, crop_height, crop_width = random_resized_crop_window(
            one.shape, scale, ratio, rng)
        crops.append(resize(one[top:top + crop_height, left:left + crop_width],
                            (height, width), method=method, antialias=antialias))
    return restore(np.stack(crops), single)
