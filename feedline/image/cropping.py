"""Crops and pads: ``crop_to_bounding_box``, ``pad_to_bounding_box``, ``central_crop``,
``resize_with_crop_or_pad``, ``random_crop``, and ``random_resized_crop_window``, the window
that :func:`~feedline.image.resize.random_resized_crop` draws (it resizes, so it lives there:
this module resamples nothing).

Crops return contiguous copies, not views: an element is a value, and a view would keep the
whole decoded image alive in a batch or a shuffle buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._random import Seed, generator_for
from feedline.image._shape import as_images, restore, size_pair


def _window(op: str, shape: tuple[int, ...], top: int, left: int, height: int,
            width: int) -> None:
    if top < 0 or left < 0:
        raise InvalidArgumentError(f"{op}: offsets must be >= 0; got offset_height={top}, "
                                   f"offset_width={left}")
    if height <= 0 or width <= 0:
        raise InvalidArgumentError(f"{op}: target size must be positive; got "
                                   f"target_height={height}, target_width={width}")
    if top + height > shape[0] or left + width > shape[1]:
        raise InvalidArgumentError(
            f"{op}: the box [offset_height={top}, offset_width={left}, target_height={height}, "
            f"target_width={width}] is not inside the image of shape {shape}")


def crop_to_bounding_box(image: np.ndarray, offset_height: int, offset_width: int,
                         target_height: int, target_width: int) -> np.ndarray:
    """The box with top-left corner ``(offset_height, offset_width)``, as
    ``tf.image.crop_to_bounding_box``.

    Args:
        image: ``[H, W, C]`` or ``[N, H, W, C]`` (every image of a batch gets the same box).
        offset_height: The box's top row.
        offset_width: The box's left column.
        target_height: The box's height.
        target_width: The box's width.

    Returns:
        ``[target_height, target_width, C]`` (or with the batch dimension), a copy.

    Raises:
        InvalidArgumentError: the box is empty or not inside the image.

    Example:
        >>> image = np.arange(12).reshape(3, 4, 1)
        >>> crop_to_bounding_box(image, 1, 2, 2, 2)[..., 0].tolist()
        [[6, 7], [10, 11]]
    """
    op = "crop_to_bounding_box"
    batch, single = as_images(image, op)
    top, left, height, width = (int(value) for value in (offset_height, offset_width,
                                                         target_height, target_width))
    _window(op, batch.shape[1:], top, left, height, width)
    return restore(np.ascontiguousarray(batch[:, top:top + height, left:left + width]), single)


def pad_to_bounding_box(image: np.ndarray, offset_height: int, offset_width: int,
                        target_height: int, target_width: int) -> np.ndarray:
    """Place the image at ``(offset_height, offset_width)`` in zeros of the target size, as
    ``tf.image.pad_to_bounding_box``.

    Args:
        image: ``[H, W, C]`` or ``[N, H, W, C]``.
        offset_height: Rows of zeros above.
        offset_width: Columns of zeros to the left.
        target_height: The result's height, at least ``offset_height + H``.
        target_width: The result's width, at least ``offset_width + W``.

    Returns:
        ``[target_height, target_width, C]``, the image's dtype.

    Raises:
        InvalidArgumentError: a negative offset or a target too small for the image.

    Example:
        >>> pad_to_bounding_box(np.ones((1, 2, 1), np.uint8), 1, 0, 2, 3)[..., 0].tolist()
        [[0, 0, 0], [1, 1, 0]]
    """
    op = "pad_to_bounding_box"
    batch, single = as_images(image, op)
    top, left, height, width = (int(value) for value in (offset_height, offset_width,
                                                         target_height, target_width))
    if top < 0 or left < 0:
        raise InvalidArgumentError(f"{op}: offsets must be >= 0; got offset_height={top}, "
                                   f"offset_width={left}")
    if top + batch.shape[1] > height or left + batch.shape[2] > width:
        raise InvalidArgumentError(
            f"{op}: an image of shape {np.shape(image)} at offset ({top}, {left}) does not fit "
            f"in target_height={height}, target_width={width}")
    out = np.zeros((batch.shape[0], height, width, batch.shape[3]), batch.dtype)
    out[:, top:top + batch.shape[1], left:left + batch.shape[2]] = batch
    return restore(out, single)


def central_crop(image: np.ndarray, central_fraction: float) -> np.ndarray:
    """The central ``central_fraction`` of each side, as ``tf.image.central_crop``.

    Args:
        image: ``[H, W, C]`` or ``[N, H, W, C]``.
        central_fraction: In ``(0, 1]``; the crop starts at
            ``int((side - side * central_fraction) / 2)`` and is symmetric, as TensorFlow's.

    Returns:
        The crop, a copy (the image itself for 1.0).

    Raises:
        InvalidArgumentError: ``central_fraction`` outside ``(0, 1]``.

    Example:
        >>> central_crop(np.arange(16).reshape(4, 4, 1), 0.5)[..., 0].tolist()
        [[5, 6], [9, 10]]
    """
    op = "central_crop"
    if not 0.0 < central_fraction <= 1.0:
        raise InvalidArgumentError(f"{op}: central_fraction must be within (0, 1]; got "
                                   f"{central_fraction}")
    batch, single = as_images(image, op)
    if central_fraction == 1.0:
        return np.asarray(image)
    height, width = batch.shape[1:3]
    top = int((height - height * central_fraction) / 2)
    left = int((width - width * central_fraction) / 2)
    return restore(np.ascontiguousarray(batch[:, top:height - top, left:width - left]), single)


def resize_with_crop_or_pad(image: np.ndarray, target_height: int,
                            target_width: int) -> np.ndarray:
    """Centrally crop or zero-pad each side to the target size, as
    ``tf.image.resize_with_crop_or_pad``.

    Args:
        image: ``[H, W, C]`` or ``[N, H, W, C]``.
        target_height: The result's height.
        target_width: The result's width.

    Returns:
        ``[target_height, target_width, C]``, the image's dtype.

    Example:
        >>> resize_with_crop_or_pad(np.ones((1, 4, 1), np.uint8), 3, 2)[..., 0].tolist()
        [[0, 0], [1, 1], [0, 0]]
    """
    op = "resize_with_crop_or_pad"
    batch, single = as_images(image, op)
    target_height, target_width = size_pair((target_height, target_width), op)
    if target_height == 0 or target_width == 0:
        raise InvalidArgumentError(f"{op}: target size must be positive; got "
                                   f"{(target_height, target_width)}")
    height, width = batch.shape[1:3]
    cropped = crop_to_bounding_box(batch, max((height - target_height) // 2, 0),
                                   max((width - target_width) // 2, 0),
                                   min(target_height, height), min(target_width, width))
    return restore(pad_to_bounding_box(cropped, max((target_height - height) // 2, 0),
                                       max((target_width - width) // 2, 0), target_height,
                                       target_width), single)


def random_crop(image: np.ndarray, size: Sequence[int], seed: Seed = None) -> np.ndarray:
    """A crop of ``size`` at a uniformly random position, as ``tf.image.random_crop`` /
    ``stateless_random_crop``.

    Unlike TensorFlow (which crops a 4-D tensor at one offset), each image of a batch gets its
    own offset, drawn in order from one generator.

    Args:
        image: ``[H, W, C]`` or ``[N, H, W, C]``.
        size: ``(height, width)``; TensorFlow's full-rank form (``(height, width, C)`` or
            ``(N, height, width, C)``) is accepted when its other entries equal the image's.
        seed: An int, a pair of ints, a NumPy generator or None (see
            :func:`feedline.image._random.generator_for`); equal seeds make equal crops.

    Returns:
        The crops, copies.

    Raises:
        InvalidArgumentError: ``size`` larger than the image or of the wrong length.

    Example:
        >>> image = np.arange(25).reshape(5, 5, 1)
        >>> crop = random_crop(image, (2, 3), seed=7)
        >>> crop.shape, bool((crop == random_crop(image, (2, 3), seed=7)).all())
        ((2, 3, 1), True)
    """
    op = "random_crop"
    batch, single = as_images(image, op)
    height, width = _crop_size(op, batch.shape, single, size)
    rng = generator_for(seed)
    out = np.empty((batch.shape[0], height, width, batch.shape[3]), batch.dtype)
    for index, one in enumerate(batch):
        # Offsets uniform on [0, side - size], as stateless_random_crop draws them.
        top = int(rng.integers(0, one.shape[0] - height + 1))
        left = int(rng.integers(0, one.shape[1] - width + 1))
        out[index] = one[top:top + height, left:left + width]
    return restore(out, single)


def _crop_size(op: str, shape: tuple[int, ...], single: bool,
               size: Sequence[int]) -> tuple[int, int]:
    values = [int(value) for value in np.asarray(size).reshape(-1)]
    full = list(shape[1:]) if single else list(shape)
    if len(values) == len(full) and len(values) > 2:
        # TensorFlow's full-rank size: the entries other than height and width must match.
        offset = 0 if single else 1
        others = values[:offset] + values[offset + 2:]
        if others != full[:offset] + full[offset + 2:]:
            raise InvalidArgumentError(f"{op}: size {tuple(values)} must keep the image's "
                                       f"batch and channel sizes, shape {shape}")
        values = values[offset:offset + 2]
    if len(values) != 2:
        raise InvalidArgumentError(f"{op}: size is (height, width); got {tuple(size)} for "
                                   f"shape {shape}")
    height, width = values
    if not (0 < height <= shape[1] and 0 < width <= shape[2]):
        raise InvalidArgumentError(f"{op}: crop size ({height}, {width}) must be positive and "
                                   f"fit in the image of shape {shape}")
    return height, width


def random_resized_crop_window(image_shape: Sequence[int],
                               scale: tuple[float, float] = (0.08, 1.0),
                               ratio: tuple[float, float] = (3 / 4, 4 / 3),
                               seed: Seed = None) -> tuple[int, int, int, int]:
    """The window ``(y, x, height, width)`` that :func:`random_resized_crop` crops: torchvision's
    ``RandomResizedCrop.get_params``.

    Up to 10 tries draw an area fraction uniformly from ``scale`` and an aspect ratio
    (width / height) log-uniformly from ``ratio``; the first window that fits is placed
    uniformly. If none fits, the central crop of the whole image clamped to ``ratio``.
    Drawing the window alone lets a pipeline decode only it: ``decode_and_crop_jpeg(data,
    random_resized_crop_window(extract_jpeg_shape(data), seed=s))``.

    Args:
        image_shape: ``(height, width, ...)`` of the image.
        scale: The range of the window's area as a fraction of the image's.
        ratio: The range of the window's width / height.
        seed: As :func:`random_crop`.

    Returns:
        ``(y, x, height, width)`` inside the image.

    Raises:
        InvalidArgumentError: an empty image or bad ranges.

    Example:
        >>> y, x, h, w = random_resized_crop_window((100, 200, 3), seed=1)
        >>> 0 <= y and y + h <= 100 and 0 <= x and x + w <= 200
        True
    """
    op = "random_resized_crop_window"
    height, width = (int(value) for value in tuple(image_shape)[:2])
    if height <= 0 or width <= 0:
        raise InvalidArgumentError(f"{op}: the image is empty, shape {tuple(image_shape)}")
    if not (0 < scale[0] <= scale[1]) or not (0 < ratio[0] <= ratio[1]):
        raise InvalidArgumentError(f"{op}: scale and ratio are increasing positive ranges; got "
                                   f"scale={scale}, ratio={ratio}")
    return _draw_window(height, width, scale, ratio, generator_for(seed))


def _draw_window(height: int, width: int, scale: tuple[float, float],
                 ratio: tuple[float, float], rng: np.random.Generator
                 ) -> tuple[int, int, int, int]:
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        crop_width = int(round(math.sqrt(target_area * aspect)))
        crop_height = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_width <= width and 0 < crop_height <= height:
            top = int(rng.integers(0, height - crop_height + 1))
            left = int(rng.integers(0, width - crop_width + 1))
            return top, left, crop_height, crop_width
    in_ratio = width / height
    if in_ratio < min(ratio):
        crop_width, crop_height = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        crop_height, crop_width = height, int(round(height * max(ratio)))
    else:
        crop_width, crop_height = width, height
    crop_height, crop_width = max(min(crop_height, height), 1), max(min(crop_width, width), 1)
    return (height - crop_height) // 2, (width - crop_width) // 2, crop_height, crop_width
