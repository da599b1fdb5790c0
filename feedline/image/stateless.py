"""tf.image's ``stateless_random_*`` operations, drawing exactly what TensorFlow draws.

Each takes a ``seed`` of two integers and draws from TensorFlow's stateless Philox stream
(:mod:`feedline.image._philox`): the same seed gives the same flip, factor or crop as
``tf.image.stateless_random_*`` on a CPU, bit for bit, whatever the parallelism or worker
count (the seed travels with the element). As in TensorFlow, a batch gets one factor (one
brightness delta, one crop offset) and per-image flips.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._philox import seed_pair, stateless_uniform, stateless_uniform_int32
from feedline.image._shape import as_images
from feedline.image.color import (
    _check_range,
    _max_delta,
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
)

Seed = Sequence[int] | np.ndarray
"""Two integers, shape ``[2]`` (tf.image's stateless seed)."""

_INT32_MAX = 2**31 - 1


def _flip(image: np.ndarray, seed: Seed, axis: int, op: str) -> np.ndarray:
    batch, single = as_images(image, op)
    pair = seed_pair(seed, op)
    if single:
        # TensorFlow: one draw; the image is mirrored when it is below 0.5.
        return np.flip(batch[0], axis=axis - 1).copy() if stateless_uniform(pair, [])[()] < 0.5 \
            else batch[0].copy()
    # A batch: one draw per image, mirrored where it rounds (half to even) to 1.
    flips = np.round(stateless_uniform(pair, [batch.shape[0]])) == 1
    out = batch.copy()
    out[flips] = np.flip(batch[flips], axis=axis)
    return out


def stateless_random_flip_left_right(image: np.ndarray, seed: Seed) -> np.ndarray:
    """Mirror left to right with probability 1/2, deterministically for ``seed``:
    ``tf.image.stateless_random_flip_left_right``.

    Args:
        image: One image ``[H, W, C]`` or a batch ``[N, H, W, C]`` (a coin per image).
        seed: Two integers.

    Returns:
        The image(s), flipped or not, a copy.

    Example:
        >>> image = np.arange(4).reshape(1, 4, 1)
        >>> stateless_random_flip_left_right(image, (0, 0)).ravel().tolist()
        [3, 2, 1, 0]
        >>> stateless_random_flip_left_right(image, (1, 0)).ravel().tolist()
        [0, 1, 2, 3]
    """
    return _flip(image, seed, 2, "stateless_random_flip_left_right")


def stateless_random_flip_up_down(image: np.ndarray, seed: Seed) -> np.ndarray:
    """Mirror top to bottom with probability 1/2, deterministically for ``seed``:
    ``tf.image.stateless_random_flip_up_down``.

    Example:
        >>> image = np.arange(3).reshape(3, 1, 1)
        >>> stateless_random_flip_up_down(image, (0, 0)).ravel().tolist()
        [2, 1, 0]
    """
    return _flip(image, seed, 1, "stateless_random_flip_up_down")


def stateless_random_brightness(image: np.ndarray, max_delta: float, seed: Seed) -> np.ndarray:
    """:func:`~feedline.image.adjust_brightness` by one delta drawn from
    ``[-max_delta, max_delta)``: ``tf.image.stateless_random_brightness``.

    Raises:
        InvalidArgumentError: ``max_delta`` is negative, or the seed is not two integers.

    Example:
        >>> stateless_random_brightness(np.full((1, 1, 1), 0.5, np.float32), 0.2, (1, 2))
        array([[[0.63762414]]], dtype=float32)
    """
    op = "stateless_random_brightness"
    bound = _max_delta(op, max_delta)
    delta = stateless_uniform(seed_pair(seed, op), [], -bound, bound)[()]
    return adjust_brightness(image, delta)


def stateless_random_contrast(image: np.ndarray, lower: float, upper: float,
                              seed: Seed) -> np.ndarray:
    """:func:`~feedline.image.adjust_contrast` by one factor drawn from ``[lower, upper)``:
    ``tf.image.stateless_random_contrast``.

    Raises:
        InvalidArgumentError: ``upper <= lower``, ``lower < 0``, or a bad seed.

    Example:
        >>> image = np.array([[[0.0], [1.0]]], np.float32)
        >>> stateless_random_contrast(image, 0.5, 1.5, (1, 2)).ravel().tolist()
        [-0.17203021049499512, 1.1720302104949951]
    """
    op = "stateless_random_contrast"
    low, high = _check_range(op, lower, upper)
    factor = stateless_uniform(seed_pair(seed, op), [], low, high)[()]
    return adjust_contrast(image, factor)


def stateless_random_saturation(image: np.ndarray, lower: float, upper: float,
                                seed: Seed) -> np.ndarray:
    """:func:`~feedline.image.adjust_saturation` by one factor drawn from ``[lower, upper)``:
    ``tf.image.stateless_random_saturation``.

    Example:
        >>> stateless_random_saturation(np.array([[[200, 100, 50]]], np.uint8), 0.5, 1.5,
        ...                             (1, 2)).tolist()
        [[[200, 66, 0]]]
    """
    op = "stateless_random_saturation"
    low, high = _check_range(op, lower, upper)
    factor = stateless_uniform(seed_pair(seed, op), [], low, high)[()]
    return adjust_saturation(image, factor)


def stateless_random_hue(image: np.ndarray, max_delta: float, seed: Seed) -> np.ndarray:
    """:func:`~feedline.image.adjust_hue` by one delta drawn from ``[-max_delta, max_delta)``:
    ``tf.image.stateless_random_hue``.

    Raises:
        InvalidArgumentError: ``max_delta`` is negative or above 0.5, or a bad seed.

    Example:
        >>> stateless_random_hue(np.array([[[200, 100, 50]]], np.uint8), 0.2, (1, 2)).tolist()
        [[[176, 200, 50]]]
    """
    op = "stateless_random_hue"
    bound = _max_delta(op, max_delta, 0.5)
    delta = stateless_uniform(seed_pair(seed, op), [], -bound, bound)[()]
    return adjust_hue(image, delta)


def stateless_random_crop(value: np.ndarray, size: Sequence[int], seed: Seed) -> np.ndarray:
    """A slice of ``size`` at an offset drawn from ``seed``: ``tf.image.stateless_random_crop``.

    As in TensorFlow, ``size`` has one entry per dimension of ``value`` (``(h, w, C)`` for
    an image, ``(N, h, w, C)`` for a batch: one offset for the whole batch).

    Raises:
        InvalidArgumentError: ``size`` has another rank than ``value`` or exceeds it.

    Example:
        >>> crop = stateless_random_crop(np.arange(25).reshape(5, 5, 1), (2, 3, 1), (1, 2))
        >>> crop[..., 0].tolist()
        [[2, 3, 4], [7, 8, 9]]
    """
    op = "stateless_random_crop"
    array = np.asarray(value)
    wanted = np.asarray(size, dtype=np.int64).reshape(-1)
    if len(wanted) != array.ndim:
        raise InvalidArgumentError(f"{op}: size {wanted.tolist()} must have one entry per "
                                   f"dimension of value {list(array.shape)}")
    shape = np.asarray(array.shape, np.int64)
    if np.any(wanted < 0) or np.any(shape < wanted):
        raise InvalidArgumentError(f"{op}: Need value.shape >= size, got shape "
                                   f"{shape.tolist()} and size {wanted.tolist()}")
    draws = stateless_uniform_int32(seed_pair(seed, op), [array.ndim], 0, _INT32_MAX)
    offsets = draws.astype(np.int64) % (shape - wanted + 1)
    window = tuple(slice(int(o), int(o + n)) for o, n in zip(offsets, wanted))
    return array[window].copy()
